package tier

import (
	"fmt"
	"io"
	"slices"

	"github.com/tally-dev/tally/engine/counters"
)

// merge passes to add, in (post, user) order, the pairs of body b (whose
// window starts at lo) with their kinds, overlaid by lower and upper
// over it (either may be nil), which it does not change: a reader may
// share them.
func (s *Set) merge(b body, lo uint64, lower, upper overlay, add func(q pair) error) error {
	lw, up := asPairs(lower), asPairs(upper)
	if lw == nil {
		lw = &pairDelta{}
	}
	if up == nil {
		up = &pairDelta{}
	}
	// The overlays' additions are absent below them once their removals
	// are taken out, so the body's pairs they keep and the additions they
	// keep are disjoint.
	removed := func(u, k uint64) bool { return lw.removed.has(u, k) || up.removed.has(u, k) }
	added := up.added.pairs(keepPairs(nil, lw.added, up.removed, up.added))
	if t, ok := b.(*pairTable); ok { // an open table: its pairs are sorted with the additions
		t.each(func(u, k uint64, kind counters.Kind) bool {
			if !removed(u, k) {
				added = append(added, pair{k, u, kind})
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
		err := s.eachPair(b, func(q pair) error {
			for len(added) > 0 && comparePairs(added[0], q) < 0 {
				if err := add(added[0]); err != nil {
					return err
				}
				added = added[1:]
			}
			if removed(q.user, q.post-lo) {
				return nil
			}
			return add(q)
		})
		if err != nil {
			return err
		}
	}
	for _, q := range added {
		if err := add(q); err != nil {
			return err
		}
	}
	return nil
}

// keepPairs appends to dst the pairs of from (offsets in their window)
// that none of unless holds.
func keepPairs(dst []pair, from *pairTable, unless ...*pairTable) []pair {
	from.each(func(u, k uint64, kind counters.Kind) bool {
		for _, t := range unless {
			if t.has(u, k) {
				return true
			}
		}
		dst = append(dst, pair{k, u, kind})
		return true
	})
	return dst
}

// eachPair passes the pairs of a sealed or cold body to fn in order, checking every block in full (a cold one's read from its
// file, not through the cache), the pair order and the footer's totals;
// with fn nil it only checks.
func (s *Set) eachPair(b body, fn func(q pair) error) error {
	sc := new(pairScratch)
	var last pair
	n := 0
	var idx *blockIndex
	var file string
	err := eachBlock(b, func(x *blockIndex, name string, i int, blk []byte) error {
		idx, file = x, name
		c, err := decodeCheckedPairBlock(x, file, i, blk, sc)
		if err != nil {
			return err
		}
		off, _ := x.span(i)
		if i > 0 && comparePairs(sc.pairs[0], last) <= 0 {
			return corruptAt(file, int64(off), "block %d: pairs out of order", i)
		}
		last = sc.pairs[c-1]
		n += c
		if fn != nil {
			for _, q := range sc.pairs[:c] {
				if err := fn(q); err != nil {
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
		add = func(q pair) error {
			if _, gone := slices.BinarySearch(drop, q.post); gone {
				return nil
			}
			return pw.add(q)
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
			t.each(func(u, k uint64, _ counters.Kind) bool {
				if _, ok := slices.BinarySearch(drop, w.lo+k); ok {
					gone = append(gone, pair{post: k, user: u})
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

func (s *Set) head() func(*snapshotWriter)     { return func(*snapshotWriter) {} }
func (s *Set) readHead(*snapshotReader) func() { return nil }

func (s *Set) checkBlock(x *blockIndex, i int, blk []byte) error {
	post, user := x.firstPair(i)
	return checkPairBlock(post, user, blk)
}

func (s *Set) foldInto(open body, o overlay) {
	t, d := open.(*pairTable), o.(*pairDelta)
	// Removals first: a pair in both tables changed its kind.
	d.removed.each(func(u, k uint64, _ counters.Kind) bool { t.remove(u, k); return true })
	d.added.each(func(u, k uint64, kind counters.Kind) bool { t.put(u, k, kind); return true })
}

// compose returns the delta over a body equal to lower over it with upper
// over that (either may be nil), reusing the larger one's tables and
// walking the smaller: what a failed job or a view's hold leaves of its
// frozen delta and the writes since, or both as one. Over the body, the
// pairs removed are lower's and upper's that lower did not add; the pairs
// added are lower's that upper did not remove and upper's. A pair both
// removed and added is one whose kind changed (perhaps back to the
// body's: the body's kind is not at hand, so the two are kept).
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
		// Removals first, so that a pair whose kind upper changed takes
		// its new kind below.
		up.removed.each(func(u, k uint64, _ counters.Kind) bool {
			// Present under upper: added by lower, or in the body.
			if lo.added.remove(u, k) == counters.NoKind {
				s.tableOf(&lo.removed).add(u, k)
			}
			return true
		})
		up.added.each(func(u, k uint64, kind counters.Kind) bool {
			// Absent under upper (unless upper removed it first, which
			// the loop above applied): lower's removal of it stays, as
			// the body's pair is gone.
			s.tableOf(&lo.added).put(u, k, kind)
			return true
		})
		return lo
	}
	lo.added.each(func(u, k uint64, kind counters.Kind) bool {
		// Absent from the body unless lower removed it: upper's removal
		// of it cancels the addition, and is itself not one of the
		// body's pairs.
		if up.removed.remove(u, k) == counters.NoKind && !up.added.has(u, k) {
			s.tableOf(&up.added).put(u, k, kind)
		}
		return true
	})
	lo.removed.each(func(u, k uint64, _ counters.Kind) bool {
		// Present in the body: removed whatever upper did since.
		s.tableOf(&up.removed).add(u, k)
		return true
	})
	return up
}

// A set's snapshot entries are pair lists, an open table's pairs and a
// delta's additions then its removals:
//
//	open    = pairs
//	overlay = pairs (added) | pairs (removed)
//	pairs   = count uvarint | kinded uint8 | (post id - window start uvarint | user uvarint | [kind uint8])*   in no order
//
// in the order the tables hold them, so that writing an open window or a
// delta takes no memory beyond the writer's buffer, however large it is.
// kinded is 1 when the list carries each pair's kind (some pair of it has
// a kind other than like), 0 when every pair is a like (a removal list's
// pairs are likes). A pair both added and removed is one whose kind
// changed.

func (s *Set) writeOpen(sw *snapshotWriter, open body) error {
	return writePairs(sw, pairList{from: open.(*pairTable)})
}

func (s *Set) writeOverlay(sw *snapshotWriter, frozen, delta overlay) error {
	// The two deltas as one (compose's), without changing either: a
	// reader may share them.
	fr, dl := asPairs(frozen), asPairs(delta)
	if fr == nil {
		fr = &pairDelta{}
	}
	if dl == nil {
		dl = &pairDelta{}
	}
	err := writePairs(sw,
		pairList{from: fr.added, unless: [2]*pairTable{dl.removed, dl.added}},
		pairList{from: dl.added})
	if err != nil {
		return err
	}
	return writePairs(sw,
		pairList{from: fr.removed},
		pairList{from: dl.removed, unless: [2]*pairTable{fr.added, fr.removed}})
}

// pairList is the pairs of from (nil: none) that neither table of unless
// holds.
type pairList struct {
	from   *pairTable
	unless [2]*pairTable
}

// writePairs writes the pairs of lists as one pair list. It counts them
// first (and sees whether any is not a like), so the list costs two passes
// over the tables and no copy.
func writePairs(sw *snapshotWriter, lists ...pairList) error {
	each := func(fn func(u, k uint64, kind counters.Kind) error) error {
		for _, l := range lists {
			var err error
			l.from.each(func(u, k uint64, kind counters.Kind) bool {
				if !l.unless[0].has(u, k) && !l.unless[1].has(u, k) {
					err = fn(u, k, kind)
				}
				return err == nil
			})
			if err != nil {
				return err
			}
		}
		return nil
	}
	n, kinded := 0, byte(0)
	each(func(_, _ uint64, kind counters.Kind) error {
		n++
		if kind != counters.Like {
			kinded = 1
		}
		return nil
	})
	sw.uvarint(uint64(n))
	sw.buf = append(sw.buf, kinded)
	return each(func(u, k uint64, kind counters.Kind) error {
		sw.uvarint(k)
		sw.uvarint(u)
		if kinded != 0 {
			sw.buf = append(sw.buf, byte(kind))
		}
		return sw.spill()
	})
}

func (s *Set) readOpen(sr *snapshotReader, w *window) body {
	if t := s.readPairs(sr, w); t != nil {
		return t
	}
	return newPairTable(s.keyBits, 0)
}

// readOverlay reads a window's delta, checking that every removal is
// present in its body and every addition absent unless also removed
// (which reads the cold blocks they fall in), and counts the pairs of
// the window's view.
func (s *Set) readOverlay(sr *snapshotReader, w *window) (overlay, int, error) {
	added, removed := s.readPairs(sr, w), s.readPairs(sr, w)
	if sr.err != nil {
		return nil, 0, sr.err
	}
	var bad error
	check := func(t *pairTable, want bool, unless *pairTable) {
		t.each(func(u, k uint64, _ counters.Kind) bool {
			if unless.has(u, k) {
				return true
			}
			kind, err := s.bodyKind(w, u, w.lo+k)
			switch {
			case err != nil:
				bad = err
			case (kind != counters.NoKind) != want:
				bad = fmt.Errorf("%w: snapshot: window %d: a delta pair contradicts its base", ErrCorrupt, w.num)
			}
			return bad == nil
		})
	}
	if check(added, false, removed); bad == nil {
		check(removed, true, nil)
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
// checking range and kinds and that no pair comes twice.
func (s *Set) readPairs(sr *snapshotReader, w *window) *pairTable {
	n := sr.count("pairs")
	kinded := sr.byte()
	if sr.err == nil && kinded > 1 {
		sr.fail("window %d: pair list flag %d", w.num, kinded)
	}
	if sr.err != nil || n == 0 {
		return nil
	}
	t := newPairTable(s.keyBits, int(n))
	for range n {
		post, user, kind := sr.uvarint(), sr.uvarint(), counters.Like
		if kinded != 0 {
			kind = counters.Kind(sr.byte())
		}
		if sr.err != nil {
			return nil
		}
		if post > w.last-w.lo || checkKind(kind) != nil {
			sr.fail("window %d: pair out of range or of no kind", w.num)
			return nil
		}
		if t.insert(user, post, kind, false) != counters.NoKind {
			sr.fail("window %d: pair (%d, %d) listed twice", w.num, w.lo+post, user)
			return nil
		}
	}
	return t
}

// decodeCheckedPairBlock checks block i of x (its checksum and layout)
// and decodes its pairs into sc, returning how many: a damaged block is an
// error naming file and offset.
func decodeCheckedPairBlock(x *blockIndex, file string, i int, blk []byte, sc *pairScratch) (int, error) {
	firstPost, firstUser := x.firstPair(i)
	off, _ := x.span(i)
	if err := checkPairBlock(firstPost, firstUser, blk); err != nil {
		return 0, corruptAt(file, int64(off), "block %d: %v", i, err)
	}
	var k pairBlock
	_ = k.parse(firstPost, firstUser, blk[:len(blk)-4])
	c, err := k.decode(sc.pairs[:], sc.vals[:])
	if err != nil {
		return 0, corruptAt(file, int64(off), "block %d: %v", i, err)
	}
	return c, nil
}
