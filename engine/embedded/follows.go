package embedded

import (
	"context"
	"fmt"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/counters"
	"github.com/tally-dev/tally/engine/ops"
	"github.com/tally-dev/tally/engine/snapshot"
)

// followRec logs a follow (Undo: an unfollow).
type followRec struct {
	recHeader
	ops.Follow
}

// Follow implements engine.Store.
func (e *Engine) Follow(ctx context.Context, viewer, target engine.UserID) error {
	return e.follow(ctx, ops.Follow{Viewer: viewer, Target: target})
}

// Unfollow implements engine.Store.
func (e *Engine) Unfollow(ctx context.Context, viewer, target engine.UserID) error {
	return e.follow(ctx, ops.Follow{Viewer: viewer, Target: target, Undo: true})
}

func (e *Engine) follow(ctx context.Context, op ops.Follow) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := op.Check(); err != nil {
		return err
	}
	_, err := e.commitCtx(ctx, &followRec{Follow: op})
	return err
}

// Followees implements engine.Store.
func (e *Engine) Followees(ctx context.Context, viewer engine.UserID) ([]engine.UserID, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.st.isErasing(uint64(viewer)) {
		return []engine.UserID{}, nil
	}
	targets := e.st.follows.Followees(uint64(viewer), nil)
	out := make([]engine.UserID, 0, len(targets))
	for _, f := range targets {
		if !e.st.isErasing(f) {
			out = append(out, engine.UserID(f))
		}
	}
	return out, nil
}

// UserCounts implements engine.Store.
func (e *Engine) UserCounts(ctx context.Context, us []engine.UserID) ([]engine.UserCounts, error) {
	if err := readCheck(ctx, us); err != nil {
		return nil, err
	}
	out := make([]engine.UserCounts, len(us))
	e.mu.RLock()
	for i, u := range us {
		followers, _ := e.st.followers.Get(uint64(u))
		followers, following := e.st.maskFollows(uint64(u), followers, int64(e.st.follows.Following(uint64(u))))
		out[i] = engine.UserCounts{Posts: e.st.postsShown(uint64(u)), Followers: followers, Following: following}
	}
	e.mu.RUnlock()
	return out, nil
}

// A user's public counters are two usercounts.Tables: posted (post
// counts, only for users who have posted) and followers; Following is not
// stored: it is the length of the user's followee list. An author with
// only posts costs one packed entry of posted, nothing else.

// addPosts adds d > 0 to u's post count.
func (st *state) addPosts(u uint64, d int64) {
	if !st.posted.Add(u, d) {
		return
	}
	switch f, ok := st.followers.Get(u); {
	case ok && f == 0:
		// A zero follower count only kept u known; posted does now
		// (and a snapshot would not bring it back).
		st.followers.Delete(u)
	case !ok && !st.hasUserRec(u) && !st.follows.Has(u):
		st.nusers++ // known by nothing before this post (see known)
	}
}

// addFollowers adds d to u's follower count, never below zero
// (counters.Add). A count back at 0 is dropped when u has posted (u stays
// known by their posts) and kept otherwise.
func (st *state) addFollowers(u uint64, d int64) {
	cur, _ := st.followers.Get(u)
	if d = counters.Add(cur, d) - cur; d == 0 {
		return
	}
	if st.followers.Add(u, d) && !st.hasUserRec(u) && !st.posted.Has(u) && !st.follows.Has(u) {
		st.nusers++ // known by nothing before (see known)
	}
	if f, _ := st.followers.Get(u); f == 0 && st.posted.Has(u) {
		st.followers.Delete(u)
	}
}

// postCount is the posts u has made, deleted or not: what followers' feed
// badges count, so that none goes below zero when posts are deleted and a
// post made after a delete still counts as new.
func (st *state) postCount(u uint64) int64 {
	n, _ := st.posted.Get(u)
	return n
}

// postsShown is u's post count as a profile shows it: posts made less
// posts deleted.
func (st *state) postsShown(u uint64) int64 {
	made, _ := st.posted.Get(u)
	gone, _ := st.unposted.Get(u)
	return counters.Add(made, -gone)
}

func (st *state) decideFollow(r *followRec) {
	following := st.follows.Contains(uint64(r.Viewer), uint64(r.Target))
	r.Decide(ops.FollowFacts{Following: following, TargetPosts: st.postCount(uint64(r.Target))}, &st.eff)
}

// applyFollowEdge adds or removes a follow; a new edge starts the feed
// snapshot where Decide read it. An emptied list keeps its viewer
// (follows.Store.Has), so the user stays known for the Users statistic.
func (st *state) applyFollowEdge(f ops.FollowEdge) {
	v, t := uint64(f.Viewer), uint64(f.Target)
	if !f.Add {
		st.follows.Unfollow(v, t)
		return
	}
	if !st.known(v) {
		st.nusers++
	}
	st.follows.Follow(v, t, f.Snapshot)
}

// followsPerItem bounds a FOLW item so that a user following millions
// stays far below snapshot.MaxChunkBytes.
const followsPerItem = 4096

// writeProfiles writes PROF, one item per user with a public counter,
// from posted, followers and unposted joined.
func writeProfiles(e *enc, st *state) {
	item := func(u uint64, posts, followers int64) {
		unposted, _ := st.unposted.Get(u)
		e.start()
		e.u(u)
		e.v(posts)
		e.v(followers)
		e.v(unposted)
		e.end()
	}
	st.posted.Range(func(u uint64, posts int64) bool {
		followers, _ := st.followers.Get(u)
		item(u, posts, followers)
		return true
	})
	st.followers.Range(func(u uint64, followers int64) bool {
		if !st.posted.Has(u) {
			item(u, 0, followers)
		}
		return true
	})
	st.unposted.Range(func(u uint64, _ int64) bool {
		if !st.posted.Has(u) && !st.followers.Has(u) {
			item(u, 0, 0)
		}
		return true
	})
}

// readProfiles reads PROF into posted and followers, keeping a user's
// zero follower count only when it is all the section says of them (as
// addFollowers does).
func readProfiles(sr *snapshot.SectionReader, pc *pacer, st *state) error {
	n := 0
	err := eachItem(sr, pc, func(d *dec) {
		u := d.u("user")
		posts := d.nonNeg(d.v("posts"), "posts")
		followers := d.nonNeg(d.v("followers"), "followers")
		unposted := d.nonNeg(d.v("deleted posts"), "deleted posts")
		if d.err != "" {
			return
		}
		if st.posted.Has(u) || st.followers.Has(u) || st.unposted.Has(u) {
			d.fail(fmt.Sprintf("user %d listed twice", u))
			return
		}
		n++
		if posts > 0 {
			st.posted.Set(u, posts)
		}
		if unposted > 0 {
			st.unposted.Set(u, unposted)
		}
		if followers > 0 || (posts == 0 && unposted == 0) {
			st.followers.Set(u, followers)
		}
	})
	if err != nil {
		return err
	}
	// The counts went to the overlays; packed, they cost a few bytes a
	// user instead of a hash slot each, without waiting for maintenance.
	st.posted.Compact()
	st.followers.Compact()
	st.unposted.Compact()
	return checkLen(sr, n)
}

func writeFollows(e *enc, st *state) {
	st.follows.Range(func(viewer uint64, targets []uint64, snaps []int64) bool {
		for first := true; first || len(targets) > 0; first = false {
			n := min(len(targets), followsPerItem)
			e.start()
			e.u(viewer)
			e.u(uint64(n))
			for i, f := range targets[:n] {
				e.u(f)
				e.v(snaps[i])
			}
			e.end()
			targets, snaps = targets[n:], snaps[n:]
		}
		return true
	})
}

// readFollows reads FOLW, whose viewers come in increasing order (Range's)
// and each list's followees too, so that the lists append to the packed
// form as they come (follows.Store.Load).
func readFollows(sr *snapshot.SectionReader, pc *pacer, st *state) error {
	var last, lastN uint64
	first := true
	var targets []uint64
	var snaps []int64
	err := eachItem(sr, pc, func(d *dec) {
		viewer := d.u("viewer")
		n := d.u("list length")
		if d.err != "" {
			return
		}
		if n > followsPerItem || n > uint64(len(d.b)/2) {
			d.fail("follow list too long")
			return
		}
		switch {
		case first || viewer > last:
		case viewer < last:
			d.fail(fmt.Sprintf("viewer %d after viewer %d", viewer, last))
			return
		case lastN != followsPerItem || n == 0:
			// A continuation follows a full item of its viewer and is
			// never empty; anything else is a second list for one viewer.
			d.fail(fmt.Sprintf("viewer %d listed twice", viewer))
			return
		}
		first, last, lastN = false, viewer, n
		targets, snaps = targets[:0], snaps[:0]
		for range n {
			targets = append(targets, d.u("followee"))
			snaps = append(snaps, d.v("snapshot"))
		}
		if d.err != "" {
			return
		}
		if err := st.follows.Load(viewer, targets, snaps); err != nil {
			d.fail(err.Error())
		}
	})
	if err == nil {
		err = st.follows.Loaded()
	}
	return err
}

// followRec's encoding (record.go has the format); Undo is in the kind.
func (r *followRec) appendTo(b []byte) []byte { return appendID(appendID(b, r.Viewer), r.Target) }

func (r *followRec) readFrom(d *decoder) {
	r.Viewer, r.Target = engine.UserID(d.id("viewer")), engine.UserID(d.id("target"))
}
