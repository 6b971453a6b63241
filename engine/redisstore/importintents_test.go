package redisstore

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/snowflake"
)

// An import that finishes leaves no intent and no marker behind, and
// every author's post count is exact.
func TestImportLeavesNoIntents(t *testing.T) {
	ctx := context.Background()
	s, rc := openQuiet(t, "il:", nil)
	t0 := time.Now().Add(-2 * time.Hour).UnixMilli()
	var rows []engine.ImportRow
	for i := range 3 * importChunk / 2 { // two chunks
		rows = append(rows, engine.ImportRow{Post: engine.PostID(snowflake.Make(t0+int64(i)*700, 1, 0)),
			Author: engine.UserID(1 + i%5)})
	}
	check(t, s.Import(ctx, rows))
	uc, err := s.UserCounts(ctx, []engine.UserID{1, 2, 3, 4, 5})
	check(t, err)
	for i, c := range uc {
		if c.Posts != int64(len(rows)/5) {
			t.Errorf("user %d has %d posts, want %d", i+1, c.Posts, len(rows)/5)
		}
	}
	keys, err := rc.Keys(ctx, "il:*").Result()
	check(t, err)
	for _, k := range keys {
		if strings.HasSuffix(k, "}I") || strings.Contains(k, "}o~") || k == s.k.importIntents() {
			t.Errorf("key %s left behind", k)
		}
	}
}

// A sweep finishes an import chunk an import left: an exact intent (its
// records written) after intentGrace, trusting its rows; a pending one
// (the import died writing them) only after importGrace, bumping the
// authors of the listed posts registered with the listed author, and no
// one else. Each once.
func TestSweepFinishesImportIntents(t *testing.T) {
	ctx := context.Background()
	var now atomic.Int64
	now.Store(time.Now().UnixMilli())
	s, rc := openQuiet(t, "iw:", func() time.Time { return time.UnixMilli(now.Load()) })

	written := now.Load()
	post := func(i int64) uint64 { return snowflake.Make(written-3_600_000+i*5_000, 1, 0) }
	// Pending: post 1 registered by the import with author 41; post 2
	// never written; post 3 registered by someone else, with author 50.
	check(t, s.Import(ctx, []engine.ImportRow{{Post: engine.PostID(post(1)), Author: 41}, {Post: engine.PostID(post(3)), Author: 50}}))
	base := postsOf(t, s, 41, 42, 43, 50)
	pending := intent{kind: intentImportPending, at: written}.encode() +
		strings.Join([]string{importTag(post(1), 41), importTag(post(2), 42), importTag(post(3), 43)}, ",")
	// Exact: trusted as it is (post 4 need not even exist).
	exact := intent{kind: intentImport, at: written}.encode() + importTag(post(4), 42)
	check(t, rc.HSet(ctx, s.k.importIntents(), "~pending", pending, "~exact", exact).Err())

	now.Store(written + intentGrace.Milliseconds() + 1)
	if n, err := s.SweepIntents(ctx); err != nil || n != 1 {
		t.Fatalf("a sweep past intentGrace finished %d intents (%v), want the exact one", n, err)
	}
	if got := postsOf(t, s, 41, 42, 43, 50); got != [4]int64{base[0], base[1] + 1, base[2], base[3]} {
		t.Fatalf("post counts %v after the exact intent, from %v: want only 42 up by one", got, base)
	}
	now.Store(written + importGrace.Milliseconds() + 1)
	if n, err := s.SweepIntents(ctx); err != nil || n != 1 {
		t.Fatalf("a sweep past importGrace finished %d intents (%v), want the pending one", n, err)
	}
	want := [4]int64{base[0] + 1, base[1] + 1, base[2], base[3]}
	if got := postsOf(t, s, 41, 42, 43, 50); got != want {
		t.Fatalf("post counts %v after the pending intent, want %v (41 up by one: only post 1 is its)", got, want)
	}
	if n, err := s.SweepIntents(ctx); err != nil || n != 0 {
		t.Fatalf("a second sweep finished %d intents (%v), want 0", n, err)
	}
	if got := postsOf(t, s, 41, 42, 43, 50); got != want {
		t.Fatalf("post counts %v after a second sweep, want %v", got, want)
	}
}

func postsOf(t *testing.T, s *Store, users ...engine.UserID) [4]int64 {
	t.Helper()
	uc, err := s.UserCounts(context.Background(), users)
	check(t, err)
	var out [4]int64
	for i := range uc {
		out[i] = uc[i].Posts
	}
	return out
}
