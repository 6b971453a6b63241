package ops

import (
	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/counters"
)

// CountDelta adds Delta to counter Field of Post. A backend clamps a
// counter at zero (a delta never takes it below).
type CountDelta struct {
	Post  engine.PostID
	Field counters.Field
	Delta int64
}

// Registration enters Post in the registry of posts, by Author, and adds
// one to the posts Author has made (which is what followers' feed unread
// sums; the post count shown is those made less those deleted). A
// repost remembers its Original (0: none), which loses a repost when the
// repost is deleted.
type Registration struct {
	Post     engine.PostID
	Author   engine.UserID
	Original engine.PostID
}

// Unregistration takes Post out of the registry (DeletePost): it reads
// as unknown from then on and its id is never taken again (a backend
// remembers deleted ids); its like, favorite and comment sets are
// forgotten (a backend may free them lazily, but never reads them
// again); Author's deleted posts grow by one (0: no author, nothing to
// count).
type Unregistration struct {
	Post   engine.PostID
	Author engine.UserID
}

// CommentMark records Comment, an app's comment id, on Post: counted,
// written by Writer (Deleted false), or moved from the counted ids to the
// deleted ones (Deleted true; Writer unused). The writer's record is what
// lets the writer delete it; it is kept after the delete.
type CommentMark struct {
	Post    engine.PostID
	Comment engine.CommentID
	Writer  engine.UserID
	Deleted bool
}

// SetKind names a per-user membership set a Removal takes a member out of.
type SetKind uint8

const (
	LikeSet     SetKind = iota + 1 // (user, post): reactions, likes among them
	FavoriteSet                    // (user, post): favorites
	WriterSet                      // (user, comment): who wrote a counted comment
)

// Removal takes User's membership (User, Key) out of set Set: a like or
// favorite of post Key, or the writer record of comment Key. Its count,
// if any, is a CountDelta of its own.
type Removal struct {
	Set  SetKind
	User engine.UserID
	Key  uint64
}

// ReactionSet makes Kind User's one reaction on Post (NoKind: none
// left). The counts it moves are the CountDelta (like) and ReactionDelta
// (the other kinds) of the same Effects, applied with it in one step.
type ReactionSet struct {
	Post engine.PostID
	User engine.UserID
	Kind counters.Kind
}

// ReactionDelta adds Delta to Post's count of Kind, a reaction kind
// other than like (like's count is the post's likes, a CountDelta). A
// backend clamps it at zero, as a CountDelta.
type ReactionDelta struct {
	Post  engine.PostID
	Kind  counters.Kind
	Delta int64
}

// Erasure starts (Done false) or ends an erasure of User. Starting (or
// asking again while one is under way) drops every record keyed by the
// user — unread counters, system cursor,
// red-dot click, post, deleted-post and follower counts, idempotency
// records where a backend keys them by user — and marks the user as being
// erased, which every read honours: what is left of the user (likes,
// favorites, follow edges, group places, authorship) reads as gone until
// the steps remove it. Ending unmarks the user.
type Erasure struct {
	User engine.UserID
	Done bool
}

// Bump adds one to User's unread counter Kind (Mentions, Comments, Likes
// or Messages).
type Bump struct {
	User engine.UserID
	Kind engine.UnreadKind
}

// FollowerDelta adds Delta to User's follower count.
type FollowerDelta struct {
	User  engine.UserID
	Delta int64
}

// FollowEdge adds (Add) or removes Viewer's follow of Target. An added
// edge starts Viewer's feed snapshot of Target at Snapshot, Target's post
// count when the follow was decided.
type FollowEdge struct {
	Viewer, Target engine.UserID
	Add            bool
	Snapshot       int64
}

// ReadMark clears one of User's badges (MarkRead): a counter kind is set
// to zero; System moves the user's cursor to Cursor (the backend's
// position of its newest notification); Feed refreshes the user's
// snapshot of every followee to their current post count.
type ReadMark struct {
	User   engine.UserID
	Kind   engine.UnreadKind
	Cursor uint64
}

// Fanout bumps unread Kind of every current member of Group except
// Except (the sender), as the group is when the effect is applied, and
// tells them in one UnreadChanged event. It is one effect rather than a
// bump per member so that a backend walks its own member structure once.
type Fanout struct {
	Group  engine.GroupID
	Except engine.UserID
	Kind   engine.UnreadKind
}

// Effects are what one operation changes. The zero value changes nothing.
// A backend keeps one and Resets it between operations, so appending to
// it does not allocate once warm.
type Effects struct {
	Counts []CountDelta
	// Reacts set users' reactions, ReactionCounts count the kinds other
	// than like (ReactToPost, UnreactToPost, erasures).
	Reacts         []ReactionSet
	ReactionCounts []ReactionDelta
	Registers      []Registration
	Bumps          []Bump
	Followers      []FollowerDelta
	Follows        []FollowEdge
	Reads          []ReadMark
	Fanouts        []Fanout
	Clicks         []Click
	// Push is the new red-dot push stamp (0: no push).
	Push int64
	// Joins and Leaves change group membership: a new member takes the
	// next mapid, a returning one their old mapid; leaving marks the
	// member quit, keeping the mapid.
	Joins  []Membership
	Leaves []Membership
	// Receipts mark messages read by a member they count (MarkReceipt).
	Receipts []ReceiptRead
	// Unregisters take posts out of the registry (DeletePost).
	Unregisters []Unregistration
	// CommentMarks record counted and deleted comment ids.
	CommentMarks []CommentMark
	// Erasures start and end erasures; Removals, Unauthors (posts whose
	// author is cleared), GroupErasures (a user leaves the group and no
	// list of it names them again: their mapid keeps counting in the
	// receipts recorded) and SenderErasures (messages whose sender is
	// cleared) are an erasure's steps.
	Erasures       []Erasure
	Removals       []Removal
	Unauthors      []engine.PostID
	GroupErasures  []Membership
	SenderErasures []engine.MessageID
	// Events are for subscribers, published once the effects are
	// durable. Users slices of the events are freshly allocated: events
	// outlive the buffer.
	Events []engine.Event
	// Quiet makes Decide record no events, only how many it would have
	// (replaying a log: nobody is listening), which spares allocating
	// their user lists. Reset keeps it.
	Quiet bool
	// quieted counts the events left out while Quiet, so that Empty
	// judges a quiet decision as it would a live one.
	quieted int
}

// Reset empties e, keeping its capacity.
func (e *Effects) Reset() {
	e.Counts = e.Counts[:0]
	e.Reacts = e.Reacts[:0]
	e.ReactionCounts = e.ReactionCounts[:0]
	e.Registers = e.Registers[:0]
	e.Bumps = e.Bumps[:0]
	e.Followers = e.Followers[:0]
	e.Follows = e.Follows[:0]
	e.Reads = e.Reads[:0]
	e.Fanouts = e.Fanouts[:0]
	e.Clicks = e.Clicks[:0]
	e.Push = 0
	e.Joins = e.Joins[:0]
	e.Leaves = e.Leaves[:0]
	e.Receipts = e.Receipts[:0]
	e.Unregisters = e.Unregisters[:0]
	e.CommentMarks = e.CommentMarks[:0]
	e.Erasures = e.Erasures[:0]
	e.Removals = e.Removals[:0]
	e.Unauthors = e.Unauthors[:0]
	e.GroupErasures = e.GroupErasures[:0]
	e.SenderErasures = e.SenderErasures[:0]
	e.Events = e.Events[:0]
	e.quieted = 0
}

// Empty reports whether e changes nothing and tells nobody.
func (e *Effects) Empty() bool {
	return len(e.Counts)+len(e.Reacts)+len(e.ReactionCounts)+len(e.Registers)+len(e.Bumps)+len(e.Followers)+len(e.Follows)+
		len(e.Reads)+len(e.Fanouts)+len(e.Clicks)+len(e.Joins)+len(e.Leaves)+len(e.Receipts)+
		len(e.Unregisters)+len(e.CommentMarks)+len(e.Erasures)+len(e.Removals)+len(e.Unauthors)+
		len(e.GroupErasures)+len(e.SenderErasures)+
		len(e.Events)+e.quieted == 0 && e.Push == 0
}

func (e *Effects) count(post engine.PostID, f counters.Field, d int64) {
	e.Counts = append(e.Counts, CountDelta{Post: post, Field: f, Delta: d})
}

// register enters a new post by author (a repost of original, when not
// 0); its followers learn of it.
func (e *Effects) register(post engine.PostID, author engine.UserID, original engine.PostID) {
	e.Registers = append(e.Registers, Registration{Post: post, Author: author, Original: original})
	e.emit(engine.Event{Kind: engine.AuthorPosted, Author: author})
}

// emit records ev, or only counts it when e is Quiet.
func (e *Effects) emit(ev engine.Event) {
	if e.Quiet {
		e.quieted++
		return
	}
	e.Events = append(e.Events, ev)
}

// wakeOne tells one user their badges changed.
func (e *Effects) wakeOne(u engine.UserID) {
	if e.Quiet {
		e.quieted++
		return
	}
	e.Events = append(e.Events, engine.Event{Kind: engine.UnreadChanged, Users: []engine.UserID{u}})
}

func (e *Effects) bump(u engine.UserID, k engine.UnreadKind) {
	e.Bumps = append(e.Bumps, Bump{User: u, Kind: k})
}

// unreadChanged tells users their badges changed (none: no event).
func (e *Effects) unreadChanged(users []engine.UserID) {
	if len(users) > 0 {
		e.emit(engine.Event{Kind: engine.UnreadChanged, Users: users})
	}
}

func (e *Effects) broadcast() {
	e.emit(engine.Event{Kind: engine.Broadcast})
}
