package ops

import (
	"fmt"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/counters"
)

// Counts follow the life of what they count: a comment, a post or a
// whole user can be taken back, and each count they added drops exactly
// once. The rules of deleteComment, deletePost and eraseUser (API.md,
// "Content lifecycle") are here; every decrement is a CountDelta, which a
// backend applies through counters.Add, so no count goes below zero
// whatever the order of concurrent deletes, unlikes and erasures.

func checkActor(a engine.Actor) error { return engine.CheckViewer(a.User) }

// ErrNotOwner answers a delete by someone who may not delete the thing.
var ErrNotOwner = fmt.Errorf("%w: only its writer or the post's author, a service or an admin may delete it", engine.ErrForbidden)

// DeleteComment takes back Comment on Post, by Actor.
type DeleteComment struct {
	Actor   engine.Actor
	Post    engine.PostID
	Comment engine.CommentID
}

// Check validates the call.
func (op *DeleteComment) Check() error {
	if err := checkActor(op.Actor); err != nil {
		return err
	}
	if op.Post == 0 || op.Comment == 0 {
		return fmt.Errorf("%w: post and comment ids must not be 0", engine.ErrInvalid)
	}
	return nil
}

// DeleteCommentFacts are what a comment's delete reads: the post, whether
// the comment id is counted on it (Live) or was and has been deleted
// (Deleted), and whether the actor wrote it (Wrote).
type DeleteCommentFacts struct {
	PostFacts
	Live, Deleted, Wrote bool
}

// Decide: an unknown post, or a comment id never counted on it, is
// NOT_FOUND; only the comment's writer, the post's author or a
// privileged actor may delete it (FORBIDDEN); a comment deleted already
// changes nothing; otherwise the post loses one comment and the id moves
// to the deleted ones. Badges the comment bumped stay.
func (op *DeleteComment) Decide(f DeleteCommentFacts, eff *Effects) error {
	switch {
	case !f.Exists:
		return errPostNotFound(op.Post)
	case !f.Live && !f.Deleted:
		return fmt.Errorf("%w: comment %d was never counted on post %d", engine.ErrNotFound, uint64(op.Comment), uint64(op.Post))
	case !op.Actor.Privileged && !f.Wrote && (f.Author == 0 || f.Author != op.Actor.User):
		return ErrNotOwner
	case !f.Live:
		return nil
	}
	eff.count(op.Post, counters.Comments, -1)
	eff.CommentMarks = append(eff.CommentMarks, CommentMark{Post: op.Post, Comment: op.Comment, Deleted: true})
	return nil
}

// DeletePost deletes Post, by Actor.
type DeletePost struct {
	Actor engine.Actor
	Post  engine.PostID
}

// Check validates the call.
func (op *DeletePost) Check() error {
	if err := checkActor(op.Actor); err != nil {
		return err
	}
	if op.Post == 0 {
		return fmt.Errorf("%w: post id 0", engine.ErrInvalid)
	}
	return nil
}

// DeletePostFacts are what a post's delete reads: the post, and for a
// repost its original and whether that still exists.
type DeletePostFacts struct {
	PostFacts
	Original       engine.PostID
	OriginalExists bool
}

// Decide: a post deleted already changes nothing; an unknown one is
// NOT_FOUND; only its author or a privileged actor may delete it (a post
// without an author: only a privileged actor). The post leaves the
// registry (its author's post count drops by one, its sets are
// forgotten) and a repost's original, if it still exists, loses one
// repost. Followers' feed badges count posts made, so they do not move.
func (op *DeletePost) Decide(f DeletePostFacts, eff *Effects) error {
	switch {
	case f.Deleted:
		return nil
	case !f.Exists:
		return errPostNotFound(op.Post)
	case !op.Actor.Privileged && (f.Author == 0 || f.Author != op.Actor.User):
		return fmt.Errorf("%w: only its author, a service or an admin may delete post %d", engine.ErrForbidden, uint64(op.Post))
	}
	eff.Unregisters = append(eff.Unregisters, Unregistration{Post: op.Post, Author: f.Author})
	if f.Original != 0 && f.OriginalExists {
		eff.count(f.Original, counters.Reposts, -1)
	}
	return nil
}

// EraseUser starts the erasure of User.
type EraseUser struct {
	User engine.UserID
}

// Check validates the call.
func (op *EraseUser) Check() error { return engine.CheckViewer(op.User) }

// Decide: the erasure starts: the user's own records go at once and the
// rest is hidden from every read until the steps remove it (Erasure). A
// repeat while one is under way drops again what the user gained since
// (a mention's badge: erasure takes what the user has when it is asked
// for) and leaves the steps as they are; a repeat after it ended erases a
// user who has nothing left, which changes nothing.
func (op *EraseUser) Decide(erasing bool, eff *Effects) {
	eff.Erasures = append(eff.Erasures, Erasure{User: op.User})
	if !erasing {
		eff.wakeOne(op.User)
	}
}

// FoundFlag is a reaction (a like, or another kind) or a favorite an
// erasure step found: its post, whether the post still exists, and
// whether the flag is still set.
type FoundFlag struct {
	Post       engine.PostID
	PostExists bool
	Set        bool
	// Kind is a found like's reaction kind (NoKind reads as like): a
	// reaction of another kind counts under its kind.
	Kind counters.Kind
}

// Edge is a follow edge, Viewer following Target.
type Edge struct {
	Viewer, Target engine.UserID
}

// ErasureStep is one bounded step of User's erasure: what the backend
// found of the user in one part of its state, as facts that hold when the
// step is decided. Done says nothing of the user is left: the erasure
// ends.
type ErasureStep struct {
	User      engine.UserID
	Likes     []FoundFlag
	Favorites []FoundFlag
	// Writes are counted comments the user wrote (their writer records).
	Writes []engine.CommentID
	// Edges are follow edges with the user at one end.
	Edges []Edge
	// Posts are posts by the user, Groups the groups where the user has a
	// mapid, Messages the messages the user sent.
	Posts    []engine.PostID
	Groups   []engine.GroupID
	Messages []engine.MessageID
	Done     bool
}

// Decide: each like and favorite still set goes, and its post (if it
// still exists) loses one; each writer record goes; each follow edge goes,
// with one follower less for the followed user (unless that is the user
// erased, whose counts went when the erasure started) — the follower
// count of the other end is the length of a list or a count of its own, as
// the backend keeps it; each post loses its author; each group forgets
// the user (ops.Effects.GroupErasures); each message loses its sender.
func (op *ErasureStep) Decide(eff *Effects) {
	flags := func(found []FoundFlag, set SetKind, field counters.Field) {
		for _, f := range found {
			if !f.Set {
				continue
			}
			eff.Removals = append(eff.Removals, Removal{Set: set, User: op.User, Key: uint64(f.Post)})
			switch {
			case !f.PostExists:
			case set == LikeSet && f.Kind > counters.Like:
				eff.reaction(f.Post, f.Kind, -1)
			default:
				eff.count(f.Post, field, -1)
			}
		}
	}
	flags(op.Likes, LikeSet, counters.Likes)
	flags(op.Favorites, FavoriteSet, counters.Favorites)
	for _, c := range op.Writes {
		eff.Removals = append(eff.Removals, Removal{Set: WriterSet, User: op.User, Key: uint64(c)})
	}
	for _, e := range op.Edges {
		eff.Follows = append(eff.Follows, FollowEdge{Viewer: e.Viewer, Target: e.Target})
		if e.Target != op.User {
			eff.Followers = append(eff.Followers, FollowerDelta{User: e.Target, Delta: -1})
		}
		if e.Viewer != op.User {
			if eff.Quiet {
				eff.quieted++
			} else {
				eff.Events = append(eff.Events, engine.Event{Kind: engine.FollowsChanged,
					Users: []engine.UserID{e.Viewer}, Author: e.Target})
			}
		}
	}
	eff.Unauthors = append(eff.Unauthors, op.Posts...)
	for _, g := range op.Groups {
		eff.GroupErasures = append(eff.GroupErasures, Membership{Group: g, User: op.User})
	}
	eff.SenderErasures = append(eff.SenderErasures, op.Messages...)
	if op.Done {
		eff.Erasures = append(eff.Erasures, Erasure{User: op.User, Done: true})
	}
}
