package cold

import (
	"errors"
	"math"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/sealed"
)

// randomDelta makes a delta over some of base's ids and some new ones,
// with increments, decrements past zero and saturating additions, and
// the model of the merged result.
func randomDelta(s *testSet, seed uint64) (ids []uint64, d []engine.Counts, want map[uint64]engine.Counts) {
	rng := rand.New(rand.NewPCG(seed, 1))
	want = map[uint64]engine.Counts{}
	for id, c := range s.want {
		want[id] = c
	}
	seen := map[uint64]bool{}
	for range len(s.all) / 3 {
		var id uint64
		switch rng.IntN(3) {
		case 0: // an id of the base, stored or not
			id = s.all[rng.IntN(len(s.all))]
		case 1: // a new id between base ids
			id = s.all[rng.IntN(len(s.all))] + 1 + uint64(rng.IntN(100))
		default: // outside the base's range
			id = s.all[len(s.all)-1] + 1 + uint64(rng.IntN(1<<30))
		}
		if seen[id] {
			continue
		}
		seen[id] = true
		var c engine.Counts
		base := want[id]
		pick := func(b int64) int64 {
			switch rng.IntN(6) {
			case 0:
				return 0
			case 1:
				return -b // back to exactly zero
			case 2:
				return -b - 1 - int64(rng.IntN(5)) // past zero: clamps
			case 3:
				return math.MaxInt64 // saturates
			}
			return int64(rng.IntN(1000))
		}
		c.Likes, c.Comments, c.Reposts, c.Views, c.Favorites =
			pick(base.Likes), pick(base.Comments), pick(base.Reposts), pick(base.Views), pick(base.Favorites)
		ids = append(ids, id)
		d = append(d, c)
		r := add(base, c)
		if r.IsZero() {
			delete(want, id)
		} else {
			want[id] = r
		}
	}
	return ids, d, want
}

// mergeWindow is Merge into a new in-memory window, as the engine's
// compaction of a sealed window does (engine/postcounts, buildMerged).
func mergeWindow(base *sealed.Window, delta Source, opts sealed.Options) (*sealed.Window, error) {
	var src Source
	if base != nil {
		src = base.Iter()
	}
	errStopped := errors.New("merge stopped by sealed.Build")
	var merr error
	w, err := sealed.Build(func(yield func(uint64, engine.Counts) bool) {
		merr = Merge(sinkFunc(func(id uint64, c engine.Counts) error {
			if !yield(id, c) {
				return errStopped
			}
			return nil
		}), src, delta)
	}, opts)
	if merr != nil && !errors.Is(merr, errStopped) {
		return nil, merr
	}
	return w, err
}

type sinkFunc func(uint64, engine.Counts) error

func (f sinkFunc) Add(id uint64, c engine.Counts) error { return f(id, c) }

// mergeFile is Merge into a new file at path, written atomically as the
// engine's compaction to a cold file does. path may be base's own name.
func mergeFile(path string, base *File, delta Source, opts sealed.Options) error {
	var src Source
	if base != nil {
		src = base.Iter()
	}
	return CreateWindow(path, opts, func(w *sealed.Writer) error {
		return Merge(w, src, delta)
	})
}

func checkMerged(t *testing.T, w *sealed.Window, want map[uint64]engine.Counts) {
	t.Helper()
	if w.Len() != len(want) {
		t.Fatalf("merged window has %d posts, want %d", w.Len(), len(want))
	}
	for id, c := range w.All() {
		if want[id] != c {
			t.Fatalf("merged %d = %+v, want %+v", id, c, want[id])
		}
	}
}

func TestMergeWindow(t *testing.T) {
	s := newSet(t, 30000, 11, sealed.Options{})
	ids, d, want := randomDelta(s, 1)
	merged, err := mergeWindow(s.win, NewSliceSource(ids, d), sealed.Options{})
	if err != nil {
		t.Fatal(err)
	}
	checkMerged(t, merged, want)
	data, _ := merged.MarshalBinary()
	if _, err := sealed.Unmarshal(data); err != nil {
		t.Fatalf("merged window does not verify: %v", err)
	}
	// The base is untouched: Merge is pure.
	for id, c := range s.want {
		if s.win.Get(id) != c {
			t.Fatal("Merge changed its base")
		}
	}
	// No base: the delta alone, clamped.
	ids2, d2, _ := randomDelta(s, 2)
	only := map[uint64]engine.Counts{}
	for i, id := range ids2 {
		if c := add(engine.Counts{}, d2[i]); !c.IsZero() {
			only[id] = c
		}
	}
	merged, err = mergeWindow(nil, NewSliceSource(ids2, d2), sealed.Options{})
	if err != nil {
		t.Fatal(err)
	}
	checkMerged(t, merged, only)
	// An empty delta gives the base back.
	merged, err = mergeWindow(s.win, NewSliceSource(nil, nil), sealed.Options{})
	if err != nil {
		t.Fatal(err)
	}
	checkMerged(t, merged, s.want)
}

func TestMergeFile(t *testing.T) {
	s := newSet(t, 30000, 12, sealed.Options{})
	dir := t.TempDir()
	path := filepath.Join(dir, "w.win")
	if err := writeWindow(path, s.win); err != nil {
		t.Fatal(err)
	}
	cache := NewCache(256 << 10)
	base, err := Open(path, cache)
	if err != nil {
		t.Fatal(err)
	}
	defer base.Close()
	ids, d, want := randomDelta(s, 3)
	// Compact in place: the new file replaces the old under its name while
	// the open base keeps reading the old one.
	if err := mergeFile(path, base, NewSliceSource(ids, d), sealed.Options{}); err != nil {
		t.Fatal(err)
	}
	for _, id := range s.all[:2000] {
		if c, err := base.Get(id); err != nil || c != s.want[id] {
			t.Fatalf("old file after compaction: %d = %+v, %v", id, c, err)
		}
	}
	nf, err := Open(path, cache)
	if err != nil {
		t.Fatal(err)
	}
	defer nf.Close()
	if err := nf.Verify(); err != nil {
		t.Fatal(err)
	}
	if nf.Len() != len(want) {
		t.Fatalf("compacted file has %d posts, want %d", nf.Len(), len(want))
	}
	for id, c := range want {
		if got, err := nf.Get(id); err != nil || got != c {
			t.Fatalf("compacted %d = %+v, %v; want %+v", id, got, err, c)
		}
	}
}

func TestMergeRejectsUnsortedDelta(t *testing.T) {
	s := newSet(t, 2000, 13, sealed.Options{})
	src := &SliceSource{ids: []uint64{5, 3}, counts: []engine.Counts{{Likes: 1}, {Likes: 1}}, i: -1}
	_, err := mergeWindow(s.win, src, sealed.Options{})
	if err == nil || !strings.Contains(err.Error(), "not increasing") {
		t.Fatalf("unsorted delta: %v", err)
	}
	// NewSliceSource sorts.
	ids := []uint64{9, 2, 7}
	cs := []engine.Counts{{Likes: 9}, {Likes: 2}, {Likes: 7}}
	w, err := mergeWindow(nil, NewSliceSource(ids, cs), sealed.Options{})
	if err != nil || w.Get(2).Likes != 2 || w.Get(7).Likes != 7 || w.Get(9).Likes != 9 {
		t.Fatalf("sorted delta: %v", err)
	}
}

func TestClampAdd(t *testing.T) {
	for _, tc := range []struct{ a, d, want int64 }{
		{0, 0, 0}, {5, -3, 2}, {5, -5, 0}, {5, -6, 0}, {0, math.MinInt64, 0},
		{math.MaxInt64, 1, math.MaxInt64}, {1, math.MaxInt64, math.MaxInt64}, {math.MaxInt64, math.MinInt64, 0},
	} {
		if got := clampAdd(tc.a, tc.d); got != tc.want {
			t.Errorf("clampAdd(%d, %d) = %d, want %d", tc.a, tc.d, got, tc.want)
		}
	}
}
