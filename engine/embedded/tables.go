package embedded

import (
	"fmt"
	"time"

	"github.com/tally-dev/tally/engine/follows"
	"github.com/tally-dev/tally/engine/tier"
)

// tables is how a state keeps its time-windowed tables (engine/tier: the
// post table and the like and favorite sets): their
// options, and the clock that tells a table being loaded or imported its
// old windows, built sealed, from its open ones.
type tables struct {
	opts tier.Options
	now  func() time.Time
	// followersInMemory keeps the follow graph's reverse direction in
	// memory even with a cold directory (Options.FollowersInMemory).
	followersInMemory bool
}

// follows makes the follow graph: its reverse direction (who follows a
// user, read by erasures and checks) cold in the cold directory when
// there is one, in memory otherwise.
func (tc tables) follows() *follows.Store {
	if tc.opts.Dir != "" && !tc.followersInMemory {
		return follows.NewCold(tc.opts.Dir)
	}
	return follows.New()
}

func (tc tables) loadTime() time.Time {
	if tc.now != nil {
		return tc.now()
	}
	return time.Now()
}

// inMemory is tc without the cold tier: for a state recovered from a data
// directory it cannot write (read-only).
func (tc tables) inMemory() tables {
	tc.opts.Dir, tc.opts.ColdAge, tc.opts.MemoryBudget, tc.opts.Cache = "", 0, 0, nil
	return tc
}

// coldCacheBytes is the size of the cold tier's block cache for the
// ColdCacheBytes option: 0 means tier.DefaultColdCacheBytes, negative no
// cache (every cold read a pread).
func coldCacheBytes(opt int) int {
	if opt == 0 {
		return tier.DefaultColdCacheBytes
	}
	return max(opt, 0)
}

// newPosts makes the post table. The options were checked by Open, so an
// error here is a bug.
func newPosts(tc tables) *tier.Posts {
	t, err := tier.NewPosts(tc.opts)
	if err != nil {
		panic(fmt.Sprintf("embedded: post table options: %v", err))
	}
	return t
}

// newSet makes the like ("LIKE") or favorite ("FAVS") set: (user, post)
// pairs in the post table's windows, sealed and cooled as it is, their
// cold files beside its own under their tag.
func newSet(tc tables, tag string) *tier.Set {
	s, err := tier.NewSet(tag, tc.opts)
	if err != nil {
		panic(fmt.Sprintf("embedded: %s set options: %v", tag, err))
	}
	return s
}
