package embedded

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/tally-dev/tally/engine"
)

// TestColdFollowers: with a data directory, the follow graph's reverse
// direction is a file in the cold directory, rebuilt at each start from
// the followee lists; an erasure of a user followed by many reads their
// followers from it, and the pass after the erasure takes them out of the
// file's bytes by rewriting the blocks that held them (engine/follows'
// scrub, whose tests read the file's bytes back), not the whole file.
func TestColdFollowers(t *testing.T) {
	dir := t.TempDir()
	opts := durableOpts(dir, newClock())
	opts.MaintainInterval = -1 // the test maintains
	e := openE(t, opts)
	const star, fans = engine.UserID(1 << 30), 1500
	for f := range engine.UserID(fans) {
		ok(t, e.Follow(bg, f+1, star))
		if f%2 == 0 {
			ok(t, e.Follow(bg, f+1, star+1))
		}
	}
	// Others' edges, so that the star's are a small part of the file.
	const others = 20
	for o := range engine.UserID(others) {
		for f := range engine.UserID(fans) {
			ok(t, e.Follow(bg, f+1, star+2+o))
		}
	}
	ok(t, e.Snapshot(bg))
	ok(t, e.Close())
	stale := filepath.Join(dir, "cold", "followers-0-000001.rev")
	ok(t, os.WriteFile(stale, []byte("a file of an earlier run"), 0o644))

	e = openE(t, opts)
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Fatalf("a file of an earlier run is left: %v", err)
	}
	files := e.st.follows.Maintainer().Files()
	if len(files) != 1 || filepath.Dir(files[0]) != filepath.Join(dir, "cold") {
		t.Fatalf("cold followers' files %v", files)
	}
	fs, err := e.st.follows.Followers(uint64(star), 0, 2*fans, nil)
	ok(t, err)
	if len(fs) != fans || fs[0] != 1 || fs[fans-1] != fans {
		t.Fatalf("%d followers of the star after a restart, want %d", len(fs), fans)
	}
	ok(t, e.EraseUser(bg, star))
	waitErasures(t, e)
	e.maintain()
	if now := e.st.follows.Maintainer().Files(); !slices.Equal(now, files) {
		t.Fatalf("the file after the erasure: %v, before %v (a scrub rewrites blocks, not the file)", now, files)
	} else if left, _ := filepath.Glob(filepath.Join(dir, "cold", "followers-*")); !slices.Equal(left, now) {
		t.Fatalf("the cold directory holds %v, the store uses %v", left, now)
	}
	ok(t, e.st.follows.Check())
	for _, f := range []engine.UserID{1, 2, fans} {
		got, err := e.Followees(bg, f)
		ok(t, err)
		if slices.Contains(got, star) || len(got) != int(f%2)+others {
			t.Fatalf("followees of %d after the erasure: %v", f, got)
		}
	}
	fs, err = e.st.follows.Followers(uint64(star+1), 0, 2*fans, nil)
	ok(t, err)
	if len(fs) != fans/2 {
		t.Fatalf("%d followers of the other user, want %d", len(fs), fans/2)
	}
	if fs, err = e.st.follows.Followers(uint64(star), 0, 2*fans, nil); err != nil || len(fs) != 0 {
		t.Fatalf("followers of the erased user: %v, %v", fs, err)
	}
	ok(t, e.Close())
	if left, _ := filepath.Glob(filepath.Join(dir, "cold", "followers-*")); len(left) != 0 {
		t.Fatalf("files left after Close: %v", left)
	}
}

// TestFollowersInMemory: the option keeps the reverse direction in memory.
func TestFollowersInMemory(t *testing.T) {
	opts := durableOpts(t.TempDir(), newClock())
	opts.FollowersInMemory = true
	e := openE(t, opts)
	ok(t, e.Follow(bg, 1, 2))
	ok(t, e.Snapshot(bg))
	ok(t, e.Close())
	for _, inMemory := range []bool{true, false} {
		opts.FollowersInMemory = inMemory
		e = openE(t, opts)
		if files := e.st.follows.Maintainer().Files(); (len(files) == 0) != inMemory {
			t.Fatalf("FollowersInMemory %v: cold followers' files %v", inMemory, files)
		}
		ok(t, e.Close())
	}
}
