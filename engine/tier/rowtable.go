package tier

import (
	"math/bits"
	"slices"
)

// slotLayout says how a row table's 16-byte slot holds a post: the key
// (the id's offset in its window plus one; 0 marks an empty slot) in the
// low keyBits bits, then two flags — the fixed columns are in the
// table's overflow map, the post has counts of kinds beyond like (in the
// table's kind table) — then fixed column f's value in width[f] bits at
// bit shift[f]. A post with a value wider than its column's width is kept
// in the overflow map instead.
type slotLayout struct {
	keyBits uint // bits of the key field: the window's KeyBits + 1
	keyMask uint64
	width   [fixedCols]uint8
	shift   [fixedCols]uint8
}

// slotBits is the size of a slot.
const slotBits = 128

// newSlotLayout lays out a slot for ids whose offset in their window has
// windowKeyBits bits, the columns taking slotWidths.
func newSlotLayout(windowKeyBits uint) (slotLayout, bool) {
	kb := windowKeyBits + 1
	widths := slotWidths(valueBits(windowKeyBits))
	l := slotLayout{keyBits: kb, keyMask: 1<<kb - 1, width: widths}
	s := int(kb) + 2
	for f := range fixedCols {
		l.shift[f] = uint8(s)
		s += int(widths[f])
	}
	return l, kb <= 62 && s <= slotBits
}

// slotWidths gives the columns their bits of a slot, given the bits the
// key and the flags leave (76 for day windows, less for longer ones, at
// least 69): in day windows 31 bits of author, 12 of likes, 8 of
// comments, 6 of reposts, 14 of views and 5 of favorites, which all but
// a few in a thousand of the benchmark set's posts fit; longer windows
// take the bits from the author, shorter ones give them to it.
func slotWidths(bits int) [fixedCols]uint8 {
	author := min(64, max(0, 31+bits-76))
	return [fixedCols]uint8{uint8(author), 12, 8, 6, 14, 5}
}

// valueBits is how many bits a slot leaves for the columns of a post
// whose window has windowKeyBits key bits.
func valueBits(windowKeyBits uint) int { return slotBits - int(windowKeyBits) - 3 }

// The flags of a slot, above its key.
func (l *slotLayout) overflowFlag() uint64 { return 1 << l.keyBits }
func (l *slotLayout) kindsFlag() uint64    { return 2 << l.keyBits }

// pack packs key and r's fixed columns into a slot, or reports that a
// value does not fit.
func (l *slotLayout) pack(key uint64, r *postRow) (s rowSlot, ok bool) {
	s.low = key
	for f := range fixedCols {
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

// unpack reads the fixed columns of slot s into r.
func (l *slotLayout) unpack(s *rowSlot, r *postRow) {
	for f := range fixedCols {
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
// override the body's). The rare post whose fixed columns do not fit
// goes to the over map (its slot carries the flag and the key only): a
// map of pointer-free values, which the GC does not scan either. The
// counts of kinds beyond like, which most posts do not have, are in a
// side table (kindTable), created with the first post that has one.
type rowTable struct {
	slots []rowSlot
	n     int
	shift uint // 64 - log2(len(slots))
	over  map[uint64]fixedRow
	kinds *kindTable
}

// fixedRow is a row's fixed columns, an overflowed post's value.
type fixedRow [fixedCols]uint64

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

// get reads the record of key into r.
func (t *rowTable) get(key uint64, l *slotLayout, r *postRow) bool {
	i, ok := t.find(key, l)
	if !ok {
		return false
	}
	s := &t.slots[i]
	if s.low&l.overflowFlag() != 0 {
		f := t.over[key]
		copy(r[:fixedCols], f[:])
	} else {
		l.unpack(s, r)
	}
	k := (*kindRow)(r[fixedCols:])
	if s.low&l.kindsFlag() != 0 {
		t.kinds.get(key, k)
	} else {
		*k = kindRow{}
	}
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
	if found && s.low&l.overflowFlag() != 0 {
		delete(t.over, key)
	}
	hadKinds := found && s.low&l.kindsFlag() != 0
	p, ok := l.pack(key, r)
	if !ok {
		if t.over == nil {
			t.over = make(map[uint64]fixedRow)
		}
		t.over[key] = fixedRow(r[:fixedCols])
		p = rowSlot{low: key | l.overflowFlag()}
	}
	if k := (*kindRow)(r[fixedCols:]); *k != (kindRow{}) {
		if t.kinds == nil {
			t.kinds = newKindTable()
		}
		t.kinds.put(key, k)
		p.low |= l.kindsFlag()
	} else if hadKinds {
		t.kinds.remove(key)
	}
	*s = p
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
	if s := &t.slots[i]; s.low&l.overflowFlag() != 0 {
		delete(t.over, key)
	}
	if s := &t.slots[i]; s.low&l.kindsFlag() != 0 {
		t.kinds.remove(key)
	}
	mask := len(t.slots) - 1
	for j := (i + 1) & mask; ; j = (j + 1) & mask {
		k := t.slots[j].low & l.keyMask
		if k == 0 {
			break
		}
		h := t.home(k)
		if !homeBetween(i, h, j) {
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

// sizeBytes is the table's memory: its slots, the overflow map at about
// 80 bytes a post (key, row and the map's overhead) and the kind table.
func (t *rowTable) sizeBytes() int {
	return len(t.slots)*16 + len(t.over)*(8+8*fixedCols+24) + t.kinds.sizeBytes()
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

// kindRow is a row's counts of the kinds beyond like, kind k at k-2.
type kindRow [kindCols]uint64

// kindTable holds, by a row table's key, the counts of kinds beyond like
// of the posts that have one: such a post costs one 16-byte slot more,
// every other post nothing. A slot is the key (0: empty) and a word: the
// kinds the post has (bit k-2 for kind k, kindCols bits), then their
// counts in kind order, each in the same share of the word's other bits
// (kindShare). A post with a count wider than its share has the word's
// overflow bit instead (the top one, above every share) and its counts
// in the over map, of pointer-free values. Linear probing, backward-shift
// deletion: a post whose last such reaction goes leaves no tombstone.
type kindTable struct {
	slots []kindSlot
	live  int
	shift uint // 64 - log2(len(slots))
	over  map[uint64]kindRow
}

type kindSlot struct{ key, word uint64 }

const (
	kindsOverflow = uint64(1) << 63
	kindBitsFree  = 63 - kindCols // the bits of a word the counts share
)

// kindShare is the bits each of n counts gets in a word.
func kindShare(n int) uint { return uint(kindBitsFree / n) }

func newKindTable() *kindTable {
	return &kindTable{slots: make([]kindSlot, minSlots), shift: 64 - 4}
}

func (t *kindTable) home(key uint64) int {
	return int((key * 0x9E3779B97F4A7C15) >> t.shift)
}

func (t *kindTable) find(key uint64) (int, bool) {
	mask := len(t.slots) - 1
	for i := t.home(key); ; i = (i + 1) & mask {
		switch t.slots[i].key {
		case key:
			return i, true
		case 0:
			return i, false
		}
	}
}

// get reads the counts of key into k; a key the table does not have
// reads as zeros.
func (t *kindTable) get(key uint64, k *kindRow) {
	*k = kindRow{}
	if t == nil {
		return
	}
	i, ok := t.find(key)
	if !ok {
		return
	}
	w := t.slots[i].word
	if w&kindsOverflow != 0 {
		*k = t.over[key]
		return
	}
	mask := w & (1<<kindCols - 1)
	share := kindShare(bits.OnesCount64(mask))
	w >>= kindCols
	for mask != 0 {
		j := bits.TrailingZeros64(mask)
		k[j] = w & (1<<share - 1)
		w >>= share
		mask &= mask - 1
	}
}

// put stores k, which has a count that is not zero, under key.
func (t *kindTable) put(key uint64, k *kindRow) {
	if (t.live+1)*8 > len(t.slots)*7 {
		t.grow()
	}
	i, found := t.find(key)
	if found && t.slots[i].word&kindsOverflow != 0 {
		delete(t.over, key)
	}
	var mask uint64
	n := 0
	for j, v := range k {
		if v != 0 {
			mask |= 1 << j
			n++
		}
	}
	share := kindShare(n)
	w, at := mask, uint(kindCols)
	for _, v := range k {
		if v == 0 {
			continue
		}
		if v>>share != 0 {
			if t.over == nil {
				t.over = make(map[uint64]kindRow)
			}
			t.over[key] = *k
			w = kindsOverflow
			break
		}
		w |= v << at
		at += share
	}
	t.slots[i] = kindSlot{key: key, word: w}
	if !found {
		t.live++
	}
}

// remove deletes key's counts; the slots after it in its run move back
// when their probe sequence allows (as in pairTable.remove).
func (t *kindTable) remove(key uint64) {
	i, ok := t.find(key)
	if !ok {
		return
	}
	if t.slots[i].word&kindsOverflow != 0 {
		delete(t.over, key)
	}
	mask := len(t.slots) - 1
	for j := (i + 1) & mask; t.slots[j].key != 0; j = (j + 1) & mask {
		h := t.home(t.slots[j].key)
		// The slot at j may move to i unless its home lies cyclically in
		// (i, j].
		if i <= j && (h <= i || h > j) || i > j && h <= i && h > j {
			t.slots[i] = t.slots[j]
			i = j
		}
	}
	t.slots[i] = kindSlot{}
	t.live--
}

func (t *kindTable) grow() {
	old := t.slots
	t.slots = make([]kindSlot, 2*len(old))
	t.shift--
	mask := len(t.slots) - 1
	for _, s := range old {
		if s.key == 0 {
			continue
		}
		i := t.home(s.key)
		for t.slots[i].key != 0 {
			i = (i + 1) & mask
		}
		t.slots[i] = s
	}
}

func (t *kindTable) sizeBytes() int {
	if t == nil {
		return 0
	}
	return len(t.slots)*16 + len(t.over)*(8+8*kindCols+24)
}

// homeBetween reports whether home h lies cyclically in (i, j] of a
// table's slots: an entry at j whose home is there may not move back to i
// when i's entry is removed, since i is before its probe sequence starts.
func homeBetween(i, h, j int) bool {
	if i <= j {
		return i < h && h <= j
	}
	return i < h || h <= j
}
