package ops

import (
	"fmt"
	"time"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/counters"
)

// PostFacts are what a backend knows of the post an operation targets.
type PostFacts struct {
	Exists bool
	Author engine.UserID // 0: imported without its author, or its author was erased
	// Deleted: the post was deleted (DeletePost); Exists is false then.
	Deleted bool
}

func errPostNotFound(id engine.PostID) error {
	return fmt.Errorf("%w: post %d", engine.ErrNotFound, uint64(id))
}

func checkPostTarget(viewer engine.UserID, post engine.PostID) error {
	if err := engine.CheckViewer(viewer); err != nil {
		return err
	}
	if post == 0 {
		return fmt.Errorf("%w: post id 0", engine.ErrInvalid)
	}
	return nil
}

// CreatePost registers Post by Viewer. Post 0 asks the backend for a fresh
// id, which it fills in before Decide.
type CreatePost struct {
	Viewer  engine.UserID
	Post    engine.PostID
	IdemKey string
}

// Check validates the call: a client-supplied id must be a snowflake of
// a plausible time at now.
func (op *CreatePost) Check(now time.Time) error {
	if err := engine.CheckViewer(op.Viewer); err != nil {
		return err
	}
	if err := engine.CheckIdemKey(op.IdemKey); err != nil {
		return err
	}
	if op.Post != 0 {
		return engine.CheckPostID(op.Post, now)
	}
	return nil
}

// Decide: an id already taken — a post's, or a deleted post's, whose id
// is never reused — is invalid (a retry with the same idempotency key
// never gets here); otherwise the post is registered.
func (op *CreatePost) Decide(taken bool, eff *Effects) error {
	if taken {
		return fmt.Errorf("%w: post %d already exists or was deleted", engine.ErrInvalid, uint64(op.Post))
	}
	eff.register(op.Post, op.Viewer, 0)
	return nil
}

// FlagFacts are what a favorite reads: the post, and whether the
// viewer's flag on it is set already.
type FlagFacts struct {
	PostFacts
	Set bool
}

// Favorite is favorite (Undo false) or unfavorite (Undo true).
type Favorite struct {
	Viewer engine.UserID
	Post   engine.PostID
	Undo   bool
}

// Check validates the call.
func (op *Favorite) Check() error { return checkPostTarget(op.Viewer, op.Post) }

// Decide: favorites are de-duplicated per (user, post), so a favorite
// already there (or an unfavorite of none) changes nothing; there is no
// badge.
func (op *Favorite) Decide(f FlagFacts, eff *Effects) error {
	if !f.Exists {
		return errPostNotFound(op.Post)
	}
	if f.Set != op.Undo {
		return nil
	}
	d := int64(1)
	if op.Undo {
		d = -1
	}
	eff.count(op.Post, counters.Favorites, d)
	return nil
}

// Comment is one comment on Post by Viewer, mentioning Mentions; Comment
// is the app's id of it (0: none).
type Comment struct {
	Viewer   engine.UserID
	Post     engine.PostID
	Comment  engine.CommentID
	Mentions []engine.UserID
	IdemKey  string
}

// Check validates the call at now (a comment id must be a snowflake of a
// plausible time) and normalises Mentions (each user once, never the
// viewer).
func (op *Comment) Check(now time.Time) error {
	if err := checkPostTarget(op.Viewer, op.Post); err != nil {
		return err
	}
	if op.Comment != 0 {
		if err := engine.CheckCommentID(op.Comment, now); err != nil {
			return err
		}
	}
	return checkMentioning(op.Viewer, &op.Mentions, op.IdemKey)
}

// CommentFacts are what a comment reads: the post, and whether the
// comment's id (if it has one) was counted on it already, live or
// deleted since.
type CommentFacts struct {
	PostFacts
	Known bool
}

// Decide: +1 comment on the post; the author's unread comments +1 when
// the commenter is someone else; each mentioned user's unread mentions
// +1. A comment with an id is counted once, whoever sends it again: an
// id known on the post (counted, or counted and deleted) changes
// nothing. A counted id is recorded with its writer, who may delete it.
func (op *Comment) Decide(f CommentFacts, eff *Effects) error {
	if !f.Exists {
		return errPostNotFound(op.Post)
	}
	if op.Comment != 0 {
		if f.Known {
			return nil
		}
		eff.CommentMarks = append(eff.CommentMarks, CommentMark{Post: op.Post, Comment: op.Comment, Writer: op.Viewer})
	}
	eff.count(op.Post, counters.Comments, 1)
	var woken []engine.UserID
	if !eff.Quiet {
		woken = make([]engine.UserID, 0, len(op.Mentions)+1)
	}
	if f.Author != 0 && f.Author != op.Viewer {
		eff.bump(f.Author, engine.Comments)
		woken = wake(eff, woken, f.Author)
	}
	woken = mention(eff, op.Mentions, woken)
	eff.unreadChanged(woken)
	return nil
}

// checkMentioning checks what every mutation that mentions users carries:
// the mentions (normalised in place: each user once, never the actor)
// and the idempotency key.
func checkMentioning(actor engine.UserID, mentions *[]engine.UserID, idemKey string) error {
	m, err := engine.NormalizeMentions(actor, *mentions)
	if err != nil {
		return err
	}
	*mentions = m
	return engine.CheckIdemKey(idemKey)
}

// mention bumps the unread mentions of users (normalised) and returns
// woken with them appended.
func mention(eff *Effects, users, woken []engine.UserID) []engine.UserID {
	for _, u := range users {
		eff.bump(u, engine.Mentions)
		woken = wake(eff, woken, u)
	}
	return woken
}

// wake appends u to the users an event will tell. A Quiet decision
// builds no list (so no event either: its bumps already make it
// non-Empty).
func wake(eff *Effects, woken []engine.UserID, u engine.UserID) []engine.UserID {
	if eff.Quiet {
		return woken
	}
	return append(woken, u)
}

// Repost is a repost of Post by Viewer: a new post NewPost (filled in by
// the backend before Decide) mentioning Mentions.
type Repost struct {
	Viewer   engine.UserID
	Post     engine.PostID
	NewPost  engine.PostID
	Mentions []engine.UserID
	IdemKey  string
}

// Check validates the call and normalises Mentions.
func (op *Repost) Check() error {
	if err := checkPostTarget(op.Viewer, op.Post); err != nil {
		return err
	}
	return checkMentioning(op.Viewer, &op.Mentions, op.IdemKey)
}

// Decide: +1 repost on the original; the repost is a new post by the
// viewer (their post count, their followers' feed); mentions as for a
// comment. The original's author gets no badge.
func (op *Repost) Decide(f PostFacts, eff *Effects) error {
	if !f.Exists {
		return errPostNotFound(op.Post)
	}
	eff.count(op.Post, counters.Reposts, 1)
	eff.register(op.NewPost, op.Viewer, op.Post)
	eff.unreadChanged(mention(eff, op.Mentions, nil))
	return nil
}

// RecordViews adds a view to each known post of Posts.
type RecordViews struct {
	Posts []engine.PostID
}

// Check validates the ids.
func (op *RecordViews) Check() error { return engine.CheckIDs(op.Posts) }

// Decide: views arrive in bulk and are best-effort, so unknown posts are
// skipped rather than refused; a post listed twice gets two views.
func (op *RecordViews) Decide(exists func(engine.PostID) bool, eff *Effects) {
	for _, p := range op.Posts {
		if exists(p) {
			eff.count(p, counters.Views, 1)
		}
	}
}

// ImportRow is one row of a bulk import as it applies: Decide says
// whether the post is registered by it and whether its author's post
// count grows.
type ImportRow = engine.ImportRow

// DecideImport is engine.Importer's rule for one row, given what the
// registry holds for the post: a deleted post stays deleted (the row is
// skipped); a post unknown so far is registered when the row has an
// author or a non-zero count (a row with neither is skipped); a post
// known without an author takes the row's author; the counts always
// replace the post's, the five and every reaction kind's (a kind the row
// has no count for becomes 0, as a missing count column does). register
// says the row (re)enters the registry with row.Author; authorPosts says
// that author's post count grows by one (a re-import of a known author
// does not).
func DecideImport(row ImportRow, known PostFacts) (skip, register, authorPosts bool) {
	switch {
	case known.Deleted:
		return true, false, false
	case !known.Exists && row.Author == 0 && !row.HasCounts():
		return true, false, false
	case !known.Exists:
		return false, true, row.Author != 0
	case known.Author == 0 && row.Author != 0:
		return false, true, true
	}
	return false, false, false
}
