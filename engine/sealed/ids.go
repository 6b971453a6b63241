package sealed

import (
	"encoding/binary"
	"math/bits"

	"github.com/tally-dev/tally/engine/bitpack"
)

// The id column of a block, shared with engine/tier's blocks (their ids
// are coded the same way, the columns after them differ):
//
//	header = n-1 uint8 | top uint8 | l uint8 | holes uvarint | hiLen uvarint
//	bits   = (n-1) lows of l bits | hiLen high bits     (the bit area's start)
//
// The id bits that vary within the block, M = (2^top-1) &^ holes, are
// gathered (pext) and ids 1..n-1 stored as an Elias–Fano list of their
// differences from the first id's, which the block index keeps.

// IDPlan is how a block's ids are coded: PlanIDs picks it, AppendHeader
// writes the header, Put the bits.
type IDPlan struct {
	vary, sq0   uint64
	n, top, l   int
	hiLen       int
	first, last uint64
}

// PlanIDs plans the id column of ids, 1..MaxBlockPosts increasing ids.
func PlanIDs(ids []uint64) IDPlan {
	n := len(ids)
	first := ids[0]
	var vary uint64
	for _, id := range ids {
		vary |= id ^ first
	}
	p := IDPlan{vary: vary, n: n, top: bits.Len64(vary), sq0: bitpack.Pext(first, vary)}
	m := n - 1
	if m == 0 {
		return p
	}
	maxX := bitpack.Pext(ids[n-1], vary) - p.sq0
	if maxX/uint64(m) >= 1 {
		p.l = bits.Len64(maxX/uint64(m)) - 1
	}
	p.hiLen = int(maxX>>uint(p.l)) + m
	return p
}

// AppendHeader appends the id header to dst.
func (p *IDPlan) AppendHeader(dst []byte) []byte {
	dst = append(dst, byte(p.n-1), byte(p.top), byte(p.l))
	dst = binary.AppendUvarint(dst, bitpack.LowMask(uint(p.top))&^p.vary)
	return binary.AppendUvarint(dst, uint64(p.hiLen))
}

// Put writes the id bits of ids, the ids PlanIDs was given.
func (p *IDPlan) Put(bw *bitpack.Writer, ids []uint64) {
	for _, id := range ids[1:] {
		bw.Put(bitpack.Pext(id, p.vary)-p.sq0, p.l)
	}
	var prevHigh uint64
	for _, id := range ids[1:] {
		h := (bitpack.Pext(id, p.vary) - p.sq0) >> uint(p.l)
		bw.Zeros(int(h - prevHigh))
		bw.Put(1, 1)
		prevHigh = h
	}
}

// IDs is a parsed view of a block's id column: Find locates an id with a
// select on the high bits and a compare of one or two low parts, O(1) bit
// reads rather than a decode of the block up to it. It holds no memory of
// its own beyond the slice it was parsed from.
type IDs struct {
	area  []byte // the block's bit area, and BlockSlack bytes past it
	first uint64
	mask  uint64 // id bits that vary within the block
	sq0   uint64 // bitpack.Pext(first, mask)
	lmask uint64 // low l bits, kept rather than computed per read
	n     int
	l     int
	hiLen int
	low   int // bit offsets into area
	hi    int
}

// Area returns the block's bit area, and BlockSlack bytes past it.
func (k *IDs) Area() []byte { return k.area }

// Len returns the number of ids.
func (k *IDs) Len() int { return k.n }

// Bits returns the bits the column takes in the bit area.
func (k *IDs) Bits() int { return (k.n-1)*k.l + k.hiLen }

// Find returns the position of id in the block.
func (k *IDs) Find(id uint64) (int, bool) {
	h, lo, st := k.start(id)
	if st != search {
		return 0, st == atFirst
	}
	return k.scan(k.bucket(h), h, lo)
}

// What start tells of an id.
const (
	absent  = iota // not in the block
	atFirst        // the block's first post
	search         // in bucket h, if anywhere
)

// start is the first step of Find, which needs only the header: the
// Elias–Fano bucket h of id and its low part lo.
func (k *IDs) start(id uint64) (h int, lo uint64, st int) {
	if (id^k.first)&^k.mask != 0 {
		return 0, 0, absent // a bit that is constant in the block differs
	}
	s := bitpack.Pext(id, k.mask)
	if s < k.sq0 {
		return 0, 0, absent
	}
	x := s - k.sq0
	if x == 0 {
		return 0, 0, atFirst
	}
	hx := x >> uint(k.l&63)
	if hx >= uint64(k.hiLen) || k.n == 1 {
		return 0, 0, absent
	}
	return int(hx), x & k.lmask, search
}

// bucket returns where bucket h starts in the high bits, or -1. Element j
// (post j+1) sets bit high_j + j, so bucket h starts right after the h-th
// zero of the high bits, at element (that position - h), and holds the
// run of ones there.
func (k *IDs) bucket(h int) int {
	if h == 0 {
		return 0
	}
	return k.selectZero(h) + 1 // -1 + 1 = 0 <= 0 when there is no h-th zero
}

// scan searches bucket h, which starts at bit pos of the high bits, for
// the low part lo, and returns the post's position.
func (k *IDs) scan(pos, h int, lo uint64) (int, bool) {
	if pos <= 0 && h > 0 {
		return 0, false
	}
	m := k.n - 1
	a := k.area
	for j := pos - h; pos < k.hiLen && j < m; {
		// The bucket's elements: the run of ones from pos, read a word at a
		// time (a bucket holds one or two elements on average).
		w := min(56, k.hiLen-pos)
		run := bits.TrailingZeros64(^bitpack.Bits56(a, k.hi+pos))
		run = min(run, w, m-j)
		for e := j; e < j+run; e++ {
			v := bitpack.Bits(a, k.low+e*k.l, uint(k.l), k.lmask)
			if v >= lo {
				if v == lo {
					return e + 1, true
				}
				return 0, false // low parts increase within a bucket
			}
		}
		if run < 56 {
			break
		}
		pos, j = pos+run, j+run
	}
	return 0, false
}

// selectZero returns the bit position (in the high bits) of the r-th zero,
// r >= 1, or -1 if there are fewer.
func (k *IDs) selectZero(r int) int {
	a := k.area
	for p := 0; p < k.hiLen; p += 56 {
		z := ^bitpack.Bits56(a, k.hi+p) & bitpack.LowMask(uint(min(56, k.hiLen-p)))
		c := bits.OnesCount64(z)
		if r <= c {
			return p + bitpack.Select64(z, r-1)
		}
		r -= c
	}
	return -1
}

// Decode checks what ParseBlockHeader does not — that the ids increase, fit
// the varying bits, and vary in every bit declared varying (the check is
// on the squeezed values: pext keeps the ids' order, and the bits that
// vary are those their differences from the first set) — and writes the
// ids to ids[:Len()], or only checks when ids is nil. It returns errBlock.
func (k *IDs) Decode(ids []uint64) error {
	n := k.n
	if ids != nil {
		ids = ids[:n]
		ids[0] = k.first
	}
	width := bits.OnesCount64(k.mask)
	j := 0
	var prev, orx uint64 // x of the previous post; OR of the squeezed differences
	for p := 0; p < k.hiLen; p += 56 {
		w := min(56, k.hiLen-p)
		word := bitpack.Bits(k.area, k.hi+p, uint(w), bitpack.LowMask(uint(w)))
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
			x := h<<uint(k.l) | bitpack.Bits(k.area, k.low+j*k.l, uint(k.l), k.lmask)
			s := k.sq0 + x
			if x <= prev || s < k.sq0 || (width < 64 && s>>uint(width) != 0) {
				return errBlock // not increasing, or not within the varying bits
			}
			orx |= s ^ k.sq0
			prev = x
			j++
			if ids != nil {
				ids[j] = bitpack.Pdep(s, k.mask) | k.first&^k.mask
			}
		}
	}
	if j != n-1 || (n > 1 && bitpack.Bits(k.area, k.hi+k.hiLen-1, 1, 1) != 1) {
		return errBlock
	}
	if orx != bitpack.LowMask(uint(width)) {
		return errBlock // non-canonical: declared varying bits that do not vary
	}
	return nil
}

// Last returns the block's last id; the column must have passed Decode.
func (k *IDs) Last() uint64 {
	if k.n == 1 {
		return k.first
	}
	// The last element sets the last high bit: its high part is hiLen-1
	// minus the elements before it.
	m := k.n - 1
	h := uint64(k.hiLen - 1 - (m - 1))
	x := h<<uint(k.l) | bitpack.Bits(k.area, k.low+(m-1)*k.l, uint(k.l), k.lmask)
	return bitpack.Pdep(k.sq0+x, k.mask) | k.first&^k.mask
}
