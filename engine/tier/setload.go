package tier

import (
	"errors"
	"iter"
	"slices"
	"time"
)

// loadFlushMin is how many pairs of one old window LoadPairs gathers at
// least before it seals them.
const loadFlushMin = 1 << 16

// LoadPairs adds the pairs of seq (user, post), as reading an old
// snapshot's pair list does, and leaves the set as Add for each pair
// and then Maintain(now) would as far as sealing goes, but builds the
// windows that ended more than OpenAge before now as sealed windows
// directly, never as tables: pairs of such a window are gathered (16
// bytes each), sorted and encoded when the input moves to another
// window. Input in window order (what Range yields) thus builds each old
// window once, holding one window's pairs at a time; input in any other
// order is still right, and costs at most a logarithmic number of merges
// per window. Windows past ColdAge or MemoryBudget move to files at the
// next Plan. Duplicates are ignored. It needs the write lock and no
// pending job.
func (s *Set) LoadPairs(seq iter.Seq2[uint64, uint64], now time.Time) error {
	if s.jobs != 0 || s.view != nil {
		return errors.New("tier: LoadPairs with jobs pending or a view out")
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
	for user, post := range seq {
		if post < curLo || post > curLast {
			num, lo, last := s.win.Of(post)
			curLo, curLast = lo, last
			if !s.sealDue(s.win.End(num), ms) {
				cur = nil // an open window: Add
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
			if _, err := s.Add(user, post); err != nil {
				return err
			}
			continue
		}
		cur.pairs = append(cur.pairs, pair{post: post, user: user})
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

// loadWindow adds pairs (post ids of window num) to the set: merged into
// the window's sealed body, or by Add when the window is in another
// state (open, cold, with deltas), which a load into a fresh set never
// meets.
func (s *Set) loadWindow(num int64, ps []pair) error {
	slices.SortFunc(ps, comparePairs)
	ps = slices.Compact(ps)
	lo := s.win.Start(num)
	var w *window
	var old *sealedWindow
	if i := s.find(lo); i >= 0 {
		w = s.wins[i]
		b, ok := w.body.(*sealedWindow)
		if !ok || w.delta != nil || w.job != nil {
			for _, q := range ps {
				if _, err := s.Add(q.user, q.post); err != nil {
					return err
				}
			}
			return nil
		}
		old = b
		// Drop pairs the window already has, so that merge gets new ones.
		ps = slices.DeleteFunc(ps, func(q pair) bool { return sealedHas(old, q.post, q.user) })
	}
	if len(ps) == 0 {
		return nil
	}
	var buf bytesBuffer
	pw := newPairWriter(&buf, s.image.tag, s.blockLimit)
	if old == nil {
		for _, q := range ps {
			if err := pw.add(q.post, q.user); err != nil {
				return err
			}
		}
	} else {
		added := &pairDelta{added: newPairTable(s.keyBits, len(ps))}
		for _, q := range ps {
			added.added.add(q.user, q.post-lo)
		}
		if err := s.merge(old, lo, added, nil, pw.add); err != nil {
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
	s.adjust(w, len(ps))
	return nil
}
