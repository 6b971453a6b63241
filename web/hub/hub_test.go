package hub

import (
	"context"
	"testing"
	"time"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/embedded"
)

func open(t *testing.T) (*embedded.Engine, *Hub) {
	t.Helper()
	s, err := embedded.Open(embedded.Options{})
	if err != nil {
		t.Fatal(err)
	}
	h := New(s)
	t.Cleanup(func() { h.Close(); s.Close() })
	return s, h
}

func woke(ch <-chan struct{}, d time.Duration) bool {
	select {
	case <-ch:
		return true
	case <-time.After(d):
		return false
	}
}

func TestRoutesOnlyToConcernedWatchers(t *testing.T) {
	s, h := open(t)
	ctx := t.Context()
	const author, follower, other = 1, 2, 3
	if err := s.Follow(ctx, follower, author); err != nil {
		t.Fatal(err)
	}
	fCh, err := h.WatchUnread(ctx, follower)
	if err != nil {
		t.Fatal(err)
	}
	oCh, _ := h.WatchUnread(ctx, other)

	if _, err := s.CreatePost(ctx, author, 0, ""); err != nil {
		t.Fatal(err)
	}
	if !woke(fCh, time.Second) {
		t.Fatal("follower not woken by the author's post")
	}
	if woke(oCh, 100*time.Millisecond) {
		t.Fatal("a non-follower was woken by the author's post")
	}

	// A broadcast wakes every badge watcher.
	if err := s.PushRedDot(ctx); err != nil {
		t.Fatal(err)
	}
	if !woke(fCh, time.Second) || !woke(oCh, time.Second) {
		t.Fatal("broadcast did not wake every watcher")
	}

	// Following re-indexes a connected watcher: other now hears author.
	if err := s.Follow(ctx, other, author); err != nil {
		t.Fatal(err)
	}
	woke(oCh, time.Second) // the follow itself
	deadline := time.Now().Add(2 * time.Second)
	for {
		if _, err := s.CreatePost(ctx, author, 0, ""); err != nil {
			t.Fatal(err)
		}
		if woke(oCh, 200*time.Millisecond) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a new follower was never woken by the author's posts")
		}
	}
	// Unfollowing removes it again.
	if err := s.Unfollow(ctx, other, author); err != nil {
		t.Fatal(err)
	}
	woke(oCh, time.Second)
	time.Sleep(100 * time.Millisecond) // let the re-index land
	s.CreatePost(ctx, author, 0, "")
	if woke(oCh, 200*time.Millisecond) {
		t.Fatal("an unfollower was woken by the author's post")
	}
}

func TestWatchersEndWithTheirContext(t *testing.T) {
	_, h := open(t)
	ctx, cancel := context.WithCancel(t.Context())
	h.WatchUnread(ctx, 5)
	h.WatchReceipts(ctx, 9)
	if u, r := h.Watchers(); u != 1 || r != 1 {
		t.Fatalf("watchers = %d %d", u, r)
	}
	cancel()
	deadline := time.Now().Add(time.Second)
	for {
		u, r := h.Watchers()
		if u == 0 && r == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("watchers left after cancel: %d %d", u, r)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A burst of changes costs one pending wake-up, not one per change.
func TestWakeUpsCoalesce(t *testing.T) {
	s, h := open(t)
	ctx := t.Context()
	post, _ := s.CreatePost(ctx, 1, 0, "")
	ch, _ := h.WatchUnread(ctx, 1)
	for u := engine.UserID(10); u < 60; u++ {
		if err := s.Like(ctx, u, post); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(200 * time.Millisecond)
	if !woke(ch, time.Second) {
		t.Fatal("no wake-up")
	}
	if woke(ch, 50*time.Millisecond) {
		t.Fatal("more than one pending wake-up after a burst")
	}
}

// Rapid follow/unfollow changes leave the index on the store's final answer.
func TestRapidFollowChangesSettle(t *testing.T) {
	s, h := open(t)
	ctx := t.Context()
	const author, fan = 1, 2
	ch, _ := h.WatchUnread(ctx, fan)
	for range 50 {
		s.Follow(ctx, fan, author)
		s.Unfollow(ctx, fan, author)
	}
	s.Follow(ctx, fan, author)
	s.Unfollow(ctx, fan, author) // final state: not following
	deadline := time.Now().Add(2 * time.Second)
	for {
		h.mu.Lock()
		n := len(h.byAuthor[author])
		var settled bool
		for _, w := range h.byUser[fan] {
			settled = !w.refreshing
		}
		h.mu.Unlock()
		if n == 0 && settled {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("index did not settle: %d watchers under the author", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for woke(ch, 50*time.Millisecond) {
	}
	s.CreatePost(ctx, author, 0, "")
	if woke(ch, 200*time.Millisecond) {
		t.Fatal("an unfollower was woken by the author's post")
	}
}

// A callback watcher is called where a channel watcher is signalled, and
// never after stop.
func TestWatchUnreadFuncCallsBackUntilStopped(t *testing.T) {
	s, h := open(t)
	ctx := t.Context()
	const author, fan = 1, 2
	if err := s.Follow(ctx, fan, author); err != nil {
		t.Fatal(err)
	}
	calls := make(chan struct{}, 16)
	stop, err := h.WatchUnreadFunc(ctx, fan, func(engine.Cause) { calls <- struct{}{} })
	if err != nil {
		t.Fatal(err)
	}
	for name, change := range map[string]func() error{
		"the author's post": func() error { _, err := s.CreatePost(ctx, author, 0, ""); return err },
		"a broadcast":       func() error { return s.PushRedDot(ctx) },
		"its own badge":     func() error { return s.MarkRead(ctx, fan, engine.Likes) },
	} {
		if err := change(); err != nil {
			t.Fatal(err)
		}
		if !woke(calls, time.Second) {
			t.Fatalf("not called back for %s", name)
		}
	}
	if unread, _ := h.Watchers(); unread != 1 {
		t.Fatalf("%d watchers", unread)
	}
	stop()
	stop() // a second stop does nothing
	if unread, _ := h.Watchers(); unread != 0 {
		t.Fatalf("%d watchers after stop", unread)
	}
	for woke(calls, 20*time.Millisecond) {
	}
	s.PushRedDot(ctx)
	s.CreatePost(ctx, author, 0, "")
	if woke(calls, 200*time.Millisecond) {
		t.Fatal("called back after stop")
	}
}
