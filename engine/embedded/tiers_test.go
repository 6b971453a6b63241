package embedded

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/snowflake"
	"github.com/tally-dev/tally/engine/tier"
	"github.com/tally-dev/tally/engine/wal"
)

// Posts of old windows are sealed and moved to the cold tier by the
// maintenance loop, keep their exact counts through further writes, and
// come back the same after a restart (the cold tier is rebuilt from the
// snapshot and the log).
func TestCountsThroughSealingAndColdTier(t *testing.T) {
	dir := t.TempDir()
	open := func() *Engine {
		e, err := Open(Options{Dir: dir, Sync: wal.SyncNone, MaintainInterval: 20 * time.Millisecond,
			Tables: tier.Options{WindowMillis: 3_600_000, OpenAge: time.Hour, ColdAge: 48 * time.Hour}})
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	e := open()
	ctx := t.Context()
	now := time.Now()
	var posts []engine.PostID
	// Posts 10 days old (cold), 2 hours old (sealed) and new (open). The
	// two cold posts share their millisecond (their ids differ in the
	// worker bits): a minute apart, they fell in two hour windows during
	// the first minute of every hour.
	for i, age := range []time.Duration{240 * time.Hour, 240 * time.Hour, 2 * time.Hour, 0} {
		id := engine.PostID(snowflake.Make(now.Add(-age).UnixMilli(), uint64(i), 0))
		if _, err := e.CreatePost(ctx, engine.UserID(100+i), id, ""); err != nil {
			t.Fatal(err)
		}
		posts = append(posts, id)
	}
	like := func(e *Engine, users ...engine.UserID) {
		for _, u := range users {
			for _, p := range posts {
				if err := e.Like(ctx, u, p); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	like(e, 10, 11, 12)
	e.RecordViews(ctx, posts)
	want := engine.Counts{Likes: 3, Views: 1}
	check := func(e *Engine, want engine.Counts) {
		t.Helper()
		got, err := e.Counts(ctx, posts)
		if err != nil {
			t.Fatal(err)
		}
		for i := range got {
			if got[i] != want {
				t.Fatalf("post %d: %+v, want %+v", i, got[i], want)
			}
		}
	}
	check(e, want)
	authors := func(e *Engine) {
		t.Helper()
		info, err := e.Posts(ctx, posts)
		if err != nil {
			t.Fatal(err)
		}
		for i, p := range info {
			if !p.Exists || p.Author != engine.UserID(100+i) {
				t.Fatalf("post %d: %+v, want author %d", i, p, 100+i)
			}
		}
	}
	authors(e)
	// Wait for the maintenance loop to move the 10-day-old window of the
	// post table and of the like set to files, and to seal the 2-hour-old
	// ones.
	deadline := time.Now().Add(10 * time.Second)
	for {
		posts, _ := filepath.Glob(filepath.Join(dir, "cold", "POST-*.tier"))
		likes, _ := filepath.Glob(filepath.Join(dir, "cold", "LIKE-*.tier"))
		e.mu.RLock()
		wins, ls := map[tier.Kind]int{}, map[tier.Kind]int{}
		for _, w := range e.st.posts.Stats() {
			wins[w.Kind]++
		}
		for _, w := range e.st.likes.Stats() {
			ls[w.Kind]++
		}
		e.mu.RUnlock()
		if len(posts) > 0 && len(likes) > 0 && wins[tier.Cold] == 1 && wins[tier.Sealed] == 1 && ls[tier.Cold] == 1 && ls[tier.Sealed] == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("windows were not sealed and cooled: posts %v, likes %v, files %v %v", wins, ls, posts, likes)
		}
		time.Sleep(20 * time.Millisecond)
	}
	liked := func(e *Engine, users ...engine.UserID) {
		t.Helper()
		for _, u := range users {
			got, err := e.Liked(ctx, u, posts)
			if err != nil {
				t.Fatal(err)
			}
			for i, l := range got {
				if !l {
					t.Fatalf("user %d's like of post %d (of %d) is gone", u, i, len(posts))
				}
			}
		}
	}
	liked(e, 10, 11, 12)
	check(e, want)
	authors(e)
	like(e, 13) // writes to cold and sealed posts go to deltas
	e.Unlike(ctx, 10, posts[0])
	check2 := func(e *Engine) {
		t.Helper()
		got, _ := e.Counts(ctx, posts)
		if got[0].Likes != 3 || got[1].Likes != 4 || got[3].Likes != 4 {
			t.Fatalf("after more writes: %+v", got)
		}
	}
	check2(e)
	if err := e.Snapshot(ctx); err != nil {
		t.Fatal(err)
	}
	like(e, 14)
	e.Unlike(ctx, 14, posts[1])
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = open()
	defer e.Close()
	got, _ := e.Counts(ctx, posts)
	if got[0].Likes != 4 || got[1].Likes != 4 || got[2].Likes != 5 || got[3].Likes != 5 {
		t.Fatalf("after restart: %+v", got)
	}
	liked(e, 11, 12, 13)
	if l, err := e.Liked(ctx, 10, posts[:1]); err != nil || l[0] {
		t.Fatalf("user 10's like of the cold post after an unlike and a restart: %v %v", l, err)
	}
	authors(e)
	// The snapshot's registry windows were loaded as they were written:
	// sealed blocks, not rebuilt through open tables.
	e.mu.RLock()
	kinds := recordsByKind(e.st.posts)
	e.mu.RUnlock()
	if kinds[tier.Sealed]+kinds[tier.Cold] < 2 {
		t.Fatalf("post table after restart: %v", kinds)
	}
	if _, err := os.Stat(filepath.Join(dir, "cold")); err != nil {
		t.Fatal(err)
	}
}

// TestWindowSizeChange: -window may change between runs. A snapshot taken
// with hour windows (sealed and open ones) loads into day windows with the
// same counts, authors and likes.
func TestWindowSizeChange(t *testing.T) {
	dir := t.TempDir()
	open := func(window int64) *Engine {
		e, err := Open(Options{Dir: dir, Sync: wal.SyncNone, MaintainInterval: 10 * time.Millisecond, Logger: quiet,
			Tables: tier.Options{WindowMillis: window, OpenAge: time.Hour}})
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	ctx := t.Context()
	e := open(3_600_000)
	now := time.Now()
	var posts []engine.PostID
	for i := range 40 {
		id := engine.PostID(snowflake.Make(now.Add(-time.Duration(i)*7*time.Hour).UnixMilli(), uint64(i), 0))
		if _, err := e.CreatePost(ctx, engine.UserID(100+i%5), id, ""); err != nil {
			t.Fatal(err)
		}
		for u := range i % 4 {
			if err := e.Like(ctx, engine.UserID(1+u), id); err != nil {
				t.Fatal(err)
			}
		}
		posts = append(posts, id)
	}
	e.maintain() // seal the old hour windows
	read := func(e *Engine) string {
		info, err := e.Posts(ctx, posts)
		if err != nil {
			t.Fatal(err)
		}
		counts, err := e.Counts(ctx, posts)
		if err != nil {
			t.Fatal(err)
		}
		liked, err := e.Liked(ctx, 2, posts)
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprint(info, counts, liked)
	}
	want := read(e)
	if err := e.Snapshot(ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = open(86_400_000)
	defer e.Close()
	if got := read(e); got != want {
		t.Fatalf("after changing the window:\n got %s\nwant %s", got, want)
	}
}

// TestDamagedColdFiles: a cold file of the post table or of the like set
// that no longer reads back (a flipped byte, no block cache) makes the
// reads that need it fail with ErrUnavailable, never answer zeros or
// "not liked", and a like of a post in it is refused and changes
// nothing; a restart rebuilds the cold tier from the snapshot and the log
// with the exact answers.
func TestDamagedColdFiles(t *testing.T) {
	dir := t.TempDir()
	open := func() *Engine {
		e, err := Open(Options{Dir: dir, Sync: wal.SyncNone, MaintainInterval: -1, Logger: quiet,
			Tables: tier.Options{OpenAge: time.Hour, ColdAge: 48 * time.Hour, ColdCacheBytes: -1}})
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	e := open()
	ctx := t.Context()
	old := engine.PostID(snowflake.Make(time.Now().Add(-10*24*time.Hour).UnixMilli(), 1, 0))
	if _, err := e.CreatePost(ctx, 100, old, ""); err != nil {
		t.Fatal(err)
	}
	for u := range engine.UserID(3) {
		if err := e.Like(ctx, 10+u, old); err != nil {
			t.Fatal(err)
		}
	}
	e.maintain() // after the writes, so that the post and its likes are all in the files
	posts, _ := filepath.Glob(filepath.Join(dir, "cold", "POST-*.tier"))
	likes, _ := filepath.Glob(filepath.Join(dir, "cold", "LIKE-*.tier"))
	if len(posts) != 1 || len(likes) != 1 {
		t.Fatalf("cold files: %v %v", posts, likes)
	}
	files := []string{posts[0], likes[0]}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		// Every byte between the window header and the index and footer
		// (at most 64 bytes of them here: one block each): the blocks.
		if len(b) <= 16+64 {
			t.Fatalf("%s: %d bytes, no room for a block", f, len(b))
		}
		for i := 16; i < len(b)-64; i++ {
			b[i] ^= 0x5a
		}
		if err := os.WriteFile(f, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.Counts(ctx, []engine.PostID{old}); !errors.Is(err, engine.ErrUnavailable) {
		t.Fatalf("counts from a damaged cold block: %v, want ErrUnavailable", err)
	}
	if _, err := e.Liked(ctx, 10, []engine.PostID{old}); !errors.Is(err, engine.ErrUnavailable) {
		t.Fatalf("likes from a damaged cold block: %v, want ErrUnavailable", err)
	}
	out := make([]engine.PostView, 1)
	if err := e.Page(ctx, 10, []engine.PostID{old}, engine.PageWant{Counts: true, Liked: true}, out); !errors.Is(err, engine.ErrUnavailable) {
		t.Fatalf("a page from a damaged cold block: %v, want ErrUnavailable", err)
	}
	if err := e.Like(ctx, 20, old); !errors.Is(err, engine.ErrUnavailable) {
		t.Fatalf("a like of a post in a damaged cold block: %v, want ErrUnavailable", err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = open()
	defer e.Close()
	got, err := e.Counts(ctx, []engine.PostID{old})
	if err != nil || got[0].Likes != 3 {
		t.Fatalf("after a restart: %+v %v, want 3 likes", got, err)
	}
	liked, err := e.Liked(ctx, 20, []engine.PostID{old})
	if err != nil || liked[0] {
		t.Fatalf("the refused like after a restart: %v %v", liked, err)
	}
}
