package follows

import (
	"encoding/binary"
	"math/bits"

	"github.com/tally-dev/tally/engine/bitpack"
)

// A follow or an unfollow changes one pair of one block, which moves a
// handful of values in its columns: the new pair's delta and value, the
// next pair's delta, a run's length, maybe a run gap and start. Decoding
// the block's 256 pairs and encoding them again, each column's width
// chosen anew, costs far more than that change. So the change is made on
// the encoded block: each column it touches is written again with its
// base and widths as they are, its fields before and after the change
// copied as bits, the changed values put between them and its exceptions
// renumbered; a column it does not touch is copied whole. A value that
// does not fit the column as it is (below its base, or wider than its
// fields and exceptions allow) falls back to decoding and encoding the
// block, which also chooses the widths again; so do the changes that
// split or merge a block or change its first pair (the directory's). A
// patched block may be a little longer than the encoder would make it,
// as a block whose snapshots were set in place is (block.setValues),
// until its next full encode.

// splice replaces a column's values [at, at+del) with ins[:nins].
type splice struct {
	at, del, nins int
	ins           [2]uint64
}

func (sp *splice) set(at, del int, ins ...uint64) {
	sp.at, sp.del, sp.nins = at, del, copy(sp.ins[:], ins)
}

// splices is a block change: one splice a column (zero: the column does
// not change), and the block's new counts of pairs and runs.
type splices struct {
	cols [ncols]splice
	n, r int
}

// patch writes blk with ch applied to enc's buffer (valid until the next
// encode or patch). ok is false when a new value does not fit its column.
// The bits before the first change are the block's own, but for the
// header's counts, and are copied as bytes.
func (enc *encoder) patch(blk *block, ch *splices) (buf []byte, ok bool) {
	var plans [ncols]plan
	first := -1
	for c := range ncols {
		sp := &ch.cols[c]
		if sp.del == 0 && sp.nins == 0 {
			continue
		}
		if plans[c], ok = blk.cols[c].plan(blk.buf, sp); !ok {
			return nil, false
		}
		if first < 0 {
			first = c
		}
	}
	col, sp := &blk.cols[first], &ch.cols[first]
	keep := col.hdr // bits of blk that stay as they are
	if plans[first].sameHeader {
		keep = col.off + sp.at*int(col.w)
	}
	buf = append(enc.w.Buf[:0], byte(ch.n-1), byte(ch.r-1))
	buf = append(buf, blk.buf[2:keep/8]...)
	bw := bitWriter{w: bitpack.Writer{Buf: buf}, pos: 8 * len(buf)}
	bw.put(bitpack.Get(blk.buf, keep&^7, keep&7), keep&7)
	for c := first; c < ncols; c++ {
		spliceColumn(&bw, &blk.cols[c], blk.buf, &ch.cols[c], plans[c], c == first && plans[c].sameHeader, &enc.col)
	}
	enc.w = bw.w
	return enc.w.Flush(), true
}

// bitWriter is a bitpack.Writer that knows its position, so that a long
// copy can fill the pending word and then append whole words to Buf:
// with no bits pending, Buf is all that was written.
type bitWriter struct {
	w   bitpack.Writer
	pos int // bits written
}

func (bw *bitWriter) put(v uint64, n int) {
	bw.w.Put(v, n)
	bw.pos += n
}

// copyBits appends the n bits of buf from bit off to bw.
func copyBits(bw *bitWriter, buf []byte, off, n int) {
	if n >= 128 {
		// The bits pending in the Writer are those past Buf's end.
		if k := (64 - (bw.pos - 8*len(bw.w.Buf))) & 63; k > 0 {
			bw.put(bitpack.Get(buf, off, k), k)
			off, n = off+k, n-k
		}
		// The source's bytes to its end and Slack past it.
		src, out := buf[:len(buf)+bitpack.Slack], bw.w.Buf
		for s := uint(off & 7); n >= 64; off, n = off+64, n-64 {
			i := off >> 3
			out = binary.LittleEndian.AppendUint64(out, binary.LittleEndian.Uint64(src[i:i+8])>>s|uint64(src[i+8])<<(64-s))
		}
		bw.w.Buf = out
		bw.pos = 8 * len(out)
	}
	for ; n >= 64; off, n = off+64, n-64 {
		bw.put(bitpack.Get(buf, off, 64), 64)
	}
	if n > 0 {
		bw.put(bitpack.Get(buf, off, n), n)
	}
}

// plan is how a column is written with a splice: its exceptions and
// their high fields' width, and whether its header stays as it is.
type plan struct {
	ne, hw     int
	sameHeader bool
}

// plan returns how column c of buf is written with sp applied, keeping
// its base and widths; false if a new value does not fit them. A new
// value wider than the fields becomes an exception if the column's
// exceptions have room for its high bits (or, in a column without
// exceptions, with high fields as wide as it needs), and there stay few:
// a column that fills with exceptions is better encoded again.
func (c *column) plan(buf []byte, sp *splice) (plan, bool) {
	ins := sp.ins[:sp.nins]
	count := c.count - sp.del + len(ins)
	if count == 0 || c.count == 0 {
		return plan{}, true
	}
	base, width, hw := c.base, int(c.w), int(c.hw)
	ne := 0
	for _, x := range ins {
		if x < base {
			return plan{}, false
		}
		if l := bits.Len64(x - base); l > width {
			if c.ne > 0 && l > width+hw {
				return plan{}, false
			}
			hw = max(hw, l-width)
			ne++
		}
	}
	step, end := int(c.pw+c.hw), sp.at+sp.del
	for x, k := c.xoff, 0; k < c.ne; x, k = x+step, k+1 {
		if pos := int(bitpack.Get(buf, x, int(c.pw))); pos < sp.at || pos >= end {
			ne++
		}
	}
	if ne > c.ne && (ne > count/8+1 || ne >= 1<<9) {
		return plan{}, false
	}
	return plan{ne: ne, hw: hw, sameHeader: ne == c.ne && hw == int(c.hw)}, true
}

// spliceColumn writes column c of buf with sp applied as pl says; with
// tail, its header and fields before the splice are written already.
func spliceColumn(w *bitWriter, c *column, buf []byte, sp *splice, pl plan, tail bool, scratch *bitpack.Writer) {
	ins := sp.ins[:sp.nins]
	count := c.count - sp.del + len(ins)
	switch {
	case count == 0:
		return
	case c.count == 0:
		*scratch = bitpack.Writer{Buf: scratch.Buf[:0]}
		n := putColumn(scratch, ins)
		col := scratch.Flush()
		copyBits(w, append(col, make([]byte, bitpack.Slack)...)[:len(col)], 0, n)
		return
	case sp.del == 0 && len(ins) == 0:
		copyBits(w, buf, c.hdr, c.xoff+c.ne*int(c.pw+c.hw)-c.hdr)
		return
	}
	base, width, ne, hw := c.base, int(c.w), pl.ne, pl.hw
	if !tail {
		wbase := bits.Len64(base)
		w.put(uint64(wbase), 7)
		w.put(base, wbase)
		w.put(uint64(width), 7)
		w.put(uint64(ne), 9)
		if ne > 0 {
			w.put(uint64(hw), 7)
		}
		copyBits(w, buf, c.off, sp.at*width)
	}
	end := sp.at + sp.del
	for _, x := range ins {
		w.put(x-base, width)
	}
	copyBits(w, buf, c.off+end*width, (c.count-end)*width)
	if ne == 0 {
		return
	}
	step := int(c.pw + c.hw)
	pw, shift := bits.Len(uint(count-1)), len(ins)-sp.del
	x, k := c.xoff, 0
	for ; k < c.ne; x, k = x+step, k+1 {
		pos := int(bitpack.Get(buf, x, int(c.pw)))
		if pos >= sp.at {
			break
		}
		w.put(uint64(pos), pw)
		w.put(bitpack.Get(buf, x+int(c.pw), hw), hw)
	}
	for i, v := range ins {
		if d := v - base; bits.Len64(d) > width {
			w.put(uint64(sp.at+i), pw)
			w.put(d>>uint(width), hw)
		}
	}
	for ; k < c.ne; x, k = x+step, k+1 {
		if pos := int(bitpack.Get(buf, x, int(c.pw))); pos >= end {
			w.put(uint64(pos+shift), pw)
			w.put(bitpack.Get(buf, x+int(c.pw), hw), hw)
		}
	}
}

// firstAtLeast walks the running sums start + Σ (value + add) of the
// column's values [from, to) and returns the index k of the first sum at
// least x, that sum (at) and the one before it (before); k is to, and
// at and before the last sum, if none is. It is how a block is searched
// without being decoded: a run's a from the gaps, a pair's b from the
// deltas, stopping where the search ends.
func (c *column) firstAtLeast(buf []byte, from, to int, add, start, x uint64) (k int, before, at uint64) {
	to = min(to, c.count)
	w, mask, base, iw := uint(c.w), c.mask, c.base+add, int(c.w)
	pw, step := int(c.pw), int(c.pw+c.hw)
	xo, xend, xpos := c.xoff, c.xoff+c.ne*step, to
	for ; xo < xend; xo += step {
		if p := int(bitpack.Get(buf, xo, pw)); p >= from {
			xpos = min(p, to)
			break
		}
	}
	off, cur := c.off+from*iw, start
	for k = from; ; {
		// Up to the next patch, four values at a time while their sum
		// stays below x (four loads that do not wait on each other),
		// then one at a time.
		for ; k+4 <= xpos; k, off = k+4, off+4*iw {
			sum := cur + 4*base + bitpack.Bits(buf, off, w, mask) + bitpack.Bits(buf, off+iw, w, mask) +
				bitpack.Bits(buf, off+2*iw, w, mask) + bitpack.Bits(buf, off+3*iw, w, mask)
			if sum >= x {
				break
			}
			cur = sum
		}
		for ; k < xpos; k, off = k+1, off+iw {
			v := base + bitpack.Bits(buf, off, w, mask)
			if cur+v >= x {
				return k, cur, cur + v
			}
			cur += v
		}
		if k == to {
			return to, cur, cur
		}
		v := base + bitpack.Bits(buf, off, w, mask) + bitpack.Get(buf, xo+pw, int(c.hw))<<w
		if cur+v >= x {
			return k, cur, cur + v
		}
		cur += v
		k, off = k+1, off+iw
		if xo += step; xo < xend {
			xpos = min(int(bitpack.Get(buf, xo, pw)), to)
		} else {
			xpos = to
		}
	}
}

// sum returns the sum of the column's values [from, to).
func (c *column) sum(buf []byte, from, to int) uint64 {
	to = min(to, c.count)
	if from >= to {
		return 0
	}
	s, w, off := uint64(to-from)*c.base, uint(c.w), c.off+from*int(c.w)
	for k := from; k < to && w > 0; k++ { // a run-length column is often all zeros
		s += bitpack.Bits(buf, off, w, c.mask)
		off += int(w)
	}
	for x, k := c.xoff, 0; k < c.ne; x, k = x+int(c.pw+c.hw), k+1 {
		if pos := int(bitpack.Get(buf, x, int(c.pw))); pos >= from && pos < to {
			s += bitpack.Get(buf, x+int(c.pw), int(c.hw)) << w
		}
	}
	return s
}

// runAt is where a's pairs are, or would go, in a block: run j, its
// first pair's index and its length. found is false when the block has
// no run of a; j is then the last run below a, whose a is below. next is
// the a of the run after j (hasNext), below the a of the run before j
// when found.
type runAt struct {
	j, start, length int
	found, hasNext   bool
	below, next      uint64
}

// locateRun finds a's run in blk (first pair (a0, _), a0 <= a), reading
// the gaps as far as a and the lengths of the runs before it.
func (blk *block) locateRun(a0, a uint64) runAt {
	gaps, nr := &blk.cols[colGaps], blk.r-1
	var ra runAt
	if a == a0 {
		ra.found = true
		if ra.hasNext = nr > 0; ra.hasNext {
			ra.next = a0 + gaps.at(blk.buf, 0) + 1
		}
	} else {
		k, before, at := gaps.firstAtLeast(blk.buf, 0, nr, 1, a0, a)
		ra.below = before
		if ra.found = k < nr && at == a; ra.found {
			ra.j = k + 1
			if ra.hasNext = k+1 < nr; ra.hasNext {
				ra.next = at + gaps.at(blk.buf, k+1) + 1
			}
		} else {
			ra.j, ra.hasNext, ra.next = k, k < nr, at
		}
	}
	lens := &blk.cols[colLens]
	ra.start = int(lens.sum(blk.buf, 0, ra.j)) + ra.j
	if ra.j < nr {
		ra.length = int(lens.at(blk.buf, ra.j)) + 1
	} else {
		ra.length = blk.n - ra.start
	}
	return ra
}

// pairAt is where b is, or would go, in a run: its index k in the run,
// the b before it (k > 0), the b at k (k < the run's length) and the one
// after it (hasNext).
type pairAt struct {
	k                 int
	found, hasNext    bool
	before, at, after uint64
}

// locatePair finds b in run ra of blk (first pair (_, b0)), reading the
// run's deltas as far as b.
func (blk *block) locatePair(b0 uint64, ra runAt, b uint64) pairAt {
	var pa pairAt
	first := b0
	if ra.j > 0 {
		first = blk.cols[colStarts].at(blk.buf, ra.j-1)
	}
	deltas, d := &blk.cols[colDeltas], ra.start-ra.j // the run's second pair's delta
	if b <= first {
		pa.at, pa.found = first, b == first
	} else {
		k, before, at := deltas.firstAtLeast(blk.buf, d, d+ra.length-1, 1, first, b)
		pa.k, pa.before, pa.at = k-d+1, before, at
		pa.found = pa.k < ra.length && at == b
	}
	if pa.hasNext = pa.k+1 < ra.length; pa.hasNext {
		pa.after = pa.at + deltas.at(blk.buf, d+pa.k) + 1
	}
	return pa
}

// patchResult is what patchInsert and patchRemove did.
type patchResult uint8

const (
	patched   patchResult = iota
	unchanged             // the pair is there already (insert) or not there (remove)
	fallback              // the block must be decoded and encoded
)

// patchInsert adds (a, b) with value v to the block at at, if the block
// has room and (a, b) is not its first pair.
func (p *pairs) patchInsert(at pos, a, b uint64, v int64) patchResult {
	d := p.entry(at)
	if !less(d.a, d.b, a, b) {
		if d.a == a && d.b == b {
			return unchanged
		}
		return fallback
	}
	if d.n() >= maxBlock {
		return fallback
	}
	var blk block
	p.parse(d, &blk)
	ra := blk.locateRun(d.a, a)
	ch := splices{n: blk.n + 1, r: blk.r}
	if ra.found {
		pa := blk.locatePair(d.b, ra, b)
		if pa.found {
			return unchanged
		}
		i := ra.start + pa.k
		// A pair not first in run j has delta index i-(j+1).
		switch {
		case pa.k == 0: // the run's new first pair (j > 0: (a, b) is above the block's first)
			ch.cols[colStarts].set(ra.j-1, 1, b)
			ch.cols[colDeltas].set(ra.start-ra.j, 0, pa.at-b-1)
		case pa.k < ra.length:
			ch.cols[colDeltas].set(i-ra.j-1, 1, b-pa.before-1, pa.at-b-1)
		default:
			ch.cols[colDeltas].set(i-ra.j-1, 0, b-pa.before-1)
		}
		if ra.j < blk.r-1 {
			ch.cols[colLens].set(ra.j, 1, uint64(ra.length))
		}
		ch.cols[colValues].set(i, 0, uint64(v)^signBit)
	} else {
		// A new run, after run j.
		j, i := ra.j, ra.start+ra.length
		ch.r++
		if ra.hasNext {
			ch.cols[colGaps].set(j, 1, a-ra.below-1, ra.next-a-1)
			ch.cols[colLens].set(j+1, 0, 0)
		} else {
			ch.cols[colGaps].set(j, 0, a-ra.below-1)
			ch.cols[colLens].set(j, 0, uint64(ra.length-1))
		}
		ch.cols[colStarts].set(j, 0, b)
		ch.cols[colValues].set(i, 0, uint64(v)^signBit)
	}
	return p.storePatch(at, &blk, &ch)
}

// patchRemove removes (a, b) from the block at at, if the block stays at
// least minBlock pairs (or is the only block) and (a, b) is not its first
// pair. more reports that a's run in the block keeps pairs.
func (p *pairs) patchRemove(at pos, a, b uint64) (res patchResult, more bool) {
	d := p.entry(at)
	if !less(d.a, d.b, a, b) {
		if d.a == a && d.b == b {
			return fallback, false
		}
		return unchanged, false
	}
	n := d.n()
	if n <= minBlock && (len(p.pages) > 1 || p.pages[0].n > 1) {
		return fallback, false
	}
	var blk block
	p.parse(d, &blk)
	ra := blk.locateRun(d.a, a)
	if !ra.found {
		return unchanged, false
	}
	pa := blk.locatePair(d.b, ra, b)
	if !pa.found {
		return unchanged, false
	}
	i, j := ra.start+pa.k, ra.j
	ch := splices{n: blk.n - 1, r: blk.r}
	switch {
	case ra.length == 1: // the run goes (j > 0: (a, b) is above the block's first)
		ch.r--
		if ra.hasNext {
			ch.cols[colGaps].set(j-1, 2, ra.next-ra.below-1)
			ch.cols[colLens].set(j, 1)
		} else {
			ch.cols[colGaps].set(j-1, 1)
			ch.cols[colLens].set(j-1, 1)
		}
		ch.cols[colStarts].set(j-1, 1)
	case pa.k == 0: // the run's second pair becomes its first
		ch.cols[colStarts].set(j-1, 1, pa.after)
		ch.cols[colDeltas].set(ra.start-j, 1)
	case pa.hasNext:
		ch.cols[colDeltas].set(i-j-1, 2, pa.after-pa.before-1)
	default:
		ch.cols[colDeltas].set(i-j-1, 1)
	}
	if ra.length > 1 && j < blk.r-1 {
		ch.cols[colLens].set(j, 1, uint64(ra.length-2))
	}
	ch.cols[colValues].set(i, 1)
	return p.storePatch(at, &blk, &ch), ra.length > 1
}

// storePatch writes the block at at with ch applied, if it fits.
func (p *pairs) storePatch(at pos, blk *block, ch *splices) patchResult {
	buf, ok := p.enc.patch(blk, ch)
	if !ok {
		return fallback
	}
	d := p.entry(at)
	p.store(at, buf, d.a, d.b, ch.n)
	p.maybeCompact()
	return patched
}
