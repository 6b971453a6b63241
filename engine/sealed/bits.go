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

// getBits returns the w <= 64 bits of b starting at bit off (LSB-first).
// The caller guarantees off+w <= 8*len(b) and cap(b) >= len(b)+BlockSlack.
func getBits(b []byte, off, w int) uint64 {
	i, s := off>>3, uint(off&7)
	x := le.Uint64(b[i:i+8]) >> s
	if s+uint(w) > 64 {
		// Only for w > 56; the ninth byte is then within len(b).
		x |= uint64(b[i+8]) << (64 - s)
	}
	return x & (1<<uint(w) - 1) // a shift by 64 yields 0, so w = 64 keeps all
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
// more than r set bits.
func select64(x uint64, r int) int {
	p := 0
	for {
		c := bits.OnesCount8(uint8(x))
		if r < c {
			break
		}
		r -= c
		x >>= 8
		p += 8
	}
	for ; ; r-- {
		t := bits.TrailingZeros64(x)
		if r == 0 {
			return p + t
		}
		x &= x - 1
	}
}
