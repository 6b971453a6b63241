package sealed

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"math/bits"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/bitpack"
)

// MaxBlockPosts bounds the posts of one block: exception indices and the
// per-block arrays of the encoder and decoder are sized by it.
const MaxBlockPosts = 256

const numFields = 5

// castagnoli is served by the CPU's CRC32C instruction.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// blockCRC is the CRC32C of the block's first id (8 bytes, little-endian;
// it is kept in the index, not the block) followed by the block's bytes,
// so a block paired with the wrong index entry fails the check just as a
// damaged one does. The first 8 bytes go through the table by hand: a
// slice of a local array passed to crc32 would escape to the heap.
func blockCRC(first uint64, b []byte) uint32 {
	crc := ^uint32(0)
	for i := range 8 {
		crc = castagnoli[byte(crc)^byte(first>>(8*i))] ^ crc>>8
	}
	return crc32.Update(^crc, castagnoli, b)
}

// fieldOf returns field f of c as an unsigned value; c's fields are
// non-negative here.
func fieldOf(c *engine.Counts, f int) uint64 {
	switch f {
	case 0:
		return uint64(c.Likes)
	case 1:
		return uint64(c.Comments)
	case 2:
		return uint64(c.Reposts)
	case 3:
		return uint64(c.Views)
	}
	return uint64(c.Favorites)
}

func setField(c *engine.Counts, f int, v uint64) {
	switch f {
	case 0:
		c.Likes = int64(v)
	case 1:
		c.Comments = int64(v)
	case 2:
		c.Reposts = int64(v)
	case 3:
		c.Views = int64(v)
	default:
		c.Favorites = int64(v)
	}
}

// blockEncoder collects up to MaxBlockPosts posts and encodes them. It is
// reused from block to block; its arrays make it a few KiB, so it lives in
// the Writer rather than on the stack.
type blockEncoder struct {
	ids  [MaxBlockPosts]uint64
	vals [numFields][MaxBlockPosts]uint64
	n    int
	bw   bitpack.Writer
}

func (e *blockEncoder) add(id uint64, c *engine.Counts) {
	e.ids[e.n] = id
	for f := range numFields {
		e.vals[f][e.n] = fieldOf(c, f)
	}
	e.n++
}

// fieldPlan is how one field of a block is packed: every value's low w bits
// inline, and for the values that do not fit (the exceptions) their index
// and their high bits v>>w (xw wide) in two side lists. This is seed 003's
// "narrow field, escape to an overflow table" applied per block, with the
// width chosen per block and per field instead of fixed at 16 bits. With
// w = 0 the field is a sparse list of its non-zero values.
//
// An escape value in the inline slot (all ones, as seed 003 does) would
// spare a reader the search of the exception list for most posts, but the
// exception would then have to hold the whole value rather than its high
// bits: on the datagen set that cost 0.27 bytes per post and saved 7% of
// an in-cache lookup, nothing measurable out of cache.
type fieldPlan struct {
	w, xw uint8
	nexc  int
}

// planField picks the width that minimises the field's bits, given that an
// exception costs its index (iw bits) plus xw high bits.
func planField(vals []uint64, iw int) fieldPlan {
	var hist [65]int // hist[k] = values whose bit length is k
	maxLen := 0
	for _, v := range vals {
		k := bits.Len64(v)
		hist[k]++
		maxLen = max(maxLen, k)
	}
	best := fieldPlan{w: uint8(maxLen)}
	bestCost := len(vals) * maxLen
	exc := 0 // values longer than w
	for w := maxLen - 1; w >= 0; w-- {
		exc += hist[w+1]
		cost := len(vals)*w + exc*(iw+maxLen-w)
		if cost <= bestCost {
			best, bestCost = fieldPlan{w: uint8(w), xw: uint8(maxLen - w), nexc: exc}, cost
		}
	}
	return best
}

// encode appends the encoded block (bytes and CRC) to dst and resets e.
func (e *blockEncoder) encode(dst []byte) []byte {
	n := e.n
	ids := e.ids[:n]
	first := ids[0]
	idp := PlanIDs(ids)
	iw := bits.Len(uint(n - 1))
	var plans [numFields]fieldPlan
	for f := range numFields {
		plans[f] = planField(e.vals[f][:n], iw)
	}

	start := len(dst)
	dst = idp.AppendHeader(dst)
	for _, p := range plans {
		dst = append(dst, p.w, p.xw)
		dst = binary.AppendUvarint(dst, uint64(p.nexc))
	}

	e.bw.Buf = dst
	bw := &e.bw
	idp.Put(bw, ids)
	for f, p := range plans {
		vals := e.vals[f][:n]
		for _, v := range vals {
			bw.Put(v, int(p.w))
		}
		if p.nexc == 0 {
			continue
		}
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
	dst = bw.Flush()
	bw.Buf = nil
	dst = le.AppendUint32(dst, blockCRC(first, dst[start:]))
	e.n = 0
	return dst
}

// errBlock is the reason every structural check of a block reports; the
// caller adds where the block is.
var errBlock = errors.New("malformed block")

var errSlack = errors.New("sealed: block slice without BlockSlack bytes of capacity past its end")

// Block is a parsed view of one encoded block: its header decoded so that
// one post can be found and read without decoding the others. The id
// column is an Elias–Fano list (a lookup is a select on the high bits and
// a compare of one or two low parts), the count columns are fixed width
// with exceptions, so a lookup costs O(1) bit reads, not a decode of the
// block up to the key.
//
// A Block holds no memory of its own beyond the slice it was parsed from.
type Block struct {
	ids   IDs
	imask uint64 // low iw bits
	iw    int
	f     [numFields]fieldView
	sw    swarLanes // for iw
}

// The masks of a fieldView are kept rather than computed per
// read: in Go a shift by a variable amount costs a fix-up for amounts of
// 64 and more, on every read.
type fieldView struct {
	w, xw          int
	nexc           int
	vals, idx, exc int // bit offsets into area
	wmask, xmask   uint64
}

// ParseBlock parses the header of block b (its bytes without the trailing
// CRC) whose first id is first, checking that every region the header
// declares fits the block exactly. cap(b) must exceed len(b) by at least
// BlockSlack. It does not check the CRC (see VerifyBlock) or the contents
// of the regions; lookups on a block that passed ParseBlock stay within
// its bytes whatever they hold.
func ParseBlock(first uint64, b []byte) (Block, error) {
	var k Block
	err := k.Parse(first, b)
	return k, err
}

// Parse is ParseBlock into k, which a multi-get reuses from block to block
// (a Block is a few hundred bytes).
func (k *Block) Parse(first uint64, b []byte) error {
	if cap(b)-len(b) < BlockSlack {
		return errSlack
	}
	p, off := k.ids.ParseHeader(first, b) // off: bits before the first field
	if p < 0 {
		return errBlock
	}
	n := k.ids.n
	k.iw = bits.Len(uint(n - 1))
	for f := range numFields {
		if p < 0 || p+2 > len(b) {
			return errBlock
		}
		fv := &k.f[f]
		fv.w, fv.xw = int(b[p]), int(b[p+1])
		var nexc uint64
		if p+2 < len(b) && b[p+2] < 0x80 {
			nexc, p = uint64(b[p+2]), p+3 // uvarint's common case, inline
		} else {
			nexc, p = bitpack.Uvarint(b, p+2)
		}
		if p < 0 || nexc > uint64(n) || fv.w+fv.xw > 63 || (nexc == 0) != (fv.xw == 0) {
			return errBlock
		}
		fv.nexc = int(nexc)
		fv.wmask, fv.xmask = 1<<uint(fv.w&63)-1, 1<<uint(fv.xw&63)-1 // both < 64
		fv.vals = off
		off += n * fv.w
		fv.idx = off
		off += fv.nexc * k.iw
		fv.exc = off
		off += fv.nexc * fv.xw
	}
	if (off+7)/8 != len(b)-p {
		return errBlock
	}
	k.ids.SetArea(b[p : len(b)+BlockSlack])
	k.imask = 1<<uint(k.iw&63) - 1 // iw <= 8
	k.sw = swar[k.iw&15]
	return nil
}

// Len returns the number of posts in the block.
func (k *Block) Len() int { return k.ids.n }

// Find returns the position of id in the block.
func (k *Block) Find(id uint64) (int, bool) { return k.ids.Find(id) }

// highLines notes for ld the lines of the block's high bits, base being
// where its bit area starts in the window.
func (k *Block) highLines(base int, ld *loads) {
	if d := &k.ids; d.hiLen > 0 {
		ld.add(uint64(base+d.hi>>3), uint64(base+(d.hi+d.hiLen-1)>>3))
	}
}

// fieldLines notes for ld the lines post i's counts are read from: its
// value in each column, and each field's exceptions. align is where the
// window's bytes start in their cache line; a line already noted for the
// post is not noted again.
func (k *Block) fieldLines(base, align, i int, ld *loads) {
	last := -1
	note := func(bit int) {
		o := base + bit>>3
		if l := (align + o) >> 6; l != last {
			last = l
			ld.add1(uint64(o))
		}
	}
	for f := range k.f {
		fv := &k.f[f]
		if fv.w > 0 {
			note(fv.vals + i*fv.w)
		}
		if fv.nexc > 0 {
			note(fv.idx)
			note(fv.exc + fv.nexc*fv.xw - 1)
		}
	}
}

// lowLines notes for ld the lines of the low parts of elements j and j+1
// (a bucket holds one or two elements on average).
func (k *Block) lowLines(base, j int, ld *loads) {
	d := &k.ids
	if d.l == 0 || j < 0 {
		return
	}
	last := d.low + (d.n-1)*d.l // end of the low parts
	ld.add(uint64(base+(d.low+j*d.l)>>3), uint64(base+(min(d.low+(j+2)*d.l, last)-1)>>3))
}

// Counts returns the counts of the post at position i (0 <= i < Len()).
func (k *Block) Counts(i int) engine.Counts {
	return engine.Counts{
		Likes:     int64(k.value(&k.f[0], i)),
		Comments:  int64(k.value(&k.f[1], i)),
		Reposts:   int64(k.value(&k.f[2], i)),
		Views:     int64(k.value(&k.f[3], i)),
		Favorites: int64(k.value(&k.f[4], i)),
	}
}

// value returns field fv of post i.
func (k *Block) value(fv *fieldView, i int) uint64 {
	a := k.ids.area
	v := bitpack.Bits(a, fv.vals+i*fv.w, uint(fv.w), fv.wmask)
	n := fv.nexc
	if n == 0 {
		return v
	}
	// Post i is an exception if the first exception index >= i is i:
	// count the indices below i, e, then test index e (or n-1 when e = n).
	//
	// Nearly every block has exceptions in every field (8-14 per field on
	// the datagen set), so this runs for most reads, and whether a post is
	// an exception is a coin toss: the count compares a word of indices
	// with i at once (SWAR), with no branch on the data, where a binary
	// search was a chain of dependent loads and a misprediction or two per
	// field. The even and the odd lanes are compared apart, each with the
	// free lane above it as a guard bit that the subtraction clears when
	// the index is below i. Indices past the list read as all ones.
	t := &k.sw
	iw, iv, g := uint(k.iw), uint64(i)*t.ones, t.guard
	var e int
	if c1 := min(n, t.lanes); n-c1 <= t.lanes {
		// Two words at most, the common case, without a loop: the second
		// starts at the end of the first (a valid offset however short
		// the list) and is all padding when the list fits in one. The odd
		// lanes' guard bits move down one bit, into the even lanes' top
		// bit (cleared by the masks), so that one popcount counts both.
		x1 := bitpack.Bits56(a, fv.idx) | ^(1<<(uint(c1)*iw&63) - 1)
		x2 := bitpack.Bits56(a, fv.idx+c1*int(iw)) | ^(1<<(uint(n-c1)*iw&63) - 1)
		e = 2*t.both -
			bits.OnesCount64(((x1&t.even|g)-iv)&g|((x1>>iw&t.even|g)-iv)&g>>1) -
			bits.OnesCount64(((x2&t.even|g)-iv)&g|((x2>>iw&t.even|g)-iv)&g>>1)
	} else {
		for c := 0; c < n; c += t.lanes {
			x := bitpack.Bits56(a, fv.idx+c*int(iw)) | ^(1<<(uint(min(t.lanes, n-c))*iw&63) - 1)
			e += t.both - bits.OnesCount64(((x&t.even|g)-iv)&g|((x>>iw&t.even|g)-iv)&g>>1)
		}
	}
	e = min(e, n-1)
	x := bitpack.Bits56(a, fv.idx+e*int(iw)) & k.imask
	hi := bitpack.Bits(a, fv.exc+e*fv.xw, uint(fv.xw), fv.xmask)
	hit := x ^ uint64(i) // 0 when post i is exception e
	hi &= (hit|-hit)>>63 - 1
	return v | hi<<uint(fv.w&63)
}

// swarLanes describes iw-bit lanes for value's count: lanes of them fit
// in the 56 bits getBits56 returns; even has the even lanes' bits, guard
// the bit above each even lane, ones the low bit of each even lane; both
// is twice the number of even lanes. For iw = 0 (a one-post block, whose
// only index is 0 and i = 0) it is all zeros but lanes, and counts none.
type swarLanes struct {
	even, guard, ones uint64
	lanes, both       int
}

// swar[iw] is computed once; Parse copies the block's entry.
var swar = func() (t [9]swarLanes) {
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

// Decode writes the block's ids and counts to ids[:Len()] and
// counts[:Len()], checking everything ParseBlock does not: that ids
// increase, that exceptions are canonical, that no count exceeds
// math.MaxInt64 and that no post is all zeros. A block that decodes
// without error reads back exactly what it decodes to.
func (k *Block) Decode(ids []uint64, counts []engine.Counts) error {
	n := k.ids.n
	counts = counts[:n]
	if err := k.ids.Decode(ids); err != nil {
		return err
	}
	for f := range numFields {
		fv := &k.f[f]
		for i := range n {
			setField(&counts[i], f, bitpack.Bits(k.ids.area, fv.vals+i*fv.w, uint(fv.w), fv.wmask))
		}
		prev := -1
		for e := range fv.nexc {
			i := int(bitpack.Bits(k.ids.area, fv.idx+e*k.iw, uint(k.iw), k.imask))
			hi := bitpack.Bits(k.ids.area, fv.exc+e*fv.xw, uint(fv.xw), fv.xmask)
			if i <= prev || i >= n || hi == 0 || hi > math.MaxInt64>>uint(fv.w) {
				return errBlock
			}
			prev = i
			setField(&counts[i], f, fieldOf(&counts[i], f)|hi<<uint(fv.w))
		}
	}
	// No value is negative: w+xw <= 63 and the exception check above keep
	// every value at or below math.MaxInt64.
	for i := range counts {
		if counts[i].IsZero() {
			return errBlock // zeros are never stored
		}
	}
	return nil
}

// CheckBlock checks block b — its bytes including the trailing CRC, with
// cap(b) >= len(b)+BlockSlack-4 — whose first id is first: its checksum
// and its header (ParseBlock). That is enough to read it safely: the
// checksum catches damage, and a block that parses keeps every lookup
// within its bytes. It is what the cold tier runs on each block it reads.
func CheckBlock(first uint64, b []byte) error {
	if len(b) < 4 {
		return fmt.Errorf("block of %d bytes: %w", len(b), errBlock)
	}
	body := b[:len(b)-4]
	if got, want := blockCRC(first, body), le.Uint32(b[len(b)-4:]); got != want {
		return fmt.Errorf("block checksum mismatch (computed %08x, stored %08x)", got, want)
	}
	var k Block
	return k.Parse(first, body)
}

// VerifyBlock is CheckBlock plus a full decode that checks the block's
// contents (Decode). The scratch slices must hold MaxBlockPosts entries.
func VerifyBlock(first uint64, b []byte, scratchIDs []uint64, scratchCounts []engine.Counts) error {
	if err := CheckBlock(first, b); err != nil {
		return err
	}
	k, _ := ParseBlock(first, b[:len(b)-4])
	return k.Decode(scratchIDs, scratchCounts)
}
