package likeset

import (
	"fmt"
	"iter"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tally-dev/tally/bench/benchutil"
	"github.com/tally-dev/tally/bench/datagen"
	"github.com/tally-dev/tally/engine/table"
)

// The benchmarks measure the set against engine/table.Table[pair,
// struct{}] (what engine/embedded keeps today) on the same data, in the
// same run:
//
//	go test ./engine/likeset -run '^$' -bench Memory -benchtime 1x
//	go test ./engine/likeset -run '^$' -bench HasMany
//
// Data: the posts of bench/datagen (N = TALLY_BENCH_N, default 1M, seed 1:
// snowflake ids uniform over the 365 days before 2025-01-01); post i gets
// as many likers as datagen's Likes count for it — a long tail (Lomax
// views × 0.04): at 1M posts 181,392 posts have likes, 5,316,559 likes in
// all, median 1 a liked post, the largest 701,884, the top 100 posts 65%
// of all likes. Each post's likers are distinct users uniform over
// [1, 10M], drawn by PCG(1, post index) (math/rand/v2's PCG, a fixed
// algorithm, with its raw 64-bit output reduced by multiply-shift here).
// Day windows; the clock at the end of the data set, so the default
// policy (7 days open) keeps 1.9% of the windows open.

const benchUsers = 10_000_000

// likes yields the (user, post) pairs of the data set in post order, each
// post's users ascending.
func likes(n int) iter.Seq2[uint64, uint64] {
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
			users = likers(users[:0], uint64(i), int(min(c.Likes, benchUsers)))
			for _, u := range users {
				if !yield(u, id) {
					return
				}
			}
		}
	}
}

// likers returns m distinct users uniform over [1, benchUsers], sorted.
func likers(dst []uint64, post uint64, m int) []uint64 {
	r := rand.NewPCG(1, post)
	for len(dst) < m {
		for len(dst) < m {
			hi, _ := mul64(r.Uint64(), benchUsers)
			dst = append(dst, 1+hi)
		}
		slices.Sort(dst)
		dst = slices.Compact(dst)
	}
	return dst
}

func mul64(a, b uint64) (hi, lo uint64) {
	const mask32 = 1<<32 - 1
	a0, a1 := a&mask32, a>>32
	b0, b1 := b&mask32, b>>32
	w0 := a0 * b0
	t := a1*b0 + w0>>32
	w1 := t&mask32 + a0*b1
	return a1*b1 + t>>32 + w1>>32, a * b
}

func benchEnd() time.Time { return datagen.DefaultEnd }

type tpair [2]uint64

func hashTPair(k tpair) uint64 { return table.HashPair(k[0], k[1]) }

// loadTable builds the peer as engine/embedded does (table.New with a
// hint of 1024, then Put for each like).
func loadTable(n int) *table.Table[tpair, struct{}] {
	t := table.New[tpair, struct{}](hashTPair, 1024)
	for u, p := range likes(n) {
		t.Put(tpair{u, p}, struct{}{})
	}
	return t
}

// loadSet builds a set under a policy: "open" keeps every window open
// (Add), "sealed" seals every window (Load), "default" seals all but the
// last 7 days (Load).
func loadSet(b testing.TB, policy string, n int) *Set {
	o := Options{}
	switch policy {
	case "open":
		o.OpenAge = 100 * 365 * 24 * time.Hour
	case "sealed":
		o.OpenAge = -1
	}
	s, err := New(o)
	if err != nil {
		b.Fatal(err)
	}
	if policy == "open" {
		for u, p := range likes(n) {
			s.Add(u, p)
		}
	} else if err := s.Load(likes(n), benchEnd()); err != nil {
		b.Fatal(err)
	}
	return s
}

var peerOnce struct {
	sync.Once
	heap float64 // bytes per like
}

// peerHeap returns the live heap bytes per like of the table peer,
// measured once per run.
func peerHeap(b *testing.B) float64 {
	peerOnce.Do(func() {
		h0 := benchutil.LiveHeap()
		t := loadTable(benchutil.N())
		h := benchutil.LiveHeap() - h0
		peerOnce.heap = float64(h) / float64(t.Len())
		runtime.KeepAlive(t)
	})
	return peerOnce.heap
}

// BenchmarkMemory reports bytes per like: the live Go heap after GC
// (heap-B/like) and MemoryBytes (mem-B/like), for the table peer and for
// the set under each policy, with the set's heap figure over the peer's
// (vs-table) measured in the same run.
func BenchmarkMemory(b *testing.B) {
	n := benchutil.N()
	b.Run("table", func(b *testing.B) {
		var t *table.Table[tpair, struct{}]
		var h uint64
		for b.Loop() {
			t = nil
			h0 := benchutil.LiveHeap()
			t = loadTable(n)
			h = benchutil.LiveHeap() - h0
		}
		b.ReportMetric(float64(h)/float64(t.Len()), "heap-B/like")
		b.ReportMetric(float64(t.MemoryBytes())/float64(t.Len()), "mem-B/like")
		b.ReportMetric(float64(t.Len()), "likes")
	})
	for _, policy := range []string{"open", "default", "sealed"} {
		b.Run(policy, func(b *testing.B) {
			peer := peerHeap(b)
			var s *Set
			var h uint64
			for b.Loop() {
				s = nil
				h0 := benchutil.LiveHeap()
				s = loadSet(b, policy, n)
				h = benchutil.LiveHeap() - h0
			}
			st := s.Stats()
			per := float64(h) / float64(s.Len())
			b.ReportMetric(per, "heap-B/like")
			b.ReportMetric(float64(st.MemoryBytes)/float64(s.Len()), "mem-B/like")
			b.ReportMetric(per/peer, "vs-table")
			if st.OpenPairs > 0 {
				b.ReportMetric(float64(st.OpenBytes)/float64(st.OpenPairs), "open-B/like")
			}
			if st.SealedPairs > 0 {
				b.ReportMetric(float64(st.SealedBytes)/float64(st.SealedPairs), "sealed-B/like")
			}
			b.ReportMetric(float64(s.Len()), "likes")
		})
	}
}

// benchData is what BenchmarkHasMany reads, built once per run.
var benchData struct {
	sync.Once
	open, sealed *Set
	peer         *table.Table[tpair, struct{}]
	pages        [][]uint64
	viewers      []uint64
}

const (
	pageSize = 50
	numPages = 1024
)

// BenchmarkHasMany reads 50-post pages — 50 consecutive liked posts in id
// order (a feed spanning a few hours), newest first — for a viewer who
// liked one of them (even pages) or a random user (odd pages), from a set
// with every window open, one with every window sealed, and the table
// peer (one Get per post, as engine/embedded's inSet does). Reported per
// page.
func BenchmarkHasMany(b *testing.B) {
	d := loadBenchData(b)
	out := make([]bool, pageSize)
	hits := 0
	for _, name := range []string{"open", "sealed", "table"} {
		b.Run(name, func(b *testing.B) {
			i := 0
			for b.Loop() {
				page, v := d.pages[i%numPages], d.viewers[i%numPages]
				switch name {
				case "open":
					d.open.HasMany(v, page, out)
				case "sealed":
					d.sealed.HasMany(v, page, out)
				default:
					for j, p := range page {
						_, out[j] = d.peer.Get(tpair{v, p})
					}
				}
				if out[0] {
					hits++
				}
				i++
			}
		})
	}
	_ = hits
}

func loadBenchData(b *testing.B) *struct {
	sync.Once
	open, sealed *Set
	peer         *table.Table[tpair, struct{}]
	pages        [][]uint64
	viewers      []uint64
} {
	d := &benchData
	d.Do(func() {
		n := benchutil.N()
		d.open = loadSet(b, "open", n)
		d.sealed = loadSet(b, "sealed", n)
		d.peer = loadTable(n)
		var posts []uint64
		first := map[uint64]uint64{}
		for u, p := range likes(n) {
			if len(posts) == 0 || posts[len(posts)-1] != p {
				posts = append(posts, p)
				first[p] = u
			}
		}
		r := rand.New(rand.NewPCG(7, 7))
		for i := range numPages {
			at := r.IntN(len(posts) - pageSize)
			page := slices.Clone(posts[at : at+pageSize])
			slices.Reverse(page)
			v := 1 + r.Uint64N(benchUsers)
			if i%2 == 0 {
				v = first[page[r.IntN(pageSize)]]
			}
			d.pages = append(d.pages, page)
			d.viewers = append(d.viewers, v)
		}
	})
	return d
}

// BenchmarkBlockPairs builds the sealed set with blocks of 128 to 1024
// pairs and reports the sealed bytes per like and the time of the pages of
// BenchmarkHasMany (which it builds first).
func BenchmarkBlockPairs(b *testing.B) {
	d := loadBenchData(b)
	out := make([]bool, pageSize)
	for _, limit := range []int{128, 256, 512, 1024} {
		b.Run(fmt.Sprint(limit), func(b *testing.B) {
			s, _ := New(Options{OpenAge: -1})
			s.blockLimit = limit
			if err := s.Load(likes(benchutil.N()), benchEnd()); err != nil {
				b.Fatal(err)
			}
			i := 0
			for b.Loop() {
				s.HasMany(d.viewers[i%numPages], d.pages[i%numPages], out)
				i++
			}
			st := s.Stats()
			b.ReportMetric(float64(st.SealedBytes)/float64(st.SealedPairs), "sealed-B/like")
		})
	}
}
