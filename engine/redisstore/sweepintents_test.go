package redisstore

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/redisstore/redistest"
	"github.com/tally-dev/tally/engine/snowflake"
)

// The periodic sweep goes through a keyspace a step at a time: a step
// with a budget too small for more than one SCAN call stops with its
// cursor stored, the next goes on from there, and a dead process's
// intent is found and finished, once, within a pass of steps; the cursor
// wraps back to 0 at the end of a pass. A step with room for the whole
// keyspace ends a pass in one go.
func TestIntentSweepStepsThroughTheKeyspace(t *testing.T) {
	ctx := context.Background()
	s, rc := openQuiet(t, "is:", nil)

	const filler = 20_000 // 20 SCAN calls of COUNT 1000
	p := rc.Pipeline()
	for i := range filler {
		p.Set(ctx, "is:filler:"+strconv.Itoa(i), "x", 0)
	}
	_, err := p.Exec(ctx)
	check(t, err)
	// A new post whose process died after registering it: its author's
	// post count is the intent's to bump.
	const author = 77
	post := snowflake.Make(time.Now().Add(-time.Hour).UnixMilli(), 1, 0)
	bucket, low := s.k.post(post)
	check(t, rc.HSet(ctx, bucket, low, postHead(author)).Err())
	dead := intent{kind: intentPost, viewer: author, post: post, at: time.Now().Add(-time.Minute).UnixMilli()}
	check(t, rc.HSet(ctx, intentsKey(bucket), "~dead", dead.encode()).Err())

	cursorKey := s.k.sys() + "isweep:" + rc.Options().Addr
	finished, steps, wrapped := 0, 0, false
	for ; steps < 3*filler/1000 && !(wrapped && finished > 0); steps++ {
		n, err := s.sweepIntents(ctx, time.Nanosecond)
		check(t, err)
		finished += n
		cursor, err := rc.Get(ctx, cursorKey).Uint64()
		check(t, err)
		if steps == 0 && cursor == 0 {
			t.Fatal("one step of a tiny budget scanned the whole keyspace")
		}
		wrapped = wrapped || cursor == 0
	}
	if finished != 1 || !wrapped {
		t.Fatalf("after %d steps: %d intents finished, cursor wrapped %v; want 1 and a wrap", steps, finished, wrapped)
	}
	if recovered, failed := s.IntentSweeps(); recovered != 1 || failed != 0 {
		t.Fatalf("IntentSweeps = %d recovered, %d failed; want 1, 0", recovered, failed)
	}
	if steps < 5 {
		t.Fatalf("a pass over %d keys took %d steps of one SCAN call each", filler, steps)
	}
	uc, err := s.UserCounts(ctx, []engine.UserID{author})
	check(t, err)
	if uc[0].Posts != 1 {
		t.Fatalf("the author has %d posts, want 1", uc[0].Posts)
	}
	// A budget with room for the whole keyspace: one pass, cursor 0.
	check(t, rc.Set(ctx, cursorKey, 0, 0).Err())
	if n, err := s.sweepIntents(ctx, time.Minute); err != nil || n != 0 {
		t.Fatalf("a whole-pass step finished %d (%v), want 0", n, err)
	}
	if cursor, err := rc.Get(ctx, cursorKey).Uint64(); err != nil || cursor != 0 {
		t.Fatalf("cursor after a whole pass: %d (%v), want 0", cursor, err)
	}
}

// A periodic sweep step that fails is counted (IntentSweeps, for
// /metrics), and the sweep keeps running: here an intent record that does
// not decode fails every step that meets it.
func TestIntentSweepFailuresCounted(t *testing.T) {
	ctx := context.Background()
	addr, _ := redistest.StartSingle(t)
	rc := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { rc.Close() })
	post := snowflake.Make(time.Now().Add(-time.Hour).UnixMilli(), 1, 0)
	s, err := Open(ctx, Options{Addrs: []string{addr}, KeyPrefix: "isf:", ReadTimeout: 5 * time.Second,
		SweepInterval: -1, IntentSweepInterval: 20 * time.Millisecond})
	check(t, err)
	t.Cleanup(func() { s.Close() })
	bucket, _ := s.k.post(post)
	check(t, rc.HSet(ctx, intentsKey(bucket), "~bad", "not an intent").Err())
	deadline := time.Now().Add(10 * time.Second)
	for {
		recovered, failed := s.IntentSweeps()
		if failed >= 2 {
			if recovered != 0 {
				t.Fatalf("%d intents recovered from a malformed record", recovered)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("IntentSweeps = %d recovered, %d failed after 10s of steps meeting a malformed intent; want failures", recovered, failed)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
