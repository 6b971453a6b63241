package registry

import "github.com/tally-dev/tally/engine/table"

// slot is one post of an open table. key is the id minus its window's
// first id, plus one, so that zeroed memory is a table of empty slots and a
// new array needs no initialisation pass.
type slot struct {
	key, author uint64
}

// openTable is the write side of a window: linear probing over a flat
// slice of 16-byte slots, no pointers, no deletes (a post is never
// unregistered), so no tombstones. It is where posts land while their
// window is recent and where late registrations of a sealed window wait
// for the next compaction. Open windows hold the last OpenAge of posts
// only, a small share of the registry, so the slot is kept simple (two
// words, any author id) rather than narrow.
type openTable struct {
	slots []slot // power-of-two length, or nil while empty
	live  int
}

const minSlots = 16

func (t *openTable) start(k uint64) int {
	return int(table.Mix64(k) & uint64(len(t.slots)-1))
}

// get returns the author of key k (id - window start).
func (t *openTable) get(k uint64) (uint64, bool) {
	if t.live == 0 {
		return 0, false
	}
	k++
	mask := len(t.slots) - 1
	for i := t.start(k - 1); ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.key == k {
			return s.author, true
		}
		if s.key == 0 {
			return 0, false
		}
	}
}

// put sets k's author and reports whether k is new to the table.
func (t *openTable) put(k, author uint64) bool {
	if (t.live+1)*8 > len(t.slots)*7 {
		t.grow()
	}
	mask := len(t.slots) - 1
	for i := t.start(k); ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.key == k+1 {
			s.author = author
			return false
		}
		if s.key == 0 {
			*s = slot{k + 1, author}
			t.live++
			return true
		}
	}
}

// grow doubles the table; linear probing with a 7/8 load limit keeps
// probes short with Mix64 spreading the keys.
func (t *openTable) grow() {
	old := t.slots
	t.slots = make([]slot, max(minSlots, 2*len(old)))
	t.live = 0
	for _, s := range old {
		if s.key != 0 {
			t.put(s.key-1, s.author)
		}
	}
}

func (t *openTable) len() int { return t.live }

func (t *openTable) memoryBytes() int { return len(t.slots) * 16 }

// sorted returns the table's entries as (key, author) pairs in key order.
func (t *openTable) sorted() []slot {
	out := make([]slot, 0, t.live)
	for _, s := range t.slots {
		if s.key != 0 {
			out = append(out, slot{s.key - 1, s.author})
		}
	}
	sortSlots(out)
	return out
}
