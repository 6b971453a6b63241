package e2e

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/embedded"
	"github.com/tally-dev/tally/web/transport"
)

// countingStore counts the engine's multi-get calls.
type countingStore struct {
	engine.Store
	page, posts, counts, liked, favorited, userCounts atomic.Int64
}

func (c *countingStore) Page(ctx context.Context, v engine.UserID, ids []engine.PostID, want engine.PageWant, out []engine.PostView) error {
	c.page.Add(1)
	return c.Store.Page(ctx, v, ids, want, out)
}

func (c *countingStore) Posts(ctx context.Context, ids []engine.PostID) ([]engine.PostInfo, error) {
	c.posts.Add(1)
	return c.Store.Posts(ctx, ids)
}

func (c *countingStore) Counts(ctx context.Context, ids []engine.PostID) ([]engine.Counts, error) {
	c.counts.Add(1)
	return c.Store.Counts(ctx, ids)
}

func (c *countingStore) Liked(ctx context.Context, v engine.UserID, ids []engine.PostID) ([]bool, error) {
	c.liked.Add(1)
	return c.Store.Liked(ctx, v, ids)
}

func (c *countingStore) Favorited(ctx context.Context, v engine.UserID, ids []engine.PostID) ([]bool, error) {
	c.favorited.Add(1)
	return c.Store.Favorited(ctx, v, ids)
}

func (c *countingStore) UserCounts(ctx context.Context, ids []engine.UserID) ([]engine.UserCounts, error) {
	c.userCounts.Add(1)
	return c.Store.UserCounts(ctx, ids)
}

func (c *countingStore) reset() {
	c.page.Store(0)
	c.posts.Store(0)
	c.counts.Store(0)
	c.liked.Store(0)
	c.favorited.Store(0)
	c.userCounts.Store(0)
}

// TestFeedPageIsOneMultiGetPerKind: a page is one Store.Page call (the
// registry, counts and both flags) and one UserCounts for its authors,
// whatever its size, through gqlgen's executor and through the fast path.
func TestFeedPageIsOneMultiGetPerKind(t *testing.T) {
	for _, gqlgenOnly := range []bool{true, false} {
		t.Run(map[bool]string{true: "gqlgen", false: "fastpath"}[gqlgenOnly], func(t *testing.T) {
			testFeedPageCalls(t, transport.Config{DisableFastPath: gqlgenOnly})
		})
	}
}

func testFeedPageCalls(t *testing.T, cfg transport.Config) {
	inner, err := embedded.Open(embedded.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cs := &countingStore{Store: inner}
	s := newTestServerWith(t, cs, cfg)
	for _, n := range []int{1, 20, 50, 100} {
		ids := make([]string, n)
		for i := range ids {
			ids[i] = s.createPost(t, uint64(100+i%7))
		}
		s.q(t, 9, `mutation($p: ID!) { likePost(postId: $p) { id } }`, map[string]any{"p": ids[0]})
		cs.reset()
		m := s.q(t, 9, `query($ids: [ID!]!) { posts(ids: $ids) {
			id createdAt counts { likes comments reposts views favorites }
			viewerHasLiked viewerHasFavorited author { id postCount followerCount } } }`, map[string]any{"ids": ids})
		if got := len(get(m, "posts").([]any)); got != n {
			t.Fatalf("page of %d returned %d", n, got)
		}
		if get(m, "posts", 0, "viewerHasLiked") != true || get(m, "posts", n-1, "viewerHasLiked") != (n == 1) {
			t.Fatalf("like flags wrong: %v", get(m, "posts", 0))
		}
		calls := [6]int64{cs.page.Load(), cs.posts.Load(), cs.counts.Load(), cs.liked.Load(), cs.favorited.Load(), cs.userCounts.Load()}
		if calls != [6]int64{1, 0, 0, 0, 0, 1} {
			t.Fatalf("page of %d: engine calls (page, posts, counts, liked, favorited, userCounts) = %v, want one Page and one UserCounts", n, calls)
		}
	}
	// An anonymous page asks the engine for no like flags at all.
	cs.reset()
	s.q(t, 0, `query($ids: [ID!]!) { posts(ids: $ids) { viewerHasLiked } }`, map[string]any{"ids": []string{s.createPost(t, 1)}})
	if cs.liked.Load() != 0 {
		t.Fatalf("anonymous page called Liked %d times", cs.liked.Load())
	}
}
