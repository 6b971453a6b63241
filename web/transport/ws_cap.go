package transport

import (
	"context"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/tally-dev/tally/engine"
)

// SocketCap counts each user's open WebSockets against WSConfig.MaxPerUser.
// Acquire counts a new socket of user: ok false refuses it (release is then
// a no-op); release gives the place back when the socket ends (once,
// however often it is called). err reports a counter that could not be
// asked (the socket is still admitted or refused by ok).
//
// Without Redis the count is this process's (the default); SharedSocketCap
// makes it every replica's in Redis mode.
type SocketCap interface {
	Acquire(ctx context.Context, user engine.UserID) (release func(), ok bool, err error)
}

// RedisSocketCap is what redisstore.SocketCap offers (plain user ids: the
// store packages do not import the GraphQL layer). On an error it has
// tracked the socket as admitted and returns its release.
type RedisSocketCap interface {
	Acquire(ctx context.Context, user uint64) (release func(), ok bool, err error)
}

// sharedCapTimeout bounds the wait for Redis at connection_init; past it
// the socket is admitted on the local count alone.
const sharedCapTimeout = 2 * time.Second

// SharedSocketCap counts sockets in Redis, across replicas. The handler
// applies the replica's own count first (it never refuses what the shared
// one would admit: this replica's sockets are among the shared ones). When
// Redis cannot be asked the socket is admitted on that local count alone —
// fail-open: Redis down must not cut every user off subscriptions, and the
// local cap still bounds a user to MaxPerUser per replica meanwhile.
func SharedSocketCap(c RedisSocketCap) SocketCap { return &sharedSocketCap{redis: c} }

type sharedSocketCap struct {
	redis  RedisSocketCap
	warned atomic.Int64 // unix seconds of the last warning
}

func (s *sharedSocketCap) Acquire(ctx context.Context, user engine.UserID) (func(), bool, error) {
	ctx, cancel := context.WithTimeout(ctx, sharedCapTimeout)
	defer cancel()
	rel, ok, err := s.redis.Acquire(ctx, uint64(user))
	if rel == nil {
		rel = func() {}
	}
	if err != nil {
		if now := time.Now().Unix(); s.warned.Swap(now) < now-10 {
			slog.Warn("WebSocket admitted on this replica's count alone: the shared per-user count in Redis could not be asked", "err", err)
		}
		return rel, true, err
	}
	return rel, ok, nil
}

// localSocketCap is the in-process count.
type localSocketCap struct{ slots *wsSlots }

func (l localSocketCap) Acquire(_ context.Context, user engine.UserID) (func(), bool, error) {
	rel, ok := l.slots.acquire("user " + strconv.FormatUint(uint64(user), 10))
	return rel, ok, nil
}

// bothCaps admits a socket that both caps admit, asking local first (it
// answers without a round trip and refuses a subset of what shared does).
type bothCaps struct{ local, shared SocketCap }

func (b bothCaps) Acquire(ctx context.Context, user engine.UserID) (func(), bool, error) {
	lrel, ok, _ := b.local.Acquire(ctx, user)
	if !ok {
		return lrel, false, nil
	}
	srel, ok, err := b.shared.Acquire(ctx, user)
	if !ok {
		srel()
		lrel()
		return func() {}, false, err
	}
	return func() { srel(); lrel() }, true, err
}
