package registry

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/tally-dev/tally/bench/benchutil"
	"github.com/tally-dev/tally/bench/datagen"
	"github.com/tally-dev/tally/engine/snowflake"
	"github.com/tally-dev/tally/engine/table"
)

// Reproduce with
//
//	go test ./engine/registry -run '^$' -bench Memory -benchtime 1x  (memory)
//	go test ./engine/registry -run '^$' -bench GetPage               (pages)
//
// Data: the ids of bench/datagen with N = TALLY_BENCH_N (default 1M), seed
// 1 (uniform over the 365 days before 2025-01-01, 10-bit node, sequence
// below 16), every post registered (zero counts or not: the registry holds
// all posts), authors uniform over 10M users (a hash of the id), day
// windows, the clock at the end of the data set: with the default policy
// the last 7 days are open and the rest sealed. The "cold" policy moves
// every sealed window to a file (ColdAge 8 days) in a temporary directory
// (so on the machine's temp file system; the page cost of a cache miss is
// then a pread served by the OS page cache, not a device read).

const benchUsers = 10_000_000

func authorOf(id uint64) uint64 { return table.Mix64(id)%benchUsers + 1 }

func benchIDs(n int) []uint64 {
	ids := make([]uint64, 0, n)
	g := datagen.New(datagen.Config{N: n, Seed: 1})
	for {
		id, _, ok := g.Next()
		if !ok {
			return ids
		}
		ids = append(ids, id)
	}
}

func benchPolicy(b *testing.B, name string) Options {
	switch name {
	case "open":
		return Options{OpenAge: 10 * 365 * 24 * time.Hour}
	case "sealed":
		return Options{OpenAge: -1}
	case "cold", "cold-hit":
		return Options{Dir: b.TempDir(), ColdAge: 8 * 24 * time.Hour, ColdCacheBytes: 256 << 20}
	case "cold-miss":
		return Options{Dir: b.TempDir(), ColdAge: 8 * 24 * time.Hour, ColdCacheBytes: -1}
	}
	return Options{}
}

func loadBench(ids []uint64, opts Options) *Registry {
	r, err := New(opts)
	if err != nil {
		panic(err)
	}
	for _, id := range ids {
		r.Put(id, authorOf(id))
	}
	if err := r.Maintain(datagen.DefaultEnd); err != nil {
		panic(err)
	}
	return r
}

func loadPeer(ids []uint64) *table.Table[uint64, uint64] {
	t := table.New[uint64, uint64](table.Mix64, 0)
	for _, id := range ids {
		t.Put(id, authorOf(id))
	}
	return t
}

// BenchmarkMemory reports bytes per post from the Go heap after GC, for
// each policy and for engine/table's uint64→uint64 table (the registry's
// previous form) holding the same posts, measured in the same run.
func BenchmarkMemory(b *testing.B) {
	ids := benchIDs(benchutil.N())
	for _, name := range []string{"open", "default", "sealed", "cold"} {
		b.Run(name, func(b *testing.B) {
			var r *Registry
			var t *table.Table[uint64, uint64]
			var heap, peerHeap uint64
			for b.Loop() {
				if r != nil {
					r.Close()
				}
				h0 := benchutil.LiveHeap()
				r = loadBench(ids, benchPolicy(b, name))
				h1 := benchutil.LiveHeap()
				t = loadPeer(ids)
				h2 := benchutil.LiveHeap()
				heap, peerHeap = h1-h0, h2-h1
			}
			n := float64(r.Len())
			b.ReportMetric(float64(heap)/n, "heap-B/post")
			b.ReportMetric(float64(r.MemoryBytes())/n, "B/post")
			b.ReportMetric(float64(peerHeap)/n, "table-heap-B/post")
			b.ReportMetric(float64(heap)/float64(peerHeap), "heap/table")
			st := r.Stats()
			if st.SealedPosts > 0 {
				b.ReportMetric(float64(st.SealedBytes)/float64(st.SealedPosts), "sealed-B/sealed-post")
			}
			if st.ColdPosts > 0 {
				b.ReportMetric(float64(st.ColdIndexBytes)/float64(st.ColdPosts), "cold-mem-B/cold-post")
				b.ReportMetric(float64(st.ColdFileBytes)/float64(st.ColdPosts), "disk-B/cold-post")
			}
			benchKeep(r, t)
			r.Close()
		})
	}
}

var kept []any

func benchKeep(v ...any) { kept = append(kept[:0], v...) }

// BenchmarkGetPage reads the authors of a 50-post page (posts drawn from
// the whole year, or from the last 7 days: "hot") and compares with the
// table peer on other pages of the same set, interleaved on one thread.
// Policies: default (sealed in memory), cold-hit (sealed windows in files,
// a cache holding all their blocks, warmed) and cold-miss (no cache: every
// block of a page is read, a pread per run of adjacent blocks).
func BenchmarkGetPage(b *testing.B) {
	ids := benchIDs(benchutil.N())
	t := loadPeer(ids)
	rng := rand.New(rand.NewPCG(5, 6))
	hotFrom := datagen.DefaultEnd.Add(-7 * 24 * time.Hour).UnixMilli()
	var hot []uint64
	for _, id := range ids {
		if snowflake.Millis(id) >= hotFrom {
			hot = append(hot, id)
		}
	}
	pages := func(from []uint64) [][50]uint64 {
		ps := make([][50]uint64, 1024)
		for i := range ps {
			for j := range ps[i] {
				ps[i][j] = from[rng.IntN(len(from))]
			}
		}
		return ps
	}
	sets := []struct {
		name  string
		pages [][50]uint64
	}{{"year", pages(ids)}, {"hot", pages(hot)}}
	for _, policy := range []string{"default", "cold-hit", "cold-miss"} {
		r := loadBench(ids, benchPolicy(b, policy))
		prefix := ""
		if policy != "default" {
			prefix = policy + "/"
			var authors [50]uint64
			var found [50]bool
			for _, c := range sets { // warm the cache (and the OS's)
				for _, p := range c.pages {
					if err := r.GetMany(p[:], authors[:], found[:]); err != nil {
						b.Fatal(err)
					}
				}
			}
		}
		for _, c := range sets {
			var sink uint64
			b.Run(prefix+c.name, func(b *testing.B) {
				versusTable(b, t, c.pages, func(page []uint64) {
					for _, id := range page {
						a, _, _ := r.Get(id)
						sink += a
					}
				})
			})
			b.Run(prefix+c.name+"-many", func(b *testing.B) {
				var authors [50]uint64
				var found [50]bool
				versusTable(b, t, c.pages, func(page []uint64) { r.GetMany(page, authors[:], found[:]) })
			})
			benchKeep(sink)
		}
		r.Close()
	}
}

// versusTable reads pages with read and, interleaved on one thread, other
// pages of the same set from the table peer, and reports both.
func versusTable(b *testing.B, t *table.Table[uint64, uint64], pages [][50]uint64, read func(page []uint64)) {
	var sink uint64
	mine, peer := benchutil.Interleave(b,
		func(i int) { read(pages[i%len(pages)][:]) },
		func(i int) {
			for _, id := range pages[(i+len(pages)/2)%len(pages)] {
				a, _ := t.Get(id)
				sink += a
			}
		})
	b.ReportMetric(mine, "cpu-ns/page")
	b.ReportMetric(peer, "table-cpu-ns/page")
	b.ReportMetric(mine/peer, "registry/table")
	benchKeep(sink)
}
