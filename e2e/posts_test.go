package e2e

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/snowflake"
)

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
