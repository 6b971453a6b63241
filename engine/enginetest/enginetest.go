// Package enginetest is the conformance suite of engine.Store. It owns the
// executable form of API.md's Semantics section: every backend (embedded,
// redisstore, ...) runs Run unchanged, through the Store interface only, so
// a product rule that one backend obeys and another does not is a failing
// test rather than a difference users discover.
//
// The suite asserts exact numbers, uses errors.Is for every error, and keeps
// each subtest on a fresh store, so a failure names one rule.
package enginetest

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/snowflake"
)

// Run runs every conformance subtest. open must return a fresh, empty store
// for each call and arrange its Close with t.Cleanup.
func Run(t *testing.T, open func(t *testing.T) engine.Store) {
	tests := []struct {
		name string
		fn   func(*testing.T, engine.Store)
	}{
		{"UnknownPosts", testUnknownPosts},
		{"Page", testPage},
		{"CreatePost", testCreatePost},
		{"Likes", testLikes},
		{"ConcurrentLikes", testConcurrentLikes},
		{"Favorites", testFavorites},
		{"Comments", testComments},
		{"Reposts", testReposts},
		{"Views", testViews},
		{"Idempotency", testIdempotency},
		{"IdempotencyKeyReuse", testIdemReuse},
		{"MarkRead", testMarkRead},
		{"SystemNotifications", testSystemNotifications},
		{"RedDot", testRedDot},
		{"FeedSeedExample", testFeedSeedExample},
		{"UserCounts", testUserCounts},
		{"Groups", testGroups},
		{"LeaveGroup", testLeaveGroup},
		{"Messages", testMessages},
		{"Receipts200", testReceipts200},
		{"MemberPages", testMemberPages},
		{"ReceiptPages", testReceiptPages},
		{"InputErrors", testInputErrors},
		{"Events", testEvents},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := open(t)
			tc.fn(t, s)
			CheckClean(t, s)
		})
	}
}

var bg = context.Background()

// idSeq makes client-supplied post ids unique within a millisecond.
var idSeq atomic.Uint64

// clientPostID returns a valid snowflake id as a client would make it, from
// a node the engine does not use by default.
func clientPostID() engine.PostID {
	return engine.PostID(snowflake.Make(time.Now().UnixMilli(), 1000, idSeq.Add(1)))
}

func ok(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func wantErr(t *testing.T, err, want error, what string) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: got error %v, want %v", what, err, want)
	}
}

func newPost(t *testing.T, s engine.Store, author engine.UserID) engine.PostID {
	t.Helper()
	id, err := s.CreatePost(bg, author, 0, "")
	ok(t, err)
	if id == 0 {
		t.Fatal("CreatePost returned id 0")
	}
	return id
}

func counts(t *testing.T, s engine.Store, id engine.PostID) engine.Counts {
	t.Helper()
	c, err := s.Counts(bg, []engine.PostID{id})
	ok(t, err)
	if len(c) != 1 {
		t.Fatalf("Counts returned %d entries for 1 id", len(c))
	}
	return c[0]
}

func unread(t *testing.T, s engine.Store, u engine.UserID) engine.Unread {
	t.Helper()
	n, err := s.Unread(bg, u)
	ok(t, err)
	return n
}

func userCounts(t *testing.T, s engine.Store, u engine.UserID) engine.UserCounts {
	t.Helper()
	c, err := s.UserCounts(bg, []engine.UserID{u})
	ok(t, err)
	if len(c) != 1 {
		t.Fatalf("UserCounts returned %d entries for 1 id", len(c))
	}
	return c[0]
}

func wantCounts(t *testing.T, s engine.Store, id engine.PostID, want engine.Counts) {
	t.Helper()
	if got := counts(t, s, id); got != want {
		t.Fatalf("counts of %d = %+v, want %+v", id, got, want)
	}
}

func wantUnread(t *testing.T, s engine.Store, u engine.UserID, want engine.Unread) {
	t.Helper()
	if got := unread(t, s, u); got != want {
		t.Fatalf("unread of %d = %+v, want %+v", u, got, want)
	}
}

func liked(t *testing.T, s engine.Store, u engine.UserID, id engine.PostID) bool {
	t.Helper()
	b, err := s.Liked(bg, u, []engine.PostID{id})
	ok(t, err)
	return b[0]
}

func favorited(t *testing.T, s engine.Store, u engine.UserID, id engine.PostID) bool {
	t.Helper()
	b, err := s.Favorited(bg, u, []engine.PostID{id})
	ok(t, err)
	return b[0]
}

func testUnknownPosts(t *testing.T, s engine.Store) {
	unknown := []engine.PostID{clientPostID(), 12345, engine.PostID(snowflake.Make(time.Now().UnixMilli(), 3, 7))}
	infos, err := s.Posts(bg, unknown)
	ok(t, err)
	if len(infos) != len(unknown) {
		t.Fatalf("Posts returned %d entries for %d ids", len(infos), len(unknown))
	}
	for i, in := range infos {
		if in.Exists || in.Author != 0 {
			t.Fatalf("unknown post %d reads as %+v", unknown[i], in)
		}
	}
	cs, err := s.Counts(bg, unknown)
	ok(t, err)
	for i, c := range cs {
		if !c.IsZero() {
			t.Fatalf("unknown post %d has counts %+v", unknown[i], c)
		}
	}
	lk, err := s.Liked(bg, 5, unknown)
	ok(t, err)
	if len(lk) != len(unknown) || slices.Contains(lk, true) {
		t.Fatalf("Liked of unknown posts = %v", lk)
	}
	id := unknown[0]
	wantErr(t, s.Like(bg, 5, id), engine.ErrNotFound, "Like unknown")
	wantErr(t, s.Unlike(bg, 5, id), engine.ErrNotFound, "Unlike unknown")
	wantErr(t, s.Favorite(bg, 5, id), engine.ErrNotFound, "Favorite unknown")
	wantErr(t, s.Unfavorite(bg, 5, id), engine.ErrNotFound, "Unfavorite unknown")
	wantErr(t, s.Comment(bg, 5, id, 0, nil, ""), engine.ErrNotFound, "Comment unknown")
	_, err = s.Repost(bg, 5, id, nil, "")
	wantErr(t, err, engine.ErrNotFound, "Repost unknown")
	// Views on unknown posts are ignored, and do not make the post known.
	ok(t, s.RecordViews(bg, unknown))
	infos, err = s.Posts(bg, unknown[:1])
	ok(t, err)
	if infos[0].Exists {
		t.Fatal("RecordViews made an unknown post known")
	}
	wantCounts(t, s, id, engine.Counts{})
	if c := userCounts(t, s, 5); c != (engine.UserCounts{}) {
		t.Fatalf("failed mutations changed user counts: %+v", c)
	}
}

func testCreatePost(t *testing.T, s engine.Store) {
	const author = 7
	before := time.Now()
	id := newPost(t, s, author)
	if !snowflake.Valid(uint64(id), time.Now(), time.Minute) {
		t.Fatalf("generated id %d is not a snowflake id", id)
	}
	if at := snowflake.Time(uint64(id)); at.Before(before.Add(-time.Second)) || at.After(time.Now().Add(time.Second)) {
		t.Fatalf("generated id %d carries time %v, want about now", id, at)
	}
	infos, err := s.Posts(bg, []engine.PostID{id})
	ok(t, err)
	if infos[0] != (engine.PostInfo{Exists: true, Author: author}) {
		t.Fatalf("Posts = %+v", infos[0])
	}
	wantCounts(t, s, id, engine.Counts{})

	// A client-supplied snowflake id is kept.
	cid := clientPostID()
	got, err := s.CreatePost(bg, author, cid, "")
	ok(t, err)
	if got != cid {
		t.Fatalf("CreatePost(id %d) returned %d", cid, got)
	}
	// Supplying an existing id again (no idempotency key) is invalid, by
	// the author or anyone else, and changes nothing.
	_, err = s.CreatePost(bg, author, cid, "")
	wantErr(t, err, engine.ErrInvalid, "CreatePost existing id")
	_, err = s.CreatePost(bg, 8, cid, "")
	wantErr(t, err, engine.ErrInvalid, "CreatePost existing id by another user")
	infos, err = s.Posts(bg, []engine.PostID{cid})
	ok(t, err)
	if infos[0].Author != author {
		t.Fatalf("author of %d changed to %d", cid, infos[0].Author)
	}
	// Ids that cannot be snowflakes: too small, from the far future.
	future := engine.PostID(snowflake.Make(time.Now().Add(365*24*time.Hour).UnixMilli(), 1, 1))
	for _, bad := range []engine.PostID{1, 1 << 20, ^engine.PostID(0), future} {
		_, err = s.CreatePost(bg, author, bad, "")
		wantErr(t, err, engine.ErrInvalid, "CreatePost invalid id")
		infos, err = s.Posts(bg, []engine.PostID{bad})
		ok(t, err)
		if infos[0].Exists {
			t.Fatalf("invalid id %d became a post", bad)
		}
	}
	if c := userCounts(t, s, author); c.Posts != 2 {
		t.Fatalf("postCount = %d, want 2", c.Posts)
	}
	// Generated ids never collide and keep increasing.
	prev := newPost(t, s, author)
	for range 100 {
		next := newPost(t, s, author)
		if next <= prev {
			t.Fatalf("generated id %d after %d", next, prev)
		}
		prev = next
	}
	if c := userCounts(t, s, author); c.Posts != 103 {
		t.Fatalf("postCount = %d, want 103", c.Posts)
	}
}

func testLikes(t *testing.T, s engine.Store) {
	const author, fan = 10, 11
	p := newPost(t, s, author)
	ok(t, s.Like(bg, fan, p))
	wantCounts(t, s, p, engine.Counts{Likes: 1})
	wantUnread(t, s, author, engine.Unread{Likes: 1})
	if !liked(t, s, fan, p) || liked(t, s, author, p) {
		t.Fatal("Liked flags wrong after one like")
	}
	// A repeat changes nothing: neither the count nor the author's badge.
	ok(t, s.Like(bg, fan, p))
	wantCounts(t, s, p, engine.Counts{Likes: 1})
	wantUnread(t, s, author, engine.Unread{Likes: 1})

	// The author liking their own post counts, but bumps no badge.
	ok(t, s.Like(bg, author, p))
	wantCounts(t, s, p, engine.Counts{Likes: 2})
	wantUnread(t, s, author, engine.Unread{Likes: 1})

	// Unlike removes the like and leaves the author's badge alone.
	ok(t, s.Unlike(bg, fan, p))
	wantCounts(t, s, p, engine.Counts{Likes: 1})
	wantUnread(t, s, author, engine.Unread{Likes: 1})
	if liked(t, s, fan, p) {
		t.Fatal("still liked after unlike")
	}
	// Unliking a post not liked changes nothing.
	ok(t, s.Unlike(bg, fan, p))
	ok(t, s.Unlike(bg, 99, p))
	wantCounts(t, s, p, engine.Counts{Likes: 1})
	// Liking again after an unlike counts again and notifies again.
	ok(t, s.Like(bg, fan, p))
	wantCounts(t, s, p, engine.Counts{Likes: 2})
	wantUnread(t, s, author, engine.Unread{Likes: 2})
	// The fan's own badges are untouched by their likes.
	wantUnread(t, s, fan, engine.Unread{})

	// Liked answers per post, in order.
	q := newPost(t, s, author)
	got, err := s.Liked(bg, fan, []engine.PostID{q, p, q})
	ok(t, err)
	if !slices.Equal(got, []bool{false, true, false}) {
		t.Fatalf("Liked = %v", got)
	}
}

func testConcurrentLikes(t *testing.T, s engine.Store) {
	const author, fan = 20, 21
	p := newPost(t, s, author)
	const n = 50
	errs := make(chan error, 2*n)
	start := make(chan struct{})
	for i := range n {
		go func() {
			<-start
			errs <- s.Like(bg, fan, p)
		}()
		go func() {
			<-start
			errs <- s.Like(bg, engine.UserID(1000+i), p)
		}()
	}
	close(start)
	for range 2 * n {
		ok(t, <-errs)
	}
	// One like from fan, one from each of the n other users.
	wantCounts(t, s, p, engine.Counts{Likes: n + 1})
	wantUnread(t, s, author, engine.Unread{Likes: n + 1})
}

func testFavorites(t *testing.T, s engine.Store) {
	const author, fan = 30, 31
	p := newPost(t, s, author)
	ok(t, s.Favorite(bg, fan, p))
	ok(t, s.Favorite(bg, fan, p))
	wantCounts(t, s, p, engine.Counts{Favorites: 1})
	if !favorited(t, s, fan, p) || liked(t, s, fan, p) {
		t.Fatal("favorite flags wrong")
	}
	// Favorites bump no badge.
	wantUnread(t, s, author, engine.Unread{})
	ok(t, s.Favorite(bg, author, p))
	wantCounts(t, s, p, engine.Counts{Favorites: 2})
	ok(t, s.Unfavorite(bg, fan, p))
	ok(t, s.Unfavorite(bg, fan, p))
	wantCounts(t, s, p, engine.Counts{Favorites: 1})
	if favorited(t, s, fan, p) || !favorited(t, s, author, p) {
		t.Fatal("favorite flags wrong after unfavorite")
	}
	// Likes and favorites are separate sets.
	ok(t, s.Like(bg, fan, p))
	ok(t, s.Unfavorite(bg, fan, p))
	wantCounts(t, s, p, engine.Counts{Likes: 1, Favorites: 1})
}

func testComments(t *testing.T, s engine.Store) {
	const author, other, m1, m2 = 40, 41, 42, 43
	p := newPost(t, s, author)
	// Mentions: duplicates once, the actor never, id 0 ignored.
	ok(t, s.Comment(bg, other, p, 0, []engine.UserID{m1, m2, m1, other, 0}, ""))
	wantCounts(t, s, p, engine.Counts{Comments: 1})
	wantUnread(t, s, author, engine.Unread{Comments: 1})
	wantUnread(t, s, m1, engine.Unread{Mentions: 1})
	wantUnread(t, s, m2, engine.Unread{Mentions: 1})
	wantUnread(t, s, other, engine.Unread{})

	// The author commenting on their own post: counted, no comment badge;
	// the author mentioning themselves does nothing either.
	ok(t, s.Comment(bg, author, p, 0, []engine.UserID{author, m1}, ""))
	wantCounts(t, s, p, engine.Counts{Comments: 2})
	wantUnread(t, s, author, engine.Unread{Comments: 1})
	wantUnread(t, s, m1, engine.Unread{Mentions: 2})

	// Someone else mentioning the author: both badges.
	ok(t, s.Comment(bg, other, p, 0, []engine.UserID{author}, ""))
	wantCounts(t, s, p, engine.Counts{Comments: 3})
	wantUnread(t, s, author, engine.Unread{Comments: 2, Mentions: 1})
}

func testReposts(t *testing.T, s engine.Store) {
	const author, reposter, follower, m = 50, 51, 52, 53
	p := newPost(t, s, author)
	ok(t, s.Follow(bg, follower, reposter))
	np, err := s.Repost(bg, reposter, p, []engine.UserID{m, reposter}, "")
	ok(t, err)
	if np == 0 || np == p {
		t.Fatalf("Repost returned %d", np)
	}
	wantCounts(t, s, p, engine.Counts{Reposts: 1})
	wantCounts(t, s, np, engine.Counts{})
	infos, err := s.Posts(bg, []engine.PostID{np})
	ok(t, err)
	if infos[0] != (engine.PostInfo{Exists: true, Author: reposter}) {
		t.Fatalf("repost reads as %+v", infos[0])
	}
	if c := userCounts(t, s, reposter); c.Posts != 1 {
		t.Fatalf("reposter postCount = %d, want 1", c.Posts)
	}
	if c := userCounts(t, s, author); c.Posts != 1 {
		t.Fatalf("author postCount = %d, want 1", c.Posts)
	}
	wantUnread(t, s, follower, engine.Unread{Feed: 1})
	wantUnread(t, s, m, engine.Unread{Mentions: 1})
	wantUnread(t, s, reposter, engine.Unread{})
	// A repost is a post: it can be liked and reposted in turn.
	ok(t, s.Like(bg, author, np))
	wantUnread(t, s, reposter, engine.Unread{Likes: 1})
	np2, err := s.Repost(bg, author, np, nil, "")
	ok(t, err)
	wantCounts(t, s, np, engine.Counts{Likes: 1, Reposts: 1})
	if np2 == np || np2 == p {
		t.Fatalf("second repost returned %d", np2)
	}
	if c := userCounts(t, s, author); c.Posts != 2 {
		t.Fatalf("author postCount = %d, want 2", c.Posts)
	}
}

func testViews(t *testing.T, s engine.Store) {
	p, q := newPost(t, s, 60), newPost(t, s, 61)
	unknown := clientPostID()
	ok(t, s.RecordViews(bg, []engine.PostID{p, unknown, q}))
	ok(t, s.RecordViews(bg, []engine.PostID{p}))
	got, err := s.Counts(bg, []engine.PostID{q, unknown, p})
	ok(t, err)
	want := []engine.Counts{{Views: 1}, {}, {Views: 2}}
	if !slices.Equal(got, want) {
		t.Fatalf("Counts = %+v, want %+v", got, want)
	}
	// Views bump no badge.
	wantUnread(t, s, 60, engine.Unread{})
}

func testIdempotency(t *testing.T, s engine.Store) {
	const u, v = 70, 71
	// CreatePost.
	a, err := s.CreatePost(bg, u, 0, "k1")
	ok(t, err)
	b, err := s.CreatePost(bg, u, 0, "k1")
	ok(t, err)
	if a != b {
		t.Fatalf("retried CreatePost returned %d then %d", a, b)
	}
	// A retry with a client-supplied id is not "existing id" either.
	cid := clientPostID()
	c1, err := s.CreatePost(bg, u, cid, "k-client")
	ok(t, err)
	c2, err := s.CreatePost(bg, u, cid, "k-client")
	ok(t, err)
	if c1 != cid || c2 != cid {
		t.Fatalf("retried CreatePost(%d) returned %d, %d", cid, c1, c2)
	}
	if c := userCounts(t, s, u); c.Posts != 2 {
		t.Fatalf("postCount = %d after retries, want 2", c.Posts)
	}
	// Another viewer with the same key is another operation.
	c, err := s.CreatePost(bg, v, 0, "k1")
	ok(t, err)
	if c == a {
		t.Fatal("another viewer's key returned the first viewer's post")
	}
	if uc := userCounts(t, s, v); uc.Posts != 1 {
		t.Fatalf("second viewer postCount = %d, want 1", uc.Posts)
	}

	// Comment.
	ok(t, s.Comment(bg, v, a, 0, []engine.UserID{72}, "c1"))
	ok(t, s.Comment(bg, v, a, 0, []engine.UserID{72}, "c1"))
	wantCounts(t, s, a, engine.Counts{Comments: 1})
	wantUnread(t, s, u, engine.Unread{Comments: 1})
	wantUnread(t, s, 72, engine.Unread{Mentions: 1})
	ok(t, s.Comment(bg, 73, a, 0, nil, "c1"))
	wantCounts(t, s, a, engine.Counts{Comments: 2})
	// Without a key, every call is a new comment.
	ok(t, s.Comment(bg, v, a, 0, nil, ""))
	ok(t, s.Comment(bg, v, a, 0, nil, ""))
	wantCounts(t, s, a, engine.Counts{Comments: 4})

	// Repost.
	r1, err := s.Repost(bg, v, a, nil, "r1")
	ok(t, err)
	r2, err := s.Repost(bg, v, a, nil, "r1")
	ok(t, err)
	if r1 != r2 {
		t.Fatalf("retried Repost returned %d then %d", r1, r2)
	}
	wantCounts(t, s, a, engine.Counts{Comments: 4, Reposts: 1})
	if uc := userCounts(t, s, v); uc.Posts != 2 {
		t.Fatalf("reposter postCount = %d, want 2", uc.Posts)
	}

	// SendMessage.
	g, err := s.CreateGroup(bg, u, []engine.UserID{v})
	ok(t, err)
	m1, err := s.SendMessage(bg, u, g, "hi", nil, "m1")
	ok(t, err)
	m2, err := s.SendMessage(bg, u, g, "hi", nil, "m1")
	ok(t, err)
	if m1.ID != m2.ID || m1.ID == 0 {
		t.Fatalf("retried SendMessage returned %d then %d", m1.ID, m2.ID)
	}
	wantUnread(t, s, v, engine.Unread{Messages: 1})
	m3, err := s.SendMessage(bg, v, g, "hi", nil, "m1")
	ok(t, err)
	if m3.ID == m1.ID {
		t.Fatal("another sender's key returned the first sender's message")
	}
	// u's post got comments from v (once, despite the retry), from 73 and
	// twice from v without a key.
	wantUnread(t, s, u, engine.Unread{Comments: 4, Messages: 1})

	// PublishNotification.
	n1, err := s.PublishNotification(bg, "t", "b", "n1")
	ok(t, err)
	n2, err := s.PublishNotification(bg, "t", "b", "n1")
	ok(t, err)
	if n1.ID != n2.ID || n1.ID == 0 {
		t.Fatalf("retried PublishNotification returned %d then %d", n1.ID, n2.ID)
	}
	list, err := s.Notifications(bg, 10, 0)
	ok(t, err)
	if len(list) != 1 {
		t.Fatalf("%d notifications after a retried publish, want 1", len(list))
	}
}

// testIdemReuse: a key is bound to the kind and arguments of its first
// use. A retry with the same arguments (mentions in any order, duplicates
// and the actor dropped as always) answers with the first result; a reuse
// for anything else is ErrInvalid and changes nothing.
func testIdemReuse(t *testing.T, s engine.Store) {
	const u, v, w = 80, 81, 82
	a := newPost(t, s, u)
	b := newPost(t, s, u)
	refused := func(err error, what string) {
		t.Helper()
		wantErr(t, err, engine.ErrInvalid, what)
	}

	ok(t, s.Comment(bg, v, a, 0, []engine.UserID{w, 83}, "c"))
	ok(t, s.Comment(bg, v, a, 0, []engine.UserID{83, w, w, v}, "c")) // the same, said differently
	refused(s.Comment(bg, v, b, 0, []engine.UserID{w, 83}, "c"), "the key of a comment on a reused on b")
	refused(s.Comment(bg, v, a, 0, []engine.UserID{w}, "c"), "the key reused with other mentions")
	refused(s.Comment(bg, v, a, 0, nil, "c"), "the key reused without mentions")
	_, err := s.Repost(bg, v, a, []engine.UserID{w, 83}, "c")
	refused(err, "a comment's key reused for a repost")
	_, err = s.CreatePost(bg, v, 0, "c")
	refused(err, "a comment's key reused for createPost")
	wantCounts(t, s, a, engine.Counts{Comments: 1})
	wantCounts(t, s, b, engine.Counts{})
	wantUnread(t, s, u, engine.Unread{Comments: 1})
	wantUnread(t, s, w, engine.Unread{Mentions: 1})
	if uc := userCounts(t, s, v); uc.Posts != 0 {
		t.Fatalf("refused reuses made %d posts", uc.Posts)
	}
	// The first use still answers its retries after the refusals.
	ok(t, s.Comment(bg, v, a, 0, []engine.UserID{w, 83}, "c"))
	wantCounts(t, s, a, engine.Counts{Comments: 1})

	// A first attempt refused on a product rule binds nothing.
	wantErr(t, s.Comment(bg, v, 12345, 0, nil, "z"), engine.ErrNotFound, "comment on an unknown post")
	ok(t, s.Comment(bg, v, b, 0, nil, "z"))
	wantCounts(t, s, b, engine.Counts{Comments: 1})

	// CreatePost: the requested id is an argument.
	p1, err := s.CreatePost(bg, v, 0, "p")
	ok(t, err)
	_, err = s.CreatePost(bg, v, clientPostID(), "p")
	refused(err, "createPost's key reused with a client id")
	p2, err := s.CreatePost(bg, v, 0, "p")
	ok(t, err)
	if p1 != p2 {
		t.Fatalf("retried CreatePost returned %d then %d", p1, p2)
	}

	// Repost.
	r1, err := s.Repost(bg, v, a, nil, "r")
	ok(t, err)
	_, err = s.Repost(bg, v, b, nil, "r")
	refused(err, "a repost's key reused on another post")
	r2, err := s.Repost(bg, v, a, nil, "r")
	ok(t, err)
	if r1 != r2 {
		t.Fatalf("retried Repost returned %d then %d", r1, r2)
	}
	wantCounts(t, s, b, engine.Counts{Comments: 1})
	if uc := userCounts(t, s, v); uc.Posts != 2 {
		t.Fatalf("postCount = %d, want 2 (one post, one repost)", uc.Posts)
	}

	// SendMessage: group, text and mentions.
	g1, err := s.CreateGroup(bg, v, []engine.UserID{w})
	ok(t, err)
	g2, err := s.CreateGroup(bg, v, []engine.UserID{w})
	ok(t, err)
	m1, err := s.SendMessage(bg, v, g1, "hi", nil, "m")
	ok(t, err)
	_, err = s.SendMessage(bg, v, g1, "hello", nil, "m")
	refused(err, "a message's key reused with another text")
	_, err = s.SendMessage(bg, v, g2, "hi", nil, "m")
	refused(err, "a message's key reused in another group")
	_, err = s.SendMessage(bg, v, g1, "hi", []engine.UserID{w}, "m")
	refused(err, "a message's key reused with mentions")
	refused(s.Comment(bg, v, a, 0, nil, "m"), "a message's key reused for a comment")
	m2, err := s.SendMessage(bg, v, g1, "hi", nil, "m")
	ok(t, err)
	if m1.ID != m2.ID {
		t.Fatalf("retried SendMessage returned %d then %d", m1.ID, m2.ID)
	}
	wantUnread(t, s, w, engine.Unread{Mentions: 1, Messages: 1})

	// PublishNotification.
	n1, err := s.PublishNotification(bg, "t", "b", "n")
	ok(t, err)
	_, err = s.PublishNotification(bg, "t", "other", "n")
	refused(err, "a notification's key reused with another body")
	_, err = s.PublishNotification(bg, "other", "b", "n")
	refused(err, "a notification's key reused with another title")
	n2, err := s.PublishNotification(bg, "t", "b", "n")
	ok(t, err)
	if n1.ID != n2.ID {
		t.Fatalf("retried PublishNotification returned %d then %d", n1.ID, n2.ID)
	}
	if list, err := s.Notifications(bg, 10, 0); err != nil || len(list) != 1 {
		t.Fatalf("notifications after refused reuses: %d, %v; want 1", len(list), err)
	}
}

func testMarkRead(t *testing.T, s engine.Store) {
	const u, o = 80, 81
	wantUnread(t, s, u, engine.Unread{})
	p := newPost(t, s, u)
	ok(t, s.Like(bg, o, p))
	ok(t, s.Comment(bg, o, p, 0, []engine.UserID{u}, ""))
	g, err := s.CreateGroup(bg, o, []engine.UserID{u})
	ok(t, err)
	_, err = s.SendMessage(bg, o, g, "hello", nil, "")
	ok(t, err)
	_, err = s.PublishNotification(bg, "t", "b", "")
	ok(t, err)
	ok(t, s.Follow(bg, u, o))
	newPost(t, s, o)
	newPost(t, s, o)
	all := engine.Unread{Mentions: 1, Comments: 1, Likes: 1, Messages: 1, System: 1, Feed: 2}
	wantUnread(t, s, u, all)
	if all.Total() != 7 {
		t.Fatalf("Total = %d, want 7", all.Total())
	}
	steps := []struct {
		kind engine.UnreadKind
		zero func(*engine.Unread)
	}{
		{engine.Mentions, func(n *engine.Unread) { n.Mentions = 0 }},
		{engine.Comments, func(n *engine.Unread) { n.Comments = 0 }},
		{engine.Likes, func(n *engine.Unread) { n.Likes = 0 }},
		{engine.Messages, func(n *engine.Unread) { n.Messages = 0 }},
		{engine.System, func(n *engine.Unread) { n.System = 0 }},
		{engine.Feed, func(n *engine.Unread) { n.Feed = 0 }},
	}
	for _, st := range steps {
		ok(t, s.MarkRead(bg, u, st.kind))
		st.zero(&all)
		wantUnread(t, s, u, all)
	}
	// Counting resumes after a reset.
	ok(t, s.Comment(bg, o, p, 0, nil, ""))
	newPost(t, s, o)
	wantUnread(t, s, u, engine.Unread{Comments: 1, Feed: 1})
	// MarkRead on a badge that is already 0, or for a user never seen.
	ok(t, s.MarkRead(bg, u, engine.Likes))
	ok(t, s.MarkRead(bg, 89, engine.Feed))
	wantUnread(t, s, 89, engine.Unread{})
	wantErr(t, s.MarkRead(bg, u, 0), engine.ErrInvalid, "MarkRead kind 0")
	wantErr(t, s.MarkRead(bg, u, engine.Feed+1), engine.ErrInvalid, "MarkRead unknown kind")
	wantUnread(t, s, u, engine.Unread{Comments: 1, Feed: 1})
}

func testSystemNotifications(t *testing.T, s engine.Store) {
	const old, late = 90, 91
	wantUnread(t, s, old, engine.Unread{}) // old is seen before any publish
	n1, err := s.PublishNotification(bg, "one", "first body", "")
	ok(t, err)
	if n1.ID == 0 || n1.Title != "one" || n1.Body != "first body" || n1.CreatedAt.IsZero() {
		t.Fatalf("published %+v", n1)
	}
	n2, err := s.PublishNotification(bg, "two", "", "")
	ok(t, err)
	if n2.ID <= n1.ID {
		t.Fatalf("notification ids not increasing: %d then %d", n1.ID, n2.ID)
	}
	wantUnread(t, s, old, engine.Unread{System: 2})
	// A user seen for the first time starts at the newest: nothing unread.
	wantUnread(t, s, late, engine.Unread{})
	n3, err := s.PublishNotification(bg, "three", "b", "")
	ok(t, err)
	wantUnread(t, s, old, engine.Unread{System: 3})
	wantUnread(t, s, late, engine.Unread{System: 1})
	ok(t, s.MarkRead(bg, old, engine.System))
	wantUnread(t, s, old, engine.Unread{})
	wantUnread(t, s, late, engine.Unread{System: 1})

	ids := func(ns []engine.Notification) []engine.NotificationID {
		out := make([]engine.NotificationID, len(ns))
		for i, n := range ns {
			out[i] = n.ID
		}
		return out
	}
	page, err := s.Notifications(bg, 2, 0)
	ok(t, err)
	if got := ids(page); !slices.Equal(got, []engine.NotificationID{n3.ID, n2.ID}) {
		t.Fatalf("first page = %v", got)
	}
	if page[1].Title != "two" || page[0].Body != "b" {
		t.Fatalf("page contents %+v", page)
	}
	page, err = s.Notifications(bg, 2, n2.ID)
	ok(t, err)
	if got := ids(page); !slices.Equal(got, []engine.NotificationID{n1.ID}) {
		t.Fatalf("second page = %v", got)
	}
	page, err = s.Notifications(bg, 20, n1.ID)
	ok(t, err)
	if len(page) != 0 {
		t.Fatalf("page after the oldest = %v", ids(page))
	}
	page, err = s.Notifications(bg, 0, 0)
	ok(t, err)
	if len(page) != 0 {
		t.Fatalf("first=0 returned %d", len(page))
	}
	_, err = s.Notifications(bg, -1, 0)
	wantErr(t, err, engine.ErrInvalid, "Notifications first=-1")
}

func testRedDot(t *testing.T, s engine.Store) {
	const a, b = 100, 101
	wantUnread(t, s, a, engine.Unread{})
	ok(t, s.PushRedDot(bg))
	// Never clicked: any push shows, for users seen before or not.
	wantUnread(t, s, a, engine.Unread{RedDot: true})
	wantUnread(t, s, b, engine.Unread{RedDot: true})
	ok(t, s.ClickRedDot(bg, a))
	wantUnread(t, s, a, engine.Unread{})
	wantUnread(t, s, b, engine.Unread{RedDot: true})
	ok(t, s.PushRedDot(bg))
	wantUnread(t, s, a, engine.Unread{RedDot: true})
	ok(t, s.ClickRedDot(bg, a))
	ok(t, s.ClickRedDot(bg, b))
	wantUnread(t, s, a, engine.Unread{})
	wantUnread(t, s, b, engine.Unread{})
	// The red dot is not a count: Total ignores it.
	if (engine.Unread{RedDot: true}).Total() != 0 {
		t.Fatal("Total counts the red dot")
	}
}

func testFeedSeedExample(t *testing.T, s engine.Store) {
	const a, b, c, d = 110, 111, 112, 113
	posts := func(u engine.UserID, n int) {
		for range n {
			newPost(t, s, u)
		}
	}
	posts(b, 6)
	posts(c, 7)
	posts(d, 12)
	// Following starts the snapshot at the current count.
	for _, u := range []engine.UserID{b, c, d} {
		ok(t, s.Follow(bg, a, u))
	}
	wantUnread(t, s, a, engine.Unread{})
	posts(b, 4) // 10
	posts(c, 1) // 8
	posts(d, 2) // 14
	// docs/seeds.md#seed-002: (10-6) + (8-7) + (14-12) = 7.
	wantUnread(t, s, a, engine.Unread{Feed: 7})
	// A repeated follow does not reset the snapshot.
	ok(t, s.Follow(bg, a, b))
	wantUnread(t, s, a, engine.Unread{Feed: 7})
	// Unfollowing drops the followee from the sum.
	ok(t, s.Unfollow(bg, a, d))
	wantUnread(t, s, a, engine.Unread{Feed: 5})
	ok(t, s.MarkRead(bg, a, engine.Feed))
	wantUnread(t, s, a, engine.Unread{})
	posts(c, 3)
	posts(d, 5) // not followed any more
	wantUnread(t, s, a, engine.Unread{Feed: 3})
	// Re-following starts from the current count, not the old snapshot.
	ok(t, s.Follow(bg, a, d))
	wantUnread(t, s, a, engine.Unread{Feed: 3})
	posts(d, 1)
	wantUnread(t, s, a, engine.Unread{Feed: 4})
	// Posts by non-followees and by oneself do not count.
	posts(a, 2)
	posts(120, 2)
	wantUnread(t, s, a, engine.Unread{Feed: 4})
	fs, err := s.Followees(bg, a)
	ok(t, err)
	slices.Sort(fs)
	if !slices.Equal(fs, []engine.UserID{b, c, d}) {
		t.Fatalf("Followees = %v", fs)
	}
}

func testUserCounts(t *testing.T, s engine.Store) {
	const a, b, c = 130, 131, 132
	got, err := s.UserCounts(bg, []engine.UserID{a, b})
	ok(t, err)
	if !slices.Equal(got, []engine.UserCounts{{}, {}}) {
		t.Fatalf("fresh UserCounts = %+v", got)
	}
	for range 3 {
		newPost(t, s, b)
	}
	ok(t, s.Follow(bg, a, b))
	ok(t, s.Follow(bg, a, b))
	ok(t, s.Follow(bg, c, b))
	ok(t, s.Follow(bg, a, c))
	got, err = s.UserCounts(bg, []engine.UserID{a, b, c})
	ok(t, err)
	want := []engine.UserCounts{{Following: 2}, {Posts: 3, Followers: 2}, {Followers: 1, Following: 1}}
	if !slices.Equal(got, want) {
		t.Fatalf("UserCounts = %+v, want %+v", got, want)
	}
	wantErr(t, s.Follow(bg, a, a), engine.ErrInvalid, "follow self")
	wantErr(t, s.Follow(bg, a, 0), engine.ErrInvalid, "follow user 0")
	ok(t, s.Unfollow(bg, a, b))
	ok(t, s.Unfollow(bg, a, b)) // not following: changes nothing
	ok(t, s.Unfollow(bg, b, a))
	got, err = s.UserCounts(bg, []engine.UserID{a, b, c})
	ok(t, err)
	want = []engine.UserCounts{{Following: 1}, {Posts: 3, Followers: 1}, {Followers: 1, Following: 1}}
	if !slices.Equal(got, want) {
		t.Fatalf("UserCounts after unfollow = %+v, want %+v", got, want)
	}
	fs, err := s.Followees(bg, a)
	ok(t, err)
	if !slices.Equal(fs, []engine.UserID{c}) {
		t.Fatalf("Followees = %v", fs)
	}
	fs, err = s.Followees(bg, 139)
	ok(t, err)
	if len(fs) != 0 {
		t.Fatalf("Followees of a new user = %v", fs)
	}
}

func members(t *testing.T, s engine.Store, viewer engine.UserID, g engine.GroupID) []engine.UserID {
	t.Helper()
	gr, err := s.Group(bg, viewer, g)
	ok(t, err)
	if gr.ID != g {
		t.Fatalf("Group returned id %d, want %d", gr.ID, g)
	}
	all := pageAll(t, engine.MaxPageSize, func(first int, after engine.UserID) ([]engine.UserID, error) {
		return s.GroupMembers(bg, viewer, g, first, after)
	})
	if gr.MemberCount != len(all) || !slices.Equal(gr.Members, all[:min(len(all), engine.MaxPageSize)]) {
		t.Fatalf("Group says %d members, first page %v; paging lists %d", gr.MemberCount, gr.Members, len(all))
	}
	return all
}

func wantMembers(t *testing.T, s engine.Store, viewer engine.UserID, g engine.GroupID, want ...engine.UserID) {
	t.Helper()
	if got := members(t, s, viewer, g); !slices.Equal(got, want) {
		t.Fatalf("members = %v, want %v", got, want)
	}
}

// leave makes viewer leave g and checks what LeaveGroup answered: g
// without the viewer, as a remaining member reads it right after.
func leave(t *testing.T, s engine.Store, viewer engine.UserID, g engine.GroupID) engine.Group {
	t.Helper()
	after, err := s.LeaveGroup(bg, viewer, g)
	ok(t, err)
	wantLeft(t, viewer, g, after)
	if len(after.Members) > 0 {
		now, err := s.Group(bg, after.Members[0], g)
		ok(t, err)
		if now.MemberCount != after.MemberCount || !slices.Equal(now.Members, after.Members) {
			t.Fatalf("LeaveGroup answered %d members %v; Group reads %d %v", after.MemberCount, after.Members, now.MemberCount, now.Members)
		}
	}
	return after
}

// wantLeft checks that after is a view of g without viewer, with as many
// members on its page as its count allows.
func wantLeft(t *testing.T, viewer engine.UserID, g engine.GroupID, after engine.Group) {
	t.Helper()
	if after.ID != g || slices.Contains(after.Members, viewer) || len(after.Members) != min(after.MemberCount, engine.MaxPageSize) {
		t.Fatalf("user %d left group %d; LeaveGroup answered group %d with %d members %v", viewer, g, after.ID, after.MemberCount, after.Members)
	}
}

// testLeaveGroup: LeaveGroup answers the group as its remaining members
// see it once the viewer has left, read in the same step as the leave.
func testLeaveGroup(t *testing.T, s engine.Store) {
	const owner = 3000
	g, current := bigGroup(t, s, owner, owner, engine.MaxPageSize+49, 1<<30)
	without := func(us []engine.UserID, gone engine.UserID) []engine.UserID {
		return slices.DeleteFunc(slices.Clone(us), func(u engine.UserID) bool { return u == gone })
	}
	// A member of the first page leaves: the next member moves onto it.
	gone := current[5]
	current = without(current, gone)
	after := leave(t, s, gone, g)
	if after.MemberCount != len(current) || !slices.Equal(after.Members, current[:engine.MaxPageSize]) {
		t.Fatalf("after a first-page member left: %d members, first page %v", after.MemberCount, after.Members)
	}
	// A member beyond the first page leaves: the page stays as it was.
	gone = current[engine.MaxPageSize+20]
	current = without(current, gone)
	after = leave(t, s, gone, g)
	if after.MemberCount != len(current) || !slices.Equal(after.Members, current[:engine.MaxPageSize]) {
		t.Fatalf("after a later member left: %d members, first page %v", after.MemberCount, after.Members)
	}
	// Leaving again is refused and changes nothing.
	_, err := s.LeaveGroup(bg, gone, g)
	wantErr(t, err, engine.ErrForbidden, "leave again")
	if now, err := s.Group(bg, owner, g); err != nil || now.MemberCount != after.MemberCount || !slices.Equal(now.Members, after.Members) {
		t.Fatalf("leaving again changed the group: %d %v, %v", now.MemberCount, now.Members, err)
	}

	// The last member to leave sees the group empty.
	g2, err := s.CreateGroup(bg, owner, []engine.UserID{owner + 1})
	ok(t, err)
	leave(t, s, owner+1, g2)
	if last := leave(t, s, owner, g2); last.MemberCount != 0 || len(last.Members) != 0 {
		t.Fatalf("the last member left a group of %d: %v", last.MemberCount, last.Members)
	}

	testConcurrentLeaves(t, s)
}

// testConcurrentLeaves: members leave while others join. Each leave's
// answer is one state of the group, the one its leave made: without every
// member whose leave had returned before it started, with every user whose
// join had, with those who never leave, its count its members'; and the
// answers agree on one order of the leaves and joins: of two leavers,
// exactly one saw the other gone (a leave that read the group apart from
// leaving would have both see each other), and one that saw more joins
// saw the other gone.
func testConcurrentLeaves(t *testing.T, s engine.Store) {
	const owner, n = 5000, 20
	var stay, leavers, joiners []engine.UserID
	for i := range engine.UserID(n) {
		leavers = append(leavers, owner+1+i)
		stay = append(stay, owner+1+n+i)
		joiners = append(joiners, owner+1+2*n+i)
	}
	g, err := s.CreateGroup(bg, owner, append(slices.Clone(leavers), stay...))
	ok(t, err)
	stay = append(stay, owner)

	// seq orders the calls: a call that ended before another started
	// has a smaller end than the other's start.
	var seq atomic.Int64
	type call struct {
		user       engine.UserID
		start, end int64
		after      engine.Group
		err        error
	}
	leaves, joins := make([]call, n), make([]call, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			c := call{user: leavers[i], start: seq.Add(1)}
			c.after, c.err = s.LeaveGroup(bg, c.user, g)
			c.end = seq.Add(1)
			leaves[i] = c
		})
	}
	// One after the other: joins that race each other may be retried
	// (a backend may read, decide and apply them optimistically).
	wg.Go(func() {
		for i := range n {
			c := call{user: joiners[i], start: seq.Add(1)}
			c.err = s.AddGroupMembers(bg, owner, g, []engine.UserID{c.user})
			c.end = seq.Add(1)
			joins[i] = c
		}
	})
	wg.Wait()
	for _, l := range leaves {
		ok(t, l.err)
		wantLeft(t, l.user, g, l.after)
		for _, u := range l.after.Members {
			if !slices.Contains(stay, u) && !slices.Contains(leavers, u) && !slices.Contains(joiners, u) {
				t.Fatalf("user %d left and saw user %d, who never joined", l.user, u)
			}
		}
		for _, u := range stay {
			if !slices.Contains(l.after.Members, u) {
				t.Fatalf("user %d left and did not see member %d", l.user, u)
			}
		}
		for _, j := range joins {
			ok(t, j.err)
			if j.end < l.start && !slices.Contains(l.after.Members, j.user) {
				t.Fatalf("user %d left after user %d joined, and did not see them", l.user, j.user)
			}
		}
		for _, o := range leaves {
			if o.end < l.start && slices.Contains(l.after.Members, o.user) {
				t.Fatalf("user %d left after user %d did, and still saw them", l.user, o.user)
			}
		}
	}
	joinsSeen := func(c call) int {
		n := 0
		for n < len(joiners) && slices.Contains(c.after.Members, joiners[n]) {
			n++
		}
		for _, u := range joiners[n:] {
			if slices.Contains(c.after.Members, u) {
				t.Fatalf("user %d left and saw joins out of their order: %v", c.user, c.after.Members)
			}
		}
		return n
	}
	for i, a := range leaves {
		for _, b := range leaves[i+1:] {
			aSawB := !slices.Contains(a.after.Members, b.user) // b left before a
			bSawA := !slices.Contains(b.after.Members, a.user)
			if aSawB == bSawA {
				t.Fatalf("users %d and %d left: %d saw %d gone %v, %d saw %d gone %v; exactly one should", a.user, b.user, a.user, b.user, aSawB, b.user, a.user, bSawA)
			}
			if ja, jb := joinsSeen(a), joinsSeen(b); ja > jb && !aSawB || jb > ja && !bSawA {
				t.Fatalf("users %d and %d left, seeing %d and %d joins, and the one who saw more did not see the other gone", a.user, b.user, ja, jb)
			}
		}
	}
	if got := members(t, s, owner, g); len(got) != len(stay)+len(joiners) {
		t.Fatalf("%d members once %d left and %d joined a group of %d", len(got), n, n, 2*n+1)
	}
}

func testGroups(t *testing.T, s engine.Store) {
	const u1, u2, u3, u4, u5 = 140, 141, 142, 143, 144
	g, err := s.CreateGroup(bg, u1, []engine.UserID{u2, u3, u2, u1})
	ok(t, err)
	if g == 0 {
		t.Fatal("CreateGroup returned id 0")
	}
	wantMembers(t, s, u1, g, u1, u2, u3)
	wantMembers(t, s, u3, g, u1, u2, u3)
	_, err = s.Group(bg, u4, g)
	wantErr(t, err, engine.ErrForbidden, "Group by non-member")
	_, err = s.Group(bg, u1, g+12345)
	wantErr(t, err, engine.ErrNotFound, "unknown group")
	wantErr(t, s.AddGroupMembers(bg, u4, g, []engine.UserID{u5}), engine.ErrForbidden, "add by non-member")
	wantErr(t, s.AddGroupMembers(bg, u1, g+12345, []engine.UserID{u5}), engine.ErrNotFound, "add to unknown group")
	_, err = s.LeaveGroup(bg, u4, g)
	wantErr(t, err, engine.ErrForbidden, "leave by non-member")
	_, err = s.LeaveGroup(bg, u4, g+12345)
	wantErr(t, err, engine.ErrNotFound, "leave unknown group")

	// u2 leaves: no longer a member, and cannot act as one.
	leave(t, s, u2, g)
	wantMembers(t, s, u1, g, u1, u3)
	_, err = s.Group(bg, u2, g)
	wantErr(t, err, engine.ErrForbidden, "Group by a member who left")
	wantErr(t, s.AddGroupMembers(bg, u2, g, []engine.UserID{u2}), engine.ErrForbidden, "re-add oneself after leaving")
	_, err = s.LeaveGroup(bg, u2, g)
	wantErr(t, err, engine.ErrForbidden, "leave again") // and changes nothing:
	wantMembers(t, s, u1, g, u1, u3)

	// New members take the next mapids; a rejoining member keeps their old
	// mapid, so they sort back into their old place.
	ok(t, s.AddGroupMembers(bg, u3, g, []engine.UserID{u4, u1}))
	wantMembers(t, s, u1, g, u1, u3, u4)
	ok(t, s.AddGroupMembers(bg, u1, g, []engine.UserID{u2, u5}))
	wantMembers(t, s, u1, g, u1, u2, u3, u4, u5)
	wantMembers(t, s, u2, g, u1, u2, u3, u4, u5)

	// The creator can leave too; the group lives on.
	leave(t, s, u1, g)
	wantMembers(t, s, u5, g, u2, u3, u4, u5)

	// A group of one.
	g2, err := s.CreateGroup(bg, u5, nil)
	ok(t, err)
	if g2 == g {
		t.Fatal("two groups share an id")
	}
	wantMembers(t, s, u5, g2, u5)
}

func testMessages(t *testing.T, s engine.Store) {
	const u1, u2, u3, u4 = 150, 151, 152, 153
	g, err := s.CreateGroup(bg, u1, []engine.UserID{u2, u3})
	ok(t, err)
	_, err = s.SendMessage(bg, u4, g, "x", nil, "")
	wantErr(t, err, engine.ErrForbidden, "SendMessage by non-member")
	_, err = s.SendMessage(bg, u1, g+999, "x", nil, "")
	wantErr(t, err, engine.ErrNotFound, "SendMessage to unknown group")

	before := time.Now().Add(-time.Second)
	m, err := s.SendMessage(bg, u1, g, "hello", []engine.UserID{u3, u4, u1, u3}, "")
	ok(t, err)
	if m.ID == 0 || m.Group != g || m.Sender != u1 || m.Text != "hello" ||
		m.SentAt.Before(before) || m.SentAt.After(time.Now().Add(time.Second)) {
		t.Fatalf("sent %+v", m)
	}
	// Every other member +1 message; mentioned members +1 mention; a
	// mentioned non-member and the sender nothing.
	wantUnread(t, s, u1, engine.Unread{})
	wantUnread(t, s, u2, engine.Unread{Messages: 1})
	wantUnread(t, s, u3, engine.Unread{Messages: 1, Mentions: 1})
	wantUnread(t, s, u4, engine.Unread{})

	got, err := s.Message(bg, u2, m.ID)
	ok(t, err)
	if got.ID != m.ID || got.Group != g || got.Sender != u1 || got.Text != "hello" || !got.SentAt.Equal(m.SentAt) {
		t.Fatalf("Message = %+v, want %+v", got, m)
	}
	_, err = s.Message(bg, u4, m.ID)
	wantErr(t, err, engine.ErrForbidden, "Message by non-member")
	_, err = s.Message(bg, u2, m.ID+1)
	wantErr(t, err, engine.ErrNotFound, "unknown message")

	// Receipts: the sender only.
	_, err = s.Receipts(bg, u2, m.ID, 10)
	wantErr(t, err, engine.ErrForbidden, "Receipts by a member who is not the sender")
	_, err = s.Receipts(bg, u1, m.ID+1, 10)
	wantErr(t, err, engine.ErrNotFound, "Receipts of unknown message")
	wantReceipts(t, s, u1, m.ID, 10, engine.Receipts{UnreadCount: 2, Unreaders: []engine.UserID{u2, u3}})

	_, err = s.MarkMessagesRead(bg, u4, []engine.MessageID{m.ID})
	wantErr(t, err, engine.ErrForbidden, "MarkMessagesRead by non-member")
	_, err = s.MarkMessagesRead(bg, u2, []engine.MessageID{m.ID, m.ID + 1})
	wantErr(t, err, engine.ErrNotFound, "MarkMessagesRead with an unknown id")
	wantReceipts(t, s, u1, m.ID, 10, engine.Receipts{UnreadCount: 2, Unreaders: []engine.UserID{u2, u3}})

	m2, err := s.SendMessage(bg, u2, g, "second", nil, "")
	ok(t, err)
	out, err := s.MarkMessagesRead(bg, u3, []engine.MessageID{m2.ID, m.ID})
	ok(t, err)
	if len(out) != 2 || out[0].ID != m2.ID || out[1].ID != m.ID || out[0].Text != "second" || out[1].Sender != u1 {
		t.Fatalf("MarkMessagesRead returned %+v", out)
	}
	wantReceipts(t, s, u1, m.ID, 10, engine.Receipts{ReadCount: 1, UnreadCount: 1,
		Readers: []engine.UserID{u3}, Unreaders: []engine.UserID{u2}})
	wantReceipts(t, s, u2, m2.ID, 10, engine.Receipts{ReadCount: 1, UnreadCount: 1,
		Readers: []engine.UserID{u3}, Unreaders: []engine.UserID{u1}})
	// Marking again, or the sender marking their own message, changes nothing.
	_, err = s.MarkMessagesRead(bg, u3, []engine.MessageID{m.ID})
	ok(t, err)
	_, err = s.MarkMessagesRead(bg, u1, []engine.MessageID{m.ID})
	ok(t, err)
	wantReceipts(t, s, u1, m.ID, 10, engine.Receipts{ReadCount: 1, UnreadCount: 1,
		Readers: []engine.UserID{u3}, Unreaders: []engine.UserID{u2}})
	// Reading receipts does not touch badges; MarkRead(Messages) does.
	wantUnread(t, s, u3, engine.Unread{Messages: 2, Mentions: 1})
	ok(t, s.MarkRead(bg, u3, engine.Messages))
	wantUnread(t, s, u3, engine.Unread{Mentions: 1})

	// A sender who left the group gets nothing of it by any path: not the
	// message, not its receipts (whatever limit), not a mark.
	leave(t, s, u1, g)
	for _, limit := range []int{0, 10} {
		_, err = s.Receipts(bg, u1, m.ID, limit)
		wantErr(t, err, engine.ErrForbidden, "Receipts by a sender who left")
	}
	_, err = s.Message(bg, u1, m.ID)
	wantErr(t, err, engine.ErrForbidden, "Message by a sender who left")
	_, err = s.MarkMessagesRead(bg, u1, []engine.MessageID{m2.ID})
	wantErr(t, err, engine.ErrForbidden, "MarkMessagesRead by a member who left")
	// Unknown stays NotFound for an ex-member too: nothing to hide.
	_, err = s.Receipts(bg, u1, 12345, 10)
	wantErr(t, err, engine.ErrNotFound, "Receipts of an unknown message by an ex-member")
	// Added back, the sender sees the receipts again (the ex-member's
	// leaving changed none of them).
	ok(t, s.AddGroupMembers(bg, u2, g, []engine.UserID{u1}))
	wantReceipts(t, s, u1, m.ID, 10, engine.Receipts{ReadCount: 1, UnreadCount: 1,
		Readers: []engine.UserID{u3}, Unreaders: []engine.UserID{u2}})
}

func wantReceipts(t *testing.T, s engine.Store, viewer engine.UserID, id engine.MessageID, limit int, want engine.Receipts) {
	t.Helper()
	got, err := s.Receipts(bg, viewer, id, limit)
	ok(t, err)
	if got.ReadCount != want.ReadCount || got.UnreadCount != want.UnreadCount ||
		!slices.Equal(got.Readers, want.Readers) || !slices.Equal(got.Unreaders, want.Unreaders) {
		t.Fatalf("Receipts(limit %d) =\n %+v\nwant\n %+v", limit, got, want)
	}
}

func testReceipts200(t *testing.T, s engine.Store) {
	const sender = 1999
	// others[i] is user 2000+i and gets mapid i+2 (the sender has mapid 1).
	others := make([]engine.UserID, 199)
	for i := range others {
		others[i] = engine.UserID(2000 + i)
	}
	g, err := s.CreateGroup(bg, sender, others[:100])
	ok(t, err)
	ok(t, s.AddGroupMembers(bg, others[0], g, others[100:]))
	if got := members(t, s, sender, g); len(got) != 200 || got[0] != sender || got[199] != others[198] {
		t.Fatalf("group of %d members, first %d last %d", len(got), got[0], got[len(got)-1])
	}
	// Two members leave before the message: not counted.
	leftBefore := []engine.UserID{others[10], others[20]}
	for _, u := range leftBefore {
		leave(t, s, u, g)
	}
	m, err := s.SendMessage(bg, sender, g, "all hands", nil, "")
	ok(t, err)
	// One member joins after the message (not counted); one counted member
	// leaves after it (still counted); a member who left before rejoins
	// (still not counted: they had quit when it was sent).
	const joinedAfter = 5000
	ok(t, s.AddGroupMembers(bg, sender, g, []engine.UserID{joinedAfter, others[10]}))
	leftAfter := others[30]
	leave(t, s, leftAfter, g)

	counted := make([]engine.UserID, 0, 197)
	for _, u := range others {
		if !slices.Contains(leftBefore, u) {
			counted = append(counted, u)
		}
	}
	if len(counted) != 197 {
		t.Fatalf("test setup: %d counted", len(counted))
	}
	wantReceipts(t, s, sender, m.ID, 100, engine.Receipts{UnreadCount: 197, Unreaders: counted[:100]})

	// Reads by the uncounted change nothing; the member who left cannot read.
	for _, u := range []engine.UserID{joinedAfter, others[10], sender} {
		_, err = s.MarkMessagesRead(bg, u, []engine.MessageID{m.ID})
		ok(t, err)
	}
	_, err = s.MarkMessagesRead(bg, leftAfter, []engine.MessageID{m.ID})
	wantErr(t, err, engine.ErrForbidden, "MarkMessagesRead by a member who left")
	wantReceipts(t, s, sender, m.ID, 5, engine.Receipts{UnreadCount: 197, Unreaders: counted[:5]})

	// Every third counted member (except the one who left) reads, newest
	// mapid first to show that lists come in mapid order regardless.
	var readers []engine.UserID
	for i := len(counted) - 1; i >= 0; i-- {
		if u := counted[i]; i%3 == 0 && u != leftAfter {
			_, err = s.MarkMessagesRead(bg, u, []engine.MessageID{m.ID})
			ok(t, err)
			readers = append(readers, u)
		}
	}
	slices.Sort(readers)
	var unreaders []engine.UserID
	for _, u := range counted {
		if !slices.Contains(readers, u) {
			unreaders = append(unreaders, u)
		}
	}
	if len(readers) != 66 || len(unreaders) != 131 {
		t.Fatalf("test setup: %d readers, %d unreaders", len(readers), len(unreaders))
	}
	wantReceipts(t, s, sender, m.ID, 100, engine.Receipts{ReadCount: 66, UnreadCount: 131,
		Readers: readers, Unreaders: unreaders[:100]})
	wantReceipts(t, s, sender, m.ID, 7, engine.Receipts{ReadCount: 66, UnreadCount: 131,
		Readers: readers[:7], Unreaders: unreaders[:7]})
	wantReceipts(t, s, sender, m.ID, 0, engine.Receipts{ReadCount: 66, UnreadCount: 131})
	if !slices.Contains(unreaders, leftAfter) {
		t.Fatal("test setup: the member who left after is not an unreader")
	}
	_, err = s.Receipts(bg, sender, m.ID, -1)
	wantErr(t, err, engine.ErrInvalid, "Receipts limit -1")

	// A second message after the changes counts the new member and the
	// rejoined one, and no longer the one who left.
	m2, err := s.SendMessage(bg, sender, g, "again", nil, "")
	ok(t, err)
	r, err := s.Receipts(bg, sender, m2.ID, 0)
	ok(t, err)
	if r.ReadCount != 0 || r.UnreadCount != 198 { // 199 others - 2 left + 1 rejoined + 1 new - 1 left after
		t.Fatalf("second message receipts %d/%d, want 0/198", r.ReadCount, r.UnreadCount)
	}
	// Badges: a counted member got two messages; the new one only the second.
	wantUnread(t, s, others[0], engine.Unread{Messages: 2})
	wantUnread(t, s, joinedAfter, engine.Unread{Messages: 1})
	wantUnread(t, s, others[20], engine.Unread{})
}

func testInputErrors(t *testing.T, s engine.Store) {
	const u, o = 160, 161
	p := newPost(t, s, u)
	tooMany := make([]engine.PostID, engine.MaxIDsPerCall+1)
	for i := range tooMany {
		tooMany[i] = p
	}
	_, err := s.Counts(bg, tooMany)
	wantErr(t, err, engine.ErrInvalid, "Counts of 101 ids")
	_, err = s.Posts(bg, tooMany)
	wantErr(t, err, engine.ErrInvalid, "Posts of 101 ids")
	_, err = s.Liked(bg, u, tooMany)
	wantErr(t, err, engine.ErrInvalid, "Liked of 101 ids")
	_, err = s.Favorited(bg, u, tooMany)
	wantErr(t, err, engine.ErrInvalid, "Favorited of 101 ids")
	wantErr(t, s.RecordViews(bg, tooMany), engine.ErrInvalid, "RecordViews of 101 ids")
	wantErr(t, s.RecordViews(bg, []engine.PostID{p, 0}), engine.ErrInvalid, "RecordViews with id 0")
	_, err = s.UserCounts(bg, make([]engine.UserID, engine.MaxIDsPerCall+1))
	wantErr(t, err, engine.ErrInvalid, "UserCounts of 101 ids")

	tooManyUsers := make([]engine.UserID, engine.MaxMentions+1)
	for i := range tooManyUsers {
		tooManyUsers[i] = engine.UserID(3000 + i)
	}
	wantErr(t, s.Comment(bg, o, p, 0, tooManyUsers, ""), engine.ErrInvalid, "Comment with 101 mentions")
	_, err = s.Repost(bg, o, p, tooManyUsers, "")
	wantErr(t, err, engine.ErrInvalid, "Repost with 101 mentions")
	badKey := string(make([]byte, engine.MaxIdemKeyBytes+1))
	_, err = s.CreatePost(bg, u, 0, badKey)
	wantErr(t, err, engine.ErrInvalid, "CreatePost with a long key")
	wantErr(t, s.Comment(bg, o, p, 0, nil, badKey), engine.ErrInvalid, "Comment with a long key")
	wantErr(t, s.Like(bg, 0, p), engine.ErrInvalid, "Like by user 0")
	_, err = s.CreatePost(bg, 0, 0, "")
	wantErr(t, err, engine.ErrInvalid, "CreatePost by user 0")

	_, err = s.CreateGroup(bg, u, tooManyUsers)
	wantErr(t, err, engine.ErrInvalid, "CreateGroup with 101 members")
	_, err = s.CreateGroup(bg, u, []engine.UserID{o, 0})
	wantErr(t, err, engine.ErrInvalid, "CreateGroup with user 0")
	g, err := s.CreateGroup(bg, u, []engine.UserID{o})
	ok(t, err)
	wantErr(t, s.AddGroupMembers(bg, u, g, tooManyUsers), engine.ErrInvalid, "AddGroupMembers of 101 users")
	for _, text := range []string{"", string(make([]byte, engine.MaxTextBytes+1)), "bad \xff utf8"} {
		_, err = s.SendMessage(bg, u, g, text, nil, "")
		wantErr(t, err, engine.ErrInvalid, "SendMessage with bad text")
	}
	_, err = s.SendMessage(bg, u, g, "ok", tooManyUsers, "")
	wantErr(t, err, engine.ErrInvalid, "SendMessage with 101 mentions")
	_, err = s.SendMessage(bg, u, g, "ok", nil, badKey)
	wantErr(t, err, engine.ErrInvalid, "SendMessage with a long key")
	_, err = s.MarkMessagesRead(bg, o, make([]engine.MessageID, engine.MaxIDsPerCall+1))
	wantErr(t, err, engine.ErrInvalid, "MarkMessagesRead of 101 ids")
	_, err = s.PublishNotification(bg, "", "body", "")
	wantErr(t, err, engine.ErrInvalid, "publish with empty title")
	_, err = s.PublishNotification(bg, string(make([]byte, engine.MaxTitleBytes+1)), "", "")
	wantErr(t, err, engine.ErrInvalid, "publish with long title")
	_, err = s.PublishNotification(bg, "t", "b", badKey)
	wantErr(t, err, engine.ErrInvalid, "publish with a long key")

	// None of it changed anything.
	wantCounts(t, s, p, engine.Counts{})
	if c := userCounts(t, s, u); c.Posts != 1 {
		t.Fatalf("postCount = %d, want 1", c.Posts)
	}
	wantMembers(t, s, u, g, u, o)
	wantUnread(t, s, o, engine.Unread{})
	wantUnread(t, s, 3000, engine.Unread{})
	list, err := s.Notifications(bg, 10, 0)
	ok(t, err)
	if len(list) != 0 {
		t.Fatalf("%d notifications after failed publishes", len(list))
	}
	if err := s.Ready(bg); err != nil {
		t.Fatalf("not ready after bad input: %v", err)
	}
}

// recorder collects events delivered to a subscriber.
type recorder struct{ ch chan engine.Event }

func subscribe(t *testing.T, s engine.Store) *recorder {
	r := &recorder{ch: make(chan engine.Event, 1024)}
	cancel := s.Subscribe(func(ev engine.Event) {
		select {
		case r.ch <- ev:
		default:
		}
	})
	t.Cleanup(cancel)
	return r
}

// wait returns the first event matching ok within 1 s, skipping others.
func (r *recorder) wait(t *testing.T, what string, match func(engine.Event) bool) engine.Event {
	t.Helper()
	deadline := time.After(time.Second)
	for {
		select {
		case ev := <-r.ch:
			if match(ev) {
				return ev
			}
		case <-deadline:
			t.Fatalf("no %s event within 1s", what)
		}
	}
}

// none fails if an event matching ok arrives within d.
func (r *recorder) none(t *testing.T, what string, d time.Duration, match func(engine.Event) bool) {
	t.Helper()
	deadline := time.After(d)
	for {
		select {
		case ev := <-r.ch:
			if match(ev) {
				t.Fatalf("unexpected %s event: %+v", what, ev)
			}
		case <-deadline:
			return
		}
	}
}

func unreadFor(u engine.UserID) func(engine.Event) bool {
	return func(ev engine.Event) bool {
		return ev.Kind == engine.UnreadChanged && slices.Contains(ev.Users, u)
	}
}

func testEvents(t *testing.T, s engine.Store) {
	const author, fan, m, follower = 170, 171, 172, 173
	// Users that exist before the broadcasts; a broadcast must not become
	// one event per user.
	for u := engine.UserID(180); u < 190; u++ {
		wantUnread(t, s, u, engine.Unread{})
	}
	r := subscribe(t, s)

	p := newPost(t, s, author)
	r.wait(t, "AuthorPosted", func(ev engine.Event) bool {
		return ev.Kind == engine.AuthorPosted && ev.Author == author
	})
	ok(t, s.Like(bg, fan, p))
	r.wait(t, "UnreadChanged for the liked author", unreadFor(author))
	ok(t, s.Comment(bg, fan, p, 0, []engine.UserID{m}, ""))
	r.wait(t, "UnreadChanged for the mentioned user", unreadFor(m))

	ok(t, s.Follow(bg, follower, author))
	r.wait(t, "FollowsChanged", func(ev engine.Event) bool {
		return ev.Kind == engine.FollowsChanged && ev.Author == author && len(ev.Users) > 0 && ev.Users[0] == follower
	})
	ok(t, s.Unfollow(bg, follower, author))
	r.wait(t, "FollowsChanged on unfollow", func(ev engine.Event) bool {
		return ev.Kind == engine.FollowsChanged && ev.Author == author && len(ev.Users) > 0 && ev.Users[0] == follower
	})

	broadcast := func(ev engine.Event) bool { return ev.Kind == engine.Broadcast }
	_, err := s.PublishNotification(bg, "t", "b", "")
	ok(t, err)
	r.wait(t, "Broadcast for a notification", broadcast)
	r.none(t, "second Broadcast for one notification", 200*time.Millisecond, broadcast)
	ok(t, s.PushRedDot(bg))
	r.wait(t, "Broadcast for a red-dot push", broadcast)
	r.none(t, "second Broadcast for one red-dot push", 200*time.Millisecond, broadcast)

	ok(t, s.MarkRead(bg, author, engine.Likes))
	r.wait(t, "UnreadChanged for MarkRead", unreadFor(author))
	ok(t, s.ClickRedDot(bg, fan))
	r.wait(t, "UnreadChanged for ClickRedDot", unreadFor(fan))

	g, err := s.CreateGroup(bg, author, []engine.UserID{fan, m})
	ok(t, err)
	msg, err := s.SendMessage(bg, author, g, "hi", []engine.UserID{m}, "")
	ok(t, err)
	r.wait(t, "UnreadChanged for a message", unreadFor(fan))
	_, err = s.MarkMessagesRead(bg, fan, []engine.MessageID{msg.ID})
	ok(t, err)
	r.wait(t, "ReceiptsChanged", func(ev engine.Event) bool {
		return ev.Kind == engine.ReceiptsChanged && ev.Message == msg.ID
	})
	// A read that changes nothing sends no receipt event.
	_, err = s.MarkMessagesRead(bg, fan, []engine.MessageID{msg.ID})
	ok(t, err)
	r.none(t, "ReceiptsChanged for a repeated read", 200*time.Millisecond, func(ev engine.Event) bool {
		return ev.Kind == engine.ReceiptsChanged
	})

	// A repeated like changes nothing and tells no one.
	ok(t, s.Like(bg, fan, p))
	r.none(t, "UnreadChanged for a repeated like", 200*time.Millisecond, unreadFor(author))

	// After cancel, nothing more arrives for that subscriber; others still
	// receive.
	r2 := &recorder{ch: make(chan engine.Event, 1024)}
	cancel := s.Subscribe(func(ev engine.Event) { r2.ch <- ev })
	cancel()
	ok(t, s.Like(bg, 199, p))
	r.wait(t, "UnreadChanged to the remaining subscriber", unreadFor(author))
	r2.none(t, "event after cancel", 200*time.Millisecond, func(engine.Event) bool { return true })
}

// bigGroup makes a group of owner and n others (user ids base+1..base+n,
// joined in that order), then has every leaveEvery-th of them leave. It
// returns the group and its current members in join order.
func bigGroup(t *testing.T, s engine.Store, owner engine.UserID, base engine.UserID, n, leaveEvery int) (engine.GroupID, []engine.UserID) {
	t.Helper()
	g, err := s.CreateGroup(bg, owner, nil)
	ok(t, err)
	all := []engine.UserID{owner}
	for i := 0; i < n; i += engine.MaxIDsPerCall {
		var batch []engine.UserID
		for j := i; j < min(i+engine.MaxIDsPerCall, n); j++ {
			batch = append(batch, base+engine.UserID(j+1))
		}
		ok(t, s.AddGroupMembers(bg, owner, g, batch))
		all = append(all, batch...)
	}
	var current []engine.UserID
	left := 0
	for i, u := range all {
		if i > 0 && i%leaveEvery == 0 {
			left++
			if after := leave(t, s, u, g); after.MemberCount != len(all)-left {
				t.Fatalf("LeaveGroup answered %d members once %d of %d left", after.MemberCount, left, len(all))
			}
			continue
		}
		current = append(current, u)
	}
	return g, current
}

// pageAll pages through a list with page, first at a time, and returns
// the concatenation; it fails on a page longer than first or a loop.
func pageAll(t *testing.T, first int, page func(first int, after engine.UserID) ([]engine.UserID, error)) []engine.UserID {
	t.Helper()
	var all []engine.UserID
	var after engine.UserID
	for range 10_000 {
		p, err := page(first, after)
		ok(t, err)
		if len(p) > first {
			t.Fatalf("a page of %d for first=%d", len(p), first)
		}
		if len(p) == 0 {
			return all
		}
		all = append(all, p...)
		after = p[len(p)-1]
	}
	t.Fatal("paging never ended")
	return nil
}

// testMemberPages: Group reads the count and the first page whatever the
// group's size; GroupMembers pages through the current members in join
// order with a user-id cursor, which may be a member who left since.
func testMemberPages(t *testing.T, s engine.Store) {
	const owner, stranger = 300, 299
	g, current := bigGroup(t, s, owner, 10_000, 4200, 9)

	grp, err := s.Group(bg, owner, g)
	ok(t, err)
	if grp.ID != g || grp.MemberCount != len(current) || !slices.Equal(grp.Members, current[:engine.MaxPageSize]) {
		t.Fatalf("Group: id %d, %d members, first page of %d; want %d members and the first %d in join order",
			grp.ID, grp.MemberCount, len(grp.Members), len(current), engine.MaxPageSize)
	}
	page := func(first int, after engine.UserID) ([]engine.UserID, error) {
		return s.GroupMembers(bg, owner, g, first, after)
	}
	for _, first := range []int{1, 37, engine.MaxPageSize} {
		if got := pageAll(t, first, page); !slices.Equal(got, current) {
			t.Fatalf("paging by %d: %d members, want %d in join order", first, len(got), len(current))
		}
	}
	// A cursor at a member who left continues right after their place.
	left := engine.UserID(10_000 + 9*100)
	got, err := s.GroupMembers(bg, owner, g, 3, left)
	ok(t, err)
	i := slices.Index(current, left-1)
	if i < 0 || !slices.Equal(got, current[i+1:i+4]) {
		t.Fatalf("page after a member who left = %v, want %v", got, current[i+1:i+4])
	}
	got, err = s.GroupMembers(bg, owner, g, 0, 0)
	ok(t, err)
	if len(got) != 0 {
		t.Fatalf("first=0 gave %d members", len(got))
	}
	got, err = s.GroupMembers(bg, owner, g, 10, current[len(current)-1])
	ok(t, err)
	if len(got) != 0 {
		t.Fatalf("a page after the last member gave %v", got)
	}

	_, err = s.GroupMembers(bg, owner, g, engine.MaxPageSize+1, 0)
	wantErr(t, err, engine.ErrInvalid, "GroupMembers first over the maximum")
	_, err = s.GroupMembers(bg, owner, g, -1, 0)
	wantErr(t, err, engine.ErrInvalid, "GroupMembers negative first")
	_, err = s.GroupMembers(bg, owner, g, 10, stranger)
	wantErr(t, err, engine.ErrInvalid, "GroupMembers after a user who never joined")
	_, err = s.GroupMembers(bg, stranger, g, 10, 0)
	wantErr(t, err, engine.ErrForbidden, "GroupMembers by a non-member")
	_, err = s.GroupMembers(bg, left, g, 10, 0)
	wantErr(t, err, engine.ErrForbidden, "GroupMembers by a member who left")
	_, err = s.GroupMembers(bg, owner, g+12345, 10, 0)
	wantErr(t, err, engine.ErrNotFound, "GroupMembers of an unknown group")

	// A small group: the first page is the whole list.
	small, err := s.CreateGroup(bg, owner, []engine.UserID{301, 302})
	ok(t, err)
	grp, err = s.Group(bg, 302, small)
	ok(t, err)
	if grp.MemberCount != 3 || !slices.Equal(grp.Members, []engine.UserID{owner, 301, 302}) {
		t.Fatalf("small group = %+v", grp)
	}
}

// testReceiptPages: ReceiptMembers pages a message's readers and
// unreaders in mapid order from a user-id cursor, for the sender only,
// in a group large enough for every backend's large-group form.
func testReceiptPages(t *testing.T, s engine.Store) {
	const owner = 400
	g, current := bigGroup(t, s, owner, 20_000, 4300, 11)
	m, err := s.SendMessage(bg, owner, g, "to all", nil, "")
	ok(t, err)
	// Every 3rd current member reads it; a member added after the send
	// (not counted) reads it too.
	var readers, unreaders []engine.UserID
	var toRead []engine.MessageID = []engine.MessageID{m.ID}
	for i, u := range current[1:] {
		if i%3 == 0 {
			_, err := s.MarkMessagesRead(bg, u, toRead)
			ok(t, err)
			readers = append(readers, u)
		} else {
			unreaders = append(unreaders, u)
		}
	}
	ok(t, s.AddGroupMembers(bg, owner, g, []engine.UserID{30_000}))
	_, err = s.MarkMessagesRead(bg, 30_000, toRead)
	ok(t, err)

	r, err := s.Receipts(bg, owner, m.ID, engine.MaxPageSize)
	ok(t, err)
	if r.ReadCount != len(readers) || r.UnreadCount != len(unreaders) ||
		!slices.Equal(r.Readers, readers[:engine.MaxPageSize]) || !slices.Equal(r.Unreaders, unreaders[:engine.MaxPageSize]) {
		t.Fatalf("Receipts: %d read, %d unread; want %d, %d and the first pages", r.ReadCount, r.UnreadCount, len(readers), len(unreaders))
	}
	for _, first := range []int{1, 41, engine.MaxPageSize} {
		for _, c := range []struct {
			read bool
			want []engine.UserID
		}{{true, readers}, {false, unreaders}} {
			got := pageAll(t, first, func(first int, after engine.UserID) ([]engine.UserID, error) {
				return s.ReceiptMembers(bg, owner, m.ID, c.read, first, after)
			})
			if !slices.Equal(got, c.want) {
				t.Fatalf("paging readers=%v by %d: %d users, want %d", c.read, first, len(got), len(c.want))
			}
		}
	}
	// The cursor may be any user with a place in the group: an unreader
	// for the readers' list, someone who left, the sender.
	got, err := s.ReceiptMembers(bg, owner, m.ID, true, 2, unreaders[0])
	ok(t, err)
	if !slices.Equal(got, readers[1:3]) {
		t.Fatalf("readers after the first unreader = %v, want %v", got, readers[1:3])
	}
	got, err = s.ReceiptMembers(bg, owner, m.ID, false, 2, owner)
	ok(t, err)
	if !slices.Equal(got, unreaders[:2]) {
		t.Fatalf("unreaders after the sender = %v, want %v", got, unreaders[:2])
	}

	_, err = s.ReceiptMembers(bg, current[1], m.ID, true, 10, 0)
	wantErr(t, err, engine.ErrForbidden, "ReceiptMembers by a member who is not the sender")
	// The sender-only rule comes before the cursor: a member who is not
	// the sender learns nothing about who ever joined.
	_, err = s.ReceiptMembers(bg, current[1], m.ID, true, 10, 399)
	wantErr(t, err, engine.ErrForbidden, "ReceiptMembers by a non-sender with a cursor who never joined")
	_, err = s.ReceiptMembers(bg, owner, m.ID, true, engine.MaxPageSize+1, 0)
	wantErr(t, err, engine.ErrInvalid, "ReceiptMembers first over the maximum")
	_, err = s.ReceiptMembers(bg, owner, m.ID, false, -1, 0)
	wantErr(t, err, engine.ErrInvalid, "ReceiptMembers negative first")
	_, err = s.ReceiptMembers(bg, owner, m.ID, true, 10, 399)
	wantErr(t, err, engine.ErrInvalid, "ReceiptMembers after a user who never joined")
	_, err = s.ReceiptMembers(bg, owner, 12345, true, 10, 0)
	wantErr(t, err, engine.ErrNotFound, "ReceiptMembers of an unknown message")
	// The sender leaves: no page by this path either.
	leave(t, s, owner, g)
	_, err = s.ReceiptMembers(bg, owner, m.ID, false, 10, 0)
	wantErr(t, err, engine.ErrForbidden, "ReceiptMembers by a sender who left")
}
