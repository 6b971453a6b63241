package tier

import (
	"fmt"
	"io"
	"slices"
)

// merge passes to add, in (post, user) order, the pairs of body b (whose
// window starts at lo) overlaid by lower and upper over it (either may
// be nil), which it does not change: a reader may share them.
func (s *Set) merge(b body, lo uint64, lower, upper overlay, add func(post, user uint64) error) error {
	lw, up := asPairs(lower), asPairs(upper)
	if lw == nil {
		lw = &pairDelta{}
	}
	if up == nil {
		up = &pairDelta{}
	}
	// The overlays' additions are absent below them and their removals
	// present, so the body's pairs they keep and the additions they keep
	// are disjoint.
	removed := func(u, k uint64) bool { return lw.removed.has(u, k) || up.removed.has(u, k) }
	added := up.added.pairs(keepPairs(nil, lw.added, up.removed))
	if t, ok := b.(*pairTable); ok { // an open table: its pairs are sorted with the additions
		t.each(func(u, k uint64) bool {
			if !removed(u, k) {
				added = append(added, pair{k, u})
			}
			return true
		})
		b = nil
	}
	for i := range added {
		added[i].post += lo
	}
	slices.SortFunc(added, comparePairs)
	if b != nil {
		err := s.eachPair(b, func(post, u uint64) error {
			for len(added) > 0 && comparePairs(added[0], pair{post, u}) < 0 {
				if err := add(added[0].post, added[0].user); err != nil {
					return err
				}
				added = added[1:]
			}
			if removed(u, post-lo) {
				return nil
			}
			return add(post, u)
		})
		if err != nil {
			return err
		}
	}
	for _, q := range added {
		if err := add(q.post, q.user); err != nil {
			return err
		}
	}
	return nil
}

// keepPairs appends to dst the pairs of from (offsets in their window)
// that unless does not hold.
func keepPairs(dst []pair, from, unless *pairTable) []pair {
	from.each(func(u, k uint64) bool {
		if !unless.has(u, k) {
			dst = append(dst, pair{k, u})
		}
		return true
	})
	return dst
}

// eachPair passes the pairs (post, user) of a sealed or cold body to fn
// in order, checking every block in full (a cold one's read from its
// file, not through the cache), the pair order and the footer's totals;
// with fn nil it only checks.
func (s *Set) eachPair(b body, fn func(post, user uint64) error) error {
	sc := new(pairScratch)
	var last pair
	n := 0
	var idx *blockIndex
	var file string
	err := eachBlock(b, func(x *blockIndex, name string, i int, blk []byte) error {
		idx, file = x, name
		firstPost, firstUser := x.firstPair(i)
		off, _ := x.span(i)
		if err := checkPairBlock(firstPost, firstUser, blk); err != nil {
			return corruptAt(file, int64(off), "block %d: %v", i, err)
		}
		var k pairBlock
		_ = k.parse(firstPost, firstUser, blk[:len(blk)-4])
		c, err := k.decode(sc.pairs[:], sc.vals[:])
		if err != nil {
			return corruptAt(file, int64(off), "block %d: %v", i, err)
		}
		if i > 0 && comparePairs(sc.pairs[0], last) <= 0 {
			return corruptAt(file, int64(off), "block %d: pairs out of order", i)
		}
		last = sc.pairs[c-1]
		n += c
		if fn != nil {
			for _, q := range sc.pairs[:c] {
				if err := fn(q.post, q.user); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil || idx == nil {
		return err
	}
	if n != idx.records || (idx.blocks > 0 && last.post != idx.maxID) {
		return corruptAt(file, 0, "footer says %d pairs up to post %d, blocks hold %d up to %d", idx.records, idx.maxID, n, last.post)
	}
	return nil
}

// pairScratch is the decoder's working memory for one block.
type pairScratch struct {
	pairs [maxBlockPairs]pair
	vals  [2 * maxBlockPairs]uint64
}

// A set's record shape, for the core (recordShape).

func (s *Set) newOpen() body { return newPairTable(s.keyBits, 0) }

func (s *Set) writeImage(w io.Writer, base body, lo uint64, fold overlay, drop []uint64) error {
	pw := newPairWriter(w, s.image.tag, s.blockLimit)
	add := pw.add
	if len(drop) > 0 {
		add = func(post, user uint64) error {
			if _, gone := slices.BinarySearch(drop, post); gone {
				return nil
			}
			return pw.add(post, user)
		}
	}
	if err := s.merge(base, lo, fold, nil, add); err != nil {
		return err
	}
	return pw.close()
}

// dropped: the delta written since the rewrite was planned forgets the
// dropped posts too (a removal of a pair the new body no longer holds
// would contradict it), and the window counts its view again.
func (s *Set) dropped(w *window, drop []uint64) {
	if d := asPairs(w.delta); d != nil {
		for _, t := range [2]*pairTable{d.added, d.removed} {
			var gone []pair
			t.each(func(u, k uint64) bool {
				if _, ok := slices.BinarySearch(drop, w.lo+k); ok {
					gone = append(gone, pair{k, u})
				}
				return true
			})
			for _, q := range gone {
				t.remove(q.user, q.post)
			}
		}
	}
	n := w.body.records()
	if d := asPairs(w.delta); d != nil {
		n += d.added.len() - d.removed.len()
	}
	s.adjust(w, n-w.n)
}

func (s *Set) verifyBlocks(b body) error { return s.eachPair(b, nil) }

func (s *Set) checkBlock(x *blockIndex, i int, blk []byte) error {
	post, user := x.firstPair(i)
	return checkPairBlock(post, user, blk)
}

func (s *Set) foldInto(open body, o overlay) {
	t, d := open.(*pairTable), o.(*pairDelta)
	d.added.each(func(u, k uint64) bool { t.add(u, k); return true })
	d.removed.each(func(u, k uint64) bool { t.remove(u, k); return true })
}

// compose returns the delta over a body equal to lower over it with upper
// over that (either may be nil), reusing the larger one's tables and
// walking the smaller: what a failed job or a view's hold leaves of its
// frozen delta and the writes since, or both as one.
func (s *Set) compose(lower, upper overlay) overlay {
	lo, up := asPairs(lower), asPairs(upper)
	switch {
	case lo == nil && up == nil:
		return nil
	case up == nil:
		return lo
	case lo == nil:
		return up
	}
	if up.len() < lo.len() {
		up.added.each(func(u, k uint64) bool {
			// Absent under upper: present in the body and removed by
			// lower (the addition cancels that), or absent from both.
			if !lo.removed.remove(u, k) {
				s.tableOf(&lo.added).add(u, k)
			}
			return true
		})
		up.removed.each(func(u, k uint64) bool {
			// Present under upper: added by lower, or in the body.
			if !lo.added.remove(u, k) {
				s.tableOf(&lo.removed).add(u, k)
			}
			return true
		})
		return lo
	}
	lo.added.each(func(u, k uint64) bool {
		// Absent from the body: a later removal cancels it.
		if !up.removed.remove(u, k) {
			s.tableOf(&up.added).add(u, k)
		}
		return true
	})
	lo.removed.each(func(u, k uint64) bool {
		// Present in the body: a later addition cancels it.
		if !up.added.remove(u, k) {
			s.tableOf(&up.removed).add(u, k)
		}
		return true
	})
	return up
}

// A set's snapshot entries are pair lists, an open table's pairs and a
// delta's additions then its removals:
//
//	open    = pairs
//	overlay = pairs (added, absent from the base) | pairs (removed, present in it)
//	pairs   = count uvarint | (post id - window start uvarint | user uvarint)*  in no order
//
// in the order the tables hold them, so that writing an open window or a
// delta takes no memory beyond the writer's buffer, however large it is.

func (s *Set) writeOpen(sw *snapshotWriter, open body) error {
	return writePairs(sw, open.(*pairTable), nil)
}

func (s *Set) writeOverlay(sw *snapshotWriter, frozen, delta overlay) error {
	// The two deltas as one, without changing either (a reader may share
	// them): additions the newer one does not remove, then its own that
	// do not undo a removal of the older; removals likewise.
	fr, dl := asPairs(frozen), asPairs(delta)
	if fr == nil {
		fr = &pairDelta{}
	}
	if dl == nil {
		dl = &pairDelta{}
	}
	if err := writePairs(sw, fr.added, dl.removed, dl.added, fr.removed); err != nil {
		return err
	}
	return writePairs(sw, fr.removed, dl.added, dl.removed, fr.added)
}

// writePairs writes the pairs of each table of from (a nil one is empty)
// that the table after it in unless does not hold, from and unless taken
// two by two: (from[0], unless[0]), (from[1], unless[1])... It counts them
// first, so the list costs two passes over the tables and no copy.
func writePairs(sw *snapshotWriter, tables ...*pairTable) error {
	each := func(fn func(u, k uint64) error) error {
		for i := 0; i < len(tables); i += 2 {
			from, unless := tables[i], (*pairTable)(nil)
			if i+1 < len(tables) {
				unless = tables[i+1]
			}
			var err error
			from.each(func(u, k uint64) bool {
				if !unless.has(u, k) {
					err = fn(u, k)
				}
				return err == nil
			})
			if err != nil {
				return err
			}
		}
		return nil
	}
	n := 0
	each(func(uint64, uint64) error { n++; return nil })
	sw.uvarint(uint64(n))
	return each(func(u, k uint64) error {
		sw.uvarint(k)
		sw.uvarint(u)
		return sw.spill()
	})
}

func (s *Set) readOpen(sr *snapshotReader, w *window) body {
	if t := s.readPairs(sr, w); t != nil {
		return t
	}
	return newPairTable(s.keyBits, 0)
}

// readOverlay reads a window's delta, checking that every addition is
// absent from its body and every removal present (which reads the cold
// blocks they fall in), and counts the pairs of the window's view.
func (s *Set) readOverlay(sr *snapshotReader, w *window) (overlay, int, error) {
	added, removed := s.readPairs(sr, w), s.readPairs(sr, w)
	if sr.err != nil {
		return nil, 0, sr.err
	}
	var bad error
	check := func(t *pairTable, want bool) {
		t.each(func(u, k uint64) bool {
			has, err := s.bodyHas(w, u, w.lo+k)
			switch {
			case err != nil:
				bad = err
			case has != want:
				bad = fmt.Errorf("%w: snapshot: window %d: a delta pair contradicts its base", ErrCorrupt, w.num)
			}
			return bad == nil
		})
	}
	if check(added, false); bad == nil {
		check(removed, true)
	}
	if bad != nil {
		return nil, 0, bad
	}
	n := w.body.records() + added.len() - removed.len()
	if added == nil && removed == nil {
		return nil, n, nil
	}
	return &pairDelta{added: added, removed: removed}, n, nil
}

// readPairs reads a pair list of window w into a table (nil when empty),
// checking range and that no pair comes twice.
func (s *Set) readPairs(sr *snapshotReader, w *window) *pairTable {
	n := sr.count("pairs")
	if sr.err != nil || n == 0 {
		return nil
	}
	t := newPairTable(s.keyBits, int(n))
	for range n {
		post, user := sr.uvarint(), sr.uvarint()
		if sr.err != nil {
			return nil
		}
		if post > w.last-w.lo {
			sr.fail("window %d: pair out of range", w.num)
			return nil
		}
		if !t.add(user, post) {
			sr.fail("window %d: pair (%d, %d) listed twice", w.num, w.lo+post, user)
			return nil
		}
	}
	return t
}
