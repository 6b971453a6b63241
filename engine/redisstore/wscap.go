package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// SocketCap caps each user's open WebSockets across every tally replica
// sharing this Redis: a client spreading its sockets over replicas behind
// a load balancer gets the cap once, not once per replica.
//
// Each user has a sorted set (hash-tagged per user, so it works on Redis
// Cluster) whose members are the user's open sockets, one unique id each
// (this replica's random id and a counter), scored by when their lease
// ends. Admission is one script: drop the expired members, count the
// rest, add the new one if under the cap. A replica renews the leases of
// its open sockets every lease/3 in one pipelined batch and removes a
// socket's member when it closes, so the sockets of a replica that
// crashed (kill -9, power loss, a partition) stop counting one lease
// after its last renewal instead of forever.
//
// Leases are measured by Redis's clock (TIME in the scripts), not the
// replicas': a replica whose clock ran ahead would otherwise expire other
// replicas' live sockets early and admit past the cap, and one behind
// would keep a dead replica's sockets counted for longer than a lease.
type SocketCap struct {
	rdb     redis.UniversalClient
	k       keyspace
	max     int
	lease   time.Duration
	replica string
	seq     atomic.Uint64

	mu   sync.Mutex
	live map[string]string // member -> its user's key, renewed until released

	renewing sync.Mutex // held while a renewal runs

	stop chan struct{}
	done chan struct{}
	once sync.Once
}

// DefaultSocketLease is how long a socket stays counted after its
// replica last renewed it: three renewals (every 10 s) may fail before a
// live socket stops counting, and a crashed replica's sockets are freed
// within 30 s.
const DefaultSocketLease = 30 * time.Second

// NewSocketCap returns a cap of max open sockets per user whose leases
// last lease (DefaultSocketLease when zero), kept under s's key prefix
// with s's client. It renews its sockets' leases until Close.
func (s *Store) NewSocketCap(max int, lease time.Duration) (*SocketCap, error) {
	if max < 1 {
		return nil, fmt.Errorf("redisstore: socket cap must be at least 1, got %d", max)
	}
	if lease == 0 {
		lease = DefaultSocketLease
	}
	if lease < 3*time.Millisecond {
		return nil, fmt.Errorf("redisstore: socket lease %v is too short", lease)
	}
	var id [8]byte
	_, _ = rand.Read(id[:]) // crypto/rand.Read never fails (Go 1.24+)
	c := &SocketCap{
		rdb:     s.rdb,
		k:       s.k,
		max:     max,
		lease:   lease,
		replica: hex.EncodeToString(id[:]),
		live:    map[string]string{},
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
	}
	go c.renewLoop()
	return c, nil
}

// socketAdmitScript admits ARGV[3] to KEYS[1] if fewer than ARGV[1]
// unexpired members are there, with a lease of ARGV[2] ms. Replies {1, n}
// admitted (n counting it) or {0, n} refused. The key lives as long as
// its longest lease, so a user without sockets costs nothing.
var socketAdmitScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local n = redis.call('ZCARD', KEYS[1])
if redis.call('ZSCORE', KEYS[1], ARGV[3]) then
  return {1, n}
end
if n >= tonumber(ARGV[1]) then
  return {0, n}
end
local lease = tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], now + lease, ARGV[3])
local top = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
redis.call('PEXPIRE', KEYS[1], math.max(lease, tonumber(top[2]) - now) + 1)
return {1, n + 1}
`)

// socketRenewScript renews the leases of ARGV[2..] in KEYS[1] to ARGV[1]
// ms from now, adding them back if they had expired: they are open, so
// they count (a replica cut off from Redis for longer than a lease puts
// its sockets back when it returns; new ones are refused until the user
// is under the cap again, none is closed).
var socketRenewScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease = tonumber(ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
for i = 2, #ARGV do
  redis.call('ZADD', KEYS[1], now + lease, ARGV[i])
end
local top = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
if top[2] then
  redis.call('PEXPIRE', KEYS[1], math.max(lease, tonumber(top[2]) - now) + 1)
end
return #ARGV - 1
`)

func (c *SocketCap) key(user uint64) string {
	return c.k.socketCap(user)
}

// Acquire counts a new socket of user. ok false: the user has the cap's
// sockets open on all replicas together (release is a no-op). On an error
// (Redis unreachable or too slow) the socket is tracked as if admitted —
// renewals put it in the count once Redis answers — and the caller
// decides: call release either way when the socket ends (or at once, to
// refuse it).
func (c *SocketCap) Acquire(ctx context.Context, user uint64) (release func(), ok bool, err error) {
	key := c.key(user)
	member := c.replica + ":" + strconv.FormatUint(c.seq.Add(1), 36)
	res, err := socketAdmitScript.Run(ctx, c.rdb, []string{key}, c.max, c.lease.Milliseconds(), member).Int64Slice()
	if err == nil && len(res) != 2 {
		err = fmt.Errorf("redisstore: socket cap script replied %v", res)
	}
	if err == nil && res[0] != 1 {
		return func() {}, false, nil
	}
	// Admitted, or unknown (the script may have run before the reply was
	// lost): tracked either way, so the member is renewed while the socket
	// is open and removed when it ends, never left to linger a lease.
	c.mu.Lock()
	c.live[member] = key
	c.mu.Unlock()
	var once sync.Once
	release = func() { once.Do(func() { c.release(key, member) }) }
	if err != nil {
		return release, false, unavailable(err)
	}
	return release, true, nil
}

func (c *SocketCap) release(key, member string) {
	c.mu.Lock()
	delete(c.live, member)
	c.mu.Unlock()
	// A renewal that read the member before it was deleted would add it
	// back after the ZREM: wait for it to finish first.
	c.renewing.Lock()
	c.renewing.Unlock()
	// Not the socket's context: it has ended. If this fails the member is
	// no longer renewed and expires within a lease.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = c.rdb.ZRem(ctx, key, member).Err()
}

// Open is how many sockets this replica has counted and not released.
func (c *SocketCap) Open() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.live)
}

func (c *SocketCap) renewLoop() {
	defer close(c.done)
	tick := time.NewTicker(c.lease / 3)
	defer tick.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-tick.C:
			ctx, cancel := context.WithTimeout(context.Background(), c.lease/3)
			_ = c.renew(ctx) // a failed renewal is retried at the next tick; two more fit in a lease
			cancel()
		}
	}
}

// renew extends the lease of every socket this replica holds: one script
// call per user, pipelined in batches of renewBatch users (the cluster
// client splits each by slot). EVALSHA keeps a batch small; users whose
// node does not have the script yet (NOSCRIPT) are sent again with EVAL,
// which also loads it there.
func (c *SocketCap) renew(ctx context.Context) error {
	c.renewing.Lock()
	defer c.renewing.Unlock()
	byKey := map[string][]any{}
	c.mu.Lock()
	for member, key := range c.live {
		byKey[key] = append(byKey[key], member)
	}
	c.mu.Unlock()
	keys := make([]string, 0, len(byKey))
	for key := range byKey {
		keys = append(keys, key)
	}
	lease := c.lease.Milliseconds()
	run := func(keys []string, eval bool) (noScript []string, err error) {
		cmds := make([]*redis.Cmd, len(keys))
		// Each command carries its own error, a lost connection included.
		_, _ = c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, key := range keys {
				args := append([]any{lease}, byKey[key]...)
				if eval {
					cmds[i] = socketRenewScript.Eval(ctx, p, []string{key}, args...)
				} else {
					cmds[i] = socketRenewScript.EvalSha(ctx, p, []string{key}, args...)
				}
			}
			return nil
		})
		for i, cmd := range cmds {
			switch e := cmd.Err(); {
			case e == nil:
			case redis.HasErrorPrefix(e, "NOSCRIPT"):
				noScript = append(noScript, keys[i])
			case err == nil:
				err = e
			}
		}
		return noScript, err
	}
	var firstErr error
	for len(keys) > 0 {
		batch := keys[:min(len(keys), renewBatch)]
		keys = keys[len(batch):]
		again, err := run(batch, false)
		if len(again) > 0 {
			_, err2 := run(again, true)
			if err == nil {
				err = err2
			}
		}
		if err != nil && firstErr == nil {
			firstErr = err
		}
	}
	return unavailable(firstErr)
}

// renewBatch bounds the users renewed in one pipeline, so that a replica
// holding many sockets sends its renewals in pieces.
const renewBatch = 512

// Close stops renewing. Sockets still counted stay counted until they are
// released or their leases end, as if this replica had crashed.
func (c *SocketCap) Close() {
	c.once.Do(func() { close(c.stop) })
	<-c.done
}
