// Package follows owns the embedded engine's follow graph: for each
// viewer, whom they follow and, beside each followee, the snapshot of that
// user's post count taken when the viewer last caught up with their feed
// (feed unread = Σ max(0, posts(f) − snap(f)), see engine.FeedUnread); and
// the same edges the other way, each user's followers, so that erasing a
// user and checking follower counts find them without a scan.
//
// Each direction is one sorted set of pairs, (viewer, followee) with the
// snapshot beside it and (followee, viewer), cut into blocks of up to 256
// pairs that are delta-coded and bit-packed column by column with
// patches for the rare wide value (block.go has the format and why), and
// found through a two-level directory (pairs.go). A list is a run of
// pairs with the same first id inside blocks shared with other lists, so
// a user following or followed by few pays for their run, not for a table
// slot of their own, and one followed by millions pays for the gaps
// between their followers' ids, which are narrow when the followers are
// many. The bulk data holds no Go pointers, so the garbage collector has
// nothing to scan however many edges are resident.
//
// The followee lists are always in memory: the feed badge reads them. The
// reverse direction is read only by an erasure (Followers, RemoveUser)
// and Check, so a store made by NewCold keeps it cold: its blocks, in the
// same format, in an immutable checksummed file, with only the file's
// directory and an overlay of the changes since it was written in memory;
// a merge job (Maintainer, planned, run with no lock and finished as
// engine/tier's jobs are) writes a new file when the overlay passes a
// bound (cold.go, coldfile.go), and after an erasure (Scrub) a scrub job
// rewrites only the blocks that held the user and punches the old
// records out of the file (scrub.go). The file is derived data: Loaded rebuilds
// it from the followee lists. A store made by New keeps both directions
// in memory.
//
// It promises:
//   - Lists are sets in increasing id order: List, Followers and Range
//     yield followees (followers) sorted, and Range visits viewers in
//     increasing id order, so the same state always yields the same
//     sequence, and Load of what Range yielded rebuilds the same state.
//   - A change (Follow, Unfollow, SetSnaps, a step of RemoveUser)
//     rewrites only the blocks it touches, each at most 256 pairs,
//     whatever the length of the list: a follow or an unfollow usually
//     splices the block's encoded columns without decoding it, and SetSnaps
//     encodes only the blocks whose snapshots change. Contains reads one
//     run of one block, as far as the target;
//     List (the feed badge read) is O(list length) and reads nothing but
//     the viewer's runs and the run headers of their blocks.
//   - Following and FollowerCount read the run headers of a list's first
//     and last blocks only: the blocks between count from the directory.
//   - List, Contains, Following, Has and, in memory, Followers do not
//     allocate beyond the slices they are given (a cold read allocates its
//     merge's small iterators); changes allocate only to grow the
//     arena or the directory, or to compact the arena, which happens when
//     freed slots exceed a sixteenth of it (O(1) amortised per word written).
//   - A viewer who ever had a list keeps it (Has) after unfollowing
//     everyone, until RemoveUser removes them.
//   - Both directions always hold the same edges (Check verifies it).
//   - A cold read never returns pairs from a damaged file: each block is
//     checked against its checksum and directory entry, and Followers,
//     FollowerCount and Check return an error naming the file.
//
// A Store is not safe for concurrent use: callers hold a read lock to
// read (List, Followees, FolloweesPage, Contains, Following, Has,
// Followers, FollowerCount, Range, Len, MemoryBytes, Check) and a write
// lock for the rest (a cold merge's Run needs no lock: it reads only what
// nothing changes). The one exception is a frozen view (Freeze,
// freeze.go): a snapshot ranges over it with no lock while the store takes
// writes, and the store copies on write, a block and a directory page at
// a time, until Thaw. Slices passed to callbacks alias the store's scratch
// and are valid only during the call.
package follows

import (
	"errors"
	"fmt"
	"slices"
	"unsafe"

	"github.com/tally-dev/tally/engine/table"
)

// Store holds the follow graph. Make one with New.
type Store struct {
	fwd pairs // (viewer, followee), snapshot
	rev pairs // (followee, viewer), 0; empty when cold is set
	// cold, when set (NewCold), holds the reverse direction instead of
	// rev: in a file with an overlay in memory (cold.go).
	cold *coldRev
	// empties holds the viewers whose lists are empty but who had one.
	empties *table.Table[uint64, struct{}]
	load    *loader // a bulk load under way (load.go), or nil
	taken   []uint64
}

// New returns an empty store.
func New() *Store {
	return &Store{empties: table.New[uint64, struct{}](table.Mix64, 8)}
}

// Follow adds target to viewer's list with snapshot snap. It reports false,
// changing nothing, if viewer already follows target.
func (s *Store) Follow(viewer, target uint64, snap int64) bool {
	s.loaded()
	if !s.fwd.insert(viewer, target, snap) {
		return false
	}
	if s.cold != nil {
		s.cold.insert(target, viewer)
	} else {
		s.rev.insert(target, viewer, 0)
	}
	s.empties.Delete(viewer)
	return true
}

// Unfollow removes target from viewer's list. It reports false if viewer
// does not follow target.
func (s *Store) Unfollow(viewer, target uint64) bool {
	s.loaded()
	removed, more := s.fwd.remove(viewer, target)
	if !removed {
		return false
	}
	s.unlink(target, viewer)
	if !more && !s.fwd.has(viewer) {
		s.empties.Put(viewer, struct{}{})
	}
	return true
}

// unlink removes (a, b) from the reverse direction, where the forward
// direction had (b, a).
func (s *Store) unlink(a, b uint64) {
	if s.cold != nil {
		s.cold.remove(a, b) // the forward direction had the edge
		return
	}
	if removed, _ := s.rev.remove(a, b); !removed {
		panic(fmt.Sprintf("follows: edge %d -> %d missing from the reverse direction", b, a))
	}
}

// Following returns the length of viewer's list.
func (s *Store) Following(viewer uint64) int {
	s.mustBeLoaded()
	return s.fwd.runLen(viewer)
}

// FollowerCount returns the number of users following target. Only a
// cold store's read of its file fails.
func (s *Store) FollowerCount(target uint64) (int, error) {
	s.mustBeLoaded()
	if s.cold != nil {
		return s.cold.runLen(target)
	}
	return s.rev.runLen(target), nil
}

// Has reports whether viewer ever had a list, even one now empty.
func (s *Store) Has(viewer uint64) bool {
	s.mustBeLoaded()
	_, empty := s.empties.Get(viewer)
	return empty || s.fwd.has(viewer)
}

// Contains reports whether viewer follows target.
func (s *Store) Contains(viewer, target uint64) bool {
	s.mustBeLoaded()
	return s.fwd.contains(viewer, target)
}

// List appends viewer's followees, in increasing order, to targets and
// their snapshots to snaps.
func (s *Store) List(viewer uint64, targets []uint64, snaps []int64) ([]uint64, []int64) {
	s.mustBeLoaded()
	return s.fwd.appendRun(viewer, 0, -1, targets, snaps, true)
}

// Followees appends viewer's followees, in increasing order, to dst.
func (s *Store) Followees(viewer uint64, dst []uint64) []uint64 {
	s.mustBeLoaded()
	dst, _ = s.fwd.appendRun(viewer, 0, -1, dst, nil, false)
	return dst
}

// FolloweesPage appends to dst, in increasing order, up to max of
// viewer's followees whose id is at least from: Followers' page, the
// other way (an erasure removes a user's edges a bounded step at a time).
func (s *Store) FolloweesPage(viewer, from uint64, max int, dst []uint64) []uint64 {
	s.mustBeLoaded()
	if max <= 0 {
		return dst
	}
	dst, _ = s.fwd.appendRun(viewer, from, len(dst)+max, dst, nil, false)
	return dst
}

// Followers appends to dst, in increasing order, up to max of the users
// following target whose id is at least from: a caller pages through a
// list of millions with from = the last id + 1, each page a bounded step.
// Only a cold store's read of its file fails (a damaged block: the error
// names the file).
func (s *Store) Followers(target, from uint64, max int, dst []uint64) ([]uint64, error) {
	s.mustBeLoaded()
	if max <= 0 {
		return dst, nil
	}
	if s.cold != nil {
		return s.cold.appendRun(target, from, len(dst)+max, dst)
	}
	dst, _ = s.rev.appendRun(target, from, len(dst)+max, dst, nil, false)
	return dst, nil
}

// SetSnaps sets the snapshots of viewer's list: fn gets the followees
// and their snapshots a block's worth at a time and sets the snapshots
// (marking the feed read sets each to the followee's current post count,
// so fn is the post counts' batch lookup). fn must not call the store.
func (s *Store) SetSnaps(viewer uint64, fn func(targets []uint64, snaps []int64)) {
	s.loaded()
	s.fwd.setRun(viewer, fn)
}

// RemoveUser removes up to max edges of user, those user follows first,
// then those following user, calling removed for each (removed must not
// call the store), and reports whether none is left: then user has no
// list either (Has is false). A follower whose list it empties keeps
// theirs, empty, as Unfollow leaves it. Each call costs O(max) block
// changes, so an erasure of a user with millions of edges proceeds in
// bounded steps; the order is a function of the state, so a replay of
// the same steps removes the same edges. A cold store whose file cannot
// be read removes none of the followers and reports false (Followers and
// Check return the error).
func (s *Store) RemoveUser(user uint64, max int, removed func(viewer, target uint64)) (done bool) {
	s.loaded()
	for left := max; left > 0; {
		ts := s.fwd.takeRun(user, left, s.taken[:0])
		for _, t := range ts {
			s.unlink(t, user)
			removed(user, t)
		}
		s.taken, left = ts[:0], left-len(ts)
		if len(ts) > 0 {
			continue
		}
		fs := s.takeFollowers(user, left, s.taken[:0])
		for _, f := range fs {
			ok, more := s.fwd.remove(f, user)
			if !ok {
				panic(fmt.Sprintf("follows: edge %d -> %d missing from the forward direction", f, user))
			}
			if !more && !s.fwd.has(f) {
				s.empties.Put(f, struct{}{})
			}
			removed(f, user)
		}
		s.taken, left = fs[:0], left-len(fs)
		if len(fs) == 0 {
			break
		}
	}
	if s.fwd.has(user) || s.hasFollowers(user) {
		return false
	}
	s.empties.Delete(user)
	return true
}

// takeFollowers is takeRun of the reverse direction, where it is. A
// cold read that fails takes nothing (RemoveUser has no error to return:
// the erasure reads the same followers with Followers first, which
// returns it).
func (s *Store) takeFollowers(user uint64, max int, dst []uint64) []uint64 {
	if s.cold != nil {
		dst, _ = s.cold.takeRun(user, max, dst)
		return dst
	}
	return s.rev.takeRun(user, max, dst)
}

// hasFollowers reports whether user has followers; true when a cold read
// fails, since it cannot tell.
func (s *Store) hasFollowers(user uint64) bool {
	if s.cold != nil {
		has, err := s.cold.has(user)
		return has || err != nil
	}
	return s.rev.has(user)
}

// Len returns the number of follow edges.
func (s *Store) Len() int { return s.fwd.n }

// MemoryBytes returns the bytes the store holds: both directions'
// arenas (free slots and growth room included) and directories.
func (s *Store) MemoryBytes() int {
	n := s.fwd.memoryBytes() + s.rev.memoryBytes() + s.empties.MemoryBytes() +
		cap(s.taken)*8 + int(unsafe.Sizeof(*s))
	if s.load != nil {
		n += s.load.memoryBytes()
	}
	if s.cold != nil {
		n += s.cold.memoryBytes()
	}
	return n
}

// Compact copies both directions into fresh arenas without free slots.
// Changes call it when needed; it is exported for a maintenance pass that
// prefers to choose the moment, since it costs O(edges) at once. A frozen
// store (Freeze) does not compact until Thaw.
func (s *Store) Compact() {
	s.loaded()
	s.fwd.compact()
	s.rev.compact()
	if s.cold != nil {
		s.cold.compact()
	}
}

// Range calls fn for every viewer with a list, empty ones included, in
// increasing id order, with the viewer's followees in increasing order
// and their snapshots, until fn returns false. fn must not modify the
// store.
func (s *Store) Range(fn func(viewer uint64, targets []uint64, snaps []int64) bool) {
	s.mustBeLoaded()
	empties := make([]uint64, 0, s.empties.Len())
	s.empties.Range(func(v uint64, _ struct{}) bool {
		empties = append(empties, v)
		return true
	})
	slices.Sort(empties)
	var ts []uint64
	var ss []int64
	for c := s.fwd.cursor(); c.valid(); {
		v := c.e.a[c.i]
		for len(empties) > 0 && empties[0] < v {
			if !fn(empties[0], nil, nil) {
				return
			}
			empties = empties[1:]
		}
		ts, ss = ts[:0], ss[:0]
		for ; c.valid() && c.e.a[c.i] == v; c.i++ {
			ts, ss = append(ts, c.e.b[c.i]), append(ss, c.e.v[c.i])
		}
		if !fn(v, ts, ss) {
			return
		}
	}
	for _, v := range empties {
		if !fn(v, nil, nil) {
			return
		}
	}
}

// Check verifies the store: every block decodes to pairs that ascend
// across blocks and encode back to the same bytes, the directory agrees
// with the blocks, the arena's accounting adds up, the two directions
// hold the same edges and no empty list is also a list. It costs
// O(edges).
func (s *Store) Check() error {
	s.mustBeLoaded()
	if err := s.fwd.check(); err != nil {
		return fmt.Errorf("follows: followees: %w", err)
	}
	if err := s.rev.check(); err != nil {
		return fmt.Errorf("follows: followers: %w", err)
	}
	nR, sumR := s.rev.n, uint64(0)
	if s.cold != nil {
		var err error
		if nR, sumR, err = s.cold.check(); err != nil {
			return fmt.Errorf("follows: followers: %w", err)
		}
	}
	if s.fwd.n != nR {
		return fmt.Errorf("follows: %d edges one way, %d the other", s.fwd.n, nR)
	}
	// Each edge (v, t) of the forward direction must be in the reverse
	// one: sum a hash of the edges both ways (the order differs).
	var sumF uint64
	for c := s.fwd.cursor(); c.valid(); c.i++ {
		sumF += table.HashPair(c.e.a[c.i], c.e.b[c.i])
	}
	for c := s.rev.cursor(); c.valid(); c.i++ {
		if c.e.v[c.i] != 0 {
			return fmt.Errorf("follows: reverse edge %d <- %d holds %d", c.e.a[c.i], c.e.b[c.i], c.e.v[c.i])
		}
		sumR += table.HashPair(c.e.b[c.i], c.e.a[c.i])
	}
	if sumF != sumR {
		return errors.New("follows: the two directions hold different edges")
	}
	var err error
	s.empties.Range(func(v uint64, _ struct{}) bool {
		if s.fwd.has(v) {
			err = fmt.Errorf("follows: viewer %d both empty and listed", v)
		}
		return err == nil
	})
	return err
}

// mustBeLoaded panics when a bulk load is under way: its last pairs are
// not yet in the blocks, and a read must not change the store.
func (s *Store) mustBeLoaded() {
	if s.load != nil {
		panic("follows: read during a load; call Loaded first")
	}
}

// loaded finishes a bulk load, if one is under way, before a change.
func (s *Store) loaded() {
	if s.load != nil {
		mustCold(s.Loaded())
	}
}
