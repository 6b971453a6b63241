package embedded

import (
	"context"
	"fmt"
	"slices"
	"sort"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/counters"
	"github.com/tally-dev/tally/engine/ops"
	"github.com/tally-dev/tally/engine/snapshot"
	"github.com/tally-dev/tally/engine/tier"
)

// Counts follow the life of what they count (engine/ops, lifecycle.go):
// comments carry the app's ids and can be taken back, posts can be
// deleted, users erased. This file keeps what that needs:
//
//   - deleted (PDEL): every deleted post id, as (0, post) pairs of a set in
//     the post table's windows, so that a deleted post is never known
//     again, its id never taken again and a repeat changes nothing;
//   - comments (CMNT): the counted comment ids, as (comment, post) pairs in
//     the post's windows: the comments of a post are one run, recounted by
//     `tally check`, forgotten with the post; uncounted (CMDL) the deleted
//     ones, so that a deleted comment is never counted again; writers
//     (CMWR) who wrote each, as (writer, comment) pairs in the comment's
//     windows, for the writer's right to delete it;
//   - origins: a repost's original, in a usercounts table keyed by the
//     repost (a few bytes a repost), which loses a repost when it goes;
//   - unposted: each author's deleted posts. The post count shown is posted
//     − unposted; followers' feed badges count posted, the posts made, so
//     that no badge goes below zero and a post made after deletes still
//     counts as new;
//   - erasing: the users being erased, with their progress.
//
// # Erasure
//
// EraseUser logs one record that starts the erasure: the user's own
// records (badges, visit record, red-dot click, post, deleted-post and
// follower counts) go at once, and the user is marked erasing. The rest —
// likes, favorites and writer records in every window, follow edges both
// ways, authorship of posts, places in groups and messages, idempotency
// records — is removed by the eraser goroutine in bounded steps, each one
// log record: it finds a batch of what is left of the user (a Scan of one
// window of a set or of the post table, read with no lock held; up to
// eraseBatch follow edges; eraseBatch groups, messages or idempotency
// records), then commits a step record listing it, whose apply decides
// (ops.ErasureStep) and removes it with its counts, and records the
// progress (the phase and a cursor in key order), so that the eraser
// resumes where the log left it after a crash. Each step holds the lock
// for its batch only; the scan of a set finds a user's pairs by reading
// every pair once, window by window, rather than keeping a second copy of
// the sets by user (which would double what a like costs): an
// erasure costs one read of the like, favorite and writer sets and of the
// post table, spread over steps.
//
// # Reads while an erasure runs
//
// Every read answers as if the erasure had finished when EraseUser
// returned: while a user is erasing, whatever of them is left is masked —
// a post's likes and favorites read one less for each pending like or
// favorite of theirs (the pair and its count are removed together by one
// step, so stored count − pending pair is the same before and after that
// step), follower and following counts one less for each pending edge,
// followee lists leave them out, their posts read without an author, and
// no group lists them, counts them as a member, bumps them in a fan-out or
// takes them as a page cursor; the messages they sent read without a
// sender. Their own badges read as a new user's (dropped at the start).
// Calls by the user, or that follow them or add them to a group, wait
// until the erasure is done (the conformance scripts and the metamorphic
// test, against a model that erases at once, hold every answer to this).
// An import that replaces a post's counts first removes the pending pairs
// of erasing users on it, so that its values stand as given.
//
// # Files
//
// A step that removes a record from a sealed or cold window marks the
// window for a rewrite (tier's Scrub), so that the maintenance loop
// rewrites it — its cold file too — and the rebuilt state of the next
// snapshot holds no trace of the user. That snapshot is then the only
// one kept and the log before it is dropped (afterSnapshot), so that no
// file of the data directory names an erased user (TestEraseLeavesNoTrace
// reads every file).

// eraseBatch bounds one erasure step: the pairs a set scan reads, the
// edges, groups, messages and idempotency records it visits.
const eraseBatch = 4096

// erasure is one user's erasure under way: the phase it is in and its
// cursor there.
type erasure struct {
	user   uint64
	phase  erasePhase
	cursor tier.Cursor
}

// erasePhase orders an erasure's steps.
type erasePhase uint8

const (
	phaseLikes     erasePhase = iota // the like set, by (post, user)
	phaseFavorites                   // the favorite set
	phaseWrites                      // the comment writers, by (comment, user)
	phaseFollows                     // follow edges both ways, no cursor
	phasePosts                       // the post table, by post
	phaseGroups                      // groupList, by index
	phaseMessages                    // msgList, by index
	phaseIdem                        // the idempotency queue, by time
	phaseDone
)

// erasing returns u's erasure under way, or nil.
func (st *state) erasingOf(u uint64) *erasure {
	for i := range st.erasing {
		if st.erasing[i].user == u {
			return &st.erasing[i]
		}
	}
	return nil
}

// isErasing reports whether u is being erased.
func (st *state) isErasing(u uint64) bool { return len(st.erasing) > 0 && st.erasingOf(u) != nil }

// deleteCommentRec, deletePostRec, eraseRec and eraseStepRec log the
// lifecycle's mutations.
type deleteCommentRec struct {
	recHeader
	ops.DeleteComment
}

type deletePostRec struct {
	recHeader
	ops.DeletePost
}

type eraseRec struct {
	recHeader
	ops.EraseUser
}

// eraseStepRec is one step of an erasure: in phase, what it found (keys:
// posts, comment ids or, for follows, edges as viewer-target pairs; the
// range phases find theirs between the cursor and next), where the phase
// goes on from (next), and whether the phase ends with it.
type eraseStepRec struct {
	recHeader
	user     uint64
	phase    erasePhase
	keys     []uint64
	next     tier.Cursor
	phaseEnd bool
	// step holds the decision, reused.
	step ops.ErasureStep
}

// DeleteComment implements engine.Store.
func (e *Engine) DeleteComment(ctx context.Context, actor engine.Actor, post engine.PostID, comment engine.CommentID) error {
	_, err := e.commitChecked(ctx, &deleteCommentRec{DeleteComment: ops.DeleteComment{Actor: actor, Post: post, Comment: comment}})
	return err
}

// DeletePost implements engine.Store.
func (e *Engine) DeletePost(ctx context.Context, actor engine.Actor, post engine.PostID) error {
	_, err := e.commitChecked(ctx, &deletePostRec{DeletePost: ops.DeletePost{Actor: actor, Post: post}})
	return err
}

// EraseUser implements engine.Store: it returns once the erasure has
// started (durably); the eraser finishes it in steps, reads answering as
// if it were done.
func (e *Engine) EraseUser(ctx context.Context, user engine.UserID) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	r := &eraseRec{EraseUser: ops.EraseUser{User: user}}
	if err := r.Check(); err != nil {
		return err
	}
	if _, err := e.commitCtx(ctx, r); err != nil {
		return err
	}
	e.wakeEraser()
	return nil
}

func (st *state) decideDeleteComment(r *deleteCommentRec) error {
	f := ops.DeleteCommentFacts{
		PostFacts: st.postFacts(r.Post),
		Live:      st.pairFact(st.comments, uint64(r.Comment), uint64(r.Post)),
		Deleted:   st.pairFact(st.uncounted, uint64(r.Comment), uint64(r.Post)),
		Wrote:     st.pairFact(st.writers, uint64(r.Actor.User), uint64(r.Comment)),
	}
	return r.Decide(f, &st.eff)
}

func (st *state) decideDeletePost(r *deletePostRec) error {
	f := ops.DeletePostFacts{PostFacts: st.postFacts(r.Post)}
	if orig, ok := st.origins.Get(uint64(r.Post)); ok {
		f.Original = engine.PostID(orig)
		f.OriginalExists = st.postExists(f.Original)
	}
	return r.Decide(f, &st.eff)
}

// pairFact reads whether set holds (a, b), as flagFact does.
func (st *state) pairFact(set *tier.Set, a, b uint64) bool {
	has, err := set.Has(a, b)
	if err != nil && st.readErr == nil {
		st.readErr = err
	}
	return has
}

// applyUnregister deletes a post: the post table forgets it, its id is
// kept as deleted, its sets are forgotten, its author has one deleted
// post more and a repost forgets its original.
func (st *state) applyUnregister(u ops.Unregistration) {
	id := uint64(u.Post)
	was, ok, err := st.posts.Get(id)
	if err == nil && ok {
		_, err = st.posts.Delete(id)
	}
	if err != nil {
		st.noteErr(err)
		return
	}
	if ok && !was.Counts.IsZero() {
		st.counted--
	}
	_, err = st.deleted.Add(0, id)
	st.noteErr(err)
	for _, s := range [...]*tier.Set{st.likes, st.favs, st.comments, st.uncounted} {
		s.Forget(id)
	}
	if u.Author != 0 {
		st.unposted.Add(uint64(u.Author), 1)
	}
	if st.origins.Has(id) {
		st.origins.Delete(id)
	}
}

// applyCommentMark records a counted comment id and its writer, or moves
// it to the deleted ones.
func (st *state) applyCommentMark(m ops.CommentMark) {
	c, p := uint64(m.Comment), uint64(m.Post)
	var err error
	if m.Deleted {
		if _, err = st.comments.Remove(c, p); err == nil {
			_, err = st.uncounted.Add(c, p)
		}
	} else {
		if _, err = st.comments.Add(c, p); err == nil {
			_, err = st.writers.Add(uint64(m.Writer), c)
		}
	}
	st.noteErr(err)
}

// applyErasure starts or ends an erasure. Starting drops the user's own
// records and marks them erasing.
func (st *state) applyErasure(x ops.Erasure) {
	u := uint64(x.User)
	if x.Done {
		st.erasing = slices.DeleteFunc(st.erasing, func(e erasure) bool { return e.user == u })
		st.forgetIfUnknown(u)
		return
	}
	known := st.known(u)
	k := keyOf(u)
	if b, ok := st.badges.Get(k); ok {
		for i := range b.n {
			if b.n[i] == wideMark {
				st.wide.Delete(u)
			}
		}
	}
	st.badges.Delete(k)
	st.seens.Delete(k)
	st.clicks.Delete(k)
	for _, t := range [...]interface {
		Has(uint64) bool
		Delete(uint64)
	}{st.posted, st.unposted, st.followers} {
		if t.Has(u) {
			t.Delete(u)
		}
	}
	if known && !st.known(u) {
		st.nusers--
	}
	if !st.isErasing(u) {
		st.erasing = append(st.erasing, erasure{user: u})
	}
}

// forgetIfUnknown drops u's emptied follow list, which keeps a user known
// (follows.Store.Has), once u's erasure is over.
func (st *state) forgetIfUnknown(u uint64) {
	known := st.known(u)
	st.follows.RemoveUser(u, 0, func(uint64, uint64) {})
	st.follows.Scrub(u) // the cold followers' file drops u at the next pass
	if known && !st.known(u) {
		st.nusers--
	}
}

// decideEraseStep reads the facts of a step's findings and decides it
// (ops.ErasureStep); the idempotency records of the idem phase are kept
// in r for the apply.
func (st *state) decideEraseStep(r *eraseStepRec) error {
	x := st.erasingOf(r.user)
	if x == nil || x.phase != r.phase {
		return fmt.Errorf("%w: an erasure step of a phase that is not under way", engine.ErrInvalid)
	}
	s := &r.step
	*s = ops.ErasureStep{User: engine.UserID(r.user), Likes: s.Likes[:0], Favorites: s.Favorites[:0],
		Writes: s.Writes[:0], Edges: s.Edges[:0], Posts: s.Posts[:0], Groups: s.Groups[:0], Messages: s.Messages[:0]}
	flags := func(set *tier.Set, found []ops.FoundFlag) []ops.FoundFlag {
		for _, p := range r.keys {
			if st.pairFact(set, r.user, p) {
				found = append(found, ops.FoundFlag{Post: engine.PostID(p), PostExists: st.postExists(engine.PostID(p)), Set: true})
			}
		}
		return found
	}
	switch r.phase {
	case phaseLikes:
		// Each reaction with its kind: one of another kind than like
		// comes off that kind's count.
		for _, p := range r.keys {
			k, err := st.likes.KindOf(r.user, p)
			if err != nil && st.readErr == nil {
				st.readErr = err
			}
			if k != counters.NoKind {
				s.Likes = append(s.Likes, ops.FoundFlag{Post: engine.PostID(p), PostExists: st.postExists(engine.PostID(p)), Set: true, Kind: k})
			}
		}
	case phaseFavorites:
		s.Favorites = flags(st.favs, s.Favorites)
	case phaseWrites:
		for _, c := range r.keys {
			if st.pairFact(st.writers, r.user, c) {
				s.Writes = append(s.Writes, engine.CommentID(c))
			}
		}
	case phaseFollows:
		for i := 0; i+1 < len(r.keys); i += 2 {
			v, t := r.keys[i], r.keys[i+1]
			if (v == r.user || t == r.user) && st.follows.Contains(v, t) {
				s.Edges = append(s.Edges, ops.Edge{Viewer: engine.UserID(v), Target: engine.UserID(t)})
			}
		}
	case phasePosts:
		for _, p := range r.keys {
			if rec, ok, err := st.posts.Get(p); err != nil {
				st.noteReadErr(err)
			} else if ok && rec.Author == r.user {
				s.Posts = append(s.Posts, engine.PostID(p))
			}
		}
	case phaseGroups:
		for i := x.cursor.Post; i < min(r.next.Post, uint64(len(st.groupList))); i++ {
			g := &st.groupList[i]
			if _, ok := st.members.Get(pair{g.id, r.user}); ok {
				s.Groups = append(s.Groups, engine.GroupID(g.id))
			}
		}
	case phaseMessages:
		for i := x.cursor.Post; i < min(r.next.Post, uint64(len(st.msgList))); i++ {
			if m := &st.msgList[i]; m.sender == r.user {
				s.Messages = append(s.Messages, engine.MessageID(m.id))
			}
		}
	case phaseIdem:
		// The records go in applyEraseStep: they are embedded's own.
	}
	s.Done = r.phaseEnd && r.phase == phaseIdem
	s.Decide(&st.eff)
	return nil
}

func (st *state) noteReadErr(err error) {
	if err != nil && st.readErr == nil {
		st.readErr = err
	}
}

// applyEraseStep applies what a step record changes besides its effects:
// in the like and favorite phases, the user's pairs on deleted posts
// (Set.Purge); in the idem phase, the user's idempotency records between the cursor
// and next (the queue is in time order: the cursor is a time), and the
// erasure's progress.
func (st *state) applyEraseStep(r *eraseStepRec) {
	x := st.erasingOf(r.user)
	if x != nil && (r.phase == phaseLikes || r.phase == phaseFavorites) {
		// A deleted post's pairs are forgotten, not removed: the decision
		// saw none of them, but the user's must not wait in an open
		// window for its sealing to leave the snapshots.
		set := st.likes
		if r.phase == phaseFavorites {
			set = st.favs
		}
		for _, p := range r.keys {
			set.Purge(r.user, p)
		}
	}
	if x != nil && r.phase == phaseIdem {
		q := st.idemQMut()
		from := sort.Search(len(q), func(i int) bool { return uint64(q[i].time) >= x.cursor.Post })
		for i := from; i < len(q) && (r.phaseEnd || uint64(q[i].time) < r.next.Post); i++ {
			if q[i].key[0] != r.user || q[i].key == (idemKey{}) {
				continue
			}
			if v, ok := st.idem.Get(q[i].key); ok && v.time == q[i].time {
				st.idem.Delete(q[i].key)
			}
			// An emptied slot, which expiry skips and snapshots leave
			// out: the queue named the user too.
			q[i].key = idemKey{}
		}
	}
	if x == nil {
		return // the step ended the erasure
	}
	if r.phaseEnd {
		x.phase++
		x.cursor = tier.Cursor{}
	} else {
		x.cursor = r.next
	}
}

// applyRemoval takes a member out of a set and marks its window for a
// rewrite, so that a sealed or cold copy of it goes too.
func (st *state) applyRemoval(x ops.Removal) {
	var set *tier.Set
	switch x.Set {
	case ops.LikeSet:
		set = st.likes
	case ops.FavoriteSet:
		set = st.favs
	case ops.WriterSet:
		set = st.writers
	default:
		return
	}
	_, err := set.Remove(uint64(x.User), x.Key)
	st.noteErr(err)
	set.Scrub(x.Key)
}

// applyUnauthor clears a post's author.
func (st *state) applyUnauthor(p engine.PostID) {
	st.noteErr(st.posts.SetAuthor(uint64(p), 0))
	st.posts.Scrub(uint64(p))
}

// applyGroupErasure takes u out of group id for good: a current member
// leaves, and the mapid no longer names anyone (it stays quit, so that no
// later message counts it; receipts recorded keep counting it).
func (st *state) applyGroupErasure(m ops.Membership) {
	g, ok := st.groupMut(uint64(m.Group))
	if !ok {
		return
	}
	k := pair{g.id, uint64(m.User)}
	mapid, ok := st.members.Get(k)
	if !ok {
		return
	}
	if !g.hasQuit(mapid) {
		g.setQuit(mapid, true)
		g.current--
	}
	if st.held != nil {
		// groupMut's copy shares byMap's array with the cut, which
		// writes the member as it was.
		g.byMap = slices.Clone(g.byMap)
	}
	g.byMap[mapid-1] = 0
	st.members.Delete(k)
}

// applySenderErasure clears a message's sender.
func (st *state) applySenderErasure(id engine.MessageID) {
	if m, ok := st.messageMut(uint64(id)); ok {
		m.sender = 0
	}
}

// Masks: what reads leave out of an erasure under way (the package doc's
// "Reads while an erasure runs"). Each costs nothing when none runs.

// maskAuthor returns author, or 0 when it is being erased.
func (st *state) maskAuthor(author uint64) uint64 {
	if st.isErasing(author) {
		return 0
	}
	return author
}

// maskCounts takes out of the counts of posts (recs, found) the pending
// reactions (each off its kind's count) and favorites of users being
// erased.
func (st *state) maskCounts(ids []uint64, recs []tier.Post, found []bool) error {
	if len(st.erasing) == 0 {
		return nil
	}
	flags := make([]bool, len(ids))
	kinds := make([]counters.Kind, len(ids))
	for _, x := range st.erasing {
		if err := st.likes.KindsOf(x.user, ids, kinds); err != nil {
			return err
		}
		for i, k := range kinds {
			if k != counters.NoKind && found[i] {
				recs[i].AddReaction(k, -1)
			}
		}
		if err := st.favs.HasMany(x.user, ids, flags); err != nil {
			return err
		}
		for i, f := range flags {
			if f && found[i] {
				recs[i].Counts.Favorites = counters.Add(recs[i].Counts.Favorites, -1)
			}
		}
	}
	for i := range recs {
		recs[i].Author = st.maskAuthor(recs[i].Author)
	}
	return nil
}

// maskFollows returns u's follower and following counts less the pending
// edges of users being erased; a user being erased has none.
func (st *state) maskFollows(u uint64, followers, following int64) (int64, int64) {
	if len(st.erasing) == 0 {
		return followers, following
	}
	if st.isErasing(u) {
		return 0, 0
	}
	for _, x := range st.erasing {
		if st.follows.Contains(x.user, u) {
			followers = counters.Add(followers, -1)
		}
		if st.follows.Contains(u, x.user) {
			following = counters.Add(following, -1)
		}
	}
	return followers, following
}

// errErasing answers a call that waited for an erasure until its context
// ended: it may be retried.
var errErasing = fmt.Errorf("%w: the user is being erased; retry", engine.ErrUnavailable)

// erasingAny reports whether any of users is being erased, under the lock.
func (e *Engine) erasingAny(users ...uint64) bool {
	for _, u := range users {
		if e.st.isErasing(u) {
			return true
		}
	}
	return false
}

// rlockAs takes the read lock for a read by viewer, waiting first while
// viewer is being erased (their reads come after the erasure). On error
// the lock is not held.
func (e *Engine) rlockAs(ctx context.Context, viewer uint64) error {
	e.mu.RLock()
	for len(e.st.erasing) > 0 && e.st.isErasing(viewer) {
		done := e.erasedCh
		e.mu.RUnlock()
		select {
		case <-done:
		case <-ctx.Done():
			return errErasing
		case <-e.stop:
			return errClosed
		}
		e.mu.RLock()
	}
	return nil
}

// involved returns the users a record acts as, follows or adds to a
// group: calls that must wait while any of them is being erased.
func involved(r record, buf []uint64) []uint64 {
	switch r := r.(type) {
	case *createPostRec:
		return append(buf, uint64(r.Viewer))
	case *reactRec:
		return append(buf, uint64(r.Viewer))
	case *unreactRec:
		return append(buf, uint64(r.Viewer))
	case *favoriteRec:
		return append(buf, uint64(r.Viewer))
	case *commentRec:
		return append(buf, uint64(r.Viewer))
	case *repostRec:
		return append(buf, uint64(r.Viewer))
	case *followRec:
		return append(buf, uint64(r.Viewer), uint64(r.Target))
	case *touchRec:
		return append(buf, uint64(r.viewer))
	case *markReadRec:
		return append(buf, uint64(r.Viewer))
	case *clickRec:
		return append(buf, uint64(r.Viewer))
	case *createGroupRec:
		buf = append(buf, uint64(r.Viewer))
		for _, u := range r.Members {
			buf = append(buf, uint64(u))
		}
		return buf
	case *addMembersRec:
		buf = append(buf, uint64(r.Viewer))
		for _, u := range r.Users {
			buf = append(buf, uint64(u))
		}
		return buf
	case *leaveGroupRec:
		return append(buf, uint64(r.Viewer))
	case *sendMessageRec:
		return append(buf, uint64(r.Viewer))
	case *markMessagesReadRec:
		return append(buf, uint64(r.Viewer))
	case *deleteCommentRec:
		return append(buf, uint64(r.Actor.User))
	case *deletePostRec:
		return append(buf, uint64(r.Actor.User))
	case *importRec:
		for _, row := range r.rows {
			if row.Author != 0 {
				buf = append(buf, uint64(row.Author))
			}
		}
		return buf
	}
	return buf
}

// settleErasures removes, before a reaction or favorite count of a post
// changes, the pending reactions (or favorites) of users being erased on
// that post, each with its kind's count. A count never goes below zero,
// so a decrement deferred past another change would not be the one the
// erasure owed (an import may have left the count below its set's size):
// settling first keeps every count what it would be had the erasure
// finished when it was asked for. removals are the change's own (an
// erasure step settles its user itself).
func (st *state) settleErasures(post engine.PostID, favorites bool, removals []ops.Removal) {
	kind := ops.LikeSet
	if favorites {
		kind = ops.FavoriteSet
	}
	for _, x := range st.erasing {
		if slices.Contains(removals, ops.Removal{Set: kind, User: engine.UserID(x.user), Key: uint64(post)}) {
			continue
		}
		if favorites {
			removed, err := st.favs.Remove(x.user, uint64(post))
			st.noteErr(err)
			if removed {
				st.favs.Scrub(uint64(post))
				st.addCount(ops.CountDelta{Post: post, Field: counters.Favorites, Delta: -1})
			}
			continue
		}
		was, err := st.likes.Unreact(x.user, uint64(post))
		st.noteErr(err)
		switch {
		case was == counters.NoKind:
		case was == counters.Like:
			st.likes.Scrub(uint64(post))
			st.addCount(ops.CountDelta{Post: post, Field: counters.Likes, Delta: -1})
		default:
			st.likes.Scrub(uint64(post))
			st.addReaction(ops.ReactionDelta{Post: post, Kind: was, Delta: -1})
		}
	}
}

// importUnerase takes out, before an import replaces the counts of
// posts, the pending reactions and favorites of users being erased on
// them: the values imported are then what the posts read, as after the
// erasure. A reaction of a kind other than like comes off its kind's
// count, which an import leaves as it is.
func (st *state) importUnerase(rows []engine.ImportRow) {
	for _, x := range st.erasing {
		for _, row := range rows {
			post := uint64(row.Post)
			was, err := st.likes.Unreact(x.user, post)
			st.noteErr(err)
			if was != counters.NoKind {
				st.likes.Scrub(post)
				if was != counters.Like {
					st.addReaction(ops.ReactionDelta{Post: row.Post, Kind: was, Delta: -1})
				}
			}
			if removed, err := st.favs.Remove(x.user, post); err != nil {
				st.noteErr(err)
			} else if removed {
				st.favs.Scrub(post)
			}
		}
	}
}

// ERAS: the erasures under way, in order: u user, u phase, u cursor post,
// u cursor user.
func writeErasures(e *enc, st *state) {
	for _, x := range st.erasing {
		e.start()
		e.u(x.user)
		e.u(uint64(x.phase))
		e.u(x.cursor.Post)
		e.u(x.cursor.User)
		e.end()
	}
}

func readErasures(sr *snapshot.SectionReader, pc *pacer, st *state) error {
	return eachItem(sr, pc, func(d *dec) {
		x := erasure{user: d.u("user"), phase: erasePhase(d.u("phase")), cursor: tier.Cursor{Post: d.u("cursor"), User: d.u("cursor user")}}
		switch {
		case d.err != "":
		case x.user == 0 || x.phase >= phaseDone:
			d.fail("bad erasure")
		case st.isErasing(x.user):
			d.fail(fmt.Sprintf("user %d erased twice", x.user))
		default:
			st.erasing = append(st.erasing, x)
		}
	})
}

// REPO: the reposts' originals: u repost, u original.
func writeOrigins(e *enc, st *state) {
	st.origins.Range(func(repost uint64, orig int64) bool {
		e.start()
		e.u(repost)
		e.u(uint64(orig))
		e.end()
		return true
	})
}

func readOrigins(sr *snapshot.SectionReader, pc *pacer, st *state) error {
	n := 0
	err := eachItem(sr, pc, func(d *dec) {
		repost, orig := d.u("repost"), d.u("original")
		switch {
		case d.err != "":
		case repost == 0 || orig == 0 || orig > 1<<63-1:
			d.fail("bad repost")
		case st.origins.Has(repost):
			d.fail(fmt.Sprintf("repost %d listed twice", repost))
		default:
			st.origins.Set(repost, int64(orig))
			n++
		}
	})
	if err != nil {
		return err
	}
	st.origins.Compact()
	return checkLen(sr, n)
}

// The lifecycle's records' encodings (record.go has the format).

func (r *deleteCommentRec) appendTo(b []byte) []byte {
	b = appendFlag(appendID(b, r.Actor.User), r.Actor.Privileged)
	return appendID(appendID(b, r.Post), r.Comment)
}

func (r *deleteCommentRec) readFrom(d *decoder) {
	r.Actor = engine.Actor{User: engine.UserID(d.id("actor")), Privileged: d.flag("privileged")}
	r.Post, r.Comment = engine.PostID(d.id("post")), engine.CommentID(d.id("comment"))
}

func (r *deletePostRec) appendTo(b []byte) []byte {
	return appendID(appendFlag(appendID(b, r.Actor.User), r.Actor.Privileged), r.Post)
}

func (r *deletePostRec) readFrom(d *decoder) {
	r.Actor = engine.Actor{User: engine.UserID(d.id("actor")), Privileged: d.flag("privileged")}
	r.Post = engine.PostID(d.id("post"))
}

func (r *eraseRec) appendTo(b []byte) []byte { return appendID(b, r.User) }

func (r *eraseRec) readFrom(d *decoder) { r.User = engine.UserID(d.id("user")) }

// An erasure step: u user, 1 byte phase, 1 byte phase end (0 or 1), u
// next post, u next user, u n, n × u key.
func (r *eraseStepRec) appendTo(b []byte) []byte {
	b = append(appendID(b, r.user), byte(r.phase))
	b = appendFlag(b, r.phaseEnd)
	b = appendID(appendID(b, r.next.Post), r.next.User)
	return appendIDs(b, r.keys)
}

func (r *eraseStepRec) readFrom(d *decoder) {
	r.user = d.id("user")
	if p := d.bytes(1, "phase"); p != nil {
		if r.phase = erasePhase(p[0]); r.phase >= phaseDone {
			d.fail(fmt.Sprintf("erasure phase %d", p[0]))
		}
	}
	r.phaseEnd = d.flag("phase end")
	r.next = tier.Cursor{Post: d.uvarint("next"), User: d.uvarint("next user")}
	r.keys = readIDs(d, r.keys, false, "key")
}
