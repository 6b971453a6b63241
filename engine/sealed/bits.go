package sealed

import "encoding/binary"

var le = binary.LittleEndian

// BlockSlack is how many bytes past a block's body (its bytes without the
// CRC) the slice given to ParseBlock must reach within its capacity:
// bitpack.Bits then reads any field with one unaligned load and no
// end-of-block branch, masking off the bytes past the end. In a window a
// block is always followed by its CRC and at least the footer; a reader
// of single blocks allocates its buffers with this slack.
const BlockSlack = 8
