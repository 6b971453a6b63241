package likeset

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/tally-dev/tally/engine/snowflake"
)

type pair struct{ u, p uint64 }

// t0 is the clock the tests start at.
var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

func postAt(t time.Time, node, seq uint64) uint64 { return snowflake.Make(t.UnixMilli(), node, seq) }

func TestPairTable(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, users := range []string{"narrow", "wide", "switch"} {
		t.Run(users, func(t *testing.T) {
			tb := newPairTable(49, 0)
			model := map[pk]bool{}
			user := func(i int) uint64 {
				u := r.Uint64N(64)
				switch {
				case users == "wide", users == "switch" && i > 3000:
					u |= 1 << 63
				}
				return u
			}
			for i := range 6000 {
				q := pk{k: r.Uint64N(64) << 40, u: user(i)}
				if r.IntN(3) == 0 {
					if got, want := tb.remove(q.u, q.k), model[q]; got != want {
						t.Fatalf("op %d: remove %v = %v, want %v", i, q, got, want)
					}
					delete(model, q)
				} else {
					if got, want := tb.add(q.u, q.k), !model[q]; got != want {
						t.Fatalf("op %d: add %v = %v, want %v", i, q, got, want)
					}
					model[q] = true
				}
				if tb.len() != len(model) {
					t.Fatalf("op %d: len %d, want %d", i, tb.len(), len(model))
				}
			}
			for q := range model {
				if !tb.has(q.u, q.k) {
					t.Fatalf("lost %v", q)
				}
			}
			n := 0
			tb.each(func(u, k uint64) bool {
				if !model[pk{k, u}] {
					t.Fatalf("each yields %d,%d not in the model", u, k)
				}
				n++
				return true
			})
			if n != len(model) {
				t.Fatalf("each yields %d, want %d", n, len(model))
			}
			wantStride := narrowStride
			if users != "narrow" {
				wantStride = wideStride
			}
			if tb.stride != wantStride {
				t.Fatalf("stride %d, want %d", tb.stride, wantStride)
			}
		})
	}
}

// blockCases are pair sets that stress the block format: one hot post,
// many one-like posts, users at the ends of the uint64 range (which force
// early block cuts), keys with every bit varying.
func blockCases(r *rand.Rand) map[string][]pk {
	cs := map[string][]pk{}
	var hot []pk
	for range 3000 {
		hot = append(hot, pk{k: 12345, u: r.Uint64N(10_000_000)})
	}
	cs["hot"] = hot
	var spread []pk
	for range 3000 {
		spread = append(spread, pk{k: r.Uint64N(1 << 49), u: r.Uint64N(10_000_000)})
	}
	cs["spread"] = spread
	var ext []pk
	for i := range 2000 {
		u := r.Uint64()
		switch i % 4 {
		case 0:
			u = 0
		case 1:
			u = math.MaxUint64 - uint64(i)
		}
		ext = append(ext, pk{k: r.Uint64N(50), u: u})
	}
	cs["extremes"] = ext
	var wide []pk
	for range 2000 {
		wide = append(wide, pk{k: r.Uint64(), u: r.Uint64N(1000)})
	}
	cs["wide-keys"] = wide
	cs["one"] = []pk{{k: 7, u: 9}}
	var mixed []pk
	for p := range 400 {
		n := 1 + int(1000/float64(p+1)) // Zipf-like
		for range n {
			mixed = append(mixed, pk{k: uint64(p) * 977 << 22, u: r.Uint64N(1 << 40)})
		}
	}
	cs["zipf"] = mixed
	for name, ps := range cs {
		slices.SortFunc(ps, cmpPK)
		cs[name] = slices.Compact(ps)
	}
	return cs
}

func buildPairs(ps []pk, limit int) *sealedWin {
	b := newBuilder(limit)
	for _, q := range ps {
		b.add(q.k, q.u)
	}
	return b.finish()
}

func TestSealedRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for name, ps := range blockCases(r) {
		for _, limit := range []int{1, 2, 7, 128, blockPairs, maxBlockPairs} {
			t.Run(fmt.Sprintf("%s/%d", name, limit), func(t *testing.T) {
				w := buildPairs(ps, limit)
				if err := w.verify(); err != nil {
					t.Fatal(err)
				}
				if w.pairs != len(ps) {
					t.Fatalf("pairs %d, want %d", w.pairs, len(ps))
				}
				var got []pk
				w.each(func(k, u uint64) bool {
					got = append(got, pk{k, u})
					return true
				})
				if !slices.Equal(got, ps) {
					t.Fatalf("each differs from the input")
				}
				in := map[pk]bool{}
				for _, q := range ps {
					in[q] = true
					if !w.has(q.k, q.u) {
						t.Fatalf("has(%v) = false", q)
					}
				}
				for range 3000 {
					q := ps[r.IntN(len(ps))]
					switch r.IntN(4) {
					case 0:
						q.u++
					case 1:
						q.u--
					case 2:
						q.k++
					default:
						q.u = r.Uint64()
					}
					if w.has(q.k, q.u) != in[q] {
						t.Fatalf("has(%v) = %v, want %v", q, !in[q], in[q])
					}
				}
			})
		}
	}
}

// checkModel compares every read of s with model.
func checkModel(t *testing.T, what string, s *Set, model map[pair]bool, posts, users []uint64, r *rand.Rand) {
	t.Helper()
	if s.Len() != len(model) {
		t.Fatalf("%s: Len %d, want %d", what, s.Len(), len(model))
	}
	for q := range model {
		if !s.Has(q.u, q.p) {
			t.Fatalf("%s: Has(%d, %d) = false", what, q.u, q.p)
		}
	}
	for _, u := range users {
		for _, p := range posts {
			if s.Has(u, p) != model[pair{u, p}] {
				t.Fatalf("%s: Has(%d, %d) = %v", what, u, p, !model[pair{u, p}])
			}
		}
	}
	out := make([]bool, 300)
	for range 50 {
		u := users[r.IntN(len(users))]
		page := make([]uint64, r.IntN(300))
		for i := range page {
			page[i] = posts[r.IntN(len(posts))]
		}
		switch r.IntN(3) {
		case 0:
			slices.Sort(page)
		case 1:
			slices.Sort(page)
			slices.Reverse(page)
		}
		clear(out)
		s.HasMany(u, page, out)
		for i, p := range page {
			if out[i] != model[pair{u, p}] {
				t.Fatalf("%s: HasMany(%d)[%d] post %d = %v", what, u, i, p, out[i])
			}
		}
	}
	seen := map[pair]bool{}
	s.Range(func(u, p uint64) bool {
		q := pair{u, p}
		if seen[q] || !model[q] {
			t.Fatalf("%s: Range yields %v (seen %v, in model %v)", what, q, seen[q], model[q])
		}
		seen[q] = true
		return true
	})
	if len(seen) != len(model) {
		t.Fatalf("%s: Range yields %d pairs, want %d", what, len(seen), len(model))
	}
	st := s.Stats()
	if st.Pairs != len(model) || st.MemoryBytes <= 0 {
		t.Fatalf("%s: stats %+v", what, st)
	}
}

// TestModel runs random likes and unlikes against a map, through sealing,
// compaction, jobs with writes between Plan, Run and Finish, and Load, and
// compares every read after each phase.
func TestModel(t *testing.T) {
	for seed := uint64(1); seed <= 4; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { testModel(t, seed) })
	}
}

func testModel(t *testing.T, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 99))
	s, err := New(Options{OpenAge: 3 * 24 * time.Hour, CompactMin: 8})
	if err != nil {
		t.Fatal(err)
	}
	limit := []int{0, 1, 3, 17}[seed%4]
	s.blockLimit = limit
	// Posts over 30 days, a few sharing a millisecond, and ids at the ends
	// of the range.
	var posts []uint64
	for i := range 200 {
		at := t0.Add(time.Duration(r.Int64N(int64(30 * 24 * time.Hour))))
		posts = append(posts, postAt(at, r.Uint64N(4), uint64(i%3)))
	}
	posts = append(posts, 0, 1, math.MaxUint64, math.MaxUint64-1)
	users := []uint64{0, 1, 2, 3, 5, 8, 13, 1 << 45, 1 << 50, math.MaxUint64}
	for range 20 {
		users = append(users, r.Uint64N(100_000))
	}
	hot := posts[:5]
	model := map[pair]bool{}
	ops := func(n int) {
		for range n {
			u := users[r.IntN(len(users))]
			p := posts[r.IntN(len(posts))]
			if r.IntN(3) == 0 {
				p = hot[r.IntN(len(hot))]
			}
			q := pair{u, p}
			if r.IntN(3) == 0 {
				if got := s.Remove(u, p); got != model[q] {
					t.Fatalf("Remove(%d, %d) = %v, want %v", u, p, got, model[q])
				}
				delete(model, q)
			} else {
				if got := s.Add(u, p); got == model[q] {
					t.Fatalf("Add(%d, %d) = %v, want %v", u, p, got, !model[q])
				}
				model[q] = true
			}
			checkTables(t, s)
		}
	}
	now := t0
	for phase := range 24 {
		ops(600)
		checkModel(t, fmt.Sprintf("phase %d ops", phase), s, model, posts, users, r)
		now = now.Add(2 * 24 * time.Hour)
		if phase%2 == 0 {
			if err := s.Maintain(now); err != nil {
				t.Fatal(err)
			}
		} else {
			// Jobs with writes while they are planned and while they run
			// (which may make more jobs due: a few rounds, then Maintain).
			for range 12 {
				j := s.Plan(now)
				if j == nil {
					break
				}
				ops(40)
				if err := j.Run(); err != nil {
					t.Fatal(err)
				}
				ops(40)
				checkModel(t, fmt.Sprintf("phase %d %s", phase, j), s, model, posts, users, r)
				if err := s.Finish(j); err != nil {
					t.Fatal(err)
				}
			}
			if err := s.Maintain(now); err != nil {
				t.Fatal(err)
			}
		}
		checkModel(t, fmt.Sprintf("phase %d maintained", phase), s, model, posts, users, r)
		if st := s.Stats(); phase > 4 && (st.SealedWindows == 0 || limit > 0 && st.SealedBlocks <= st.SealedWindows) {
			t.Fatalf("phase %d: nothing sealed: %+v", phase, st)
		}
	}
	for _, w := range s.wins {
		if w.sealed != nil {
			if err := w.sealed.verify(); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Load what Range yields, in its order and shuffled, into new sets.
	var all []pair
	s.Range(func(u, p uint64) bool {
		all = append(all, pair{u, p})
		return true
	})
	for _, order := range []string{"range", "shuffled"} {
		if order == "shuffled" {
			r.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
		}
		l, _ := New(Options{OpenAge: 3 * 24 * time.Hour, CompactMin: 8})
		l.blockLimit = limit
		err := l.Load(func(yield func(uint64, uint64) bool) {
			for _, q := range all {
				if !yield(q.u, q.p) || !yield(q.u, q.p) { // duplicates are ignored
					return
				}
			}
		}, now)
		if err != nil {
			t.Fatal(err)
		}
		checkModel(t, "loaded "+order, l, model, posts, users, r)
		if l.Plan(now) != nil {
			t.Fatalf("loaded %s: a job is due after Load", order)
		}
	}
}

func TestLoadMergesGeometrically(t *testing.T) {
	s, _ := New(Options{OpenAge: -1})
	// Two old windows interleaved pair by pair, more than loadFlushMin each.
	n := 3 * loadFlushMin
	d1, d2 := postAt(t0, 0, 0), postAt(t0.Add(24*time.Hour), 0, 0)
	model := map[pair]bool{}
	err := s.Load(func(yield func(uint64, uint64) bool) {
		for i := range n {
			p := d1 + uint64(i%100)<<snowflake.TimeShift
			if i%2 == 1 {
				p = d2 + uint64(i%77)<<snowflake.TimeShift
			}
			model[pair{uint64(i), p}] = true
			if !yield(uint64(i), p) {
				return
			}
		}
	}, t0.Add(10*24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 1))
	checkModel(t, "load", s, model, []uint64{d1, d2, d1 + 5<<snowflake.TimeShift}, []uint64{0, 1, 2, 100}, r)
	if st := s.Stats(); st.SealedWindows != 2 || st.OpenWindows != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func TestNoAllocs(t *testing.T) {
	s, _ := New(Options{OpenAge: 2 * 24 * time.Hour})
	var posts []uint64
	for i := range 200 {
		p := postAt(t0.Add(time.Duration(i)*time.Hour), uint64(i%7), 0)
		posts = append(posts, p)
		for u := range uint64(i % 13) {
			s.Add(u*1000, p)
		}
	}
	if err := s.Maintain(t0.Add(6 * 24 * time.Hour)); err != nil {
		t.Fatal(err)
	}
	s.Remove(2000, posts[30])
	s.Add(77, posts[31])
	st := s.Stats()
	if st.SealedWindows == 0 || st.OpenWindows == 0 || st.DeltaPairs == 0 {
		t.Fatalf("want open, sealed and delta: %+v", st)
	}
	page := posts[100:150]
	out := make([]bool, len(page))
	if a := testing.AllocsPerRun(100, func() { s.HasMany(3000, page, out) }); a != 0 {
		t.Fatalf("HasMany allocates %v", a)
	}
	shuffled := slices.Clone(posts[:60])
	rand.New(rand.NewPCG(1, 1)).Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	out = make([]bool, len(shuffled))
	if a := testing.AllocsPerRun(100, func() { s.HasMany(3000, shuffled, out) }); a != 0 {
		t.Fatalf("HasMany allocates %v", a)
	}
	if a := testing.AllocsPerRun(100, func() { s.Has(3000, posts[40]) }); a != 0 {
		t.Fatalf("Has allocates %v", a)
	}
}

func TestOptions(t *testing.T) {
	if _, err := New(Options{WindowMillis: MaxWindowMillis + 1}); err == nil {
		t.Fatal("no error for a too long window")
	}
	s, err := New(Options{WindowMillis: MaxWindowMillis})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []uint64{0, 1, math.MaxUint64} {
		if !s.Add(math.MaxUint64, p) || s.Add(math.MaxUint64, p) || !s.Has(math.MaxUint64, p) {
			t.Fatalf("post %d", p)
		}
	}
	if err := s.Maintain(time.Unix(1<<40, 0)); err != nil {
		t.Fatal(err)
	}
	for _, p := range []uint64{0, 1, math.MaxUint64} {
		if !s.Has(math.MaxUint64, p) || !s.Remove(math.MaxUint64, p) || s.Has(math.MaxUint64, p) {
			t.Fatalf("post %d after sealing", p)
		}
	}
}

func TestFinishErrors(t *testing.T) {
	s, _ := New(Options{OpenAge: -1})
	s.Add(1, postAt(t0, 0, 0))
	j := s.Plan(t0.Add(48 * time.Hour))
	if j == nil {
		t.Fatal("no job")
	}
	if s.Finish(j) == nil {
		t.Fatal("Finish before Run")
	}
	if s.Load(func(func(uint64, uint64) bool) {}, t0) == nil {
		t.Fatal("Load with a job pending")
	}
	j.Run()
	if j.Run() == nil {
		t.Fatal("Run twice")
	}
	if err := s.Finish(j); err != nil {
		t.Fatal(err)
	}
	if s.Finish(j) == nil {
		t.Fatal("Finish twice")
	}
}
