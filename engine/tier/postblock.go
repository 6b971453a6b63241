package tier

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/bits"

	"github.com/tally-dev/tally/engine/bitpack"
	"github.com/tally-dev/tally/engine/counters"
)

// # Post block layout
//
// A block of a post table's window holds n = 1..256 posts in increasing
// id order (postBlockRecords when written), its first id in the index.
// All integers little-endian, uvarint encoding/binary's.
//
//	block   = n-1 uint8 | flag<<7 | top uint8 | l uint8 | holes uvarint | hiLen uvarint |
//	          k uvarint | [kinds uvarint] | (6 + popcount(kinds)) × (w uint8 | xw uint8 | nexc uvarint) |
//	          bit area
//	bits    = ids | author column | presence bits | 5 count columns | kind columns, LSB-first, unpadded
//
// Ids: squeezed to the bits that vary within the block, M = (2^top-1) &^
// holes, an Elias–Fano list of n-1 differences from the first's with l
// low bits and hiLen high bits (eflist.go).
//
// Columns: each is count values of w bits, then the positions (iw =
// bits.Len(count-1) bits each) of the nexc values that need more, then
// their high bits (xw each): the width is chosen per block and column,
// so views and likes get different widths, a column that is zero in
// every post costs its header, and a lone wide value costs one exception
// instead of widening the column. The author column holds a value for
// every post (count n); the counts (likes, comments, reposts, views,
// favorites, then the kind columns) only for the k posts with a count
// that is not zero (count k), preceded, when 0 < k < n, by n presence
// bits: a post with no counts costs its id, its author and one bit.
//
// Kinds: the counts of reaction kinds beyond like (counters.Reactions).
// The flag (the top byte's high bit) says that some post of the block
// has one; then kinds has bit k-2 set for each kind k that some post
// has, and the block holds one column for each, in kind order. A block
// whose posts have only likes has neither the kinds field nor a column:
// a kind costs nothing where it is not used.
//
// Canonical, as decode checks: M's top bit is set and M is exactly the
// bits that vary; l <= 63; w+xw <= 64; nexc = 0 exactly when xw = 0;
// exception positions increase and their high bits are not zero; a post
// has the counts exactly when one of them is not zero; the flag is set
// exactly when kinds is not zero, and a kind is in kinds exactly when
// its column has a value that is not zero; the last high bit is set; ids
// increase within and across blocks.
const (
	fixedCols       = 6                     // the author, then likes, comments, reposts, views, favorites
	kindCols        = counters.MaxKinds - 1 // the counts of kinds 2..MaxKinds (counters.Reactions)
	postCols        = fixedCols + kindCols  // a row's columns
	authorCols      = 1                     // columns stored for every post; the counts are stored for posts that have one
	maxPostsInBlock = 256
	// postBlockRecords is how many posts a block gets when a window is
	// written: twice as many would spend less on block headers and index
	// entries for slower pages; half as many, the other way round. A
	// block stays within one page of a cold file.
	postBlockRecords = 256
	// blockKindsFlag marks, in a block's top byte (top <= 64), a block
	// with kind columns.
	blockKindsFlag = 0x80
)

// postRow is a post as its columns: the author, the five counts, then
// the counts of kinds 2..MaxKinds.
type postRow [postCols]uint64

// postBlockCRC is the checksum stored after a post block's bytes b:
// CRC32C of its first id (8 bytes, little-endian; kept in the index, not
// the block) and b. The 8 bytes go through the table by hand: a slice of
// a local array passed to crc32 would escape to the heap.
func postBlockCRC(first uint64, b []byte) uint32 {
	crc := ^uint32(0)
	for i := range 8 {
		crc = castagnoli[byte(crc)^byte(first>>(8*i))] ^ crc>>8
	}
	return crc32.Update(^crc, castagnoli, b)
}

// postEncoder collects up to maxPostsInBlock posts and encodes them. It
// is reused from block to block.
type postEncoder struct {
	ids   [maxPostsInBlock]uint64
	cols  [postCols][maxPostsInBlock]uint64
	diffs [maxPostsInBlock]uint64
	n     int
	bw    bitpack.Writer
}

func (e *postEncoder) add(id uint64, r *postRow) {
	e.ids[e.n] = id
	for f := range postCols {
		e.cols[f][e.n] = r[f]
	}
	e.n++
}

// encode appends the encoded block (bytes and CRC) to dst and resets e.
func (e *postEncoder) encode(dst []byte) []byte {
	n := e.n
	ids := e.ids[:n]
	idp := planIDs(ids)
	// Which posts have a count, and which kinds some post has.
	var present [maxPostsInBlock]bool
	var kinds uint64
	for i := range n {
		for f := authorCols; f < postCols; f++ {
			if e.cols[f][i] != 0 {
				present[i] = true
				if f >= fixedCols {
					kinds |= 1 << (f - fixedCols)
				}
			}
		}
	}
	// The stored columns: the fixed ones, then the kinds some post has;
	// the counts squeezed to the posts that have one.
	var stored [postCols]int
	ns := 0
	for f := range postCols {
		if f < fixedCols || kinds>>(f-fixedCols)&1 != 0 {
			stored[ns] = f
			ns++
		}
	}
	k := 0
	for i := range n {
		if present[i] {
			for _, f := range stored[authorCols:ns] {
				e.cols[f][k] = e.cols[f][i]
			}
			k++
		}
	}
	var plans [postCols]columnPlan
	for j, f := range stored[:ns] {
		c := n
		if f >= authorCols {
			c = k
		}
		plans[j] = planColumn(e.cols[f][:c])
	}
	top := byte(idp.top)
	if kinds != 0 {
		top |= blockKindsFlag
	}
	start := len(dst)
	dst = append(dst, byte(n-1), top, byte(idp.lowBits))
	dst = binary.AppendUvarint(dst, idp.holes())
	dst = binary.AppendUvarint(dst, uint64(idp.highLen))
	dst = binary.AppendUvarint(dst, uint64(k))
	if kinds != 0 {
		dst = binary.AppendUvarint(dst, kinds)
	}
	for _, p := range plans[:ns] {
		dst = p.appendHeader(dst)
	}
	e.bw.Buf = dst
	bw := &e.bw
	idp.put(bw, ids, e.diffs[:])
	for j, f := range stored[:ns] {
		c := n
		if f >= authorCols {
			c = k
			if f == authorCols && k > 0 && k < n {
				for _, b := range present[:n] {
					if b {
						bw.Put(1, 1)
					} else {
						bw.Put(0, 1)
					}
				}
			}
		}
		plans[j].put(bw, e.cols[f][:c])
	}
	dst = bw.Flush()
	bw.Buf = nil
	dst = le.AppendUint32(dst, postBlockCRC(ids[0], dst[start:]))
	e.n = 0
	return dst
}

// errBlock is the reason every structural check of a block reports; the
// caller adds where the block is.
var errBlock = errors.New("malformed block")

// postBlock is a parsed view of one post block: its header decoded so
// that a post can be found and read without decoding the others — a
// select on the ids' high bits, a compare of one or two low parts, and
// O(1) bit reads a column plus a rank in the presence bits. It holds no
// memory of its own beyond the slice it was parsed from.
type postBlock struct {
	area     []byte // the bit area, and BlockSlack bytes past it
	n        int
	ids      squeezedIDs
	counted  int // posts with the counts (k)
	presence int // bit offset of the presence bits; -1 when k is 0 or n
	kinds    int // the kind columns, after the fixed ones in cols
	kindCol  [kindCols]uint8
	// cols are the fixed columns, then the kind columns: cols[fixedCols+j]
	// holds the counts of the row's column fixedCols+kindCol[j].
	cols [postCols]valueColumn
}

// parse parses the header of block b (its bytes without the CRC, with
// BlockSlack bytes of capacity past them) whose first id is first,
// checking that every region the header declares fits the block exactly.
// Lookups on a block that passed stay within its bytes whatever they
// hold; decode checks the contents. It is one function for the whole
// header: a block is parsed for every page that reads it, and a call for
// each part costs pages a measurable share.
func (k *postBlock) parse(first uint64, b []byte) error {
	if cap(b)-len(b) < BlockSlack || len(b) < 3 {
		return errBlock
	}
	n := int(b[0]) + 1
	k.n = n
	holes, p := bitpack.Uvarint(b, 3)
	highLen, p := bitpack.Uvarint(b, p)
	if p < 0 {
		return errBlock
	}
	off, ok := k.ids.set(first, uint(b[1]&^blockKindsFlag), holes, n-1, int(b[2]), highLen, 0, 8*len(b))
	if !ok {
		return errBlock
	}
	counted, p := bitpack.Uvarint(b, p)
	if p < 0 || counted > uint64(n) {
		return errBlock
	}
	k.counted = int(counted)
	k.kinds = 0
	if b[1]&blockKindsFlag != 0 {
		var kinds uint64
		kinds, p = bitpack.Uvarint(b, p)
		if p < 0 || kinds == 0 || kinds >= 1<<kindCols || counted == 0 {
			return errBlock
		}
		for kinds != 0 {
			k.kindCol[k.kinds] = uint8(bits.TrailingZeros64(kinds))
			k.kinds++
			kinds &= kinds - 1
		}
	}
	k.presence = -1
	count := n
	iw := positionBits(count)
	imask := bitpack.LowMask(uint(iw))
	for j := range fixedCols + k.kinds {
		if j == authorCols {
			count = k.counted
			iw = positionBits(count)
			imask = bitpack.LowMask(uint(iw))
			if k.counted > 0 && k.counted < n {
				k.presence = off
				off += n
			}
		}
		c := &k.cols[j]
		if p < 0 || p+2 > len(b) {
			return errBlock
		}
		c.w, c.xw = int(b[p]), int(b[p+1])
		var nexc uint64
		if p+2 < len(b) && b[p+2] < 0x80 {
			nexc, p = uint64(b[p+2]), p+3 // bitpack.Uvarint's common case, inline
		} else {
			nexc, p = bitpack.Uvarint(b, p+2)
		}
		if p < 0 || nexc > uint64(count) || c.w+c.xw > 64 || (nexc == 0) != (c.xw == 0) {
			return errBlock
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
		return errBlock
	}
	k.area = b[p : len(b)+BlockSlack]
	return nil
}

// len returns the number of posts in the block.
func (k *postBlock) len() int { return k.n }

// find returns the position of id in the block.
func (k *postBlock) find(id uint64) (int, bool) { return k.ids.find(k.area, id) }

// countedPos returns post i's position among the posts that have the
// counts, or -1 when it has none.
func (k *postBlock) countedPos(i int) int {
	switch {
	case k.counted == k.n:
		return i
	case k.counted == 0:
		return -1
	}
	a := k.area
	if bitpack.Bits(a, k.presence+i, 1, 1) == 0 {
		return -1
	}
	r := 0
	p := 0
	for ; p+56 <= i; p += 56 {
		r += bits.OnesCount64(bitpack.Bits56(a, k.presence+p) & (1<<56 - 1))
	}
	return r + bits.OnesCount64(bitpack.Bits56(a, k.presence+p)&bitpack.LowMask(uint(i-p)))
}

// row reads the post at position i (0 <= i < len()) into r.
func (k *postBlock) row(i int, r *postRow) {
	a := k.area
	for f := range authorCols {
		r[f] = k.cols[f].value(a, i)
	}
	j := k.countedPos(i)
	if j < 0 {
		*r = postRow{0: r[0]}
		return
	}
	for f := authorCols; f < fixedCols; f++ {
		r[f] = k.cols[f].value(a, j)
	}
	*(*kindRow)(r[fixedCols:]) = kindRow{}
	for c := range k.kinds {
		r[fixedCols+int(k.kindCol[c])] = k.cols[fixedCols+c].value(a, j)
	}
}

// decode writes the block's ids and rows to ids[:len()] and rows[:len()],
// checking what parse does not: that ids increase, that the declared
// varying bits vary, that exceptions, presence bits and kind columns are
// canonical (a post has the counts exactly when one of them is not zero,
// a kind column has a value that is not zero). A block that decodes
// without error reads back exactly what it decodes to. With ids and rows
// nil it only checks.
func (k *postBlock) decode(ids []uint64, rows []postRow) error {
	n := k.n
	a := k.area
	var col [maxPostsInBlock]uint64
	var err error
	if ids != nil {
		err = k.ids.decode(a, ids)
	} else {
		err = k.ids.check(a, col[:])
	}
	if err != nil {
		return err
	}
	if k.presence >= 0 {
		c := 0
		for p := 0; p < n; p += 56 {
			c += bits.OnesCount64(bitpack.Bits(a, k.presence+p, uint(min(56, n-p)), bitpack.LowMask(uint(min(56, n-p)))))
		}
		if c != k.counted {
			return errBlock
		}
	}
	if rows != nil {
		rows = rows[:n]
		clear(rows)
	}
	var nonzero [maxPostsInBlock]uint64 // OR of each counted post's counts
	for j := range fixedCols + k.kinds {
		if j < authorCols {
			if err := k.cols[j].decode(a, col[:n]); err != nil {
				return err
			}
			for i := range rows {
				rows[i][j] = col[i]
			}
			continue
		}
		// Stored for the counted posts only; spread to all n.
		if err := k.cols[j].decode(a, col[:k.counted]); err != nil {
			return err
		}
		var any uint64
		for i, v := range col[:k.counted] {
			nonzero[i] |= v
			any |= v
		}
		f := j
		if j >= fixedCols {
			if any == 0 {
				return errBlock // a kind column of zeros
			}
			f = fixedCols + int(k.kindCol[j-fixedCols])
		}
		c := 0
		for i := range rows {
			if k.counted == n || k.presence >= 0 && bitpack.Bits(a, k.presence+i, 1, 1) == 1 {
				rows[i][f] = col[c]
				c++
			}
		}
	}
	for _, v := range nonzero[:k.counted] {
		if v == 0 {
			return errBlock // a counted post whose counts are all zero
		}
	}
	return nil
}

// checkPostBlock checks block b — its bytes including the trailing CRC,
// with cap(b) >= len(b)+BlockSlack-4 — whose first id is first: the
// checksum, then the header. That is enough to read it safely.
func checkPostBlock(first uint64, b []byte) error {
	if len(b) < 4 {
		return fmt.Errorf("block of %d bytes: %w", len(b), errBlock)
	}
	body := b[:len(b)-4]
	if got, want := postBlockCRC(first, body), le.Uint32(b[len(b)-4:]); got != want {
		return fmt.Errorf("block checksum mismatch (computed %08x, stored %08x)", got, want)
	}
	var k postBlock
	return k.parse(first, body)
}

// columnPlan is how one column of a block is packed.
type columnPlan struct {
	w, xw uint8
	nexc  int
}

// positionBits is iw, the bits of an exception's position among count
// values.
func positionBits(count int) int {
	if count <= 1 {
		return 0
	}
	return bits.Len(uint(count - 1))
}

// planColumn picks the width that minimises the column's bits, given that
// an exception costs its position (positionBits(len(vals)) bits) plus its
// high bits.
func planColumn(vals []uint64) columnPlan {
	iw := positionBits(len(vals))
	var hist [65]int // hist[k] = values whose bit length is k
	maxLen := 0
	for _, v := range vals {
		k := bits.Len64(v)
		hist[k]++
		maxLen = max(maxLen, k)
	}
	best := columnPlan{w: uint8(maxLen)}
	bestCost := len(vals) * maxLen
	exc := 0 // values longer than w
	for w := maxLen - 1; w >= 0; w-- {
		exc += hist[w+1]
		cost := len(vals)*w + exc*(iw+maxLen-w)
		if cost <= bestCost {
			best, bestCost = columnPlan{w: uint8(w), xw: uint8(maxLen - w), nexc: exc}, cost
		}
	}
	return best
}

func (p columnPlan) appendHeader(dst []byte) []byte {
	dst = append(dst, p.w, p.xw)
	return binary.AppendUvarint(dst, uint64(p.nexc))
}

// put writes the column's bits: vals, the values planColumn was given.
func (p columnPlan) put(bw *bitpack.Writer, vals []uint64) {
	for _, v := range vals {
		bw.Put(v, int(p.w))
	}
	if p.nexc == 0 {
		return
	}
	iw := positionBits(len(vals))
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

// valueColumn is a parsed view of one value column: value reads one value
// without decoding the others. Its masks are kept rather than computed
// per read: in Go a shift by a variable amount costs a fix-up for amounts
// of 64 and more, on every read.
type valueColumn struct {
	w, xw, iw      int
	nexc           int
	vals, idx, exc int // bit offsets into the block's bit area
	wmask, xmask   uint64
	imask          uint64
}

// bits returns the bits the column takes in the bit area.
func (c *valueColumn) bits(count int) int { return count*c.w + c.nexc*(c.iw+c.xw) }

// value returns value i of the column, a its block's bit area.
func (c *valueColumn) value(a []byte, i int) uint64 {
	v := bitpack.Bits(a, c.vals+i*c.w, uint(c.w), c.wmask)
	n := c.nexc
	if n == 0 {
		return v
	}
	// Value i is an exception if the first position >= i is i: count the
	// positions below i, e, then test position e (or n-1 when e = n).
	//
	// Most blocks have exceptions in every count column, so this runs
	// for most reads, and whether a post is an exception is a coin toss:
	// the count compares a word of positions with i at once (SWAR), with
	// no branch on the data, where a binary search was a chain of
	// dependent loads and a misprediction or two per column. The even and
	// the odd lanes are compared apart, each with the free lane above it
	// as a guard bit that the subtraction clears when the position is
	// below i. Positions past the list read as all ones.
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

// swarLanes describes iw-bit lanes for value's count: lanes of them fit
// in the 56 bits bitpack.Bits56 returns; even has the even lanes' bits,
// guard the bit above each even lane, ones the low bit of each even lane;
// both is twice the number of even lanes. For iw = 0 (a one-value column,
// whose only position is 0 and i = 0) it is all zeros but lanes, and
// counts none. 16 entries, so that indexing by iw&15 needs no bounds
// check; iw <= 10 (the positions of a post block's 256 values, of a pair
// block's 1024 kinds).
type swarLanes struct {
	even, guard, ones uint64
	lanes, both       int
}

var swar = func() (t [16]swarLanes) {
	t[0].lanes = 56
	for iw := 1; iw < len(t); iw++ {
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

// decode writes the column's values to dst (len(dst) is the column's
// count), checking what parse does not: that the exceptions' positions
// increase and lie below the count and that no exception's high bits are
// zero, so that the column has one encoding.
func (c *valueColumn) decode(a []byte, dst []uint64) error {
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

// postWriter encodes a post table's window image from posts given in
// increasing id order, streaming blocks to an io.Writer.
type postWriter struct {
	imageWriter
	enc postEncoder
}

func newPostWriter(w io.Writer) *postWriter {
	pw := &postWriter{}
	pw.start(w, imageFormat{tag: postTag, entrySize: postEntrySize})
	return pw
}

func (pw *postWriter) add(id uint64, r *postRow) error {
	if pw.err != nil {
		return pw.err
	}
	if pw.records > 0 && id <= pw.maxID {
		pw.err = errOrder
		return pw.err
	}
	pw.count(id)
	pw.enc.add(id, r)
	if pw.enc.n == postBlockRecords {
		pw.endBlock()
	}
	return pw.err
}

func (pw *postWriter) endBlock() {
	if pw.enc.n == 0 {
		return
	}
	pw.index = le.AppendUint64(pw.index, pw.enc.ids[0])
	start := len(pw.buf)
	pw.buf = pw.enc.encode(pw.buf)
	pw.blockWritten(start)
}

// close writes the rest, the index and the footer.
func (pw *postWriter) close() error { return pw.finish(pw.endBlock) }
