package table

// Freezing: a snapshot of the engine reads a table with no lock while
// writers carry on. Freeze hands it the table's arrays as they are, which
// nothing writes again until Thaw, and the table continues as an overlay
// over them: an entry is copied into the overlay before it changes (copy
// on write, an entry at a time), and a deleted one is remembered in gone.
// Memory is therefore what changed while the snapshot ran, not a copy of
// the table, and a table that is not frozen pays one nil check a call.

// frozenBase is what a frozen table's overlay lies over.
type frozenBase[K comparable, V any] struct {
	base *Table[K, V]        // the entries at Freeze, read-only until Thaw
	gone *Table[K, struct{}] // keys of base deleted since; never in the overlay
	n    int                 // entries of the view: Len
}

// Freeze returns the table's entries as a table of their own that nothing
// modifies until Thaw: safe to read (Get, Range, Len) with no lock while
// the table takes writes. The table goes on answering as before, its
// writes going to an overlay. Call it under the write lock; freezing a
// frozen table panics.
func (t *Table[K, V]) Freeze() *Table[K, V] {
	if t.frozen != nil {
		panic("table: Freeze of a frozen table")
	}
	base := &Table[K, V]{}
	*base = *t
	t.alloc(minCap)
	t.frozen = &frozenBase[K, V]{base: base, gone: New[K, struct{}](t.hash, minCap), n: base.live}
	return base
}

// Frozen reports whether the table is frozen (between Freeze and Thaw).
func (t *Table[K, V]) Frozen() bool { return t.frozen != nil }

// Thaw folds the overlay into the entries Freeze returned, or those into
// the overlay when it is the larger, so the cost is the smaller of the two:
// usually what changed while the table was frozen. The table Freeze
// returned must not be read again. Call it under the write lock; a table
// that is not frozen is left alone.
func (t *Table[K, V]) Thaw() {
	f := t.frozen
	if f == nil {
		return
	}
	t.frozen = nil
	if t.live > f.base.live {
		// More new entries than old ones: the old ones move up.
		f.base.rangeSlots(func(k K, v V) bool {
			h := t.hash(k)
			if t.find(k, h) < 0 && f.gone.find(k, h) < 0 {
				*t.insert(k, h) = v
			}
			return true
		})
		return
	}
	base := f.base
	f.gone.rangeSlots(func(k K, _ struct{}) bool {
		base.remove(k, t.hash(k))
		return true
	})
	t.rangeSlots(func(k K, v V) bool {
		*base.insert(k, t.hash(k)) = v
		return true
	})
	*t = *base
}

// get looks k (hash h) up under the overlay: absent if deleted since the
// freeze, else as the frozen entries have it.
func (f *frozenBase[K, V]) get(k K, h uint64) (V, bool) {
	if f.gone.live == 0 || f.gone.find(k, h) < 0 {
		if i := f.base.find(k, h); i >= 0 {
			return f.base.slots[i].val, true
		}
	}
	var zero V
	return zero, false
}

// upsertFrozen is Upsert of a frozen table: k's frozen value is copied up
// first, so that the write lands in the overlay.
func (t *Table[K, V]) upsertFrozen(k K, h uint64) *V {
	if i := t.find(k, h); i >= 0 {
		return &t.slots[i].val
	}
	f := t.frozen
	if f.gone.live > 0 && f.gone.remove(k, h) {
		f.n++ // back after a delete: a new entry over the old one
		return t.insert(k, h)
	}
	if i := f.base.find(k, h); i >= 0 {
		v := f.base.slots[i].val
		p := t.insert(k, h)
		*p = v
		return p
	}
	f.n++
	return t.insert(k, h)
}

// deleteFrozen is Delete of a frozen table: an entry the frozen ones hold
// is remembered as gone, since they cannot change.
func (t *Table[K, V]) deleteFrozen(k K, h uint64) bool {
	f := t.frozen
	inOverlay := t.remove(k, h)
	if f.gone.live > 0 && f.gone.find(k, h) >= 0 {
		return false // deleted already (and so not in the overlay)
	}
	if f.base.find(k, h) >= 0 {
		f.gone.insert(k, h)
		f.n--
		return true
	}
	if inOverlay {
		f.n--
	}
	return inOverlay
}
