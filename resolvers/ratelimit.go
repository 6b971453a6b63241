package resolvers

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/gqlerror"
	"golang.org/x/time/rate"

	"github.com/tally-dev/tally/engine"
)

// RateLimiter holds each user's mutation budget. Take spends n tokens of
// user's budget, all or none; when it refuses, retryAfter is how long
// until n tokens will be there. n is never above the burst.
//
// In-process limiters (the default) give each replica its own budget;
// redisstore.Limiter shares one per user across replicas.
type RateLimiter interface {
	Take(ctx context.Context, user engine.UserID, n int) (ok bool, retryAfter time.Duration, err error)
}

// RedisLimiter is what redisstore.Limiter offers (it takes plain user ids:
// the engine's store packages do not import the GraphQL layer).
type RedisLimiter interface {
	Take(ctx context.Context, user uint64, n int) (ok bool, retryAfter time.Duration, err error)
}

// SharedRateLimiter adapts a limiter on Redis to RateLimiter.
func SharedRateLimiter(l RedisLimiter) RateLimiter { return sharedLimiter{l} }

type sharedLimiter struct{ l RedisLimiter }

func (s sharedLimiter) Take(ctx context.Context, user engine.UserID, n int) (bool, time.Duration, error) {
	return s.l.Take(ctx, uint64(user), n)
}

// DefaultMaxMutationsPerRequest caps the mutation fields of one request.
// 20 covers what a client batches (a screen's worth of likes or marks)
// while keeping one request's writes small against the default burst of
// 100: a request over it is BAD_USER_INPUT, not RATE_LIMITED, since
// waiting would not make it acceptable — it must be split.
const DefaultMaxMutationsPerRequest = 20

// localLimiter is a token bucket per user in this process. Buckets that
// have refilled are dropped by a sweep, so memory follows the number of
// recently active users.
type localLimiter struct {
	limit rate.Limit
	burst int
	mu    sync.Mutex
	users map[engine.UserID]*rate.Limiter
	swept time.Time
}

func newLocalLimiter(perSecond float64, burst int) *localLimiter {
	return &localLimiter{limit: rate.Limit(perSecond), burst: burst, users: map[engine.UserID]*rate.Limiter{}}
}

func (l *localLimiter) Take(_ context.Context, u engine.UserID, n int) (bool, time.Duration, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	if now.Sub(l.swept) > time.Minute {
		for id, lim := range l.users {
			if lim.TokensAt(now) >= float64(l.burst) {
				delete(l.users, id)
			}
		}
		l.swept = now
	}
	lim := l.users[u]
	if lim == nil {
		lim = rate.NewLimiter(l.limit, l.burst)
		l.users[u] = lim
	}
	r := lim.ReserveN(now, n)
	if !r.OK() {
		return false, 0, fmt.Errorf("%d tokens asked of a burst of %d", n, l.burst)
	}
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now) // refused whole: give the tokens back
		return false, d, nil
	}
	return true, 0, nil
}

// mutationBudget spends a mutation's tokens: one per mutation field it
// executes (costLimit counted them), before any of them runs.
type mutationBudget struct {
	limiter RateLimiter // nil: unlimited
}

// newMutationBudget picks the limiter of cfg and the per-request cap of
// mutation fields: never above the burst, which a request could never
// spend at once.
func newMutationBudget(cfg Config) (mutationBudget, int) {
	maxPerRequest := cfg.MaxMutationsPerRequest
	if maxPerRequest == 0 {
		maxPerRequest = DefaultMaxMutationsPerRequest
	}
	if cfg.RateLimit <= 0 {
		return mutationBudget{}, maxPerRequest
	}
	burst := cfg.RateBurst
	if burst <= 0 {
		burst = max(1, int(cfg.RateLimit*2))
	}
	if maxPerRequest < 0 || maxPerRequest > burst {
		maxPerRequest = burst
	}
	l := cfg.RateLimiter
	if l == nil {
		l = newLocalLimiter(cfg.RateLimit, burst)
	}
	return mutationBudget{limiter: l}, maxPerRequest
}

// spend takes the operation's tokens from user's budget, or returns the
// RATE_LIMITED response that refuses it whole.
func (b mutationBudget) spend(ctx context.Context, user engine.UserID) *graphql.Response {
	if b.limiter == nil {
		return nil
	}
	n, _ := graphql.GetOperationContext(ctx).Stats.GetExtension(mutationFieldsKey).(int)
	if n == 0 {
		return nil
	}
	ok, wait, err := b.limiter.Take(ctx, user, n)
	if err != nil {
		return &graphql.Response{Errors: gqlerror.List{presentError(ctx, err)}}
	}
	if ok {
		return nil
	}
	secs := max(1, int(math.Ceil(wait.Seconds())))
	setRetryAfter(ctx, secs)
	msg := "too many mutations; slow down"
	if n > 1 {
		msg = fmt.Sprintf("too many mutations; slow down (this request's %d mutation fields were not applied)", n)
	}
	return &graphql.Response{Errors: gqlerror.List{{
		Message:    msg + fmt.Sprintf("; retry in %d s", secs),
		Extensions: map[string]any{"code": CodeRateLimited, "retryAfter": secs},
	}}}
}

type responseHeaderKey struct{}

// withResponseHeader lets the operation of a plain HTTP request set
// headers of its response (Retry-After on RATE_LIMITED). A WebSocket's
// operations get none: they run concurrently and the socket's headers are
// long sent.
func withResponseHeader(ctx context.Context, w http.ResponseWriter, r *http.Request) context.Context {
	if r.Header.Get("Upgrade") != "" {
		return ctx
	}
	return context.WithValue(ctx, responseHeaderKey{}, w.Header())
}

func setRetryAfter(ctx context.Context, secs int) {
	if h, ok := ctx.Value(responseHeaderKey{}).(http.Header); ok {
		h.Set("Retry-After", strconv.Itoa(secs))
	}
}
