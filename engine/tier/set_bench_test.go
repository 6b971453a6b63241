package tier

import (
	"bytes"
	"iter"
	"math/bits"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"testing"

	"github.com/tally-dev/tally/bench/benchutil"
	"github.com/tally-dev/tally/bench/datagen"
)

// The set's benchmarks:
//
//	go test ./engine/tier -run '^$' -bench 'SetMemory' -benchtime 1x
//	go test ./engine/tier -run '^$' -bench 'SetHasMany'
//
// Data: the posts of bench/datagen (N = TALLY_BENCH_N, default 1M, seed
// 1: snowflake ids uniform over the 365 days before 2025-01-01); post i
// gets as many likers as datagen's Likes count for it, a long tail; each
// post's likers are distinct users uniform over [1, 10M] drawn by PCG(1,
// post index). Day windows; the clock at the data set's end.

const setBenchUsers = 10_000_000

// benchLikes yields the (user, post) pairs of the data set in post order,
// each post's users ascending.
func benchLikes(n int) iter.Seq2[uint64, uint64] {
	return func(yield func(uint64, uint64) bool) {
		g := datagen.New(datagen.Config{N: n, Seed: 1})
		var users []uint64
		for i := 0; ; i++ {
			id, c, ok := g.Next()
			if !ok {
				return
			}
			if c.Likes <= 0 {
				continue
			}
			users = benchLikers(users[:0], uint64(i), int(min(c.Likes, setBenchUsers)))
			for _, u := range users {
				if !yield(u, id) {
					return
				}
			}
		}
	}
}

// benchLikers returns m distinct users uniform over [1, setBenchUsers],
// sorted.
func benchLikers(dst []uint64, post uint64, m int) []uint64 {
	r := rand.NewPCG(1, post)
	for len(dst) < m {
		for len(dst) < m {
			hi, _ := bits.Mul64(r.Uint64(), setBenchUsers)
			dst = append(dst, 1+hi)
		}
		slices.Sort(dst)
		dst = slices.Compact(dst)
	}
	return dst
}

// setBenchOpts returns benchOpts' policy for a set, whose "cold" and
// "cold-nocache" put the last 7 days in files too.
func setBenchOpts(b testing.TB, policy string) Options {
	o := benchOpts(b, policy)
	if o.ColdAge > 0 {
		o.OpenAge = -1
	}
	return o
}

// loadBenchSet builds a set under a policy: Add (or React) for "open",
// LoadPairs (or LoadReactions) and Maintain for the others. kinds is 1
// for a like set of benchLikes' pairs, more for a reaction set of
// benchReactions' under the mix of that many kinds.
func loadBenchSet(b testing.TB, policy string, n, kinds int) *Set {
	s, err := NewSet("LIKE", setBenchOpts(b, policy))
	if err != nil {
		b.Fatal(err)
	}
	end := datagen.DefaultEnd
	if policy == "open" {
		if kinds == 1 {
			for u, p := range benchLikes(n) {
				s.Add(u, p)
			}
		} else {
			for r := range benchReactions(n, kinds) {
				s.React(r.User, r.Post, r.Kind)
			}
		}
		return s
	}
	if kinds == 1 {
		err = s.LoadPairs(benchLikes(n), end)
	} else {
		err = s.LoadReactions(benchReactions(n, kinds), end)
	}
	if err != nil {
		b.Fatal(err)
	}
	if err := s.Maintain(end); err != nil {
		b.Fatal(err)
	}
	return s
}

// BenchmarkSetMemory reports bytes per like of the like set (set/...):
// the live Go heap after GC (heap-B/like), MemoryBytes (mem-B/like), the
// sealed windows' images (sealed-B/like) and for cold windows the files
// (disk-B/like); and the same per reaction of reaction sets of 6 and 16
// kinds under the mix (reactions6/..., reactions16/...: -B/reaction),
// whose pairs are the like set's.
func BenchmarkSetMemory(b *testing.B) {
	n := benchutil.N()
	for _, kinds := range []int{1, 6, 16} {
		name, unit := "set", "like"
		if kinds > 1 {
			name, unit = "reactions"+strconv.Itoa(kinds), "reaction"
		}
		for _, policy := range []string{"open", "default", "sealed", "cold"} {
			b.Run(name+"/"+policy, func(b *testing.B) {
				var s *Set
				var h uint64
				for b.Loop() {
					if s != nil {
						s.Close()
					}
					s = nil
					h0 := benchutil.LiveHeap()
					s = loadBenchSet(b, policy, n, kinds)
					h = benchutil.LiveHeap() - h0
				}
				st := statsOf(s)
				per := float64(h) / float64(s.Len())
				b.ReportMetric(per, "heap-B/"+unit)
				b.ReportMetric(float64(s.MemoryBytes())/float64(s.Len()), "mem-B/"+unit)
				if st.sealedPairs > 0 {
					b.ReportMetric(float64(st.sealedBytes)/float64(st.sealedPairs), "sealed-B/"+unit)
				}
				if st.coldPairs > 0 {
					b.ReportMetric(float64(s.DiskBytes())/float64(st.coldPairs), "disk-B/"+unit)
				}
				b.ReportMetric(float64(s.Len()), unit+"s")
				s.Close()
			})
		}
	}
}

// setPages is what BenchmarkSetHasMany reads, built once per run.
var setPages struct {
	sync.Once
	pages   [][]uint64
	viewers []uint64
}

const setNumPages = 1024

// benchPages returns 1024 pages of 50 consecutive liked posts in id order
// (a feed spanning a few hours), newest first, and a viewer for each who
// liked one of them (even pages) or a random user (odd pages).
func benchPages(n int) ([][]uint64, []uint64) {
	d := &setPages
	d.Do(func() {
		var posts []uint64
		first := map[uint64]uint64{}
		for u, p := range benchLikes(n) {
			if len(posts) == 0 || posts[len(posts)-1] != p {
				posts = append(posts, p)
				first[p] = u
			}
		}
		r := rand.New(rand.NewPCG(7, 7))
		for i := range setNumPages {
			at := r.IntN(len(posts) - 50)
			page := slices.Clone(posts[at : at+50])
			slices.Reverse(page)
			v := 1 + r.Uint64N(setBenchUsers)
			if i%2 == 0 {
				v = first[page[r.IntN(50)]]
			}
			d.pages = append(d.pages, page)
			d.viewers = append(d.viewers, v)
		}
	})
	return d.pages, d.viewers
}

// BenchmarkSetHasMany reads the 50-post pages of benchPages from the set
// under each policy: set/<policy>/alone (ns/op a page). A set is loaded
// only for the sub-benchmarks -bench selects.
func BenchmarkSetHasMany(b *testing.B) {
	n := benchutil.N()
	pages, viewers := benchPages(n)
	out := make([]bool, 50)
	for _, policy := range []string{"open", "sealed", "cold", "cold-nocache"} {
		b.Run("set/"+policy, func(b *testing.B) {
			s := loadBenchSet(b, policy, n, 1)
			defer s.Close()
			read := func(i int) {
				if err := s.HasMany(viewers[i%setNumPages], pages[i%setNumPages], out); err != nil {
					b.Fatal(err)
				}
			}
			b.Run("alone", func(b *testing.B) {
				i := 0
				for b.Loop() {
					read(i)
					i++
				}
			})
		})
	}
}

// BenchmarkSetBlockPairs builds the sealed set with blocks of 128 to 1024
// pairs and reports the sealed bytes per like and the time of the pages
// of BenchmarkSetHasMany.
func BenchmarkSetBlockPairs(b *testing.B) {
	n := benchutil.N()
	pages, viewers := benchPages(n)
	out := make([]bool, 50)
	for _, limit := range []int{128, 256, 512, 1024} {
		b.Run(strconv.Itoa(limit), func(b *testing.B) {
			s, _ := NewSet("LIKE", setBenchOpts(b, "sealed"))
			s.blockLimit = limit
			if err := s.LoadPairs(benchLikes(n), datagen.DefaultEnd); err != nil {
				b.Fatal(err)
			}
			i := 0
			for b.Loop() {
				s.HasMany(viewers[i%setNumPages], pages[i%setNumPages], out)
				i++
			}
			st := statsOf(s)
			b.ReportMetric(float64(st.sealedBytes)/float64(st.sealedPairs), "sealed-B/like")
		})
	}
}

// BenchmarkSetLoad is a set's recovery under the default policy: Load of
// its snapshot image (every sealed block verified), against LoadPairs of
// the same pairs (what a snapshot holding a pair list costs), per run;
// it reports the image's bytes per like.
func BenchmarkSetLoad(b *testing.B) {
	n := benchutil.N()
	s := loadBenchSet(b, "default", n, 1)
	var img bytes.Buffer
	if _, err := s.WriteTo(&img); err != nil {
		b.Fatal(err)
	}
	var pairs [][2]uint64
	s.Range(func(u, p uint64) bool { pairs = append(pairs, [2]uint64{u, p}); return true })
	b.Run("image", func(b *testing.B) {
		for b.Loop() {
			again, _ := NewSet("LIKE", Options{})
			if err := again.Load(bytes.NewReader(img.Bytes())); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(img.Len())/float64(s.Len()), "image-B/like")
	})
	b.Run("pairs", func(b *testing.B) {
		for b.Loop() {
			again, _ := NewSet("LIKE", Options{})
			if err := again.LoadPairs(func(yield func(uint64, uint64) bool) {
				for _, q := range pairs {
					if !yield(q[0], q[1]) {
						return
					}
				}
			}, datagen.DefaultEnd); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkSetLateLike is a like of an old post (a sealed window): Add
// into the window's delta, with Maintain every 4096 likes folding deltas
// back, per like; users are new, so every Add adds.
func BenchmarkSetLateLike(b *testing.B) {
	n := benchutil.N()
	pages, _ := benchPages(n)
	s := loadBenchSet(b, "sealed", n, 1)
	b.Run("set", func(b *testing.B) {
		i := 0
		for b.Loop() {
			page := pages[i%setNumPages]
			if _, err := s.Add(setBenchUsers+uint64(i), page[i%50]); err != nil {
				b.Fatal(err)
			}
			if i%4096 == 4095 {
				if err := s.Maintain(datagen.DefaultEnd); err != nil {
					b.Fatal(err)
				}
			}
			i++
		}
	})
}
