package redisstore

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/tally-dev/tally/engine"
)

// Records written before the store clock's time was kept in them ("@<unix
// ns>") are still honoured: a keyed retry finds the result, and one that
// finds an unfinished operation replays its steps under the operation id
// that version used, so no step applies twice.
func TestIdemRecordsWithoutTime(t *testing.T) {
	ctx := context.Background()
	s := openInternal(t)
	const author = 20

	// An older version reserved "old" for a post, registered it (the
	// first step, marked by its operation id), then crashed.
	want := s.gen.Next()
	fp := strconv.FormatUint(engine.IdemFingerprint(engine.IdemCreatePost, engine.IdemArgs{}), 16)
	record := s.k.idem(author, kindAny, "old")
	check(t, s.rdb.Set(ctx, record, "p"+strconv.FormatUint(want, 10)+"#"+fp, engine.IdempotencyTTL).Err())
	_, _, err := s.registerPost(ctx, author, want, opID(author, kindPost, "old", 0), "a", "", nil)
	check(t, err)
	for range 2 {
		got, err := s.CreatePost(ctx, author, 0, "old")
		check(t, err)
		if uint64(got) != want {
			t.Fatalf("retry of a record without time: post %d, want %d", got, want)
		}
	}
	uc, err := s.UserCounts(ctx, []engine.UserID{author})
	check(t, err)
	if uc[0].Posts != 1 {
		t.Fatalf("posts after the retries = %d, want 1", uc[0].Posts)
	}
	if v := s.rdb.Get(ctx, record).Val(); v != "d"+strconv.FormatUint(want, 10)+"#"+fp {
		t.Fatalf("record after the retry = %q, want it done in the old form", v)
	}

	// A notification key recorded as the bare id.
	n, err := s.PublishNotification(ctx, "t", "b", "")
	check(t, err)
	check(t, s.rdb.Set(ctx, s.k.sysIdem("n"), strconv.FormatUint(uint64(n.ID), 10), engine.IdempotencyTTL).Err())
	again, err := s.PublishNotification(ctx, "t", "b", "n")
	check(t, err)
	if again.ID != n.ID {
		t.Fatalf("publish retry of a bare-id record: %d, want %d", again.ID, n.ID)
	}
	if _, err := s.PublishNotification(ctx, "t", "other", "n"); err == nil {
		t.Fatal("a bare-id record reused for another notification was accepted")
	}
}

// Records carry the store clock's time and expire by it, and Redis keeps
// them a while longer only to reclaim their memory.
func TestIdemRecordTime(t *testing.T) {
	ctx := context.Background()
	s := openInternal(t)
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	s.opts.Now = func() time.Time { return now }
	const author = 21

	p1, err := s.CreatePost(ctx, author, 0, "k")
	check(t, err)
	record := s.k.idem(author, kindAny, "k")
	fp := strconv.FormatUint(engine.IdemFingerprint(engine.IdemCreatePost, engine.IdemArgs{}), 16)
	want := "d" + strconv.FormatUint(uint64(p1), 10) + "#" + fp + "@" + strconv.FormatInt(now.UnixNano(), 10)
	if v := s.rdb.Get(ctx, record).Val(); v != want {
		t.Fatalf("record = %q, want %q", v, want)
	}
	if ttl := s.rdb.PTTL(ctx, record).Val(); ttl <= engine.IdempotencyTTL || ttl > idemRecordTTL {
		t.Fatalf("record's Redis TTL = %v, want over %v, at most %v", ttl, engine.IdempotencyTTL, idemRecordTTL)
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
