package follows

// Freezing: a snapshot of the engine reads the followee lists with no lock
// while the store takes writes. Freeze hands it a view that shares the
// forward direction's blocks and directory pages with the live store, and
// the live store copies on write until Thaw:
//
//   - a block is never changed in place while a view is out: its new
//     pairs go to a new slot (write), snapshots too (setRun does not set
//     them in place), and the old slot is released only at Thaw, since the
//     view may still read it; a slot allocated during the freeze is the
//     live store's alone and is rewritten or released as usual;
//   - a directory page is copied the first time a change touches it
//     (own), so the view keeps the entries as they were;
//   - no compaction runs: it would rewrite every entry for little gain in
//     a store whose freed slots all wait for Thaw anyway.
//
// The view copies each slot it reads into a buffer of its own before
// decoding it (pairs.parse), because decoding may read a few bytes past a
// slot's end (bitpack.Slack), where a live slot can be written meanwhile.
// Freezing costs O(pages) under the caller's lock, a page being up to 128
// blocks; the memory it costs is the blocks and pages changed while the
// view is out, not the graph. The reverse direction is not frozen: a
// snapshot holds the followee lists, and a load rebuilds the rest.

// hold is what a pairs set keeps while a view of it is out.
type hold struct {
	fresh    map[int]struct{} // slots allocated since the freeze
	released []slot           // slots the view may read, released at thaw
}

// slot is an arena slot: its word offset and class.
type slot struct {
	off   int
	class uint8
}

// Freeze returns a store that holds viewer's lists as they are now and
// that nothing modifies until Thaw: its Range and Len may run with no lock,
// on one goroutine, while this store takes writes. The returned store
// serves Range and Len only (it has no reverse direction). Call Freeze
// under the write lock; freezing a frozen store panics.
func (s *Store) Freeze() *Store {
	s.loaded()
	if s.fwd.held != nil {
		panic("follows: Freeze of a frozen store")
	}
	return &Store{fwd: s.fwd.freeze(), empties: s.empties.Freeze()}
}

// Thaw ends a freeze: the slots that changed meanwhile are released. Call
// it under the write lock; the store Freeze returned must not be read
// again. A store that is not frozen is left alone.
func (s *Store) Thaw() {
	if s.fwd.held == nil {
		return
	}
	s.fwd.thaw()
	s.empties.Thaw()
}

// freeze returns a view of p (see Freeze) and holds p's slots and pages
// for it.
func (p *pairs) freeze() pairs {
	for i := range p.pages {
		p.pages[i].shared = true
	}
	p.held = &hold{fresh: map[int]struct{}{}}
	return pairs{
		pages: append([]page(nil), p.pages...),
		arena: arena{chunks: append([][]uint64(nil), p.arena.chunks...), views: append([][]byte(nil), p.arena.views...)},
		n:     p.n,
		view:  true,
	}
}

// thaw releases what p held for its view.
func (p *pairs) thaw() {
	h := p.held
	p.held = nil
	for i := range p.pages {
		p.pages[i].shared = false
	}
	for _, sl := range h.released {
		p.arena.release(sl.off, sl.class)
	}
	p.maybeCompact()
}

// own makes page pi's entries p's alone before a change to them.
func (p *pairs) own(pi int) {
	if pg := &p.pages[pi]; pg.shared {
		es := *pg.es
		pg.es, pg.shared = &es, false
	}
}

// shared reports whether the slot d locates may be read by a view.
func (p *pairs) shared(d *dirEntry) bool {
	if p.held == nil || d.class() == 0 {
		return false
	}
	_, fresh := p.held.fresh[d.off()]
	return !fresh
}

// alloc returns the offset of a new slot of class c.
func (p *pairs) alloc(c uint8) int {
	off := p.arena.alloc(c)
	if p.held != nil {
		p.held.fresh[off] = struct{}{}
	}
	return off
}

// release frees d's slot, at once if no view may read it, else at thaw.
func (p *pairs) release(d *dirEntry) {
	c := d.class()
	if c == 0 {
		return
	}
	switch off := d.off(); {
	case p.held == nil:
		p.arena.release(off, c)
	case p.shared(d):
		p.held.released = append(p.held.released, slot{off, c})
	default:
		delete(p.held.fresh, off)
		p.arena.release(off, c)
	}
	d.loc = 0
}
