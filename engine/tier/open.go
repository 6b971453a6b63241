package tier

import (
	"math/bits"
	"slices"
)

// slotLayout says how an open table's 16-byte slot holds a record: the
// key (the id's offset in its window plus one; 0 marks an empty slot) in
// the low keyBits+1 bits, an overflow flag in the next bit, then column
// f's value in width[f] bits at bit shift[f]. A record with a value wider
// than its column's width is kept in the table's overflow map instead.
type slotLayout struct {
	cols    int
	keyBits uint // bits of the key field: the window's KeyBits + 1
	keyMask uint64
	width   [MaxCols]uint8
	shift   [MaxCols]uint8
}

// slotBits is the size of a slot.
const slotBits = 128

// newSlotLayout lays out a slot for ids whose offset in their window has
// windowKeyBits bits, the columns taking widths (which must fit in what
// the key and the flag leave).
func newSlotLayout(cols int, windowKeyBits uint, widths [MaxCols]uint8) (slotLayout, bool) {
	kb := windowKeyBits + 1
	l := slotLayout{cols: cols, keyBits: kb, keyMask: 1<<kb - 1, width: widths}
	s := int(kb) + 1
	for f := range cols {
		l.shift[f] = uint8(s)
		s += int(widths[f])
		if widths[f] > 64 {
			return l, false
		}
	}
	for f := cols; f < MaxCols; f++ {
		if widths[f] != 0 {
			return l, false
		}
	}
	return l, kb <= 62 && s <= slotBits
}

// valueBits is how many bits a slot leaves for the columns of a record
// whose window has windowKeyBits key bits.
func valueBits(windowKeyBits uint) int { return slotBits - int(windowKeyBits) - 2 }

// pack packs key and r into a slot, or reports that a value does not fit.
func (l *slotLayout) pack(key uint64, r *Row) (s oslot, ok bool) {
	s.a = key
	for f := range l.cols {
		w, sh := uint(l.width[f]), uint(l.shift[f])
		v := r[f]
		if w < 64 && v>>w != 0 {
			return oslot{}, false
		}
		if w == 0 {
			continue
		}
		if sh < 64 {
			s.a |= v << sh
			if sh+w > 64 {
				s.b |= v >> (64 - sh)
			}
		} else {
			s.b |= v << (sh - 64)
		}
	}
	return s, true
}

func (l *slotLayout) unpack(s *oslot, r *Row) {
	for f := range l.cols {
		w, sh := uint(l.width[f]), uint(l.shift[f])
		var v uint64
		if sh < 64 {
			v = s.a >> sh
			if sh+w > 64 {
				v |= s.b << (64 - sh)
			}
		} else {
			v = s.b >> (sh - 64)
		}
		if w < 64 {
			v &= 1<<w - 1
		}
		r[f] = v
	}
	for f := l.cols; f < MaxCols; f++ {
		r[f] = 0
	}
}

// openTable is a pointer-free open-addressing table (linear probing) of
// id → record for one window, 16 bytes a slot (slotLayout). The rare
// record that does not fit goes to the over map (its slot carries the
// flag and the key only): a map of pointer-free values, which the GC does
// not scan either.
type openTable struct {
	slots []oslot
	n     int
	shift uint // 64 - log2(len(slots))
	over  map[uint64]Row
}

type oslot struct{ a, b uint64 }

const minSlots = 16

func newOpenTable() *openTable {
	return &openTable{slots: make([]oslot, minSlots), shift: 64 - 4}
}

func (t *openTable) home(key uint64) int {
	return int((key * 0x9E3779B97F4A7C15) >> t.shift)
}

// find returns the slot of key (offset+1) and whether it is there.
func (t *openTable) find(key uint64, l *slotLayout) (int, bool) {
	mask := len(t.slots) - 1
	for i := t.home(key); ; i = (i + 1) & mask {
		k := t.slots[i].a & l.keyMask
		if k == key {
			return i, true
		}
		if k == 0 {
			return i, false
		}
	}
}

func (t *openTable) overflowed(s *oslot, l *slotLayout) bool { return s.a>>l.keyBits&1 != 0 }

// get reads the record of key into r.
func (t *openTable) get(key uint64, l *slotLayout, r *Row) bool {
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

func (t *openTable) has(key uint64, l *slotLayout) bool {
	_, ok := t.find(key, l)
	return ok
}

// put stores r under key and reports whether the key is new.
func (t *openTable) put(key uint64, l *slotLayout, r *Row) bool {
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
			t.over = make(map[uint64]Row)
		}
		t.over[key] = *r
		*s = oslot{a: key | 1<<l.keyBits}
	}
	if !found {
		t.n++
	}
	return !found
}

func (t *openTable) grow(l *slotLayout) {
	old := t.slots
	t.slots = make([]oslot, 2*len(old))
	t.shift--
	mask := len(t.slots) - 1
	for _, s := range old {
		k := s.a & l.keyMask
		if k == 0 {
			continue
		}
		i := t.home(k)
		for t.slots[i].a&l.keyMask != 0 {
			i = (i + 1) & mask
		}
		t.slots[i] = s
	}
}

// sorted returns the keys of the table in increasing order.
func (t *openTable) sorted(l *slotLayout) []uint64 {
	keys := make([]uint64, 0, t.n)
	for _, s := range t.slots {
		if k := s.a & l.keyMask; k != 0 {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

// sizeBytes is the table's memory: its slots, and the overflow map at
// about 96 bytes a record (key, row and the map's overhead).
func (t *openTable) sizeBytes() int {
	return len(t.slots)*16 + len(t.over)*(8+8*MaxCols+24)
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
