package usercounts

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tally-dev/tally/bench/datagen"
	"github.com/tally-dev/tally/engine/table"
)

// hashCounts is the peer: engine/embedded's userCounts (usercounts.go) as
// it was when this package was written, an engine/table hash table with
// 12-byte slots and an escape to a wide table for counts past 2^32.
type hashCounts struct {
	narrow *table.Table[userKey, uint32]
	wide   *table.Table[uint64, int64]
}

type userKey [2]uint32

func keyOf(u uint64) userKey       { return userKey{uint32(u), uint32(u >> 32)} }
func (k userKey) id() uint64       { return uint64(k[0]) | uint64(k[1])<<32 }
func hashUserKey(k userKey) uint64 { return table.Mix64(k.id()) }

const countEscape = math.MaxUint32

func newHashCounts(capacityHint int) *hashCounts {
	return &hashCounts{
		narrow: table.New[userKey, uint32](hashUserKey, capacityHint),
		wide:   table.New[uint64, int64](table.Mix64, 8),
	}
}

func (c *hashCounts) Get(u uint64) (int64, bool) {
	n, ok := c.narrow.Get(keyOf(u))
	if n != countEscape {
		return int64(n), ok
	}
	w, _ := c.wide.Get(u)
	return w, true
}

func (c *hashCounts) Add(u uint64, d int64) {
	n := c.narrow.Upsert(keyOf(u))
	if *n != countEscape {
		if v := int64(*n) + d; v >= 0 && v < countEscape {
			*n = uint32(v)
			return
		}
		c.set(u, n, int64(*n)+d)
		return
	}
	w, _ := c.wide.Ref(u)
	c.set(u, n, *w+d)
}

func (c *hashCounts) Set(u uint64, v int64) { c.set(u, c.narrow.Upsert(keyOf(u)), v) }

func (c *hashCounts) set(u uint64, n *uint32, v int64) {
	if v < countEscape {
		if *n == countEscape {
			c.wide.Delete(u)
		}
		*n = uint32(v)
		return
	}
	*n = countEscape
	c.wide.Put(u, v)
}

func (c *hashCounts) MemoryBytes() int { return c.narrow.MemoryBytes() + c.wide.MemoryBytes() }

// benchSet is a set of authors with their post counts, ids ascending.
type benchSet struct {
	ids    []uint64
	counts []int64
	posts  []uint64 // authors of the posts, in post order (for Add)
}

var (
	benchOnce sync.Once
	benchSets map[string]*benchSet
	setNames  = []string{"dense", "weibo", "sparse64"}
)

// loadBenchSets draws the 10M-post benchmark's authors (bench/datagen's
// defaults: 1M users, log-normal activity, 729k authors with ids under
// 2^20) and maps the ids three ways: as they are (dense), to distinct
// 10-digit ids (weibo: 1e9 + a hash below 9e9, Weibo-like uids) and to
// distinct uniform 64-bit ids (sparse64), keeping each author's count.
func loadBenchSets(b *testing.B) map[string]*benchSet {
	benchOnce.Do(func() {
		a := datagen.NewAuthors(datagen.AuthorConfig{})
		counts := make([]int64, datagen.DefaultUsers+1)
		posts := make([]uint64, 0, 2_000_000) // the first 2M posts' authors
		for i := range 10_000_000 {
			u := uint64(a.Next())
			counts[u]++
			if i < cap(posts) {
				posts = append(posts, u)
			}
		}
		maps := map[string]func(uint64) uint64{
			"dense":    func(u uint64) uint64 { return u },
			"weibo":    func(u uint64) uint64 { return 1_000_000_000 + table.Mix64(u)%9_000_000_000 },
			"sparse64": func(u uint64) uint64 { return table.Mix64(u ^ 0x5bd1e995) },
		}
		benchSets = map[string]*benchSet{}
		for name, f := range maps {
			type pair struct {
				id uint64
				n  int64
			}
			var ps []pair
			seen := map[uint64]bool{}
			for u, n := range counts {
				if n > 0 && !seen[f(uint64(u))] {
					seen[f(uint64(u))] = true
					ps = append(ps, pair{f(uint64(u)), n})
				}
			}
			slices.SortFunc(ps, func(x, y pair) int { return cmp.Compare(x.id, y.id) })
			s := &benchSet{}
			for _, p := range ps {
				s.ids = append(s.ids, p.id)
				s.counts = append(s.counts, p.n)
			}
			for _, u := range posts {
				s.posts = append(s.posts, f(u))
			}
			benchSets[name] = s
		}
	})
	return benchSets
}

func (s *benchSet) packedTable() *Table {
	t := New(len(s.ids))
	for i, u := range s.ids {
		t.Set(u, s.counts[i])
	}
	t.Compact()
	return t
}

func (s *benchSet) hashTable() *hashCounts {
	h := newHashCounts(len(s.ids))
	for i, u := range s.ids {
		h.Set(u, s.counts[i])
	}
	return h
}

// queries returns n lookups of present authors: uniformly random, or as
// polls of 100 followees each, sorted ascending (a followee list).
func (s *benchSet) queries(n int, poll bool) []uint64 {
	rng := rand.New(rand.NewPCG(1, 2))
	q := make([]uint64, n)
	for i := range q {
		q[i] = s.ids[rng.IntN(len(s.ids))]
	}
	if poll {
		for i := 0; i+100 <= n; i += 100 {
			slices.Sort(q[i : i+100])
		}
	}
	return q
}

var sink int64

// BenchmarkGet compares Get on the 729k authors: the packed table after
// Compact, the packed table with a live overlay of half the fold
// threshold (its steady state between folds), and the hash table peer.
// bytes/user is each one's MemoryBytes over the authors.
func BenchmarkGet(b *testing.B) {
	sets := loadBenchSets(b)
	for _, name := range setNames {
		s := sets[name]
		p := s.packedTable()
		po := s.packedTable()
		rng := rand.New(rand.NewPCG(3, 4))
		for range po.foldThreshold() / 2 {
			po.Add(s.ids[rng.IntN(len(s.ids))], 1)
		}
		h := s.hashTable()
		for _, access := range []string{"random", "poll100"} {
			q := s.queries(1<<20, access == "poll100")
			b.Run(fmt.Sprintf("%s/%s/packed", name, access), func(b *testing.B) {
				benchGet(b, q, p.Get, p.MemoryBytes(), len(s.ids))
			})
			b.Run(fmt.Sprintf("%s/%s/packed+overlay", name, access), func(b *testing.B) {
				benchGet(b, q, po.Get, po.MemoryBytes(), len(s.ids))
			})
			b.Run(fmt.Sprintf("%s/%s/hash", name, access), func(b *testing.B) {
				benchGet(b, q, h.Get, int64(h.MemoryBytes()), len(s.ids))
			})
		}
	}
}

// BenchmarkGetPaired times the packed table (after Compact) and the hash
// table in alternating runs of 65536 lookups each, so that both see the
// same load of a shared machine, and reports each one's ns per Get and
// their ratio (packed/hash).
func BenchmarkGetPaired(b *testing.B) {
	sets := loadBenchSets(b)
	for _, name := range setNames {
		s := sets[name]
		p, h := s.packedTable(), s.hashTable()
		for _, access := range []string{"random", "poll100"} {
			q := s.queries(1<<20, access == "poll100")
			b.Run(name+"/"+access, func(b *testing.B) {
				const chunk = 1 << 16
				var tp, th time.Duration
				var sum int64
				i := 0
				for b.Loop() {
					start := time.Now()
					for j := range chunk {
						v, _ := p.Get(q[(i+j)&(len(q)-1)])
						sum += v
					}
					mid := time.Now()
					for j := range chunk {
						v, _ := h.Get(q[(i+j)&(len(q)-1)])
						sum += v
					}
					tp, th = tp+mid.Sub(start), th+time.Since(mid)
					i += chunk
				}
				sink = sum
				gets := float64(b.N) * chunk
				b.ReportMetric(float64(tp.Nanoseconds())/gets, "packed-ns/get")
				b.ReportMetric(float64(th.Nanoseconds())/gets, "hash-ns/get")
				b.ReportMetric(float64(tp)/float64(th), "packed/hash")
				b.ReportMetric(0, "ns/op")
			})
		}
	}
}

func benchGet(b *testing.B, q []uint64, get func(uint64) (int64, bool), mem int64, users int) {
	var sum int64
	i := 0
	for b.Loop() {
		v, _ := get(q[i&(len(q)-1)])
		sum += v
		i++
	}
	sink = sum
	b.ReportMetric(float64(mem)/float64(users), "bytes/user")
}

// BenchmarkLoad is a snapshot load: Set of the 729k authors in increasing
// id order, then Compact (packed), against the hash table's Sets.
func BenchmarkLoad(b *testing.B) {
	sets := loadBenchSets(b)
	for _, name := range setNames {
		s := sets[name]
		b.Run(name+"/packed", func(b *testing.B) {
			for b.Loop() {
				s.packedTable()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(s.ids)), "ns/user")
		})
		b.Run(name+"/hash", func(b *testing.B) {
			for b.Loop() {
				s.hashTable()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(s.ids)), "ns/user")
		})
	}
}

// BenchmarkFold is one fold job's Run over the 729k packed authors and
// an overlay at the fold threshold (45k entries, new and old authors).
func BenchmarkFold(b *testing.B) {
	sets := loadBenchSets(b)
	for _, name := range setNames {
		s := sets[name]
		b.Run(name, func(b *testing.B) {
			t := s.packedTable()
			for i := 0; t.live.size() < t.foldThreshold(); i++ {
				t.Add(s.posts[i], 1)
			}
			j := t.PlanWork(time.Now())[0].(*foldJob)
			for b.Loop() {
				j.out = nil
				j.Run()
			}
		})
	}
}

// BenchmarkAdd adds the first 2M posts' authors (in post order) to a
// table loaded with the 729k authors, folding as the engine's
// maintenance loop would (a check every 4096 writes, the job run and
// finished at once): ns/op is per Add, folds included. The hash peer
// only adds.
func BenchmarkAdd(b *testing.B) {
	sets := loadBenchSets(b)
	for _, name := range setNames {
		s := sets[name]
		b.Run(name+"/packed", func(b *testing.B) {
			t := s.packedTable()
			folds := 0
			var folding time.Duration
			i := 0
			for b.Loop() {
				t.Add(s.posts[i%len(s.posts)], 1)
				i++
				if i%4096 == 0 {
					start := time.Now()
					for _, j := range t.PlanWork(time.Now()) {
						j.Run()
						j.Finish()
						folds++
					}
					folding += time.Since(start)
				}
			}
			b.ReportMetric(float64(folds)/float64(b.N)*1e6, "folds/1M-adds")
			b.ReportMetric(float64(folding.Nanoseconds())/float64(b.N), "fold-ns/add")
		})
		b.Run(name+"/hash", func(b *testing.B) {
			h := s.hashTable()
			i := 0
			for b.Loop() {
				h.Add(s.posts[i%len(s.posts)], 1)
				i++
			}
		})
	}
}
