package tier

import (
	"encoding/binary"
	"hash/crc32"
)

var le = binary.LittleEndian

// castagnoli is served by the CPU's CRC32C instruction.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// BlockSlack is how many bytes past a block's body (its bytes without the
// CRC) the slice given to Block.Parse must reach within its capacity:
// getBits then reads any field with one unaligned load and no end-of-block
// branch. In a window a block is followed by its CRC and at least the
// footer; the cold cache and the read buffers keep this slack too.
const BlockSlack = 8

// getBits returns the w <= 64 bits of b starting at bit off (LSB-first);
// mask is LowMask(w). The caller guarantees off+w <= 8*(len(b)-BlockSlack),
// len(b) counting the slack.
func getBits(b []byte, off int, w uint, mask uint64) uint64 {
	i, s := off>>3, uint(off&7)
	x := le.Uint64(b[i:i+8]) >> s
	if s+w > 64 {
		x |= uint64(b[i+8]) << ((64 - s) & 63)
	}
	return x & mask
}

// getBits56 returns at least 56 bits of b from bit off; the caller masks.
func getBits56(b []byte, off int) uint64 {
	i := off >> 3
	return le.Uint64(b[i:i+8]) >> uint(off&7)
}
