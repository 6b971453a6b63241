package redisstore

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/redis/go-redis/v9"
)

// Limiter is a per-user rate limit held in Redis, so that every tally
// replica spends from one budget per user: a client spreading its requests
// over replicas behind a load balancer gets the budget once, not once per
// replica.
//
// It is GCRA (the generic cell rate algorithm): one key per user holds the
// "theoretical arrival time" (TAT) in microseconds of Redis's clock; n
// tokens are allowed when TAT + n·interval − burst·interval ≤ now, and
// then TAT moves by n·interval. One script both checks and moves it, so a
// request takes all its n tokens or none, and racing replicas cannot both
// take the last ones. The clock is Redis's (TIME), so replicas with skewed
// clocks still agree. The key is hash-tagged per user, so it works on
// Redis Cluster, and expires once the bucket is full again, so idle users
// cost nothing. A user whose key sits on a shard kept from writes
// (health.go) gets ErrUnavailable at once, unsent: the caller falls back
// to a limit of its own rather than wait for a shard that cannot answer.
type Limiter struct {
	s        *Store
	rdb      redis.UniversalClient
	interval int64 // microseconds per token
	burst    int64
}

// NewLimiter returns a limiter of perSecond tokens a second per user with
// bursts of burst, kept under s's key prefix with s's client.
func (s *Store) NewLimiter(perSecond float64, burst int) (*Limiter, error) {
	if perSecond <= 0 || math.IsInf(perSecond, 0) || math.IsNaN(perSecond) {
		return nil, fmt.Errorf("redisstore: limiter rate must be positive, got %v", perSecond)
	}
	if burst < 1 {
		return nil, fmt.Errorf("redisstore: limiter burst must be at least 1, got %d", burst)
	}
	return &Limiter{
		s:        s,
		rdb:      s.rdb,
		interval: max(1, int64(math.Round(1e6/perSecond))),
		burst:    int64(burst),
	}, nil
}

// gcraScript takes ARGV[3] tokens of KEYS[1] or none. ARGV: interval (µs
// per token), burst, n. Replies {1, 0} when taken, {0, µs until n could be
// taken} when refused.
var gcraScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local n = tonumber(ARGV[3])
local tat = tonumber(redis.call('GET', KEYS[1]) or 0)
if tat < now then tat = now end
local newTat = tat + n * interval
local allowAt = newTat - burst * interval
if allowAt > now then
  return {0, allowAt - now}
end
redis.call('SET', KEYS[1], newTat, 'PX', math.ceil((newTat - now) / 1000) + 1)
return {1, 0}
`)

// Take spends n tokens of user's budget, all or none. When it refuses,
// retryAfter is how long until n tokens will be there (n larger than the
// burst is never allowed: it must be split).
func (l *Limiter) Take(ctx context.Context, user uint64, n int) (ok bool, retryAfter time.Duration, err error) {
	if n <= 0 {
		return true, 0, nil
	}
	if int64(n) > l.burst {
		return false, 0, fmt.Errorf("redisstore: %d tokens asked of a burst of %d", n, l.burst)
	}
	key := l.s.k.limiter(user)
	if err := l.s.health.check(l.s.shardOf(ctx, key)); err != nil {
		return false, 0, err
	}
	res, err := gcraScript.Run(ctx, l.rdb, []string{key}, l.interval, l.burst, n).Int64Slice()
	if err != nil {
		return false, 0, unavailable(err)
	}
	if len(res) != 2 {
		return false, 0, fmt.Errorf("redisstore: limiter script replied %v", res)
	}
	if res[0] == 1 {
		return true, 0, nil
	}
	return false, time.Duration(res[1]) * time.Microsecond, nil
}
