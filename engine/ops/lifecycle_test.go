package ops

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/counters"
	"github.com/tally-dev/tally/engine/snowflake"
)

func TestCommentWithID(t *testing.T) {
	now := time.Now()
	c := engine.CommentID(snowflake.Make(now.UnixMilli(), 3, 1))
	op := Comment{Viewer: alice, Post: post, Comment: c}
	if err := op.Check(now); err != nil {
		t.Fatal(err)
	}
	if bad := (Comment{Viewer: alice, Post: post, Comment: 12345}); !errors.Is(bad.Check(now), engine.ErrInvalid) {
		t.Fatal("a comment id that is no snowflake of a plausible time was accepted")
	}
	var eff Effects
	if err := op.Decide(CommentFacts{PostFacts: PostFacts{Exists: true, Author: bob}}, &eff); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(eff.CommentMarks, []CommentMark{{Post: post, Comment: c, Writer: alice}}) ||
		!slices.Equal(eff.Counts, []CountDelta{{post, counters.Comments, 1}}) || len(eff.Bumps) != 1 {
		t.Fatalf("%+v", eff)
	}
	eff.Reset()
	// Known (counted, or deleted since): counted at most once, bumps nobody.
	if err := op.Decide(CommentFacts{PostFacts: PostFacts{Exists: true, Author: bob}, Known: true}, &eff); err != nil || !eff.Empty() {
		t.Fatalf("a known comment id: %v %+v", err, eff)
	}
}

func TestDeleteComment(t *testing.T) {
	const c = 7
	live := PostFacts{Exists: true, Author: bob}
	cases := []struct {
		name  string
		actor engine.Actor
		facts DeleteCommentFacts
		err   error
		count bool
	}{
		{"unknown post", engine.Actor{User: alice}, DeleteCommentFacts{}, engine.ErrNotFound, false},
		{"never counted", engine.Actor{User: alice, Privileged: true}, DeleteCommentFacts{PostFacts: live}, engine.ErrNotFound, false},
		{"writer", engine.Actor{User: alice}, DeleteCommentFacts{PostFacts: live, Live: true, Wrote: true}, nil, true},
		{"post's author", engine.Actor{User: bob}, DeleteCommentFacts{PostFacts: live, Live: true}, nil, true},
		{"privileged", engine.Actor{User: carol, Privileged: true}, DeleteCommentFacts{PostFacts: live, Live: true}, nil, true},
		{"someone else", engine.Actor{User: carol}, DeleteCommentFacts{PostFacts: live, Live: true}, engine.ErrForbidden, false},
		{"someone else, no author", engine.Actor{User: carol}, DeleteCommentFacts{PostFacts: PostFacts{Exists: true}, Live: true}, engine.ErrForbidden, false},
		{"repeat", engine.Actor{User: alice}, DeleteCommentFacts{PostFacts: live, Deleted: true, Wrote: true}, nil, false},
		{"repeat by someone else", engine.Actor{User: carol}, DeleteCommentFacts{PostFacts: live, Deleted: true}, engine.ErrForbidden, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			op := DeleteComment{Actor: tc.actor, Post: post, Comment: c}
			if err := op.Check(); err != nil {
				t.Fatal(err)
			}
			var eff Effects
			err := op.Decide(tc.facts, &eff)
			if !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
				t.Fatalf("err %v, want %v", err, tc.err)
			}
			want := []CountDelta(nil)
			if tc.count {
				want = []CountDelta{{post, counters.Comments, -1}}
			}
			if !slices.Equal(eff.Counts, want) || (len(eff.CommentMarks) == 1) != tc.count {
				t.Fatalf("%+v", eff)
			}
		})
	}
	if err := (&DeleteComment{Actor: engine.Actor{User: alice}, Post: post}).Check(); !errors.Is(err, engine.ErrInvalid) {
		t.Fatalf("comment id 0: %v", err)
	}
}

func TestDeletePost(t *testing.T) {
	const original engine.PostID = 50
	var eff Effects
	del := DeletePost{Actor: engine.Actor{User: bob}, Post: post}
	facts := DeletePostFacts{PostFacts: PostFacts{Exists: true, Author: bob}, Original: original, OriginalExists: true}
	if err := del.Decide(facts, &eff); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(eff.Unregisters, []Unregistration{{post, bob}}) ||
		!slices.Equal(eff.Counts, []CountDelta{{original, counters.Reposts, -1}}) {
		t.Fatalf("%+v", eff)
	}
	eff.Reset()
	facts.OriginalExists = false
	if err := del.Decide(facts, &eff); err != nil || len(eff.Counts) != 0 || len(eff.Unregisters) != 1 {
		t.Fatalf("a repost of a deleted original: %v %+v", err, eff)
	}
	eff.Reset()
	if err := del.Decide(DeletePostFacts{PostFacts: PostFacts{Deleted: true}}, &eff); err != nil || !eff.Empty() {
		t.Fatalf("repeat: %v %+v", err, eff)
	}
	if err := del.Decide(DeletePostFacts{}, &eff); !errors.Is(err, engine.ErrNotFound) {
		t.Fatalf("unknown: %v", err)
	}
	other := DeletePost{Actor: engine.Actor{User: alice}, Post: post}
	if err := other.Decide(facts, &eff); !errors.Is(err, engine.ErrForbidden) || !eff.Empty() {
		t.Fatalf("someone else's post: %v", err)
	}
	noAuthor := DeletePostFacts{PostFacts: PostFacts{Exists: true}}
	if err := (&DeletePost{Actor: engine.Actor{User: alice}, Post: post}).Decide(noAuthor, &eff); !errors.Is(err, engine.ErrForbidden) {
		t.Fatalf("a post without author by a user: %v", err)
	}
	if err := (&DeletePost{Actor: engine.Actor{User: alice, Privileged: true}, Post: post}).Decide(noAuthor, &eff); err != nil {
		t.Fatalf("a post without author by a service: %v", err)
	}
}

func TestErasure(t *testing.T) {
	var eff Effects
	start := EraseUser{User: alice}
	start.Decide(false, &eff)
	if !slices.Equal(eff.Erasures, []Erasure{{User: alice}}) {
		t.Fatalf("%+v", eff)
	}
	eff.Reset()
	if start.Decide(true, &eff); !slices.Equal(eff.Erasures, []Erasure{{User: alice}}) || len(eff.Events) != 0 {
		t.Fatalf("a repeat while under way drops what the user gained since: %+v", eff)
	}
	eff.Reset()
	step := ErasureStep{User: alice,
		Likes:     []FoundFlag{{Post: 1, PostExists: true, Set: true}, {Post: 2, Set: true}, {Post: 3, PostExists: true}},
		Favorites: []FoundFlag{{Post: 4, PostExists: true, Set: true}},
		Writes:    []engine.CommentID{9},
		Edges:     []Edge{{alice, bob}, {carol, alice}},
		Posts:     []engine.PostID{5}, Groups: []engine.GroupID{6}, Messages: []engine.MessageID{8},
		Done: true,
	}
	step.Decide(&eff)
	if !slices.Equal(eff.Counts, []CountDelta{{1, counters.Likes, -1}, {4, counters.Favorites, -1}}) {
		t.Fatalf("counts %v: only flags still set on posts that exist", eff.Counts)
	}
	if !slices.Equal(eff.Removals, []Removal{{LikeSet, alice, 1}, {LikeSet, alice, 2}, {FavoriteSet, alice, 4}, {WriterSet, alice, 9}}) {
		t.Fatalf("removals %v", eff.Removals)
	}
	if !slices.Equal(eff.Followers, []FollowerDelta{{bob, -1}}) || len(eff.Follows) != 2 || eff.Follows[0].Add {
		t.Fatalf("follows %v followers %v: the erased user's own count went at the start", eff.Follows, eff.Followers)
	}
	if !slices.Equal(eff.Unauthors, []engine.PostID{5}) || !slices.Equal(eff.GroupErasures, []Membership{{6, alice}}) ||
		!slices.Equal(eff.SenderErasures, []engine.MessageID{8}) || !slices.Equal(eff.Erasures, []Erasure{{alice, true}}) {
		t.Fatalf("%+v", eff)
	}
	if len(eff.Events) != 1 || eff.Events[0].Kind != engine.FollowsChanged || eff.Events[0].Users[0] != carol {
		t.Fatalf("events %+v: carol's follow list changed", eff.Events)
	}
}
