package postcounts

import (
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tally-dev/tally/bench/benchutil"
	"github.com/tally-dev/tally/engine"
)

// BenchmarkGCLatency measures what a large resident store costs the
// latency of reads while the rest of the program makes garbage: readers
// (gcReaders goroutines, each pausing gcPause between pages) read 50-post
// pages with GetMany under a sync.RWMutex read lock, as the engine does,
// while another goroutine
// allocates pointer-rich garbage at a fixed rate (gcGarbageMBps), for
// gcSeconds (TALLY_GC_SECONDS, default 8) in four rounds, each after a
// quiet phase half as long with no garbage and therefore no GC. It
// reports page latency percentiles with garbage, the quiet p99, and the
// GC's share of the CPU the process used (runtime/metrics
// /cpu/classes/gc/total over /cpu/classes/total minus idle), for each size
// in TALLY_GC_SIZES (default 1M and 10M posts); for the larger sizes, the
// ratios of their p99 and p999 to the smallest's, measured in the same
// run. Pages come from any day of the year, so most read sealed windows,
// and a page of a denser store touches more blocks: the quiet ratio is
// that cost, the p99/quiet-p99 ratio what the GC adds.
//
// The peer "map" holds the same posts in a map[uint64]*engine.Counts,
// the pointer-rich layout a first version would use: the GC must mark
// each of its posts every cycle. Set TALLY_GC_PEER=0 to skip it.
//
//	TALLY_GC_SIZES=1000000,10000000,100000000 go test ./engine/postcounts \
//	    -run '^$' -bench GCLatency -benchtime 1x -timeout 60m
func BenchmarkGCLatency(b *testing.B) {
	sizes := []int{1_000_000, 10_000_000}
	if env := os.Getenv("TALLY_GC_SIZES"); env != "" {
		sizes = nil
		for _, f := range strings.Split(env, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n <= 0 {
				b.Fatalf("TALLY_GC_SIZES: bad size %q", f)
			}
			sizes = append(sizes, n)
		}
	}
	kinds := []string{"postcounts", "map"}
	if os.Getenv("TALLY_GC_PEER") == "0" {
		kinds = kinds[:1]
	}
	first := map[string]gcResult{}
	for _, kind := range kinds {
		for i, n := range sizes {
			if kind == "map" && n > 10_000_000 {
				continue // a pointer per post: minutes to build, GBs of heap
			}
			b.Run(fmt.Sprintf("%s/N=%d", kind, n), func(b *testing.B) {
				var r gcResult
				for b.Loop() {
					r = gcRun(b, kind, n)
				}
				b.ReportMetric(r.p50.Seconds()*1e6, "p50-µs")
				b.ReportMetric(r.p99.Seconds()*1e6, "p99-µs")
				b.ReportMetric(r.p999.Seconds()*1e6, "p999-µs")
				b.ReportMetric(r.max.Seconds()*1e6, "max-µs")
				b.ReportMetric(r.quietP99.Seconds()*1e6, "quiet-p99-µs")
				b.ReportMetric(r.quietP999.Seconds()*1e6, "quiet-p999-µs")
				b.ReportMetric(float64(r.p99)/float64(r.quietP99), "p99/quiet-p99")
				b.ReportMetric(100*r.gcShare, "gc-cpu-%")
				b.ReportMetric(r.cycles, "gc-cycles/s")
				b.ReportMetric(float64(r.heap)/(1<<20), "live-heap-MiB")
				if i == 0 {
					first[kind] = r
				} else if f, ok := first[kind]; ok {
					b.ReportMetric(float64(r.p99)/float64(f.p99), "p99/smallest")
					b.ReportMetric(float64(r.p999)/float64(f.p999), "p999/smallest")
					b.ReportMetric(float64(r.quietP99)/float64(f.quietP99), "quiet-p99/smallest")
					// What the GC adds to the p99 at this size, relative to
					// what it adds at the smallest.
					b.ReportMetric(float64(r.p99)/float64(r.quietP99)/(float64(f.p99)/float64(f.quietP99)), "gc-p99-inflation/smallest")
				}
			})
		}
	}
}

const (
	gcReaders     = 4
	gcPause       = 100 * time.Microsecond
	gcGarbageMBps = 200
)

var gcSeconds = func() float64 {
	if s, err := strconv.ParseFloat(os.Getenv("TALLY_GC_SECONDS"), 64); err == nil && s > 0 {
		return s
	}
	return 8
}()

type gcResult struct {
	p50, p99, p999, max time.Duration
	quietP99, quietP999 time.Duration // with no garbage and no GC
	gcShare, cycles     float64
	heap                uint64
}

// node is garbage with pointers, so that marking it is work.
type node struct {
	next *node
	pad  [6]uint64
}

// gcRun loads n posts into a store of the given kind and measures reads
// under garbage collection.
func gcRun(b *testing.B, kind string, n int) gcResult {
	// A sample of the ids (zero posts included) to draw pages from: at
	// most 2M, in time order.
	every := max(1, n/2_000_000)
	var sample []uint64
	var get func(ids []uint64, out []engine.Counts)
	switch kind {
	case "postcounts":
		s, err := New(Options{Now: benchEnd})
		if err != nil {
			b.Fatal(err)
		}
		i := 0
		if err := s.Import(func(yield func(uint64, engine.Counts) bool) {
			for id, c := range dataset(n) {
				if i%every == 0 {
					sample = append(sample, id)
				}
				i++
				if !yield(id, c) {
					return
				}
			}
		}); err != nil {
			b.Fatal(err)
		}
		if err := s.Maintain(benchEnd()); err != nil {
			b.Fatal(err)
		}
		get = s.GetMany
	case "map":
		m := map[uint64]*engine.Counts{}
		i := 0
		for id, c := range dataset(n) {
			if i%every == 0 {
				sample = append(sample, id)
			}
			i++
			if !c.IsZero() {
				m[id] = &c
			}
		}
		get = func(ids []uint64, out []engine.Counts) {
			for i, id := range ids {
				if p := m[id]; p != nil {
					out[i] = *p
				} else {
					out[i] = engine.Counts{}
				}
			}
		}
	}
	heap := benchutil.LiveHeap()
	debug.FreeOSMemory() // no scavenging of the load's garbage during the phases
	r := gcResult{heap: heap}
	// Phases with no garbage (the readers allocate nothing, so no GC runs)
	// alternate with phases with garbage, so that drifts of a shared
	// machine touch both: the quiet phases show what the memory hierarchy
	// alone makes of a larger store, the ratio of the two what the GC adds.
	var quiet, loud latHist
	var gcSecs, usedSecs float64
	var cycles uint64
	const rounds = 4
	for range rounds {
		quiet.merge(gcPhase(get, sample, false, gcSeconds/rounds/2))
		var before, after gcCounters
		loud.merge(gcPhase(get, sample, true, gcSeconds/rounds, &before, &after))
		gcSecs += after.gc - before.gc
		usedSecs += (after.total - after.idle) - (before.total - before.idle)
		cycles += after.cycles - before.cycles
	}
	r.p50, r.p99, r.p999, r.max = loud.quantile(0.5), loud.quantile(0.99), loud.quantile(0.999), loud.max
	r.quietP99, r.quietP999 = quiet.quantile(0.99), quiet.quantile(0.999)
	r.gcShare = gcSecs / usedSecs
	r.cycles = float64(cycles) / gcSeconds
	runtime.KeepAlive(get)
	return r
}

// gcPhase runs the readers, and the garbage maker if garbage is set, for
// seconds, and returns the page latencies; gc, if given, receives the
// runtime's counters at the start and the end.
func gcPhase(get func([]uint64, []engine.Counts), sample []uint64, garbage bool, seconds float64, gc ...*gcCounters) *latHist {
	var (
		mu   sync.RWMutex
		stop atomic.Bool
		wg   sync.WaitGroup
		hist [gcReaders]latHist
	)
	// Pages of one day each, as in BenchmarkGetPage, from the whole year.
	perDay := max(50, len(sample)/365)
	for r := range gcReaders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(r), 11))
			var ids [50]uint64
			var out [50]engine.Counts
			for !stop.Load() {
				start := rng.IntN(len(sample) - perDay + 1)
				for j := range ids {
					ids[j] = sample[start+rng.IntN(perDay)]
				}
				t0 := time.Now()
				mu.RLock()
				get(ids[:], out[:])
				mu.RUnlock()
				hist[r].add(time.Since(t0))
				// Paced, not flat out: on two cores, readers that never
				// pause would measure waits for a core, not the GC.
				time.Sleep(gcPause)
			}
		}()
	}
	if garbage {
		wg.Add(1)
		go func() { // garbage at a fixed rate, with a small live set that churns
			defer wg.Done()
			const listLen = 1024
			perSec := gcGarbageMBps << 20 / (listLen * 64)
			ring := make([]*node, 64)
			t0 := time.Now()
			for i := 0; !stop.Load(); i++ {
				var head *node
				for range listLen {
					head = &node{next: head}
				}
				ring[i%len(ring)] = head
				if ahead := time.Duration(float64(i+1)/float64(perSec)*1e9) - time.Since(t0); ahead > 0 {
					time.Sleep(ahead)
				}
			}
			runtime.KeepAlive(ring)
		}()
	}
	if len(gc) == 2 {
		*gc[0] = readGC()
	}
	time.Sleep(time.Duration(seconds * float64(time.Second)))
	if len(gc) == 2 {
		*gc[1] = readGC()
	}
	stop.Store(true)
	wg.Wait()
	var all latHist
	for i := range hist {
		all.merge(&hist[i])
	}
	return &all
}

type gcCounters struct {
	gc, total, idle float64
	cycles          uint64
}

func readGC() gcCounters {
	s := []metrics.Sample{
		{Name: "/cpu/classes/gc/total:cpu-seconds"},
		{Name: "/cpu/classes/total:cpu-seconds"},
		{Name: "/cpu/classes/idle:cpu-seconds"},
		{Name: "/gc/cycles/total:gc-cycles"},
	}
	metrics.Read(s)
	return gcCounters{s[0].Value.Float64(), s[1].Value.Float64(), s[2].Value.Float64(), s[3].Value.Uint64()}
}

// latHist is a log-linear latency histogram: 32 buckets per power of two
// of nanoseconds (about 2% resolution), fixed size and pointer-free.
type latHist struct {
	counts [64 * 32]uint64
	n      uint64
	max    time.Duration
}

func (h *latHist) add(d time.Duration) {
	ns := uint64(max(d, 1))
	e := bits.Len64(ns) - 1
	var sub uint64
	if e >= 5 {
		sub = ns >> (e - 5) & 31
	} else {
		sub = ns << (5 - e) & 31
	}
	h.counts[e*32+int(sub)]++
	h.n++
	h.max = max(h.max, d)
}

func (h *latHist) merge(o *latHist) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.max = max(h.max, o.max)
}

// quantile returns the upper edge of the bucket holding quantile q.
func (h *latHist) quantile(q float64) time.Duration {
	want := uint64(math.Ceil(q * float64(h.n)))
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= want && c > 0 {
			e, sub := i/32, i%32
			return time.Duration(float64(uint64(1)<<e) * (1 + float64(sub+1)/32))
		}
	}
	return h.max
}

// TestLatHist checks the histogram the GC benchmark reports from.
func TestLatHist(t *testing.T) {
	var h latHist
	for i := 1; i <= 100000; i++ {
		h.add(time.Duration(i) * time.Microsecond)
	}
	for _, q := range []float64{0.5, 0.99, 0.999} {
		got, want := h.quantile(q), time.Duration(q*100000)*time.Microsecond
		if math.Abs(float64(got-want)) > 0.04*float64(want) {
			t.Fatalf("quantile %v = %v, want about %v", q, got, want)
		}
	}
}
