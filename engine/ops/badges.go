package ops

import (
	"fmt"
	"time"

	"github.com/tally-dev/tally/engine"
)

// Follow is a follow (Undo false) or unfollow (Undo true) of Target by
// Viewer.
type Follow struct {
	Viewer, Target engine.UserID
	Undo           bool
}

// Check validates the call: nobody follows user 0 or themselves.
func (op *Follow) Check() error {
	if err := engine.CheckViewer(op.Viewer); err != nil {
		return err
	}
	if op.Target == 0 || op.Target == op.Viewer {
		return fmt.Errorf("%w: cannot follow user %d", engine.ErrInvalid, uint64(op.Target))
	}
	return nil
}

// FollowFacts are what a follow reads: whether Viewer follows Target now,
// and Target's post count.
type FollowFacts struct {
	Following   bool
	TargetPosts int64
}

// Decide: a repeat changes nothing. Following starts the viewer's feed
// snapshot of the target at the target's current post count (old posts
// are not unread); unfollowing drops the target from the sum. Either
// changes the target's follower count and which posts concern the
// viewer's subscriptions.
func (op *Follow) Decide(f FollowFacts, eff *Effects) {
	if f.Following != op.Undo {
		return
	}
	d := int64(1)
	if op.Undo {
		d = -1
	}
	eff.Follows = append(eff.Follows, FollowEdge{Viewer: op.Viewer, Target: op.Target, Add: !op.Undo, Snapshot: f.TargetPosts})
	eff.Followers = append(eff.Followers, FollowerDelta{User: op.Target, Delta: d})
	if eff.Quiet {
		eff.quieted++
		return
	}
	eff.Events = append(eff.Events, engine.Event{Kind: engine.FollowsChanged,
		Users: []engine.UserID{op.Viewer}, Author: op.Target})
}

// MarkRead clears one of Viewer's badges.
type MarkRead struct {
	Viewer engine.UserID
	Kind   engine.UnreadKind
}

// Check validates the call.
func (op *MarkRead) Check() error {
	if err := engine.CheckViewer(op.Viewer); err != nil {
		return err
	}
	if op.Kind < engine.Mentions || op.Kind > engine.Feed {
		return fmt.Errorf("%w: unknown unread kind %d", engine.ErrInvalid, op.Kind)
	}
	return nil
}

// Decide: MENTIONS/COMMENTS/LIKES/MESSAGES reset their counters; SYSTEM
// moves the cursor to newest (the backend's position of its newest
// notification); FEED refreshes the snapshot of every followee. Marking
// read is not activity (engine.CursorExpired): only reading badges is.
func (op *MarkRead) Decide(newest uint64, eff *Effects) {
	m := ReadMark{User: op.Viewer, Kind: op.Kind}
	if op.Kind == engine.System {
		m.Cursor = newest
	}
	eff.Reads = append(eff.Reads, m)
	eff.wakeOne(op.Viewer)
}

// Click is a user's red-dot click: the push stamp they have now seen.
type Click struct {
	User  engine.UserID
	Stamp int64
}

// ClickRedDot records that Viewer saw the red dot.
type ClickRedDot struct{ Viewer engine.UserID }

// Check validates the call.
func (op *ClickRedDot) Check() error { return engine.CheckViewer(op.Viewer) }

// Decide: the viewer's click takes the current push stamp, so the dot
// is off until the next push (RedDot).
func (op *ClickRedDot) Decide(push int64, eff *Effects) {
	eff.Clicks = append(eff.Clicks, Click{User: op.Viewer, Stamp: push})
	eff.wakeOne(op.Viewer)
}

// PushRedDot lights every user's red dot at once: one stamp, O(1).
type PushRedDot struct{}

// Decide returns the new push stamp from the clock (now) and the stamp in
// force (last): stamps only grow, so two pushes in one tick are still
// two pushes and every click before them is older.
func (PushRedDot) Decide(now, last int64, eff *Effects) int64 {
	stamp := max(now, last+1)
	eff.Push = stamp
	eff.broadcast()
	return stamp
}

// RedDot is the red-dot rule: on when the last push is newer than the
// user's last click (a user who never clicked, click 0, sees any push).
func RedDot(push, click int64) bool { return push > click }

// Publish appends a system notification to the shared list: O(1) in
// users, every user's badge may change.
type Publish struct {
	Title, Body, IdemKey string
}

// Check validates the notification.
func (op *Publish) Check() error {
	if err := engine.CheckNotification(op.Title, op.Body); err != nil {
		return err
	}
	return engine.CheckIdemKey(op.IdemKey)
}

// Decide: the notification joins the list; everyone is told.
func (op *Publish) Decide(eff *Effects) { eff.broadcast() }

// CursorFacts are what reading a user's badges knows of their system
// cursor: whether they have one and when they were last active (zero:
// never).
type CursorFacts struct {
	HasCursor  bool
	LastActive time.Time
}

// Touch is what a badge read owes the viewer's record.
type Touch struct {
	// Stamp: the activity stamp is older than today and becomes now.
	Stamp bool
	// ResetCursor: the viewer has no live cursor (new, or idle past the
	// TTL) and starts at the newest notification.
	ResetCursor bool
}

// Needed reports whether the record must be written.
func (t Touch) Needed() bool { return t.Stamp || t.ResetCursor }

// DecideTouch is the system-notification cursor rule, run on every badge
// read at now with the cursor TTL in force: a user without a live cursor
// (engine.CursorExpired) starts at the newest notification and reads 0
// system unread; the activity stamp is kept per day, so a polling client
// writes at most once a day.
func DecideTouch(f CursorFacts, now time.Time, ttl time.Duration) Touch {
	live := CursorLive(f, now, ttl)
	return Touch{
		Stamp:       !live || f.LastActive.Before(engine.ActivityDayStart(now)),
		ResetCursor: !live,
	}
}

// CursorLive reports whether a user's cursor still counts at now.
func CursorLive(f CursorFacts, now time.Time, ttl time.Duration) bool {
	return f.HasCursor && !engine.CursorExpired(f.LastActive, now, ttl)
}

// UnreadFacts are what a badge read gathered.
type UnreadFacts struct {
	Mentions, Comments, Likes, Messages int64
	// CursorLive: the viewer's system cursor counts (CursorLive); Newer is
	// how many notifications are newer than it.
	CursorLive bool
	Newer      int64
	// FolloweePosts[i] is followee i's post count now, Snapshots[i] the
	// count when the viewer last caught up.
	FolloweePosts, Snapshots []int64
	Push, Click              int64
}

// Unread computes a viewer's badges from what their backend read.
func Unread(f UnreadFacts) engine.Unread {
	u := engine.Unread{
		Mentions: f.Mentions, Comments: f.Comments, Likes: f.Likes, Messages: f.Messages,
		Feed:   engine.FeedUnread(f.FolloweePosts, f.Snapshots),
		RedDot: RedDot(f.Push, f.Click),
	}
	if f.CursorLive {
		u.System = f.Newer
	}
	return u
}
