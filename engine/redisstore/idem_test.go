package redisstore

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tally-dev/tally/engine"
)

// Claims carry the store clock's time and expire by it, and Redis keeps
// them a while longer only to reclaim their memory.
func TestIdemRecordTime(t *testing.T) {
	ctx := context.Background()
	s := openInternal(t)
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	s.opts.Now = func() time.Time { return now }
	const author = 21

	p1, err := s.CreatePost(ctx, author, 0, "k")
	check(t, err)
	claim := s.k.idemClaim(author, "k")
	fp := strconv.FormatUint(engine.IdemFingerprint(engine.IdemCreatePost, engine.IdemArgs{}), 16)
	record := strconv.FormatUint(uint64(p1), 10) + "#" + fp + "@" + strconv.FormatInt(now.UnixNano(), 10)
	// The claim names the slot of the record (without the key prefix),
	// where an erasure finds it.
	tag := strings.TrimPrefix(s.PostKey(p1), s.k.p)
	if v := s.rdb.Get(ctx, claim).Val(); v != "d"+record+tag {
		t.Fatalf("claim = %q, want %q", v, "d"+record+tag)
	}
	if v := s.rdb.Get(ctx, s.k.idemRecord(s.PostKey(p1), author, "k")).Val(); v != record {
		t.Fatalf("record in the post's slot = %q, want %q", v, record)
	}
	if ttl := s.rdb.PTTL(ctx, claim).Val(); ttl <= engine.IdempotencyTTL || ttl > idemRecordTTL {
		t.Fatalf("claim's Redis TTL = %v, want over %v, at most %v", ttl, engine.IdempotencyTTL, idemRecordTTL)
	}
	n1, err := s.PublishNotification(ctx, "t", "b", "k")
	check(t, err)

	now = now.Add(engine.IdempotencyTTL - time.Nanosecond)
	if p, err := s.CreatePost(ctx, author, 0, "k"); err != nil || p != p1 {
		t.Fatalf("retry just before expiry: %d, %v; want %d", p, err, p1)
	}
	if n, err := s.PublishNotification(ctx, "t", "b", "k"); err != nil || n.ID != n1.ID {
		t.Fatalf("publish retry just before expiry: %d, %v; want %d", n.ID, err, n1.ID)
	}

	now = now.Add(time.Nanosecond)
	p2, err := s.CreatePost(ctx, author, 0, "k")
	check(t, err)
	if p2 == p1 {
		t.Fatal("a key forgotten by the store's clock still returned the first post")
	}
	uc, err := s.UserCounts(ctx, []engine.UserID{author})
	check(t, err)
	if uc[0].Posts != 2 {
		t.Fatalf("posts = %d, want 2 (the reused key's steps must not be skipped by the first post's markers)", uc[0].Posts)
	}
	n2, err := s.PublishNotification(ctx, "t2", "b2", "k")
	check(t, err)
	if n2.ID == n1.ID {
		t.Fatal("a notification key forgotten by the store's clock still returned the first notification")
	}
	if n, err := s.PublishNotification(ctx, "t2", "b2", "k"); err != nil || n.ID != n2.ID {
		t.Fatalf("publish retry of the renewed key: %d, %v; want %d", n.ID, err, n2.ID)
	}
}

// loseReply makes the first reply of scripts after the step that arms it
// come back as a network error, though the script ran: what a client sees
// when a connection drops, a read times out or a WAIT comes back short.
type loseReply struct {
	script atomic.Pointer[redis.Script]
	armed  atomic.Bool
}

func (h *loseReply) arm(sc *redis.Script) {
	h.script.Store(sc)
	h.armed.Store(true)
}

func (h *loseReply) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *loseReply) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *loseReply) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, c := range cmds {
			args := c.Args()
			if len(args) > 1 && args[1] == h.script.Load().Hash() && h.armed.CompareAndSwap(true, false) {
				lost := errors.New("read tcp: i/o timeout (test: reply lost)")
				c.SetErr(lost)
				return lost
			}
		}
		return err
	}
}

// A keyed operation whose first step ran but whose reply was lost is
// reported unavailable; its retry finds the step applied (its record in
// the step's slot) and completes it once, with the first attempt's
// result.
func TestKeyedRetryAfterLostReply(t *testing.T) {
	ctx := context.Background()
	s := openInternal(t)
	const author, actor = 30, 31
	post, err := s.CreatePost(ctx, author, 0, "")
	check(t, err)
	g, err := s.CreateGroup(ctx, actor, []engine.UserID{author})
	check(t, err)

	h := &loseReply{}
	s.AddHook(h)
	unavailableOnce := func(h *loseReply, err error) {
		t.Helper()
		if !errors.Is(err, engine.ErrUnavailable) || h.armed.Load() {
			t.Fatalf("first attempt: %v (reply lost: %v), want ErrUnavailable after the step ran", err, !h.armed.Load())
		}
	}

	h.arm(scPostCount)
	unavailableOnce(h, s.Comment(ctx, actor, post, 0, nil, "c"))
	check(t, s.Comment(ctx, actor, post, 0, nil, "c"))
	check(t, s.Comment(ctx, actor, post, 0, nil, "c"))

	h.arm(scPostCount)
	_, err = s.Repost(ctx, actor, post, nil, "r")
	unavailableOnce(h, err)
	r1, err := s.Repost(ctx, actor, post, nil, "r")
	check(t, err)
	if r2, err := s.Repost(ctx, actor, post, nil, "r"); err != nil || r2 != r1 {
		t.Fatalf("second retry of the repost: %d, %v; want %d", r2, err, r1)
	}

	h.arm(scSend)
	_, err = s.SendMessage(ctx, actor, g, "hi", nil, "m")
	unavailableOnce(h, err)
	m1, err := s.SendMessage(ctx, actor, g, "hi", nil, "m")
	check(t, err)

	h.arm(scPostCreate)
	_, err = s.CreatePost(ctx, actor, 0, "p")
	unavailableOnce(h, err)
	p1, err := s.CreatePost(ctx, actor, 0, "p")
	check(t, err)
	own := engine.PostID(s.gen.Next())
	h.arm(scPostCreate)
	_, err = s.CreatePost(ctx, actor, own, "own")
	unavailableOnce(h, err)
	if p, err := s.CreatePost(ctx, actor, own, "own"); err != nil || p != own {
		t.Fatalf("retry of createPost with its own id: %d, %v", p, err)
	}

	cs, err := s.Counts(ctx, []engine.PostID{post})
	check(t, err)
	if cs[0].Comments != 1 || cs[0].Reposts != 1 {
		t.Fatalf("counts after retried lost replies = %+v, want 1 comment, 1 repost", cs[0])
	}
	uc, err := s.UserCounts(ctx, []engine.UserID{actor})
	check(t, err)
	if uc[0].Posts != 3 { // the repost, "p" and "own"
		t.Fatalf("actor's posts = %d, want 3", uc[0].Posts)
	}
	if n, err := s.Unread(ctx, author); err != nil || n.Comments != 1 || n.Messages != 1 {
		t.Fatalf("author's badges = %+v, %v; want 1 comment, 1 message", n, err)
	}
	if n := s.rdb.HLen(ctx, s.k.group(uint64(g)).T).Val(); n != 1 {
		t.Fatalf("group messages = %d, want the one message %d", n, m1.ID)
	}
	if infos, err := s.Posts(ctx, []engine.PostID{r1, p1}); err != nil || !infos[0].Exists || !infos[1].Exists {
		t.Fatalf("posts returned by the retries: %+v, %v", infos, err)
	}
}

// A failover can lose the viewer's slot (the claim) and keep the slot the
// operation changed: the retry finds the record there, returns the first
// attempt's result and applies nothing again, not even the later steps
// (their markers are named from the record's time). A reuse of the key
// with other arguments is still refused, on the record's fingerprint.
func TestKeyedRetryAfterLostClaim(t *testing.T) {
	ctx := context.Background()
	s := openInternal(t)
	const author, actor, mentioned = 40, 41, 42
	post, err := s.CreatePost(ctx, author, 0, "")
	check(t, err)
	g, err := s.CreateGroup(ctx, actor, []engine.UserID{author})
	check(t, err)
	loseClaim := func(key string) {
		t.Helper()
		check(t, s.rdb.Del(ctx, s.k.idemClaim(actor, key)).Err())
	}
	mentions := []engine.UserID{mentioned}

	check(t, s.Comment(ctx, actor, post, 0, mentions, "c"))
	loseClaim("c")
	check(t, s.Comment(ctx, actor, post, 0, mentions, "c"))
	loseClaim("c")
	if err := s.Comment(ctx, actor, post, 0, nil, "c"); !errors.Is(err, engine.ErrIdemReused) {
		t.Fatalf("reuse with other mentions after the claim was lost: %v, want ErrIdemReused", err)
	}
	check(t, s.Comment(ctx, actor, post, 0, mentions, "c"))

	r1, err := s.Repost(ctx, actor, post, nil, "r")
	check(t, err)
	loseClaim("r")
	if r2, err := s.Repost(ctx, actor, post, nil, "r"); err != nil || r2 != r1 {
		t.Fatalf("repost retried after its claim was lost: %d, %v; want %d", r2, err, r1)
	}

	m1, err := s.SendMessage(ctx, actor, g, "hi", nil, "m")
	check(t, err)
	loseClaim("m")
	if m2, err := s.SendMessage(ctx, actor, g, "hi", nil, "m"); err != nil || m2.ID != m1.ID {
		t.Fatalf("message retried after its claim was lost: %d, %v; want %d", m2.ID, err, m1.ID)
	}

	own := engine.PostID(s.gen.Next())
	_, err = s.CreatePost(ctx, actor, own, "p")
	check(t, err)
	loseClaim("p")
	if p, err := s.CreatePost(ctx, actor, own, "p"); err != nil || p != own {
		t.Fatalf("createPost with its own id retried after its claim was lost: %d, %v", p, err)
	}

	cs, err := s.Counts(ctx, []engine.PostID{post})
	check(t, err)
	if cs[0].Comments != 1 || cs[0].Reposts != 1 {
		t.Fatalf("counts = %+v, want 1 comment and 1 repost", cs[0])
	}
	uc, err := s.UserCounts(ctx, []engine.UserID{actor})
	check(t, err)
	if uc[0].Posts != 2 {
		t.Fatalf("actor's posts = %d, want 2 (the repost and the post)", uc[0].Posts)
	}
	if n, err := s.Unread(ctx, author); err != nil || n.Comments != 1 || n.Messages != 1 {
		t.Fatalf("author's badges = %+v, %v; want 1 comment, 1 message", n, err)
	}
	if n, err := s.Unread(ctx, mentioned); err != nil || n.Mentions != 1 {
		t.Fatalf("mentioned user's badge = %+v, %v; want 1", n, err)
	}
	if n := s.rdb.HLen(ctx, s.k.group(uint64(g)).T).Val(); n != 1 {
		t.Fatalf("group messages = %d, want one", n)
	}
}

// A first step that refused (nothing applied) frees the key: reusing it
// for another call is a new operation, not a reuse.
func TestRefusedFirstStepFreesKey(t *testing.T) {
	ctx := context.Background()
	s := openInternal(t)
	const actor = 50
	missing := engine.PostID(s.gen.Next())
	if err := s.Comment(ctx, actor, missing, 0, nil, "k"); !errors.Is(err, engine.ErrNotFound) {
		t.Fatalf("comment on an unknown post: %v, want ErrNotFound", err)
	}
	post, err := s.CreatePost(ctx, 51, 0, "")
	check(t, err)
	check(t, s.Comment(ctx, actor, post, 0, nil, "k"))
	g, err := s.CreateGroup(ctx, 52, nil)
	check(t, err)
	if _, err := s.SendMessage(ctx, actor, g, "x", nil, "m"); !errors.Is(err, engine.ErrForbidden) {
		t.Fatalf("send by a non-member: %v, want ErrForbidden", err)
	}
	taken, err := s.CreatePost(ctx, 51, 0, "")
	check(t, err)
	if _, err := s.CreatePost(ctx, actor, taken, "t"); !errors.Is(err, engine.ErrInvalid) {
		t.Fatalf("createPost on a taken id: %v, want ErrInvalid", err)
	}
	for _, key := range []string{"m", "t"} {
		if _, err := s.CreatePost(ctx, actor, 0, key); err != nil {
			t.Fatalf("key %q after its refused first use: %v", key, err)
		}
	}
	if keys := s.rdb.Keys(ctx, "*").Val(); slices.ContainsFunc(keys, func(k string) bool {
		return k == s.k.idemRecord(s.PostKey(missing), actor, "k")
	}) {
		t.Fatal("a refused first step left a record")
	}
}
