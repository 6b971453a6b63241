package follows

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"unsafe"

	"github.com/tally-dev/tally/engine/bitpack"
)

// A block holds 1..maxBlock pairs (a, b) in strictly increasing order, each
// with a value v. Its first pair is kept in the directory (dirEntry), not in
// the block. The pairs form runs of equal a (a viewer's followees, or a
// user's followers); the block stores, LSB-first (engine/bitpack):
//
//	n-1 (8 bits) | r-1 (8 bits), r the number of runs
//	column "gaps"   runs 1..r-1: the run's a minus the previous run's, minus 1
//	column "lens"   runs 0..r-2: the run's length minus 1 (the last run
//	                has what remains of n)
//	column "starts" runs 1..r-1: the b of the run's first pair (run 0's is
//	                the directory's)
//	column "deltas" the n-r pairs that do not start a run: b minus the
//	                previous pair's b, minus 1
//	column "values" all n pairs: v, its sign bit flipped (so that the order
//	                of int64s is that of the stored uint64s)
//
// A column of count 0 takes no bits. Otherwise it is frame-of-reference with
// patches: base (the column's minimum) is subtracted from every value, each
// difference keeps its low w bits in a field of w bits, and the few whose
// difference is wider (exceptions) add their high bits in a list after the
// fields:
//
//	wbase (7 bits) | base (wbase bits) | w (7 bits) | ne (9 bits) |
//	[hw (7 bits), if ne > 0] | count × low (w bits) |
//	ne × (position (bits.Len(count-1) bits), high (hw bits))
//
// with the exceptions in increasing position order. The encoder picks
// the w that makes the column shortest. That is the seeds' rule for
// counts, applied to every column: store the narrow values narrow and keep
// the rare wide ones apart, so that one followee with a hundred thousand
// posts does not widen the snapshots of the 200 pairs around it, nor one
// long gap between followees every gap.
//
// Every field is at a computable bit offset, so a reader decodes only the
// run it wants (List of one viewer in a block of a dozen), and the only
// sequential part is the sum of the deltas within a run. The first pair
// lives in the directory because a search reads it there anyway. A block
// holds up to 256 pairs: a follow or unfollow rewrites the one block it
// touches (patch.go splices its columns; splits and merges encode it), and
// the per-block costs (a directory entry, the column headers) are spread
// over the pairs.
const (
	maxBlock = 256
	// minBlock is the size under which a block is merged with a
	// neighbour: blocks stay at least a quarter full.
	minBlock = maxBlock / 4

	colGaps, colLens, colStarts, colDeltas, colValues, ncols = 0, 1, 2, 3, 4, 5

	signBit = 1 << 63
)

// errBlock wraps what block.parse and checkBlock find wrong in a block.
var errBlock = errors.New("follows: bad block")

// column is a parsed column header: where its fields are and how wide.
type column struct {
	base           uint64
	mask           uint64 // bitpack.LowMask(w)
	hdr, off, xoff int    // bit offsets of the header, the low fields and the exceptions
	count, ne      int
	w, pw, hw      uint8
}

// block is a parsed block: its bytes (with bitpack.Slack bytes of
// capacity past them) and its columns.
type block struct {
	buf  []byte
	n, r int
	cols [ncols]column
}

// parse parses the block in buf into blk. It checks that every field
// lies within buf, so that reading any of them is safe whatever buf holds;
// it does not check that the pairs ascend (checkBlock does).
func (blk *block) parse(buf []byte) error {
	blk.buf = buf
	nbits := 8 * len(buf)
	if nbits < 16 {
		return fmt.Errorf("%w: %d bytes", errBlock, len(buf))
	}
	h := bitpack.Get(buf, 0, 16)
	blk.n, blk.r = int(h&0xff)+1, int(h>>8)+1
	if blk.r > blk.n {
		return fmt.Errorf("%w: %d runs of %d pairs", errBlock, blk.r, blk.n)
	}
	p := 16
	counts := [ncols]int{blk.r - 1, blk.r - 1, blk.r - 1, blk.n - blk.r, blk.n}
	for i, count := range counts {
		c := &blk.cols[i]
		*c = column{count: count, hdr: p}
		if count == 0 {
			continue
		}
		// wbase (7) | base | w (7) | ne (9) | [hw (7)]
		if p+7 > nbits {
			return fmt.Errorf("%w: column %d: header past the end", errBlock, i)
		}
		wbase := int(bitpack.Get(buf, p, 7))
		p += 7
		if wbase > 64 || p+wbase+16 > nbits {
			return fmt.Errorf("%w: column %d: header past the end", errBlock, i)
		}
		c.base = bitpack.Get(buf, p, wbase)
		p += wbase
		f := bitpack.Get(buf, p, 16)
		p += 16
		c.w, c.ne = uint8(f&127), int(f>>7)
		if c.ne > 0 {
			if p+7 > nbits {
				return fmt.Errorf("%w: column %d: header past the end", errBlock, i)
			}
			c.hw = uint8(bitpack.Get(buf, p, 7))
			p += 7
		}
		if c.w > 64 || c.ne > count || c.ne > 0 && (c.hw == 0 || c.w+c.hw > 64) {
			return fmt.Errorf("%w: column %d: widths %d+%d with %d exceptions of %d", errBlock, i, c.w, c.hw, c.ne, count)
		}
		c.mask = bitpack.LowMask(uint(c.w))
		c.pw = uint8(bits.Len(uint(count - 1)))
		c.off = p
		c.xoff = p + count*int(c.w)
		p = c.xoff + c.ne*int(c.pw+c.hw)
		if p > nbits {
			return fmt.Errorf("%w: column %d: %d bits past the end", errBlock, i, p-nbits)
		}
	}
	return nil
}

// decode sets dst[k], k < to-from, to value from+k of the column plus
// add or, with sum, to start plus the sum of those up to and including it
// (a run's b from its deltas). A value past the column's end (a corrupt
// block's runs) is 0.
func (c *column) decode(buf []byte, from, to int, dst []uint64, add uint64, sum bool, start uint64) {
	dst = dst[:to-from]
	n := len(dst)
	if to > c.count {
		n = max(c.count-from, 0)
		clear(dst[n:])
	}
	base, mask, w, off := c.base+add, c.mask, int(c.w), c.off+from*int(c.w)
	switch {
	case sum && c.ne == 0 && w <= 56:
		// A run's b with no patches to make: one pass.
		cur := start
		for k := range dst[:n] {
			cur += base + bitpack.Bits56(buf, off)&mask
			dst[k] = cur
			off += w
		}
		return
	case w <= 56:
		for k := range dst[:n] {
			dst[k] = base + bitpack.Bits56(buf, off)&mask
			off += w
		}
	default:
		for k := range dst[:n] {
			dst[k] = base + bitpack.Get(buf, off, w)
			off += w
		}
	}
	x := c.xoff
	for range c.ne {
		pos := int(bitpack.Get(buf, x, int(c.pw)))
		if pos >= from && pos < from+n {
			dst[pos-from] += bitpack.Get(buf, x+int(c.pw), int(c.hw)) << c.w
		}
		x += int(c.pw + c.hw)
	}
	if sum {
		cur := start
		for k := range dst[:n] {
			cur += dst[k]
			dst[k] = cur
		}
	}
}

// at returns value i of the column (0 past its end).
func (c *column) at(buf []byte, i int) uint64 {
	if i >= c.count {
		return 0
	}
	v := c.base + bitpack.Get(buf, c.off+i*int(c.w), int(c.w))
	for x, k := c.xoff, 0; k < c.ne; x, k = x+int(c.pw+c.hw), k+1 {
		if int(bitpack.Get(buf, x, int(c.pw))) == i {
			v += bitpack.Get(buf, x+int(c.pw), int(c.hw)) << c.w
		}
	}
	return v
}

// reader reads a column's values in order. It meets the exceptions in
// position order, as the encoder writes them, so that a value costs a
// field's read where at scans the exceptions.
type reader struct {
	c      *column
	buf    []byte
	i, off int
	x, pos int // the next exception's bit offset and position (-1: none)
}

func (c *column) reader(buf []byte, from int) reader {
	r := reader{c: c, buf: buf, i: from, off: c.off + from*int(c.w), x: c.xoff}
	r.seekPatch(from)
	return r
}

// seekPatch moves to the first exception at position from or after it.
func (r *reader) seekPatch(from int) {
	step := int(r.c.pw + r.c.hw)
	end := r.c.xoff + r.c.ne*step
	for r.pos = -1; r.x < end; r.x += step {
		if p := int(bitpack.Get(r.buf, r.x, int(r.c.pw))); p >= from {
			r.pos = p
			return
		}
	}
}

// next returns the next value (0 past the column's end).
func (r *reader) next() uint64 {
	c, i := r.c, r.i
	r.i++
	if i >= c.count {
		return 0
	}
	v := c.base + bitpack.Get(r.buf, r.off, int(c.w))
	r.off += int(c.w)
	if i == r.pos {
		v += bitpack.Get(r.buf, r.x+int(c.pw), int(c.hw)) << c.w
		r.x += int(c.pw + c.hw)
		r.seekPatch(i + 1)
	}
	return v
}

// find returns the run of blk holding a (first pair (a0, b0)): its index,
// first pair's index and length; j < 0 if a has no run here. It walks
// the gaps as far as a and sums the lengths of the runs before it
// (locateRun), without decoding the block.
func (blk *block) find(a0, a uint64) (j, start, length int) {
	if a == a0 {
		return 0, 0, blk.firstLen()
	}
	if a < a0 || blk.r == 1 {
		return -1, 0, 0
	}
	ra := blk.locateRun(a0, a)
	if !ra.found {
		return -1, 0, 0
	}
	// A corrupt block's lengths may sum past n, or wrap around.
	start = min(max(ra.start, 0), blk.n)
	return ra.j, start, min(max(ra.length, 0), blk.n-start)
}

// firstLen returns the length of run 0.
func (blk *block) firstLen() int {
	if blk.r == 1 {
		return blk.n
	}
	return int(min(blk.cols[colLens].at(blk.buf, 0), maxBlock)) + 1
}

// has reports whether blk (first pair (a0, b0)) holds a pair of a.
func (blk *block) has(a0, a uint64) bool {
	j, _, _ := blk.find(a0, a)
	return j >= 0
}

// run appends the b (and, if values, the v) of the pairs [start,
// start+length) of run j to bs and vs. b0 is the block's first b.
func (blk *block) run(b0 uint64, j, start, length int, bs []uint64, vs []int64, values bool) ([]uint64, []int64) {
	first := b0
	if j > 0 {
		first = blk.cols[colStarts].at(blk.buf, j-1)
	}
	k := len(bs)
	bs = slices.Grow(bs, length)[:k+length]
	bs[k] = first
	// The deltas of run j's pairs after the first: one per pair before
	// them that is not a run's first.
	d := start - j
	blk.cols[colDeltas].decode(blk.buf, d, d+length-1, bs[k+1:], 1, true, first)
	if values {
		k := len(vs)
		vs = slices.Grow(vs, length)[:k+length]
		// x ^ signBit is x + signBit: the flip is folded into the base.
		blk.cols[colValues].decode(blk.buf, start, start+length, uint64s(vs[k:]), signBit, false, 0)
	}
	return bs, vs
}

// setValues writes vs as the values of the pairs [start, start+len(vs))
// in place and reports true if each fits the values column as it is: in
// a field's w bits or, at an exception's place, in w plus the exception's
// bits. A feed read's new snapshots are post counts a little above the
// old ones, and usually fit. The block then holds its new pairs, in fields
// the encoder might have chosen otherwise.
func (blk *block) setValues(start int, vs []int64) bool {
	c := &blk.cols[colValues]
	end := start + len(vs)
	// The exceptions in the range: their positions and high fields.
	var xs [maxBlock]int32
	var xpos [maxBlock]uint8
	nx := 0
	for x, k := c.xoff, 0; k < c.ne; x, k = x+int(c.pw+c.hw), k+1 {
		if pos := int(bitpack.Get(blk.buf, x, int(c.pw))); pos >= start && pos < end && nx < maxBlock {
			xs[nx], xpos[nx] = int32(x+int(c.pw)), uint8(pos-start)
			nx++
		}
	}
	wide := bitpack.LowMask(uint(c.w + c.hw))
	for k, v := range vs {
		d, room := uint64(v)^signBit-c.base, c.mask
		if slices.Contains(xpos[:nx], uint8(k)) {
			room = wide
		}
		if d&^room != 0 {
			return false
		}
	}
	for k, v := range vs {
		bitpack.Set(blk.buf, c.off+(start+k)*int(c.w), int(c.w), uint64(v)^signBit-c.base)
	}
	for i := range nx {
		d := uint64(vs[xpos[i]]) ^ signBit - c.base
		bitpack.Set(blk.buf, int(xs[i]), int(c.hw), d>>c.w)
	}
	return true
}

// entries is a decoded run of pairs, room for two blocks and one more
// pair: what a writer merges, splits and rewrites.
type entries struct {
	a, b [2*maxBlock + 1]uint64
	v    [2*maxBlock + 1]int64
	n    int
}

// decodeAll appends every pair of blk (first pair (a0, b0)) to e, using
// sc for the run columns. A corrupt block decodes to garbage, never out of
// bounds.
func (blk *block) decodeAll(a0, b0 uint64, e *entries, sc *columns) {
	g, l, s, d := sc[colGaps][:], sc[colLens][:], sc[colStarts][:], sc[colDeltas][:]
	for c, dst := range [...][]uint64{g, l, s, d} {
		count := blk.cols[c].count
		blk.cols[c].decode(blk.buf, 0, count, dst, 0, false, 0)
	}
	as, bs, vs := e.a[e.n:e.n+blk.n], e.b[e.n:e.n+blk.n], e.v[e.n:e.n+blk.n]
	blk.cols[colValues].decode(blk.buf, 0, blk.n, uint64s(vs), signBit, false, 0)
	a, i, k := a0, 0, 0
	for j := 0; j < blk.r && i < blk.n; j++ {
		b := b0
		if j > 0 {
			a += g[j-1] + 1
			b = s[j-1]
		}
		end := blk.n
		if j < blk.r-1 {
			end = min(i+int(min(l[j], maxBlock))+1, blk.n)
		}
		as[i], bs[i] = a, b
		for i++; i < end; i++ {
			b += d[k&(maxBlock-1)] + 1
			k++
			as[i], bs[i] = a, b
		}
	}
	e.n += blk.n
}

// uint64s views vs as the uint64s the values column stores.
func uint64s(vs []int64) []uint64 {
	return unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(vs))), len(vs))
}

// columns holds a block's columns decoded, or to encode.
type columns [ncols][maxBlock]uint64

// encoder writes blocks; a writer owns one.
type encoder struct {
	w    bitpack.Writer
	col  bitpack.Writer // a new column a patch adds
	cols columns
}

// encode returns the block of e's pairs [lo, hi), 1 <= hi-lo <= maxBlock,
// in the encoder's buffer (valid until the next encode).
func (enc *encoder) encode(e *entries, lo, hi int) []byte {
	n := hi - lo
	as, bs, vs := e.a[lo:hi], e.b[lo:hi], e.v[lo:hi]
	var counts [ncols]int
	add := func(c int, x uint64) {
		enc.cols[c][counts[c]] = x
		counts[c]++
	}
	runStart := 0
	for i := range n {
		switch {
		case i == 0:
		case as[i] == as[i-1]:
			add(colDeltas, bs[i]-bs[i-1]-1)
		default:
			add(colGaps, as[i]-as[i-1]-1)
			add(colLens, uint64(i-runStart-1))
			add(colStarts, bs[i])
			runStart = i
		}
		add(colValues, uint64(vs[i])^signBit)
	}
	r := counts[colGaps] + 1
	enc.w = bitpack.Writer{Buf: enc.w.Buf[:0]}
	enc.w.Put(uint64(n-1), 8)
	enc.w.Put(uint64(r-1), 8)
	for c := range ncols {
		putColumn(&enc.w, enc.cols[c][:counts[c]])
	}
	return enc.w.Flush()
}

// putColumn writes xs as a column (see the format above), with the width
// that makes it shortest, and returns its length in bits.
func putColumn(w *bitpack.Writer, xs []uint64) (nbits int) {
	if len(xs) == 0 {
		return 0
	}
	base := xs[0]
	for _, x := range xs {
		base = min(base, x)
	}
	var hist [65]int
	maxLen := 0
	for _, x := range xs {
		l := bits.Len64(x - base)
		hist[l]++
		maxLen = max(maxLen, l)
	}
	pw := bits.Len(uint(len(xs) - 1))
	width, cost, above := maxLen, len(xs)*maxLen, 0
	for c := maxLen - 1; c >= 0; c-- {
		above += hist[c+1]
		if k := len(xs)*c + above*(pw+maxLen-c) + 7; k < cost {
			width, cost = c, k
		}
	}
	ne := 0
	for c := width + 1; c <= maxLen; c++ {
		ne += hist[c]
	}
	wbase := bits.Len64(base)
	w.Put(uint64(wbase), 7)
	w.Put(base, wbase)
	w.Put(uint64(width), 7)
	w.Put(uint64(ne), 9)
	hw := maxLen - width
	nbits = 7 + wbase + 16 + len(xs)*width + ne*(pw+hw)
	if ne > 0 {
		w.Put(uint64(hw), 7)
		nbits += 7
	}
	w.PutFields(xs, base, width)
	if ne == 0 {
		return nbits
	}
	for i, x := range xs {
		if d := x - base; bits.Len64(d) > width {
			w.Put(uint64(i), pw)
			w.Put(d>>uint(width), hw)
		}
	}
	return nbits
}

// checkBlock decodes blk in full and checks what block.parse does not:
// that each column's exceptions are in increasing position order, that
// the runs add up to n, and that the pairs ascend strictly from (a0, b0)
// with no overflow. It appends the pairs to e, using enc's columns.
func checkBlock(blk *block, a0, b0 uint64, e *entries, enc *encoder) error {
	for i, c := range blk.cols {
		x, last := c.xoff, -1
		for range c.ne {
			pos := int(bitpack.Get(blk.buf, x, int(c.pw)))
			if pos <= last || pos >= c.count {
				return fmt.Errorf("%w: column %d: exception at %d after %d", errBlock, i, pos, last)
			}
			last = pos
			x += int(c.pw + c.hw)
		}
	}
	sum := 0
	lens := blk.cols[colLens].reader(blk.buf, 0)
	for range blk.r - 1 {
		sum += int(min(lens.next(), maxBlock)) + 1
	}
	if sum >= blk.n {
		return fmt.Errorf("%w: runs of %d pairs in a block of %d", errBlock, sum, blk.n)
	}
	first := e.n
	blk.decodeAll(a0, b0, e, &enc.cols)
	for i := first + 1; i < e.n; i++ {
		if !less(e.a[i-1], e.b[i-1], e.a[i], e.b[i]) {
			return fmt.Errorf("%w: pair %d (%d, %d) not above (%d, %d)", errBlock, i-first, e.a[i], e.b[i], e.a[i-1], e.b[i-1])
		}
	}
	// A gap that wraps a around to a smaller a makes the pairs descend;
	// the one that wraps it to the same a, two runs of one a, does not.
	gaps := blk.cols[colGaps].reader(blk.buf, 0)
	for range blk.r - 1 {
		if gaps.next() == math.MaxUint64 {
			return fmt.Errorf("%w: a run gap wraps around", errBlock)
		}
	}
	return nil
}

// trimBits returns the bytes of blk that its fields use.
func trimBits(blk *block) []byte {
	end := 16
	for _, c := range blk.cols {
		if c.count > 0 {
			end = c.xoff + c.ne*int(c.pw+c.hw)
		}
	}
	return blk.buf[:(end+7)/8]
}

func less(a1, b1, a2, b2 uint64) bool { return a1 < a2 || a1 == a2 && b1 < b2 }
