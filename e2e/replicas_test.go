package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/redisstore"
	"github.com/tally-dev/tally/engine/redisstore/redistest"
	"github.com/tally-dev/tally/web/transport"
)

// openTestRedis opens a Store on addrs, closed at the end of the test.
func openTestRedis(t testing.TB, addrs []string, prefix string) engine.Store {
	t.Helper()
	s, err := redisstore.Open(t.Context(), redisstore.Options{Addrs: addrs, KeyPrefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Two stateless Tally replicas on one Redis Cluster: a mutation handled by
// replica A reaches a subscriber connected to replica B within 1 s, and
// both serve the same state.
func TestCrossReplicaSubscription(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster")
	}
	cluster := redistest.StartCluster(t, 3, 0)
	a := newTestServerWith(t, openTestRedis(t, cluster.Addrs(), "x"), transport.Config{})
	b := newTestServerWith(t, openTestRedis(t, cluster.Addrs(), "x"), transport.Config{})
	b.keys = a.keys // the same secret on every replica

	const alice, bob = 1, 2
	pid := a.createPost(t, alice)
	c, err := b.dialWS(t, b.token(t, alice, false))
	if err != nil {
		t.Fatal(err)
	}
	c.subscribe("1", `subscription { unreadChanged { unread { likes system } redDot } }`, nil)
	c.nextData(5 * time.Second)

	start := time.Now()
	a.q(t, bob, `mutation($p: ID!) { likePost(postId: $p) { id } }`, map[string]any{"p": pid})
	if d := c.nextData(time.Second); num(t, d, "unreadChanged", "unread", "likes") != 1 {
		t.Fatalf("B's subscriber after a like on A: %v", d)
	}
	t.Logf("like on replica A → push on replica B in %v", time.Since(start))

	a.doToken(t, a.token(t, 9, true), `mutation { pushRedDot }`, nil)
	if d := c.nextData(time.Second); get(d, "unreadChanged", "redDot") != true {
		t.Fatalf("B's subscriber after a red-dot push on A: %v", d)
	}
	// Both replicas read the same counts.
	for _, s := range []*testServer{a, b} {
		m := s.q(t, bob, `query($p: ID!) { post(id: $p) { counts { likes } viewerHasLiked } }`, map[string]any{"p": pid})
		if num(t, m, "post", "counts", "likes") != 1 || get(m, "post", "viewerHasLiked") != true {
			t.Fatalf("replica state = %v", m)
		}
	}
	// The whole HTTP suite's feed example, across replicas.
	for range 3 {
		a.createPost(t, 50)
	}
	b.q(t, 40, fmt.Sprintf(`mutation { follow(userId: "%d") { id } }`, 50), nil)
	a.createPost(t, 50)
	if u, _ := b.unread(t, 40); u.Feed != 1 {
		t.Fatalf("feed across replicas = %+v", u)
	}
}

// Redis going away: requests fail fast with UNAVAILABLE (retryable, with
// Retry-After), /healthz stays up, /readyz says not ready (the only
// Redis is down), and service resumes by itself when Redis returns.
func TestRedisDownAndBackOverHTTP(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	node := redistest.StartSingleNode(t)
	s := newTestServerWith(t, openTestRedis(t, []string{node.Addr}, "f"), transport.Config{})
	pid := s.createPost(t, 1)

	node.Kill()
	start := time.Now()
	r := s.do(t, 2, `mutation($p: ID!) { likePost(postId: $p) { id } }`, map[string]any{"p": pid})
	e := expectCode(t, r, "UNAVAILABLE")
	if !strings.Contains(e.Message, "unavailable") || time.Since(start) > 3*time.Second {
		t.Fatalf("down: %q after %v", e.Message, time.Since(start))
	}
	if r.Header.Get("Retry-After") != "1" || e.Extensions["retryAfter"] != 1.0 {
		t.Fatalf("UNAVAILABLE without Retry-After: header %q, extensions %v", r.Header.Get("Retry-After"), e.Extensions)
	}
	if code := httpStatus(t, s.URL+"/healthz"); code != 200 {
		t.Fatalf("/healthz = %d while Redis is down", code)
	}
	if code := httpStatus(t, s.URL+"/readyz"); code != 503 {
		t.Fatalf("/readyz = %d while Redis is down", code)
	}

	node.Restart()
	deadline := time.Now().Add(15 * time.Second)
	for httpStatus(t, s.URL+"/readyz") != 200 {
		if time.Now().After(deadline) {
			t.Fatal("not ready 15 s after Redis came back")
		}
		time.Sleep(100 * time.Millisecond)
	}
	m := s.q(t, 2, `mutation($p: ID!) { likePost(postId: $p) { counts { likes } } }`, map[string]any{"p": pid})
	if num(t, m, "likePost", "counts", "likes") != 1 {
		t.Fatalf("after Redis returned: %v", m)
	}
}

func httpStatus(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// A Redis that stops answering (SIGSTOP) holds no request past its one
// deadline (transport.Config.StoreTimeout), however many store calls the
// request makes: it answers UNAVAILABLE in about that long.
func TestStalledRedisAnswersWithinTheDeadline(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	node := redistest.StartSingleNode(t)
	const deadline = 300 * time.Millisecond
	s := newTestServerWith(t, openTestRedis(t, []string{node.Addr}, "d"), transport.Config{StoreTimeout: deadline})
	pid := s.createPost(t, 1)
	// Several store calls, one after another: the viewer's badges, then
	// the post's counts and the viewer's flag, then a mutation's.
	query := `query($p: ID!) { viewer { unread { likes } } post(id: $p) { counts { likes } viewerHasLiked author { postCount } } }`
	mutation := `mutation($p: ID!) { a: likePost(postId: $p) { id } b: commentOnPost(postId: $p) { id } }`

	node.Pause()
	defer node.Resume()
	for _, q := range []string{query, mutation} {
		start := time.Now()
		r := s.do(t, 2, q, map[string]any{"p": pid})
		took := time.Since(start)
		expectCode(t, r, "UNAVAILABLE")
		if took > deadline+250*time.Millisecond {
			t.Fatalf("%s: answered after %v, past its %v deadline", q, took, deadline)
		}
		t.Logf("stalled Redis: answered UNAVAILABLE after %v (deadline %v)", took, deadline)
	}
}
