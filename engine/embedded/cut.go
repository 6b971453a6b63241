package embedded

import (
	"errors"
	"fmt"
	"slices"

	"github.com/tally-dev/tally/engine/tier"
	"github.com/tally-dev/tally/engine/usercounts"
)

// A cut is the state frozen at one log index for a snapshot, which writes
// it with no lock while the engine goes on taking writes. Taking it
// (freeze, under the write lock) copies no table: each part of the state
// is frozen the way its own package knows, so that nothing the cut reads
// is written until its thaw, and the live state answers as before from
// what the cut froze plus what was written since:
//
//   - the windowed tables (engine/tier: the post table; the like and
//     favorite sets; the lifecycle's sets of deleted posts, counted and
//     deleted comment ids and comment writers) give a View: sealed and
//     cold windows never change and are shared, bytes and files; every
//     window is held as a rewriting job holds it, its delta frozen and
//     its open table taking writes in a fresh delta, and no job is
//     planned on it. The view takes each window's erasure state with it
//     (its Scrub flag, a copy of its forgotten posts), so a delete or an
//     erasure step meanwhile changes only the live window's; an
//     erasure's Scan of a held open window holds it too, and the thaw
//     leaves the writes made meanwhile in the delta until the scan ends.
//     The post table's view copies its reaction kinds table (an array
//     of names, which a kinds record replaces whole), and the sets'
//     entries carry each pair's kind, so reactions need nothing more;
//   - the per-user count tables (engine/usercounts: posted, followers,
//     reposts' originals, authors' deleted posts) freeze their live
//     overlay as a fold job does, over the packed part that never
//     changes;
//   - the erasures under way, a short list whose progress changes in
//     place, are copied;
//   - the hash tables (engine/table: badges, visit records, clicks, wide
//     counters, idempotency keys) hand over their arrays and carry on as
//     an overlay over them, copying an entry up before it changes;
//   - the follow graph (engine/follows) shares its packed blocks and
//     directory pages with the cut: a changed block is written to a new
//     slot and a directory page is copied on its first change, the old
//     ones released at thaw;
//   - the lists only appended to (notifications and their text, message
//     text, the idempotency queue, groupList and msgList themselves) are
//     cut to their length, and the queue is not compacted in place while
//     the cut is out; an erasure that empties the user's queue slots
//     does it in a copy the live state takes once (idemQMut);
//   - a group or a message the cut holds is changed in a copy of its own
//     (groupMut, messageMut), kept in the cut and written back at thaw:
//     an erasure taking the user out of a group (and out of its member
//     list, which the copy would share) or off a message's sender too.
//
// What a cut costs is therefore O(windows + tables) under the lock (Bench-
// markSnapshotCut), and in memory what is written while it is out. Thaw
// undoes each freeze in turn, each step under the write lock on its own,
// at a cost of what was written to that part meanwhile.
//
// A new part of the state plugs in here: freeze it in freeze (a hash
// table: Freeze; a windowed table: Capture; a list only appended to: cut
// it to its length; anything changed in place: a copy-on-write like
// groupMut's), put what the section's writer reads into the cut's st, and
// undo it in thawSteps. Its section's writer then reads the cut's st as
// it reads a state.
type cut struct {
	index    uint64 // the last record the cut covers
	lastTime int64  // its time
	genHigh  uint64 // the id generator's high-water mark then
	// st holds the frozen parts, as the sections' writers read them; the
	// windowed tables are in the views instead.
	st                                    *state
	posts, likes, favs                    *tier.View
	deleted, comments, uncounted, writers *tier.View
	// scrubbing counts the windows the views hold that still wait for
	// an erasure's rewrite (tier's Scrub): their bytes may name an erased
	// user (afterSnapshot).
	scrubbing int
	// groups and msgs are the copies of groupList's and msgList's
	// elements that changed since the cut (groupMut, messageMut), by index.
	groups map[uint32]*group
	msgs   map[uint32]*message
	// idemCopied says the live state changed its expiry queue in a copy
	// of its own (idemQMut), leaving idemQ's array to the cut.
	idemCopied bool
	live       *state // the state the cut was taken from
}

// errHeld refuses a second cut while one is out.
var errHeld = errors.New("embedded: a snapshot's cut is already out")

// freeze takes a cut of st (see cut) and marks st held by it until its
// thaw. Call it under the write lock, with no maintenance job pending
// (tier's Capture, usercounts' Freeze).
func (st *state) freeze() (*cut, error) {
	if st.held != nil {
		return nil, errHeld
	}
	c := &cut{live: st, groups: map[uint32]*group{}, msgs: map[uint32]*message{}}
	var views [7]*tier.View
	undo := func() {
		for i, t := range st.windowed() {
			if views[i] != nil {
				t.Release(views[i])
			}
		}
	}
	for i, t := range st.windowed() {
		v, err := t.Capture()
		if err != nil {
			undo()
			return nil, fmt.Errorf("embedded: snapshot: %w", err)
		}
		views[i] = v
	}
	c.posts, c.likes, c.favs = views[0], views[1], views[2]
	c.deleted, c.comments, c.uncounted, c.writers = views[3], views[4], views[5], views[6]
	for _, v := range views {
		c.scrubbing += v.Scrubbing()
	}
	// The per-user count tables, in perUser's order.
	var counts [4]*usercounts.Table
	for i, t := range st.perUser() {
		f, err := t.Freeze()
		if err != nil {
			undo()
			perUser := st.perUser()
			for _, t := range perUser[:i] {
				t.Thaw()
			}
			return nil, fmt.Errorf("embedded: snapshot: %w", err)
		}
		counts[i] = f
	}
	c.st = &state{
		counted:   st.counted,
		imported:  st.imported,
		push:      st.push,
		nusers:    st.nusers,
		badges:    st.badges.Freeze(),
		seens:     st.seens.Freeze(),
		clicks:    st.clicks.Freeze(),
		wide:      st.wide.Freeze(),
		posted:    counts[0],
		followers: counts[1],
		origins:   counts[2],
		unposted:  counts[3],
		// An erasure's progress changes in place, and the list is short.
		erasing:   slices.Clone(st.erasing),
		follows:   st.follows.Freeze(),
		notifs:    slices.Clip(st.notifs),
		notifText: slices.Clip(st.notifText),
		groupList: slices.Clip(st.groupList),
		msgList:   slices.Clip(st.msgList),
		msgText:   slices.Clip(st.msgText),
		idem:      st.idem.Freeze(),
		idemQ:     slices.Clip(st.idemQ[st.idemHead:]),
	}
	st.held = c
	return c, nil
}

// windowed is a table kept in time windows (engine/tier), as a cut takes
// and gives back its view.
type windowed interface {
	Capture() (*tier.View, error)
	Release(*tier.View) error
}

// windowed returns the state's windowed tables: the post table, then
// the pair sets in sets' order (likes, favorites, deleted posts, counted
// comment ids, deleted comment ids, comment writers).
func (st *state) windowed() [7]windowed {
	w := [7]windowed{st.posts}
	for i, s := range st.sets() {
		w[i+1] = s
	}
	return w
}

// perUser returns the state's per-user count tables (engine/usercounts):
// authors' post counts, follower counts, reposts' originals, authors'
// deleted posts.
func (st *state) perUser() [4]*usercounts.Table {
	return [4]*usercounts.Table{st.posted, st.followers, st.origins, st.unposted}
}

// thawSteps returns the steps that undo the cut's freezes, each to run
// under the write lock on its own, in any order, once the cut is written
// (or abandoned): what was written while it was out goes back where the
// live state keeps it.
func (c *cut) thawSteps() []func() error {
	st := c.live
	return []func() error{
		func() error { return st.posts.Release(c.posts) },
		func() error { return st.likes.Release(c.likes) },
		func() error { return st.favs.Release(c.favs) },
		func() error { return st.deleted.Release(c.deleted) },
		func() error { return st.comments.Release(c.comments) },
		func() error { return st.uncounted.Release(c.uncounted) },
		func() error { return st.writers.Release(c.writers) },
		func() error { st.badges.Thaw(); st.seens.Thaw(); st.clicks.Thaw(); st.wide.Thaw(); return nil },
		func() error {
			for _, t := range st.perUser() {
				t.Thaw()
			}
			return nil
		},
		func() error { st.follows.Thaw(); return nil },
		func() error { st.idem.Thaw(); return nil },
		func() error {
			for i, g := range c.groups {
				st.groupList[i] = *g
			}
			for i, m := range c.msgs {
				st.msgList[i] = *m
			}
			st.held = nil
			return nil
		},
	}
}

// thaw runs every thaw step (for a private state, which no one else
// locks).
func (c *cut) thaw() error {
	var errs []error
	for _, step := range c.thawSteps() {
		errs = append(errs, step())
	}
	return errors.Join(errs...)
}
