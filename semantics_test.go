package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/snowflake"
)

func TestAuthRules(t *testing.T) {
	s := newTestServer(t)
	s.wantCode(t, 0, "UNAUTHENTICATED", `{ viewer { id } }`, nil)
	s.wantCode(t, 0, "UNAUTHENTICATED", `mutation { createPost { id } }`, nil)
	for _, bad := range []string{"garbage", "Bearer", "Bearer x.y.z", "Basic abc"} {
		r := s.rawAuth(t, bad, `{ systemNotifications { id } }`)
		expectCode(t, r, "UNAUTHENTICATED")
	}
	// A token signed with another secret, and an expired one.
	other := strings.Split(s.token(t, 5, false), ".")
	other[2] = strings.Repeat("A", len(other[2]))
	expectCode(t, s.doToken(t, strings.Join(other, "."), `{ viewer { id } }`, nil), "UNAUTHENTICATED")
	expired, _ := s.keys.Sign(5, false, -time.Hour)
	expectCode(t, s.doToken(t, expired, `{ viewer { id } }`, nil), "UNAUTHENTICATED")

	m := s.q(t, 7, `{ viewer { id user { id } } }`, nil)
	if str(m, "viewer", "id") != "7" || str(m, "viewer", "user", "id") != "7" {
		t.Fatalf("viewer = %v", m)
	}
	// Admin-only mutations.
	s.wantCode(t, 7, "FORBIDDEN", `mutation { pushRedDot }`, nil)
	s.wantCode(t, 7, "FORBIDDEN", `mutation { publishSystemNotification(title: "t", body: "b") { id } }`, nil)
	admin := s.token(t, 1, true)
	r := s.doToken(t, admin, `mutation { pushRedDot }`, nil)
	if len(r.Errors) > 0 {
		t.Fatal(r.Errors)
	}
	// Anonymous reads of public data are fine.
	s.q(t, 0, `{ systemNotifications { id } }`, nil)
}

func (s *testServer) rawAuth(t *testing.T, header, query string) gqlResponse {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"query": query})
	return s.post(t, header, string(body))
}

func TestPostsCountsAndLikes(t *testing.T) {
	s := newTestServer(t)
	const alice, bob = 10, 11
	pid := s.createPost(t, alice)

	// Unknown and malformed ids.
	if m := s.q(t, 0, `{ post(id: "123456789012345678") { id } }`, nil); get(m, "post") != nil {
		t.Fatalf("unknown post = %v", m)
	}
	s.wantCode(t, 0, "BAD_USER_INPUT", `{ post(id: "abc") { id } }`, nil)
	s.wantCode(t, 0, "BAD_USER_INPUT", `{ post(id: "-1") { id } }`, nil)
	s.wantCode(t, 0, "BAD_USER_INPUT", `{ post(id: "18446744073709551616") { id } }`, nil)
	s.wantCode(t, bob, "NOT_FOUND", `mutation { likePost(postId: "123456789012345678") { id } }`, nil)

	// Page in order, nulls for unknown ids.
	m := s.q(t, bob, `query($ids: [ID!]!) { posts(ids: $ids) { id author { id } createdAt counts { likes } viewerHasLiked } }`,
		map[string]any{"ids": []string{"99", pid, "98"}})
	page := get(m, "posts").([]any)
	if len(page) != 3 || page[0] != nil || page[2] != nil || str(page[1], "id") != pid || str(page[1], "author", "id") != "10" {
		t.Fatalf("page = %v", page)
	}
	var idNum uint64
	fmt.Sscan(pid, &idNum)
	if got, _ := time.Parse(time.RFC3339Nano, str(page[1], "createdAt")); !got.Equal(snowflake.Time(idNum)) {
		t.Fatalf("createdAt %v, id says %v", got, snowflake.Time(idNum))
	}
	ids := make([]string, 101)
	for i := range ids {
		ids[i] = pid
	}
	s.wantCode(t, 0, "BAD_USER_INPUT", `query($ids: [ID!]!) { posts(ids: $ids) { id } }`, map[string]any{"ids": ids})

	like := `mutation($p: ID!) { likePost(postId: $p) { counts { likes } viewerHasLiked } }`
	m = s.q(t, bob, like, map[string]any{"p": pid})
	if num(t, m, "likePost", "counts", "likes") != 1 || get(m, "likePost", "viewerHasLiked") != true {
		t.Fatalf("like = %v", m)
	}
	m = s.q(t, bob, like, map[string]any{"p": pid}) // repeat: nothing changes
	if num(t, m, "likePost", "counts", "likes") != 1 {
		t.Fatalf("second like counted: %v", m)
	}
	if u, _ := s.unread(t, alice); u.Likes != 1 || u.Total != 1 {
		t.Fatalf("author unread after like = %+v", u)
	}
	s.q(t, alice, like, map[string]any{"p": pid}) // own post: no unread
	if u, _ := s.unread(t, alice); u.Likes != 1 {
		t.Fatalf("own like bumped unread: %+v", u)
	}
	unlike := `mutation($p: ID!) { unlikePost(postId: $p) { counts { likes } viewerHasLiked } }`
	m = s.q(t, bob, unlike, map[string]any{"p": pid})
	if num(t, m, "unlikePost", "counts", "likes") != 1 || get(m, "unlikePost", "viewerHasLiked") != false {
		t.Fatalf("unlike = %v", m)
	}
	s.q(t, bob, unlike, map[string]any{"p": pid}) // not liked: nothing changes
	if u, _ := s.unread(t, alice); u.Likes != 1 {
		t.Fatalf("unlike touched the author's unread: %+v", u)
	}
	m = s.q(t, 0, `query($p: ID!) { post(id: $p) { counts { likes } viewerHasLiked } }`, map[string]any{"p": pid})
	if num(t, m, "post", "counts", "likes") != 1 || get(m, "post", "viewerHasLiked") != false {
		t.Fatalf("after unlike = %v", m)
	}

	// Favorites: deduplicated, no unread.
	fav := `mutation($p: ID!) { favoritePost(postId: $p) { counts { favorites } viewerHasFavorited } }`
	s.q(t, bob, fav, map[string]any{"p": pid})
	m = s.q(t, bob, fav, map[string]any{"p": pid})
	if num(t, m, "favoritePost", "counts", "favorites") != 1 || get(m, "favoritePost", "viewerHasFavorited") != true {
		t.Fatalf("favorite = %v", m)
	}
	m = s.q(t, bob, `mutation($p: ID!) { unfavoritePost(postId: $p) { counts { favorites } viewerHasFavorited } }`, map[string]any{"p": pid})
	if num(t, m, "unfavoritePost", "counts", "favorites") != 0 {
		t.Fatalf("unfavorite = %v", m)
	}
	if u, _ := s.unread(t, alice); u.Total != 1 {
		t.Fatalf("favorites touched unread: %+v", u)
	}

	// Views: +1 on each known post, unknown ignored, at most 100 ids.
	s.q(t, bob, `mutation($ids: [ID!]!) { recordViews(postIds: $ids) }`, map[string]any{"ids": []string{pid, pid, "77"}})
	m = s.q(t, 0, `query($p: ID!) { post(id: $p) { counts { views } } }`, map[string]any{"p": pid})
	if num(t, m, "post", "counts", "views") != 2 {
		t.Fatalf("views = %v", m)
	}
	s.wantCode(t, bob, "BAD_USER_INPUT", `mutation($ids: [ID!]!) { recordViews(postIds: $ids) }`, map[string]any{"ids": ids})
}

func TestConcurrentDuplicateLikes(t *testing.T) {
	s := newTestServer(t)
	pid := s.createPost(t, 1)
	var wg sync.WaitGroup
	for range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := s.do(t, 2, `mutation($p: ID!) { likePost(postId: $p) { id } }`, map[string]any{"p": pid})
			if len(r.Errors) > 0 {
				t.Error(r.Errors)
			}
		}()
	}
	wg.Wait()
	m := s.q(t, 0, `query($p: ID!) { post(id: $p) { counts { likes } } }`, map[string]any{"p": pid})
	if num(t, m, "post", "counts", "likes") != 1 {
		t.Fatalf("40 concurrent likes by one user counted %v", get(m, "post", "counts", "likes"))
	}
	if u, _ := s.unread(t, 1); u.Likes != 1 {
		t.Fatalf("author unread = %+v", u)
	}
}

func TestCountsPast2To31AreExact(t *testing.T) {
	s := newTestServer(t)
	imp := s.store.(engine.Importer)
	id := engine.PostID(snowflake.Make(time.Now().UnixMilli(), 1, 1))
	big := int64(1)<<53 - 1 // the largest JSON number every client reads exactly
	if err := imp.Import(t.Context(), []engine.ImportRow{{Post: id, Author: 3, Counts: engine.Counts{Views: big, Likes: 3_000_000_000}}}); err != nil {
		t.Fatal(err)
	}
	r := s.do(t, 0, fmt.Sprintf(`{ post(id: "%d") { counts { likes views } } }`, id), nil)
	if !strings.Contains(string(r.Data), `"likes":3000000000`) || !strings.Contains(string(r.Data), fmt.Sprintf(`"views":%d`, big)) {
		t.Fatalf("counts not exact 64-bit JSON numbers: %s", r.Data)
	}
}

func TestCommentsRepostsMentions(t *testing.T) {
	s := newTestServer(t)
	const alice, bob, carol, dave = 20, 21, 22, 23
	pid := s.createPost(t, alice)
	s.q(t, dave, fmt.Sprintf(`mutation { follow(userId: "%d") { id } }`, bob), nil)

	comment := `mutation($p: ID!, $m: [ID!], $k: String) { commentOnPost(postId: $p, mentions: $m, idempotencyKey: $k) { counts { comments } } }`
	m := s.q(t, bob, comment, map[string]any{"p": pid, "m": []string{id(carol), id(carol), id(bob)}})
	if num(t, m, "commentOnPost", "counts", "comments") != 1 {
		t.Fatalf("comment = %v", m)
	}
	if u, _ := s.unread(t, alice); u.Comments != 1 {
		t.Fatalf("author comments unread = %+v", u)
	}
	if u, _ := s.unread(t, carol); u.Mentions != 1 {
		t.Fatalf("mentioned user = %+v (mentioned twice must count once)", u)
	}
	if u, _ := s.unread(t, bob); u.Mentions != 0 || u.Comments != 0 {
		t.Fatalf("actor's own mention counted: %+v", u)
	}
	s.q(t, alice, comment, map[string]any{"p": pid}) // author comments on own post
	if u, _ := s.unread(t, alice); u.Comments != 1 {
		t.Fatalf("own comment bumped unread: %+v", u)
	}

	// Idempotency: the same key by the same viewer applies once.
	for range 3 {
		s.q(t, bob, comment, map[string]any{"p": pid, "k": "retry-1"})
	}
	m = s.q(t, carol, comment, map[string]any{"p": pid, "k": "retry-1"}) // another viewer's key is another op
	if num(t, m, "commentOnPost", "counts", "comments") != 4 {
		t.Fatalf("comments after retries = %v, want 4", m)
	}

	// Repost: +1 on the original, a new post by the viewer, feed unread
	// for the viewer's followers, mentions.
	repost := `mutation($p: ID!, $m: [ID!], $k: String) { repostPost(postId: $p, mentions: $m, idempotencyKey: $k) { id author { id postCount } } }`
	m = s.q(t, bob, repost, map[string]any{"p": pid, "m": []string{id(alice)}, "k": "rp"})
	newID := str(m, "repostPost", "id")
	if newID == pid || str(m, "repostPost", "author", "id") != id(bob) || num(t, m, "repostPost", "author", "postCount") != 1 {
		t.Fatalf("repost = %v", m)
	}
	m2 := s.q(t, bob, repost, map[string]any{"p": pid, "m": []string{id(alice)}, "k": "rp"})
	if str(m2, "repostPost", "id") != newID {
		t.Fatalf("retried repost made another post: %v vs %v", m2, m)
	}
	m = s.q(t, 0, `query($p: ID!) { post(id: $p) { counts { reposts } } }`, map[string]any{"p": pid})
	if num(t, m, "post", "counts", "reposts") != 1 {
		t.Fatalf("reposts = %v", m)
	}
	if u, _ := s.unread(t, alice); u.Mentions != 1 {
		t.Fatalf("repost mention = %+v", u)
	}
	if u, _ := s.unread(t, dave); u.Feed != 1 {
		t.Fatalf("follower's feed after repost = %+v", u)
	}
	s.wantCode(t, bob, "NOT_FOUND", comment, map[string]any{"p": "123456789012345678"})
	s.wantCode(t, bob, "BAD_USER_INPUT", comment, map[string]any{"p": pid, "k": strings.Repeat("k", 1000)})
}

func TestCreatePostWithClientID(t *testing.T) {
	s := newTestServer(t)
	own := snowflake.Make(time.Now().Add(-time.Hour).UnixMilli(), 7, 3)
	m := s.q(t, 5, `mutation($id: ID, $k: String) { createPost(id: $id, idempotencyKey: $k) { id createdAt } }`, map[string]any{"id": id(own), "k": "a"})
	if str(m, "createPost", "id") != id(own) {
		t.Fatalf("createPost = %v", m)
	}
	// The same id again is refused unless it is the same retry.
	s.q(t, 5, `mutation($id: ID, $k: String) { createPost(id: $id, idempotencyKey: $k) { id } }`, map[string]any{"id": id(own), "k": "a"})
	s.wantCode(t, 5, "BAD_USER_INPUT", `mutation($id: ID) { createPost(id: $id) { id } }`, map[string]any{"id": id(own)})
	s.wantCode(t, 5, "BAD_USER_INPUT", `mutation { createPost(id: "12") { id } }`, nil)
	if m := s.q(t, 0, `{ user(id: "5") { postCount } }`, nil); num(t, m, "user", "postCount") != 1 {
		t.Fatalf("postCount = %v", m)
	}
}

func TestMarkReadEachKind(t *testing.T) {
	s := newTestServer(t)
	const a, b = 30, 31
	admin := s.token(t, 1, true)
	s.unread(t, a) // a is now a known user: later notifications count
	pid := s.createPost(t, a)
	s.q(t, a, fmt.Sprintf(`mutation { follow(userId: "%d") { id } }`, b), nil)
	s.q(t, b, `mutation($p: ID!) { likePost(postId: $p) { id } }`, map[string]any{"p": pid})
	s.q(t, b, `mutation($p: ID!, $m: [ID!]) { commentOnPost(postId: $p, mentions: $m) { id } }`, map[string]any{"p": pid, "m": []string{id(a)}})
	g := s.q(t, b, fmt.Sprintf(`mutation { createGroup(memberIds: ["%d"]) { id } }`, a), nil)
	s.q(t, b, `mutation($g: ID!) { sendMessage(groupId: $g, text: "hi") { id } }`, map[string]any{"g": str(g, "createGroup", "id")})
	s.createPost(t, b)
	r := s.doToken(t, admin, `mutation { publishSystemNotification(title: "t", body: "b") { id } }`, nil)
	if len(r.Errors) > 0 {
		t.Fatal(r.Errors)
	}
	u, _ := s.unread(t, a)
	if u != (unread{Mentions: 1, Comments: 1, Likes: 1, Messages: 1, System: 1, Feed: 1, Total: 6}) {
		t.Fatalf("unread = %+v", u)
	}
	for i, kind := range []string{"MENTIONS", "COMMENTS", "LIKES", "MESSAGES", "SYSTEM", "FEED"} {
		m := s.q(t, a, `mutation($k: UnreadKind!) { markRead(kind: $k) { unread { total } } }`, map[string]any{"k": kind})
		if got := num(t, m, "markRead", "unread", "total"); got != int64(5-i) {
			t.Fatalf("after markRead(%s) total = %d, want %d", kind, got, 5-i)
		}
	}
	s.wantCode(t, a, "BAD_USER_INPUT", `mutation { markRead(kind: BOGUS) { id } }`, nil)
	s.wantCode(t, a, "BAD_USER_INPUT", `mutation($k: UnreadKind!) { markRead(kind: $k) { id } }`, map[string]any{"k": "nope"})
}

func TestSystemNotificationsAndRedDot(t *testing.T) {
	s := newTestServer(t)
	admin := s.token(t, 1, true)
	publish := func(title string) string {
		r := s.doToken(t, admin, `mutation($t: String!) { publishSystemNotification(title: $t, body: "body") { id title body createdAt } }`, map[string]any{"t": title})
		if len(r.Errors) > 0 {
			t.Fatal(r.Errors)
		}
		var m map[string]any
		json.Unmarshal(r.Data, &m)
		return str(m, "publishSystemNotification", "id")
	}
	publish("before")
	// A user seen for the first time starts at the newest notification.
	if u, _ := s.unread(t, 40); u.System != 0 {
		t.Fatalf("new user's system unread = %d", u.System)
	}
	publish("one")
	last := publish("two")
	if u, _ := s.unread(t, 40); u.System != 2 {
		t.Fatalf("system unread = %d, want 2", u.System)
	}
	m := s.q(t, 40, `{ systemNotifications(first: 2) { id title } }`, nil)
	list := get(m, "systemNotifications").([]any)
	if len(list) != 2 || str(list[0], "id") != last || str(list[0], "title") != "two" || str(list[1], "title") != "one" {
		t.Fatalf("list = %v", list)
	}
	m = s.q(t, 40, `query($a: ID) { systemNotifications(first: 5, after: $a) { title } }`, map[string]any{"a": str(list[1], "id")})
	if l := get(m, "systemNotifications").([]any); len(l) != 1 || str(l[0], "title") != "before" {
		t.Fatalf("page after = %v", l)
	}
	s.q(t, 40, `mutation { markRead(kind: SYSTEM) { id } }`, nil)
	if u, _ := s.unread(t, 40); u.System != 0 {
		t.Fatalf("after markRead(SYSTEM) = %d", u.System)
	}
	r := s.doToken(t, admin, `mutation { publishSystemNotification(title: "", body: "b") { id } }`, nil)
	expectCode(t, r, "BAD_USER_INPUT")
	// Idempotent publish.
	q := `mutation { publishSystemNotification(title: "once", body: "b", idempotencyKey: "n1") { id } }`
	r1, r2 := s.doToken(t, admin, q, nil), s.doToken(t, admin, q, nil)
	if string(r1.Data) != string(r2.Data) {
		t.Fatalf("idempotent publish made two: %s %s", r1.Data, r2.Data)
	}

	// Red dot: never clicked sees a push; click clears; a new push shows.
	if _, dot := s.unread(t, 41); dot {
		t.Fatal("red dot before any push")
	}
	s.doToken(t, admin, `mutation { pushRedDot }`, nil)
	if _, dot := s.unread(t, 41); !dot {
		t.Fatal("no red dot after a push")
	}
	m = s.q(t, 41, `mutation { clickRedDot { redDot } }`, nil)
	if get(m, "clickRedDot", "redDot") != false {
		t.Fatalf("after click = %v", m)
	}
	time.Sleep(2 * time.Millisecond)
	s.doToken(t, admin, `mutation { pushRedDot }`, nil)
	if _, dot := s.unread(t, 41); !dot {
		t.Fatal("no red dot after a second push")
	}
}

// The example of seeds/002: snapshot B=6, C=7, D=12; now B=10, C=8, D=14 → 7.
func TestFeedUnreadSeedExample(t *testing.T) {
	s := newTestServer(t)
	const a, b, c, d = 50, 51, 52, 53
	posts := func(user uint64, n int) {
		for range n {
			s.createPost(t, user)
		}
	}
	posts(b, 6)
	posts(c, 7)
	posts(d, 12)
	for _, f := range []uint64{b, c, d} {
		m := s.q(t, a, fmt.Sprintf(`mutation { follow(userId: "%d") { unread { feed } user { followingCount } } }`, f), nil)
		if num(t, m, "follow", "unread", "feed") != 0 {
			t.Fatalf("follow started with old posts unread: %v", m)
		}
	}
	posts(b, 4)
	posts(c, 1)
	posts(d, 2)
	if u, _ := s.unread(t, a); u.Feed != 7 {
		t.Fatalf("feed unread = %d, want 7", u.Feed)
	}
	m := s.q(t, 0, fmt.Sprintf(`{ user(id: "%d") { postCount followerCount followingCount } }`, b), nil)
	if num(t, m, "user", "postCount") != 10 || num(t, m, "user", "followerCount") != 1 || num(t, m, "user", "followingCount") != 0 {
		t.Fatalf("user counts = %v", m)
	}
	s.q(t, a, fmt.Sprintf(`mutation { follow(userId: "%d") { id } }`, b), nil) // repeat: no change
	m = s.q(t, a, `{ viewer { user { followingCount } unread { feed } } }`, nil)
	if num(t, m, "viewer", "user", "followingCount") != 3 || num(t, m, "viewer", "unread", "feed") != 7 {
		t.Fatalf("repeat follow changed state: %v", m)
	}
	m = s.q(t, a, fmt.Sprintf(`mutation { unfollow(userId: "%d") { unread { feed } } }`, b), nil)
	if num(t, m, "unfollow", "unread", "feed") != 3 {
		t.Fatalf("after unfollow feed = %v, want 3", m)
	}
	s.wantCode(t, a, "BAD_USER_INPUT", fmt.Sprintf(`mutation { follow(userId: "%d") { id } }`, a), nil)
	m = s.q(t, a, `mutation { markRead(kind: FEED) { unread { feed } } }`, nil)
	if num(t, m, "markRead", "unread", "feed") != 0 {
		t.Fatalf("markRead(FEED) = %v", m)
	}
	posts(c, 2)
	if u, _ := s.unread(t, a); u.Feed != 2 {
		t.Fatalf("feed after markRead and 2 new posts = %d", u.Feed)
	}
}
