package follows

import "slices"

// Freeze returns the store's lists as a store of their own that nothing
// modifies until Thaw, for a snapshot that reads them (Range) with no
// lock while the store takes writes. The headers are frozen in place
// (engine/table's Freeze); the arena, which changes in place, is copied.
// Call it under the write lock.
func (s *Store) Freeze() *Store {
	return &Store{heads: s.heads.Freeze(), arena: slices.Clone(s.arena), entries: s.entries}
}

// Thaw ends a freeze. Call it under the write lock; the store Freeze
// returned must not be read again.
func (s *Store) Thaw() { s.heads.Thaw() }
