package ops

import (
	"errors"
	"slices"
	"testing"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/counters"
)

const love, haha counters.Kind = 2, 3

func TestReactToPost(t *testing.T) {
	on := func(author engine.UserID, was counters.Kind) ReactionFacts {
		return ReactionFacts{PostFacts: PostFacts{Exists: true, Author: author}, Was: was}
	}
	cases := []struct {
		name      string
		decide    func(*Effects) error
		err       error
		reacts    []ReactionSet
		counts    []CountDelta
		reactions []ReactionDelta
		bumps     []Bump
	}{
		{"unknown post", func(e *Effects) error {
			return (&ReactToPost{Viewer: alice, Post: post, Kind: love}).Decide(ReactionFacts{}, e)
		}, engine.ErrNotFound, nil, nil, nil, nil},
		{"first reaction, someone else's post", func(e *Effects) error {
			return (&ReactToPost{Viewer: alice, Post: post, Kind: love}).Decide(on(bob, counters.NoKind), e)
		}, nil, []ReactionSet{{post, alice, love}}, nil, []ReactionDelta{{post, love, 1}}, []Bump{{bob, engine.Likes}}},
		{"first like is a like", func(e *Effects) error {
			return (&ReactToPost{Viewer: alice, Post: post, Kind: counters.Like}).Decide(on(bob, counters.NoKind), e)
		}, nil, []ReactionSet{{post, alice, counters.Like}}, []CountDelta{{post, counters.Likes, 1}}, nil, []Bump{{bob, engine.Likes}}},
		{"own post", func(e *Effects) error {
			return (&ReactToPost{Viewer: bob, Post: post, Kind: haha}).Decide(on(bob, counters.NoKind), e)
		}, nil, []ReactionSet{{post, bob, haha}}, nil, []ReactionDelta{{post, haha, 1}}, nil},
		{"imported without author", func(e *Effects) error {
			return (&ReactToPost{Viewer: alice, Post: post, Kind: haha}).Decide(on(0, counters.NoKind), e)
		}, nil, []ReactionSet{{post, alice, haha}}, nil, []ReactionDelta{{post, haha, 1}}, nil},
		{"same kind again", func(e *Effects) error {
			return (&ReactToPost{Viewer: alice, Post: post, Kind: love}).Decide(on(bob, love), e)
		}, nil, nil, nil, nil, nil},
		{"switch from like: one count moves, no bump", func(e *Effects) error {
			return (&ReactToPost{Viewer: alice, Post: post, Kind: love}).Decide(on(bob, counters.Like), e)
		}, nil, []ReactionSet{{post, alice, love}}, []CountDelta{{post, counters.Likes, -1}}, []ReactionDelta{{post, love, 1}}, nil},
		{"switch between other kinds", func(e *Effects) error {
			return (&ReactToPost{Viewer: alice, Post: post, Kind: haha}).Decide(on(bob, love), e)
		}, nil, []ReactionSet{{post, alice, haha}}, nil, []ReactionDelta{{post, love, -1}, {post, haha, 1}}, nil},
		{"unreact", func(e *Effects) error {
			return (&UnreactToPost{Viewer: alice, Post: post}).Decide(on(bob, love), e)
		}, nil, []ReactionSet{{post, alice, counters.NoKind}}, nil, []ReactionDelta{{post, love, -1}}, nil},
		{"unreact of a like", func(e *Effects) error {
			return (&UnreactToPost{Viewer: alice, Post: post}).Decide(on(bob, counters.Like), e)
		}, nil, []ReactionSet{{post, alice, counters.NoKind}}, []CountDelta{{post, counters.Likes, -1}}, nil, nil},
		{"unreact of none", func(e *Effects) error {
			return (&UnreactToPost{Viewer: alice, Post: post}).Decide(on(bob, counters.NoKind), e)
		}, nil, nil, nil, nil, nil},
		{"unlike of a love changes nothing", func(e *Effects) error {
			return (&UnreactToPost{Viewer: alice, Post: post, Only: counters.Like}).Decide(on(bob, love), e)
		}, nil, nil, nil, nil, nil},
		{"unlike of a like", func(e *Effects) error {
			return (&UnreactToPost{Viewer: alice, Post: post, Only: counters.Like}).Decide(on(bob, counters.Like), e)
		}, nil, []ReactionSet{{post, alice, counters.NoKind}}, []CountDelta{{post, counters.Likes, -1}}, nil, nil},
		{"unreact on an unknown post", func(e *Effects) error {
			return (&UnreactToPost{Viewer: alice, Post: post}).Decide(ReactionFacts{}, e)
		}, engine.ErrNotFound, nil, nil, nil, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var eff Effects
			err := c.decide(&eff)
			if !errors.Is(err, c.err) || (c.err == nil) != (err == nil) {
				t.Fatalf("err %v, want %v", err, c.err)
			}
			if !slices.Equal(eff.Reacts, c.reacts) || !slices.Equal(eff.Counts, c.counts) ||
				!slices.Equal(eff.ReactionCounts, c.reactions) || !slices.Equal(eff.Bumps, c.bumps) {
				t.Fatalf("reacts %v counts %v reactions %v bumps %v,\nwant %v %v %v %v",
					eff.Reacts, eff.Counts, eff.ReactionCounts, eff.Bumps, c.reacts, c.counts, c.reactions, c.bumps)
			}
			if (len(c.bumps) > 0) != (len(eff.Events) == 1) || len(eff.Events) > 1 {
				t.Fatalf("events %v for bumps %v", eff.Events, eff.Bumps)
			}
			if eff.Empty() != (c.reacts == nil && c.err == nil || c.err != nil) {
				t.Fatalf("Empty %v", eff.Empty())
			}
		})
	}
}

func TestReactionCheck(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
	}{
		{"no kind", (&ReactToPost{Viewer: alice, Post: post}).Check()},
		{"kind beyond the table", (&ReactToPost{Viewer: alice, Post: post, Kind: counters.MaxKinds + 1}).Check()},
		{"no post", (&ReactToPost{Viewer: alice, Kind: love}).Check()},
		{"no viewer", (&UnreactToPost{Post: post}).Check()},
		{"unreact only of no kind id", (&UnreactToPost{Viewer: alice, Post: post, Only: counters.MaxKinds + 1}).Check()},
	} {
		if !errors.Is(c.err, engine.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", c.name, c.err)
		}
	}
	if err := (&ReactToPost{Viewer: alice, Post: post, Kind: love}).Check(); err != nil {
		t.Fatal(err)
	}
	kinds := counters.NewKinds()
	if k, err := KindByName(&kinds, "like"); k != counters.Like || err != nil {
		t.Fatalf("KindByName(like) = %d %v", k, err)
	}
	if _, err := KindByName(&kinds, "love"); !errors.Is(err, engine.ErrInvalid) {
		t.Fatalf("KindByName of a kind the table lacks: %v", err)
	}
}

// TestErasureOfReactions: an erasure step takes a found reaction's count
// from its own kind.
func TestErasureOfReactions(t *testing.T) {
	op := ErasureStep{User: alice, Likes: []FoundFlag{
		{Post: 1, PostExists: true, Set: true},
		{Post: 2, PostExists: true, Set: true, Kind: counters.Like},
		{Post: 3, PostExists: true, Set: true, Kind: love},
		{Post: 4, Set: true, Kind: love},
	}}
	var eff Effects
	op.Decide(&eff)
	if !slices.Equal(eff.Counts, []CountDelta{{1, counters.Likes, -1}, {2, counters.Likes, -1}}) ||
		!slices.Equal(eff.ReactionCounts, []ReactionDelta{{3, love, -1}}) || len(eff.Removals) != 4 {
		t.Fatalf("counts %v reactions %v removals %v", eff.Counts, eff.ReactionCounts, eff.Removals)
	}
}
