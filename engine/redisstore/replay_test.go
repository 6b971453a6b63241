package redisstore

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/redisstore/redistest"
)

// These tests stop an operation after its first steps, as a tally process
// killed between two Redis calls would, and then retry it with the same
// idempotency key: the retry must complete the operation, and no step may
// apply twice.

// openQuiet starts a redis-server of the test's own and opens a store on
// it with both sweepers off (now, when not nil, is its clock), and a
// plain client beside it to look at or change keys directly.
func openQuiet(t *testing.T, prefix string, now func() time.Time) (*Store, *redis.Client) {
	t.Helper()
	addr, _ := redistest.StartSingle(t)
	s, err := Open(context.Background(), Options{Addrs: []string{addr}, KeyPrefix: prefix, ReadTimeout: 5 * time.Second,
		SweepInterval: -1, IntentSweepInterval: -1, Now: now})
	check(t, err)
	t.Cleanup(func() { s.Close() })
	rc := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { rc.Close() })
	return s, rc
}

func openInternal(t *testing.T) *Store {
	t.Helper()
	addr, _ := redistest.StartSingle(t)
	s, err := Open(context.Background(), Options{Addrs: []string{addr}, KeyPrefix: "r:", ReadTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func check(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestReplayAfterCrash(t *testing.T) {
	ctx := context.Background()
	s := openInternal(t)
	const author, actor, mentioned = 10, 11, 12

	unread := func(u engine.UserID) engine.Unread {
		t.Helper()
		n, err := s.Unread(ctx, u)
		check(t, err)
		return n
	}
	for _, u := range []engine.UserID{author, actor, mentioned} {
		unread(u) // seen before the operations below
	}

	// CreatePost: registered, then crash before the author's postCount.
	want := s.gen.Next()
	in, err := s.idemBegin(ctx, author, "cp", strconv.FormatUint(want, 10), s.PostKey(engine.PostID(want)), engine.IdemCreatePost, engine.IdemArgs{})
	check(t, err)
	check(t, s.firstStep(ctx, &in, s.PostKey(engine.PostID(want)), func(g guard) (string, error) {
		_, _, found, err := s.registerPost(ctx, author, want, 0, func(string) guard { return g }, "", nil)
		return found, err
	}))
	for range 2 {
		got, err := s.CreatePost(ctx, author, 0, "cp")
		check(t, err)
		if uint64(got) != want {
			t.Fatalf("retried CreatePost returned %d, want %d", got, want)
		}
	}
	uc, err := s.UserCounts(ctx, []engine.UserID{author})
	check(t, err)
	if uc[0].Posts != 1 {
		t.Fatalf("postCount after crash and retries = %d, want 1", uc[0].Posts)
	}
	post := engine.PostID(want)

	// Comment: counted on the post, then crash before any badge.
	in, err = s.idemBegin(ctx, actor, "c1", "", s.PostKey(post), engine.IdemComment,
		engine.IdemArgs{Post: post, Mentions: []engine.UserID{mentioned}})
	check(t, err)
	countFirst := func(in idem, field int) {
		t.Helper()
		check(t, s.firstStep(ctx, &in, s.PostKey(post), func(g guard) (string, error) {
			_, found, err := s.countOn(ctx, post, 0, []any{field, 1}, g, "", "")
			return found, err
		}))
	}
	countFirst(in, pComments)
	for range 2 {
		check(t, s.Comment(ctx, actor, post, 0, []engine.UserID{mentioned}, "c1"))
	}
	cs, err := s.Counts(ctx, []engine.PostID{post})
	check(t, err)
	if cs[0].Comments != 1 {
		t.Fatalf("comments after crash and retries = %d, want 1", cs[0].Comments)
	}
	if n := unread(author); n.Comments != 1 {
		t.Fatalf("author's comment badge = %d, want 1", n.Comments)
	}
	if n := unread(mentioned); n.Mentions != 1 {
		t.Fatalf("mention badge = %d, want 1", n.Mentions)
	}

	// Repost: counted and the new post registered, then crash before the
	// reposter's postCount and the mention.
	rid := s.gen.Next()
	in, err = s.idemBegin(ctx, actor, "r1", strconv.FormatUint(rid, 10), s.PostKey(post), engine.IdemRepost,
		engine.IdemArgs{Post: post, Mentions: []engine.UserID{mentioned}})
	check(t, err)
	countFirst(in, pReposts)
	_, _, _, err = s.registerPost(ctx, actor, rid, uint64(post), func(b string) guard { return markerGuard(b, in.op, "b") }, "", nil)
	check(t, err)
	for range 2 {
		got, err := s.Repost(ctx, actor, post, []engine.UserID{mentioned}, "r1")
		check(t, err)
		if uint64(got) != rid {
			t.Fatalf("retried Repost returned %d, want %d", got, rid)
		}
	}
	cs, err = s.Counts(ctx, []engine.PostID{post})
	check(t, err)
	uc, err = s.UserCounts(ctx, []engine.UserID{actor})
	check(t, err)
	if cs[0].Reposts != 1 || uc[0].Posts != 1 {
		t.Fatalf("after repost replay: reposts %d, reposter postCount %d; want 1, 1", cs[0].Reposts, uc[0].Posts)
	}
	if n := unread(mentioned); n.Mentions != 2 {
		t.Fatalf("mention badge = %d, want 2", n.Mentions)
	}

	// SendMessage: stored in the group, then crash before the index and
	// the badges.
	g, err := s.CreateGroup(ctx, actor, []engine.UserID{author, mentioned})
	check(t, err)
	mid := s.gen.Next()
	in, err = s.idemBegin(ctx, actor, "m1", strconv.FormatUint(mid, 10), s.k.group(uint64(g)).tag, engine.IdemSendMessage,
		engine.IdemArgs{Group: g, Mentions: []engine.UserID{mentioned}, Text: "hi"})
	check(t, err)
	gk := s.k.group(uint64(g))
	check(t, s.firstStep(ctx, &in, gk.tag, func(gd guard) (string, error) {
		_, err := s.one(ctx, scSend, []string{gk.U, gk.M, gk.Q, gk.T, gk.R, intentsKey(gk.tag), gd.key},
			append([]any{uint64(actor), mid, "hi", denseMaxID, "", ""}, gd.args()...)...)
		return "", err
	}))
	for range 2 {
		m, err := s.SendMessage(ctx, actor, g, "hi", []engine.UserID{mentioned}, "m1")
		check(t, err)
		if uint64(m.ID) != mid || m.Text != "hi" {
			t.Fatalf("retried SendMessage returned %+v, want id %d", m, mid)
		}
	}
	if n := unread(author); n.Messages != 1 {
		t.Fatalf("message badge = %d, want 1", n.Messages)
	}
	if n := unread(mentioned); n.Messages != 1 || n.Mentions != 3 {
		t.Fatalf("mentioned member's badges = %+v, want 1 message, 3 mentions", n)
	}
	r, err := s.Receipts(ctx, actor, engine.MessageID(mid), 10)
	check(t, err)
	if r.UnreadCount != 2 {
		t.Fatalf("receipts after replay: %+v", r)
	}
}

// A like whose second step (the author's badge) is lost in a crash is not
// counted again by a retry: the retry finds the like and changes nothing.
func TestLikeRetryNeverDoubleCounts(t *testing.T) {
	ctx := context.Background()
	s := openInternal(t)
	post, err := s.CreatePost(ctx, 1, 0, "")
	check(t, err)
	b, low := s.k.post(uint64(post))
	// The like's step alone (row: no reaction -> like, one like counted).
	_, err = s.one(ctx, scPostReact, []string{b, likersKey(b, low), reactorsKey(b, low), intentsKey(b)},
		counting(low, uint64(2), "", "", 0, 1, 0, 1, pLikes, 1)...)
	check(t, err)
	check(t, s.Like(ctx, 2, post))
	cs, err := s.Counts(ctx, []engine.PostID{post})
	check(t, err)
	if cs[0].Likes != 1 {
		t.Fatalf("likes = %d, want 1", cs[0].Likes)
	}
}
