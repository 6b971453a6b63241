package transport

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/resolvers"
	"github.com/tally-dev/tally/web/auth"
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

// buckets is a token bucket per key in this process, kept as GCRA (the
// generic cell rate algorithm): a key's whole state is one time, when its
// bucket will be full again (the theoretical arrival time). Spending n
// tokens moves it n intervals later, starting from now when it lies in the
// past; a spend is refused when that would put it more than the burst's
// worth of intervals ahead of now. This is the token bucket of
// x/time/rate to the nanosecond, in eight bytes a key instead of a
// Limiter and a pointer each: for integer keys the map holds no pointers,
// so however many users are active the GC has nothing to scan in it. A
// key whose bucket is full again holds nothing a new bucket would not, so
// a sweep drops those, and memory follows the number of recently active
// keys.
type buckets[K comparable] struct {
	interval  float64 // nanoseconds per token
	tolerance int64   // burst × interval: how far a full time may run ahead of now
	burst     int
	clock     func() int64 // monotonic nanoseconds
	mu        sync.Mutex
	full      map[K]int64 // when each key's bucket is full again; absent: full now
	swept     int64
	// held is the most keys the map held since it was last rebuilt: Go's
	// maps do not shrink, so after a crowd has gone the sweep copies the
	// few keys left into a map of their size.
	held int
}

func newBuckets[K comparable](perSecond float64, burst int) *buckets[K] {
	epoch := time.Now()
	return newBucketsClock[K](perSecond, burst, func() int64 { return int64(time.Since(epoch)) })
}

func newBucketsClock[K comparable](perSecond float64, burst int, clock func() int64) *buckets[K] {
	interval := float64(time.Second) / perSecond
	return &buckets[K]{interval: interval, tolerance: int64(math.Round(float64(burst) * interval)), burst: burst,
		clock: clock, full: map[K]int64{}}
}

// sweepEvery is how often full buckets are dropped.
const sweepEvery = int64(time.Minute)

// fullAt returns when k's bucket is full again, no earlier than now, and
// drops the full buckets of every key once a sweepEvery; b.mu is held.
func (b *buckets[K]) fullAt(k K, now int64) int64 {
	if now-b.swept > sweepEvery {
		b.held = max(b.held, len(b.full))
		maps.DeleteFunc(b.full, func(_ K, full int64) bool { return full <= now })
		if len(b.full) < b.held/4 {
			kept := make(map[K]int64, len(b.full))
			maps.Copy(kept, b.full)
			b.full, b.held = kept, len(kept)
		}
		b.swept = now
	}
	return max(b.full[k], now)
}

// cost is how far n tokens move a full time.
func (b *buckets[K]) cost(n int) int64 { return int64(math.Round(float64(n) * b.interval)) }

// take spends n tokens of k's bucket, all or none; when it refuses,
// retryAfter is how long until n tokens will be there.
func (b *buckets[K]) take(k K, n int) (ok bool, retryAfter time.Duration, err error) {
	if n > b.burst {
		return false, 0, fmt.Errorf("%d tokens asked of a burst of %d", n, b.burst)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.clock()
	full := b.fullAt(k, now) + b.cost(n)
	if ahead := full - now; ahead > b.tolerance {
		return false, time.Duration(ahead - b.tolerance), nil
	}
	b.full[k] = full
	return true, 0, nil
}

// owe spends n tokens of k's bucket (at most the burst), into debt when
// it holds fewer: the bucket then stays empty until the debt is repaid.
func (b *buckets[K]) owe(k K, n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.clock()
	b.full[k] = b.fullAt(k, now) + b.cost(min(n, b.burst))
}

// empty reports whether k's bucket holds less than one token, and how
// long until it holds one.
func (b *buckets[K]) empty(k K) (bool, time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.clock()
	full, ok := b.full[k]
	if !ok {
		return false, 0
	}
	if ahead := full - now - (b.tolerance - b.cost(1)); ahead > 0 {
		return true, time.Duration(ahead)
	}
	return false, 0
}

// localLimiter is the in-process RateLimiter: a bucket per user.
type localLimiter struct{ b *buckets[engine.UserID] }

func newLocalLimiter(perSecond float64, burst int) localLimiter {
	return localLimiter{newBuckets[engine.UserID](perSecond, burst)}
}

func (l localLimiter) Take(_ context.Context, u engine.UserID, n int) (bool, time.Duration, error) {
	return l.b.take(u, n)
}

// mutationBudget spends a mutation's tokens: one per mutation field it
// executes (costLimit counted them), before any of them runs.
type mutationBudget struct {
	limiter RateLimiter        // nil: unlimited
	refused prometheus.Counter // nil: not counted
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
	var l RateLimiter = newLocalLimiter(cfg.RateLimit, burst)
	if cfg.RateLimiter != nil {
		l = fallbackLimiter{shared: cfg.RateLimiter, local: l}
	}
	return mutationBudget{limiter: l}, maxPerRequest
}

// fallbackLimiter spends from the shared budget, or from this process's
// when the shared one cannot be reached: a user whose budget sits on a
// Redis shard that is down keeps a limit (the same, per replica) instead
// of having every write refused.
type fallbackLimiter struct{ shared, local RateLimiter }

func (f fallbackLimiter) Take(ctx context.Context, u engine.UserID, n int) (bool, time.Duration, error) {
	ok, wait, err := f.shared.Take(ctx, u, n)
	if errors.Is(err, engine.ErrUnavailable) {
		return f.local.Take(ctx, u, n)
	}
	return ok, wait, err
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
	if b.refused != nil {
		b.refused.Inc()
	}
	secs := max(1, int(math.Ceil(wait.Seconds())))
	setRetryAfter(ctx, secs)
	msg := "too many mutations; slow down"
	if n > 1 {
		msg = fmt.Sprintf("too many mutations; slow down (this request's %d mutation fields were not applied)", n)
	}
	return &graphql.Response{Errors: gqlerror.List{{
		Message:    msg + fmt.Sprintf("; retry in %d s", secs),
		Extensions: map[string]any{"code": resolvers.CodeRateLimited, "retryAfter": secs},
	}}}
}

// costBudget spends each operation's price (as costLimit computed it)
// from its client's budget per second: the signed-in user's, or the
// remote address's for anonymous requests. The cost limit bounds one
// request; this bounds a client that sends many requests each under it
// (a stream of whole-schema introspections, say), so that the CPU one
// client takes stays a share. CPU is each replica's own, so the budget is
// per process, also in Redis mode.
type costBudget struct {
	perSecond float64
	users     *buckets[engine.UserID]
	addrs     *buckets[string]
	refused   prometheus.Counter // nil: not counted
}

// newCostBudget returns nil (no budget) for a rate of 0 or less. The
// burst is at least limit: an operation at the cost limit must be able to
// pass when the budget is full.
func newCostBudget(perSecond float64, burst, limit int) *costBudget {
	if perSecond <= 0 {
		return nil
	}
	burst = max(burst, limit, 1)
	return &costBudget{
		perSecond: perSecond,
		users:     newBuckets[engine.UserID](perSecond, burst),
		addrs:     newBuckets[string](perSecond, burst),
	}
}

func (b *costBudget) spend(ctx context.Context, price int) *gqlerror.Error {
	if b == nil || price <= 0 {
		return nil
	}
	var ok bool
	var wait time.Duration
	if p, _ := auth.From(ctx); p.User != 0 {
		ok, wait, _ = b.users.take(p.User, price)
	} else {
		ok, wait, _ = b.addrs.take(limitInfoFrom(ctx).addr, price)
	}
	if ok {
		return nil
	}
	return b.refusal(ctx, wait, price)
}

// charge spends n from the client's budget even when that leaves it in
// debt: a request refused for its size costs the limit. A client that
// floods such requests gets about rate/limit of them parsed a second; the
// rest meet refuseSpent, which costs no parse.
func (b *costBudget) charge(ctx context.Context, n int) {
	if b == nil {
		return
	}
	if p, _ := auth.From(ctx); p.User != 0 {
		b.users.owe(p.User, n)
	} else {
		b.addrs.owe(limitInfoFrom(ctx).addr, n)
	}
}

// refuseSpent answers a request of a client whose budget is empty with
// 429 RATE_LIMITED and Retry-After before its body is read or parsed,
// and reports whether it did.
func (b *costBudget) refuseSpent(ctx context.Context, w http.ResponseWriter, r *http.Request) bool {
	if b == nil {
		return false
	}
	var empty bool
	var wait time.Duration
	if p, _ := auth.From(ctx); p.User != 0 {
		empty, wait = b.users.empty(p.User)
	} else {
		empty, wait = b.addrs.empty(limitInfoFrom(ctx).addr)
	}
	if !empty {
		return false
	}
	if b.refused != nil {
		b.refused.Inc()
	}
	secs := max(1, int(math.Ceil(wait.Seconds())))
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	writeGraphQL(w, responseMedia(r.Header.Get("Accept")), http.StatusTooManyRequests, &graphql.Response{Errors: gqlerror.List{{
		Message:    fmt.Sprintf("this client's operations cost more than %.0f a second; slow down (retry in %d s)", b.perSecond, secs),
		Extensions: map[string]any{"code": resolvers.CodeRateLimited, "reason": "COST_RATE", "retryAfter": secs},
	}}})
	return true
}

func (b *costBudget) refusal(ctx context.Context, wait time.Duration, price int) *gqlerror.Error {
	if b.refused != nil {
		b.refused.Inc()
	}
	secs := max(1, int(math.Ceil(wait.Seconds())))
	setRetryAfter(ctx, secs)
	msg := fmt.Sprintf("this client's operations cost more than %.0f a second; slow down (retry in %d s)", b.perSecond, secs)
	return &gqlerror.Error{
		Message: msg,
		// Err marks the error as the limit's own, so the presenter keeps
		// its reason (it names gqlgen's codes as reasons otherwise).
		Err: resolvers.Errorf(resolvers.CodeRateLimited, "%s", msg),
		Extensions: map[string]any{
			"code": resolvers.CodeRateLimited, "reason": "COST_RATE", "retryAfter": secs, "cost": price,
		},
	}
}

// countRefusals counts both budgets' refusals in tally_rate_limited_total,
// by limit: "mutations" (-rate-limit) and "cost" (-cost-rate). Both series
// exist from the start, so that an alert's rate over them reads 0, not
// nothing, until the first refusal.
func countRefusals(reg prometheus.Registerer, mutations *mutationBudget, cost *costBudget) {
	refused := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tally_rate_limited_total",
		Help: "Operations refused with RATE_LIMITED by a client's budget: limit=\"mutations\" (-rate-limit, per user) or \"cost\" (-cost-rate, per user or remote address).",
	}, []string{"limit"})
	reg.MustRegister(refused)
	mutations.refused = refused.WithLabelValues("mutations")
	costRefused := refused.WithLabelValues("cost")
	if cost != nil {
		cost.refused = costRefused
	}
}

type limitInfoKey struct{}

// limitInfo is what an operation knows of the HTTP request that carried
// it (or that opened its WebSocket).
type limitInfo struct {
	// header is the response's, to set Retry-After on; nil on a
	// WebSocket, whose operations run concurrently and whose headers are
	// long sent.
	header http.Header
	// addr is the client's IP address: the key of anonymous budgets.
	addr string
}

// withLimitInfo records r's client address and, for a plain HTTP
// request, w's headers, for the limits to use.
func withLimitInfo(ctx context.Context, w http.ResponseWriter, r *http.Request) context.Context {
	info := limitInfo{addr: r.RemoteAddr}
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		info.addr = host
	}
	if r.Header.Get("Upgrade") == "" {
		info.header = w.Header()
	}
	return context.WithValue(ctx, limitInfoKey{}, info)
}

func limitInfoFrom(ctx context.Context) limitInfo {
	info, _ := ctx.Value(limitInfoKey{}).(limitInfo)
	return info
}

// presentError is resolvers.PresentError, plus the Retry-After header an
// UNAVAILABLE answer carries over HTTP (the resolvers know the code, the
// transport owns the header).
func presentError(ctx context.Context, err error) *gqlerror.Error {
	gerr := resolvers.PresentError(ctx, err)
	if code, _ := gerr.Extensions["code"].(string); code == resolvers.CodeUnavailable {
		setRetryAfter(ctx, resolvers.UnavailableRetryAfter)
	}
	return gerr
}

func setRetryAfter(ctx context.Context, secs int) {
	if h := limitInfoFrom(ctx).header; h != nil {
		h.Set("Retry-After", strconv.Itoa(secs))
	}
}
