package sealed

import "encoding/binary"

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
