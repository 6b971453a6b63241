package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/tally-dev/tally/engine/redisstore"
	"github.com/tally-dev/tally/engine/redisstore/redistest"
	"github.com/tally-dev/tally/web/transport"
)

// apqBody is an automatic-persisted-query request: the hash, and the
// query too when withQuery.
func apqBody(query string, withQuery bool) string {
	sum := sha256.Sum256([]byte(query))
	m := map[string]any{"extensions": map[string]any{"persistedQuery": map[string]any{"version": 1, "sha256Hash": hex.EncodeToString(sum[:])}}}
	if withQuery {
		m["query"] = query
	}
	b, _ := json.Marshal(m)
	return string(b)
}

// Two replicas on one Redis share persisted queries: a query persisted
// through one is known to the other; a replica with its own cache does
// not know it; entries expire; Redis round trips are timed.
func TestAPQSharedAcrossReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	addr, stop := redistest.StartSingle(t)
	defer stop()
	em := transport.NewEngineMetrics()
	reg := prometheus.NewRegistry()
	em.Register(reg)
	replica := func(shared bool, reg prometheus.Registerer) *testServer {
		store := openTestRedis(t, []string{addr}, "apq")
		rs := store.(*redisstore.Store)
		cfg := transport.Config{Metrics: reg}
		if shared {
			rs.AddHook(em.RedisHook())
			cfg.APQCache = transport.NewRedisAPQCache(rs.Client(), rs.KeyPrefix(), time.Hour)
		}
		return newTestServerWith(t, store, cfg)
	}
	a, b, alone := replica(true, reg), replica(true, nil), replica(false, nil)

	const q = `query Persisted { systemNotifications(first: 1) { id } }`
	if r := b.post(t, "", apqBody(q, false)); len(r.Errors) == 0 || r.Errors[0].Message != "PersistedQueryNotFound" {
		t.Fatalf("unknown hash: %+v", r)
	}
	if r := a.post(t, "", apqBody(q, true)); len(r.Errors) != 0 || !strings.Contains(string(r.Data), "systemNotifications") {
		t.Fatalf("persisting through A: %+v %s", r.Errors, r.Data)
	}
	if r := b.post(t, "", apqBody(q, false)); len(r.Errors) != 0 || !strings.Contains(string(r.Data), "systemNotifications") {
		t.Fatalf("hash only through B: %+v %s", r.Errors, r.Data)
	}
	if r := alone.post(t, "", apqBody(q, false)); len(r.Errors) == 0 || r.Errors[0].Extensions["code"] != "BAD_USER_INPUT" {
		t.Fatalf("a replica with its own cache knew the query: %+v", r)
	}

	// Bounded: the entry has a TTL of at most the one configured, and a
	// query over the size limit is not kept in Redis.
	rc := redis.NewClient(&redis.Options{Addr: addr})
	defer rc.Close()
	sum := sha256.Sum256([]byte(q))
	keys, _ := rc.Keys(t.Context(), "*apq:"+hex.EncodeToString(sum[:])).Result()
	if len(keys) != 1 {
		t.Fatalf("APQ keys in Redis: %v", keys)
	}
	if ttl := rc.TTL(t.Context(), keys[0]).Val(); ttl <= 0 || ttl > time.Hour {
		t.Fatalf("TTL %v", ttl)
	}
	big := `query Big { systemNotifications(first: 1) { id } }` + strings.Repeat(" ", 40<<10)
	if r := a.post(t, "", apqBody(big, true)); len(r.Errors) != 0 {
		t.Fatalf("big query: %+v", r.Errors)
	}
	if r := b.post(t, "", apqBody(big, false)); len(r.Errors) == 0 {
		t.Fatal("a query over the size limit was shared through Redis")
	}
	if !strings.Contains(metricsText(t, a.URL), `tally_redis_command_seconds_count{command="getex"}`) {
		t.Fatalf("no Redis command latency:\n%s", grepLines(metricsText(t, a.URL), "tally_redis"))
	}
}
