package tier

import (
	"encoding/binary"
	"hash/crc32"

	"github.com/tally-dev/tally/engine/bitpack"
	"github.com/tally-dev/tally/engine/tier/internal/blockcache"
)

var le = binary.LittleEndian

// castagnoli is served by the CPU's CRC32C instruction.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// BlockSlack is how many bytes past a block's body (its bytes without the
// CRC) the slice a block is parsed from must reach within its capacity:
// bitpack.Bits then reads any field with one unaligned load and no
// end-of-block branch. In an image a block is followed by its CRC and at
// least the footer; the block cache and the read buffers keep this slack
// too.
const BlockSlack = bitpack.Slack

// The block cache hands blocks out with at least BlockSlack bytes of
// capacity past them.
const _ = uint(blockcache.Slack - BlockSlack)
