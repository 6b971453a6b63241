// Package bitpack owns the bit-level primitives of Tally's packed formats:
// LSB-first fixed-width fields read with one unaligned load, a writer that
// appends them, the pext/pdep pair that squeezes the id bits a block
// shares out of its keys, the select of an Elias–Fano list's high bits,
// and the radix sort that orders keys before they are packed. Its users
// are engine/tier's blocks, engine/follows' packed lists and
// engine/usercounts (its sort). It promises
// that Get, Bits and Bits56 never read outside a slice that has Slack
// bytes of capacity past its end, that Writer's output read back with Get
// gives exactly what was put, and that SortByKey is stable.
package bitpack

import (
	"cmp"
	"encoding/binary"
	"math/bits"
	"slices"
)

var le = binary.LittleEndian

// Slack is how many bytes past the last field a slice given to Get must
// reach within its capacity: Get then reads any field with one unaligned
// load and no end-of-data branch.
const Slack = 8

// Get returns the w <= 64 bits of b starting at bit off (LSB-first). The
// caller guarantees off+w <= 8*len(b) and cap(b) >= len(b)+Slack.
func Get(b []byte, off, w int) uint64 {
	i, s := off>>3, uint(off&7)
	x := le.Uint64(b[i:i+8]) >> s
	if s+uint(w) > 64 {
		// Only for w > 56; the ninth byte is then within len(b).
		x |= uint64(b[i+8]) << (64 - s)
	}
	return x & (1<<uint(w) - 1) // a shift by 64 yields 0, so w = 64 keeps all
}

// Set sets the w <= 64 bits of b at bit off (LSB-first) to the low w bits
// of v, with Get's guarantee on b. It rewrites the bits around the field
// as they were, up to 8 bytes past it: a field rewritten in place in a
// buffer that others read needs the writer's lock, not just its own bytes.
func Set(b []byte, off, w int, v uint64) {
	i, s := off>>3, uint(off&7)
	x := le.Uint64(b[i : i+8])
	mask := LowMask(uint(w))
	x = x&^(mask<<s) | (v&mask)<<s
	le.PutUint64(b[i:i+8], x)
	if s+uint(w) > 64 {
		// Only for w > 56: the field's top bits are in the ninth byte.
		hi := uint(s + uint(w) - 64)
		b[i+8] = b[i+8]&^byte(LowMask(hi)) | byte(v&mask>>(64-s))
	}
}

// Bits is Get for the lookup paths of the blocks, whose views keep each field's mask (LowMask(w)) rather than compute it
// per read: in Go a shift by a variable amount costs a fix-up for amounts
// of 64 and more, on every read. Same guarantee as Get; it inlines.
func Bits(b []byte, off int, w uint, mask uint64) uint64 {
	i, s := off>>3, uint(off&7)
	x := le.Uint64(b[i:i+8]) >> s
	if s+w > 64 {
		// Only for w > 56; the ninth byte is then within the bits.
		x |= uint64(b[i+8]) << ((64 - s) & 63)
	}
	return x & mask
}

// Bits56 returns 56 bits of b from bit off, or more: the caller masks
// what it needs. Same guarantee as Get for off; it inlines.
func Bits56(b []byte, off int) uint64 {
	i := off >> 3
	// b[i:i+8], not b[i:]: the bounds checks are then two compares, with
	// no masking of the slice's pointer for an empty result.
	return le.Uint64(b[i:i+8]) >> uint(off&7)
}

// Writer appends LSB-first bit fields to Buf.
type Writer struct {
	Buf  []byte
	acc  uint64 // pending bits, LSB first
	nacc uint   // number of pending bits, < 64
}

// Put appends the low n <= 64 bits of v.
func (w *Writer) Put(v uint64, n int) {
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
	w.Buf = le.AppendUint64(w.Buf, w.acc)
	if free == 64 {
		w.acc = 0
	} else {
		w.acc = v >> free
	}
	w.nacc = uint(n) - free
}

// PutFields appends, for each v of vs, the low n <= 64 bits of v - sub:
// a column of fixed-width fields, with the pending bits kept in
// registers rather than in w between fields.
func (w *Writer) PutFields(vs []uint64, sub uint64, n int) {
	if n == 0 {
		return
	}
	acc, nacc, buf := w.acc, w.nacc, w.Buf
	mask, width := LowMask(uint(n)), uint(n)
	for _, v := range vs {
		v = (v - sub) & mask
		acc |= v << nacc
		if free := 64 - nacc; width < free {
			nacc += width
		} else {
			buf = le.AppendUint64(buf, acc)
			acc = v >> free // 0 when free is 64
			nacc = width - free
		}
	}
	w.acc, w.nacc, w.Buf = acc, nacc, buf
}

// Zeros appends n zero bits.
func (w *Writer) Zeros(n int) {
	for ; n >= 64; n -= 64 {
		w.Put(0, 64)
	}
	w.Put(0, n)
}

// Flush pads the pending bits with zeros to a whole byte and returns Buf.
func (w *Writer) Flush() []byte {
	for ; w.nacc > 0; w.nacc -= min(8, w.nacc) {
		w.Buf = append(w.Buf, byte(w.acc))
		w.acc >>= 8
	}
	w.acc = 0
	return w.Buf
}

// Pext gathers the bits of x selected by mask into the low bits of the
// result (the BMI2 instruction, which Go does not expose). Masks here are a
// few runs of ones, so the loop runs a few times. For x and y that agree
// outside mask, Pext keeps their order: that is what lets a block store its
// keys squeezed and still search them.
func Pext(x, mask uint64) uint64 {
	var r uint64
	var o uint
	for mask != 0 {
		s := uint(bits.TrailingZeros64(mask))
		n := uint(bits.TrailingZeros64(^(mask >> s)))
		run := LowMask(n)
		r |= (x >> s & run) << o
		o += n
		mask &^= run << s
	}
	return r
}

// Pdep scatters the low bits of x to the positions selected by mask: the
// inverse of Pext.
func Pdep(x, mask uint64) uint64 {
	var r uint64
	for mask != 0 {
		s := uint(bits.TrailingZeros64(mask))
		n := uint(bits.TrailingZeros64(^(mask >> s)))
		run := LowMask(n)
		r |= (x & run) << s
		x >>= n // a shift by 64 yields 0 in Go
		mask &^= run << s
	}
	return r
}

// LowMask returns a word with the low n <= 64 bits set.
func LowMask(n uint) uint64 {
	if n >= 64 {
		return ^uint64(0)
	}
	return 1<<n - 1
}

// Select64 returns the position of the r-th (0-based) set bit of x; x has
// more than r set bits. It is the select of an Elias–Fano list's high
// bits, and branch-free (Vigna's broadword select): the byte-wise prefix
// popcounts locate the byte, a table the bit within it. A loop over the
// bytes mispredicted on about every call of a lookup.
func Select64(x uint64, r int) int {
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

// SortByKey sorts xs by key, keeping the order of elements with equal
// keys: an LSD radix sort by bytes that skips the bytes all keys share
// (keys under 2^20 take three passes), where a comparison sort costs a
// log factor. spare is scratch; one is made if it is shorter than xs.
func SortByKey[T any](xs []T, key func(T) uint64, spare []T) {
	if len(xs) < 64 {
		slices.SortStableFunc(xs, func(x, y T) int { return cmp.Compare(key(x), key(y)) })
		return
	}
	and, or := ^uint64(0), uint64(0)
	for _, x := range xs {
		k := key(x)
		and, or = and&k, or|k
	}
	differ := and ^ or
	if len(spare) < len(xs) {
		spare = make([]T, len(xs))
	}
	src, dst := xs, spare[:len(xs)]
	for shift := uint(0); shift < 64; shift += 8 {
		if differ>>shift&0xff == 0 {
			continue
		}
		var pos [256]int
		for _, x := range src {
			pos[key(x)>>shift&0xff]++
		}
		sum := 0
		for i, c := range pos {
			pos[i], sum = sum, sum+c
		}
		for _, x := range src {
			d := key(x) >> shift & 0xff
			dst[pos[d]] = x
			pos[d]++
		}
		src, dst = dst, src
	}
	if &src[0] != &xs[0] {
		copy(xs, src)
	}
}

// Uvarint reads a uvarint of b at p and returns it with the position after
// it, or p = -1 if it does not fit (or p was already -1, so a run of reads
// checks once at the end). Header varints are almost always one byte,
// which the first test takes without a call.
func Uvarint(b []byte, p int) (uint64, int) {
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
