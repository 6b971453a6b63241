package tier

import (
	"math/bits"
	"slices"
)

// slotLayout says how a row table's 16-byte slot holds a post: the key
// (the id's offset in its window plus one; 0 marks an empty slot) in the
// low keyBits+1 bits, an overflow flag in the next bit, then column f's
// value in width[f] bits at bit shift[f]. A post with a value wider than
// its column's width is kept in the table's overflow map instead.
type slotLayout struct {
	keyBits uint // bits of the key field: the window's KeyBits + 1
	keyMask uint64
	width   [postCols]uint8
	shift   [postCols]uint8
}

// slotBits is the size of a slot.
const slotBits = 128

// newSlotLayout lays out a slot for ids whose offset in their window has
// windowKeyBits bits, the columns taking slotWidths.
func newSlotLayout(windowKeyBits uint) (slotLayout, bool) {
	kb := windowKeyBits + 1
	widths := slotWidths(valueBits(windowKeyBits))
	l := slotLayout{keyBits: kb, keyMask: 1<<kb - 1, width: widths}
	s := int(kb) + 1
	for f := range postCols {
		l.shift[f] = uint8(s)
		s += int(widths[f])
	}
	return l, kb <= 62 && s <= slotBits
}

// slotWidths gives the columns their bits of a slot, given the bits the
// key and the flag leave (77 for day windows, less for longer ones, at
// least 62): in day windows 32 bits of author, 12 of likes, 8 of
// comments, 6 of reposts, 14 of views and 5 of favorites, which all but
// a few in a thousand of the benchmark set's posts fit; longer windows
// take the bits from the author, shorter ones give them to it.
func slotWidths(bits int) [postCols]uint8 {
	author := min(64, max(0, 32+bits-77))
	return [postCols]uint8{uint8(author), 12, 8, 6, 14, 5}
}

// valueBits is how many bits a slot leaves for the columns of a post
// whose window has windowKeyBits key bits.
func valueBits(windowKeyBits uint) int { return slotBits - int(windowKeyBits) - 2 }

// pack packs key and r into a slot, or reports that a value does not fit.
func (l *slotLayout) pack(key uint64, r *postRow) (s rowSlot, ok bool) {
	s.low = key
	for f := range postCols {
		w, sh := uint(l.width[f]), uint(l.shift[f])
		v := r[f]
		if w < 64 && v>>w != 0 {
			return rowSlot{}, false
		}
		if w == 0 {
			continue
		}
		if sh < 64 {
			s.low |= v << sh
			if sh+w > 64 {
				s.high |= v >> (64 - sh)
			}
		} else {
			s.high |= v << (sh - 64)
		}
	}
	return s, true
}

func (l *slotLayout) unpack(s *rowSlot, r *postRow) {
	for f := range postCols {
		w, sh := uint(l.width[f]), uint(l.shift[f])
		var v uint64
		if sh < 64 {
			v = s.low >> sh
			if sh+w > 64 {
				v |= s.high << (64 - sh)
			}
		} else {
			v = s.high >> (sh - 64)
		}
		if w < 64 {
			v &= 1<<w - 1
		}
		r[f] = v
	}
}

// rowTable is a pointer-free open-addressing table (linear probing) of
// key → post row for one window, 16 bytes a slot (slotLayout): a post
// table's open window, and the delta over any of its windows (its rows
// override the body's). The rare post that does not fit goes to the over
// map (its slot carries the flag and the key only): a map of
// pointer-free values, which the GC does not scan either.
type rowTable struct {
	slots []rowSlot
	n     int
	shift uint // 64 - log2(len(slots))
	over  map[uint64]postRow
}

// rowSlot is a slot's 128 bits, low word first.
type rowSlot struct{ low, high uint64 }

const minSlots = 16

func newRowTable() *rowTable {
	return &rowTable{slots: make([]rowSlot, minSlots), shift: 64 - 4}
}

func (t *rowTable) kind() Kind       { return Open }
func (t *rowTable) records() int     { return t.n }
func (t *rowTable) len() int         { return t.n }
func (t *rowTable) memoryBytes() int { return t.sizeBytes() }

func (t *rowTable) home(key uint64) int {
	return int((key * 0x9E3779B97F4A7C15) >> t.shift)
}

// find returns the slot of key (offset+1) and whether it is there.
func (t *rowTable) find(key uint64, l *slotLayout) (int, bool) {
	mask := len(t.slots) - 1
	for i := t.home(key); ; i = (i + 1) & mask {
		k := t.slots[i].low & l.keyMask
		if k == key {
			return i, true
		}
		if k == 0 {
			return i, false
		}
	}
}

func (t *rowTable) overflowed(s *rowSlot, l *slotLayout) bool { return s.low>>l.keyBits&1 != 0 }

// get reads the record of key into r.
func (t *rowTable) get(key uint64, l *slotLayout, r *postRow) bool {
	i, ok := t.find(key, l)
	if !ok {
		return false
	}
	s := &t.slots[i]
	if t.overflowed(s, l) {
		*r = t.over[key]
		return true
	}
	l.unpack(s, r)
	return true
}

func (t *rowTable) has(key uint64, l *slotLayout) bool {
	_, ok := t.find(key, l)
	return ok
}

// put stores r under key and reports whether the key is new.
func (t *rowTable) put(key uint64, l *slotLayout, r *postRow) bool {
	if (t.n+1)*8 > len(t.slots)*7 {
		t.grow(l)
	}
	i, found := t.find(key, l)
	s := &t.slots[i]
	if found && t.overflowed(s, l) {
		delete(t.over, key)
	}
	if p, ok := l.pack(key, r); ok {
		*s = p
	} else {
		if t.over == nil {
			t.over = make(map[uint64]postRow)
		}
		t.over[key] = *r
		*s = rowSlot{low: key | 1<<l.keyBits}
	}
	if !found {
		t.n++
	}
	return !found
}

// remove deletes key and reports whether it was there. The entries after
// it in its run move back to fill the gap where their probe sequence
// allows (backward-shift deletion), so that lookups still stop at the
// first empty slot.
func (t *rowTable) remove(key uint64, l *slotLayout) bool {
	i, found := t.find(key, l)
	if !found {
		return false
	}
	if t.overflowed(&t.slots[i], l) {
		delete(t.over, key)
	}
	mask := len(t.slots) - 1
	for j := (i + 1) & mask; ; j = (j + 1) & mask {
		k := t.slots[j].low & l.keyMask
		if k == 0 {
			break
		}
		// The entry at j may move to i unless its home lies cyclically
		// in (i, j]: then i is before its probe sequence starts.
		h := t.home(k)
		var stays bool
		if i <= j {
			stays = i < h && h <= j
		} else {
			stays = i < h || h <= j
		}
		if !stays {
			t.slots[i] = t.slots[j]
			i = j
		}
	}
	t.slots[i] = rowSlot{}
	t.n--
	return true
}

func (t *rowTable) grow(l *slotLayout) {
	old := t.slots
	t.slots = make([]rowSlot, 2*len(old))
	t.shift--
	mask := len(t.slots) - 1
	for _, s := range old {
		k := s.low & l.keyMask
		if k == 0 {
			continue
		}
		i := t.home(k)
		for t.slots[i].low&l.keyMask != 0 {
			i = (i + 1) & mask
		}
		t.slots[i] = s
	}
}

// sorted returns the keys of the table in increasing order.
func (t *rowTable) sorted(l *slotLayout) []uint64 {
	keys := make([]uint64, 0, t.n)
	for _, s := range t.slots {
		if k := s.low & l.keyMask; k != 0 {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

// unionKeys returns the keys of tables (nil ones skipped) in increasing
// order, each once.
func unionKeys(l *slotLayout, tables ...*rowTable) []uint64 {
	var keys []uint64
	for _, t := range tables {
		if t != nil {
			keys = append(keys, t.sorted(l)...)
		}
	}
	slices.Sort(keys)
	return slices.Compact(keys)
}

// sizeBytes is the table's memory: its slots, and the overflow map at
// about 80 bytes a post (key, row and the map's overhead).
func (t *rowTable) sizeBytes() int {
	return len(t.slots)*16 + len(t.over)*(8+8*postCols+24)
}

// sizeFor returns the slots a table of n keys starts with after a load:
// the smallest power of two keeping the load at most 7/8.
func sizeFor(n int) (int, uint) {
	size := minSlots
	for n*8 > size*7 {
		size *= 2
	}
	return size, uint(64 - bits.TrailingZeros(uint(size)))
}
