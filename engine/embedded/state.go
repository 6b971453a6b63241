package embedded

import (
	"unsafe"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/counters"
	"github.com/tally-dev/tally/engine/follows"
	"github.com/tally-dev/tally/engine/ops"
	"github.com/tally-dev/tally/engine/table"
	"github.com/tally-dev/tally/engine/tier"
	"github.com/tally-dev/tally/engine/usercounts"
)

// pair keys the (user, post) like and favorite sets and the (group, user)
// membership table.
type pair [2]uint64

func hashU64(k uint64) uint64 { return table.Mix64(k) }
func hashPair(k pair) uint64  { return table.HashPair(k[0], k[1]) }

// state is everything the engine knows, changed only by apply. It holds no
// pointers between its parts (ids and slice indices only), so it can be
// serialized and rebuilt. Not safe for concurrent use: the engine locks.
type state struct {
	// posts is the post table: a post's author (0: imported without one)
	// and counts in one record, so a page is one lookup a post.
	posts *tier.Posts
	// counted is how many posts have a non-zero count.
	counted int64
	// imported spans the posts whose counts an import wrote: their likes
	// and favorites are not derived from the sets (check.go).
	imported engine.ImportSpan
	likes    *tier.Set // (user, post), in the post table's time windows
	favs     *tier.Set
	// deleted, comments, uncounted, writers, origins and unposted are the
	// lifecycle's (lifecycle.go): deleted post ids, counted and deleted
	// comment ids by post, comment writers, reposts' originals, authors'
	// deleted posts.
	deleted   *tier.Set
	comments  *tier.Set
	uncounted *tier.Set
	writers   *tier.Set
	origins   *usercounts.Table
	unposted  *usercounts.Table
	// erasing are the users being erased, with their progress.
	erasing []erasure
	// err is the first error a tiered store's cold file returned while
	// applying a record (see Engine.commit).
	err error

	badges *table.Table[userKey, badgeRec]  // users with unread counts
	seens  *table.Table[userKey, seenRec]   // users who have read their badges
	clicks *table.Table[userKey, [2]uint32] // Unix ns of a user's last red-dot click (low, high word)
	wide   *table.Table[uint64, [4]int64]   // unread counters past 32 bits (badgeRec)
	// posted is each author's post count, held only for users who have
	// posted; followers each followed user's follower count, held for
	// users ever followed (0 after unfollows only when the user has no
	// other public counter, so that they stay known).
	posted    *usercounts.Table
	followers *usercounts.Table
	// follows is each viewer's followee list with the followee's post
	// count when the viewer last caught up (the feed snapshot): packed,
	// pointer-free (engine/follows).
	follows *follows.Store
	nusers  int64 // distinct users in badges ∪ seens ∪ clicks ∪ posted ∪ followers ∪ follows

	notifs    []notif // sorted by id
	notifText []byte
	push      int64 // Unix ns of the last red-dot push; 0: never

	groups    *table.Table[uint64, uint32] // group → index in groupList
	groupList []group
	members   *table.Table[pair, uint32]   // (group, user) → mapid
	msgs      *table.Table[uint64, uint32] // message → index in msgList
	msgList   []message
	msgText   []byte
	rcBytes   int // receipts' SizeBytes summed, for MemoryBytes

	idem  *table.Table[idemKey, idemVal]
	idemQ []idemExpiry // in time order; idemQ[idemHead:] are live
	// idemHead is where the queue's live part starts.
	idemHead int

	// eff holds the effects of the record being prepared or applied
	// (decide), reused so that deciding does not allocate once warm;
	// msgFacts likewise holds a MarkMessagesRead's facts.
	eff      ops.Effects
	msgFacts []ops.MessageFacts
	// readErr is the first error a cold block (of the post table or a
	// like set) gave while facts were read, until taken (takeReadErr).
	readErr error

	// held is the snapshot's cut the state is frozen under (cut.go), nil
	// when none is out: until its thaw nothing it shares is written in
	// place.
	held *cut
}

// newState makes an empty state whose time-windowed tables are kept as tc
// says.
func newState(tc tables) *state {
	return newSizedState(tc, stateSizes{origins: 8, users: 1024, posted: 1024, groups: 64, msgs: 256, idem: 256})
}

// stateSizes are the initial sizes of a state's hashed tables that a
// snapshot's sections tell ahead of reading them.
type stateSizes struct {
	origins, users, posted, groups, msgs, idem int
}

// newSizedState makes an empty state with its hashed tables sized as
// sizes says.
func newSizedState(tc tables, sizes stateSizes) *state {
	return &state{
		posts:     newPosts(tc),
		likes:     newSet(tc, "LIKE"),
		favs:      newSet(tc, "FAVS"),
		deleted:   newSet(tc, "PDEL"),
		comments:  newSet(tc, "CMNT"),
		uncounted: newSet(tc, "CMDL"),
		writers:   newSet(tc, "CMWR"),
		origins:   usercounts.New(sizes.origins),
		unposted:  usercounts.New(8),
		badges:    table.New[userKey, badgeRec](hashUserKey, sizes.users),
		seens:     table.New[userKey, seenRec](hashUserKey, sizes.users),
		clicks:    table.New[userKey, [2]uint32](hashUserKey, 8),
		wide:      table.New[uint64, [4]int64](hashU64, 8),
		posted:    usercounts.New(sizes.posted),
		followers: usercounts.New(8),
		follows:   tc.follows(),
		groups:    table.New[uint64, uint32](hashU64, sizes.groups),
		members:   table.New[pair, uint32](hashPair, 256),
		msgs:      table.New[uint64, uint32](hashU64, sizes.msgs),
		idem:      table.New[idemKey, idemVal](hashIdem, sizes.idem),
	}
}

// known reports whether u has any state, for the Users statistic.
func (st *state) known(u uint64) bool {
	return st.hasUserRec(u) || st.posted.Has(u) || st.followers.Has(u) || st.follows.Has(u)
}

// decide reads the facts r's operation needs from the state and runs its
// Decide (engine/ops) into st.eff, which it resets first. The live write
// path calls it while preparing r, replay just before applying r: the
// state is the same both times, so is the decision. quiet (replay)
// leaves the events out: nobody is listening, and building their user
// lists was most of replay's allocations.
func (st *state) decide(r record, quiet bool) error {
	st.eff.Reset()
	st.eff.Quiet = quiet
	switch r := r.(type) {
	case *createPostRec:
		return st.decideCreatePost(r)
	case *reactRec:
		return st.decideReact(r)
	case *unreactRec:
		return st.decideUnreact(r)
	case *favoriteRec:
		return st.decideFavorite(r)
	case *commentRec:
		return st.decideComment(r)
	case *repostRec:
		return st.decideRepost(r)
	case *viewsRec:
		st.decideViews(r)
	case *followRec:
		st.decideFollow(r)
	case *markReadRec:
		r.Decide(st.newestNotif(), &st.eff)
	case *clickRec:
		r.Decide(st.push, &st.eff)
	case *pushRec:
		r.Decide(r.time, st.push, &st.eff)
	case *publishRec:
		r.Decide(&st.eff)
	case *createGroupRec:
		r.Decide(&st.eff)
	case *addMembersRec:
		return st.decideAddMembers(r)
	case *leaveGroupRec:
		return st.decideLeaveGroup(r)
	case *sendMessageRec:
		return st.decideSendMessage(r)
	case *markMessagesReadRec:
		return st.decideMarkMessagesRead(r)
	case *deleteCommentRec:
		return st.decideDeleteComment(r)
	case *deletePostRec:
		return st.decideDeletePost(r)
	case *eraseRec:
		r.Decide(st.isErasing(uint64(r.User)), &st.eff)
	case *eraseStepRec:
		return st.decideEraseStep(r)
	}
	// touch, sweep, import and recount carry their decision in the record.
	return nil
}

// alwaysLogged reports whether r is logged even when its effects are
// empty: an erasure step records its progress.
func alwaysLogged(r record) bool {
	_, ok := r.(*eraseStepRec)
	return ok
}

// hasEffects reports whether r's kind changes the state through ops
// Effects (decide), rather than by a decision its record carries.
func hasEffects(r record) bool {
	switch r.(type) {
	case *touchRec, *sweepRec, *importRec, *recountRec, *kindsRec:
		return false
	}
	return true
}

// apply performs r on the state. It is deterministic: the result depends
// only on the state and r, so replaying the log rebuilds the state
// exactly. decided says st.eff already holds r's decision (the live write
// path decided while preparing, on this same state); otherwise (replay)
// apply decides first. A record whose operation changes nothing records
// nothing, not even its idempotency key. When out is non-nil (live
// commits, not replay) apply appends the events r causes.
func (st *state) apply(r record, out *[]engine.Event, decided bool) {
	h, _, result, _ := recordInfo(r)
	st.expireIdem(h.time)
	if hasEffects(r) {
		if !decided {
			err := st.decide(r, out == nil)
			st.noteErr(st.takeReadErr())
			if err != nil {
				return
			}
		}
		if st.eff.Empty() && !alwaysLogged(r) {
			return
		}
	}
	// The record's own change, beside its effects.
	switch r := r.(type) {
	case *favoriteRec:
		st.applyFlag(st.favs, r.Viewer, r.Post, r.Undo)
	case *touchRec:
		st.applyTouch(r)
	case *publishRec:
		st.applyPublish(r)
	case *createGroupRec:
		st.newGroup(r)
	case *sendMessageRec:
		st.storeMessage(r)
	case *sweepRec:
		st.sweepCursors(r.time, r.ttl)
	case *importRec:
		st.importRows(r.rows, r.time)
	case *eraseStepRec:
		st.applyEraseStep(r)
	case *recountRec:
		st.applyRecount(r)
	case *kindsRec:
		st.posts.PutKinds(r.kinds)
	}
	if hasEffects(r) {
		st.applyEffects(&st.eff, out)
	}
	if h.idem != (idemKey{}) {
		st.idem.Put(h.idem, idemVal{result: result, time: h.time, fp: h.fp})
		st.idemQ = append(st.idemQ, idemExpiry{h.time, h.idem})
	}
}

// applyEffects changes the state as eff says; it is the only place where
// an operation's effects reach the state. With out set it appends eff's
// events, and the fan-outs' own.
func (st *state) applyEffects(eff *ops.Effects, out *[]engine.Event) {
	for _, r := range eff.Reacts {
		st.applyReact(r)
	}
	for _, c := range eff.Counts {
		if len(st.erasing) > 0 && (c.Field == counters.Likes || c.Field == counters.Favorites) {
			st.settleErasures(c.Post, c.Field == counters.Favorites, eff.Removals)
		}
		st.addCount(c)
	}
	for _, c := range eff.ReactionCounts {
		if len(st.erasing) > 0 {
			st.settleErasures(c.Post, false, eff.Removals)
		}
		st.addReaction(c)
	}
	for _, r := range eff.Registers {
		st.noteErr(st.posts.SetAuthor(uint64(r.Post), uint64(r.Author)))
		st.addPosts(uint64(r.Author), 1)
		if r.Original != 0 {
			st.origins.Set(uint64(r.Post), int64(r.Original))
		}
	}
	for _, u := range eff.Unregisters {
		st.applyUnregister(u)
	}
	for _, m := range eff.CommentMarks {
		st.applyCommentMark(m)
	}
	for _, x := range eff.Erasures {
		if !x.Done {
			st.applyErasure(x)
		}
	}
	for _, x := range eff.Removals {
		st.applyRemoval(x)
	}
	for _, p := range eff.Unauthors {
		st.applyUnauthor(p)
	}
	for _, m := range eff.GroupErasures {
		st.applyGroupErasure(m)
	}
	for _, m := range eff.SenderErasures {
		st.applySenderErasure(m)
	}
	for _, b := range eff.Bumps {
		st.bump(uint64(b.User), counterOf(b.Kind))
	}
	for _, f := range eff.Follows {
		st.applyFollowEdge(f)
	}
	for _, f := range eff.Followers {
		st.addFollowers(uint64(f.User), f.Delta)
	}
	for _, m := range eff.Reads {
		st.applyRead(m)
	}
	for _, f := range eff.Fanouts {
		st.fanout(f, out)
	}
	for _, c := range eff.Clicks {
		st.setClick(uint64(c.User), c.Stamp)
	}
	if eff.Push != 0 {
		st.push = eff.Push
	}
	for _, j := range eff.Joins {
		st.addMember(j.Group, j.User)
	}
	for _, l := range eff.Leaves {
		st.removeMember(l.Group, l.User)
	}
	for _, r := range eff.Receipts {
		st.markReceipt(r)
	}
	// An erasure ends after its last step's changes.
	for _, x := range eff.Erasures {
		if x.Done {
			st.applyErasure(x)
		}
	}
	if out != nil {
		*out = append(*out, eff.Events...)
	}
}

// takeReadErr returns and forgets the first error a cold block gave while
// facts were read (postFacts, flagFact).
func (st *state) takeReadErr() error {
	err := st.readErr
	st.readErr = nil
	return err
}

func (st *state) noteErr(err error) {
	if err != nil && st.err == nil {
		st.err = err
	}
}

// fault returns the first cold-tier error met while applying records.
func (st *state) fault() error { return st.err }

// sets are the state's time-windowed pair sets.
func (st *state) sets() [6]*tier.Set {
	return [...]*tier.Set{st.likes, st.favs, st.deleted, st.comments, st.uncounted, st.writers}
}

// Record sizes for MemoryBytes.
const (
	sizeofNotif      = unsafe.Sizeof(notif{})
	sizeofIdemExpiry = unsafe.Sizeof(idemExpiry{})
	sizeofMessage    = unsafe.Sizeof(message{})
)
