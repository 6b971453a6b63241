package embedded

import "github.com/tally-dev/tally/engine/table"

// userKey is a user id as two 32-bit words, so that a table keyed by it
// has 4-byte slots: with a uint32 value a slot is 12 bytes where a uint64
// key would pad it to 16 (engine/table's slot note).
type userKey [2]uint32

func keyOf(u uint64) userKey       { return userKey{uint32(u), uint32(u >> 32)} }
func (k userKey) id() uint64       { return uint64(k[0]) | uint64(k[1])<<32 }
func hashUserKey(k userKey) uint64 { return table.Mix64(k.id()) }
