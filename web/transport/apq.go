package transport

import (
	"context"
	"log/slog"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/handler/lru"
	"github.com/redis/go-redis/v9"
)

// DefaultAPQTTL is how long a persisted query stays in Redis after it was
// last fetched from there or stored.
const DefaultAPQTTL = 24 * time.Hour

// maxAPQBytes bounds a query kept in the shared cache: a client may
// persist any text that hashes right, so each entry's size (and the TTL)
// bounds what one client can leave in Redis. A longer query still runs;
// it is just sent whole each time.
const maxAPQBytes = 32 << 10

// redisAPQCache is the automatic-persisted-query cache shared by replicas
// through Redis, so that a query persisted on one replica is known to
// the others (a client behind a load balancer otherwise meets
// PERSISTED_QUERY_NOT_FOUND on every replica in turn). The hash names
// its query for good, so a local LRU in front is never stale and saves
// the round trip for hot queries.
type redisAPQCache struct {
	client redis.UniversalClient
	prefix string
	ttl    time.Duration
	local  *lru.LRU[string]
}

// NewRedisAPQCache returns an APQ cache in Redis under keys prefix+"apq:"
// + the SHA-256, each kept ttl (DefaultAPQTTL if 0) after its last use.
func NewRedisAPQCache(client redis.UniversalClient, prefix string, ttl time.Duration) graphql.Cache[string] {
	if ttl <= 0 {
		ttl = DefaultAPQTTL
	}
	return &redisAPQCache{client: client, prefix: prefix + "apq:", ttl: ttl, local: lru.New[string](1000)}
}

func (c *redisAPQCache) Get(ctx context.Context, hash string) (string, bool) {
	if !isSHA256Hex(hash) {
		return "", false
	}
	if q, ok := c.local.Get(ctx, hash); ok {
		return q, true
	}
	q, err := c.client.GetEx(ctx, c.prefix+hash, c.ttl).Result()
	if err != nil {
		if err != redis.Nil {
			// A miss makes the client send the query whole: nothing fails.
			slog.Debug("apq: redis get failed", "err", err)
		}
		return "", false
	}
	c.local.Add(ctx, hash, q)
	return q, true
}

func (c *redisAPQCache) Add(ctx context.Context, hash, query string) {
	if !isSHA256Hex(hash) || len(query) > maxAPQBytes {
		return
	}
	c.local.Add(ctx, hash, query)
	if err := c.client.Set(ctx, c.prefix+hash, query, c.ttl).Err(); err != nil {
		slog.Debug("apq: redis set failed", "err", err)
	}
}

func isSHA256Hex(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
