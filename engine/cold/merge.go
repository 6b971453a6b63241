package cold

import (
	"fmt"
	"math"
	"slices"

	"github.com/tally-dev/tally/engine"
)

// Source is a stream of posts in strictly increasing id order:
// *sealed.Iterator (an in-memory window), *FileIter (a cold file) and
// *SliceSource (a delta collected by the engine) are Sources.
type Source interface {
	Next() bool
	ID() uint64
	Counts() engine.Counts
	Err() error
}

// Sink receives merged posts in increasing id order; posts whose counts
// are all zero are included and the sink drops them (*sealed.Writer does).
type Sink interface {
	Add(id uint64, c engine.Counts) error
}

// Merge is the compaction of a sealed window with its hot delta: it
// gives w every id of base or delta, in order, with counts base +
// delta field by field — delta counts are signed — each result clamped to
// [0, math.MaxInt64], and posts whose five results are zero left out.
// base may be nil (no base). Merge is a pure function of its inputs: the
// engine runs it in the background while readers keep using base and the
// delta, and swaps in the result when it is complete.
//
// The clamp makes Merge agree with reading base + delta only when the
// engine keeps every field of base + delta within [0, MaxInt64] as it
// applies writes (the way counters clamp, applied at write time);
// otherwise a delta of -5 on a base of 3 would read as 0 before and after
// the merge but would also mask later increments.
func Merge(w Sink, base, delta Source) error {
	bok := base != nil && base.Next()
	dok := delta.Next()
	for bok || dok {
		var id uint64
		var c engine.Counts
		switch {
		case dok && (!bok || delta.ID() < base.ID()):
			id, c = delta.ID(), add(engine.Counts{}, delta.Counts())
		case bok && (!dok || base.ID() < delta.ID()):
			id, c = base.ID(), base.Counts()
		default: // same id
			id, c = base.ID(), add(base.Counts(), delta.Counts())
		}
		if bok && base.ID() == id {
			bok = base.Next()
		}
		if dok && delta.ID() == id {
			dok = delta.Next()
			if dok && delta.ID() <= id {
				return fmt.Errorf("cold: merge: delta ids not increasing: %d after %d", delta.ID(), id)
			}
		}
		if err := w.Add(id, c); err != nil {
			return fmt.Errorf("cold: merge: %w", err)
		}
	}
	if base != nil {
		if err := base.Err(); err != nil {
			return err
		}
	}
	return delta.Err()
}

func add(a, d engine.Counts) engine.Counts {
	return engine.Counts{
		Likes:     clampAdd(a.Likes, d.Likes),
		Comments:  clampAdd(a.Comments, d.Comments),
		Reposts:   clampAdd(a.Reposts, d.Reposts),
		Views:     clampAdd(a.Views, d.Views),
		Favorites: clampAdd(a.Favorites, d.Favorites),
	}
}

// clampAdd returns a+d within [0, MaxInt64], for a >= 0.
func clampAdd(a, d int64) int64 {
	switch {
	case d > 0 && a > math.MaxInt64-d:
		return math.MaxInt64
	case a+d < 0: // a >= 0, so a+d cannot overflow downwards
		return 0
	}
	return a + d
}

// SliceSource is a Source over a delta held in two parallel slices.
type SliceSource struct {
	ids    []uint64
	counts []engine.Counts
	i      int
}

// NewSliceSource returns a Source over ids[i] → counts[i], sorting both
// slices in place by id. Ids must be distinct.
func NewSliceSource(ids []uint64, counts []engine.Counts) *SliceSource {
	if len(ids) != len(counts) {
		panic("cold: NewSliceSource: slices of different lengths")
	}
	if !slices.IsSorted(ids) {
		perm := make([]int, len(ids))
		for i := range perm {
			perm[i] = i
		}
		slices.SortFunc(perm, func(a, b int) int {
			switch {
			case ids[a] < ids[b]:
				return -1
			case ids[a] > ids[b]:
				return 1
			}
			return 0
		})
		sids := make([]uint64, len(ids))
		sc := make([]engine.Counts, len(ids))
		for i, p := range perm {
			sids[i], sc[i] = ids[p], counts[p]
		}
		copy(ids, sids)
		copy(counts, sc)
	}
	return &SliceSource{ids: ids, counts: counts, i: -1}
}

// Next, ID, Counts and Err implement Source.
func (s *SliceSource) Next() bool            { s.i++; return s.i < len(s.ids) }
func (s *SliceSource) ID() uint64            { return s.ids[s.i] }
func (s *SliceSource) Counts() engine.Counts { return s.counts[s.i] }
func (s *SliceSource) Err() error            { return nil }
