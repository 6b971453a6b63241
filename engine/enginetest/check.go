package enginetest

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/tally-dev/tally/engine"
)

// CheckClean fails t unless s, when it is an engine.Checker, finds every
// derived count equal to what it counts: whatever a suite did through the
// Store interface, no count may drift from its set, edges or posts.
func CheckClean(t testing.TB, s any) {
	t.Helper()
	c, ok := s.(engine.Checker)
	if !ok {
		return
	}
	var drifts []string
	res, err := c.Check(context.Background(), engine.CheckOptions{Drift: func(d engine.Drift) {
		drifts = append(drifts, fmt.Sprintf("%s of %d: stored %d, recounted %d (unsettled %v)", d.Count, d.ID, d.Stored, d.Recounted, d.Unsettled))
	}})
	if err != nil {
		t.Fatalf("check: %v", err)
	}
	if len(drifts) > 0 {
		t.Fatalf("check found %d drifts:\n%s\n%+v", len(drifts), strings.Join(drifts, "\n"), res.Tallies)
	}
}

// CheckWorld writes, through the Store interface, the small world the
// backends' check tests corrupt: three posts by users 1–3; users 10–14
// like the first two, favorite the first and follow users 1 and 2. It
// returns the posts.
func CheckWorld(t testing.TB, s engine.Store) []engine.PostID {
	t.Helper()
	ctx := context.Background()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	var posts []engine.PostID
	for author := engine.UserID(1); author <= 3; author++ {
		p, err := s.CreatePost(ctx, author, 0, "")
		must(err)
		posts = append(posts, p)
	}
	for u := engine.UserID(10); u < 15; u++ {
		must(s.Like(ctx, u, posts[0]))
		must(s.Like(ctx, u, posts[1]))
		must(s.Favorite(ctx, u, posts[0]))
		must(s.Follow(ctx, u, 1))
		must(s.Follow(ctx, u, 2))
	}
	return posts
}
