package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/embedded"
	"github.com/tally-dev/tally/engine/redisstore/redistest"
	"github.com/tally-dev/tally/engine/snowflake"
	"github.com/tally-dev/tally/resolvers"
	"github.com/tally-dev/tally/web/auth"
	"github.com/tally-dev/tally/web/transport"
)

// The content lifecycle through GraphQL (API.md, "Content lifecycle,
// trusted writers"): comment ids, deleteComment, deletePost, eraseUser,
// the service role and -content-writes, with every error code, on each
// backend.

// lifecycleBackends are the backends the lifecycle tests run on.
var lifecycleBackends = []string{"embedded", "redis"}

// lifecycleServer starts a server on backend with cfg.
func lifecycleServer(t *testing.T, backend string, cfg transport.Config) *testServer {
	t.Helper()
	var store engine.Store
	switch backend {
	case "redis":
		addr, _ := redistest.StartSingle(t)
		store = openTestRedis(t, []string{addr}, "")
	default:
		s, err := embedded.Open(embedded.Options{})
		if err != nil {
			t.Fatal(err)
		}
		store = s
	}
	return newTestServerWith(t, store, cfg)
}

// eachLifecycleBackend runs fn as a subtest per backend.
func eachLifecycleBackend(t *testing.T, cfg transport.Config, fn func(t *testing.T, s *testServer)) {
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	for _, backend := range lifecycleBackends {
		t.Run(backend, func(t *testing.T) { fn(t, lifecycleServer(t, backend, cfg)) })
	}
}

// as runs a query with token and must succeed; it returns data decoded.
func (s *testServer) as(t *testing.T, token, query string, vars map[string]any) map[string]any {
	t.Helper()
	r := s.doToken(t, token, query, vars)
	if len(r.Errors) > 0 {
		t.Fatalf("%s %v\nerrors: %+v", query, vars, r.Errors)
	}
	var m map[string]any
	if err := json.Unmarshal(r.Data, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// asCode runs a query with token that must fail with code.
func (s *testServer) asCode(t *testing.T, token, code, query string, vars map[string]any) gqlError {
	t.Helper()
	return expectCode(t, s.doToken(t, token, query, vars), code)
}

// commentIDs makes snowflake comment ids of now, as an app's comment
// service does.
type commentIDs struct{ gen snowflake.Generator }

// commentNode is the app's comment service's snowflake node: not the
// server's, whose post ids are made on node 0.
const commentNode = 5

func (c *commentIDs) next() string {
	c.gen.Node = commentNode
	return id(c.gen.Next())
}

const (
	countsQ        = `query($p: ID!) { post(id: $p) { id counts { likes comments reposts favorites } author { id postCount } } }`
	commentQ       = `mutation($p: ID!, $c: ID) { commentOnPost(postId: $p, commentId: $c) { counts { comments } } }`
	deleteCommentQ = `mutation($p: ID!, $c: ID!) { deleteComment(postId: $p, commentId: $c) { id counts { comments } } }`
	deletePostQ    = `mutation($p: ID!) { deletePost(postId: $p) }`
	eraseUserQ     = `mutation($u: ID!) { eraseUser(userId: $u) }`
	userQ          = `query($u: ID!) { user(id: $u) { postCount followerCount followingCount } }`
)

// TestCommentIDs: a comment with an id counts once however often it is
// sent, by whomever; deleteComment takes it back once, by its writer,
// the post's author, a service or an admin (FORBIDDEN for anyone else);
// an id never counted is NOT_FOUND, and so is an unknown post; a deleted
// id sent again counts nothing; badges already bumped stay; bad ids are
// BAD_USER_INPUT.
func TestCommentIDs(t *testing.T) { eachLifecycleBackend(t, transport.Config{}, commentIDsCase) }

func commentIDsCase(t *testing.T, s *testServer) {
	const alice, bob, carol, app = 1, 2, 3, 9
	aliceT, bobT, carolT := s.token(t, alice, false), s.token(t, bob, false), s.token(t, carol, false)
	serviceT, adminT := s.roleToken(t, app, auth.RoleService), s.roleToken(t, app, auth.RoleAdmin)
	var ids commentIDs
	post := s.createPost(t, alice)
	comments := func() int64 {
		return num(t, s.as(t, bobT, countsQ, map[string]any{"p": post}), "post", "counts", "comments")
	}

	c1 := ids.next()
	for range 3 { // a retried comment counts once, whoever resends it
		s.as(t, bobT, commentQ, map[string]any{"p": post, "c": c1})
	}
	s.as(t, serviceT, commentQ, map[string]any{"p": post, "c": c1})
	if n := comments(); n != 1 {
		t.Fatalf("comment %s sent 4 times counts %d", c1, n)
	}
	if u, _ := s.unread(t, alice); u.Comments != 1 {
		t.Fatalf("alice's unread comments after one counted comment: %d", u.Comments)
	}

	s.asCode(t, carolT, resolvers.CodeForbidden, deleteCommentQ, map[string]any{"p": post, "c": c1})
	s.asCode(t, bobT, resolvers.CodeNotFound, deleteCommentQ, map[string]any{"p": post, "c": ids.next()})
	s.asCode(t, bobT, resolvers.CodeNotFound, deleteCommentQ, map[string]any{"p": id(snowflake.Make(time.Now().UnixMilli(), 7, 7)), "c": c1})
	s.asCode(t, bobT, resolvers.CodeBadUserInput, deleteCommentQ, map[string]any{"p": post, "c": "x"})
	s.asCode(t, bobT, resolvers.CodeBadUserInput, commentQ, map[string]any{"p": post, "c": "12"}) // not a snowflake
	s.asCode(t, "", resolvers.CodeUnauthenticated, deleteCommentQ, map[string]any{"p": post, "c": c1})
	if n := comments(); n != 1 {
		t.Fatalf("refused calls changed the comments to %d", n)
	}

	d := s.as(t, bobT, deleteCommentQ, map[string]any{"p": post, "c": c1}) // its writer
	if str(d, "deleteComment", "id") != post || num(t, d, "deleteComment", "counts", "comments") != 0 {
		t.Fatalf("deleteComment by its writer returned %v", d)
	}
	s.as(t, bobT, deleteCommentQ, map[string]any{"p": post, "c": c1}) // a repeat: no error, no change
	s.as(t, bobT, commentQ, map[string]any{"p": post, "c": c1})       // a deleted id is never counted again
	if n := comments(); n != 0 {
		t.Fatalf("after delete, repeat and resend: %d comments", n)
	}
	if u, _ := s.unread(t, alice); u.Comments != 1 {
		t.Fatalf("deleting a comment took back a badge: alice's unread comments %d", u.Comments)
	}

	// The post's author, a service and an admin may delete anyone's.
	for _, deleter := range []string{aliceT, serviceT, adminT} {
		c := ids.next()
		s.as(t, carolT, commentQ, map[string]any{"p": post, "c": c})
		s.as(t, deleter, deleteCommentQ, map[string]any{"p": post, "c": c})
	}
	// A comment without an id counts each time and cannot be taken back.
	s.as(t, carolT, commentQ, map[string]any{"p": post})
	s.as(t, carolT, commentQ, map[string]any{"p": post})
	if n := comments(); n != 2 {
		t.Fatalf("two comments without ids after three deleted ones: %d", n)
	}
}

// TestDeletePost: only the author, a service or an admin deletes a post;
// then post(id) is null (also in a page), mutations on it are NOT_FOUND,
// the author's postCount drops, a repost's original loses its repost;
// a repeat changes nothing; an unknown id is NOT_FOUND; no follower's feed
// badge goes below zero and a later post counts as new.
func TestDeletePost(t *testing.T) { eachLifecycleBackend(t, transport.Config{}, deletePostCase) }

func deletePostCase(t *testing.T, s *testServer) {
	const alice, bob, dave, app = 1, 2, 4, 9
	aliceT, bobT, daveT := s.token(t, alice, false), s.token(t, bob, false), s.token(t, dave, false)
	serviceT := s.roleToken(t, app, auth.RoleService)
	s.as(t, daveT, `mutation { follow(userId: "1") { id } }`, nil)

	post := s.createPost(t, alice)
	s.as(t, bobT, `mutation($p: ID!) { likePost(postId: $p) { id } favoritePost(postId: $p) { id } }`, map[string]any{"p": post})
	repost := str(s.as(t, bobT, `mutation($p: ID!) { repostPost(postId: $p) { id } }`, map[string]any{"p": post}), "repostPost", "id")
	m := s.as(t, bobT, countsQ, map[string]any{"p": post})
	if num(t, m, "post", "counts", "reposts") != 1 || num(t, m, "post", "counts", "likes") != 1 {
		t.Fatalf("before the deletes: %v", m)
	}

	s.asCode(t, aliceT, resolvers.CodeForbidden, deletePostQ, map[string]any{"p": repost}) // the original's author is not the repost's
	s.asCode(t, bobT, resolvers.CodeForbidden, deletePostQ, map[string]any{"p": post})
	s.asCode(t, bobT, resolvers.CodeNotFound, deletePostQ, map[string]any{"p": id(snowflake.Make(time.Now().UnixMilli(), 7, 7))})
	s.asCode(t, bobT, resolvers.CodeBadUserInput, deletePostQ, map[string]any{"p": "-1"})
	s.asCode(t, "", resolvers.CodeUnauthenticated, deletePostQ, map[string]any{"p": post})

	if got := str(s.as(t, bobT, deletePostQ, map[string]any{"p": repost}), "deletePost"); got != repost {
		t.Fatalf("deletePost returned %q, want the post's id %s", got, repost)
	}
	m = s.as(t, bobT, countsQ, map[string]any{"p": post})
	if num(t, m, "post", "counts", "reposts") != 0 {
		t.Fatalf("the original keeps its repost after the repost was deleted: %v", m)
	}
	if n := num(t, s.as(t, bobT, userQ, map[string]any{"u": id(bob)}), "user", "postCount"); n != 0 {
		t.Fatalf("bob's postCount after deleting his repost: %d", n)
	}

	if u, _ := s.unread(t, dave); u.Feed != 1 {
		t.Fatalf("dave's feed badge before the delete: %d", u.Feed)
	}
	s.as(t, serviceT, deletePostQ, map[string]any{"p": post}) // the app's backend may delete any post
	s.as(t, aliceT, deletePostQ, map[string]any{"p": post})   // a repeat: no error
	if m := s.as(t, bobT, `query($p: ID!, $r: ID!) { post(id: $p) { id } posts(ids: [$p, $r]) { id } }`, map[string]any{"p": post, "r": repost}); get(m, "post") != nil ||
		get(m, "posts", 0) != nil || get(m, "posts", 1) != nil {
		t.Fatalf("deleted posts still read: %v", m)
	}
	for _, q := range []string{
		`mutation($p: ID!) { likePost(postId: $p) { id } }`,
		`mutation($p: ID!) { unlikePost(postId: $p) { id } }`,
		`mutation($p: ID!) { favoritePost(postId: $p) { id } }`,
		`mutation($p: ID!) { commentOnPost(postId: $p) { id } }`,
		`mutation($p: ID!) { repostPost(postId: $p) { id } }`,
		deleteCommentQ,
	} {
		s.asCode(t, bobT, resolvers.CodeNotFound, q, map[string]any{"p": post, "c": id(snowflake.Make(time.Now().UnixMilli(), 1, 1))})
	}
	if n := num(t, s.as(t, bobT, userQ, map[string]any{"u": id(alice)}), "user", "postCount"); n != 0 {
		t.Fatalf("alice's postCount after deleting her post: %d", n)
	}
	if u, _ := s.unread(t, dave); u.Feed < 0 || u.Feed > 1 {
		t.Fatalf("dave's feed badge after the delete: %d", u.Feed)
	}
	s.as(t, daveT, `mutation { markRead(kind: FEED) { id } }`, nil)
	s.createPost(t, alice)
	if u, _ := s.unread(t, dave); u.Feed != 1 {
		t.Fatalf("a post made after the delete reads %d new in dave's feed, want 1", u.Feed)
	}
}

// TestEraseUser: eraseUser is for admin and service tokens only; it takes
// the user's likes and favorites off the posts, their follow edges both
// ways off the counts, them out of their groups' member and reader
// lists, and their badges; their posts stay; a repeat changes nothing.
func TestEraseUser(t *testing.T) { eachLifecycleBackend(t, transport.Config{}, eraseUserCase) }

func eraseUserCase(t *testing.T, s *testServer) {
	const alice, bob, carol, app = 1, 2, 3, 9
	aliceT, bobT, carolT := s.token(t, alice, false), s.token(t, bob, false), s.token(t, carol, false)
	serviceT, adminT := s.roleToken(t, app, auth.RoleService), s.roleToken(t, app, auth.RoleAdmin)

	post := s.createPost(t, alice)
	bobPost := s.createPost(t, bob)
	vars := map[string]any{"p": post}
	s.as(t, bobT, `mutation($p: ID!) { likePost(postId: $p) { id } favoritePost(postId: $p) { id } }`, vars)
	s.as(t, carolT, `mutation($p: ID!) { likePost(postId: $p) { id } }`, vars)
	s.as(t, bobT, `mutation { follow(userId: "1") { id } }`, nil)
	s.as(t, aliceT, `mutation { follow(userId: "2") { id } }`, nil)
	group := str(s.as(t, aliceT, `mutation { createGroup(memberIds: ["2", "3"]) { id } }`, nil), "createGroup", "id")
	msg := str(s.as(t, aliceT, `mutation($g: ID!) { sendMessage(groupId: $g, text: "hi") { id } }`, map[string]any{"g": group}), "sendMessage", "id")
	s.as(t, bobT, `mutation($m: ID!) { markMessagesRead(messageIds: [$m]) { id } }`, map[string]any{"m": msg})
	s.as(t, carolT, `mutation { follow(userId: "2") { id } }`, nil)
	s.as(t, aliceT, `mutation($p: ID!) { likePost(postId: $p) { id } }`, map[string]any{"p": bobPost})

	s.asCode(t, bobT, resolvers.CodeForbidden, eraseUserQ, map[string]any{"u": id(bob)}) // not even oneself
	s.asCode(t, "", resolvers.CodeUnauthenticated, eraseUserQ, map[string]any{"u": id(bob)})
	s.asCode(t, adminT, resolvers.CodeBadUserInput, eraseUserQ, map[string]any{"u": "0"})
	if m := s.as(t, serviceT, eraseUserQ, map[string]any{"u": id(bob)}); get(m, "eraseUser") != true {
		t.Fatalf("eraseUser returned %v", m)
	}
	s.as(t, adminT, eraseUserQ, map[string]any{"u": id(bob)})    // a repeat
	s.as(t, adminT, eraseUserQ, map[string]any{"u": "77777777"}) // a user Tally never saw

	m := s.as(t, aliceT, countsQ, vars)
	if num(t, m, "post", "counts", "likes") != 1 || num(t, m, "post", "counts", "favorites") != 0 {
		t.Fatalf("alice's post after bob's erasure: %v", m)
	}
	for who, want := range map[uint64][3]int64{alice: {1, 0, 0}, bob: {0, 0, 0}, carol: {0, 0, 0}} {
		u := s.as(t, aliceT, userQ, map[string]any{"u": id(who)})
		got := [3]int64{num(t, u, "user", "postCount"), num(t, u, "user", "followerCount"), num(t, u, "user", "followingCount")}
		if got != want {
			t.Errorf("user %d after bob's erasure: postCount, followerCount, followingCount = %v, want %v", who, got, want)
		}
	}
	if m := s.as(t, carolT, `query($p: ID!) { post(id: $p) { id author { id } counts { likes } } }`, map[string]any{"p": bobPost}); get(m, "post") == nil ||
		get(m, "post", "author") != nil || num(t, m, "post", "counts", "likes") != 1 {
		t.Fatalf("bob's post after his erasure: %v (his posts stay, with their counts and no author)", m)
	}
	g := s.as(t, aliceT, `query($g: ID!, $m: ID!) { group(id: $g) { memberCount members { id } }
		message(id: $m) { readReceipts { readCount readers { id } unreaders { id } } } }`, map[string]any{"g": group, "m": msg})
	lists, _ := json.Marshal([]any{get(g, "group", "members"), get(g, "message", "readReceipts", "readers"), get(g, "message", "readReceipts", "unreaders")})
	if strings.Contains(string(lists), `"2"`) || num(t, g, "group", "memberCount") != 2 || num(t, g, "message", "readReceipts", "readCount") != 1 {
		t.Fatalf("the group after bob's erasure (no list names him, his receipt stays counted): %v", g)
	}
	if u, _ := s.unread(t, bob); u != (unread{}) {
		t.Fatalf("bob's badges after his erasure: %+v", u)
	}
}

// TestContentWritesService: under -content-writes service an end user's
// token gets FORBIDDEN on the five content writes and keeps the rest;
// a service token writes content for the user in its sub; so does an
// admin's.
func TestContentWritesService(t *testing.T) {
	eachLifecycleBackend(t, transport.Config{ContentWrites: resolvers.ContentWritesService}, contentWritesServiceCase)
}

func contentWritesServiceCase(t *testing.T, s *testServer) {
	const alice, bob = 1, 2
	aliceT, bobT := s.token(t, alice, false), s.token(t, bob, false)
	aliceApp, bobApp, adminT := s.roleToken(t, alice, auth.RoleService), s.roleToken(t, bob, auth.RoleService), s.roleToken(t, 9, auth.RoleAdmin)
	var ids commentIDs

	// The app's backend reports alice's post, keyed by the app's id.
	appPost := id(snowflake.Make(time.Now().UnixMilli(), 3, 1))
	m := s.as(t, aliceApp, `mutation($p: ID) { createPost(id: $p) { id author { id } } }`, map[string]any{"p": appPost})
	if str(m, "createPost", "id") != appPost || str(m, "createPost", "author", "id") != id(alice) {
		t.Fatalf("a service token's createPost: %v (the post is its sub's)", m)
	}
	vars := map[string]any{"p": appPost, "c": ids.next()}
	for _, q := range []string{
		`mutation { createPost { id } }`,
		`mutation($p: ID!) { repostPost(postId: $p) { id } }`,
		commentQ,
		deleteCommentQ,
		deletePostQ,
	} {
		e := s.asCode(t, bobT, resolvers.CodeForbidden, q, vars)
		if !strings.Contains(e.Message, "-content-writes service") {
			t.Errorf("the refusal does not say why: %q", e.Message)
		}
	}
	// End users keep likes, favorites, views, follows, reads and messages.
	s.as(t, bobT, `mutation($p: ID!) { likePost(postId: $p) { id } favoritePost(postId: $p) { id } recordViews(postIds: [$p])
		follow(userId: "1") { id } markRead(kind: COMMENTS) { id } }`, map[string]any{"p": appPost})
	group := str(s.as(t, bobT, `mutation { createGroup(memberIds: ["1"]) { id } }`, nil), "createGroup", "id")
	s.as(t, bobT, `mutation($g: ID!) { sendMessage(groupId: $g, text: "hi") { id } }`, map[string]any{"g": group})

	// bob's comment, through the app: counted as bob's (alice's badge
	// moves), and bob's to delete through the app.
	s.as(t, bobApp, commentQ, vars)
	if u, _ := s.unread(t, alice); u.Comments != 1 || u.Likes != 1 {
		t.Fatalf("alice's badges after bob's like and his comment through the app: %+v", u)
	}
	repost := str(s.as(t, bobApp, `mutation($p: ID!) { repostPost(postId: $p) { id author { id } } }`, vars), "repostPost", "id")
	s.as(t, bobApp, deleteCommentQ, vars)
	s.as(t, adminT, deletePostQ, map[string]any{"p": repost})
	s.as(t, aliceApp, deletePostQ, vars)
	s.asCode(t, aliceT, resolvers.CodeForbidden, eraseUserQ, map[string]any{"u": id(bob)})
	s.as(t, aliceApp, eraseUserQ, map[string]any{"u": id(bob)})
	if m := s.as(t, aliceT, userQ, map[string]any{"u": id(alice)}); num(t, m, "user", "postCount") != 0 || num(t, m, "user", "followerCount") != 0 {
		t.Fatalf("alice after her post's delete and bob's erasure: %v", m)
	}
}

// TestLifecycleOnRedisCluster runs the lifecycle's cases and the
// integration page's sequence on a Redis Cluster of three masters, where
// a post, its original, its likers and its author live in other slots
// (one cluster, a key prefix per case).
func TestLifecycleOnRedisCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster")
	}
	service := transport.Config{ContentWrites: resolvers.ContentWritesService}
	cases := []struct {
		name string
		cfg  transport.Config
		fn   func(*testing.T, *testServer)
	}{
		{"CommentIDs", transport.Config{}, commentIDsCase},
		{"DeletePost", transport.Config{}, deletePostCase},
		{"EraseUser", transport.Config{}, eraseUserCase},
		{"ContentWritesService", service, contentWritesServiceCase},
		{"IntegrationDoc", service, integrationDocCase},
	}
	cluster := redistest.StartCluster(t, 3, 0)
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.fn(t, newTestServerWith(t, openTestRedis(t, cluster.Addrs(), fmt.Sprintf("lc%d:", i)), c.cfg))
		})
	}
}

// TestLifecycleFieldsPriced: eraseUser is priced as the largest page, so
// a request of aliased erasures over the limit is refused before
// anything runs, while one within it runs.
func TestLifecycleFieldsPriced(t *testing.T) {
	s := lifecycleServer(t, "embedded", transport.Config{ComplexityLimit: 2*transport.EraseUserPrice + 10})
	adminT := s.roleToken(t, 9, auth.RoleAdmin)
	erasures := func(n int) string {
		var b strings.Builder
		for i := range n {
			fmt.Fprintf(&b, "e%d: eraseUser(userId: \"%d\") ", i, 100+i)
		}
		return "mutation { " + b.String() + "}"
	}
	e := s.asCode(t, adminT, resolvers.CodeBadUserInput, erasures(3), nil)
	if e.Extensions["reason"] != "COMPLEXITY_LIMIT_EXCEEDED" {
		t.Fatalf("three erasures over a limit of two: %+v", e)
	}
	for _, e := range s.doToken(t, adminT, erasures(2), nil).Errors {
		if e.Extensions["reason"] == "COMPLEXITY_LIMIT_EXCEEDED" {
			t.Fatalf("two erasures within a limit of two were refused: %+v", e)
		}
	}
}

// TestContentWritesFlag: the built server reads -content-writes from
// TALLY_CONTENT_WRITES; a token `tally token -service` prints writes
// content, the same user's own token gets FORBIDDEN.
func TestContentWritesFlag(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the tally binary")
	}
	t.Setenv("TALLY_JWT_SECRET", crashSecret)
	t.Setenv("TALLY_CONTENT_WRITES", "service")
	p := startTally(t, t.TempDir())
	tokens := map[string]string{}
	for _, role := range []string{"-service", "-admin", ""} {
		args := []string{"token", "-user", "5"}
		if role != "" {
			args = append(args, role)
		}
		code, out, errs := runCLI(t, args...)
		if code != 0 {
			t.Fatalf("tally %v: exit %d %s", args, code, errs)
		}
		tokens[role] = strings.TrimSpace(out)
	}
	post := func(token string) gqlResponse {
		req, _ := http.NewRequest("POST", p.url+"/query", strings.NewReader(`{"query": "mutation { createPost { author { id } } }"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := httpClient().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var r gqlResponse
		if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	for _, role := range []string{"-service", "-admin"} {
		if r := post(tokens[role]); len(r.Errors) > 0 || !strings.Contains(string(r.Data), `"id":"5"`) {
			t.Fatalf("createPost with tally token %s: %s %+v", role, r.Data, r.Errors)
		}
	}
	expectCode(t, post(tokens[""]), resolvers.CodeForbidden)
}
