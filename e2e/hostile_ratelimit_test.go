package e2e

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tally-dev/tally/engine/redisstore"
	"github.com/tally-dev/tally/engine/redisstore/redistest"
	"github.com/tally-dev/tally/web/transport"
)

// Two replicas on one Redis (a single node, then a 3-master cluster)
// spend one mutation budget per user: a client cannot double its rate by
// spreading requests over replicas, and a request that would overdraw the
// shared budget is refused whole on either.
func TestHostileRateLimitSharedAcrossReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	t.Run("single", func(t *testing.T) {
		addr, stop := redistest.StartSingle(t)
		defer stop()
		testSharedBudget(t, []string{addr})
	})
	t.Run("cluster", func(t *testing.T) {
		c := redistest.StartCluster(t, 3, 0)
		testSharedBudget(t, c.Addrs())
	})
}

func testSharedBudget(t *testing.T, addrs []string) {
	replica := func() *testServer {
		store := openTestRedis(t, addrs, "rl")
		l, err := store.(*redisstore.Store).NewLimiter(0.05, 10)
		if err != nil {
			t.Fatal(err)
		}
		return newTestServerWith(t, store, transport.Config{
			RateLimit: 0.05, RateBurst: 10, RateLimiter: transport.SharedRateLimiter(l),
		})
	}
	a, b := replica(), replica()
	create := func(s *testServer, user uint64, n int) gqlResponse {
		return s.do(t, user, aliased("mutation", "", "createPost { id }", n), nil)
	}
	if r := create(a, 7, 6); len(r.Errors) > 0 {
		t.Fatalf("6 of 10 on A: %+v", r.Errors)
	}
	// B knows the 6 spent on A: 6 more would overdraw, refused whole.
	e := expectCode(t, create(b, 7, 6), "RATE_LIMITED")
	if retry, _ := e.Extensions["retryAfter"].(float64); retry < 30 || retry > 41 {
		t.Fatalf("retryAfter %v, want about 40 s (2 tokens missing at one per 20 s)", e.Extensions["retryAfter"])
	}
	if r := create(b, 7, 4); len(r.Errors) > 0 {
		t.Fatalf("the 4 left, on B: %+v", r.Errors)
	}
	expectCode(t, create(a, 7, 1), "RATE_LIMITED")
	if n := a.postCount(t, 7); n != 10 {
		t.Fatalf("postCount %d, want the 10 of the budget", n)
	}
	// Another user has a budget of their own.
	if r := create(b, 8, 10); len(r.Errors) > 0 {
		t.Fatalf("user 8: %+v", r.Errors)
	}

	// The user's key in Redis expires once the budget would be full again
	// (10 tokens at 0.05/s: within 200 s), so idle users cost nothing.
	rdb := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: addrs})
	defer rdb.Close()
	key := "rl{rl" + "7" + "}"
	ttl := rdb.PTTL(t.Context(), key).Val()
	if ttl <= 0 || ttl > 201*time.Second {
		t.Fatalf("PTTL of %s: %v, want up to 200 s", key, ttl)
	}
}

// The shared budget's Redis going away (here the limiter has a Redis of
// its own, so the store stays up): mutations are not refused for it, and
// each user is limited by this replica's own budget instead.
func TestHostileRateLimitFallsBackToLocal(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	storeAddr, _ := redistest.StartSingle(t)
	limiterNode := redistest.StartSingleNode(t)
	limiterStore := openTestRedis(t, []string{limiterNode.Addr}, "rl")
	t.Cleanup(func() { limiterStore.Close() })
	l, err := limiterStore.(*redisstore.Store).NewLimiter(0.05, 5)
	if err != nil {
		t.Fatal(err)
	}
	s := newTestServerWith(t, openTestRedis(t, []string{storeAddr}, "st"), transport.Config{
		RateLimit: 0.05, RateBurst: 5, RateLimiter: transport.SharedRateLimiter(l),
	})
	create := func(n int) gqlResponse { return s.do(t, 7, aliased("mutation", "", "createPost { id }", n), nil) }
	if r := create(3); len(r.Errors) > 0 {
		t.Fatalf("3 of 5 with the shared budget: %+v", r.Errors)
	}
	limiterNode.Kill()
	// The local budget is full: 5 more pass, the sixth is refused.
	if r := create(5); len(r.Errors) > 0 {
		t.Fatalf("5 of the local budget with the shared one down: %+v", r.Errors)
	}
	expectCode(t, create(1), "RATE_LIMITED")
	if n := s.postCount(t, 7); n != 8 {
		t.Fatalf("postCount %d, want 8", n)
	}
}
