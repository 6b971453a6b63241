package embedded

import (
	"math"

	"github.com/tally-dev/tally/engine/table"
)

// userKey is a user id as two 32-bit words, so that a table keyed by it
// has 4-byte slots: with a uint32 value a slot is 12 bytes where a uint64
// key would pad it to 16 (engine/table's slot note).
type userKey [2]uint32

func keyOf(u uint64) userKey       { return userKey{uint32(u), uint32(u >> 32)} }
func (k userKey) id() uint64       { return uint64(k[0]) | uint64(k[1])<<32 }
func hashUserKey(k userKey) uint64 { return table.Mix64(k.id()) }

// userCounts maps users to a count >= 0 (a user's posts, or followers),
// holding only the users that have one: 13 bytes a slot (12 of slot, 1
// control byte) in engine/table's open addressing. Nearly every count
// fits 32 bits, but a count must stay exact past 2^32, so a count at
// countEscape keeps its value in wide instead (the narrow field with an
// escape to an overflow table of userRec's counters).
type userCounts struct {
	narrow *table.Table[userKey, uint32]
	wide   *table.Table[uint64, int64]
}

// countEscape in userCounts.narrow says the count is in userCounts.wide.
const countEscape = math.MaxUint32

func newUserCounts(capacityHint int) userCounts {
	return userCounts{
		narrow: table.New[userKey, uint32](hashUserKey, capacityHint),
		wide:   table.New[uint64, int64](hashU64, 8),
	}
}

// Get returns u's count and whether u has an entry.
func (c *userCounts) Get(u uint64) (int64, bool) {
	n, ok := c.narrow.Get(keyOf(u))
	if n != countEscape {
		return int64(n), ok
	}
	w, _ := c.wide.Get(u)
	return w, true
}

// Has reports whether u has an entry (a count, possibly 0).
func (c *userCounts) Has(u uint64) bool {
	_, ok := c.narrow.Get(keyOf(u))
	return ok
}

// Add adds d to u's count, creating u's entry; the result must be >= 0.
func (c *userCounts) Add(u uint64, d int64) {
	n := c.narrow.Upsert(keyOf(u))
	if *n != countEscape {
		if v := int64(*n) + d; v >= 0 && v < countEscape {
			*n = uint32(v)
			return
		}
		c.set(u, n, int64(*n)+d)
		return
	}
	w, _ := c.wide.Ref(u)
	c.set(u, n, *w+d)
}

// Set sets u's count to v >= 0, creating u's entry.
func (c *userCounts) Set(u uint64, v int64) { c.set(u, c.narrow.Upsert(keyOf(u)), v) }

// set stores v as u's count, n being u's narrow slot.
func (c *userCounts) set(u uint64, n *uint32, v int64) {
	if v < countEscape {
		if *n == countEscape {
			c.wide.Delete(u)
		}
		*n = uint32(v)
		return
	}
	*n = countEscape
	c.wide.Put(u, v)
}

// Len returns the number of users with an entry.
func (c *userCounts) Len() int { return c.narrow.Len() }

// Range calls fn for every entry, in slot order, until it returns false.
func (c *userCounts) Range(fn func(u uint64, v int64) bool) {
	c.narrow.Range(func(k userKey, n uint32) bool {
		v := int64(n)
		if n == countEscape {
			v, _ = c.wide.Get(k.id())
		}
		return fn(k.id(), v)
	})
}

// MemoryBytes is the tables' own size.
func (c *userCounts) MemoryBytes() int { return c.narrow.MemoryBytes() + c.wide.MemoryBytes() }

// Delete removes u's entry, if any.
func (c *userCounts) Delete(u uint64) {
	if n, ok := c.narrow.Get(keyOf(u)); ok {
		if n == countEscape {
			c.wide.Delete(u)
		}
		c.narrow.Delete(keyOf(u))
	}
}
