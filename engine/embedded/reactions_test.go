package embedded

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/counters"
)

// reactionsOf reads post's reactions and viewer's reaction by kind name.
func reactionsOf(t *testing.T, e *Engine, viewer engine.UserID, post engine.PostID) (map[string]int64, string) {
	t.Helper()
	out := make([]engine.PostView, 1)
	ok(t, e.Page(context.Background(), viewer, []engine.PostID{post}, engine.PageWant{Reactions: true, ViewerReaction: true}, out))
	m := map[string]int64{}
	for i, k := range e.ReactionKinds() {
		m[k] = out[0].Reactions.Count[i]
	}
	return m, out[0].ViewerReaction
}

// TestReactionKindsAcrossStarts: kinds are configuration. A kind added
// at a start works at once; the display order is the configuration's,
// whatever ids the kinds have; leaving out a kind that still counts
// reactions fails Open naming it and its count, before and after a
// snapshot; once its reactions are gone it may be left out.
func TestReactionKindsAcrossStarts(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	opts := durableOpts(dir, nil)
	start := func(kinds ...string) (*Engine, error) {
		o := opts
		o.Reactions = kinds
		return Open(o)
	}
	e, err := start() // like alone
	ok(t, err)
	p, err := e.CreatePost(ctx, 1, 0, "")
	ok(t, err)
	ok(t, e.Like(ctx, 2, p))
	if err := e.ReactToPost(ctx, 3, p, "love"); !errors.Is(err, engine.ErrInvalid) {
		t.Fatalf("a kind not configured: %v", err)
	}
	ok(t, e.Close())

	e, err = start("like", "love")
	ok(t, err)
	ok(t, e.ReactToPost(ctx, 3, p, "love"))
	ok(t, e.ReactToPost(ctx, 4, p, "love"))
	ok(t, e.Close())

	for _, snap := range []bool{false, true} {
		e, err = start("love", "haha", "like")
		ok(t, err)
		if got := e.ReactionKinds(); !slices.Equal(got, []string{"love", "haha", "like"}) {
			t.Fatalf("kinds %v", got)
		}
		m, mine := reactionsOf(t, e, 3, p)
		if m["love"] != 2 || m["like"] != 1 || m["haha"] != 0 || mine != "love" {
			t.Fatalf("after a restart: %v, viewer %q", m, mine)
		}
		if snap {
			ok(t, e.Snapshot(ctx))
		}
		ok(t, e.Close())

		_, err = start("like", "haha")
		var inUse *counters.KindInUseError
		if !errors.As(err, &inUse) || inUse.Name != "love" || inUse.Count != 2 ||
			!strings.Contains(err.Error(), `"love"`) || !strings.Contains(err.Error(), "2 reactions") {
			t.Fatalf("leaving out a counted kind (snapshot %v): %v", snap, err)
		}
	}

	e, err = start("like", "love", "haha")
	ok(t, err)
	ok(t, e.UnreactToPost(ctx, 3, p))
	ok(t, e.Like(ctx, 4, p)) // likePost switches 4's love to like
	m, mine := reactionsOf(t, e, 4, p)
	if m["love"] != 0 || m["like"] != 2 || mine != "like" {
		t.Fatalf("after the switch: %v, viewer %q", m, mine)
	}
	ok(t, e.Close())

	e, err = start("like", "haha") // love counts nothing now
	ok(t, err)
	ok(t, e.ReactToPost(ctx, 5, p, "haha"))
	m, _ = reactionsOf(t, e, 5, p)
	if m["like"] != 2 || m["haha"] != 1 {
		t.Fatalf("with love left out: %v", m)
	}
	ok(t, e.Close())

	if _, err := start("like", "like"); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Fatalf("a kind listed twice: %v", err)
	}
	if _, err := start("love"); err == nil || !strings.Contains(err.Error(), "like") {
		t.Fatalf("kinds without like: %v", err)
	}
}
