// Package table owns Tally's packed hash table: open addressing with double
// hashing (seed 003) over flat slices, so that a table whose keys and values
// hold no pointers is invisible to the garbage collector however many
// millions of entries it keeps.
//
// It promises: Get, Put, Ref, Upsert and Delete are allocation-free except
// when Put/Upsert must grow the table; Delete leaves a tombstone whose slot
// the next insert on that probe path reuses; tombstones count towards the
// load factor and are dropped by the next rehash, which happens in place
// (no allocation) when tombstones rather than live entries fill the table.
// Freeze makes the entries so far read-only for a snapshot that reads them
// with no lock, writes going to an overlay until Thaw (freeze.go). A Table
// is not safe for concurrent use: callers lock.
package table

import "unsafe"

// Control bytes, one per slot, kept apart from the slots so that any K
// works (key 0 included) and so that a probe over foreign slots usually
// touches only this dense array: a full slot stores 7 bits of the key's
// hash, so a key compare (and the slot's cache line) is needed only on a
// 1-in-128 false match.
const (
	ctrlEmpty   = 0
	ctrlDeleted = 1
	// ctrlMoving marks a live entry not yet re-placed during an in-place
	// rehash. It never survives a rehash.
	ctrlMoving = 2
	ctrlFull   = 0x80 // | 7-bit fingerprint
)

// minCap keeps the arithmetic simple: with at least 8 slots and a load
// limit of 3/4 there are always empty slots, which is what ends every
// probe loop.
const minCap = 8

// slot keeps a key and its value side by side (array of structs) rather
// than in parallel key and value slices: a hit then costs one cache line
// beyond the control byte instead of two, and feed pages are made of hits.
// The price is padding when V's size is not a
// multiple of K's alignment; callers pick K and V to avoid it (see
// engine/embedded's userKey, which splits its uint64 key into two uint32s).
type slot[K comparable, V any] struct {
	key K
	val V
}

// Table maps K to V. The zero Table is not usable; call New.
type Table[K comparable, V any] struct {
	hash  func(K) uint64
	ctrl  []uint8
	slots []slot[K, V]
	mask  uint64
	live  int // full slots
	used  int // full slots + tombstones: what the load limit counts
	limit int // used may not exceed this: 3/4 of the capacity
	// frozen, set between Freeze and Thaw, is the table Freeze made
	// read-only; the slots above are then an overlay over it (freeze.go).
	frozen *frozenBase[K, V]
}

// New returns a table sized so that capacityHint entries fit without
// growing. hash must spread its input over all 64 bits (see Mix64): the
// low bits choose the first slot, the high 32 bits the probe stride and
// the top 7 bits the control-byte fingerprint.
func New[K comparable, V any](hash func(K) uint64, capacityHint int) *Table[K, V] {
	if hash == nil {
		panic("table.New: nil hash func")
	}
	t := &Table[K, V]{hash: hash}
	t.alloc(capFor(capacityHint))
	return t
}

// capFor returns the power-of-two capacity that holds n entries under the
// 3/4 load limit.
func capFor(n int) int {
	c := minCap
	for c-c/4 < n {
		c *= 2
	}
	return c
}

func (t *Table[K, V]) alloc(c int) {
	t.ctrl = make([]uint8, c)
	t.slots = make([]slot[K, V], c)
	t.mask = uint64(c - 1)
	t.limit = c - c/4
	t.live, t.used = 0, 0
}

// fingerprint is the control byte of a full slot whose key hashes to h.
func fingerprint(h uint64) uint8 { return ctrlFull | uint8(h>>57) }

// probeStart returns the first slot and the stride for h. The stride is
// odd, hence coprime with the power-of-two capacity, so the probe sequence
// visits every slot before repeating; it comes from bits the first slot
// does not use, so keys that collide on their first slot usually part ways
// on the next probe (the point of double hashing over linear probing).
func (t *Table[K, V]) probeStart(h uint64) (i, step uint64) {
	return h & t.mask, (h>>32 | 1) & t.mask
}

// find returns the slot holding k, or -1.
func (t *Table[K, V]) find(k K, h uint64) int {
	fp := fingerprint(h)
	i, step := t.probeStart(h)
	for {
		c := t.ctrl[i]
		if c == fp && t.slots[i].key == k {
			return int(i)
		}
		if c == ctrlEmpty {
			return -1
		}
		i = (i + step) & t.mask
	}
}

// Get returns the value stored for k.
func (t *Table[K, V]) Get(k K) (V, bool) {
	h := t.hash(k)
	if i := t.find(k, h); i >= 0 {
		return t.slots[i].val, true
	}
	if t.frozen != nil {
		return t.frozen.get(k, h)
	}
	var zero V
	return zero, false
}

// Ref returns a pointer to k's value for in-place update. It stays valid
// until the next Put, Upsert, Delete or Reset, and while the table is
// frozen until the next Ref too (which copies the entry it returns into
// the overlay).
func (t *Table[K, V]) Ref(k K) (*V, bool) {
	h := t.hash(k)
	if i := t.find(k, h); i >= 0 {
		return &t.slots[i].val, true
	}
	if t.frozen != nil {
		if v, ok := t.frozen.get(k, h); ok {
			p := t.insert(k, h)
			*p = v
			return p, true
		}
	}
	return nil, false
}

// Put inserts k with v, or overwrites k's value.
func (t *Table[K, V]) Put(k K, v V) {
	*t.Upsert(k) = v
}

// Upsert returns a pointer to k's value, inserting k with the zero V first
// if it is absent (growing or rehashing the table if it must). The pointer
// stays valid until the next Put, Upsert, Delete or Reset.
func (t *Table[K, V]) Upsert(k K) *V {
	h := t.hash(k)
	if t.frozen != nil {
		return t.upsertFrozen(k, h)
	}
	return t.insert(k, h)
}

// insert is Upsert of the slots themselves: the whole table, or the
// overlay of a frozen one.
func (t *Table[K, V]) insert(k K, h uint64) *V {
	fp := fingerprint(h)
	for {
		i, step := t.probeStart(h)
		tomb := -1
		for {
			c := t.ctrl[i]
			if c == fp && t.slots[i].key == k {
				return &t.slots[i].val
			}
			if c == ctrlEmpty {
				break
			}
			if c == ctrlDeleted && tomb < 0 {
				tomb = int(i)
			}
			i = (i + step) & t.mask
		}
		// k is absent. Reusing a tombstone on its path does not raise the
		// load, so it never needs a rehash.
		if tomb >= 0 {
			t.ctrl[tomb] = fp
			t.slots[tomb] = slot[K, V]{key: k}
			t.live++
			return &t.slots[tomb].val
		}
		if t.used < t.limit {
			t.ctrl[i] = fp
			t.slots[i] = slot[K, V]{key: k}
			t.live++
			t.used++
			return &t.slots[i].val
		}
		t.rehash()
	}
}

// Delete removes k, leaving a tombstone so that probe paths through its
// slot stay intact. It reports whether k was present.
func (t *Table[K, V]) Delete(k K) bool {
	h := t.hash(k)
	if t.frozen != nil {
		return t.deleteFrozen(k, h)
	}
	return t.remove(k, h)
}

// remove is Delete of the slots themselves.
func (t *Table[K, V]) remove(k K, h uint64) bool {
	i := t.find(k, h)
	if i < 0 {
		return false
	}
	t.ctrl[i] = ctrlDeleted
	// Zeroing lets go of anything K or V point to.
	t.slots[i] = slot[K, V]{}
	t.live--
	return true
}

// Len returns the number of entries.
func (t *Table[K, V]) Len() int {
	if t.frozen != nil {
		return t.frozen.n
	}
	return t.live
}

// Range calls fn for every entry in unspecified order until fn returns
// false. fn must not modify the table.
func (t *Table[K, V]) Range(fn func(k K, v V) bool) {
	if !t.rangeSlots(fn) || t.frozen == nil {
		return
	}
	f := t.frozen
	f.base.rangeSlots(func(k K, v V) bool {
		h := t.hash(k)
		if t.find(k, h) >= 0 || f.gone.find(k, h) >= 0 {
			return true // overlaid
		}
		return fn(k, v)
	})
}

// rangeSlots is Range over the slots themselves; it reports whether fn
// asked for more.
func (t *Table[K, V]) rangeSlots(fn func(k K, v V) bool) bool {
	for i, c := range t.ctrl {
		if c >= ctrlFull {
			s := &t.slots[i]
			if !fn(s.key, s.val) {
				return false
			}
		}
	}
	return true
}

// MemoryBytes returns the size of the table's backing arrays (a frozen
// table's and its overlay's).
func (t *Table[K, V]) MemoryBytes() int {
	n := len(t.ctrl) + len(t.slots)*int(unsafe.Sizeof(slot[K, V]{}))
	if f := t.frozen; f != nil {
		n += f.base.MemoryBytes() + f.gone.MemoryBytes()
	}
	return n
}

// Reset removes every entry and keeps the backing arrays for reuse. A
// frozen table lets go of its frozen entries (which stay as they are for
// whoever reads them) and is no longer frozen.
func (t *Table[K, V]) Reset() {
	clear(t.ctrl)
	clear(t.slots)
	t.live, t.used = 0, 0
	t.frozen = nil
}

// rehash makes room for one more insert into an empty slot. When at least
// a quarter of the slots are tombstones, the live entries fill at most half
// the table, so rehashing at the same size restores at least a quarter of
// the slots at no allocation; otherwise the table doubles. Either way the
// next rehash is at least capacity/4 inserts away, which keeps inserts
// amortised O(1) under any mix of inserts and deletes.
func (t *Table[K, V]) rehash() {
	if t.used-t.live >= len(t.ctrl)/4 {
		t.rehashInPlace()
		return
	}
	t.grow(2 * len(t.ctrl))
}

func (t *Table[K, V]) grow(c int) {
	oldCtrl, oldSlots, live := t.ctrl, t.slots, t.live
	t.alloc(c)
	for j, oc := range oldCtrl {
		if oc < ctrlFull {
			continue
		}
		// Keys are distinct and the new table has no tombstones, so the
		// first empty slot on the path is the place: no key compares.
		s := &oldSlots[j]
		h := t.hash(s.key)
		i, step := t.probeStart(h)
		for t.ctrl[i] != ctrlEmpty {
			i = (i + step) & t.mask
		}
		t.ctrl[i] = fingerprint(h)
		t.slots[i] = *s
	}
	t.live, t.used = live, live
}

// rehashInPlace drops every tombstone without allocating. Live entries are
// first marked as moving; then each one is placed at the first slot of its
// probe sequence that is not yet final. Every slot before that point is
// final and stays full for the rest of the pass, so lookups will find the
// entry there. If the target holds another moving entry the two swap and
// the displaced one is placed next, so each step finalises one entry.
func (t *Table[K, V]) rehashInPlace() {
	ctrl, slots := t.ctrl, t.slots
	for i, c := range ctrl {
		switch {
		case c == ctrlDeleted:
			ctrl[i] = ctrlEmpty
		case c >= ctrlFull:
			ctrl[i] = ctrlMoving
		}
	}
	for j := range ctrl {
		for ctrl[j] == ctrlMoving {
			h := t.hash(slots[j].key)
			fp := fingerprint(h)
			i, step := t.probeStart(h)
			// j itself is not final, so this stops at j at the latest.
			for ctrl[i] >= ctrlFull {
				i = (i + step) & t.mask
			}
			switch {
			case int(i) == j:
				ctrl[j] = fp
			case ctrl[i] == ctrlEmpty:
				slots[i] = slots[j]
				ctrl[i] = fp
				slots[j] = slot[K, V]{}
				ctrl[j] = ctrlEmpty
			default: // ctrlMoving: swap, then place the entry now at j
				slots[i], slots[j] = slots[j], slots[i]
				ctrl[i] = fp
			}
		}
	}
	t.used = t.live
}

// Mix64 is the splitmix64 finaliser: a bijection on uint64 in which every
// input bit affects every output bit. Use it to hash integer keys, such
// as snowflake ids whose low bits are a barely-changing sequence.
func Mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// HashPair hashes an ordered pair, e.g. (user, post). For a fixed a it is a
// bijection of b and vice versa, so distinct pairs sharing one element
// never collide.
func HashPair(a, b uint64) uint64 {
	return Mix64(Mix64(a^0x9e3779b97f4a7c15) ^ b)
}
