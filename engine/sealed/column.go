package sealed

import (
	"encoding/binary"
	"math/bits"

	"github.com/tally-dev/tally/engine/bitpack"
)

// A value column of a block, shared with engine/tier's blocks:
//
//	header = w uint8 | xw uint8 | nexc uvarint
//	bits   = count values of w bits | nexc positions of iw bits | nexc high parts of xw bits
//
// Every value's low w bits are inline; the values that do not fit (the
// exceptions) have their position (iw = bits.Len(count-1) bits) and high
// bits v>>w in two side lists. This is seed 003's "narrow field, escape
// to an overflow table" applied per block, with the width chosen per
// block and per column instead of fixed at 16 bits. With w = 0 the column
// is a sparse list of its non-zero values; a column that is zero in every
// record costs its header.
//
// An escape value in the inline slot (all ones, as seed 003 does) would
// spare a reader the search of the exception list for most posts, but the
// exception would then have to hold the whole value rather than its high
// bits: on the datagen set that cost 0.27 bytes per post and saved 7% of
// an in-cache lookup, nothing measurable out of cache.

// ColumnPlan is how one column of a block is packed.
type ColumnPlan struct {
	w, xw uint8
	nexc  int
}

// PositionBits is iw, the bits of an exception's position among count
// values.
func PositionBits(count int) int {
	if count <= 1 {
		return 0
	}
	return bits.Len(uint(count - 1))
}

// PlanColumn picks the width that minimises the column's bits, given that
// an exception costs its position (PositionBits(len(vals)) bits) plus its
// high bits.
func PlanColumn(vals []uint64) ColumnPlan {
	iw := PositionBits(len(vals))
	var hist [65]int // hist[k] = values whose bit length is k
	maxLen := 0
	for _, v := range vals {
		k := bits.Len64(v)
		hist[k]++
		maxLen = max(maxLen, k)
	}
	best := ColumnPlan{w: uint8(maxLen)}
	bestCost := len(vals) * maxLen
	exc := 0 // values longer than w
	for w := maxLen - 1; w >= 0; w-- {
		exc += hist[w+1]
		cost := len(vals)*w + exc*(iw+maxLen-w)
		if cost <= bestCost {
			best, bestCost = ColumnPlan{w: uint8(w), xw: uint8(maxLen - w), nexc: exc}, cost
		}
	}
	return best
}

// AppendHeader appends the column's header to dst.
func (p ColumnPlan) AppendHeader(dst []byte) []byte {
	dst = append(dst, p.w, p.xw)
	return binary.AppendUvarint(dst, uint64(p.nexc))
}

// Put writes the column's bits: vals, the values PlanColumn was given.
func (p ColumnPlan) Put(bw *bitpack.Writer, vals []uint64) {
	for _, v := range vals {
		bw.Put(v, int(p.w))
	}
	if p.nexc == 0 {
		return
	}
	iw := PositionBits(len(vals))
	for i, v := range vals {
		if v>>p.w != 0 {
			bw.Put(uint64(i), iw)
		}
	}
	for _, v := range vals {
		if v>>p.w != 0 {
			bw.Put(v>>p.w, int(p.xw))
		}
	}
}

// Column is a parsed view of one value column: Value reads one value
// without decoding the others. Its masks are kept rather than computed
// per read: in Go a shift by a variable amount costs a fix-up for amounts
// of 64 and more, on every read.
type Column struct {
	w, xw, iw      int
	nexc           int
	vals, idx, exc int // bit offsets into the block's bit area
	wmask, xmask   uint64
	imask          uint64
}

// Bits returns the bits the column takes in the bit area.
func (c *Column) Bits(count int) int { return count*c.w + c.nexc*(c.iw+c.xw) }

// Value returns value i of the column, a its block's bit area.
func (c *Column) Value(a []byte, i int) uint64 {
	v := bitpack.Bits(a, c.vals+i*c.w, uint(c.w), c.wmask)
	n := c.nexc
	if n == 0 {
		return v
	}
	// Value i is an exception if the first position >= i is i: count the
	// positions below i, e, then test position e (or n-1 when e = n).
	//
	// Nearly every block has exceptions in every count column (8-14 per
	// column on the datagen set), so this runs for most reads, and whether
	// a post is an exception is a coin toss: the count compares a word of
	// positions with i at once (SWAR), with no branch on the data, where a
	// binary search was a chain of dependent loads and a misprediction or
	// two per column. The even and the odd lanes are compared apart, each
	// with the free lane above it as a guard bit that the subtraction
	// clears when the position is below i. Positions past the list read
	// as all ones.
	t := &swar[c.iw&15]
	iw, iv, g := uint(c.iw), uint64(i)*t.ones, t.guard
	var e int
	if c1 := min(n, t.lanes); n-c1 <= t.lanes {
		// Two words at most, the common case, without a loop: the second
		// starts at the end of the first (a valid offset however short
		// the list) and is all padding when the list fits in one. The odd
		// lanes' guard bits move down one bit, into the even lanes' top
		// bit (cleared by the masks), so that one popcount counts both.
		x1 := bitpack.Bits56(a, c.idx) | ^(1<<(uint(c1)*iw&63) - 1)
		x2 := bitpack.Bits56(a, c.idx+c1*int(iw)) | ^(1<<(uint(n-c1)*iw&63) - 1)
		e = 2*t.both -
			bits.OnesCount64(((x1&t.even|g)-iv)&g|((x1>>iw&t.even|g)-iv)&g>>1) -
			bits.OnesCount64(((x2&t.even|g)-iv)&g|((x2>>iw&t.even|g)-iv)&g>>1)
	} else {
		for j := 0; j < n; j += t.lanes {
			x := bitpack.Bits56(a, c.idx+j*int(iw)) | ^(1<<(uint(min(t.lanes, n-j))*iw&63) - 1)
			e += t.both - bits.OnesCount64(((x&t.even|g)-iv)&g|((x>>iw&t.even|g)-iv)&g>>1)
		}
	}
	e = min(e, n-1)
	x := bitpack.Bits56(a, c.idx+e*int(iw)) & c.imask
	hi := bitpack.Bits(a, c.exc+e*c.xw, uint(c.xw), c.xmask)
	hit := x ^ uint64(i) // 0 when value i is exception e
	hi &= (hit|-hit)>>63 - 1
	return v | hi<<uint(c.w&63)
}

// swarLanes describes iw-bit lanes for Value's count: lanes of them fit
// in the 56 bits bitpack.Bits56 returns; even has the even lanes' bits,
// guard the bit above each even lane, ones the low bit of each even lane;
// both is twice the number of even lanes. For iw = 0 (a one-value column,
// whose only position is 0 and i = 0) it is all zeros but lanes, and
// counts none. 16 entries, so that indexing by iw&15 needs no bounds
// check; iw <= 8.
type swarLanes struct {
	even, guard, ones uint64
	lanes, both       int
}

var swar = func() (t [16]swarLanes) {
	t[0].lanes = 56
	for iw := 1; iw <= 8; iw++ {
		s := &t[iw]
		s.lanes = 56 / iw
		for j := 0; j < s.lanes; j += 2 {
			s.even |= bitpack.LowMask(uint(iw)) << uint(j*iw)
			s.guard |= 1 << uint(j*iw+iw)
			s.ones |= 1 << uint(j*iw)
			s.both += 2
		}
	}
	return t
}()

// Decode writes the column's values to dst (len(dst) is the column's
// count), checking what ParseBlockHeader does not: that the exceptions'
// positions increase and lie below the count and that no exception's
// high bits are zero, so that the column has one encoding.
func (c *Column) Decode(a []byte, dst []uint64) error {
	for i := range dst {
		dst[i] = bitpack.Bits(a, c.vals+i*c.w, uint(c.w), c.wmask)
	}
	prev := -1
	for e := range c.nexc {
		i := int(bitpack.Bits(a, c.idx+e*c.iw, uint(c.iw), c.imask))
		hi := bitpack.Bits(a, c.exc+e*c.xw, uint(c.xw), c.xmask)
		if i <= prev || i >= len(dst) || hi == 0 {
			return errBlock
		}
		prev = i
		dst[i] |= hi << uint(c.w)
	}
	return nil
}

// ParseBlockHeader parses the header of block b (its bytes without the
// CRC, with BlockSlack bytes of capacity past them, which the caller
// checks) whose first id is first: the id column's header into ids;
// then, for a block with a sparse group (sparse), k, the number of
// records that have it; then the headers of cols, the first dense of
// them with a value for each record, the others with one for each of the
// k records (after n presence bits at bit pres, when 0 < k < n; pres is
// -1 otherwise). A value has at most maxBits bits. It checks that the
// header is canonical and that the regions it declares tile the block
// exactly, and gives ids the bit area; ok is false for a malformed
// header. Lookups on a block that passed stay within its bytes whatever
// they hold.
//
// It is one function for the whole header, sealed's blocks and engine/
// tier's: a block is parsed for every page that reads it, and a call for
// each part (ids, columns) cost postcounts' sealed pages 5 to 15%
// (BenchmarkGetPage/sealed-vs-counters, against 1.2x before).
func ParseBlockHeader(ids *IDs, cols []Column, first uint64, b []byte, dense int, sparse bool, maxBits int) (k, pres int, ok bool) {
	if len(b) < 3 {
		return 0, 0, false
	}
	ids.first = first
	ids.n = int(b[0]) + 1
	top := uint(b[1])
	ids.l = int(b[2])
	holes, p := bitpack.Uvarint(b, 3)
	hiLen, p := bitpack.Uvarint(b, p)
	if p < 0 || top > 64 || ids.l > 63 || hiLen > uint64(8*len(b)) {
		return 0, 0, false
	}
	ids.mask = bitpack.LowMask(top) &^ holes
	if holes&^bitpack.LowMask(top) != 0 || (top > 0 && ids.mask>>(top-1) != 1) {
		return 0, 0, false // non-canonical: holes above top, or top bit a hole
	}
	ids.sq0 = bitpack.Pext(first, ids.mask)
	ids.hiLen = int(hiLen)
	n := ids.n
	m := n - 1
	if (m == 0) != (ids.hiLen == 0) || (m > 0 && ids.hiLen < m) {
		return 0, 0, false
	}
	ids.low, ids.hi = 0, m*ids.l
	ids.lmask = 1<<uint(ids.l&63) - 1 // l < 64
	off := m*ids.l + ids.hiLen        // bits before the first column
	k = n
	if sparse {
		var kk uint64
		kk, p = bitpack.Uvarint(b, p)
		if p < 0 || kk > uint64(n) {
			return 0, 0, false
		}
		k = int(kk)
	}
	pres = -1
	count := n
	iw := PositionBits(count)
	imask := bitpack.LowMask(uint(iw))
	for j := range cols {
		if j == dense {
			count = k
			iw = PositionBits(count)
			imask = bitpack.LowMask(uint(iw))
			if k > 0 && k < n {
				pres = off
				off += n
			}
		}
		c := &cols[j]
		if p < 0 || p+2 > len(b) {
			return 0, 0, false
		}
		c.w, c.xw = int(b[p]), int(b[p+1])
		var nexc uint64
		if p+2 < len(b) && b[p+2] < 0x80 {
			nexc, p = uint64(b[p+2]), p+3 // bitpack.Uvarint's common case, inline
		} else {
			nexc, p = bitpack.Uvarint(b, p+2)
		}
		if p < 0 || nexc > uint64(count) || c.w+c.xw > maxBits || (nexc == 0) != (c.xw == 0) {
			return 0, 0, false
		}
		c.nexc = int(nexc)
		c.iw, c.imask = iw, imask
		c.wmask, c.xmask = bitpack.LowMask(uint(c.w)), bitpack.LowMask(uint(c.xw))
		c.vals = off
		off += count * c.w
		c.idx = off
		off += c.nexc * iw
		c.exc = off
		off += c.nexc * c.xw
	}
	if p < 0 || (off+7)/8 != len(b)-p {
		return 0, 0, false
	}
	ids.area = b[p : len(b)+BlockSlack]
	return k, pres, true
}
