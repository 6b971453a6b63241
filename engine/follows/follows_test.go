package follows

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestClasses(t *testing.T) {
	prev := 0
	for c := 1; c < nclass; c++ {
		cp := classCap(uint8(c))
		if cp <= prev {
			t.Fatalf("classCap(%d) = %d not above classCap(%d) = %d", c, cp, c-1, prev)
		}
		if prev >= 16 && float64(cp) > 1.126*float64(prev) {
			t.Fatalf("class %d: %d is more than an eighth above %d", c, cp, prev)
		}
		prev = cp
	}
	for n := 1; n <= classCap(nclass-1); n++ {
		c := classFor(n)
		if classCap(c) < n || classCap(c-1) >= n {
			t.Fatalf("classFor(%d) = %d (cap %d, below %d)", n, c, classCap(c), classCap(c-1))
		}
	}
	// The widest block: every pair a run of its own, every field 64 bits.
	var e entries
	for i := range maxBlock {
		e.a[i], e.b[i], e.v[i] = uint64(i)<<56|uint64(i), uint64(i)<<57, int64(i)<<56^int64(i)
	}
	e.n = maxBlock
	var enc encoder
	if words := (len(enc.encode(&e, 0, maxBlock)) + 7) / 8; words > classCap(nclass-1) {
		t.Fatalf("a block of %d words has no class", words)
	}
}

func TestBasics(t *testing.T) {
	s := New()
	if s.Has(1) || s.Following(1) != 0 || s.Contains(1, 2) || s.Unfollow(1, 2) || followerCount(t, s, 2) != 0 {
		t.Fatal("empty store has state")
	}
	if !s.Follow(1, 2, 10) || s.Follow(1, 2, 11) || !s.Follow(1, 3, 20) || !s.Follow(4, 3, -5) {
		t.Fatal("Follow results")
	}
	if !s.Has(1) || s.Following(1) != 2 || !s.Contains(1, 2) || s.Contains(1, 4) || s.Contains(2, 1) {
		t.Fatal("queries after Follow")
	}
	ts, ss := s.List(1, nil, nil)
	if !slices.Equal(ts, []uint64{2, 3}) || !slices.Equal(ss, []int64{10, 20}) {
		t.Fatalf("List = %v %v", ts, ss)
	}
	if fs := followers(t, s, 3, 0, 10); !slices.Equal(fs, []uint64{1, 4}) || followerCount(t, s, 3) != 2 {
		t.Fatalf("Followers(3) = %v", fs)
	}
	s.SetSnaps(1, func(us []uint64, snaps []int64) {
		for i, u := range us {
			snaps[i] = int64(u) * 100
		}
	})
	if ts, ss := s.List(1, nil, nil); !slices.Equal(ts, []uint64{2, 3}) || !slices.Equal(ss, []int64{200, 300}) {
		t.Fatalf("List after SetSnaps = %v %v", ts, ss)
	}
	if !s.Unfollow(1, 2) || s.Unfollow(1, 2) || !s.Unfollow(1, 3) {
		t.Fatal("Unfollow results")
	}
	if !s.Has(1) || s.Following(1) != 0 || s.Len() != 1 {
		t.Fatal("emptied list forgotten")
	}
	if err := s.Load(7, nil, nil); err != nil {
		t.Fatal(err)
	}
	s.Loaded()
	if !s.Has(7) {
		t.Fatal("Load of an empty list")
	}
	var got []string
	s.Range(func(v uint64, ts []uint64, ss []int64) bool {
		got = append(got, fmt.Sprint(v, ts, ss))
		return true
	})
	if want := []string{"1 [] []", "4 [3] [-5]", "7 [] []"}; !slices.Equal(got, want) {
		t.Fatalf("Range = %q, want %q", got, want)
	}
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
}

// model is the follow graph as maps: viewer -> followee -> snapshot; a
// viewer with an empty map has an emptied list.
type model map[uint64]map[uint64]int64

func (m model) follow(v, t uint64, snap int64) bool {
	if _, ok := m[v][t]; ok {
		return false
	}
	if m[v] == nil {
		m[v] = map[uint64]int64{}
	}
	m[v][t] = snap
	return true
}

// followers returns who follows whom, sorted.
func (m model) followers() map[uint64][]uint64 {
	out := map[uint64][]uint64{}
	for v, l := range m {
		for t := range l {
			out[t] = append(out[t], v)
		}
	}
	for _, fs := range out {
		slices.Sort(fs)
	}
	return out
}

func (m model) edges() int {
	n := 0
	for _, l := range m {
		n += len(l)
	}
	return n
}

// rangeOf renders what Range yields.
func rangeOf(s *Store) []string {
	var seq []string
	s.Range(func(v uint64, ts []uint64, ss []int64) bool {
		seq = append(seq, fmt.Sprint(v, ts, ss))
		return true
	})
	return seq
}

func (m model) rangeSeq() []string {
	var seq []string
	for _, v := range slices.Sorted(maps.Keys(m)) {
		ts := slices.Sorted(maps.Keys(m[v]))
		ss := make([]int64, len(ts))
		for i, t := range ts {
			ss[i] = m[v][t]
		}
		seq = append(seq, fmt.Sprint(v, ts, ss))
	}
	return seq
}

// compare checks s against m in every direction and through every read,
// then that a store loaded from Range in pieces holds the same.
func compare(t testing.TB, s *Store, m model) {
	t.Helper()
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
	if s.Len() != m.edges() {
		t.Fatalf("Len %d, want %d", s.Len(), m.edges())
	}
	want := m.rangeSeq()
	if got := rangeOf(s); !slices.Equal(got, want) {
		t.Fatalf("Range:\n%q\nwant\n%q", got, want)
	}
	for v, l := range m {
		if !s.Has(v) || s.Following(v) != len(l) {
			t.Fatalf("viewer %d: Has %v Following %d, want %d", v, s.Has(v), s.Following(v), len(l))
		}
		if fs := s.Followees(v, nil); !slices.Equal(fs, slices.Sorted(maps.Keys(l))) {
			t.Fatalf("Followees(%d) = %v", v, fs)
		}
	}
	for u, fs := range m.followers() {
		if n := followerCount(t, s, u); n != len(fs) {
			t.Fatalf("FollowerCount(%d) = %d, want %d", u, n, len(fs))
		}
		// Page through in small steps from the middle on.
		from := fs[len(fs)/2]
		var got []uint64
		for {
			page := followers(t, s, u, from, 7)
			got = append(got, page...)
			if len(page) < 7 {
				break
			}
			from = page[len(page)-1] + 1
		}
		if !slices.Equal(got, fs[len(fs)/2:]) {
			t.Fatalf("Followers(%d) from %d = %v, want %v", u, fs[len(fs)/2], got, fs[len(fs)/2:])
		}
	}
	s.Range(func(v uint64, ts []uint64, _ []int64) bool {
		if len(ts) == 0 {
			return true // an emptied list
		}
		from := ts[len(ts)/2]
		var got []uint64
		for {
			page := s.FolloweesPage(v, from, 7, nil)
			got = append(got, page...)
			if len(page) < 7 {
				break
			}
			from = page[len(page)-1] + 1
		}
		if !slices.Equal(got, ts[len(ts)/2:]) {
			t.Fatalf("FolloweesPage(%d) from %d = %v, want %v", v, ts[len(ts)/2], got, ts[len(ts)/2:])
		}
		return true
	})
	// Loaded into a store of each kind: the reverse direction built in
	// memory, and written to a cold file.
	for _, l := range []*Store{New(), NewCold(t.TempDir())} {
		s.Range(func(v uint64, ts []uint64, ss []int64) bool {
			for first := true; first || len(ts) > 0; first = false {
				n := min(len(ts), 50)
				if err := l.Load(v, ts[:n], ss[:n]); err != nil {
					t.Fatal(err)
				}
				ts, ss = ts[n:], ss[n:]
			}
			return true
		})
		if err := l.Loaded(); err != nil {
			t.Fatal(err)
		}
		if got := rangeOf(l); !slices.Equal(got, want) {
			t.Fatal("a store loaded from Range ranges differently")
		}
		if err := l.Check(); err != nil {
			t.Fatalf("loaded store: %v", err)
		}
		for u, fs := range m.followers() {
			if got := followers(t, l, u, 0, len(fs)+1); !slices.Equal(got, fs) {
				t.Fatalf("loaded store: Followers(%d) = %v, want %v", u, got, fs)
			}
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// loadFrom loads l with what s's Range yields, as a snapshot load does.
func loadFrom(t testing.TB, l, s *Store) {
	t.Helper()
	s.Range(func(v uint64, ts []uint64, ss []int64) bool {
		if err := l.Load(v, ts, ss); err != nil {
			t.Fatal(err)
		}
		return true
	})
	if err := l.Loaded(); err != nil {
		t.Fatal(err)
	}
}

// followers is Store.Followers, failing t on an error.
func followers(t testing.TB, s *Store, u, from uint64, max int) []uint64 {
	t.Helper()
	fs, err := s.Followers(u, from, max, nil)
	if err != nil {
		t.Fatal(err)
	}
	return fs
}

// followerCount is Store.FollowerCount, failing t on an error.
func followerCount(t testing.TB, s *Store, u uint64) int {
	t.Helper()
	n, err := s.FollowerCount(u)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// shape is a workload's id spaces.
type shape struct {
	name       string
	viewers    uint64
	targets    uint64
	spread     uint // targets are shifted left by this: large gaps
	celebs     int  // targets 0..celebs-1 are followed by most viewers
	removeUser bool
}

var shapes = []shape{
	{name: "few-long", viewers: 3, targets: 3000},
	{name: "many-short", viewers: 300, targets: 50, spread: 40},
	{name: "mid", viewers: 40, targets: 800, spread: 20, removeUser: true},
	{name: "celebs", viewers: 2000, targets: 400, celebs: 3, removeUser: true},
}

// TestModel runs random operations against the maps, comparing after
// every batch; compaction is made frequent.
func TestModel(t *testing.T) {
	defer func(g int) { minGarbage = g }(minGarbage)
	minGarbage = 64
	for i, sh := range shapes {
		t.Run(sh.name, func(t *testing.T) {
			runModel(t, uint64(i), sh, 30_000, 3000, false, false)
		})
	}
}

// TestFreeze is TestModel with a view frozen for half of every batch,
// ranged over and over on a goroutine of its own while the store takes the
// batch's changes: the view must keep yielding the lists as they were at
// the freeze, and the store must answer as the model does throughout.
func TestFreeze(t *testing.T) {
	defer func(g int) { minGarbage = g }(minGarbage)
	minGarbage = 64
	for i, sh := range shapes {
		t.Run(sh.name, func(t *testing.T) {
			runModel(t, uint64(i), sh, 12_000, 1500, true, false)
		})
	}
}

// frozen is a view out during runModel, ranged by a goroutine until stop.
type frozen struct {
	view   *Store
	want   []string
	edges  int
	stop   chan struct{}
	result chan error
}

func freezeModel(s *Store, m model) *frozen {
	f := &frozen{view: s.Freeze(), want: m.rangeSeq(), edges: m.edges(), stop: make(chan struct{}), result: make(chan error, 1)}
	go func() {
		for ranges := 1; ; ranges++ {
			if got := rangeOf(f.view); !slices.Equal(got, f.want) {
				f.result <- fmt.Errorf("range %d of the view:\n%q\nwant\n%q", ranges, got, f.want)
				return
			}
			select {
			case <-f.stop:
				f.result <- nil
				return
			default:
			}
		}
	}()
	return f
}

// thaw stops the view's goroutine, checks what it saw, and thaws s.
func (f *frozen) thaw(t testing.TB, s *Store) {
	t.Helper()
	close(f.stop)
	if err := <-f.result; err != nil {
		t.Fatal(err)
	}
	if f.view.Len() != f.edges {
		t.Fatalf("view Len %d, want %d", f.view.Len(), f.edges)
	}
	if err := s.Check(); err != nil { // the held slots accounted for
		t.Fatalf("frozen store: %v", err)
	}
	s.Thaw()
}

// runModel runs random operations against the maps. With freeze, a view
// is out for half of every batch (TestFreeze); with cold, the reverse
// direction is cold and merges run on a goroutine of their own while the
// store takes changes (TestColdModel).
func runModel(t testing.TB, seed uint64, sh shape, nops, batch int, freeze, cold bool) (scrubs int) {
	rng := rand.New(rand.NewPCG(seed, 42))
	s := New()
	if cold {
		s = NewCold(t.TempDir())
		defer s.Close()
	}
	m := model{}
	var view *frozen
	var merge *merging
	// erased holds the reverse pairs an erasure (or an unfollow of
	// everyone) removed and Scrub was told of, each with the op that
	// removed it; planned, those of them when the job under way was
	// planned, which its pass must leave in no byte of the file.
	erased, planned := map[pair]int{}, map[pair]int{}
	scrub := func(op int, u uint64) {
		if !cold {
			return
		}
		for t := range m[u] {
			erased[pair{t, u}] = op
		}
		for v, l := range m {
			if _, ok := l[u]; ok {
				erased[pair{u, v}] = op
			}
		}
	}
	posts := func(u uint64) int64 {
		if u>>sh.spread < uint64(sh.celebs) {
			return 1<<40 + int64(u) // a wide value among narrow ones
		}
		return int64(u*7) % 101
	}
	target := func() uint64 {
		if sh.celebs > 0 && rng.IntN(2) == 0 {
			return uint64(rng.IntN(sh.celebs)) << sh.spread
		}
		return rng.Uint64N(sh.targets) << sh.spread
	}
	for op := 0; op < nops; op++ {
		v := rng.Uint64N(sh.viewers)
		u := target()
		switch r := rng.IntN(100); {
		case r < 55:
			snap := rng.Int64N(1000) - 10
			if rng.IntN(50) == 0 {
				snap = math.MinInt64 + rng.Int64N(3)
			}
			if s.Follow(v, u, snap) != m.follow(v, u, snap) {
				t.Fatalf("op %d: Follow(%d, %d) disagrees", op, v, u)
			}
			delete(erased, pair{u, v})
		case r < 85:
			if l := m[v]; len(l) > 0 && rng.IntN(4) > 0 {
				u = slices.Collect(maps.Keys(l))[rng.IntN(len(l))]
			}
			_, in := m[v][u]
			if s.Unfollow(v, u) != in {
				t.Fatalf("op %d: Unfollow(%d, %d) = %v", op, v, u, !in)
			}
			delete(m[v], u)
		case r < 92:
			s.SetSnaps(v, func(us []uint64, snaps []int64) {
				for i, u := range us {
					snaps[i] = posts(u)
				}
			})
			for u := range m[v] {
				m[v][u] = posts(u)
			}
		case r < 93 && sh.removeUser:
			scrub(op, v)
			removeUser(t, s, m, v, 1+rng.IntN(40))
			s.Scrub(v)
		case r < 94:
			// Unfollow everyone: blocks shrink, merge and vanish. A
			// scrub of v then takes v's pairs out of the file's bytes.
			scrubbed := cold && rng.IntN(2) == 0
			for u := range m[v] {
				if !s.Unfollow(v, u) {
					t.Fatalf("op %d: mass Unfollow(%d, %d) = false", op, v, u)
				}
				delete(m[v], u)
				if scrubbed {
					erased[pair{u, v}] = op
				}
			}
			if scrubbed {
				s.Scrub(v)
			}
		default:
			_, in := m[v][u]
			if s.Contains(v, u) != in {
				t.Fatalf("op %d: Contains(%d, %d)", op, v, u)
			}
			var want, got int64
			for u, snap := range m[v] {
				want += max(posts(u)-snap, 0)
			}
			ts, ss := s.List(v, nil, nil)
			for i, u := range ts {
				got += max(posts(u)-ss[i], 0)
			}
			if got != want {
				t.Fatalf("op %d: feed %d, want %d", op, got, want)
			}
		}
		if freeze && op%batch == batch/2 {
			view = freezeModel(s, m)
		}
		if cold && op%(batch/8) == 0 {
			if merge == nil {
				merge = merge.step(t, s)
				if merge != nil {
					planned = maps.Clone(erased)
					if _, ok := merge.job.(*scrubJob); ok {
						scrubs++
					}
				}
			} else {
				merge = merge.step(t, s)
				checkScrubbed(t, s, func(a, b uint64) bool {
					at, ok := planned[pair{a, b}]
					return ok && erased[pair{a, b}] == at
				})
				maps.DeleteFunc(erased, func(p pair, at int) bool { return planned[p] == at })
			}
		}
		if op%batch == batch-1 {
			if view != nil {
				view.thaw(t, s)
				view = nil
			}
			compare(t, s, m)
		}
	}
	if view != nil {
		view.thaw(t, s)
	}
	for merge != nil {
		merge = merge.step(t, s)
	}
	if cold && s.cold.gen < 2 {
		t.Fatalf("%d cold files written, want merges", s.cold.gen)
	}
	compare(t, s, m)
	return scrubs
}

// removeUser erases u from s in steps of at most step edges, checking
// each step's removals against m, and from m.
func removeUser(t testing.TB, s *Store, m model, u uint64, step int) {
	t.Helper()
	want := map[[2]uint64]bool{}
	for t := range m[u] {
		want[[2]uint64{u, t}] = true
	}
	for v, l := range m {
		if _, ok := l[u]; ok {
			want[[2]uint64{v, u}] = true
		}
	}
	for steps := 0; ; steps++ {
		n := 0
		done := s.RemoveUser(u, step, func(v, t uint64) {
			if !want[[2]uint64{v, t}] {
				panic(fmt.Sprintf("RemoveUser(%d) removed %d -> %d", u, v, t))
			}
			delete(want, [2]uint64{v, t})
			n++
		})
		if n > step {
			t.Fatalf("RemoveUser(%d, %d) removed %d edges in a step", u, step, n)
		}
		if done {
			break
		}
		if n == 0 || steps > 1e6 {
			t.Fatalf("RemoveUser(%d) makes no progress", u)
		}
	}
	if len(want) > 0 {
		t.Fatalf("RemoveUser(%d) left %v", u, want)
	}
	delete(m, u)
	for _, l := range m {
		delete(l, u)
	}
	if s.Has(u) || followerCount(t, s, u) != 0 {
		t.Fatalf("RemoveUser(%d) left a list", u)
	}
}

func TestLoad(t *testing.T) {
	defer func(n int) { runPairs = n }(runPairs)
	runPairs = 100 // many runs to merge
	s := New()
	m := model{}
	// In Range's order, long lists in pieces, then out of order: an
	// unsorted list, a viewer below the last, a list added to.
	var ts []uint64
	var ss []int64
	for v := range uint64(30) {
		ts, ss = ts[:0], ss[:0]
		n := 3 * v
		if v%7 == 0 {
			n = 0
			m[v] = map[uint64]int64{}
		}
		for i := range n {
			u := v*1000 + i*i
			ts, ss = append(ts, u), append(ss, int64(i))
			m.follow(v, u, int64(i))
		}
		for first := true; first || len(ts) > 0; first = false {
			n := min(len(ts), 17)
			if err := s.Load(v, ts[:n], ss[:n]); err != nil {
				t.Fatal(err)
			}
			ts, ss = ts[n:], ss[n:]
		}
	}
	for _, piece := range []struct {
		v  uint64
		ts []uint64
	}{{5, []uint64{9, 3, 7}}, {2, []uint64{1, 99999}}, {100, []uint64{8, 1}}, {29, []uint64{5}}} {
		ss := make([]int64, len(piece.ts))
		for i, u := range piece.ts {
			ss[i] = int64(u)
			m.follow(piece.v, u, int64(u))
		}
		if err := s.Load(piece.v, piece.ts, ss); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Load(200, nil, nil); err != nil {
		t.Fatal(err)
	}
	m[200] = map[uint64]int64{}
	if err := s.Load(5, nil, nil); err != nil { // has a list: stays as it is
		t.Fatal(err)
	}
	s.Loaded()
	compare(t, s, m)
	// A load into a store with edges both ways merges with them.
	for i := range uint64(300) {
		if err := s.Load(500+i/10, []uint64{i}, []int64{1}); err != nil {
			t.Fatal(err)
		}
		m.follow(500+i/10, i, 1)
	}
	if s.Follow(1, 7, 3) != m.follow(1, 7, 3) { // finishes the load itself
		t.Fatal("Follow after Load")
	}
	compare(t, s, m)

	if err := s.Load(1, []uint64{7}, []int64{1}); !errors.Is(err, ErrDuplicate) {
		t.Fatalf("Load of a duplicate: %v", err)
	}
	if err := New().Load(2, []uint64{5, 6, 5}, []int64{1, 2, 3}); !errors.Is(err, ErrDuplicate) {
		t.Fatalf("Load of a duplicate within a piece: %v", err)
	}
	if err := New().Load(3, []uint64{1}, nil); err == nil {
		t.Fatal("Load with mismatched lengths")
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("a read during a load did not panic")
			}
		}()
		l := New()
		l.Load(1, []uint64{2}, []int64{0})
		l.Has(1)
	}()
}

// TestLongLists drives a celebrity's followers and a heavy follower's list
// through many splits and merges, with ids far apart and close together.
func TestLongLists(t *testing.T) {
	s := New()
	m := model{}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 20000; i++ {
		v, u := rng.Uint64N(5000)+10, uint64(1)
		if i%2 == 1 {
			v, u = 2, rng.Uint64()>>rng.IntN(64)
		}
		if rng.IntN(4) == 0 {
			_, in := m[v][u]
			if s.Unfollow(v, u) != in {
				t.Fatalf("step %d: Unfollow(%d, %d)", i, v, u)
			}
			delete(m[v], u)
		} else if s.Follow(v, u, int64(i)) != m.follow(v, u, int64(i)) {
			t.Fatalf("step %d: Follow(%d, %d)", i, v, u)
		}
	}
	compare(t, s, m)
	removeUser(t, s, m, 1, 1000)
	removeUser(t, s, m, 2, 333)
	compare(t, s, m)
}

func TestAllocs(t *testing.T) {
	s := New()
	for v := range uint64(100) {
		for u := range uint64(300) {
			s.Follow(v, u*13%1000, 1)
		}
	}
	ts, ss := make([]uint64, 0, 1000), make([]int64, 0, 1000)
	set := func(us []uint64, snaps []int64) {
		for i, u := range us {
			snaps[i] = int64(u)
		}
	}
	var sink int
	for name, fn := range map[string]func(){
		"Contains":      func() { _ = s.Contains(5, 999) },
		"List":          func() { ts, ss = s.List(5, ts[:0], ss[:0]) },
		"Followers":     func() { ts, _ = s.Followers(13, 0, 1000, ts[:0]) },
		"SetSnaps":      func() { s.SetSnaps(5, set) },
		"Following":     func() { sink += s.Following(5) },
		"FollowerCount": func() { n, _ := s.FollowerCount(13); sink += n },
		"Has":           func() { _ = s.Has(5) },
		// Steady state: the blocks' slots exist already.
		"Follow/Unfollow": func() { s.Follow(5, 5000, 1); s.Unfollow(5, 5000) },
	} {
		if a := testing.AllocsPerRun(100, fn); a != 0 {
			t.Errorf("%s: %v allocations", name, a)
		}
	}
}

// FuzzOps decodes operations from bytes and checks them against the
// model.
func FuzzOps(f *testing.F) {
	f.Add([]byte{0, 1, 2, 0, 1, 3, 1, 1, 2, 2, 1, 0, 4, 1, 0})
	f.Add(bytesOf(1, 600))
	f.Add(bytesOf(2, 3000))
	f.Fuzz(func(t *testing.T, b []byte) {
		defer func(g int) { minGarbage = g }(minGarbage)
		minGarbage = 8
		s := New()
		m := model{}
		for len(b) >= 3 {
			op, v, u := b[0]%5, uint64(b[1]%4), uint64(b[2])
			b = b[3:]
			switch op {
			case 0, 1:
				if s.Follow(v, u, int64(op)) != m.follow(v, u, int64(op)) {
					t.Fatalf("Follow(%d, %d)", v, u)
				}
			case 2:
				_, in := m[v][u]
				if s.Unfollow(v, u) != in {
					t.Fatalf("Unfollow(%d, %d)", v, u)
				}
				delete(m[v], u)
			case 3:
				s.SetSnaps(v, func(us []uint64, snaps []int64) {
					for i, x := range us {
						snaps[i] = int64(x ^ u)
					}
				})
				for x := range m[v] {
					m[v][x] = int64(x ^ u)
				}
			case 4:
				removeUser(t, s, m, u%8, 1+int(v))
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

// TestSetSnapsInPlace checks both ways SetSnaps stores snapshots: new
// values that fit the block's fields (an exception's included) are
// written where the old ones were, so the values column keeps its width,
// wider than the encoder would now choose; a wider one makes the block
// encode again.
func TestSetSnapsInPlace(t *testing.T) {
	s := New()
	m := model{}
	for u := range uint64(100) {
		s.Follow(1, u*3, int64(u))
		m.follow(1, u*3, int64(u))
	}
	s.Follow(1, 1000, 1<<30) // an exception in the values column
	m.follow(1, 1000, 1<<30)
	width := func() uint8 {
		var blk block
		s.fwd.parse(s.fwd.entry(pos{}), &blk)
		return blk.cols[colValues].w
	}
	set := func(f func(u uint64) int64) {
		s.SetSnaps(1, func(us []uint64, snaps []int64) {
			for i, u := range us {
				snaps[i] = f(u)
			}
		})
		for u := range m[1] {
			m[1][u] = f(u)
		}
		compare(t, s, m)
	}
	if width() != 7 {
		t.Fatalf("values in 7 bits expected, got %d", width())
	}
	set(func(u uint64) int64 {
		if u == 1000 {
			return 1 << 30
		}
		return int64(u % 2)
	})
	if width() != 7 {
		t.Fatalf("snapshots that fit were not written in place: width %d", width())
	}
	set(func(u uint64) int64 { return int64(u % 3) }) // small at the exception's place too
	if width() != 7 {
		t.Fatalf("snapshots that fit were not written in place: width %d", width())
	}
	set(func(u uint64) int64 { // too wide for the exception's bits
		if u == 1000 {
			return 1 << 40
		}
		return int64(u % 2)
	})
	if width() != 1 {
		t.Fatalf("a block encoded again has values %d bits wide", width())
	}
	set(func(u uint64) int64 { return int64(u) << 20 }) // wider
	if width() <= 20 {
		t.Fatalf("wider snapshots in %d bits", width())
	}
}
