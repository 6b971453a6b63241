package tier

import (
	"math/bits"
	"slices"
)

// slotLayout says how a row packs into an open table's 128 value bits:
// column f takes width[f] bits at bit shift[f]. A row with a value wider
// than its column's width goes to the table's overflow map instead.
type slotLayout struct {
	cols  int
	width [MaxCols]uint8
	shift [MaxCols]uint8
}

func newSlotLayout(cols int, widths [MaxCols]uint8) (slotLayout, bool) {
	l := slotLayout{cols: cols, width: widths}
	s := 0
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
	return l, s <= 128
}

// pack packs r into two words, or reports that a value does not fit.
func (l *slotLayout) pack(r *Row) (a, b uint64, ok bool) {
	for f := range l.cols {
		w, s := uint(l.width[f]), uint(l.shift[f])
		v := r[f]
		if w < 64 && v>>w != 0 {
			return 0, 0, false
		}
		if s < 64 {
			a |= v << s
			if s+w > 64 {
				b |= v >> (64 - s)
			}
		} else {
			b |= v << (s - 64)
		}
	}
	return a, b, true
}

func (l *slotLayout) unpack(a, b uint64, r *Row) {
	for f := range l.cols {
		w, s := uint(l.width[f]), uint(l.shift[f])
		var v uint64
		if s < 64 {
			v = a >> s
			if s+w > 64 {
				v |= b << (64 - s)
			}
		} else {
			v = b >> (s - 64)
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
// id → row for one window: the id is kept as its offset from the window's
// first id plus one (0 marks an empty slot), the row packed into 128 bits
// by the codec's slot layout. The rare row that does not fit goes to the
// over map (its slot's key carries overFlag): a map of pointer-free
// values, which the GC does not scan either.
type openTable struct {
	slots []oslot
	n     int
	shift uint // 64 - log2(len(slots))
	over  map[uint64]Row
}

type oslot struct{ key, a, b uint64 }

const overFlag = 1 << 63

const minSlots = 16

func newOpenTable() *openTable {
	return &openTable{slots: make([]oslot, minSlots), shift: 64 - 4}
}

func (t *openTable) home(key uint64) int {
	return int((key * 0x9E3779B97F4A7C15) >> t.shift)
}

// find returns the slot of key (offset+1) and whether it is there.
func (t *openTable) find(key uint64) (int, bool) {
	mask := len(t.slots) - 1
	for i := t.home(key); ; i = (i + 1) & mask {
		k := t.slots[i].key &^ overFlag
		if k == key {
			return i, true
		}
		if k == 0 {
			return i, false
		}
	}
}

// get reads the row of key into r.
func (t *openTable) get(key uint64, l *slotLayout, r *Row) bool {
	i, ok := t.find(key)
	if !ok {
		return false
	}
	s := &t.slots[i]
	if s.key&overFlag != 0 {
		*r = t.over[key]
		return true
	}
	l.unpack(s.a, s.b, r)
	return true
}

func (t *openTable) has(key uint64) bool {
	_, ok := t.find(key)
	return ok
}

// put stores r under key and reports whether the key is new.
func (t *openTable) put(key uint64, l *slotLayout, r *Row) bool {
	if (t.n+1)*8 > len(t.slots)*7 {
		t.grow()
	}
	i, found := t.find(key)
	s := &t.slots[i]
	if s.key&overFlag != 0 {
		delete(t.over, key)
	}
	a, b, ok := l.pack(r)
	if ok {
		*s = oslot{key, a, b}
	} else {
		if t.over == nil {
			t.over = make(map[uint64]Row)
		}
		t.over[key] = *r
		*s = oslot{key: key | overFlag}
	}
	if !found {
		t.n++
	}
	return !found
}

func (t *openTable) grow() {
	old := t.slots
	t.slots = make([]oslot, 2*len(old))
	t.shift--
	mask := len(t.slots) - 1
	for _, s := range old {
		if s.key == 0 {
			continue
		}
		i := t.home(s.key &^ overFlag)
		for t.slots[i].key != 0 {
			i = (i + 1) & mask
		}
		t.slots[i] = s
	}
}

// sorted returns the keys of the table in increasing order.
func (t *openTable) sorted() []uint64 {
	keys := make([]uint64, 0, t.n)
	for _, s := range t.slots {
		if s.key != 0 {
			keys = append(keys, s.key&^overFlag)
		}
	}
	slices.Sort(keys)
	return keys
}

// sizeBytes is the table's memory: its slots, and the overflow map at
// about 80 bytes a row (key, row and the map's overhead).
func (t *openTable) sizeBytes() int {
	return len(t.slots)*24 + len(t.over)*(8+8*MaxCols+8)
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
