package e2e

import (
	"fmt"
	"strings"
	"testing"

	"github.com/tally-dev/tally/engine/embedded"
	"github.com/tally-dev/tally/engine/redisstore"
	"github.com/tally-dev/tally/engine/redisstore/redistest"
	"github.com/tally-dev/tally/web/transport"
)

// Reactions through GraphQL (API.md, "Reactions"): reactToPost,
// unreactToPost, Post.reactions and Post.viewerReaction, with their error
// codes, on each backend.

const reactionFields = `id counts { likes } viewerHasLiked reactions { kind count } viewerReaction`

// reactionsServer is an embedded server whose deployment has kinds.
func reactionsServer(t *testing.T, kinds ...string) *testServer {
	t.Helper()
	store, err := embedded.Open(embedded.Options{Reactions: kinds})
	if err != nil {
		t.Fatal(err)
	}
	return newTestServerWith(t, store, transport.Config{})
}

// reactionsOf formats a post's reactions and the viewer's as
// "like=1 love=0 haha=0 viewer=like" (viewer=null for none).
func reactionsOf(post any) string {
	var b strings.Builder
	for _, r := range get(post, "reactions").([]any) {
		fmt.Fprintf(&b, "%s=%v ", get(r, "kind"), get(r, "count"))
	}
	fmt.Fprintf(&b, "viewer=%v", get(post, "viewerReaction"))
	if v := get(post, "viewerReaction"); v == nil {
		return strings.TrimSuffix(b.String(), "<nil>") + "null"
	}
	return b.String()
}

// TestReactionsGraphQL holds both backends to the same answers.
func TestReactionsGraphQL(t *testing.T) {
	t.Run("embedded", func(t *testing.T) { reactionsGraphQL(t, reactionsServer(t, "like", "love", "haha")) })
	t.Run("redis", func(t *testing.T) {
		if testing.Short() {
			t.Skip("starts redis-server")
		}
		addr, _ := redistest.StartSingle(t)
		store, err := redisstore.Open(t.Context(), redisstore.Options{Addrs: []string{addr}, Reactions: []string{"like", "love", "haha"}})
		if err != nil {
			t.Fatal(err)
		}
		reactionsGraphQL(t, newTestServerWith(t, store, transport.Config{}))
	})
}

func reactionsGraphQL(t *testing.T, s *testServer) {
	const author, fan, other = 1, 2, 3
	p := s.createPost(t, author)
	react := func(user uint64, kind string) map[string]any {
		t.Helper()
		return s.q(t, user, `mutation($p: ID!, $k: String!) { reactToPost(postId: $p, kind: $k) { `+reactionFields+` } }`,
			map[string]any{"p": p, "k": kind})["reactToPost"].(map[string]any)
	}
	read := func(user uint64) map[string]any {
		t.Helper()
		return s.q(t, user, `query($p: ID!) { post(id: $p) { `+reactionFields+` } }`, map[string]any{"p": p})["post"].(map[string]any)
	}
	likesBadge := func() int64 {
		t.Helper()
		u, _ := s.unread(t, author)
		return int64(u.Likes)
	}
	check := func(what string, post map[string]any, want string) {
		t.Helper()
		if got := reactionsOf(post); got != want {
			t.Fatalf("%s: %s, want %s", what, got, want)
		}
	}

	check("no reaction", read(fan), "like=0 love=0 haha=0 viewer=null")
	got := react(fan, "love")
	check("after love", got, "like=0 love=1 haha=0 viewer=love")
	if num(t, got, "counts", "likes") != 0 || get(got, "viewerHasLiked") != false {
		t.Fatalf("a love is not a like: %v", got)
	}
	if n := likesBadge(); n != 1 {
		t.Fatalf("the author's unread likes after a first reaction: %d, want 1", n)
	}
	// A switch moves one count and adds nothing to the badge.
	got = react(fan, "like")
	check("after switching to like", got, "like=1 love=0 haha=0 viewer=like")
	if num(t, got, "counts", "likes") != 1 || get(got, "viewerHasLiked") != true {
		t.Fatalf("like is the reaction like: %v", got)
	}
	check("the same kind again", react(fan, "like"), "like=1 love=0 haha=0 viewer=like")
	react(fan, "haha")
	react(other, "haha")
	if n := likesBadge(); n != 2 {
		t.Fatalf("the author's unread likes: %d, want 2 (one per user, not per switch)", n)
	}
	check("another viewer", read(other), "like=0 love=0 haha=2 viewer=haha")
	check("anonymous", read(0), "like=0 love=0 haha=2 viewer=null")
	// unlikePost removes a like only; unreactToPost any kind.
	check("unlike of a haha", s.q(t, fan, `mutation($p: ID!) { unlikePost(postId: $p) { `+reactionFields+` } }`, map[string]any{"p": p})["unlikePost"].(map[string]any),
		"like=0 love=0 haha=2 viewer=haha")
	check("unreact", s.q(t, fan, `mutation($p: ID!) { unreactToPost(postId: $p) { `+reactionFields+` } }`, map[string]any{"p": p})["unreactToPost"].(map[string]any),
		"like=0 love=0 haha=1 viewer=null")
	check("unreact again", s.q(t, fan, `mutation($p: ID!) { unreactToPost(postId: $p) { `+reactionFields+` } }`, map[string]any{"p": p})["unreactToPost"].(map[string]any),
		"like=0 love=0 haha=1 viewer=null")
	// likePost is the reaction like.
	s.q(t, fan, `mutation($p: ID!) { likePost(postId: $p) { id } }`, map[string]any{"p": p})
	check("likePost", read(fan), "like=1 love=0 haha=1 viewer=like")

	// A page: every post's reactions from the page's one read, nulls kept.
	q := s.createPost(t, author)
	page := s.q(t, other, `query($ids: [ID!]!) { posts(ids: $ids) { reactions { kind count } viewerReaction } }`,
		map[string]any{"ids": []string{p, "999", q}})["posts"].([]any)
	if len(page) != 3 || page[1] != nil {
		t.Fatalf("page: %v", page)
	}
	check("page, first post", page[0].(map[string]any), "like=1 love=0 haha=1 viewer=haha")
	check("page, new post", page[2].(map[string]any), "like=0 love=0 haha=0 viewer=null")

	// Errors.
	const mut = `mutation($p: ID!, $k: String!) { reactToPost(postId: $p, kind: $k) { id } }`
	if e := s.wantCode(t, fan, "BAD_USER_INPUT", mut, map[string]any{"p": p, "k": "angry"}); !strings.Contains(e.Message, "angry") {
		t.Fatalf("an unknown kind's error does not name it: %q", e.Message)
	}
	s.wantCode(t, fan, "BAD_USER_INPUT", mut, map[string]any{"p": p, "k": ""})
	s.wantCode(t, fan, "BAD_USER_INPUT", mut, map[string]any{"p": p, "k": strings.Repeat("x", 1<<12)})
	s.wantCode(t, fan, "BAD_USER_INPUT", mut, map[string]any{"p": "not-an-id", "k": "love"})
	s.wantCode(t, fan, "NOT_FOUND", mut, map[string]any{"p": "12345", "k": "love"})
	s.wantCode(t, 0, "UNAUTHENTICATED", mut, map[string]any{"p": p, "k": "love"})
	s.wantCode(t, 0, "UNAUTHENTICATED", `mutation($p: ID!) { unreactToPost(postId: $p) { id } }`, map[string]any{"p": p})
	s.wantCode(t, fan, "NOT_FOUND", `mutation($p: ID!) { unreactToPost(postId: $p) { id } }`, map[string]any{"p": "12345"})
	s.wantCode(t, fan, "BAD_USER_INPUT", `mutation($p: ID!) { unreactToPost(postId: $p) { id } }`, map[string]any{"p": "-1"})
	// Nothing the refused calls sent changed a count.
	check("after the refused calls", read(fan), "like=1 love=0 haha=1 viewer=like")
}

// TestReactionsRedisKinds: on Redis, as on the embedded engine, a kind
// added to -reactions works at the next start, and a start that leaves
// out a kind still counted is refused with the kind and its count.
func TestReactionsRedisKinds(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	addr, _ := redistest.StartSingle(t)
	open := func(kinds ...string) (*redisstore.Store, error) {
		return redisstore.Open(t.Context(), redisstore.Options{Addrs: []string{addr}, Reactions: kinds})
	}
	first, err := open("like")
	if err != nil {
		t.Fatal(err)
	}
	s := newTestServerWith(t, first, transport.Config{})
	p := s.createPost(t, 1)
	const mut = `mutation($p: ID!, $k: String!) { reactToPost(postId: $p, kind: $k) { ` + reactionFields + ` } }`
	if e := s.wantCode(t, 2, "BAD_USER_INPUT", mut, map[string]any{"p": p, "k": "love"}); !strings.Contains(e.Message, "love") {
		t.Fatalf("the error does not name the kind: %q", e.Message)
	}
	first.Close()

	second, err := open("like", "love")
	if err != nil {
		t.Fatalf("adding a kind at the next start: %v", err)
	}
	s = newTestServerWith(t, second, transport.Config{})
	got := s.q(t, 2, mut, map[string]any{"p": p, "k": "love"})["reactToPost"].(map[string]any)
	if r := reactionsOf(got); r != "like=0 love=1 viewer=love" {
		t.Fatalf("a love on Redis reads %s", r)
	}
	second.Close()

	code, _, errs := runCLI(t, "-redis", addr, "-reactions", "like", "-addr", "127.0.0.1:0", "-data", t.TempDir())
	if code == 0 || !strings.Contains(errs, `love`) || !strings.Contains(errs, "still counts 1 reactions") {
		t.Fatalf("-reactions like over a keyspace with a love: exit %d, %s", code, errs)
	}
}
