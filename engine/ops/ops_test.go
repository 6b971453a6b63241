package ops

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/counters"
)

const (
	alice engine.UserID = 1
	bob   engine.UserID = 2
	carol engine.UserID = 3
	post  engine.PostID = 100
)

// TestLike: likePost is ReactToPost{Kind: Like} and unlikePost
// UnreactToPost{Only: Like}, with a like's rules: de-duplicated, and the
// author's badge for a like of someone else's post.
func TestLike(t *testing.T) {
	like := func(viewer engine.UserID) func(ReactionFacts, *Effects) error {
		return (&ReactToPost{Viewer: viewer, Post: post, Kind: counters.Like}).Decide
	}
	unlike := (&UnreactToPost{Viewer: alice, Post: post, Only: counters.Like}).Decide
	on := func(author engine.UserID, was counters.Kind) ReactionFacts {
		return ReactionFacts{PostFacts: PostFacts{Exists: true, Author: author}, Was: was}
	}
	cases := []struct {
		name   string
		decide func(ReactionFacts, *Effects) error
		facts  ReactionFacts
		err    error
		counts []CountDelta
		bumps  []Bump
	}{
		{"unknown post", like(alice), ReactionFacts{}, engine.ErrNotFound, nil, nil},
		{"someone else's post", like(alice), on(bob, counters.NoKind),
			nil, []CountDelta{{post, counters.Likes, 1}}, []Bump{{bob, engine.Likes}}},
		{"own post", like(bob), on(bob, counters.NoKind), nil, []CountDelta{{post, counters.Likes, 1}}, nil},
		{"imported without author", like(alice), on(0, counters.NoKind), nil, []CountDelta{{post, counters.Likes, 1}}, nil},
		{"repeat", like(alice), on(bob, counters.Like), nil, nil, nil},
		{"unlike", unlike, on(bob, counters.Like), nil, []CountDelta{{post, counters.Likes, -1}}, nil},
		{"unlike of none", unlike, on(bob, counters.NoKind), nil, nil, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var eff Effects
			err := c.decide(c.facts, &eff)
			if !errors.Is(err, c.err) || (c.err == nil) != (err == nil) {
				t.Fatalf("err %v, want %v", err, c.err)
			}
			if !slices.Equal(eff.Counts, c.counts) || !slices.Equal(eff.Bumps, c.bumps) {
				t.Fatalf("counts %v bumps %v, want %v %v", eff.Counts, eff.Bumps, c.counts, c.bumps)
			}
			if len(c.bumps) > 0 && (len(eff.Events) != 1 || eff.Events[0].Kind != engine.UnreadChanged) {
				t.Fatalf("events %v", eff.Events)
			}
			if len(c.bumps) == 0 && len(eff.Events) != 0 {
				t.Fatalf("events %v without a bump", eff.Events)
			}
		})
	}
}

func TestFavoriteHasNoBadge(t *testing.T) {
	var eff Effects
	op := Favorite{Viewer: alice, Post: post}
	if err := op.Decide(FlagFacts{PostFacts: PostFacts{Exists: true, Author: bob}}, &eff); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(eff.Counts, []CountDelta{{post, counters.Favorites, 1}}) || len(eff.Bumps)+len(eff.Events) != 0 {
		t.Fatalf("%+v", eff)
	}
}

func TestCommentBumpsAuthorAndMentions(t *testing.T) {
	op := Comment{Viewer: alice, Post: post, Mentions: []engine.UserID{carol, alice, carol, 0, bob}}
	if err := op.Check(time.Now()); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(op.Mentions, []engine.UserID{carol, bob}) {
		t.Fatalf("mentions %v", op.Mentions)
	}
	var eff Effects
	if err := op.Decide(CommentFacts{PostFacts: PostFacts{Exists: true, Author: bob}}, &eff); err != nil {
		t.Fatal(err)
	}
	want := []Bump{{bob, engine.Comments}, {carol, engine.Mentions}, {bob, engine.Mentions}}
	if !slices.Equal(eff.Bumps, want) {
		t.Fatalf("bumps %v, want %v", eff.Bumps, want)
	}
	if !slices.Equal(eff.Events[0].Users, []engine.UserID{bob, carol, bob}) {
		t.Fatalf("event %v", eff.Events)
	}
	eff.Reset()
	self := Comment{Viewer: bob, Post: post}
	if err := self.Decide(CommentFacts{PostFacts: PostFacts{Exists: true, Author: bob}}, &eff); err != nil || len(eff.Bumps) != 0 || len(eff.Events) != 0 {
		t.Fatalf("own comment: %v %+v", err, eff)
	}
	if err := self.Decide(CommentFacts{}, &eff); !errors.Is(err, engine.ErrNotFound) {
		t.Fatalf("unknown post: %v", err)
	}
}

func TestRepostIsANewPost(t *testing.T) {
	op := Repost{Viewer: alice, Post: post, NewPost: 200, Mentions: []engine.UserID{carol}}
	var eff Effects
	if err := op.Decide(PostFacts{Exists: true, Author: bob}, &eff); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(eff.Counts, []CountDelta{{post, counters.Reposts, 1}}) ||
		!slices.Equal(eff.Registers, []Registration{{200, alice, post}}) ||
		!slices.Equal(eff.Bumps, []Bump{{carol, engine.Mentions}}) {
		t.Fatalf("%+v", eff)
	}
	kinds := []engine.EventKind{eff.Events[0].Kind, eff.Events[1].Kind}
	if !slices.Equal(kinds, []engine.EventKind{engine.AuthorPosted, engine.UnreadChanged}) || eff.Events[0].Author != alice {
		t.Fatalf("events %+v", eff.Events)
	}
}

func TestCreatePost(t *testing.T) {
	var eff Effects
	op := CreatePost{Viewer: alice, Post: post}
	if err := op.Decide(true, &eff); !errors.Is(err, engine.ErrInvalid) || !eff.Empty() {
		t.Fatalf("taken id: %v %+v", err, eff)
	}
	if err := op.Decide(false, &eff); err != nil || !slices.Equal(eff.Registers, []Registration{{post, alice, 0}}) {
		t.Fatalf("%v %+v", err, eff)
	}
	future := CreatePost{Viewer: alice, Post: engine.PostID(uint64(1) << 62)}
	if err := future.Check(time.Now()); !errors.Is(err, engine.ErrInvalid) {
		t.Fatalf("implausible id: %v", err)
	}
}

func TestRecordViewsSkipsUnknown(t *testing.T) {
	var eff Effects
	op := RecordViews{Posts: []engine.PostID{1, 2, 1}}
	op.Decide(func(p engine.PostID) bool { return p == 1 }, &eff)
	if !slices.Equal(eff.Counts, []CountDelta{{1, counters.Views, 1}, {1, counters.Views, 1}}) {
		t.Fatalf("%v", eff.Counts)
	}
}

func TestDecideImport(t *testing.T) {
	counted := engine.Counts{Likes: 1}
	cases := []struct {
		row                           ImportRow
		known                         PostFacts
		skip, register, authorGrowing bool
	}{
		{ImportRow{Post: 1}, PostFacts{}, true, false, false},
		{ImportRow{Post: 1, Counts: counted}, PostFacts{}, false, true, false},
		{ImportRow{Post: 1, Author: bob}, PostFacts{}, false, true, true},
		{ImportRow{Post: 1, Author: bob}, PostFacts{Exists: true, Author: 0}, false, true, true},
		{ImportRow{Post: 1, Author: bob}, PostFacts{Exists: true, Author: alice}, false, false, false},
		{ImportRow{Post: 1}, PostFacts{Exists: true, Author: alice}, false, false, false},
	}
	for i, c := range cases {
		skip, reg, grows := DecideImport(c.row, c.known)
		if skip != c.skip || reg != c.register || grows != c.authorGrowing {
			t.Errorf("case %d: %v %v %v", i, skip, reg, grows)
		}
	}
}

func TestFollow(t *testing.T) {
	self := Follow{Viewer: alice, Target: alice}
	if err := self.Check(); !errors.Is(err, engine.ErrInvalid) {
		t.Fatalf("self-follow: %v", err)
	}
	var eff Effects
	op := Follow{Viewer: alice, Target: bob}
	op.Decide(FollowFacts{Following: true}, &eff)
	if !eff.Empty() {
		t.Fatalf("repeat follow: %+v", eff)
	}
	op.Decide(FollowFacts{TargetPosts: 6}, &eff)
	if !slices.Equal(eff.Follows, []FollowEdge{{alice, bob, true, 6}}) || !slices.Equal(eff.Followers, []FollowerDelta{{bob, 1}}) {
		t.Fatalf("%+v", eff)
	}
	eff.Reset()
	undo := Follow{Viewer: alice, Target: bob, Undo: true}
	undo.Decide(FollowFacts{Following: true}, &eff)
	if !slices.Equal(eff.Followers, []FollowerDelta{{bob, -1}}) || eff.Follows[0].Add {
		t.Fatalf("%+v", eff)
	}
}

func TestUnreadFeedExample(t *testing.T) {
	// API.md: snapshot B=6, C=7, D=12, now B=10, C=8, D=14 → 7.
	u := Unread(UnreadFacts{FolloweePosts: []int64{10, 8, 14}, Snapshots: []int64{6, 7, 12}, Newer: 4, Push: 5, Click: 5})
	if u.Feed != 7 || u.System != 0 || u.RedDot {
		t.Fatalf("%+v", u)
	}
	u = Unread(UnreadFacts{FolloweePosts: []int64{3}, Snapshots: []int64{5}, CursorLive: true, Newer: 4, Push: 6, Click: 5})
	if u.Feed != 0 || u.System != 4 || !u.RedDot {
		t.Fatalf("%+v", u)
	}
}

func TestTouch(t *testing.T) {
	ttl := 30 * 24 * time.Hour
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	cases := []struct {
		name  string
		facts CursorFacts
		want  Touch
	}{
		{"new user", CursorFacts{}, Touch{Stamp: true, ResetCursor: true}},
		{"active today", CursorFacts{true, now.Add(-time.Hour)}, Touch{}},
		{"active yesterday", CursorFacts{true, now.Add(-24 * time.Hour)}, Touch{Stamp: true}},
		{"idle past the ttl", CursorFacts{true, now.Add(-ttl - 48*time.Hour)}, Touch{Stamp: true, ResetCursor: true}},
		{"idle exactly the ttl, by day", CursorFacts{true, engine.ActivityDayStart(now.Add(-ttl))}, Touch{Stamp: true}},
	}
	for _, c := range cases {
		if got := DecideTouch(c.facts, now, ttl); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}

func TestMarkReadAndRedDot(t *testing.T) {
	var eff Effects
	bad := MarkRead{Viewer: alice, Kind: 0}
	if err := bad.Check(); !errors.Is(err, engine.ErrInvalid) {
		t.Fatal(err)
	}
	op := MarkRead{Viewer: alice, Kind: engine.System}
	op.Decide(42, &eff)
	if !slices.Equal(eff.Reads, []ReadMark{{alice, engine.System, 42}}) {
		t.Fatalf("%+v", eff.Reads)
	}
	eff.Reset()
	if s := (PushRedDot{}).Decide(10, 10, &eff); s != 11 || eff.Push != 11 || eff.Events[0].Kind != engine.Broadcast {
		t.Fatalf("push %d %+v", s, eff)
	}
	if RedDot(11, 11) || !RedDot(11, 0) {
		t.Fatal("red dot rule")
	}
}

func TestGroups(t *testing.T) {
	create := CreateGroup{Viewer: alice, Group: 7, Members: []engine.UserID{bob, alice, bob, carol}}
	if err := create.Check(); err != nil {
		t.Fatal(err)
	}
	var eff Effects
	create.Decide(&eff)
	if !slices.Equal(eff.Joins, []Membership{{7, alice}, {7, bob}, {7, carol}}) {
		t.Fatalf("%v", eff.Joins)
	}
	eff.Reset()
	member := func(u engine.UserID) MemberState {
		return map[engine.UserID]MemberState{bob: {true, true}, carol: {true, false}}[u]
	}
	add := AddMembers{Viewer: alice, Group: 7, Users: []engine.UserID{bob, carol, 9}}
	if err := add.Decide(GroupFacts{Exists: true, Viewer: MemberState{true, true}, MapIDs: 3}, member, &eff); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(eff.Joins, []Membership{{7, carol}, {7, 9}}) {
		t.Fatalf("%v", eff.Joins)
	}
	eff.Reset()
	if err := add.Decide(GroupFacts{Exists: true, Viewer: MemberState{true, true}, MapIDs: engine.MaxGroupMembers}, member, &eff); !errors.Is(err, engine.ErrInvalid) || len(eff.Joins) != 0 {
		t.Fatalf("full group: %v %v", err, eff.Joins)
	}
	if err := add.Decide(GroupFacts{Exists: true, Viewer: MemberState{true, false}}, member, &eff); !errors.Is(err, engine.ErrForbidden) {
		t.Fatalf("ex-member adds: %v", err)
	}
	leave := LeaveGroup{Viewer: carol, Group: 7}
	if err := leave.Decide(GroupFacts{Exists: true}, &eff); !errors.Is(err, engine.ErrForbidden) {
		t.Fatalf("never joined: %v", err)
	}
	if err := leave.Decide(GroupFacts{Exists: true, Viewer: MemberState{true, false}}, &eff); !errors.Is(err, engine.ErrForbidden) || len(eff.Leaves) != 0 {
		t.Fatalf("left twice: %v %v", err, eff.Leaves)
	}
	if err := leave.Decide(GroupFacts{Exists: true, Viewer: MemberState{true, true}}, &eff); err != nil || !slices.Equal(eff.Leaves, []Membership{{7, carol}}) {
		t.Fatalf("a member leaves: %v %v", err, eff.Leaves)
	}
	send := SendMessage{Viewer: alice, Group: 7, Text: "hi", Mentions: []engine.UserID{bob, carol}}
	if err := send.Check(); err != nil {
		t.Fatal(err)
	}
	current := func(u engine.UserID) bool { return member(u).Current }
	if err := send.Decide(GroupFacts{Exists: true, Viewer: MemberState{true, true}}, current, &eff); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(eff.Fanouts, []Fanout{{7, alice, engine.Messages}}) || !slices.Equal(eff.Bumps, []Bump{{bob, engine.Mentions}}) {
		t.Fatalf("%+v", eff)
	}
	if err := send.Decide(GroupFacts{}, current, &eff); !errors.Is(err, engine.ErrNotFound) {
		t.Fatalf("unknown group: %v", err)
	}
}

func TestMarkMessagesRead(t *testing.T) {
	op := MarkMessagesRead{Viewer: bob, Messages: []engine.MessageID{1, 2, 1, 3}}
	cur := MemberState{true, true}
	facts := []MessageFacts{
		{Exists: true, Sender: alice, Viewer: cur, Counted: true},
		{Exists: true, Sender: alice, Viewer: cur, Counted: true, Read: true},
		{Exists: true, Sender: alice, Viewer: cur, Counted: true},
		{Exists: true, Sender: alice, Viewer: cur},
	}
	var eff Effects
	if err := op.Decide(facts, &eff); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(eff.Receipts, []ReceiptRead{{1, bob}}) || len(eff.Events) != 1 || eff.Events[0].Users[0] != alice {
		t.Fatalf("%+v", eff)
	}
	eff.Reset()
	facts[3] = MessageFacts{}
	facts[0].Viewer = MemberState{true, false}
	if err := op.Decide(facts, &eff); !errors.Is(err, engine.ErrNotFound) || !eff.Empty() {
		t.Fatalf("unknown beats forbidden: %v", err)
	}
	facts[3] = MessageFacts{Exists: true, Viewer: cur}
	if err := op.Decide(facts, &eff); !errors.Is(err, engine.ErrForbidden) || !eff.Empty() {
		t.Fatalf("forbidden changes nothing: %v %+v", err, eff)
	}
	if !Counted(2, 5, false, false) || Counted(6, 5, false, false) || Counted(2, 5, true, false) || Counted(2, 5, false, true) || Counted(0, 5, false, false) {
		t.Fatal("Counted")
	}
}

func TestLikeDoesNotAllocateBeyondItsEvent(t *testing.T) {
	var eff Effects
	op := ReactToPost{Viewer: alice, Post: post, Kind: counters.Like}
	facts := ReactionFacts{PostFacts: PostFacts{Exists: true, Author: bob}}
	allocs := testing.AllocsPerRun(100, func() {
		eff.Reset()
		_ = op.Decide(facts, &eff)
	})
	if allocs > 1 {
		t.Fatalf("%v allocations per like, want at most the event's user list", allocs)
	}
}

func TestReadRules(t *testing.T) {
	cur, left := MemberState{true, true}, MemberState{true, false}
	if err := ViewGroup(7, GroupFacts{}); !errors.Is(err, engine.ErrNotFound) {
		t.Fatal(err)
	}
	if err := ViewGroup(7, GroupFacts{Exists: true, Viewer: left}); !errors.Is(err, engine.ErrForbidden) {
		t.Fatal(err)
	}
	if err := ViewMessage(1, false, cur); !errors.Is(err, engine.ErrNotFound) {
		t.Fatal(err)
	}
	if err := ViewMessage(1, true, left); !errors.Is(err, engine.ErrForbidden) {
		t.Fatal(err)
	}
	if err := ViewReceipts(1, true, false, cur); !errors.Is(err, ErrNotSender) {
		t.Fatal(err)
	}
	if err := ViewReceipts(1, true, true, left); !errors.Is(err, ErrSenderLeft) {
		t.Fatal(err)
	}
	if ViewReceipts(1, true, true, cur) != nil || ViewMessage(1, true, cur) != nil {
		t.Fatal("a current member is refused")
	}
	kinds, _ := counters.NewKinds().Reconcile([]string{"like", "love"}, nil)
	if err := CheckImport([]ImportRow{{Post: 1}, {Post: 0}}, &kinds); !errors.Is(err, engine.ErrInvalid) {
		t.Fatal(err)
	}
	if err := CheckImport([]ImportRow{{Post: 1, Counts: engine.Counts{Views: -1}}}, &kinds); !errors.Is(err, engine.ErrInvalid) {
		t.Fatal(err)
	}
	// love is kind 2; kind 3 is no kind of the table.
	if err := CheckImport([]ImportRow{{Post: 1, Reactions: counters.Reactions{0: 4}}}, &kinds); err != nil {
		t.Fatal(err)
	}
	for _, r := range []counters.Reactions{{0: -1}, {1: 1}} {
		if err := CheckImport([]ImportRow{{Post: 1, Reactions: r}}, &kinds); !errors.Is(err, engine.ErrInvalid) {
			t.Fatalf("reactions %v: %v", r, err)
		}
	}
}

// TestQuietDecidesTheSame: a Quiet decision (replay) has the same effects
// and emptiness as a live one, without events and without allocating for
// them.
func TestQuietDecidesTheSame(t *testing.T) {
	decisions := []func(*Effects){
		func(e *Effects) {
			(&ReactToPost{Viewer: alice, Post: post, Kind: counters.Like}).Decide(ReactionFacts{PostFacts: PostFacts{Exists: true, Author: bob}}, e)
		},
		func(e *Effects) {
			(&ReactToPost{Viewer: alice, Post: post, Kind: 2}).Decide(ReactionFacts{PostFacts: PostFacts{Exists: true, Author: bob}}, e)
		},
		func(e *Effects) {
			(&ReactToPost{Viewer: alice, Post: post, Kind: 3}).Decide(ReactionFacts{PostFacts: PostFacts{Exists: true, Author: bob}, Was: 1}, e)
		},
		func(e *Effects) {
			(&Comment{Viewer: alice, Post: post, Mentions: []engine.UserID{carol}}).Decide(CommentFacts{PostFacts: PostFacts{Exists: true, Author: bob}}, e)
		},
		func(e *Effects) {
			(&ErasureStep{User: alice, Edges: []Edge{{bob, alice}, {alice, carol}}}).Decide(e)
		},
		func(e *Effects) {
			(&Repost{Viewer: alice, Post: post, NewPost: 9}).Decide(PostFacts{Exists: true, Author: bob}, e)
		},
		func(e *Effects) { (&Follow{Viewer: alice, Target: bob}).Decide(FollowFacts{}, e) },
		func(e *Effects) { (&MarkRead{Viewer: alice, Kind: engine.Likes}).Decide(0, e) },
		func(e *Effects) { (&ClickRedDot{Viewer: alice}).Decide(3, e) },
		func(e *Effects) { (&Publish{Title: "t"}).Decide(e) },
		func(e *Effects) {
			(&MarkMessagesRead{Viewer: bob, Messages: []engine.MessageID{1}}).Decide(
				[]MessageFacts{{Exists: true, Sender: alice, Viewer: MemberState{true, true}, Counted: true}}, e)
		},
	}
	for i, decide := range decisions {
		var live, quiet Effects
		quiet.Quiet = true
		decide(&live)
		decide(&quiet)
		if live.Empty() != quiet.Empty() || len(quiet.Events) != 0 ||
			!slices.Equal(live.Counts, quiet.Counts) || !slices.Equal(live.Bumps, quiet.Bumps) ||
			!slices.Equal(live.Reacts, quiet.Reacts) || !slices.Equal(live.ReactionCounts, quiet.ReactionCounts) ||
			!slices.Equal(live.Registers, quiet.Registers) || !slices.Equal(live.Follows, quiet.Follows) ||
			!slices.Equal(live.Receipts, quiet.Receipts) || !slices.Equal(live.Clicks, quiet.Clicks) {
			t.Errorf("decision %d: live %+v, quiet %+v", i, live, quiet)
		}
		if allocs := testing.AllocsPerRun(50, func() { quiet.Reset(); decide(&quiet) }); allocs > 0 {
			t.Errorf("decision %d: %v allocations when quiet", i, allocs)
		}
	}
}
