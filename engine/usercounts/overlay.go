package usercounts

import (
	"cmp"
	"slices"

	"github.com/tally-dev/tally/engine/bitpack"
	"github.com/tally-dev/tally/engine/table"
)

// tombstone is the value of a deleted user in an overlay: it shadows the
// user's entry in the layers below.
const tombstone = -1

// entry is a user and a count, or tombstone.
type entry struct {
	id uint64
	v  int64
}

// overlay holds the writes since the last fold: m for any user, and tail,
// an ascending run of users that were new and greater than every user the
// table held when they came (a snapshot load, or new users with growing
// ids), kept in a slice because appending beats hashing and the fold then
// needs no sort for them. The tail's promise: a user >= tail[0].id is in
// no other part of this overlay nor in any layer below, so a lookup there
// is answered by the tail alone.
type overlay struct {
	m    *table.Table[uint64, int64]
	tail []entry
	// cut counts the entries sliced off tail's front (moved to m) while
	// tail's array still holds them: memory that memoryBytes counts.
	cut int
	// filter has 2 bits set per user of m, both in one word (a blocked
	// Bloom filter at 16 bits a user, about 1.5% false hits): a lookup of
	// a user m lacks, nearly every lookup, reads one word of it, which
	// stays in cache where m's slots (17 bytes each) would not.
	filter []uint64
}

// filterBitsPerUser sizes the filter: it doubles when m passes
// len(filter)*64/filterBitsPerUser users.
const filterBitsPerUser = 16

func newOverlay() *overlay {
	return &overlay{m: table.New[uint64, int64](table.Mix64, 8), filter: make([]uint64, 8)}
}

// filterWord returns u's word index in a filter of n words (a power of
// two) and the two bits u sets in it.
func filterWord(u uint64, n int) (int, uint64) {
	h := table.Mix64(u ^ 0x2545f4914f6cdd1d) // not m's hash: its bits choose m's slots
	return int(h & uint64(n-1)), 1<<(h>>52&63) | 1<<(h>>58)
}

// mayHold reports whether u may be in m (false: it is not).
func (o *overlay) mayHold(u uint64) bool {
	i, b := filterWord(u, len(o.filter))
	return o.filter[i]&b == b
}

// ref returns a pointer to u's value (or tombstone) in m, valid until
// the next put; the filter answers most misses.
func (o *overlay) ref(u uint64) (*int64, bool) {
	if o.m.Len() == 0 || !o.mayHold(u) {
		return nil, false
	}
	return o.m.Ref(u)
}

// put stores u's value (or tombstone) in m.
func (o *overlay) put(u uint64, v int64) {
	o.m.Put(u, v)
	if o.m.Len()*filterBitsPerUser > len(o.filter)*64 {
		o.filter = make([]uint64, 2*len(o.filter))
		o.m.Range(func(u uint64, _ int64) bool {
			i, b := filterWord(u, len(o.filter))
			o.filter[i] |= b
			return true
		})
		return
	}
	i, b := filterWord(u, len(o.filter))
	o.filter[i] |= b
}

// size is the number of users the overlay holds (tombstones included).
func (o *overlay) size() int { return o.m.Len() + len(o.tail) }

// inTail reports whether u is answered by the tail.
func (o *overlay) inTail(u uint64) bool { return len(o.tail) > 0 && u >= o.tail[0].id }

// tailIndex returns the index of the first tail entry with id >= u and
// whether it is u.
func (o *overlay) tailIndex(u uint64) (int, bool) {
	return slices.BinarySearchFunc(o.tail, u, func(e entry, u uint64) int { return cmp.Compare(e.id, u) })
}

// get returns u's count if this overlay decides about u: decided is true
// when u has an entry or a tombstone here, or is in the tail's range;
// then ok says whether u has a count.
func (o *overlay) get(u uint64) (v int64, ok, decided bool) {
	if o.inTail(u) {
		i, found := o.tailIndex(u)
		if !found || o.tail[i].v < 0 {
			return 0, false, true
		}
		return o.tail[i].v, true, true
	}
	if o.m.Len() == 0 || !o.mayHold(u) {
		return 0, false, false
	}
	v, decided = o.m.Get(u)
	if v < 0 {
		return 0, false, true
	}
	return v, decided, decided
}

// sorted returns the overlay's entries (tombstones included) in id order.
// With m empty it is the tail itself, which the caller must not modify.
func (o *overlay) sorted() []entry {
	if o.m.Len() == 0 {
		return o.tail
	}
	out := make([]entry, 0, o.size())
	o.m.Range(func(u uint64, v int64) bool {
		out = append(out, entry{u, v})
		return true
	})
	bitpack.SortByKey(out, func(e entry) uint64 { return e.id }, nil)
	return append(out, o.tail...)
}

// maxID returns the largest id the overlay holds (tombstones included),
// ok false when it holds none.
func (o *overlay) maxID() (uint64, bool) {
	if len(o.tail) > 0 {
		return o.tail[len(o.tail)-1].id, true
	}
	var mx uint64
	o.m.Range(func(u uint64, _ int64) bool { mx = max(mx, u); return true })
	return mx, o.m.Len() > 0
}

func (o *overlay) memoryBytes() int64 {
	return int64(o.m.MemoryBytes()) + int64(cap(o.tail)+o.cut)*16 + int64(len(o.filter))*8
}

// appendTail appends u's entry; u is greater than every id the table holds.
func (o *overlay) appendTail(u uint64, v int64) {
	c := cap(o.tail)
	o.tail = append(o.tail, entry{u, v})
	if cap(o.tail) != c {
		o.cut = 0 // a new array: the old one and its cut front are garbage
	}
}

// spillTail moves tail[:i] into m, making tail[i] the tail's first entry,
// so that a user between tail[i-1] and tail[i] can go into m. Each entry
// moves at most once per overlay, so spills cost O(1) per entry.
func (o *overlay) spillTail(i int) {
	for _, e := range o.tail[:i] {
		if e.v >= 0 {
			// A tail tombstone is of a user that no layer below holds:
			// dropping it is enough.
			o.put(e.id, e.v)
		}
	}
	o.tail = o.tail[i:]
	o.cut += i
}
