package e2e

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"
)

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

// The example of docs/seeds.md#seed-002: snapshot B=6, C=7, D=12; now B=10, C=8, D=14 → 7.
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
