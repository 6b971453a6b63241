package tier

import (
	"math/bits"

	"github.com/tally-dev/tally/engine/bitpack"
)

// The ids of a block, post ids in a post block and a pair block alike,
// are squeezed and stored as an Elias–Fano list: the bits that vary
// among them, M = (2^top-1) &^ holes, are gathered (pext: bits equal in
// every id of the block, such as the window's prefix and the sequence
// number's never-used high bits, cost nothing), and ids 1..n-1 are stored
// as pext(id, M) - pext(first, M), the first id being in the index:
// about 2 + log2 of the gap to the next id bits an id, with random
// access. A pair block's pairs are a second Elias–Fano list, of codes.
//
// An Elias–Fano list of m values 0 < v_1 < ... < v_m with l low bits
// stores v mod 2^l in m lows of l bits, then sets bit (v_j >> l) + j-1
// of the high bits, whose length is that last bit's position plus one.

// efList is where an Elias–Fano list lies in a block's bit area.
type efList struct {
	count   int // values, the block's first element not counted
	lowBits int
	lowMask uint64 // low lowBits bits, kept rather than computed per read
	lows    int    // bit offset of the low parts
	highs   int    // bit offset of the high bits
	highLen int
}

// efParams returns the low bits and high length of an Elias–Fano list
// of m values whose largest is maxV.
func efParams(m int, maxV uint64) (lowBits, highLen int) {
	if m == 0 {
		return 0, 0
	}
	if q := maxV / uint64(m); q >= 1 {
		lowBits = bits.Len64(q) - 1
	}
	return lowBits, int(maxV>>uint(lowBits)) + m
}

// putEF writes the Elias–Fano list of vals, increasing, with lowBits low
// bits.
func putEF(bw *bitpack.Writer, vals []uint64, lowBits int) {
	for _, v := range vals {
		bw.Put(v, lowBits)
	}
	var prev uint64
	for _, v := range vals {
		h := v >> uint(lowBits)
		bw.Zeros(int(h - prev))
		bw.Put(1, 1)
		prev = h
	}
}

// set places a list of count values with lowBits low bits and highLen
// high bits at bit off of a block's bit area of areaBits bits, and
// returns the offset after it; ok is false for fields no list has.
func (l *efList) set(count, lowBits int, highLen uint64, off, areaBits int) (end int, ok bool) {
	if lowBits > 63 || highLen > uint64(areaBits) || (count == 0) != (highLen == 0) || int(highLen) < count {
		return 0, false
	}
	*l = efList{count: count, lowBits: lowBits, lowMask: 1<<uint(lowBits&63) - 1, highLen: int(highLen)}
	l.lows = off
	l.highs = off + count*lowBits
	return l.highs + l.highLen, true
}

// bits returns the bits the list takes in the bit area.
func (l *efList) bits() int { return l.count*l.lowBits + l.highLen }

// find returns the position of v > 0 in the list, a being the block's
// bit area: 1-based, as the block's first element, 0, is not in it.
func (l *efList) find(a []byte, v uint64) (int, bool) {
	hv := v >> uint(l.lowBits&63)
	if hv >= uint64(l.highLen) {
		return 0, false
	}
	// Element j sets bit high_j + j, so bucket h starts right after the
	// h-th zero of the high bits, at element (that position - h), and
	// holds the run of ones there.
	h := int(hv)
	pos := 0
	if h > 0 {
		if pos = l.selectZero(a, h) + 1; pos <= 0 {
			return 0, false
		}
	}
	lo := v & l.lowMask
	for j := pos - h; pos < l.highLen && j < l.count; {
		// The bucket's elements: the run of ones from pos, read a word at
		// a time (a bucket holds one or two elements on average).
		w := min(56, l.highLen-pos)
		run := bits.TrailingZeros64(^bitpack.Bits56(a, l.highs+pos))
		run = min(run, w, l.count-j)
		for e := j; e < j+run; e++ {
			x := bitpack.Bits(a, l.lows+e*l.lowBits, uint(l.lowBits), l.lowMask)
			if x >= lo {
				if x == lo {
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

// selectZero returns the position within the high bits of the r-th zero
// (r >= 1), or -1 if there are fewer.
func (l *efList) selectZero(a []byte, r int) int {
	for p := 0; p < l.highLen; p += 56 {
		z := ^bitpack.Bits56(a, l.highs+p) & bitpack.LowMask(uint(min(56, l.highLen-p)))
		c := bits.OnesCount64(z)
		if r <= c {
			return p + bitpack.Select64(z, r-1)
		}
		r -= c
	}
	return -1
}

// decode writes base + v for each value v of the list to out[:count],
// checking that the values increase, that base + v does not pass 2^64-1,
// and that the high bits are canonical (exactly count set bits, the last
// one at highLen-1); it returns the OR of (base+v) ^ base over the
// values, the bits in which they differ from base.
func (l *efList) decode(a []byte, base uint64, out []uint64) (spread uint64, err error) {
	j := 0
	var prev uint64
	for p := 0; p < l.highLen; p += 56 {
		w := min(56, l.highLen-p)
		word := bitpack.Bits(a, l.highs+p, uint(w), bitpack.LowMask(uint(w)))
		for word != 0 {
			t := bits.TrailingZeros64(word)
			word &= word - 1
			if j >= l.count {
				return 0, errBlock
			}
			h := uint64(p + t - j)
			if l.lowBits > 0 && h>>(64-uint(l.lowBits)) != 0 {
				return 0, errBlock
			}
			v := h<<uint(l.lowBits) | bitpack.Bits(a, l.lows+j*l.lowBits, uint(l.lowBits), l.lowMask)
			s := base + v
			if v <= prev || s < base {
				return 0, errBlock // values are > 0 and strictly increasing, and fit
			}
			spread |= s ^ base
			out[j] = s
			prev = v
			j++
		}
	}
	if j != l.count || (l.count > 0 && bitpack.Bits(a, l.highs+l.highLen-1, 1, 1) != 1) {
		return 0, errBlock
	}
	return spread, nil
}

// last returns the list's last value (0 when empty); the list must have
// decoded.
func (l *efList) last(a []byte) uint64 {
	if l.count == 0 {
		return 0
	}
	// The last element sets the last high bit: its high part is highLen-1
	// minus the elements before it.
	h := uint64(l.highLen - 1 - (l.count - 1))
	return h<<uint(l.lowBits) | bitpack.Bits(a, l.lows+(l.count-1)*l.lowBits, uint(l.lowBits), l.lowMask)
}

// squeezedIDs is a block's ids: its first id, the bits that vary, and
// the list of the others' squeezed differences.
type squeezedIDs struct {
	first uint64
	mask  uint64 // the id bits that vary within the block
	base  uint64 // pext(first, mask)
	list  efList
}

// set fills q from a block header's fields (count is the ids less the
// first), its list at bit off of an area of areaBits bits, and returns
// the offset after the list; ok is false for a malformed or
// non-canonical header.
func (q *squeezedIDs) set(first uint64, top uint, holes uint64, count, lowBits int, highLen uint64, off, areaBits int) (end int, ok bool) {
	if top > 64 {
		return 0, false
	}
	mask := bitpack.LowMask(top) &^ holes
	if holes&^bitpack.LowMask(top) != 0 || (top > 0 && mask>>(top-1) != 1) {
		return 0, false // non-canonical: holes above top, or the top bit a hole
	}
	q.first, q.mask, q.base = first, mask, bitpack.Pext(first, mask)
	return q.list.set(count, lowBits, highLen, off, areaBits)
}

// find returns the position of id among the block's ids, a being the
// block's bit area.
func (q *squeezedIDs) find(a []byte, id uint64) (int, bool) {
	if (id^q.first)&^q.mask != 0 {
		return 0, false // a bit that is constant in the block differs
	}
	s := bitpack.Pext(id, q.mask)
	if s <= q.base {
		return 0, s == q.base
	}
	return q.list.find(a, s-q.base)
}

// check checks what set does not — that the ids increase, fit the
// varying bits, and vary in every bit declared varying (checked on the
// squeezed values: pext keeps the ids' order, and the bits that vary are
// those their differences from the first set) — leaving the squeezed ids
// but the first in scratch[:count].
func (q *squeezedIDs) check(a []byte, scratch []uint64) error {
	squeezed := scratch[:q.list.count]
	spread, err := q.list.decode(a, q.base, squeezed)
	if err != nil {
		return err
	}
	width := uint(bits.OnesCount64(q.mask))
	if n := len(squeezed); n > 0 && width < 64 && squeezed[n-1]>>width != 0 {
		return errBlock // the largest is not within the varying bits
	}
	if spread != bitpack.LowMask(width) {
		return errBlock // non-canonical: declared varying bits that do not vary
	}
	return nil
}

// decode checks the ids as check does and writes them to ids[:count+1].
func (q *squeezedIDs) decode(a []byte, ids []uint64) error {
	if err := q.check(a, ids[1:]); err != nil {
		return err
	}
	ids[0] = q.first
	for j := 1; j <= q.list.count; j++ {
		ids[j] = bitpack.Pdep(ids[j], q.mask) | q.first&^q.mask
	}
	return nil
}

// last returns the block's last id; the list must have decoded.
func (q *squeezedIDs) last(a []byte) uint64 {
	if q.list.count == 0 {
		return q.first
	}
	return bitpack.Pdep(q.base+q.list.last(a), q.mask) | q.first&^q.mask
}

// idPlan is how a block codes its ids: planIDs picks it, a block writes
// top, holes(), lowBits and highLen in its header, put the list.
type idPlan struct {
	vary, base       uint64
	top              int
	lowBits, highLen int
}

// planIDs plans the coding of ids, increasing, at least one.
func planIDs(ids []uint64) idPlan {
	first := ids[0]
	var vary uint64
	for _, id := range ids {
		vary |= id ^ first
	}
	p := idPlan{vary: vary, top: bits.Len64(vary), base: bitpack.Pext(first, vary)}
	if n := len(ids); n > 1 {
		p.lowBits, p.highLen = efParams(n-1, bitpack.Pext(ids[n-1], vary)-p.base)
	}
	return p
}

// holes is the bits below top that do not vary.
func (p *idPlan) holes() uint64 { return bitpack.LowMask(uint(p.top)) &^ p.vary }

// put writes the list of ids, the ids planIDs was given; scratch holds
// their squeezed differences.
func (p *idPlan) put(bw *bitpack.Writer, ids, scratch []uint64) {
	diffs := scratch[:0]
	for _, id := range ids[1:] {
		diffs = append(diffs, bitpack.Pext(id, p.vary)-p.base)
	}
	putEF(bw, diffs, p.lowBits)
}
