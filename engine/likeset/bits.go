package likeset

import (
	"encoding/binary"

	"github.com/tally-dev/tally/engine/bitpack"
)

// The block format's bit fields are engine/bitpack's.

var le = binary.LittleEndian

// slack is how many readable bytes must follow the last byte of a block's
// bit area: bitpack.Get reads any field with one unaligned 8-byte load and
// no end-of-block branch, masking off what lies past the field. A window
// keeps slack zero bytes after its last block; a block in the middle is
// followed by the next one.
const slack = bitpack.Slack
