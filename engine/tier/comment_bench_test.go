package tier

import (
	"iter"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/tally-dev/tally/bench/benchutil"
	"github.com/tally-dev/tally/bench/datagen"
	"github.com/tally-dev/tally/engine/snowflake"
)

// The counted comment ids' benchmark, beside the like set's:
//
//	go test ./engine/tier -run '^$' -bench 'CommentMemory' -benchtime 1x
//
// Data: the posts of bench/datagen (N = TALLY_BENCH_N, default 1M, seed
// 1); post i gets as many comments as datagen's Comments count for it.
// Each comment id is a snowflake an app makes when the comment is
// written: its time is the post's plus a log-normal delay (median 30
// minutes, log-sd 2.5: most comments within hours, a tail over weeks,
// never after the data set's end), its node one of the app's 4 nodes, its
// sequence 0 (an app node rarely makes two comment ids in one
// millisecond). The engine keeps them as a set of (comment id, post)
// pairs in the post's windows ("CMNT"), and the writer of each as a set
// of (writer, comment id) pairs in the comment's windows ("CMWR"), the
// writers uniform over 10M users.

// benchComment is one comment of the data set.
type benchComment struct{ post, id, writer uint64 }

// benchComments returns the comments of the data set in (post, id)
// order.
func benchComments(n int) []benchComment {
	g := datagen.New(datagen.Config{N: n, Seed: 1})
	end := datagen.DefaultEnd.UnixMilli()
	var out []benchComment
	var ids []uint64
	for i := 0; ; i++ {
		post, c, ok := g.Next()
		if !ok {
			break
		}
		if c.Comments <= 0 {
			continue
		}
		r := rand.New(rand.NewPCG(2, uint64(i)))
		at := snowflake.Millis(post)
		ids = ids[:0]
		for range c.Comments {
			delay := math.Exp(math.Log(30*60*1000) + 2.5*r.NormFloat64())
			ms := min(at+1+int64(min(delay, 30*24*3600*1000)), end-1)
			ids = append(ids, snowflake.Make(ms, r.Uint64N(4), 0))
		}
		slices.Sort(ids)
		for _, id := range slices.Compact(ids) {
			out = append(out, benchComment{post, id, 1 + r.Uint64N(setBenchUsers)})
		}
	}
	return out
}

func commentPairs(cs []benchComment) iter.Seq2[uint64, uint64] {
	return func(yield func(uint64, uint64) bool) {
		for _, c := range cs {
			if !yield(c.id, c.post) {
				return
			}
		}
	}
}

func writerPairs(cs []benchComment) iter.Seq2[uint64, uint64] {
	return func(yield func(uint64, uint64) bool) {
		for _, c := range cs {
			if !yield(c.writer, c.id) {
				return
			}
		}
	}
}

// BenchmarkCommentMemory reports bytes per counted comment id (CMNT) and
// per writer record (CMWR) under the default policy (the last 7 days
// open) and with every window sealed: the live heap after GC
// (heap-B/comment), MemoryBytes (mem-B/comment) and the sealed windows'
// images (sealed-B/comment).
func BenchmarkCommentMemory(b *testing.B) {
	cs := benchComments(benchutil.N())
	for _, set := range []struct {
		tag   string
		pairs iter.Seq2[uint64, uint64]
	}{{"CMNT", commentPairs(cs)}, {"CMWR", writerPairs(cs)}} {
		for _, policy := range []string{"default", "sealed"} {
			b.Run(set.tag+"/"+policy, func(b *testing.B) {
				var s *Set
				var h uint64
				for b.Loop() {
					s = nil
					h0 := benchutil.LiveHeap()
					var err error
					if s, err = NewSet(set.tag, setBenchOpts(b, policy)); err != nil {
						b.Fatal(err)
					}
					if err := s.LoadPairs(set.pairs, datagen.DefaultEnd); err != nil {
						b.Fatal(err)
					}
					if err := s.Maintain(datagen.DefaultEnd.Add(time.Millisecond)); err != nil {
						b.Fatal(err)
					}
					h = benchutil.LiveHeap() - h0
				}
				st := statsOf(s)
				b.ReportMetric(float64(h)/float64(s.Len()), "heap-B/comment")
				b.ReportMetric(float64(s.MemoryBytes())/float64(s.Len()), "mem-B/comment")
				if st.sealedPairs > 0 {
					b.ReportMetric(float64(st.sealedBytes)/float64(st.sealedPairs), "sealed-B/comment")
				}
				b.ReportMetric(float64(s.Len()), "comments")
			})
		}
	}
}
