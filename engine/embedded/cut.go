package embedded

import (
	"errors"
	"fmt"
	"slices"

	"github.com/tally-dev/tally/engine/tier"
)

// A cut is the state frozen at one log index for a snapshot, which writes
// it with no lock while the engine goes on taking writes. Taking it
// (freeze, under the write lock) copies no table: each part of the state
// is frozen the way its own package knows, so that nothing the cut reads
// is written until its thaw, and the live state answers as before from
// what the cut froze plus what was written since:
//
//   - the windowed tables (engine/tier: the post table, the like and
//     favorite sets) give a View: sealed and cold windows never change
//     and are shared, bytes and files; every window is held as a
//     rewriting job holds it, its delta frozen and its open table taking
//     writes in a fresh delta, and no job is planned on it;
//   - the per-user count tables (engine/usercounts: posted, followers)
//     freeze their live overlay as a fold job does, over the packed part
//     that never changes;
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
//     the cut is out;
//   - a group or a message the cut holds is changed in a copy of its own
//     (groupMut, messageMut), kept in the cut and written back at thaw.
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
	st                 *state
	posts, likes, favs *tier.View
	// groups and msgs are the copies of groupList's and msgList's
	// elements that changed since the cut (groupMut, messageMut), by index.
	groups map[uint32]*group
	msgs   map[uint32]*message
	live   *state // the state the cut was taken from
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
	var views [3]*tier.View
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
	posted, err := st.posted.Freeze()
	if err != nil {
		undo()
		return nil, fmt.Errorf("embedded: snapshot: %w", err)
	}
	followers, err := st.followers.Freeze()
	if err != nil {
		undo()
		st.posted.Thaw()
		return nil, fmt.Errorf("embedded: snapshot: %w", err)
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
		posted:    posted,
		followers: followers,
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

// windowed returns the state's windowed tables: the post table, the like
// and favorite sets.
func (st *state) windowed() [3]windowed { return [3]windowed{st.posts, st.likes, st.favs} }

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
		func() error { st.badges.Thaw(); st.seens.Thaw(); st.clicks.Thaw(); st.wide.Thaw(); return nil },
		func() error { st.posted.Thaw(); st.followers.Thaw(); return nil },
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
