package tier

import (
	"errors"
	"iter"
	"slices"
	"time"

	"github.com/tally-dev/tally/engine/counters"
)

// loadFlushMin is how many pairs of one old window LoadPairs gathers at
// least before it seals them.
const loadFlushMin = 1 << 16

// Reaction is one pair of a set with its kind, as LoadReactions takes
// them.
type Reaction struct {
	User, Post uint64
	Kind       counters.Kind
}

// LoadPairs is LoadReactions of seq's pairs (user, post) as likes.
func (s *Set) LoadPairs(seq iter.Seq2[uint64, uint64], now time.Time) error {
	return s.LoadReactions(func(yield func(Reaction) bool) {
		for user, post := range seq {
			if !yield(Reaction{User: user, Post: post, Kind: counters.Like}) {
				return
			}
		}
	}, now)
}

// LoadReactions adds the reactions of seq, as reading an old snapshot's
// pair list does, and leaves the set as React for each reaction in
// seq's order (a pair given twice keeps the later kind) and then
// Maintain(now) would as far as sealing goes, but builds the windows
// that ended more than OpenAge before now as sealed windows directly,
// never as tables: pairs of such a window are gathered (24 bytes each),
// sorted and encoded when the input moves to another window. Input in
// window order (what RangeKinds yields) thus builds each old window
// once, holding one window's pairs at a time; input in any other order
// is still right, and costs at most a logarithmic number of merges per
// window. Windows past ColdAge or MemoryBudget move to files at the next
// Plan. It needs the write lock, no pending job and no view out; a kind
// outside [1, MaxKinds] is an error.
func (s *Set) LoadReactions(seq iter.Seq[Reaction], now time.Time) error {
	if s.jobs != 0 || s.view != nil {
		return errors.New("tier: LoadReactions with jobs pending or a view out")
	}
	ms := now.UnixMilli()
	type buf struct {
		num   int64
		pairs []pair
	}
	var cur *buf
	parked := map[int64]*buf{}
	flush := func(b *buf) error {
		err := s.loadWindow(b.num, b.pairs)
		b.pairs = b.pairs[:0]
		return err
	}
	curLo, curLast := uint64(1), uint64(0)
	for r := range seq {
		if err := checkKind(r.Kind); err != nil {
			return err
		}
		if r.Post < curLo || r.Post > curLast {
			num, lo, last := s.win.Of(r.Post)
			curLo, curLast = lo, last
			if !s.sealDue(s.win.End(num), ms) {
				cur = nil // an open window: React
			} else {
				if cur != nil && len(cur.pairs) >= max(loadFlushMin, s.sealedPairs(cur.num)) {
					if err := flush(cur); err != nil {
						return err
					}
				}
				cur = parked[num]
				if cur == nil {
					cur = &buf{num: num}
					parked[num] = cur
				}
			}
		}
		if cur == nil {
			if _, err := s.React(r.User, r.Post, r.Kind); err != nil {
				return err
			}
			continue
		}
		cur.pairs = append(cur.pairs, pair{post: r.Post, user: r.User, kind: r.Kind})
	}
	for _, b := range parked {
		if len(b.pairs) > 0 {
			if err := flush(b); err != nil {
				return err
			}
		}
	}
	s.trim()
	return nil
}

// sealedPairs returns the pairs of window num's sealed body.
func (s *Set) sealedPairs(num int64) int {
	if i := s.find(s.win.Start(num)); i >= 0 {
		if b, ok := s.wins[i].body.(*sealedWindow); ok {
			return b.records()
		}
	}
	return 0
}

// loadWindow adds pairs (post ids of window num, in input order) to the
// set: merged into the window's sealed body, or by React when the window
// is in another state (open, cold, with deltas), which a load into a
// fresh set never meets.
func (s *Set) loadWindow(num int64, ps []pair) error {
	// In (post, user) order, the last of a pair given twice kept.
	slices.SortStableFunc(ps, comparePairs)
	kept := ps[:0]
	for _, q := range ps {
		if n := len(kept); n > 0 && comparePairs(kept[n-1], q) == 0 {
			kept[n-1] = q
			continue
		}
		kept = append(kept, q)
	}
	ps = kept
	if len(ps) == 0 {
		return nil
	}
	lo := s.win.Start(num)
	var w *window
	var old *sealedWindow
	if i := s.find(lo); i >= 0 {
		w = s.wins[i]
		b, ok := w.body.(*sealedWindow)
		if !ok || w.delta != nil || w.job != nil {
			for _, q := range ps {
				if _, err := s.React(q.user, q.post, q.kind); err != nil {
					return err
				}
			}
			return nil
		}
		old = b
	}
	var buf bytesBuffer
	pw := newPairWriter(&buf, s.image.tag, s.blockLimit)
	added := len(ps)
	if old == nil {
		for _, q := range ps {
			if err := pw.add(q); err != nil {
				return err
			}
		}
	} else {
		// The pairs the window has with another kind change it; those it
		// has with the same kind change nothing.
		d := &pairDelta{}
		for _, q := range ps {
			switch was := sealedKind(old, q.post, q.user); {
			case was == q.kind:
				added--
				continue
			case was != counters.NoKind:
				added--
				s.tableOf(&d.removed).add(q.user, q.post-lo)
			}
			s.tableOf(&d.added).put(q.user, q.post-lo, q.kind)
		}
		if d.added == nil {
			return nil
		}
		if err := s.merge(old, lo, d, nil, pw.add); err != nil {
			return err
		}
	}
	if err := pw.close(); err != nil {
		return err
	}
	if w == nil {
		w = &window{num: num, lo: lo, last: s.win.Last(num)}
		s.insertWindow(w)
	}
	if err := s.install(w, buf.b); err != nil {
		return err
	}
	if old != nil {
		s.retire(old)
	}
	s.adjust(w, added)
	return nil
}
