package follows

import (
	"math/rand/v2"
	"runtime"
	"runtime/metrics"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/tally-dev/tally/engine/table"
)

// heapFigures forces a collection and returns the live heap and its
// scannable part (objects the GC must scan for pointers).
func heapFigures() (live, scan uint64) {
	runtime.GC()
	ms := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/gc/scan/heap:bytes"}}
	metrics.Read(ms)
	return ms[0].Value.Uint64(), ms[1].Value.Uint64()
}

// gcTime is the wall time of one forced collection: its mark phase is
// what a pointer-rich structure makes long.
func gcTime() time.Duration {
	runtime.GC()
	start := time.Now()
	runtime.GC()
	return time.Since(start)
}

// followWorkload returns viewers' follow counts and the order of follows:
// nviewers viewers with 10..30 follows each (20 on average), made in
// rounds across viewers as lists grow in a live system (so blocks are
// outgrown, freed and reused).
func followWorkload(nviewers int) (counts []uint8) {
	rng := rand.New(rand.NewPCG(7, 7))
	counts = make([]uint8, nviewers)
	for i := range counts {
		counts[i] = uint8(10 + rng.IntN(21))
	}
	return counts
}

func target(v uint64, r int) uint64 { return table.Mix64(v<<8|uint64(r)) % 10_000_000 }

// BenchmarkMemory builds 1M viewers × ~20 follows in the Store and in the
// engine's current map[uint64][]followee, in the same run, and reports
// heap bytes per follow entry, scannable heap bytes, and the time of a
// forced GC with the structure resident. Run with -benchtime=1x.
func BenchmarkMemory(b *testing.B) {
	nviewers := 1_000_000
	if testing.Short() {
		nviewers = 100_000
	}
	counts := followWorkload(nviewers)
	b.Run("store", func(b *testing.B) {
		base, baseScan := heapFigures()
		s := New(0)
		total := 0
		for r := range 30 {
			for v, n := range counts {
				if r < int(n) && s.Follow(uint64(v), target(uint64(v), r), int64(r)) {
					total++
				}
			}
		}
		live, scan := heapFigures()
		gc := gcTime()
		if s.Len() != total {
			b.Fatalf("Len %d, want %d", s.Len(), total)
		}
		b.ReportMetric(float64(live-base)/float64(total), "heapB/entry")
		b.ReportMetric(float64(s.MemoryBytes())/float64(total), "memB/entry")
		b.ReportMetric(float64(int64(scan)-int64(baseScan))/(1<<20), "scanMiB")
		b.ReportMetric(float64(gc.Microseconds())/1000, "gc-ms")
		// Where the bytes beyond 16 per entry go: the header table, free
		// blocks, capacity classes' unused room, and the arena's growth
		// room.
		blockWords := 0
		s.heads.Range(func(_ uint64, h header) bool { blockWords += 2 * classCap(h.class()); return true })
		b.ReportMetric(float64(s.heads.MemoryBytes())/float64(total), "tableB/entry")
		b.ReportMetric(float64(s.garbage)/float64(cap(s.arena)), "free-frac")
		b.ReportMetric(float64(blockWords-2*total)/float64(cap(s.arena)), "class-frac")
		b.ReportMetric(float64(cap(s.arena)-len(s.arena))/float64(cap(s.arena)), "growth-frac")
		runtime.KeepAlive(s)
	})
	b.Run("map-of-slices", func(b *testing.B) {
		base, baseScan := heapFigures()
		m := map[uint64][]followee{}
		total := 0
		for r := range 30 {
			for v, n := range counts {
				if r < int(n) {
					fs := m[uint64(v)]
					u := target(uint64(v), r)
					if !slices.ContainsFunc(fs, func(f followee) bool { return f.user == u }) {
						m[uint64(v)] = append(fs, followee{u, int64(r)})
						total++
					}
				}
			}
		}
		live, scan := heapFigures()
		gc := gcTime()
		b.ReportMetric(float64(live-base)/float64(total), "heapB/entry")
		b.ReportMetric(float64(int64(scan)-int64(baseScan))/(1<<20), "scanMiB")
		b.ReportMetric(float64(gc.Microseconds())/1000, "gc-ms")
		runtime.KeepAlive(m)
	})
}

// BenchmarkFeedSum is state.unread's feed loop for a viewer following 200
// users: one post-count probe per followee in a 1M-user table.
func BenchmarkFeedSum(b *testing.B) {
	const nusers, nfollow = 1_000_000, 200
	posts := table.New[uint64, int64](table.Mix64, nusers)
	for u := range uint64(nusers) {
		posts.Put(u, int64(u%1000))
	}
	rng := rand.New(rand.NewPCG(3, 3))
	s := New(1000)
	m := map[uint64][]followee{}
	// Other viewers' lists around the one measured, as in a real arena.
	for v := range uint64(1000) {
		for range nfollow {
			u := rng.Uint64N(nusers)
			snap := int64(rng.IntN(1000))
			if s.Follow(v, u, snap) {
				m[v] = append(m[v], followee{u, snap})
			}
		}
	}
	postCount := func(u uint64) int64 { p, _ := posts.Get(u); return p }
	var sink int64
	v := uint64(0)
	b.Run("store/List", func(b *testing.B) {
		for b.Loop() {
			var feed int64
			ts, ss := s.List(v)
			for i, u := range ts {
				if d := postCount(u) - ss[i]; d > 0 {
					feed += d
				}
			}
			sink += feed
			v = (v + 1) % 1000
		}
	})
	b.Run("map-of-slices", func(b *testing.B) {
		for b.Loop() {
			var feed int64
			for _, f := range m[v] {
				if d := postCount(f.user) - f.snap; d > 0 {
					feed += d
				}
			}
			sink += feed
			v = (v + 1) % 1000
		}
	})
	runtime.KeepAlive(sink)
}

// BenchmarkList measures the per-follow costs on one list of n entries:
// Contains (half hits, half misses, as prepare checks), and Unfollow then
// Follow of a member (the memmove that closes the gap, the append, and an
// amortised share of tail merges), each against the engine's map of
// slices doing the same.
func BenchmarkList(b *testing.B) {
	for _, n := range []int{200, 2000, 20000} {
		rng := rand.New(rand.NewPCG(5, uint64(n)))
		s := New(1)
		m := map[uint64][]followee{}
		for range n {
			u := rng.Uint64()
			s.Follow(1, u, 0)
			m[1] = append(m[1], followee{u, 0})
		}
		probes := make([]uint64, 1024)
		for i := range probes {
			if i%2 == 0 {
				probes[i] = m[1][rng.IntN(n)].user
			} else {
				probes[i] = rng.Uint64()
			}
		}
		name := func(s string) string { return s + "/n=" + strconv.Itoa(n) }
		b.Run(name("Contains/store"), func(b *testing.B) {
			i, hits := 0, 0
			for b.Loop() {
				if s.Contains(1, probes[i&1023]) {
					hits++
				}
				i++
			}
			runtime.KeepAlive(hits)
		})
		b.Run(name("Contains/map-of-slices"), func(b *testing.B) {
			i, hits := 0, 0
			for b.Loop() {
				u := probes[i&1023]
				if slices.ContainsFunc(m[1], func(f followee) bool { return f.user == u }) {
					hits++
				}
				i++
			}
			runtime.KeepAlive(hits)
		})
		b.Run(name("UnfollowFollow/store"), func(b *testing.B) {
			i := 0
			for b.Loop() {
				u := probes[i&1022] // a member
				s.Unfollow(1, u)
				s.Follow(1, u, 0)
				i++
			}
		})
		b.Run(name("UnfollowFollow/map-of-slices"), func(b *testing.B) {
			i := 0
			for b.Loop() {
				u := probes[i&1022]
				fs := m[1]
				j := slices.IndexFunc(fs, func(f followee) bool { return f.user == u })
				fs = slices.Delete(fs, j, j+1)
				if !slices.ContainsFunc(fs, func(f followee) bool { return f.user == u }) {
					fs = append(fs, followee{u, 0})
				}
				m[1] = fs
				i++
			}
		})
	}
}
