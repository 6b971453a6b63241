// Package memory owns how a Tally process's Go runtime paces collections
// and gives memory back (-memory-limit, -gc-pacing, -gc-min-headroom,
// -gc-idle-release), so that RSS — what an operator plans capacity on —
// stays close to the live heap, and the metrics that show both. The server
// and `tally import`, which build the same tables, both use it.
//
// Why (figures in docs/, from bench/memory): the engine's tables are most
// of the live heap and pointer-free, so a collection costs what the small
// pointerful rest costs to mark, whatever the tables' size. Go's default
// pacing (GOGC=100) lets the heap grow by the whole live heap between
// collections, and the scavenger keeps that much mapped, so under load RSS
// runs at about twice the live heap. What sits between RSS and the heap is
// free heap the runtime keeps, not fragmentation nor runtime metadata. So
// the fix is in the pacing: the heap may grow between collections by GOGC%
// of what the GC has to scan, not of what it holds.
package memory

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Pacing modes of -gc-pacing.
const (
	pacingScan = "scan"
	pacingHeap = "heap"
)

// defaultMinHeadroom is -gc-min-headroom's default: each halving of it
// roughly doubles the GC's CPU for a little less RSS under load
// (bench/memory; the trade-off's figures are in docs/). A heap under four
// times it gets a sixth of its live heap (scanPercent).
const defaultMinHeadroom = 16 << 20

// minMemoryLimit is the smallest -memory-limit accepted: below it the GC
// would run continuously on any real data set.
const minMemoryLimit = 64 << 20

// Settings are the flags of the runtime's memory, for serve and import.
type Settings struct {
	limit       byteSize // -memory-limit; 0: none
	limitGiven  bool
	pacing      string
	minHeadroom byteSize
	idleRelease time.Duration // -gc-idle-release; 0: off
}

func (m *Settings) Register(fs *flag.FlagSet) {
	m.pacing = pacingScan
	m.minHeadroom = defaultMinHeadroom
	fs.Var(&limitFlag{m}, "memory-limit", "soft limit on the Go runtime's memory (heap, stacks, runtime metadata), e.g. 3GiB: the GC works harder and the runtime returns free memory to stay under it; a backstop below a container's limit, not a cap on the data (off: none; default: GOMEMLIMIT when set, else none). At least 64MiB and three times -memory-budget")
	fs.StringVar(&m.pacing, "gc-pacing", pacingScan, "how far the heap may grow between collections: scan (by GOGC% of what the GC scans — pointerful objects, stacks, globals — and at least -gc-min-headroom: the big pointer-free tables cost nothing to collect, so they get no headroom) or heap (by GOGC% of the whole live heap, Go's default, which keeps up to twice the live heap in RSS)")
	fs.Var(&m.minHeadroom, "gc-min-headroom", "with -gc-pacing scan: the least the heap may grow between collections, e.g. 32MiB (at least 4MiB; more headroom, fewer collections, more RSS); a heap under six times it gets a sixth of its live heap instead (times GOGC/100), at least 3MiB")
	fs.DurationVar(&m.idleRelease, "gc-idle-release", defaultIdleRelease, "how often to check whether the process went quiet (over the interval it allocated less than a quarter of the heap memory it could give back — free heap plus what it allocated since the last collection — and that is at least 4MiB); when it has, collect and return the free heap to the OS, so an idle server's RSS comes down to its live heap (0: never; the runtime then keeps the pacing's headroom)")
}

// limitFlag records that -memory-limit was given, so that GOMEMLIMIT is
// left alone when it was not.
type limitFlag struct{ m *Settings }

func (f *limitFlag) String() string {
	if f.m == nil || f.m.limit == 0 {
		return "off"
	}
	return f.m.limit.String()
}

func (f *limitFlag) Set(s string) error {
	if strings.EqualFold(strings.TrimSpace(s), "off") {
		f.m.limit, f.m.limitGiven = 0, true
		return nil
	}
	if err := f.m.limit.Set(s); err != nil {
		return err
	}
	f.m.limitGiven = true
	return nil
}

// Check validates the settings against each other and against
// -memory-budget, which bounds the post table and, separately, the like
// and the favorite sets: a limit below what those three tables may hold
// could never be kept and would have the GC run without end.
func (m *Settings) Check(budget int64) error {
	switch m.pacing {
	case pacingScan, pacingHeap:
	default:
		return fmt.Errorf("-gc-pacing must be scan or heap, not %q", m.pacing)
	}
	if m.idleRelease < 0 {
		return fmt.Errorf("-gc-idle-release %s is negative (0 turns it off)", m.idleRelease)
	}
	if m.minHeadroom < 4<<20 {
		return fmt.Errorf("-gc-min-headroom %s is below 4MiB: collections would come after every few allocations", m.minHeadroom)
	}
	if !m.limitGiven || m.limit == 0 {
		return nil
	}
	if m.limit < minMemoryLimit {
		return fmt.Errorf("-memory-limit %s is below 64MiB: the GC would run continuously", m.limit)
	}
	if budget > 0 && int64(m.limit) < 3*budget {
		return fmt.Errorf("-memory-limit %s is below three times -memory-budget (%s for the post table, as much for the like set and for the favorite set): the tables alone may hold more than the limit", m.limit, byteSize(budget))
	}
	return nil
}

// Apply sets the memory limit and starts the pacer; restore undoes both
// (tests run several servers in one process).
func (m *Settings) Apply() (restore func()) {
	prevLimit := debug.SetMemoryLimit(-1)
	if m.limitGiven {
		limit := int64(m.limit)
		if limit == 0 {
			limit = math.MaxInt64
		}
		if v := os.Getenv("GOMEMLIMIT"); v != "" {
			slog.Info("-memory-limit overrides GOMEMLIMIT", "memory_limit", m.limit.String(), "GOMEMLIMIT", v)
		}
		debug.SetMemoryLimit(limit)
	}
	stopPacer := func() {}
	if m.pacing == pacingScan {
		stopPacer = startScanPacer(uint64(m.minHeadroom))
	}
	stopRelease := func() {}
	if m.idleRelease > 0 {
		stopRelease = startIdleRelease(m.idleRelease)
	}
	return func() {
		stopRelease()
		stopPacer()
		debug.SetMemoryLimit(prevLimit)
	}
}

// defaultIdleRelease is -gc-idle-release's default: a server that went
// quiet gives its free heap back within two of these.
const defaultIdleRelease = 10 * time.Second

// minIdleRelease is the least free heap worth a collection to return.
const minIdleRelease = 4 << 20

// idleReleases counts the process's idle releases (tally_gc_idle_releases_total).
var idleReleases atomic.Uint64

// shouldRelease decides, from what the process allocated over the last
// interval and the heap memory it could give back (the free heap the
// runtime keeps plus what was allocated since the last collection, most
// of it garbage by now), whether to collect and return it now. That
// memory is the pacing's headroom: it is kept because the next
// allocations would need it again. A process that allocated less than a
// quarter of it over a whole interval will not need it soon, and a
// collection costs what the GC scans (a few MiB: the big tables hold no
// pointers), so returning it is cheap; under load the allocations dwarf
// it and nothing is released.
func shouldRelease(allocated, reclaimable uint64) bool {
	return reclaimable >= minIdleRelease && allocated < reclaimable/4
}

// startIdleRelease checks every interval whether the process went quiet
// (shouldRelease) and then runs debug.FreeOSMemory, which collects and
// returns the free heap: once per quiet spell, since afterwards nothing
// is reclaimable until allocations resume. Without it an idle server
// keeps its last garbage until Go's periodic collection (2 min) and the
// free heap within the pacing's goal for good.
func startIdleRelease(every time.Duration) (stop func()) {
	samples := []metrics.Sample{
		{Name: "/gc/heap/allocs:bytes"},
		{Name: "/memory/classes/heap/free:bytes"},
		{Name: "/memory/classes/heap/objects:bytes"},
		{Name: mHeapLive},
	}
	read := func() (allocs, reclaimable uint64) {
		metrics.Read(samples)
		v := func(i int) uint64 { return samples[i].Value.Uint64() }
		reclaimable = v(1)
		if objects, live := v(2), v(3); objects > live {
			reclaimable += objects - live
		}
		return v(0), reclaimable
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		tick := time.NewTicker(every)
		defer tick.Stop()
		last, _ := read()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			allocs, reclaimable := read()
			if shouldRelease(allocs-last, reclaimable) {
				debug.FreeOSMemory()
				idleReleases.Add(1)
				allocs, _ = read()
			}
			last = allocs
		}
	}()
	return sync.OnceFunc(func() {
		close(done)
		<-finished
	})
}

// scanPacer sets GOGC after every collection so that the heap may grow by
// base% of the bytes the GC scans (at least minHeadroom) instead of base%
// of the live heap. It never goes above base, the operator's GOGC (100 by
// default), so a heap that is mostly pointers paces exactly as before.
type scanPacer struct {
	base        int
	minHeadroom uint64
	samples     []metrics.Sample
	stopped     atomic.Bool
	mu          sync.Mutex
	percent     int
}

const (
	mHeapLive    = "/gc/heap/live:bytes"
	mScanHeap    = "/gc/scan/heap:bytes"
	mScanStack   = "/gc/scan/stack:bytes"
	mScanGlobals = "/gc/scan/globals:bytes"
)

// pacers counts the servers of this process that asked for the pacer:
// GOGC is one per process, so one pacer runs while any of them does (the
// first one's -gc-min-headroom wins), and the operator's GOGC comes back
// when the last stops. A second pacer would read the first one's GOGC as
// its base and leave it behind (tests run many servers in one process).
var pacers struct {
	sync.Mutex
	n    int
	stop func()
}

// startScanPacer starts the process's pacer, or joins the running one.
// GOGC=off (or a negative GOGC) leaves collections off, as asked.
func startScanPacer(minHeadroom uint64) (stop func()) {
	pacers.Lock()
	defer pacers.Unlock()
	if pacers.n == 0 {
		pacers.stop = runScanPacer(minHeadroom)
	}
	pacers.n++
	return sync.OnceFunc(func() {
		pacers.Lock()
		defer pacers.Unlock()
		if pacers.n--; pacers.n == 0 {
			pacers.stop()
			pacers.stop = nil
		}
	})
}

func runScanPacer(minHeadroom uint64) (stop func()) {
	base := debug.SetGCPercent(100)
	debug.SetGCPercent(base)
	if base < 0 {
		return func() {}
	}
	p := &scanPacer{base: base, minHeadroom: minHeadroom, percent: base}
	for _, n := range []string{mHeapLive, mScanHeap, mScanStack, mScanGlobals} {
		p.samples = append(p.samples, metrics.Sample{Name: n})
	}
	p.adjust()
	p.arm()
	return func() {
		p.stopped.Store(true)
		p.mu.Lock()
		defer p.mu.Unlock()
		debug.SetGCPercent(p.base)
	}
}

// gcSentinel is garbage whose cleanup runs once per collection. It holds
// pointers so that it is never batched into the tiny allocator's blocks,
// whose cleanups would wait for their neighbours.
type gcSentinel struct{ _ [2]*byte }

// arm leaves a new sentinel to be collected: its cleanup adjusts GOGC to
// what the collection found and arms the next one.
func (p *scanPacer) arm() {
	if p.stopped.Load() {
		return
	}
	runtime.AddCleanup(new(gcSentinel), func(p *scanPacer) {
		p.adjust()
		p.arm()
	}, p)
}

// smallHeapShare and smallHeapFloor shape the headroom of a heap too
// small for -gc-min-headroom: a floor of a sixth of GOGC's headroom (but
// never below smallHeapFloor) instead. A fixed floor would let a heap of
// a few MiB more than double between collections, which is what RSS peaks
// at; a small heap is cheap to collect (what the GC scans is small too),
// so the more frequent collections cost little CPU.
const (
	smallHeapShare = 6
	smallHeapFloor = 3 << 20
)

// scanPercent returns the GOGC that gives a heap of live bytes, whose GC scans
// scan bytes of heap objects and stackGlobals of stacks and globals, a
// headroom of max(min(minHeadroom, max(live × base% / 6, 3 MiB)), scan ×
// base%). Go's
// goal is live + (live + stacks + globals) × GOGC/100.
func scanPercent(base int, minHeadroom, live, scanHeap, stackGlobals uint64) int {
	if base <= 0 {
		return base
	}
	scan := scanHeap + stackGlobals
	floor := min(minHeadroom, max(live*uint64(base)/100/smallHeapShare, smallHeapFloor))
	headroom := max(floor, scan*uint64(base)/100)
	total := live + stackGlobals
	if total == 0 {
		return base
	}
	pct := int(min(uint64(base), headroom*100/total))
	return max(pct, 1)
}

func (p *scanPacer) adjust() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped.Load() {
		return
	}
	metrics.Read(p.samples)
	v := func(i int) uint64 {
		if p.samples[i].Value.Kind() != metrics.KindUint64 {
			return 0
		}
		return p.samples[i].Value.Uint64()
	}
	pct := scanPercent(p.base, p.minHeadroom, v(0), v(1), v(2)+v(3))
	// SetGCPercent takes the heap lock and recomputes the pacing: only
	// worth it when the goal moves by a tenth or more.
	if d := pct - p.percent; d*10 >= p.percent || -d*10 >= p.percent {
		debug.SetGCPercent(pct)
		p.percent = pct
	}
}

// RegisterMetrics adds what an operator needs beside
// process_resident_memory_bytes (the process collector's RSS) to see where
// memory goes: the live heap as of the last collection (steady between
// collections, unlike go_memstats_heap_alloc_bytes), what the GC scans,
// the free heap kept mapped, and the CPU collections cost.
func RegisterMetrics(reg prometheus.Registerer) {
	names := []string{mHeapLive, mScanHeap, mScanStack, mScanGlobals, "/memory/classes/heap/free:bytes", "/cpu/classes/gc/total:cpu-seconds", "/cpu/classes/gc/mark/idle:cpu-seconds"}
	var mu sync.Mutex
	samples := make([]metrics.Sample, len(names))
	for i, n := range names {
		samples[i].Name = n
	}
	read := func(i int) float64 {
		mu.Lock()
		defer mu.Unlock()
		metrics.Read(samples)
		switch samples[i].Value.Kind() {
		case metrics.KindUint64:
			return float64(samples[i].Value.Uint64())
		case metrics.KindFloat64:
			return samples[i].Value.Float64()
		}
		return 0
	}
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tally_heap_live_bytes",
			Help: "Live heap as of the last collection (runtime/metrics /gc/heap/live:bytes); compare with process_resident_memory_bytes, which is what the process holds."},
			func() float64 { return read(0) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tally_gc_scan_bytes",
			Help: "Bytes the GC scans each cycle: pointerful heap, stacks and globals (the pointer-free tables cost nothing to scan); -gc-pacing scan sizes the heap's headroom by it."},
			func() float64 { return read(1) + read(2) + read(3) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tally_heap_free_kept_bytes",
			Help: "Free heap the runtime keeps mapped (not yet returned to the OS): counted in RSS, not in the live heap."},
			func() float64 { return read(4) }),
		// Idle marking runs on cores nothing else wanted: it is not what
		// the pacing costs the requests, so it is left out.
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tally_gc_idle_releases_total",
			Help: "Times the process went quiet and returned its free heap to the OS (-gc-idle-release)."},
			func() float64 { return float64(idleReleases.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tally_gc_cpu_seconds_total",
			Help: "CPU time the GC took from the program (runtime/metrics /cpu/classes/gc/total minus /cpu/classes/gc/mark/idle, an estimate): what the GC pacing costs."},
			func() float64 { return read(5) - read(6) }),
	)
}

// byteSize is a flag of bytes: a plain number, or one with a unit (KB,
// MB, GB, TB in powers of 1000; KiB, MiB, GiB, TiB in powers of 1024; B).
type byteSize int64

var byteUnits = []struct {
	name string
	mult int64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"B", 1},
}

func (b *byteSize) Set(s string) error {
	n, err := parseByteSize(s)
	if err != nil {
		return err
	}
	*b = byteSize(n)
	return nil
}

// String writes b in the largest binary unit that divides it.
func (b byteSize) String() string {
	for i := 3; i >= 0 && b != 0; i-- {
		if u := byteUnits[i]; int64(b)%u.mult == 0 {
			return strconv.FormatInt(int64(b)/u.mult, 10) + u.name
		}
	}
	return strconv.FormatInt(int64(b), 10)
}

func parseByteSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range byteUnits {
		if len(t) > len(u.name) && strings.EqualFold(t[len(t)-len(u.name):], u.name) {
			t, mult = strings.TrimSpace(t[:len(t)-len(u.name)]), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil {
		var ne *strconv.NumError
		if errors.As(err, &ne) && errors.Is(ne.Err, strconv.ErrRange) {
			return 0, fmt.Errorf("%q is too large", s)
		}
		return 0, fmt.Errorf("%q is not a size in bytes (e.g. 512MiB, 2GiB, 1500000000)", s)
	}
	if n < 0 {
		return 0, fmt.Errorf("%q is negative", s)
	}
	if n > math.MaxInt64/mult {
		return 0, fmt.Errorf("%q is too large", s)
	}
	return n * mult, nil
}
