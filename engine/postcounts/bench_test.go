package postcounts

import (
	"bytes"
	"iter"
	"math/rand/v2"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/tally-dev/tally/bench/benchutil"
	"github.com/tally-dev/tally/bench/countertable"
	"github.com/tally-dev/tally/bench/datagen"
	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/snowflake"
)

// The benchmarks measure the store against countertable.Table (the open
// table it replaced, kept in bench/) on the same data, in the same run:
//
//	go test ./engine/postcounts -run '^$' -bench Memory -benchtime 1x
//	go test ./engine/postcounts -run '^$' -bench GetPage
//	go test ./engine/postcounts -run '^$' -bench GCLatency -benchtime 1x -timeout 60m
//
// Data: bench/datagen with N = benchN (TALLY_BENCH_N, default 1M), seed
// 1 and its defaults (ids uniform over the 365 days before 2025-01-01,
// 60% of posts all zero, long-tailed counts), day windows, the clock at
// the end of the data set (2025-01-01): with the default policy the last
// 7 days are open tables and the rest sealed.

// dataset yields the n posts of the benchmark data set, zero posts
// included.
func dataset(n int) iter.Seq2[uint64, engine.Counts] {
	return func(yield func(uint64, engine.Counts) bool) {
		g := datagen.New(datagen.Config{N: n, Seed: 1})
		for {
			id, c, ok := g.Next()
			if !ok || !yield(id, c) {
				return
			}
		}
	}
}

// benchEnd is the clock of the benchmarks: the end of the data set.
func benchEnd() time.Time { return datagen.DefaultEnd }

// policies are the stores the benchmarks compare.
func policy(b testing.TB, name string) Options {
	o := Options{Now: benchEnd}
	switch name {
	case "open": // every window an open table
		o.OpenAge = 10 * 365 * 24 * time.Hour
	case "sealed": // every window sealed
		o.OpenAge = -1
	case "default": // the last 7 days open, the rest sealed
	case "cold": // the last 7 days open, the rest in files
		o.ColdAge = time.Nanosecond
		o.Dir = b.TempDir()
	default:
		b.Fatalf("no policy %q", name)
	}
	return o
}

// load imports the first n posts of the data set into a new store and
// runs its maintenance at the clock's time.
func load(b testing.TB, opts Options, n int) *Store {
	s, err := New(opts)
	if err != nil {
		b.Fatal(err)
	}
	if err := s.Import(dataset(n)); err != nil {
		b.Fatal(err)
	}
	if err := s.Maintain(benchEnd()); err != nil {
		b.Fatal(err)
	}
	return s
}

func loadCounters(n int) *countertable.Table {
	t := countertable.New(0)
	for id, c := range dataset(n) {
		if !c.IsZero() {
			t.Set(id, c)
		}
	}
	return t
}

// BenchmarkMemory reports, for each policy, the bytes per stored
// (non-zero) post and per post overall (zeros included), from the
// store's MemoryBytes and from the live Go heap after GC; and the same
// for countertable.Table holding the same posts, measured in the same
// sub-benchmark. The cold policy's heap figures leave out the block
// cache, a fixed budget (Options.ColdCacheBytes).
func BenchmarkMemory(b *testing.B) {
	for _, name := range []string{"open", "sealed", "default", "cold"} {
		b.Run(name, func(b *testing.B) {
			var s *Store
			var heap, peerHeap uint64
			var peerMem int
			for b.Loop() {
				h0 := benchutil.LiveHeap()
				t := loadCounters(benchN)
				peerHeap = benchutil.LiveHeap() - h0
				peerMem = t.MemoryBytes()
				runtime.KeepAlive(t)
				t = nil
				h1 := benchutil.LiveHeap()
				s = load(b, policy(b, name), benchN)
				heap = benchutil.LiveHeap() - h1
			}
			st := s.Stats()
			mem := st.MemoryBytes
			if name == "cold" {
				heap -= uint64(st.CacheBytes)
				mem -= st.CacheBytes
				b.ReportMetric(float64(st.ColdFileBytes)/float64(s.Len()), "disk-B/stored-post")
			}
			stored, all := float64(s.Len()), float64(benchN)
			b.ReportMetric(float64(mem)/stored, "B/stored-post")
			b.ReportMetric(float64(heap)/stored, "heap-B/stored-post")
			b.ReportMetric(float64(mem)/all, "B/post")
			b.ReportMetric(float64(heap)/all, "heap-B/post")
			b.ReportMetric(float64(peerHeap)/stored, "counters-heap-B/stored-post")
			b.ReportMetric(float64(peerMem)/stored, "counters-B/stored-post")
			b.ReportMetric(float64(heap)/float64(peerHeap), "heap/counters")
			if st.OpenPosts > 0 {
				b.ReportMetric(float64(st.OpenBytes)/float64(st.OpenPosts), "open-B/open-post")
				b.ReportMetric(100*float64(st.OverflowPosts)/float64(st.OpenPosts+st.DeltaPosts), "overflow-%")
			}
			if st.SealedPosts > 0 {
				b.ReportMetric(float64(st.SealedBytes)/float64(st.SealedPosts), "sealed-B/sealed-post")
			}
			s.Close()
		})
	}
}

// pageSet are 50-post pages, each from one day window (a feed page's
// posts are close in time), ids drawn from all of that day's posts,
// zero posts included, in random order.
type pageSet [][50]uint64

// dayIDs returns the ids of the data set grouped by UTC day, oldest day
// first.
func dayIDs(n int) [][]uint64 {
	var days [][]uint64
	last := int64(-1)
	for id := range dataset(n) {
		d := snowflake.Millis(id) / 86_400_000
		if d != last {
			days = append(days, nil)
			last = d
		}
		days[len(days)-1] = append(days[len(days)-1], id)
	}
	return days
}

func makePages(days [][]uint64, count int, seed uint64) pageSet {
	rng := rand.New(rand.NewPCG(seed, 5))
	ps := make(pageSet, count)
	for i := range ps {
		d := days[rng.IntN(len(days))]
		for j := range ps[i] {
			ps[i][j] = d[rng.IntN(len(d))]
		}
	}
	return ps
}

type pageBench struct {
	hot, old   pageSet // pages of the open days, of the sealed days
	all        pageSet // pages of any day
	mem        *Store  // the default policy
	cold       *Store  // the sealed windows in files, block cache on
	coldNoCach *Store  // the same files, no cache: every block a pread
	peer       *countertable.Table
}

var (
	pbOnce sync.Once
	pb     *pageBench
	pbDir  string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if pbDir != "" {
		os.RemoveAll(pbDir)
	}
	os.Exit(code)
}

func pageData(b *testing.B) *pageBench {
	pbOnce.Do(func() {
		p := &pageBench{}
		days := dayIDs(benchN)
		const nPages = 4096
		p.hot = makePages(days[len(days)-7:], nPages, 1)
		p.old = makePages(days[:len(days)-7], nPages, 2)
		p.all = makePages(days, nPages, 3)
		p.mem = load(b, policy(b, "default"), benchN)
		var err error
		if pbDir, err = os.MkdirTemp("", "postcounts-bench-"); err != nil {
			b.Fatal(err)
		}
		o := policy(b, "cold")
		o.Dir = pbDir
		p.cold = load(b, o, benchN)
		// The same state and files, in a store without a cold tier of its
		// own: its files get no cache.
		var buf bytes.Buffer
		if _, err := p.cold.WriteTo(&buf); err != nil {
			b.Fatal(err)
		}
		p.coldNoCach, _ = New(Options{Now: benchEnd})
		if err := p.coldNoCach.Load(&buf, pbDir); err != nil {
			b.Fatal(err)
		}
		p.peer = loadCounters(benchN)
		pb = p
	})
	if pb == nil {
		b.Fatal("page data set failed to build")
	}
	return pb
}

// BenchmarkGetPage reads 50-post pages with GetMany: ns/op is one page
// (wall), cpu-ns/page the benchmark thread's CPU time. The -vs-counters
// variants interleave the store and countertable.Table page by page on the
// same pages, so that both see the same machine, and report the ratio.
// cold-miss reads every block with a pread served by the OS page cache
// (engine/cold's BenchmarkGetPage measures the device).
func BenchmarkGetPage(b *testing.B) {
	p := pageData(b)
	cases := []struct {
		name  string
		s     *Store
		pages pageSet
		warm  bool
	}{
		{"hot", p.mem, p.hot, false},
		{"sealed", p.mem, p.old, false},
		{"any-day", p.mem, p.all, false},
		{"cold-hit", p.cold, p.old, true},
		{"cold-miss", p.coldNoCach, p.old, false},
	}
	for _, c := range cases {
		if c.warm {
			var out [50]engine.Counts
			for i := range c.pages {
				c.s.GetMany(c.pages[i][:], out[:])
			}
		}
		b.Run(c.name, func(b *testing.B) {
			pageLoop(b, c.pages, c.s.GetMany)
			if err := c.s.Err(); err != nil {
				b.Fatal(err)
			}
		})
		b.Run(c.name+"-vs-counters", func(b *testing.B) {
			versus(b, c.pages, c.s.GetMany, p.peer.GetMany)
		})
	}
	b.Run("counters", func(b *testing.B) { pageLoop(b, p.old, p.peer.GetMany) })
	// The store's own cost over the sealed windows it reads: the same
	// pages read straight from each page's sealed.Window.
	b.Run("sealed-vs-window", func(b *testing.B) {
		versusNamed(b, p.old, p.mem.GetMany, func(ids []uint64, out []engine.Counts) {
			p.mem.wins[p.mem.find(ids[0])].sealed.GetMany(ids, out)
		}, "window")
	})
}

func pageLoop(b *testing.B, pages pageSet, get func([]uint64, []engine.Counts)) {
	lockThread()
	defer unlockThread()
	var out [50]engine.Counts
	c0 := threadCPU()
	i := 0
	for b.Loop() {
		get(pages[i%len(pages)][:], out[:])
		i++
	}
	b.ReportMetric(float64((threadCPU()-c0).Nanoseconds())/float64(i), "cpu-ns/page")
}

func versus(b *testing.B, pages pageSet, get, peer func([]uint64, []engine.Counts)) {
	versusNamed(b, pages, get, peer, "counters")
}

func versusNamed(b *testing.B, pages pageSet, get, peer func([]uint64, []engine.Counts), peerName string) {
	var out [50]engine.Counts
	// The peer reads other pages of the same set: on the same pages it
	// would find the lines the store just loaded when both read the same
	// data (sealed-vs-window).
	store, other := benchutil.Interleave(b,
		func(i int) { get(pages[i%len(pages)][:], out[:]) },
		func(i int) { peer(pages[(i+len(pages)/2)%len(pages)][:], out[:]) })
	b.ReportMetric(store, "cpu-ns/page")
	b.ReportMetric(other, peerName+"-cpu-ns/page")
	b.ReportMetric(store/other, "store/"+peerName)
}
