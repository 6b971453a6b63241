package follows

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
)

// followee is the embedded engine's entry today; the model and the memory
// peer use it.
type followee struct {
	user uint64
	snap int64
}

func TestClasses(t *testing.T) {
	prev := -1
	for c := 0; c < nclass; c++ {
		cp := classCap(uint8(c))
		if cp <= prev {
			t.Fatalf("classCap(%d) = %d not above classCap(%d) = %d", c, cp, c-1, prev)
		}
		if c > 0 && float64(cp) > 1.26*float64(max(prev, 8)) && prev >= 8 {
			t.Fatalf("class %d: %d is more than 25%% above %d", c, cp, prev)
		}
		prev = cp
		if cp > 1<<33 {
			break
		}
	}
	check := func(n int) {
		c := classFor(n)
		if classCap(c) < n || c > 0 && classCap(c-1) >= n {
			t.Fatalf("classFor(%d) = %d (cap %d, below %d)", n, c, classCap(c), classCap(c-1))
		}
	}
	for n := 0; n < 1<<17; n++ {
		check(n)
	}
	for n := 1 << 17; n < 1<<32; n = n*9/8 + 1 {
		check(n)
	}
	check(1<<32 - 1)
	if classFor(1<<32-1) >= nclass {
		t.Fatal("nclass too small")
	}
}

func TestBasics(t *testing.T) {
	s := New(0)
	if s.Has(1) || s.Following(1) != 0 || s.Contains(1, 2) || s.Unfollow(1, 2) {
		t.Fatal("empty store has state")
	}
	if !s.Follow(1, 2, 10) || s.Follow(1, 2, 11) || !s.Follow(1, 3, 20) {
		t.Fatal("Follow results")
	}
	if !s.Has(1) || s.Following(1) != 2 || !s.Contains(1, 2) || s.Contains(1, 4) || s.Contains(2, 1) {
		t.Fatal("queries after Follow")
	}
	ts, ss := s.List(1)
	if !slices.Equal(ts, []uint64{2, 3}) || !slices.Equal(ss, []int64{10, 20}) {
		t.Fatalf("List = %v %v", ts, ss)
	}
	s.SetSnaps(1, func(u uint64) int64 { return int64(u) * 100 })
	if ts, ss := s.List(1); !slices.Equal(ts, []uint64{2, 3}) || !slices.Equal(ss, []int64{200, 300}) {
		t.Fatalf("List after SetSnaps = %v %v", ts, ss)
	}
	if !s.Unfollow(1, 2) || s.Unfollow(1, 2) || !s.Unfollow(1, 3) {
		t.Fatal("Unfollow results")
	}
	if !s.Has(1) || s.Following(1) != 0 || s.Len() != 0 || s.Viewers() != 1 {
		t.Fatal("emptied list forgotten")
	}
	if h, _ := s.heads.Get(1); h.blk != 0 {
		t.Fatal("emptied list keeps its block")
	}
	if err := s.Load(7, nil, nil); err != nil || !s.Has(7) || s.Viewers() != 2 {
		t.Fatal("Load of an empty list")
	}
	n := 0
	s.Range(func(v uint64, ts []uint64, ss []int64) bool {
		if v != []uint64{1, 7}[n] || len(ts) != 0 || len(ss) != 0 {
			t.Fatalf("Range item %d: %d %v %v", n, v, ts, ss)
		}
		n++
		return true
	})
}

// TestLongList drives one list through many merges of its tail and checks
// the layout invariant and membership after every step.
func TestLongList(t *testing.T) {
	s := New(1)
	rng := rand.New(rand.NewPCG(1, 2))
	in := map[uint64]bool{}
	for i := 0; i < 20000; i++ {
		u := rng.Uint64N(30000)
		if rng.IntN(4) == 0 {
			if s.Unfollow(9, u) != in[u] {
				t.Fatalf("step %d: Unfollow(%d) disagrees", i, u)
			}
			delete(in, u)
		} else {
			if s.Follow(9, u, int64(u)) == in[u] {
				t.Fatalf("step %d: Follow(%d) disagrees", i, u)
			}
			in[u] = true
		}
		if i%97 == 0 {
			checkInvariants(t, s)
			for range 20 {
				u := rng.Uint64N(30000)
				if s.Contains(9, u) != in[u] {
					t.Fatalf("step %d: Contains(%d) disagrees", i, u)
				}
			}
		}
	}
	if s.Following(9) != len(in) {
		t.Fatalf("Following = %d, want %d", s.Following(9), len(in))
	}
}

// checkInvariants checks every header, the blocks' disjointness and the
// garbage accounting.
func checkInvariants(t testing.TB, s *Store) {
	t.Helper()
	owner := make([]int8, len(s.arena)) // 1 live, 2 free
	mark := func(off, w int, v int8) {
		for i := off; i < off+w; i++ {
			if owner[i] != 0 {
				t.Fatalf("word %d in two blocks", i)
			}
			owner[i] = v
		}
	}
	entries := 0
	s.heads.Range(func(v uint64, h header) bool {
		c := h.class()
		if int(h.n) > classCap(c) || h.sorted > h.n {
			t.Fatalf("viewer %d: header %+v", v, h)
		}
		if c != 0 {
			mark(h.off(), 2*classCap(c), 1)
		}
		ts, _ := s.block(&h)
		k := min(int(h.n), 1)
		for k < int(h.n) && ts[k] > ts[k-1] {
			k++
		}
		if k != int(h.sorted) || int(h.n)-k > tailMax {
			t.Fatalf("viewer %d: sorted %d, longest increasing prefix %d, n %d", v, h.sorted, k, h.n)
		}
		seen := map[uint64]bool{}
		for _, u := range ts[:h.n] {
			if seen[u] {
				t.Fatalf("viewer %d: %d twice", v, u)
			}
			seen[u] = true
		}
		entries += int(h.n)
		return true
	})
	garbage := 0
	for c := range nclass {
		for f := s.free[c]; f != 0; f = s.arena[f-1] {
			mark(int(f-1), 2*classCap(uint8(c)), 2)
			garbage += 2 * classCap(uint8(c))
		}
	}
	if garbage != s.garbage || entries != s.entries {
		t.Fatalf("garbage %d, counted %d; entries %d, counted %d", s.garbage, garbage, s.entries, entries)
	}
	for i, o := range owner {
		if o == 0 {
			t.Fatalf("word %d of %d belongs to no block", i, len(owner))
		}
	}
}

// model is the embedded engine's representation today.
type model map[uint64][]followee

// compare checks s against m: same viewers, same lists as sets, same
// totals; Range in increasing viewer order; and that a store loaded from
// Range yields exactly the same sequence.
func compare(t testing.TB, s *Store, m model) {
	t.Helper()
	checkInvariants(t, s)
	total := 0
	for v, fs := range m {
		total += len(fs)
		if !s.Has(v) || s.Following(v) != len(fs) {
			t.Fatalf("viewer %d: Has %v Following %d, want %d", v, s.Has(v), s.Following(v), len(fs))
		}
		ts, ss := s.List(v)
		got := make([]followee, len(ts))
		for i := range ts {
			got[i] = followee{ts[i], ss[i]}
		}
		want := slices.Clone(fs)
		byUser := func(a, b followee) int { return cmp.Compare(a.user, b.user) }
		slices.SortFunc(got, byUser)
		slices.SortFunc(want, byUser)
		if !slices.Equal(got, want) {
			t.Fatalf("viewer %d: list %v, want %v", v, got, want)
		}
	}
	if s.Len() != total || s.Viewers() != len(m) {
		t.Fatalf("Len %d Viewers %d, want %d %d", s.Len(), s.Viewers(), total, len(m))
	}
	want := slices.Sorted(maps.Keys(m))
	var seq []string
	i := 0
	l := New(0)
	s.Range(func(v uint64, ts []uint64, ss []int64) bool {
		if i >= len(want) || v != want[i] {
			t.Fatalf("Range item %d: viewer %d", i, v)
		}
		i++
		seq = append(seq, fmt.Sprint(v, ts, ss))
		// Load in pieces, as the snapshot reader does with long lists.
		for first := true; first || len(ts) > 0; first = false {
			n := min(len(ts), 50)
			if err := l.Load(v, ts[:n], ss[:n]); err != nil {
				t.Fatal(err)
			}
			ts, ss = ts[n:], ss[n:]
		}
		return true
	})
	if i != len(want) {
		t.Fatalf("Range visited %d viewers, want %d", i, len(want))
	}
	var seq2 []string
	l.Range(func(v uint64, ts []uint64, ss []int64) bool {
		seq2 = append(seq2, fmt.Sprint(v, ts, ss))
		return true
	})
	if !slices.Equal(seq, seq2) {
		t.Fatal("a store loaded from Range ranges differently")
	}
	checkInvariants(t, l)
}

// TestModel runs random operations against the map-of-slices model,
// comparing after every batch. Small viewer and target ranges make long
// lists, repeats and misses; compaction is made frequent.
func TestModel(t *testing.T) {
	defer func(g int) { minGarbage = g }(minGarbage)
	minGarbage = 64
	for seed := range uint64(4) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			runModel(t, seed, 40_000, 300)
		})
	}
}

func runModel(t testing.TB, seed uint64, nops, batch int) {
	rng := rand.New(rand.NewPCG(seed, 42))
	s := New(0)
	m := model{}
	nviewers := []uint64{3, 30, 300}[seed%3]
	ntargets := []uint64{50, 400, 3000}[seed%3]
	posts := func(u uint64) int64 { return int64(u*7) % 101 }
	for op := 0; op < nops; op++ {
		v := rng.Uint64N(nviewers)
		u := rng.Uint64N(ntargets) << 20 // spread over the key space
		switch r := rng.IntN(100); {
		case r < 55:
			snap := rng.Int64N(1000) - 10
			fs, _ := m[v]
			dup := slices.ContainsFunc(fs, func(f followee) bool { return f.user == u })
			if s.Follow(v, u, snap) == dup {
				t.Fatalf("op %d: Follow(%d, %d) = %v", op, v, u, !dup)
			}
			if !dup {
				m[v] = append(fs, followee{u, snap})
			}
		case r < 90:
			fs := m[v]
			if len(fs) > 0 && rng.IntN(4) > 0 {
				u = fs[rng.IntN(len(fs))].user
			}
			i := slices.IndexFunc(fs, func(f followee) bool { return f.user == u })
			if s.Unfollow(v, u) != (i >= 0) {
				t.Fatalf("op %d: Unfollow(%d, %d) = %v", op, v, u, i < 0)
			}
			if i >= 0 {
				m[v] = slices.Delete(fs, i, i+1)
			}
		case r < 95:
			s.SetSnaps(v, posts)
			for i := range m[v] {
				m[v][i].snap = posts(m[v][i].user)
			}
		case r < 97:
			// Unfollow everyone: shrinks to no block, makes garbage.
			for _, f := range m[v] {
				if !s.Unfollow(v, f.user) {
					t.Fatalf("op %d: mass Unfollow(%d, %d) = false", op, v, f.user)
				}
			}
			if _, ok := m[v]; ok {
				m[v] = m[v][:0]
			}
		default:
			if s.Contains(v, u) != slices.ContainsFunc(m[v], func(f followee) bool { return f.user == u }) {
				t.Fatalf("op %d: Contains(%d, %d)", op, v, u)
			}
			// The feed sum, as state.unread computes it.
			var want, got int64
			for _, f := range m[v] {
				want += max(posts(f.user)-f.snap, 0)
			}
			ts, ss := s.List(v)
			for i, u := range ts {
				got += max(posts(u)-ss[i], 0)
			}
			if got != want {
				t.Fatalf("op %d: feed %d, want %d", op, got, want)
			}
		}
		if op%batch == batch-1 {
			compare(t, s, m)
		}
	}
	compare(t, s, m)
}

func TestLoad(t *testing.T) {
	s := New(0)
	// An insertion order other than Range's: longer than the tail bound, so
	// Load must sort as it goes.
	var ts []uint64
	var ss []int64
	for i := range 500 {
		ts = append(ts, uint64((i*7919)%1000))
		ss = append(ss, int64(i))
	}
	if err := s.Load(1, ts[:300], ss[:300]); err != nil {
		t.Fatal(err)
	}
	if err := s.Load(1, ts[300:], ss[300:]); err != nil {
		t.Fatal(err)
	}
	checkInvariants(t, s)
	for i, u := range ts {
		if !s.Contains(1, u) {
			t.Fatalf("lost %d", u)
		}
		var snap int64 = -1
		lt, ls := s.List(1)
		if k := slices.Index(lt, u); k >= 0 {
			snap = ls[k]
		}
		if snap != ss[i] {
			t.Fatalf("snap of %d = %d, want %d", u, snap, ss[i])
		}
	}
	err := s.Load(1, ts[10:11], ss[10:11])
	if !errors.Is(err, ErrDuplicate) {
		t.Fatalf("Load of a duplicate: %v", err)
	}
	if err := s.Load(2, []uint64{5, 6, 5}, []int64{1, 2, 3}); !errors.Is(err, ErrDuplicate) {
		t.Fatalf("Load of a duplicate within a piece: %v", err)
	}
	if err := s.Load(3, []uint64{1}, nil); err == nil {
		t.Fatal("Load with mismatched lengths")
	}
}

func TestAllocs(t *testing.T) {
	s := New(100)
	for v := range uint64(100) {
		for u := range uint64(300) {
			s.Follow(v, u*13%1000, 1)
		}
	}
	var sink int64
	posts := func(u uint64) int64 { return int64(u) }
	for name, fn := range map[string]func(){
		"Contains":  func() { _ = s.Contains(5, 999) },
		"List":      func() { ts, _ := s.List(5); sink += int64(len(ts)) },
		"SetSnaps":  func() { s.SetSnaps(5, posts) },
		"Following": func() { sink += int64(s.Following(5)) },
		// Steady state: the block of this size class exists already.
		"Follow/Unfollow": func() { s.Follow(5, 5000, 1); s.Unfollow(5, 5000) },
	} {
		if a := testing.AllocsPerRun(100, fn); a != 0 {
			t.Errorf("%s: %v allocations", name, a)
		}
	}
}

// FuzzOps decodes operations from bytes and checks them against the model.
func FuzzOps(f *testing.F) {
	f.Add([]byte{0, 1, 2, 0, 1, 3, 1, 1, 2, 2, 1, 0})
	f.Add(bytesOf(1, 600))
	f.Fuzz(func(t *testing.T, b []byte) {
		defer func(g int) { minGarbage = g }(minGarbage)
		minGarbage = 8
		s := New(0)
		m := model{}
		for len(b) >= 3 {
			op, v, u := b[0]%4, uint64(b[1]%4), uint64(b[2])
			b = b[3:]
			fs := m[v]
			i := slices.IndexFunc(fs, func(f followee) bool { return f.user == u })
			switch op {
			case 0, 1:
				if s.Follow(v, u, int64(op)) != (i < 0) {
					t.Fatalf("Follow(%d, %d)", v, u)
				}
				if i < 0 {
					m[v] = append(fs, followee{u, int64(op)})
				}
			case 2:
				if s.Unfollow(v, u) != (i >= 0) {
					t.Fatalf("Unfollow(%d, %d)", v, u)
				}
				if i >= 0 {
					m[v] = slices.Delete(fs, i, i+1)
				}
			case 3:
				s.SetSnaps(v, func(x uint64) int64 { return int64(x ^ u) })
				for i := range fs {
					fs[i].snap = int64(fs[i].user ^ u)
				}
			}
		}
		compare(t, s, m)
	})
}

func bytesOf(seed uint64, n int) []byte {
	rng := rand.New(rand.NewPCG(seed, 0))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}
