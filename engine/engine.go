// Package engine defines Tally's store: the operations of the product
// (like, comment, follow, markRead, sendMessage, ...) and the types they
// speak in. It owns the contract every backend obeys; the product rules of
// API.md's Semantics section are stated here once and proven for every
// backend by the conformance suite in engine/enginetest.
//
// Backends:
//   - engine/embedded: the default, in-process engine (packed tables, log).
//   - engine/redisstore: the same operations on Redis / Redis Cluster.
//
// Authorisation that depends on stored state (group membership, the
// sender-only rule for receipts) is a product rule and lives in the
// backends behind this interface, reported as ErrForbidden. Authorisation
// that depends only on the caller's token (signed in, admin) is checked by
// the GraphQL layer before an operation reaches the engine.
package engine

import (
	"context"
	"errors"
	"time"

	"github.com/tally-dev/tally/engine/counters"
)

// UserID, PostID, GroupID, MessageID and NotificationID are unsigned 64-bit
// ids. Post, message and notification ids are snowflake-layout (see
// engine/snowflake); user ids come from the app's own auth.
type (
	UserID         uint64
	PostID         uint64
	GroupID        uint64
	MessageID      uint64
	NotificationID uint64
	// CommentID is the app's id of a comment (a snowflake, like post
	// ids): Tally counts a comment with an id at most once and can take
	// it back (DeleteComment).
	CommentID uint64
)

// Actor is who performs a mutation whose rule depends on ownership
// (DeleteComment, DeletePost): the signed-in user, and whether the token
// vouches for more than that user — an admin, or the app's own backend
// acting for the user (a service token) — which may delete what the user
// does not own. The GraphQL layer sets Privileged from the token's role;
// the engine judges ownership from what it stores.
type Actor struct {
	User       UserID
	Privileged bool
}

// Limits shared by every backend and the GraphQL layer.
const (
	MaxIDsPerCall    = 100  // posts(ids), recordViews, markMessagesRead, member lists
	MaxMentions      = 100  // mentions on one comment, repost or message
	MaxTextBytes     = 4096 // message text, notification body
	MaxTitleBytes    = 256  // notification title
	MaxIdemKeyBytes  = 128  // idempotency key
	MaxGroupMembers  = 1 << 20
	MaxPageSize      = 100
	IdempotencyTTL   = 24 * time.Hour
	DefaultCursorTTL = 30 * 24 * time.Hour
)

// Page sizes when the client gives none: the defaults of `first` in
// API.md, which the schema states too (e2e's
// TestSchemaPageDefaultsAreTheEngines holds the three together).
const (
	// DefaultMemberPageSize pages a group's members and a message's
	// readers and unreaders: Group.members, ReadReceipts.readers and
	// ReadReceipts.unreaders(first: Int = 50).
	DefaultMemberPageSize = 50
	// DefaultNotificationPageSize pages the system notifications:
	// systemNotifications(first: Int = 20).
	DefaultNotificationPageSize = 20
)

// Counts are the five counters of one post. A post that has none reads as
// the zero value and costs no memory.
type Counts struct {
	Likes, Comments, Reposts, Views, Favorites int64
}

// IsZero reports whether every counter is zero.
func (c Counts) IsZero() bool { return c == Counts{} }

// Field returns the counter f names, or nil for a field that is not one
// of the five.
func (c *Counts) Field(f counters.Field) *int64 {
	switch f {
	case counters.Likes:
		return &c.Likes
	case counters.Comments:
		return &c.Comments
	case counters.Reposts:
		return &c.Reposts
	case counters.Views:
		return &c.Views
	case counters.Favorites:
		return &c.Favorites
	}
	return nil
}

// PostInfo is what the registry of posts knows about one post.
type PostInfo struct {
	Exists bool
	Author UserID // 0 for a post imported without its author
}

// PageWant says what a feed page needs beyond the registry, which every
// page reads (it says which posts exist and who wrote them).
type PageWant struct {
	Counts, Liked, Favorited bool
	// Reactions asks for each post's count of every reaction kind,
	// ViewerReaction for the viewer's kind on it.
	Reactions, ViewerReaction bool
}

// PostView is one post of a feed page as Page reads it.
type PostView struct {
	PostInfo
	Counts           Counts
	Liked, Favorited bool
	Reactions        Reactions
	// ViewerReaction is the viewer's reaction kind on the post, one of
	// Store.ReactionKinds ("" none).
	ViewerReaction string
}

// Reactions are a post's counts of the deployment's reaction kinds, in
// the order of Store.ReactionKinds: Count[i] is kind i's (like's is the
// post's likes). A fixed array, so that a page read holds them without
// allocating.
type Reactions struct {
	Count [counters.MaxKinds]int64
}

// UserCounts are the per-user counters shown on a profile.
type UserCounts struct {
	Posts, Followers, Following int64
}

// UnreadKind names one badge.
type UnreadKind uint8

const (
	Mentions UnreadKind = iota + 1
	Comments
	Likes
	Messages
	System
	Feed
)

func (k UnreadKind) String() string {
	switch k {
	case Mentions:
		return "MENTIONS"
	case Comments:
		return "COMMENTS"
	case Likes:
		return "LIKES"
	case Messages:
		return "MESSAGES"
	case System:
		return "SYSTEM"
	case Feed:
		return "FEED"
	}
	return "UNKNOWN"
}

// Unread is a viewer's badge state.
type Unread struct {
	Mentions, Comments, Likes, Messages, System, Feed int64
	RedDot                                            bool
}

// Total is the sum of the six counts.
func (u Unread) Total() int64 {
	return u.Mentions + u.Comments + u.Likes + u.Messages + u.System + u.Feed
}

// Notification is one entry of the shared system-notification list.
type Notification struct {
	ID        NotificationID
	Title     string
	Body      string
	CreatedAt time.Time
}

// Group is a group as Group reads it. Reading one costs the same whatever
// its size: Members holds only the first page.
type Group struct {
	ID GroupID
	// MemberCount is how many current members it has (not those who quit).
	MemberCount int
	// Members are its first current members in join (mapid) order, at most
	// MaxPageSize of them (every one when MemberCount <= MaxPageSize);
	// GroupMembers pages through the rest.
	Members []UserID
}

// Message is one group message.
type Message struct {
	ID     MessageID
	Group  GroupID
	Sender UserID
	Text   string
	SentAt time.Time
}

// Receipts are a message's read receipts. Counted members are those whose
// mapid is at most the message's maxid, who had not quit when it was sent,
// and who are not its sender. Readers and Unreaders are in mapid order and
// hold at most the limit passed to Receipts.
type Receipts struct {
	ReadCount, UnreadCount int
	Readers, Unreaders     []UserID
}

// Errors every backend returns; the GraphQL layer maps them to
// extensions.code. Wrap them with fmt.Errorf("...: %w", ErrX) to add detail:
// the wrapped message is shown to the client, so it must not leak internals.
var (
	ErrNotFound    = errors.New("not found")
	ErrForbidden   = errors.New("forbidden")
	ErrInvalid     = errors.New("invalid input")
	ErrUnavailable = errors.New("the store is unavailable")
)

// EventKind says what changed.
type EventKind uint8

const (
	// UnreadChanged: the unread badges or red dot of Users changed.
	UnreadChanged EventKind = iota + 1
	// AuthorPosted: Author's post count grew, so the feed unread of every
	// follower of Author changed. Subscribers resolve which of them are
	// connected; the engine never enumerates followers for this.
	AuthorPosted
	// Broadcast: a system notification or red-dot push changed every
	// user's badges at once. O(1) to publish.
	Broadcast
	// ReceiptsChanged: the read receipts of Message changed.
	ReceiptsChanged
	// FollowsChanged: Users[0] followed or unfollowed Author, which changes
	// both their feed badge and which AuthorPosted events concern them.
	FollowsChanged
)

// Event reports a change to subscribers. Events are delivered at most once,
// to subscribers connected when they happen; they carry no state, so a
// subscriber re-reads what it shows.
type Event struct {
	Kind    EventKind
	Users   []UserID
	Author  UserID
	Message MessageID
	// Cause is the traced write that made the event, where the backend
	// carries it (the embedded engine does; Redis's events do not).
	Cause Cause
}

// Store is Tally's engine. Every method is safe for concurrent use. Every
// mutation that returns nil is durable (as the backend's durability setting
// promises) and applied exactly once, even when retried with the same
// idempotency key. A key is bound to the kind and arguments of its first
// use (IdemFingerprint): the same key for anything else is ErrInvalid.
// Methods taking a viewer act as that signed-in user.
type Store interface {
	// Posts. CreatePost registers a post by viewer; id 0 asks the engine for
	// a fresh snowflake id. Supplying an existing post's id is ErrInvalid
	// unless it is a retry with the same idempotency key.
	CreatePost(ctx context.Context, viewer UserID, id PostID, idemKey string) (PostID, error)
	// Posts returns the registry entries of ids, in order.
	Posts(ctx context.Context, ids []PostID) ([]PostInfo, error)
	// Page reads a feed page — each post's registry entry and, as want
	// asks, its counts and viewer's like and favorite flags — into out,
	// which has len(ids) entries, as one engine operation: the values read
	// belong to one moment (one read lock, or one Redis pipeline), and ids
	// are validated once. Unknown posts read as the zero PostView. Viewer 0
	// (anonymous) reads false flags.
	Page(ctx context.Context, viewer UserID, ids []PostID, want PageWant, out []PostView) error
	// Counts returns the counters of ids, in order; unknown posts read zero.
	Counts(ctx context.Context, ids []PostID) ([]Counts, error)
	// Liked and Favorited report, in order, whether viewer liked /
	// favorited each post.
	Liked(ctx context.Context, viewer UserID, ids []PostID) ([]bool, error)
	Favorited(ctx context.Context, viewer UserID, ids []PostID) ([]bool, error)
	// Like adds viewer's like once (repeats change nothing) and bumps the
	// author's unread likes when viewer is not the author: it is
	// ReactToPost of "like", so it switches a reaction of another kind to
	// like. Unlike removes a like (not a reaction of another kind) and
	// leaves the author's unread alone. Liked reports a reaction of like. Favorite/Unfavorite likewise,
	// without unread effects. Unknown posts are ErrNotFound.
	Like(ctx context.Context, viewer UserID, post PostID) error
	Unlike(ctx context.Context, viewer UserID, post PostID) error
	Favorite(ctx context.Context, viewer UserID, post PostID) error
	Unfavorite(ctx context.Context, viewer UserID, post PostID) error
	// ReactionKinds lists the deployment's reaction kinds in display
	// order, like among them (-reactions).
	ReactionKinds() []string
	// ReactToPost makes kind (one of ReactionKinds, else ErrInvalid)
	// viewer's one reaction on post: a first reaction counts one under
	// its kind and, on someone else's post, adds one to the author's
	// unread likes; a switch from another kind moves one count from the
	// old kind to the new in one step (no reader sees both counted or
	// neither) and bumps nobody; the same kind again changes nothing.
	// Like is ReactToPost of "like", and Unlike removes a reaction only
	// when it is a like. Unknown posts are ErrNotFound.
	ReactToPost(ctx context.Context, viewer UserID, post PostID, kind string) error
	// UnreactToPost removes viewer's reaction on post, of whatever kind:
	// its kind loses one; the author's badge stays. None changes nothing.
	UnreactToPost(ctx context.Context, viewer UserID, post PostID) error
	// Comment counts one comment on post, bumps the author's unread
	// comments (if viewer is not the author) and each mentioned user's
	// unread mentions (not viewer's; duplicates count once). A comment
	// with an id (comment != 0, a snowflake) is counted at most once,
	// whoever sends it again: a comment id already counted on post, or
	// counted and deleted, changes nothing (and bumps nobody).
	Comment(ctx context.Context, viewer UserID, post PostID, comment CommentID, mentions []UserID, idemKey string) error
	// DeleteComment takes back the comment with id comment on post: −1 on
	// the post's comments, once (a repeat changes nothing). Unread badges
	// it bumped stay. Only the comment's writer, the post's author or a
	// privileged actor may delete it (ErrForbidden); an unknown post or a
	// comment id never counted on it is ErrNotFound.
	DeleteComment(ctx context.Context, actor Actor, post PostID, comment CommentID) error
	// DeletePost deletes post (its author or a privileged actor, else
	// ErrForbidden): it reads as unknown from then on and its id is never
	// taken again; the author's post count drops by one; a repost's
	// original loses one repost; its reactions (likes among them),
	// favorites and counted comment ids are forgotten. Followers' feed badges count posts made, not
	// posts kept: none goes below zero, a post made later counts as new
	// for every follower, and a deleted post that was unread may stay
	// counted until the follower reads their feed. A repeat changes
	// nothing; an id never known is ErrNotFound.
	DeletePost(ctx context.Context, actor Actor, post PostID) error
	// EraseUser erases user (callers check that the actor may: an admin
	// or a service): every reaction (likes among them), favorite and
	// comment-writer record of the user goes (each post's counts drop exactly once), every follow
	// edge both ways (follower and following counts drop), the user
	// leaves every group and no member or receipt list names them any
	// more (receipts already recorded stay counted; messages they sent
	// keep their text and lose their sender), their posts stay with no
	// author, and their badges, cursors, red-dot click, profile counts and
	// idempotency records are dropped. Every read answers as if all of it
	// happened when EraseUser returned, even where a backend finishes the
	// work in steps afterwards; calls by the user, or that follow or add
	// them to a group, wait until it is done. A repeat changes nothing.
	EraseUser(ctx context.Context, user UserID) error
	// Repost counts one repost on post, creates a new post by viewer and
	// returns its id; mentions as for Comment.
	Repost(ctx context.Context, viewer UserID, post PostID, mentions []UserID, idemKey string) (PostID, error)
	// RecordViews adds one view to each known post in ids (unknown ids are
	// ignored: views arrive from clients in bulk and are best-effort).
	RecordViews(ctx context.Context, ids []PostID) error

	// Users.
	UserCounts(ctx context.Context, ids []UserID) ([]UserCounts, error)
	// Follow starts viewer's feed snapshot of target at target's current
	// post count; following oneself is ErrInvalid; a repeat changes nothing.
	Follow(ctx context.Context, viewer, target UserID) error
	Unfollow(ctx context.Context, viewer, target UserID) error

	// Badges. Unread reads (and, for a user seen for the first time, sets
	// up) the viewer's badges.
	Unread(ctx context.Context, viewer UserID) (Unread, error)
	MarkRead(ctx context.Context, viewer UserID, kind UnreadKind) error
	ClickRedDot(ctx context.Context, viewer UserID) error
	PushRedDot(ctx context.Context) error
	PublishNotification(ctx context.Context, title, body, idemKey string) (Notification, error)
	// Notifications lists the shared list newest first, at most first
	// entries, starting after the id after (0 = from the newest).
	Notifications(ctx context.Context, first int, after NotificationID) ([]Notification, error)

	// Groups. Membership-dependent calls return ErrForbidden for
	// non-members and ErrNotFound for unknown groups/messages.
	CreateGroup(ctx context.Context, viewer UserID, members []UserID) (GroupID, error)
	AddGroupMembers(ctx context.Context, viewer UserID, group GroupID, users []UserID) error
	// LeaveGroup makes viewer, a current member, leave group, and returns
	// the group as its remaining members see it right after (as Group
	// reads it), in the same step as the leave: a join or leave by anyone
	// else comes wholly before or wholly after. Someone who is not a
	// current member, who never joined or who left already, is
	// ErrForbidden, as for every call that needs membership (leaving
	// again so changes nothing).
	LeaveGroup(ctx context.Context, viewer UserID, group GroupID) (Group, error)
	Group(ctx context.Context, viewer UserID, group GroupID) (Group, error)
	// GroupMembers lists a group's current members in join (mapid) order,
	// at most first of them (CheckPage), starting after the user after (0:
	// from the first member). after may have left since (the order never
	// changes); a user who never joined the group is ErrInvalid. A page
	// costs its own length (plus members who left in between), never the
	// group's size.
	GroupMembers(ctx context.Context, viewer UserID, group GroupID, first int, after UserID) ([]UserID, error)
	SendMessage(ctx context.Context, viewer UserID, group GroupID, text string, mentions []UserID, idemKey string) (Message, error)
	// Message returns a message for a member of its group.
	Message(ctx context.Context, viewer UserID, id MessageID) (Message, error)
	// MarkMessagesRead marks each message read by viewer (a member of its
	// group); it returns them in order.
	MarkMessagesRead(ctx context.Context, viewer UserID, ids []MessageID) ([]Message, error)
	// Receipts returns a message's receipts to its sender only, listing at
	// most limit readers and unreaders.
	Receipts(ctx context.Context, viewer UserID, id MessageID, limit int) (Receipts, error)
	// ReceiptMembers lists one page of a message's readers (readers true)
	// or unreaders, in mapid order, at most first of them (CheckPage),
	// starting after the user after (0: from the first); to its sender
	// only, as Receipts. An after who has no mapid in the group is
	// ErrInvalid.
	ReceiptMembers(ctx context.Context, viewer UserID, id MessageID, readers bool, first int, after UserID) ([]UserID, error)

	// Subscribe calls fn for every event from now until cancel is called.
	// fn must not block; it runs on the engine's delivery goroutine.
	Subscribe(fn func(Event)) (cancel func())
	// Followees lists whom viewer follows (used by subscribers to index
	// AuthorPosted events by author).
	Followees(ctx context.Context, viewer UserID) ([]UserID, error)

	// Ready reports whether the store can serve (nil) or why not.
	Ready(ctx context.Context) error
	// Stats reports sizes for /metrics.
	Stats() Stats
	// Close flushes and releases resources.
	Close() error
}

// Stats are sizes reported on /metrics.
type Stats struct {
	Posts         int64 // posts in the registry
	CountedPosts  int64 // posts with at least one non-zero counter
	Users         int64 // users with any state
	Groups        int64
	Messages      int64
	Notifications int64
	MemoryBytes   int64 // bytes held by the backend's tables, where known
	Erasures      int64 // user erasures under way
}

// ImportRow is one post's counts from an existing system (tally import).
type ImportRow struct {
	Post   PostID
	Author UserID // 0 when the source has no author column
	Counts Counts
	// Reactions are the post's counts of the reaction kinds other than
	// like (like's is Counts.Likes), by the kind ids of the importer's
	// kinds table (Importer.ImportKinds): a fixed array, so that a batch
	// of rows is one allocation whatever the kinds.
	Reactions counters.Reactions
}

// HasCounts reports whether the row carries a non-zero count, of the five
// or of a reaction kind.
func (r *ImportRow) HasCounts() bool { return !r.Counts.IsZero() || !r.Reactions.IsZero() }

// Importer is implemented by backends that can bulk-load existing counts.
// Import registers each post (with its author, or with none when Author is 0
// and a count is non-zero; a row with neither is skipped) and replaces —
// does not add to — its five counts and its count of every reaction kind
// (a kind the row has no count for reads 0 afterwards, as a missing count
// column does). Like sets and reactions are not imported: counts only. A
// post newly registered with an author adds one to that author's post
// count (a re-import does not). Import is durable when it returns.
type Importer interface {
	// ImportKinds is the kinds table the rows' Reactions are by: the
	// store's, as its configuration (-reactions) was reconciled with
	// what it holds at open. A count of a kind it does not have is
	// ErrInvalid.
	ImportKinds() counters.Kinds
	Import(ctx context.Context, rows []ImportRow) error
}
