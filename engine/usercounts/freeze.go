package usercounts

import "errors"

// Freeze returns the table's counts as a table of their own that nothing
// modifies until Thaw, for a snapshot that reads them (Get, GetMany, Has,
// Range, Len) with no lock while the table takes writes. It copies no
// count: the packed part never changes, and the live overlay is frozen as
// a fold job freezes it, writes going to a fresh one over it; what the
// freeze costs is what is written meanwhile. No fold is planned until
// Thaw. Call it under the write lock with no fold job out.
func (t *Table) Freeze() (*Table, error) {
	switch {
	case t.job != nil:
		return nil, errors.New("usercounts: Freeze with a fold job out")
	case t.held:
		return nil, errors.New("usercounts: Freeze of a frozen table")
	}
	view := &Table{packed: t.packed, live: t.live, n: t.n, maxID: t.maxID, hasMax: t.hasMax, gen: t.gen, minFold: t.minFold}
	t.frozen, t.live, t.held = t.live, newOverlay(), true
	return view, nil
}

// Thaw ends a freeze: the writes made since go into the overlay Freeze
// froze, which is live again, so the cost is what was written while the
// table was frozen. The table Freeze returned must not be read again. Call
// it under the write lock; a table that is not frozen is left alone.
func (t *Table) Thaw() {
	if !t.held {
		return
	}
	t.held = false
	held, since := t.frozen, t.live
	t.frozen = nil
	if held == nil { // Compact folded it in
		return
	}
	// Replaying each user's final value through store and Delete keeps
	// the overlay's promises (its tail's above all); n was already exact.
	n, maxID, hasMax := t.n, t.maxID, t.hasMax
	t.live = held
	for _, e := range since.sorted() {
		if e.v >= 0 {
			t.store(e.id, e.v)
		} else {
			t.Delete(e.id)
		}
	}
	t.n = n
	// A tail append in the replay may set maxID below what the table has
	// seen; a larger bound is always safe.
	t.maxID, t.hasMax = max(t.maxID, maxID), t.hasMax || hasMax
}
