package tier

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math/bits"

	"github.com/tally-dev/tally/engine/bitpack"
)

// MaxCols bounds the columns of a record.
const MaxCols = 8

// Row is a record as its codec splits it: up to MaxCols unsigned columns.
type Row [MaxCols]uint64

// MaxBlockRecords bounds the records of one block (a position is a byte).
const MaxBlockRecords = 256

// blockRecords is how many records a block holds when a window is written:
// 128 keeps a cold miss at one small read (a block is about 1 KiB with
// authors) and the per-block header and index entry under a third of a
// byte per record.
const blockRecords = 128

// blockCRC is the CRC32C of the block's first id (8 bytes, little-endian,
// kept in the index, not the block) followed by the block's bytes, so a
// block paired with the wrong index entry fails as a damaged one does.
func blockCRC(first uint64, b []byte) uint32 {
	crc := ^uint32(0)
	for i := range 8 {
		crc = castagnoli[byte(crc)^byte(first>>(8*i))] ^ crc>>8
	}
	return crc32.Update(^crc, castagnoli, b)
}

// blockEncoder collects up to MaxBlockRecords records and encodes them.
// It is reused from block to block.
type blockEncoder struct {
	cols int
	ids  [MaxBlockRecords]uint64
	vals [MaxCols][MaxBlockRecords]uint64
	n    int
	bw   bitpack.Writer
}

func (e *blockEncoder) add(id uint64, r *Row) {
	e.ids[e.n] = id
	for f := range e.cols {
		e.vals[f][e.n] = r[f]
	}
	e.n++
}

// colPlan is how one column of a block is packed: every value's low w
// bits inline, and for the values that do not fit (the exceptions) their
// position and high bits v>>w (xw wide) in two side lists — engine/sealed's
// per-block "narrow field, escape" scheme. A column that is zero in every
// record of the block costs its three header bytes.
type colPlan struct {
	w, xw uint8
	nexc  int
}

// planCol picks the width that minimises the column's bits, given that an
// exception costs its position (iw bits) plus xw high bits.
func planCol(vals []uint64, iw int) colPlan {
	var hist [65]int
	maxLen := 0
	for _, v := range vals {
		k := bits.Len64(v)
		hist[k]++
		maxLen = max(maxLen, k)
	}
	best := colPlan{w: uint8(maxLen)}
	bestCost := len(vals) * maxLen
	exc := 0
	for w := maxLen - 1; w >= 0; w-- {
		exc += hist[w+1]
		cost := len(vals)*w + exc*(iw+maxLen-w)
		if cost <= bestCost {
			best, bestCost = colPlan{w: uint8(w), xw: uint8(maxLen - w), nexc: exc}, cost
		}
	}
	return best
}

// encode appends the encoded block (bytes and CRC) to dst and resets e.
//
//	block = n-1 uint8 | top uint8 | l uint8 | holes uvarint | hiLen uvarint |
//	        cols × (w uint8 | xw uint8 | nexc uvarint) | bit area | CRC32C
func (e *blockEncoder) encode(dst []byte) []byte {
	n := e.n
	ids := e.ids[:n]
	first := ids[0]
	var vary uint64
	for _, id := range ids {
		vary |= id ^ first
	}
	top := bits.Len64(vary)
	holes := bitpack.LowMask(uint(top)) &^ vary
	sq0 := bitpack.Pext(first, vary)
	m := n - 1
	var maxX uint64
	if m > 0 {
		maxX = bitpack.Pext(ids[n-1], vary) - sq0
	}
	l := 0
	if m > 0 && maxX/uint64(m) >= 1 {
		l = bits.Len64(maxX/uint64(m)) - 1
	}
	hiLen := 0
	if m > 0 {
		hiLen = int(maxX>>uint(l)) + m
	}
	iw := bits.Len(uint(n - 1))
	var plans [MaxCols]colPlan
	for f := range e.cols {
		plans[f] = planCol(e.vals[f][:n], iw)
	}

	start := len(dst)
	dst = append(dst, byte(n-1), byte(top), byte(l))
	dst = binary.AppendUvarint(dst, holes)
	dst = binary.AppendUvarint(dst, uint64(hiLen))
	for _, p := range plans[:e.cols] {
		dst = append(dst, p.w, p.xw)
		dst = binary.AppendUvarint(dst, uint64(p.nexc))
	}
	e.bw.Buf = dst
	bw := &e.bw
	for _, id := range ids[1:] {
		bw.Put(bitpack.Pext(id, vary)-sq0, l)
	}
	var prevHigh uint64
	for _, id := range ids[1:] {
		h := (bitpack.Pext(id, vary) - sq0) >> uint(l)
		bw.Zeros(int(h - prevHigh))
		bw.Put(1, 1)
		prevHigh = h
	}
	for f, p := range plans[:e.cols] {
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

// errBlock is the reason every structural check of a block reports.
var errBlock = errors.New("malformed block")

// Block is a parsed view of one encoded block: its header decoded so that
// one record can be found and read without decoding the others. The id
// column is an Elias–Fano list, the value columns fixed width with
// exceptions, so a lookup is O(1) bit reads. It holds no memory of its
// own beyond the slice it was parsed from.
type Block struct {
	area  []byte // bit area, and BlockSlack bytes past it
	first uint64
	mask  uint64
	sq0   uint64
	lmask uint64
	imask uint64
	n     int
	l     int
	hiLen int
	iw    int
	cols  int
	low   int
	hi    int
	f     [MaxCols]colView
}

type colView struct {
	w, xw          int
	nexc           int
	vals, idx, exc int
	wmask, xmask   uint64
}

func uvarint(b []byte, p int) (uint64, int) {
	if p < 0 || p >= len(b) {
		return 0, -1
	}
	if b[p] < 0x80 {
		return uint64(b[p]), p + 1
	}
	v, c := binary.Uvarint(b[p:])
	if c <= 0 {
		return 0, -1
	}
	return v, p + c
}

// Parse parses the header of block b (its bytes without the CRC), whose
// first id is first and which has cols columns, checking that every region
// the header declares fits the block exactly. cap(b) must exceed len(b) by
// BlockSlack. Lookups on a block that passed Parse stay within its bytes
// whatever they hold; Decode checks the contents.
func (k *Block) Parse(first uint64, b []byte, cols int) error {
	if cap(b)-len(b) < BlockSlack || cols < 1 || cols > MaxCols {
		return errBlock
	}
	if len(b) < 3 {
		return errBlock
	}
	k.first, k.cols = first, cols
	k.n = int(b[0]) + 1
	top := uint(b[1])
	k.l = int(b[2])
	holes, p := uvarint(b, 3)
	hiLen, p := uvarint(b, p)
	if p < 0 || top > 64 || k.l > 63 || hiLen > uint64(8*len(b)) {
		return errBlock
	}
	k.mask = bitpack.LowMask(top) &^ holes
	if holes&^bitpack.LowMask(top) != 0 || (top > 0 && k.mask>>(top-1) != 1) {
		return errBlock
	}
	k.sq0 = bitpack.Pext(first, k.mask)
	k.hiLen = int(hiLen)
	m := k.n - 1
	if (m == 0) != (k.hiLen == 0) || (m > 0 && k.hiLen < m) {
		return errBlock
	}
	k.iw = bits.Len(uint(k.n - 1))
	off := m*k.l + k.hiLen
	k.low, k.hi = 0, m*k.l
	for f := range cols {
		if p < 0 || p+2 > len(b) {
			return errBlock
		}
		cv := &k.f[f]
		cv.w, cv.xw = int(b[p]), int(b[p+1])
		var nexc uint64
		nexc, p = uvarint(b, p+2)
		if p < 0 || nexc > uint64(k.n) || cv.w+cv.xw > 64 ||
			(nexc == 0) != (cv.xw == 0) {
			return errBlock
		}
		cv.nexc = int(nexc)
		cv.wmask, cv.xmask = bitpack.LowMask(uint(cv.w)), bitpack.LowMask(uint(cv.xw))
		cv.vals = off
		off += k.n * cv.w
		cv.idx = off
		off += cv.nexc * k.iw
		cv.exc = off
		off += cv.nexc * cv.xw
	}
	if p < 0 || (off+7)/8 != len(b)-p {
		return errBlock
	}
	k.area = b[p : len(b)+BlockSlack]
	k.lmask, k.imask = bitpack.LowMask(uint(k.l)), bitpack.LowMask(uint(k.iw))
	return nil
}

// Len returns the number of records in the block.
func (k *Block) Len() int { return k.n }

// Find returns the position of id in the block.
func (k *Block) Find(id uint64) (int, bool) {
	if (id^k.first)&^k.mask != 0 {
		return 0, false
	}
	s := bitpack.Pext(id, k.mask)
	if s < k.sq0 {
		return 0, false
	}
	x := s - k.sq0
	if x == 0 {
		return 0, true
	}
	h := x >> uint(k.l&63)
	if h >= uint64(k.hiLen) || k.n == 1 {
		return 0, false
	}
	pos := 0
	if h > 0 {
		pos = k.selectZero(int(h)) + 1
		if pos <= 0 {
			return 0, false
		}
	}
	return k.scan(pos, int(h), x&k.lmask)
}

// scan searches bucket h, which starts at bit pos of the high bits, for
// the low part lo.
func (k *Block) scan(pos, h int, lo uint64) (int, bool) {
	m := k.n - 1
	a := k.area
	for j := pos - h; pos < k.hiLen && j < m; {
		w := min(56, k.hiLen-pos)
		run := bits.TrailingZeros64(^getBits56(a, k.hi+pos))
		run = min(run, w, m-j)
		for e := j; e < j+run; e++ {
			v := getBits(a, k.low+e*k.l, uint(k.l), k.lmask)
			if v >= lo {
				if v == lo {
					return e + 1, true
				}
				return 0, false
			}
		}
		if run < 56 {
			break
		}
		pos, j = pos+run, j+run
	}
	return 0, false
}

// selectZero returns the bit position (in the high bits) of the r-th
// zero, r >= 1, or -1.
func (k *Block) selectZero(r int) int {
	a := k.area
	for p := 0; p < k.hiLen; p += 56 {
		z := ^getBits56(a, k.hi+p) & bitpack.LowMask(uint(min(56, k.hiLen-p)))
		c := bits.OnesCount64(z)
		if r <= c {
			return p + bitpack.Select64(z, r-1)
		}
		r -= c
	}
	return -1
}

// Row reads the record at position i (0 <= i < Len()) into r.
func (k *Block) Row(i int, r *Row) {
	for f := range k.cols {
		r[f] = k.value(&k.f[f], i)
	}
}

// value returns column cv of record i: its inline bits, then, if i is in
// the exception list (a short binary search over at most 256 positions),
// its high bits.
func (k *Block) value(cv *colView, i int) uint64 {
	a := k.area
	v := getBits(a, cv.vals+i*cv.w, uint(cv.w), cv.wmask)
	n := cv.nexc
	if n == 0 {
		return v
	}
	lo, hi := 0, n
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if int(getBits(a, cv.idx+mid*k.iw, uint(k.iw), k.imask)) < i {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	if lo < n && int(getBits(a, cv.idx+lo*k.iw, uint(k.iw), k.imask)) == i {
		v |= getBits(a, cv.exc+lo*cv.xw, uint(cv.xw), cv.xmask) << uint(cv.w&63)
	}
	return v
}

// Decode writes the block's ids and rows to ids[:Len()] and rows[:Len()],
// checking what Parse does not: that ids increase, that the declared
// varying bits vary, that exceptions are canonical. A block that decodes
// without error reads back exactly what it decodes to.
func (k *Block) Decode(ids []uint64, rows []Row) error {
	n := k.n
	ids, rows = ids[:n], rows[:n]
	ids[0] = k.first
	width := bits.OnesCount64(k.mask)
	j := 0
	for p := 0; p < k.hiLen; p += 56 {
		w := min(56, k.hiLen-p)
		word := getBits(k.area, k.hi+p, uint(w), bitpack.LowMask(uint(w)))
		for word != 0 {
			t := bits.TrailingZeros64(word)
			word &= word - 1
			if j >= n-1 {
				return errBlock
			}
			h := uint64(p + t - j)
			if k.l > 0 && h>>(64-uint(k.l)) != 0 {
				return errBlock
			}
			x := h<<uint(k.l) | getBits(k.area, k.low+j*k.l, uint(k.l), k.lmask)
			s := k.sq0 + x
			if s < k.sq0 || (width < 64 && s>>uint(width) != 0) {
				return errBlock
			}
			id := bitpack.Pdep(s, k.mask) | k.first&^k.mask
			if id <= ids[j] {
				return errBlock
			}
			j++
			ids[j] = id
		}
	}
	if j != n-1 || (n > 1 && getBits(k.area, k.hi+k.hiLen-1, 1, 1) != 1) {
		return errBlock
	}
	var mask uint64
	for _, id := range ids {
		mask |= id ^ k.first
	}
	if mask != k.mask {
		return errBlock
	}
	for f := range k.cols {
		cv := &k.f[f]
		for i := range n {
			rows[i][f] = getBits(k.area, cv.vals+i*cv.w, uint(cv.w), cv.wmask)
		}
		prev := -1
		for e := range cv.nexc {
			i := int(getBits(k.area, cv.idx+e*k.iw, uint(k.iw), k.imask))
			hi := getBits(k.area, cv.exc+e*cv.xw, uint(cv.xw), cv.xmask)
			if i <= prev || i >= n || hi == 0 {
				return errBlock
			}
			prev = i
			rows[i][f] |= hi << uint(cv.w)
		}
	}
	for i := range rows {
		for f := k.cols; f < MaxCols; f++ {
			rows[i][f] = 0
		}
	}
	return nil
}

// checkBlock checks block b — its bytes including the trailing CRC, with
// cap(b) >= len(b)+BlockSlack-4 — whose first id is first: the checksum,
// then the header. That is enough to read it safely.
func checkBlock(first uint64, b []byte, cols int) error {
	if len(b) < 4 {
		return fmt.Errorf("block of %d bytes: %w", len(b), errBlock)
	}
	body := b[:len(b)-4]
	if got, want := blockCRC(first, body), le.Uint32(b[len(b)-4:]); got != want {
		return fmt.Errorf("block checksum mismatch (computed %08x, stored %08x)", got, want)
	}
	var k Block
	return k.Parse(first, body, cols)
}
