package postcounts

import (
	"math"
	"math/bits"

	"github.com/tally-dev/tally/engine/table"
)

// vals are the five counts of a post in engine.Counts order (likes,
// comments, reposts, views, favorites); in a delta table they are signed.
type vals [NumFields]int64

// rec is one post of a narrow table: 96 bits, three uint32s so that the
// record aligns to 4 and a group of eight packs without padding. Bits
// 0..K-1 hold the key (the id minus its window's first id, K = keyBits),
// bits K..63 views, and the third word likes (10 bits), comments (8),
// reposts (7) and favorites (7): on the datagen set views ≫ likes ≫ the
// rest, and these widths send about 0.2% of posts to the overflow table
// (BenchmarkMemory reports the figure).
type rec [3]uint32

// groupSlots is the number of slots that share one control word.
const groupSlots = 8

// group is eight slots and their control bytes, side by side: a probe
// reads the control word and, on a fingerprint match, a slot a few bytes
// away, usually in the same cache line or the next; with separate control
// and slot arrays a hit would cost two cache misses. 104 bytes, no
// pointers.
type group struct {
	// ctrl holds one byte per slot: ctrlEmpty, ctrlDeleted, or ctrlFull |
	// the 7-bit fingerprint of the key stored there. Zeroed memory is a
	// group of empty slots, so new arrays need no initialisation pass.
	ctrl  uint64
	slots [groupSlots]rec
}

const (
	ctrlEmpty   = 0x00
	ctrlDeleted = 0x01
	ctrlFull    = 0x80

	lsbs = 0x0101010101010101
	msbs = 0x8080808080808080
)

// matchByte returns a mask with the top bit set in every byte of ctrl
// equal to b, plus possibly false positives in bytes above a true match
// (the borrow of the classic has-zero-byte trick). Callers compare keys,
// so a false positive costs a compare and never a wrong answer.
func matchByte(ctrl uint64, b uint8) uint64 {
	v := ctrl ^ (lsbs * uint64(b))
	return (v - lsbs) &^ v & msbs
}

// hasEmpty reports whether ctrl has an empty slot; it is exact, since a
// borrow needs a true zero byte below it.
func hasEmpty(ctrl uint64) bool { return (ctrl-lsbs)&^ctrl&msbs != 0 }

// freeSlots marks the empty and deleted slots of ctrl, exactly: they are
// the bytes whose top bit is clear.
func freeSlots(ctrl uint64) uint64 { return ^ctrl & msbs }

func ctrlAt(ctrl uint64, i int) uint8 { return uint8(ctrl >> (8 * i)) }

func setCtrl(ctrl *uint64, i int, b uint8) {
	*ctrl = *ctrl&^(0xff<<(8*i)) | uint64(b)<<(8*i)
}

// layout says where the key and the five fields sit in a rec. It depends
// only on the window size, which fixes the key's width.
type layout struct {
	keyBits uint
	keyMask uint64
	width   [NumFields]uint   // bits of each field
	shift   [NumFields]uint   // offset within its word
	inLo    [NumFields]bool   // field lives in the 64-bit word (else the third word)
	maxU    [NumFields]uint64 // all ones in the field: the unsigned escape
}

// newLayout returns the layout for keys of keyBits bits (22 to 56).
func newLayout(keyBits uint) *layout {
	l := &layout{keyBits: keyBits, keyMask: 1<<keyBits - 1}
	hiWidths := [NumFields]uint{Likes: 10, Comments: 8, Reposts: 7, Favorites: 7}
	off := uint(0)
	for _, f := range []Field{Likes, Comments, Reposts, Favorites} {
		l.width[f], l.shift[f] = hiWidths[f], off
		off += hiWidths[f]
	}
	l.width[Views], l.shift[Views], l.inLo[Views] = 64-keyBits, keyBits, true
	for f := range l.width {
		l.maxU[f] = 1<<l.width[f] - 1
	}
	return l
}

// narrow is an open-addressing table of recs keyed by window offsets: the
// open table of a window (unsigned counts) or the delta of a sealed one
// (signed counts). Fields whose value does not fit hold an escape value
// and the true value sits in a small overflow table, exact over int64.
//
// Probing is linear over groups, starting at a group picked by the hash's
// high bits (so the group count need not be a power of two and the table
// can grow by 1.25x rather than 2x); a group's control word is matched
// eight bytes at a time. The load, tombstones included, is kept at most
// 7/8 and reset to 0.7 by each rehash: 13 bytes a slot then cost 14.9 to
// 18.6 bytes per post, where doubling at 3/4 (engine/table) would cost
// 17.3 to 34.7.
type narrow struct {
	lay    *layout
	signed bool
	groups []group
	live   int // full slots
	used   int // full slots + tombstones: what the load limit counts
	// wide holds the true values of escaped fields (other fields 0), keyed
	// like the records; nil until a first value escapes.
	wide *table.Table[uint64, vals]
}

func newNarrow(lay *layout, signed bool) *narrow {
	return &narrow{lay: lay, signed: signed, groups: make([]group, 1)}
}

func hashKey(k uint64) uint64 { return table.Mix64(k) }

// start returns the first group of a probe for hash h: the high bits of h
// scaled to the group count (Lemire's multiply-shift), leaving the low 7
// bits for the fingerprint.
func (t *narrow) start(h uint64) int {
	hi, _ := bits.Mul64(h, uint64(len(t.groups)))
	return int(hi)
}

func fingerprint(h uint64) uint8 { return ctrlFull | uint8(h&0x7f) }

func (t *narrow) key(r *rec) uint64 {
	return (uint64(r[0]) | uint64(r[1])<<32) & t.lay.keyMask
}

// find returns the record of key k.
func (t *narrow) find(k uint64) (*rec, bool) {
	h := hashKey(k)
	fp := fingerprint(h)
	g := t.start(h)
	for {
		grp := &t.groups[g]
		for m := matchByte(grp.ctrl, fp); m != 0; m &= m - 1 {
			r := &grp.slots[bits.TrailingZeros64(m)>>3]
			if t.key(r) == k {
				return r, true
			}
		}
		if hasEmpty(grp.ctrl) {
			return nil, false
		}
		if g++; g == len(t.groups) {
			g = 0
		}
	}
}

// raw returns a copy of k's record; a miss returns the zero record, which
// decodes as all zeros.
func (t *narrow) raw(k uint64) rec {
	if r, ok := t.find(k); ok {
		return *r
	}
	return rec{}
}

// get returns the counts of key k.
func (t *narrow) get(k uint64) (vals, bool) {
	r, ok := t.find(k)
	if !ok {
		return vals{}, false
	}
	return t.decode(k, r), true
}

// field returns the raw bits of field f of r.
func (t *narrow) field(r *rec, f Field) uint64 {
	l := t.lay
	if l.inLo[f] {
		return (uint64(r[0]) | uint64(r[1])<<32) >> l.shift[f]
	}
	return uint64(r[2]) >> l.shift[f] & l.maxU[f]
}

func (t *narrow) setField(r *rec, f Field, x uint64) {
	l := t.lay
	if l.inLo[f] {
		lo := (uint64(r[0])|uint64(r[1])<<32)&l.keyMask | x<<l.shift[f]
		r[0], r[1] = uint32(lo), uint32(lo>>32)
		return
	}
	r[2] = r[2]&^uint32(l.maxU[f]<<l.shift[f]) | uint32(x<<l.shift[f])
}

// escape returns the raw value of field f that means "see the overflow
// table": all ones unsigned, the most negative value signed (-1 is a
// common delta; the most negative one is not).
func (t *narrow) escape(f Field) uint64 {
	if t.signed {
		return 1 << (t.lay.width[f] - 1)
	}
	return t.lay.maxU[f]
}

// inline returns the raw bits that store v in field f, or false if v
// needs the overflow table.
func (t *narrow) inline(f Field, v int64) (uint64, bool) {
	w := t.lay.width[f]
	if t.signed {
		lim := int64(1)<<(w-1) - 1
		if v < -lim || v > lim {
			return 0, false
		}
		return uint64(v) & t.lay.maxU[f], true
	}
	if v < 0 || uint64(v) >= t.lay.maxU[f] {
		return 0, false
	}
	return uint64(v), true
}

func (t *narrow) value(f Field, x uint64) int64 {
	if t.signed {
		s := 64 - t.lay.width[f]
		return int64(x<<s) >> s
	}
	return int64(x)
}

// decode returns the counts of record r (key k). The fields are unpacked
// with constant shifts (newLayout fixes the third word's layout): a
// field-by-field loop over the layout tables took a third of a hot page.
func (t *narrow) decode(k uint64, r *rec) vals {
	var v vals
	t.decodeTo(k, r, &v)
	return v
}

// decodeTo is decode into *v, which GetMany points at the caller's
// engine.Counts: a 40-byte result copied twice cost a sixth of a page.
func (t *narrow) decodeTo(k uint64, r *rec, v *vals) {
	lo := uint64(r[0]) | uint64(r[1])<<32
	hi := uint64(r[2])
	vb := t.lay.width[Views]
	var escaped bool
	if !t.signed {
		*v = vals{int64(hi & 0x3ff), int64(hi >> 10 & 0xff), int64(hi >> 18 & 0x7f), int64(lo >> t.lay.keyBits), int64(hi >> 25)}
		escaped = v[Likes] == 0x3ff || v[Comments] == 0xff || v[Reposts] == 0x7f || v[Favorites] == 0x7f ||
			uint64(v[Views]) == t.lay.maxU[Views]
	} else {
		// Shift each field to the top of the word, then back: sign
		// extension.
		*v = vals{int64(hi<<54) >> 54, int64(hi<<46) >> 56, int64(hi<<39) >> 57, int64(lo) >> t.lay.keyBits, int64(hi<<32) >> 57}
		escaped = v[Likes] == -1<<9 || v[Comments] == -1<<7 || v[Reposts] == -1<<6 || v[Favorites] == -1<<6 ||
			v[Views] == -1<<(vb-1)
	}
	if escaped {
		w, _ := t.wide.Get(k)
		for f := range Field(NumFields) {
			if t.field(r, f) == t.escape(f) {
				v[f] = w[f]
			}
		}
	}
}

// put sets the counts of key k to v, deleting k when v is all zeros.
func (t *narrow) put(k uint64, v *vals) {
	if *v == (vals{}) {
		t.del(k)
		return
	}
	r := t.upsert(k)
	for f := range Field(NumFields) {
		t.store(k, r, f, v[f])
	}
}

// add adds d to field f of key k in an unsigned table and returns the new
// value, saturating at math.MaxInt64 and clamping at 0.
func (t *narrow) add(k uint64, f Field, d int64) int64 {
	r, ok := t.find(k)
	if !ok {
		if d <= 0 {
			return 0 // zeros are not stored
		}
		t.store(k, t.upsert(k), f, d)
		return d
	}
	cur := t.fieldValue(k, r, f)
	v := clampAdd(cur, d)
	if v == cur {
		return cur
	}
	t.store(k, r, f, v)
	if v == 0 && t.decode(k, r) == (vals{}) {
		t.del(k)
	}
	return v
}

func (t *narrow) fieldValue(k uint64, r *rec, f Field) int64 {
	x := t.field(r, f)
	if x != t.escape(f) {
		return t.value(f, x)
	}
	w, _ := t.wide.Get(k)
	return w[f]
}

// store sets field f of record r (key k) to v, moving the field into or
// out of the overflow table as v crosses the narrow range.
func (t *narrow) store(k uint64, r *rec, f Field, v int64) {
	if x, ok := t.inline(f, v); ok {
		if t.field(r, f) == t.escape(f) {
			w, _ := t.wide.Ref(k)
			w[f] = 0
			if *w == (vals{}) {
				t.wide.Delete(k)
			}
		}
		t.setField(r, f, x)
		return
	}
	if t.wide == nil {
		t.wide = table.New[uint64, vals](hashKey, 0)
	}
	// A value outside the narrow range is never 0, so an overflow entry
	// is all zeros exactly when none of its fields is escaped.
	t.wide.Upsert(k)[f] = v
	t.setField(r, f, t.escape(f))
}

// upsert returns k's record, inserting a zero record first if k is
// absent. The pointer is valid until the next upsert or del.
func (t *narrow) upsert(k uint64) *rec {
	h := hashKey(k)
	fp := fingerprint(h)
	for {
		g := t.start(h)
		ins, insSlot := -1, 0
		for {
			grp := &t.groups[g]
			for m := matchByte(grp.ctrl, fp); m != 0; m &= m - 1 {
				r := &grp.slots[bits.TrailingZeros64(m)>>3]
				if t.key(r) == k {
					return r
				}
			}
			if ins < 0 {
				if m := freeSlots(grp.ctrl); m != 0 {
					ins, insSlot = g, bits.TrailingZeros64(m)>>3
				}
			}
			if hasEmpty(grp.ctrl) {
				break
			}
			if g++; g == len(t.groups) {
				g = 0
			}
		}
		grp := &t.groups[ins]
		// Reusing a tombstone does not raise the load; filling an empty
		// slot may not take it past 7/8.
		if ctrlAt(grp.ctrl, insSlot) == ctrlEmpty {
			if t.used >= t.limit() {
				t.rehash(t.live + 1)
				continue
			}
			t.used++
		}
		setCtrl(&grp.ctrl, insSlot, fp)
		r := &grp.slots[insSlot]
		lo := k
		*r = rec{uint32(lo), uint32(lo >> 32), 0}
		t.live++
		return r
	}
}

func (t *narrow) limit() int { return len(t.groups) * groupSlots * 7 / 8 }

// del removes k and reports whether it was there.
func (t *narrow) del(k uint64) bool {
	h := hashKey(k)
	fp := fingerprint(h)
	g := t.start(h)
	for {
		grp := &t.groups[g]
		for m := matchByte(grp.ctrl, fp); m != 0; m &= m - 1 {
			i := bits.TrailingZeros64(m) >> 3
			r := &grp.slots[i]
			if t.key(r) != k {
				continue
			}
			for f := range Field(NumFields) {
				if t.field(r, f) == t.escape(f) {
					t.wide.Delete(k)
					break
				}
			}
			// A probe stops at the first group with an empty slot, so no
			// key was ever placed beyond a group that has one: the slot
			// can become empty rather than a tombstone.
			if hasEmpty(grp.ctrl) {
				setCtrl(&grp.ctrl, i, ctrlEmpty)
				t.used--
			} else {
				setCtrl(&grp.ctrl, i, ctrlDeleted)
			}
			*r = rec{}
			t.live--
			return true
		}
		if hasEmpty(grp.ctrl) {
			return false
		}
		if g++; g == len(t.groups) {
			g = 0
		}
	}
}

// rehash rebuilds the table for n live entries at a load of 0.7, dropping
// tombstones: the table grows by 1.25x when it is full of live entries,
// and shrinks when deletions left it mostly tombstones.
func (t *narrow) rehash(n int) {
	old := t.groups
	t.groups = make([]group, max(1, (n*10+55)/56))
	t.used = 0
	for gi := range old {
		og := &old[gi]
		for m := ^freeSlots(og.ctrl) & msbs; m != 0; m &= m - 1 {
			i := bits.TrailingZeros64(m) >> 3
			r := &og.slots[i]
			h := hashKey(t.key(r))
			// Keys are distinct and there are no tombstones: the first free
			// slot on the path is the place, no key compares needed.
			g := t.start(h)
			for {
				grp := &t.groups[g]
				if f := freeSlots(grp.ctrl); f != 0 {
					j := bits.TrailingZeros64(f) >> 3
					setCtrl(&grp.ctrl, j, fingerprint(h))
					grp.slots[j] = *r
					break
				}
				if g++; g == len(t.groups) {
					g = 0
				}
			}
			t.used++
		}
	}
}

// each calls fn for every entry until fn returns false. fn must not
// modify the table.
func (t *narrow) each(fn func(k uint64, v vals) bool) {
	for gi := range t.groups {
		grp := &t.groups[gi]
		for m := ^freeSlots(grp.ctrl) & msbs; m != 0; m &= m - 1 {
			r := &grp.slots[bits.TrailingZeros64(m)>>3]
			k := t.key(r)
			if !fn(k, t.decode(k, r)) {
				return
			}
		}
	}
}

func (t *narrow) len() int { return t.live }

func (t *narrow) memoryBytes() int {
	n := len(t.groups) * groupBytes
	if t.wide != nil {
		n += t.wide.MemoryBytes()
	}
	return n
}

const groupBytes = 8 + groupSlots*12

// clone returns a deep copy: two slice copies when nothing overflowed.
func (t *narrow) clone() *narrow {
	c := *t
	c.groups = append([]group(nil), t.groups...)
	if t.wide != nil {
		c.wide = table.New[uint64, vals](hashKey, t.wide.Len())
		t.wide.Range(func(k uint64, v vals) bool {
			c.wide.Put(k, v)
			return true
		})
	}
	return &c
}

// overflowed returns the number of entries with an escaped field.
func (t *narrow) overflowed() int {
	if t.wide == nil {
		return 0
	}
	return t.wide.Len()
}

// clampAdd returns cur+d within [0, math.MaxInt64], for cur >= 0: what
// countertable.Table does and what cold.Merge assumes.
func clampAdd(cur, d int64) int64 {
	switch {
	case d > 0 && cur > math.MaxInt64-d:
		return math.MaxInt64
	case cur+d < 0: // cur >= 0, so this cannot overflow
		return 0
	}
	return cur + d
}
