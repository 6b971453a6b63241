// Package follows owns the embedded engine's follow lists: for each viewer,
// whom they follow and, beside each followee, the snapshot of that user's
// post count taken when the viewer last caught up with their feed (feed
// unread = Σ max(0, posts(f) − snap(f)), see engine.FeedUnread).
//
// The bulk data holds no Go pointers, so the garbage collector has nothing
// to scan however many millions of entries are resident: one
// engine/table.Table maps each viewer to a 16-byte header, and the lists
// live in one []uint64 arena cut into blocks. A block of capacity c holds
// the c targets and then the c snapshots (structure of arrays), so that a
// membership scan reads 8 bytes per entry, not 16. Capacities come in
// classes of four per doubling (1..8, 10, 12, 14, 16, 20, ...), which
// wastes at most 25% (about 10% on average) where Go's append doubling
// wastes up to half; a list moves to the next class when full and to a
// smaller one when it falls under half of its capacity. Freed blocks go on
// per-class free lists threaded through the arena itself; when free blocks
// make up more than a quarter of the arena it is compacted.
//
// Each list is a strictly increasing (sorted) run of targets followed by
// an unsorted tail of at most tailMax targets in the order they were
// followed. The sorted run is always the longest increasing prefix of the
// list, so the layout is a function of the list's sequence alone: Load of
// what Range yielded rebuilds exactly the same lists, which the engine's
// replay-versus-snapshot comparisons rely on.
//
// It promises:
//   - Contains is a binary search plus a scan of at most tailMax targets.
//   - Follow appends in O(1) amortised (plus Contains); every tailMax
//     follows the tail is merged into the sorted run in O(list length),
//     which is a memmove of a few KiB for lists of thousands.
//   - Unfollow is O(list length) at most: a memmove closing the gap.
//   - List, Contains, Following, Has, SetSnaps, Follow and Unfollow
//     do not allocate, except to grow the arena or the table or to compact
//     the arena (Compact's cost is O(entries), rarely: see maybeCompact).
//   - A viewer who ever had a list keeps it (Has) after unfollowing
//     everyone; the emptied list holds no block.
//   - Range visits viewers in increasing id order, each list in its stored
//     order: the same state always yields the same sequence.
//
// A Store is not safe for concurrent use: callers lock. Slices returned by
// List and passed to Range alias the arena and are valid only until the
// next mutation.
package follows

import (
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"unsafe"

	"github.com/tally-dev/tally/engine/table"
)

// tailMax bounds a list's unsorted tail. It trades Contains (which scans
// the tail) against Follow (which merges the tail into the sorted run, an
// O(n) move, once per tailMax follows): at 64 a scan is a handful of cache
// lines, and a 5,000-entry list moves ~1.2 KiB per follow amortised.
// Changing it changes no stored format: Load re-derives the layout.
const tailMax = 64

// header locates one viewer's list. blk packs the capacity class (top 8
// bits; 0 = no block) and the block's word offset in the arena.
type header struct {
	blk    uint64
	n      uint32 // entries
	sorted uint32 // length of the sorted prefix
}

const (
	classShift = 56
	offMask    = 1<<classShift - 1
	// nclass covers capacities up to past math.MaxUint32 (n is a uint32).
	nclass = 128
)

// minGarbage keeps small stores from compacting over a few freed blocks:
// 64 Ki words, 512 KiB. A variable so that tests can make compaction
// frequent.
var minGarbage = 64 << 10

func (h *header) class() uint8 { return uint8(h.blk >> classShift) }
func (h *header) off() int     { return int(h.blk & offMask) }

// classCap returns the capacity, in entries, of class c.
func classCap(c uint8) int {
	if c <= 8 {
		return int(c)
	}
	k := int(c) - 9
	base := 8 << (k / 4)
	return base + (k%4+1)*(base/4)
}

// classFor returns the smallest class holding n entries.
func classFor(n int) uint8 {
	if n <= 8 {
		return uint8(n)
	}
	e := bits.Len(uint(n-1)) - 4 // n in (8<<e, 16<<e]
	base := 8 << e
	q := base / 4
	return uint8(9 + 4*e + (n-base+q-1)/q - 1)
}

// Store holds every viewer's follow list. Make one with New.
type Store struct {
	heads *table.Table[uint64, header]
	arena []uint64
	// free[c] is 1 + the offset of the first free block of class c, 0 if
	// none; a free block's first word links to the next the same way.
	free    [nclass]uint64
	garbage int // words in free blocks
	entries int
	// scratch holds a tail while it is merged into the sorted run.
	scratch [2 * (tailMax + 1)]uint64
}

// New returns an empty store sized for about hint viewers.
func New(hint int) *Store {
	return &Store{heads: table.New[uint64, header](table.Mix64, hint)}
}

// block returns h's targets and snapshots, both of the block's full
// capacity.
func (s *Store) block(h *header) (ts []uint64, ss []int64) {
	c := classCap(h.class())
	if c == 0 {
		return nil, nil
	}
	off := h.off()
	ts = s.arena[off : off+c : off+c]
	w := s.arena[off+c : off+2*c : off+2*c]
	return ts, unsafe.Slice((*int64)(unsafe.Pointer(unsafe.SliceData(w))), c)
}

// index returns the position of target in h's list, or -1.
func (s *Store) index(h *header, target uint64) int {
	if h.n == 0 {
		return -1
	}
	ts, _ := s.block(h)
	if i, ok := slices.BinarySearch(ts[:h.sorted], target); ok {
		return i
	}
	for i := int(h.sorted); i < int(h.n); i++ {
		if ts[i] == target {
			return i
		}
	}
	return -1
}

// Follow adds target to viewer's list with snapshot snap. It reports false,
// changing nothing, if viewer already follows target.
func (s *Store) Follow(viewer, target uint64, snap int64) bool {
	h := s.heads.Upsert(viewer)
	if s.index(h, target) >= 0 {
		return false
	}
	s.push(h, target, snap)
	s.maybeCompact()
	return true
}

// push appends (target, snap) to h's list, which must not hold target.
func (s *Store) push(h *header, target uint64, snap int64) {
	if int(h.n) == classCap(h.class()) {
		s.move(h, h.class()+1)
	}
	ts, ss := s.block(h)
	ts[h.n], ss[h.n] = target, snap
	h.n++
	s.entries++
	s.settle(h)
}

// settle restores the layout invariant after a change: the sorted run is
// the longest increasing prefix and the tail holds at most tailMax.
func (s *Store) settle(h *header) {
	ts, _ := s.block(h)
	n, k := int(h.n), int(h.sorted)
	if k == 0 && n > 0 {
		k = 1
	}
	for k < n && ts[k] > ts[k-1] {
		k++
	}
	h.sorted = uint32(k)
	if n-k > tailMax {
		s.merge(h)
	}
}

// merge sorts the tail and merges it into the sorted run. The tail is at
// most tailMax+1 long, so an insertion sort suffices; the merge runs from
// the back so that only the tail needs the scratch copy.
func (s *Store) merge(h *header) {
	ts, ss := s.block(h)
	k, n := int(h.sorted), int(h.n)
	tt, st := ts[k:n], ss[k:n]
	for i := 1; i < len(tt); i++ {
		t, v := tt[i], st[i]
		j := i
		for ; j > 0 && tt[j-1] > t; j-- {
			tt[j], st[j] = tt[j-1], st[j-1]
		}
		tt[j], st[j] = t, v
	}
	m := len(tt)
	bt, bs := s.scratch[:m], s.scratch[tailMax+1:tailMax+1+m]
	copy(bt, tt)
	for i, v := range st {
		bs[i] = uint64(v)
	}
	i, j := k-1, m-1
	for w := n - 1; j >= 0; w-- {
		if i >= 0 && ts[i] > bt[j] {
			ts[w], ss[w] = ts[i], ss[i]
			i--
		} else {
			ts[w], ss[w] = bt[j], int64(bs[j])
			j--
		}
	}
	h.sorted = h.n
}

// move copies h's list into a new block of class c and frees the old one.
func (s *Store) move(h *header, c uint8) {
	var nb uint64
	if c > 0 {
		off := s.alloc(c)
		nb = uint64(c)<<classShift | uint64(off)
	}
	old := *h
	h.blk = nb
	if c > 0 && old.n > 0 {
		ots, oss := s.block(&old)
		nts, nss := s.block(h)
		copy(nts, ots[:old.n])
		copy(nss, oss[:old.n])
	}
	s.release(&old)
}

func (s *Store) alloc(c uint8) int {
	w := 2 * classCap(c)
	if f := s.free[c]; f != 0 {
		off := int(f - 1)
		s.free[c] = s.arena[off]
		s.garbage -= w
		return off
	}
	off := len(s.arena)
	if off+w > offMask {
		panic("follows: arena full")
	}
	// slices.Grow grows like append: by 1.25x once the arena is large,
	// so the spare capacity stays under a quarter.
	s.arena = slices.Grow(s.arena, w)[:off+w]
	return off
}

func (s *Store) release(h *header) {
	c := h.class()
	if c == 0 {
		return
	}
	off := h.off()
	s.arena[off] = s.free[c]
	s.free[c] = uint64(off) + 1
	s.garbage += 2 * classCap(c)
}

// maybeCompact compacts once free blocks exceed a quarter of the arena.
// Each compaction moves the live words only, and the garbage that
// triggered it took at least as many frees to make, so compaction is O(1)
// amortised per freed word.
func (s *Store) maybeCompact() {
	if s.garbage >= minGarbage && s.garbage*4 > len(s.arena) {
		s.Compact()
	}
}

// Compact copies every list into a fresh arena without free blocks. Lists
// keep their capacity class, so the next follows do not immediately
// create new garbage. Follow and Unfollow call it when needed; it is
// exported for a maintenance pass that prefers to choose the moment, since
// it costs O(entries) at once.
func (s *Store) Compact() {
	old := s.arena
	s.arena = make([]uint64, 0, len(old)-s.garbage)
	s.garbage = 0
	s.free = [nclass]uint64{}
	s.heads.Range(func(v uint64, _ header) bool {
		// Writing a value in place does not change the table's
		// structure, so it is safe during Range.
		h, _ := s.heads.Ref(v)
		c := h.class()
		if c == 0 {
			return true
		}
		src, cp := h.off(), classCap(c)
		off := len(s.arena)
		s.arena = s.arena[:off+2*cp]
		copy(s.arena[off:off+int(h.n)], old[src:src+int(h.n)])
		copy(s.arena[off+cp:off+cp+int(h.n)], old[src+cp:src+cp+int(h.n)])
		h.blk = uint64(c)<<classShift | uint64(off)
		return true
	})
}

// Unfollow removes target from viewer's list. It reports false if viewer
// does not follow target.
func (s *Store) Unfollow(viewer, target uint64) bool {
	h, ok := s.heads.Ref(viewer)
	if !ok {
		return false
	}
	i := s.index(h, target)
	if i < 0 {
		return false
	}
	ts, ss := s.block(h)
	n := int(h.n)
	copy(ts[i:n-1], ts[i+1:n])
	copy(ss[i:n-1], ss[i+1:n])
	h.n--
	s.entries--
	if i < int(h.sorted) {
		h.sorted--
	}
	s.settle(h)
	// Shrink when under half full, so that a list hovering around a
	// class boundary does not move back and forth.
	if c := classFor(int(h.n)); 2*classCap(c) <= classCap(h.class()) {
		s.move(h, c)
		s.maybeCompact()
	}
	return true
}

// Following returns the length of viewer's list.
func (s *Store) Following(viewer uint64) int {
	h, _ := s.heads.Get(viewer)
	return int(h.n)
}

// Has reports whether viewer ever had a list, even one now empty.
func (s *Store) Has(viewer uint64) bool {
	_, ok := s.heads.Get(viewer)
	return ok
}

// Contains reports whether viewer follows target.
func (s *Store) Contains(viewer, target uint64) bool {
	h, ok := s.heads.Get(viewer)
	return ok && s.index(&h, target) >= 0
}

// List returns viewer's targets and snapshots side by side, in stored
// order. The slices alias the store: they are valid until the next
// mutation and must not be written to. It is the allocation-free way to
// sum a feed.
func (s *Store) List(viewer uint64) (targets []uint64, snaps []int64) {
	h, ok := s.heads.Get(viewer)
	if !ok || h.n == 0 {
		return nil, nil
	}
	ts, ss := s.block(&h)
	return ts[:h.n:h.n], ss[:h.n:h.n]
}

// SetSnaps sets every snapshot of viewer's list to fn(target): marking the
// feed read sets each to the followee's current post count.
func (s *Store) SetSnaps(viewer uint64, fn func(target uint64) int64) {
	ts, ss := s.List(viewer)
	for i, t := range ts {
		ss[i] = fn(t)
	}
}

// Len returns the number of follow entries in all lists.
func (s *Store) Len() int { return s.entries }

// Viewers returns the number of viewers with a list, empty ones included.
func (s *Store) Viewers() int { return s.heads.Len() }

// MemoryBytes returns the bytes the store holds: the header table and the
// arena's capacity (free blocks and growth room included).
func (s *Store) MemoryBytes() int {
	return s.heads.MemoryBytes() + cap(s.arena)*8 + int(unsafe.Sizeof(*s))
}

// Range calls fn for every viewer in increasing id order, with the
// viewer's list in stored order (empty lists included), until fn returns
// false. The slices alias the store; fn must not modify it. Range
// allocates one []uint64 of the viewer ids, to sort them.
func (s *Store) Range(fn func(viewer uint64, targets []uint64, snaps []int64) bool) {
	vs := make([]uint64, 0, s.heads.Len())
	s.heads.Range(func(v uint64, _ header) bool {
		vs = append(vs, v)
		return true
	})
	slices.Sort(vs)
	for _, v := range vs {
		ts, ss := s.List(v)
		if !fn(v, ts, ss) {
			return
		}
	}
}

// ErrDuplicate is returned by Load for a target listed twice in one
// viewer's list: a damaged snapshot.
var ErrDuplicate = errors.New("follows: duplicate followee")

// Load appends targets with their snaps to viewer's list, creating the
// list (empty if targets is) when viewer has none: it is how a snapshot
// is read back, possibly one piece of a long list at a time. Lists in the
// order Range yielded them come back with exactly the same layout; any
// other order (a snapshot written by hand) is accepted and sorted
// as Follow would. A target already in the list is an error wrapping
// ErrDuplicate, after which the store must be discarded.
func (s *Store) Load(viewer uint64, targets []uint64, snaps []int64) error {
	if len(targets) != len(snaps) {
		return fmt.Errorf("follows: Load of %d targets with %d snapshots", len(targets), len(snaps))
	}
	h := s.heads.Upsert(viewer)
	if need := int(h.n) + len(targets); need > classCap(h.class()) {
		if need > 1<<32-1 {
			return fmt.Errorf("follows: list of viewer %d too long", viewer)
		}
		s.move(h, classFor(need))
	}
	for i, t := range targets {
		if s.index(h, t) >= 0 {
			return fmt.Errorf("%w: viewer %d, followee %d", ErrDuplicate, viewer, t)
		}
		s.push(h, t, snaps[i])
	}
	s.maybeCompact()
	return nil
}

// Followees appends viewer's followees, in increasing order, to dst.
func (s *Store) Followees(viewer uint64, dst []uint64) []uint64 {
	ts, _ := s.List(viewer)
	start := len(dst)
	dst = append(dst, ts...)
	slices.Sort(dst[start:])
	return dst
}

// Followers appends to dst, in increasing order, up to max of the users
// following target whose id is at least from. This store keeps one
// direction only, so it reads every list: O(edges) a call. (Erasure needs
// the followers of a user; a store that keeps both directions answers
// from the reverse lists.)
func (s *Store) Followers(target, from uint64, max int, dst []uint64) []uint64 {
	if max <= 0 {
		return dst
	}
	start := len(dst)
	s.heads.Range(func(v uint64, h header) bool {
		if v >= from && s.index(&h, target) >= 0 {
			dst = append(dst, v)
		}
		return true
	})
	slices.Sort(dst[start:])
	if len(dst)-start > max {
		dst = dst[:start+max]
	}
	return dst
}

// RemoveUser removes up to max edges of user, those user follows first,
// then those following user, calling removed for each, and reports
// whether none is left: then user has no list either (Has is false). A
// follower whose list it empties keeps theirs, empty, as Unfollow leaves
// it.
func (s *Store) RemoveUser(user uint64, max int, removed func(viewer, target uint64)) (done bool) {
	left := max
	for _, t := range s.Followees(user, nil) {
		if left == 0 {
			return false
		}
		s.Unfollow(user, t)
		removed(user, t)
		left--
	}
	for _, f := range s.Followers(user, 0, left+1, nil) {
		if left == 0 {
			return false
		}
		s.Unfollow(f, user)
		removed(f, user)
		left--
	}
	if s.Following(user) > 0 || len(s.Followers(user, 0, 1, nil)) > 0 {
		return false
	}
	if h, ok := s.heads.Ref(user); ok {
		s.release(h)
		s.heads.Delete(user)
	}
	return true
}
