package countertable

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/counters"
)

// checkModel compares the table with a model and checks that no zero post
// and no stale overflow entry is stored.
func checkModel(t testing.TB, tb *Table, model map[uint64]engine.Counts) {
	t.Helper()
	n := 0
	for id, c := range model {
		if got := tb.Get(id); got != c {
			t.Fatalf("Get(%d) = %+v, want %+v", id, got, c)
		}
		if !c.IsZero() {
			n++
		}
	}
	if tb.Len() != n {
		t.Fatalf("Len = %d, want %d", tb.Len(), n)
	}
	seen := 0
	tb.Range(func(id uint64, c engine.Counts) bool {
		seen++
		if c.IsZero() || model[id] != c {
			t.Fatalf("Range: %d=%+v, model %+v", id, c, model[id])
		}
		return true
	})
	if seen != n {
		t.Fatalf("Range saw %d posts, want %d", seen, n)
	}
	wideWant := 0
	tb.narrow.Range(func(_ key, r record) bool {
		for _, x := range r {
			if x == escape {
				wideWant++
				break
			}
		}
		return true
	})
	if tb.wide.Len() != wideWant {
		t.Fatalf("overflow table has %d entries, %d posts escape", tb.wide.Len(), wideWant)
	}
	tb.wide.Range(func(id uint64, w wide) bool {
		r, ok := tb.narrow.Get(keyOf(id))
		if !ok {
			t.Fatalf("overflow entry %d without a record", id)
		}
		for i, x := range w {
			if (x != 0) != (r[i] == escape) || (x != 0 && x < escape) {
				t.Fatalf("post %d field %d: overflow %d, narrow %#x", id, i, x, r[i])
			}
		}
		return true
	})
}

func TestAddGet(t *testing.T) {
	tb := New(0)
	if c := tb.Get(1); !c.IsZero() {
		t.Fatalf("unknown post reads %+v", c)
	}
	if v := tb.Add(1, counters.Likes, 1); v != 1 {
		t.Fatalf("Add = %d", v)
	}
	tb.Add(1, counters.Likes, 2)
	tb.Add(1, counters.Views, 100)
	tb.Add(2, counters.Favorites, 7)
	want := engine.Counts{Likes: 3, Views: 100}
	if c := tb.Get(1); c != want {
		t.Fatalf("Get(1) = %+v", c)
	}
	if tb.Len() != 2 {
		t.Fatalf("Len = %d", tb.Len())
	}
	out := make([]engine.Counts, 3)
	tb.GetMany([]uint64{2, 99, 1}, out)
	if out[0] != (engine.Counts{Favorites: 7}) || !out[1].IsZero() || out[2] != want {
		t.Fatalf("GetMany = %+v", out)
	}
}

func TestZeroDeletes(t *testing.T) {
	tb := New(0)
	if v := tb.Add(5, counters.Likes, -3); v != 0 || tb.Len() != 0 {
		t.Fatalf("decrement of absent post: %d, Len %d", v, tb.Len())
	}
	if v := tb.Add(5, counters.Likes, 0); v != 0 || tb.Len() != 0 {
		t.Fatal("adding 0 stored a post")
	}
	tb.Add(5, counters.Likes, 2)
	tb.Add(5, counters.Comments, 1)
	if v := tb.Add(5, counters.Likes, -10); v != 0 {
		t.Fatalf("clamp: %d", v)
	}
	if tb.Len() != 1 {
		t.Fatal("post deleted while comments remain")
	}
	tb.Add(5, counters.Comments, -1)
	if tb.Len() != 0 {
		t.Fatal("all-zero post still stored")
	}
	tb.Set(6, engine.Counts{Views: 9})
	tb.Set(6, engine.Counts{})
	tb.Set(7, engine.Counts{Likes: -5})
	if tb.Len() != 0 {
		t.Fatalf("Set of zero/negative counts stored %d posts", tb.Len())
	}
	checkModel(t, tb, map[uint64]engine.Counts{5: {}, 6: {}, 7: {}})
}

func TestOverflow(t *testing.T) {
	tb := New(0)
	model := map[uint64]engine.Counts{}
	const id = 42
	// Cross 2^32 upwards one step at a time around the escape value.
	tb.Add(id, counters.Views, escape-2)
	for want := int64(escape - 1); want <= escape+2; want++ {
		if v := tb.Add(id, counters.Views, 1); v != want {
			t.Fatalf("Add = %d, want %d", v, want)
		}
		model[id] = engine.Counts{Views: want}
		checkModel(t, tb, model)
	}
	if tb.wide.Len() != 1 {
		t.Fatal("no overflow entry past 2^32")
	}
	// Back down below the escape: the overflow entry goes away.
	tb.Add(id, counters.Views, -4)
	model[id] = engine.Counts{Views: escape - 2}
	checkModel(t, tb, model)
	if tb.wide.Len() != 0 {
		t.Fatal("overflow entry kept after the value came back")
	}
	// Two fields escaped at once; one returns, the other stays.
	tb.Add(id, counters.Likes, 1<<40)
	tb.Add(id, counters.Views, 1<<33)
	model[id] = engine.Counts{Likes: 1 << 40, Views: escape - 2 + 1<<33}
	checkModel(t, tb, model)
	tb.Add(id, counters.Likes, -(1<<40 - 5))
	model[id] = engine.Counts{Likes: 5, Views: escape - 2 + 1<<33}
	checkModel(t, tb, model)
	// An escaped field dropping straight to zero deletes the post.
	tb.Add(id, counters.Likes, -5)
	tb.Add(id, counters.Views, math.MinInt64)
	delete(model, id)
	checkModel(t, tb, model)
	if tb.Len() != 0 || tb.wide.Len() != 0 {
		t.Fatal("post not deleted")
	}
}

func TestNearMaxInt64(t *testing.T) {
	tb := New(0)
	tb.Set(1, engine.Counts{Likes: math.MaxInt64 - 1, Comments: math.MaxInt64, Reposts: escape, Views: escape - 1, Favorites: 1})
	if v := tb.Add(1, counters.Likes, 1); v != math.MaxInt64 {
		t.Fatalf("MaxInt64-1 + 1 = %d", v)
	}
	if v := tb.Add(1, counters.Likes, math.MaxInt64); v != math.MaxInt64 {
		t.Fatalf("no saturation: %d", v)
	}
	if v := tb.Add(1, counters.Comments, -1); v != math.MaxInt64-1 {
		t.Fatalf("MaxInt64 - 1 = %d", v)
	}
	want := engine.Counts{Likes: math.MaxInt64, Comments: math.MaxInt64 - 1, Reposts: escape, Views: escape - 1, Favorites: 1}
	checkModel(t, tb, map[uint64]engine.Counts{1: want})
	// Set replaces everything, including escaped fields.
	tb.Set(1, engine.Counts{Views: 3})
	checkModel(t, tb, map[uint64]engine.Counts{1: {Views: 3}})
}

func TestManyPosts(t *testing.T) {
	tb := New(0)
	model := map[uint64]engine.Counts{}
	r := rand.New(rand.NewPCG(1, 2))
	for range 50000 {
		id := r.Uint64N(5000)
		f := counters.Field(r.IntN(counters.NumFields))
		var d int64
		switch r.IntN(10) {
		case 0:
			d = -r.Int64N(1 << 34)
		case 1:
			d = r.Int64N(1 << 34)
		default:
			d = r.Int64N(5) - 2
		}
		v := tb.Add(id, f, d)
		w := fromCounts(model[id])
		w[f] = addClamped(w[f], d)
		if v != w[f] {
			t.Fatalf("Add returned %d, want %d", v, w[f])
		}
		model[id] = toCounts(w)
	}
	checkModel(t, tb, model)
}

func TestNoAllocs(t *testing.T) {
	tb := New(1000)
	ids := make([]uint64, 100)
	for i := range ids {
		ids[i] = uint64(i) << 40
		tb.Add(ids[i], counters.Likes, int64(i))
	}
	out := make([]engine.Counts, len(ids))
	var i int
	allocs := testing.AllocsPerRun(1000, func() {
		i++
		tb.GetMany(ids, out)
		tb.Add(ids[i%100], counters.Views, 1)
		tb.Add(ids[i%100], counters.Views, -1)
		_ = tb.Get(ids[i%100])
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per op mix", allocs)
	}
}

// runOps drives the table from data, checking every step against a map.
func runOps(t testing.TB, data []byte) {
	tb := New(0)
	model := map[uint64]engine.Counts{}
	deltas := []int64{1, -1, 2, -2, escape - 1, escape, -escape, 1 << 40, -(1 << 40), math.MaxInt64, math.MinInt64, 0}
	for len(data) >= 4 {
		op, id, arg := data[0], uint64(data[1]%32), binary.LittleEndian.Uint16(data[2:])
		data = data[4:]
		switch op % 4 {
		case 0, 1:
			f := counters.Field(arg % counters.NumFields)
			d := deltas[int(arg/counters.NumFields)%len(deltas)]
			w := fromCounts(model[id])
			w[f] = addClamped(w[f], d)
			if v := tb.Add(id, f, d); v != w[f] {
				t.Fatalf("Add(%d, %v, %d) = %d, want %d", id, f, d, v, w[f])
			}
			model[id] = toCounts(w)
		case 2:
			var w wide
			for i := range w {
				if arg&(1<<i) != 0 {
					w[i] = deltas[(int(arg)>>5+i)%len(deltas)]
				}
			}
			tb.Set(id, toCounts(w))
			for i := range w {
				w[i] = max(w[i], 0)
			}
			model[id] = toCounts(w)
		case 3:
			if got := tb.Get(id); got != model[id] {
				t.Fatalf("Get(%d) = %+v, want %+v", id, got, model[id])
			}
		}
	}
	checkModel(t, tb, model)
}

func FuzzOps(f *testing.F) {
	f.Add([]byte{0, 1, 4, 0, 0, 1, 4, 0, 3, 1, 0, 0})
	f.Add([]byte{0, 1, 20, 0, 0, 1, 25, 0, 1, 1, 30, 0, 3, 1, 0, 0, 2, 1, 0xff, 0xff})
	seed := make([]byte, 4*300)
	r := rand.New(rand.NewPCG(3, 4))
	for i := range seed {
		seed[i] = byte(r.Uint32())
	}
	f.Add(seed)
	f.Fuzz(func(t *testing.T, data []byte) { runOps(t, data) })
}

// BenchmarkGetMany reads 50-post feed pages from a table of 1M posts with
// a skewed, mostly small set of counts, as a feed would.
func BenchmarkGetMany(b *testing.B) {
	const posts, page = 1 << 20, 50
	r := rand.New(rand.NewPCG(5, 6))
	tb := New(0)
	ids := make([]uint64, posts)
	id := uint64(1) << 62 // snowflake-like: increasing with small gaps
	for i := range ids {
		id += 1 + r.Uint64N(1<<22)
		ids[i] = id
		tb.Add(id, counters.Views, 1+r.Int64N(10000))
		if r.IntN(2) == 0 {
			tb.Add(id, counters.Likes, 1+r.Int64N(100))
		}
		if r.IntN(1000) == 0 {
			tb.Add(id, counters.Views, 1<<33)
		}
	}
	// Pages of random posts, drawn up front so that the loop times only
	// GetMany.
	reads := make([]uint64, 1<<16)
	for i := range reads {
		reads[i] = ids[r.IntN(posts)]
	}
	out := make([]engine.Counts, page)
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		off := i * page % (len(reads) - page)
		tb.GetMany(reads[off:off+page], out)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/page")
	b.ReportMetric(float64(tb.MemoryBytes())/float64(tb.Len()), "bytes/post")
}
