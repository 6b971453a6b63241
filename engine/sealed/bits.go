package sealed

import (
	"encoding/binary"
	"math/bits"
)

var le = binary.LittleEndian

// BlockSlack is how many bytes past a block's body (its bytes without the
// CRC) the slice given to ParseBlock must reach within its capacity:
// getBits then reads any field with one unaligned load and no end-of-block
// branch, masking off the bytes past the end. In a window a block is
// always followed by its CRC and at least the footer; a reader of single
// blocks allocates its buffers with this slack.
const BlockSlack = 8

// getBits returns the w <= 64 bits of b starting at bit off (LSB-first);
// mask is lowMask(w). The caller guarantees off+w <= 8*(len(b)-BlockSlack),
// and len(b) counts the slack (Block.area does).
func getBits(b []byte, off int, w uint, mask uint64) uint64 {
	i, s := off>>3, uint(off&7)
	x := le.Uint64(b[i:i+8]) >> s
	if s+w > 64 {
		// Only for w > 56; the ninth byte is then within the bits.
		x |= uint64(b[i+8]) << ((64 - s) & 63)
	}
	return x & mask
}

// getBits56 returns 56 bits of b from bit off, or more: the caller masks
// what it needs. Same guarantee as getBits for off.
func getBits56(b []byte, off int) uint64 {
	i := off >> 3
	// b[i:i+8], not b[i:]: the bounds checks are then two compares, with
	// no masking of the slice's pointer for an empty result.
	return le.Uint64(b[i:i+8]) >> uint(off&7)
}

// bitWriter appends LSB-first bit fields to a byte slice.
type bitWriter struct {
	buf  []byte
	acc  uint64 // pending bits, LSB first
	nacc uint   // number of pending bits, < 64
}

// put appends the low w <= 64 bits of v.
func (w *bitWriter) put(v uint64, n int) {
	if n == 0 {
		return
	}
	if n < 64 {
		v &= 1<<uint(n) - 1
	}
	w.acc |= v << w.nacc
	free := 64 - w.nacc
	if uint(n) < free {
		w.nacc += uint(n)
		return
	}
	w.buf = le.AppendUint64(w.buf, w.acc)
	if free == 64 {
		w.acc = 0
	} else {
		w.acc = v >> free
	}
	w.nacc = uint(n) - free
}

// zeros appends n zero bits.
func (w *bitWriter) zeros(n int) {
	for ; n >= 64; n -= 64 {
		w.put(0, 64)
	}
	w.put(0, n)
}

// flush pads the pending bits with zeros to a whole byte and returns the
// buffer.
func (w *bitWriter) flush() []byte {
	for ; w.nacc > 0; w.nacc -= min(8, w.nacc) {
		w.buf = append(w.buf, byte(w.acc))
		w.acc >>= 8
	}
	w.acc = 0
	return w.buf
}

// pext gathers the bits of x selected by mask into the low bits of the
// result (the BMI2 instruction, which Go does not expose). Masks here are a
// few runs of ones, so the loop runs a few times.
func pext(x, mask uint64) uint64 {
	var r uint64
	var o uint
	for mask != 0 {
		s := uint(bits.TrailingZeros64(mask))
		n := uint(bits.TrailingZeros64(^(mask >> s)))
		run := lowMask(n)
		r |= (x >> s & run) << o
		o += n
		mask &^= run << s
	}
	return r
}

// pdep scatters the low bits of x to the positions selected by mask: the
// inverse of pext.
func pdep(x, mask uint64) uint64 {
	var r uint64
	for mask != 0 {
		s := uint(bits.TrailingZeros64(mask))
		n := uint(bits.TrailingZeros64(^(mask >> s)))
		run := lowMask(n)
		r |= (x & run) << s
		x >>= n // a shift by 64 yields 0 in Go
		mask &^= run << s
	}
	return r
}

// lowMask returns a word with the low n <= 64 bits set.
func lowMask(n uint) uint64 {
	if n >= 64 {
		return ^uint64(0)
	}
	return 1<<n - 1
}

// select64 returns the position of the r-th (0-based) set bit of x; x has
// more than r set bits. It is branch-free (Vigna's broadword select): the
// byte-wise prefix popcounts locate the byte, a table the bit within it.
// The loop it replaces mispredicted on about every call of a lookup.
func select64(x uint64, r int) int {
	const l8, h8 = 0x0101010101010101, 0x8080808080808080
	s := x - (x>>1)&0x5555555555555555
	s = s&0x3333333333333333 + (s>>2)&0x3333333333333333
	s = (s + s>>4) & 0x0f0f0f0f0f0f0f0f
	s *= l8 // byte i: set bits in bytes 0..i
	// The high bit of byte i is set when r >= that prefix count: no byte
	// borrows, since counts are at most 64 and r < 64.
	geq := ((uint64(r)*l8 | h8) - s) & h8
	place := uint(bits.OnesCount64(geq)) * 8
	rank := uint64(r) - ((s<<8)>>place)&0xff
	return int(place) + int(selectInByte[(x>>place)&0xff|rank<<8&0x700])
}

// selectInByte[b | r<<8] is the position of the r-th set bit of byte b.
var selectInByte = func() (t [2048]uint8) {
	for b := range 256 {
		r := 0
		for i := range 8 {
			if b>>i&1 == 1 {
				t[b|r<<8] = uint8(i)
				r++
			}
		}
	}
	return t
}()
