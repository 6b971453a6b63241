package follows

import (
	"cmp"
	"container/heap"
	"errors"
	"fmt"
	"slices"

	"github.com/tally-dev/tally/engine/bitpack"
)

// ErrDuplicate is returned by Load for a target listed twice in one
// viewer's list: a damaged snapshot.
var ErrDuplicate = errors.New("follows: duplicate followee")

// runPairs bounds the reverse edges a load holds unpacked (16 bytes each)
// before it sorts them into a packed run. A variable so that tests can
// make many runs.
var runPairs = 1 << 20

// loader is a bulk load under way. Lists in Range's order append to the
// forward direction in full blocks; the reverse edges are sorted in
// batches of runPairs into packed runs, which Loaded merges into the
// reverse direction: O(edges log runs) for the load, where inserting each
// reverse edge would decode and encode a block per edge. The runs are
// packed as the reverse direction is, so a load holds at most twice the
// reverse direction's bytes (the runs and the merge's output, during the
// merge) and 32 bytes a pending edge.
type loader struct {
	fwd            builder
	lastA, lastB   uint64 // the forward direction's greatest pair
	hasLast        bool
	pending, spare []pair
	// ordered: pending came in increasing (viewer, followee) order, so
	// a stable sort by followee orders it.
	ordered bool
	runs    []*pairs
	piece   []pair
	ts      []uint64
	ss      []int64
}

// pair is a reverse edge (followee, viewer) waiting to be sorted, or a
// followee and its snapshot in a piece being sorted.
type pair struct{ a, b uint64 }

// Load adds targets with their snaps to viewer's list, creating the list
// (empty if targets is) when viewer has none: it is how a snapshot is read
// back, possibly one piece of a long list at a time. Lists in the order
// Range yielded them append to the packed form directly; any other order
// (an unsorted list, a viewer out of order) is accepted, at the cost of a
// block change per edge. A target already in the list is an error wrapping
// ErrDuplicate, after which the store must be discarded. Loaded must
// follow the last Load before the store is read; a change calls it
// itself.
func (s *Store) Load(viewer uint64, targets []uint64, snaps []int64) error {
	if len(targets) != len(snaps) {
		return fmt.Errorf("follows: Load of %d targets with %d snapshots", len(targets), len(snaps))
	}
	lo := s.load
	if lo == nil {
		lo = s.startLoad()
	}
	if !increasing(targets) {
		targets, snaps = lo.sortPiece(targets, snaps)
		for i := 1; i < len(targets); i++ {
			if targets[i] == targets[i-1] {
				return fmt.Errorf("%w: viewer %d, followee %d", ErrDuplicate, viewer, targets[i])
			}
		}
	}
	if len(targets) == 0 {
		if lo.hasLast && viewer <= lo.lastA {
			lo.fwd.flush()
			if s.fwd.has(viewer) {
				return nil
			}
		}
		s.empties.Put(viewer, struct{}{})
		return nil
	}
	s.empties.Delete(viewer)
	last := targets[len(targets)-1]
	if !lo.hasLast || less(lo.lastA, lo.lastB, viewer, targets[0]) {
		for i, t := range targets {
			lo.fwd.add(viewer, t, snaps[i])
			lo.pending = append(lo.pending, pair{t, viewer})
		}
		lo.lastA, lo.lastB, lo.hasLast = viewer, last, true
	} else {
		lo.fwd.flush()
		for i, t := range targets {
			if !s.fwd.insert(viewer, t, snaps[i]) {
				return fmt.Errorf("%w: viewer %d, followee %d", ErrDuplicate, viewer, t)
			}
			lo.pending = append(lo.pending, pair{t, viewer})
		}
		lo.ordered = false
		if less(lo.lastA, lo.lastB, viewer, last) {
			lo.lastA, lo.lastB = viewer, last
		}
	}
	if len(lo.pending) >= runPairs {
		lo.cut()
	}
	return nil
}

func (s *Store) startLoad() *loader {
	lo := &loader{fwd: builder{p: &s.fwd}, ordered: true}
	if np := len(s.fwd.pages); np > 0 {
		var e entries
		s.fwd.decode(pos{np - 1, s.fwd.pages[np-1].n - 1}, &e, &s.fwd.enc.cols)
		lo.lastA, lo.lastB, lo.hasLast = e.a[e.n-1], e.b[e.n-1], true
	}
	s.load = lo
	return lo
}

func increasing(ts []uint64) bool {
	for i := 1; i < len(ts); i++ {
		if ts[i] <= ts[i-1] {
			return false
		}
	}
	return true
}

// sortPiece returns targets and snaps sorted by target, in lo's scratch.
func (lo *loader) sortPiece(targets []uint64, snaps []int64) ([]uint64, []int64) {
	lo.piece = lo.piece[:0]
	for i, t := range targets {
		lo.piece = append(lo.piece, pair{t, uint64(snaps[i])})
	}
	slices.SortFunc(lo.piece, func(x, y pair) int { return cmp.Compare(x.a, y.a) })
	lo.ts, lo.ss = lo.ts[:0], lo.ss[:0]
	for _, p := range lo.piece {
		lo.ts, lo.ss = append(lo.ts, p.a), append(lo.ss, int64(p.b))
	}
	return lo.ts, lo.ss
}

// cut sorts the pending reverse edges into a packed run.
func (lo *loader) cut() {
	ps := lo.pending
	if lo.ordered {
		if cap(lo.spare) < len(ps) {
			lo.spare = make([]pair, len(ps))
		}
		bitpack.SortByKey(ps, func(p pair) uint64 { return p.a }, lo.spare[:cap(lo.spare)])
	} else {
		slices.SortFunc(ps, func(x, y pair) int {
			return cmp.Or(cmp.Compare(x.a, y.a), cmp.Compare(x.b, y.b))
		})
	}
	run := &pairs{}
	bd := &builder{p: run}
	for _, p := range ps {
		bd.add(p.a, p.b, 0)
	}
	bd.flush()
	lo.runs = append(lo.runs, run)
	lo.pending, lo.ordered = lo.pending[:0], true
}

// Loaded finishes a bulk load: the forward direction's last block is
// written and the reverse direction is built. It does nothing when no
// load is under way. It fails only when a cold store (NewCold) cannot
// write its file; the store then has no reverse direction and must be
// discarded.
func (s *Store) Loaded() error {
	lo := s.load
	if lo == nil {
		return nil
	}
	lo.fwd.flush()
	if len(lo.pending) > 0 {
		lo.cut()
	}
	s.load = nil
	if s.cold != nil {
		return s.loadedCold(lo.runs)
	}
	runs := lo.runs
	if s.rev.n > 0 {
		runs = append(runs, &s.rev)
	}
	switch {
	case len(runs) == 1 && runs[0] != &s.rev:
		s.rev = *runs[0]
	case len(runs) > 1:
		out := &pairs{}
		mergeRuns(runs, &builder{p: out})
		s.rev = *out
	}
	return nil
}

// loadedCold builds the cold reverse direction from a load's runs: the
// merge streams into a new file. Into a store that has pairs already,
// the runs' pairs go to the overlay one at a time instead.
func (s *Store) loadedCold(runs []*pairs) error {
	c := s.cold
	if c.n() == 0 {
		if len(runs) == 0 {
			return nil
		}
		return c.build(runs)
	}
	for _, r := range runs {
		for cur := r.cursor(); cur.valid(); cur.i++ {
			c.insert(cur.e.a[cur.i], cur.e.b[cur.i])
		}
	}
	return nil
}

// sink takes pairs in increasing order: a builder (an in-memory set) or
// a coldWriter (a cold file).
type sink interface {
	add(a, b uint64, v int64)
	flush()
}

// mergeRuns merges sorted sets with no pair in common into bd.
func mergeRuns(runs []*pairs, bd sink) {
	h := make(cursors, 0, len(runs))
	for _, r := range runs {
		if c := r.cursor(); c.valid() {
			h = append(h, c)
		}
	}
	heap.Init(&h)
	for len(h) > 0 {
		c := h[0]
		bd.add(c.e.a[c.i], c.e.b[c.i], c.e.v[c.i])
		c.i++
		if c.valid() {
			heap.Fix(&h, 0)
		} else {
			heap.Pop(&h)
		}
	}
	bd.flush()
}

// cursors is a heap of cursors by their current pair.
type cursors []*cursor

func (h cursors) Len() int { return len(h) }
func (h cursors) Less(i, j int) bool {
	x, y := h[i], h[j]
	return less(x.e.a[x.i], x.e.b[x.i], y.e.a[y.i], y.e.b[y.i])
}
func (h cursors) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *cursors) Push(x any)   { *h = append(*h, x.(*cursor)) }
func (h *cursors) Pop() any {
	old := *h
	c := old[len(old)-1]
	*h = old[:len(old)-1]
	return c
}

func (lo *loader) memoryBytes() int {
	n := (cap(lo.pending)+cap(lo.spare)+cap(lo.piece)+cap(lo.ts)+cap(lo.ss))*16 + len(lo.runs)*8
	for _, r := range lo.runs {
		n += r.memoryBytes()
	}
	return n
}
