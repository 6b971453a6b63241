package tier

import "io"

// merge passes to add, in id order, the rows of base (a window starting
// at lo) overlaid by overlays (nil ones skipped; a later one's row wins).
func (p *Posts) merge(base body, lo uint64, overlays []*rowTable, add func(id uint64, r *postRow) error) error {
	keys := unionKeys(&p.layout, overlays...)
	next := 0
	var over postRow
	overlay := func(key uint64) {
		for i := len(overlays) - 1; i >= 0; i-- {
			if overlays[i] != nil && overlays[i].get(key, &p.layout, &over) {
				return
			}
		}
	}
	// A deleted row (deadRow) hides the body's record and is not a
	// record itself.
	addOver := func(id uint64) error {
		if over.dead() {
			return nil
		}
		return add(id, &over)
	}
	emit := func(id uint64, r *postRow) error {
		for next < len(keys) && lo+keys[next]-1 < id {
			overlay(keys[next])
			if err := addOver(lo + keys[next] - 1); err != nil {
				return err
			}
			next++
		}
		if next < len(keys) && lo+keys[next]-1 == id {
			overlay(keys[next])
			next++
			return addOver(id)
		}
		return add(id, r)
	}
	if err := p.eachRow(base, lo, emit); err != nil {
		return err
	}
	for ; next < len(keys); next++ {
		overlay(keys[next])
		if err := addOver(lo + keys[next] - 1); err != nil {
			return err
		}
	}
	return nil
}

// eachRow passes the rows of a window body to fn in id order. A sealed
// or cold body's blocks are checked in full (a cold one's read from its
// file, not through the cache), as are their order and the footer's
// totals; with fn nil it only checks.
func (p *Posts) eachRow(b body, lo uint64, fn func(id uint64, r *postRow) error) error {
	if t, ok := b.(*rowTable); ok {
		var r postRow
		for _, key := range t.sorted(&p.layout) {
			t.get(key, &p.layout, &r)
			if err := fn(lo+key-1, &r); err != nil {
				return err
			}
		}
		return nil
	}
	var ids []uint64
	var rs []postRow
	if fn != nil {
		ids, rs = make([]uint64, maxPostsInBlock), make([]postRow, maxPostsInBlock)
	}
	var last uint64
	n := 0
	var idx *blockIndex
	var file string
	err := eachBlock(b, func(x *blockIndex, name string, i int, blk []byte) error {
		idx, file = x, name
		first := x.firstID(i)
		off, _ := x.span(i)
		k, err := decodeCheckedPostBlock(x, file, i, blk, ids, rs)
		if err != nil {
			return err
		}
		if i > 0 && first <= last {
			return corruptAt(file, int64(off), "block %d starts at id %d, not above %d", i, first, last)
		}
		last = k.ids.last(k.area)
		n += k.len()
		if fn != nil {
			for j := range k.len() {
				if err := fn(ids[j], &rs[j]); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil || idx == nil {
		return err
	}
	if n != idx.records || (idx.blocks > 0 && last != idx.maxID) {
		return corruptAt(file, 0, "footer says %d records up to id %d, blocks hold %d up to %d", idx.records, idx.maxID, n, last)
	}
	return nil
}

// The post table's record shape, for the core (recordShape).

func (p *Posts) newOpen() body { return newRowTable() }

func (p *Posts) writeImage(w io.Writer, base body, lo uint64, fold overlay, _ []uint64) error {
	pw := newPostWriter(w)
	if err := p.merge(base, lo, []*rowTable{asRows(fold)}, pw.add); err != nil {
		return err
	}
	return pw.close()
}

func (p *Posts) verifyBlocks(b body) error { return p.eachRow(b, 0, nil) }

func (p *Posts) checkBlock(x *blockIndex, i int, blk []byte) error {
	return checkPostBlock(x.firstID(i), blk)
}

// dropped: the post table forgets no posts (a deleted post's row is
// deleted, Delete).
func (p *Posts) dropped(*window, []uint64) {}

func (p *Posts) foldInto(open body, o overlay) {
	t, d := open.(*rowTable), o.(*rowTable)
	var r postRow
	for _, key := range d.sorted(&p.layout) {
		if d.get(key, &p.layout, &r); r.dead() {
			t.remove(key, &p.layout)
		} else {
			t.put(key, &p.layout, &r)
		}
	}
}

func (p *Posts) compose(lower, upper overlay) overlay {
	lo, up := asRows(lower), asRows(upper)
	switch {
	case lo == nil && up == nil:
		return nil
	case up == nil:
		return lo
	case lo == nil:
		return up
	}
	var r postRow
	if up.n < lo.n {
		// The upper rows win: write them over the lower table.
		for _, key := range up.sorted(&p.layout) {
			up.get(key, &p.layout, &r)
			lo.put(key, &p.layout, &r)
		}
		return lo
	}
	for _, key := range lo.sorted(&p.layout) {
		if !up.has(key, &p.layout) {
			lo.get(key, &p.layout, &r)
			up.put(key, &p.layout, &r)
		}
	}
	return up
}

// A post table's snapshot entries, the open table's and the overlay's
// alike, are rows:
//
//	rows = count uvarint | row*                                          in no order
//	row  = id - window start + 1 uvarint | 6 × column uvarint | kinds uvarint | popcount(kinds) × count uvarint
//
// in the order the tables hold them, so that writing an open window or a
// delta takes no memory beyond the writer's buffer, however large it is;
// a row's columns being the author and the five counts, kinds having bit
// k-2 set for each reaction kind k beyond like whose count follows, in
// kind order.

func (p *Posts) writeOpen(sw *snapshotWriter, open body) error {
	return p.writeRows(sw, open.(*rowTable), nil)
}

func (p *Posts) writeOverlay(sw *snapshotWriter, frozen, delta overlay) error {
	return p.writeRows(sw, asRows(delta), asRows(frozen))
}

// writeRows writes the rows of upper, then those of lower (either may be
// nil) that upper does not override. It counts them first, so the list
// costs two passes over the tables and no copy.
func (p *Posts) writeRows(sw *snapshotWriter, upper, lower *rowTable) error {
	var r postRow
	each := func(fn func(key uint64) error) error {
		for _, t := range [2]*rowTable{upper, lower} {
			if t == nil {
				continue
			}
			for i := range t.slots {
				key := t.slots[i].low & p.layout.keyMask
				if key == 0 || (t == lower && upper != nil && upper.has(key, &p.layout)) {
					continue
				}
				t.get(key, &p.layout, &r)
				if err := fn(key); err != nil {
					return err
				}
			}
		}
		return nil
	}
	n := 0
	each(func(uint64) error { n++; return nil })
	sw.uvarint(uint64(n))
	return each(func(key uint64) error {
		sw.uvarint(key)
		for _, v := range r[:fixedCols] {
			sw.uvarint(v)
		}
		var kinds uint64
		for j, v := range r[fixedCols:] {
			if v != 0 {
				kinds |= 1 << j
			}
		}
		sw.uvarint(kinds)
		for _, v := range r[fixedCols:] {
			if v != 0 {
				sw.uvarint(v)
			}
		}
		return sw.spill()
	})
}

func (p *Posts) readOpen(sr *snapshotReader, w *window) body {
	t := p.readRows(sr, w)
	if t == nil {
		return newRowTable()
	}
	for _, r := range t.over {
		if r.dead() {
			sr.fail("window %d: a deleted row in an open table", w.num)
			return nil
		}
	}
	return t
}

// readOverlay reads a window's delta and counts the records of its view:
// the body's, and the delta's that are new.
func (p *Posts) readOverlay(sr *snapshotReader, w *window) (overlay, int, error) {
	d := p.readRows(sr, w)
	if sr.err != nil {
		return nil, 0, sr.err
	}
	n := w.body.records()
	if d == nil {
		return nil, n, nil
	}
	var r, body postRow
	for _, key := range d.sorted(&p.layout) {
		d.get(key, &p.layout, &r)
		ok, err := p.getBody(w, w.lo+key-1, &body)
		switch {
		case err != nil:
			return nil, 0, err
		case r.dead() && !ok:
			// A post made and deleted over a job's frozen delta: over
			// the body alone it is nothing.
			d.remove(key, &p.layout)
		case r.dead():
			n--
		case !ok:
			n++
		}
	}
	if d.n == 0 {
		return nil, n, nil
	}
	return d, n, nil
}

// readRows reads rows into a new table, nil when there are none.
func (p *Posts) readRows(sr *snapshotReader, w *window) *rowTable {
	n := sr.count("rows")
	if sr.err != nil || n == 0 {
		return nil
	}
	t := &rowTable{}
	size, shift := sizeFor(int(n))
	t.slots, t.shift = make([]rowSlot, size), shift
	var r postRow
	for range n {
		key := sr.uvarint()
		for f := range fixedCols {
			r[f] = sr.uvarint()
		}
		kinds := sr.uvarint()
		if kinds >= 1<<kindCols {
			sr.fail("window %d: row kinds %#x", w.num, kinds)
		}
		for j := range kindCols {
			r[fixedCols+j] = 0
			if kinds>>j&1 != 0 {
				if r[fixedCols+j] = sr.uvarint(); r[fixedCols+j] == 0 && sr.err == nil {
					sr.fail("window %d: a row's kind count of zero", w.num)
				}
			}
		}
		if sr.err != nil {
			return nil
		}
		if key == 0 || key-1 > w.last-w.lo {
			sr.fail("window %d: row key %d out of range", w.num, key)
			return nil
		}
		if !t.put(key, &p.layout, &r) {
			sr.fail("window %d: row key %d listed twice", w.num, key)
			return nil
		}
	}
	return t
}

// decodeCheckedPostBlock checks block i of a sealed or cold body (its
// bytes with the CRC, as eachBlock gives them) and decodes its posts into
// ids and rs, which hold maxPostsInBlock; damage is a *CorruptError
// naming file.
func decodeCheckedPostBlock(x *blockIndex, file string, i int, blk []byte, ids []uint64, rs []postRow) (postBlock, error) {
	first := x.firstID(i)
	off, _ := x.span(i)
	var k postBlock
	if err := checkPostBlock(first, blk); err != nil {
		return k, corruptAt(file, int64(off), "block %d: %v", i, err)
	}
	_ = k.parse(first, blk[:len(blk)-4])
	if err := k.decode(ids, rs); err != nil {
		return k, corruptAt(file, int64(off), "block %d: %v", i, err)
	}
	return k, nil
}
