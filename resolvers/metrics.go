package resolvers

import (
	"context"
	"sync"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/vektah/gqlparser/v2/ast"
	"golang.org/x/time/rate"

	"github.com/tally-dev/tally/engine"
)

// metrics counts and times GraphQL responses per operation. The label is
// the operation type and its first root field (e.g. "query posts"), which
// the schema bounds, rather than the client-chosen operation name, which
// would let any client mint unbounded label values.
type metrics struct {
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tally_graphql_responses_total",
			Help: "GraphQL responses by operation and outcome (ok, error).",
		}, []string{"operation", "outcome"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "tally_graphql_response_seconds",
			Help:    "Time to produce a GraphQL response, by operation.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}, []string{"operation"}),
	}
	reg.MustRegister(m.requests, m.latency)
	return m
}

var _ interface {
	graphql.HandlerExtension
	graphql.ResponseInterceptor
} = (*metrics)(nil)

func (m *metrics) ExtensionName() string                   { return "TallyMetrics" }
func (m *metrics) Validate(graphql.ExecutableSchema) error { return nil }
func (m *metrics) InterceptResponse(ctx context.Context, next graphql.ResponseHandler) *graphql.Response {
	start := time.Now()
	resp := next(ctx)
	if resp == nil {
		return nil // a subscription ended
	}
	op := operationLabel(ctx)
	outcome := "ok"
	if len(resp.Errors) > 0 {
		outcome = "error"
	}
	m.requests.WithLabelValues(op, outcome).Inc()
	m.latency.WithLabelValues(op).Observe(time.Since(start).Seconds())
	return resp
}

func operationLabel(ctx context.Context) string {
	if !graphql.HasOperationContext(ctx) {
		return "invalid"
	}
	op := graphql.GetOperationContext(ctx).Operation
	if op == nil {
		return "invalid"
	}
	for _, sel := range op.SelectionSet {
		if f, ok := sel.(*ast.Field); ok {
			return string(op.Operation) + " " + f.Name
		}
	}
	return string(op.Operation)
}

// rateLimiter is a token bucket per user for mutations. Buckets idle for
// longer than it takes to refill are dropped by a sweep, so memory follows
// the number of recently active users.
type rateLimiter struct {
	limit rate.Limit
	burst int
	mu    sync.Mutex
	users map[engine.UserID]*rate.Limiter
	swept time.Time
}

func newRateLimiter(perSecond float64, burst int) *rateLimiter {
	if burst <= 0 {
		burst = max(1, int(perSecond*2))
	}
	return &rateLimiter{limit: rate.Limit(perSecond), burst: burst, users: map[engine.UserID]*rate.Limiter{}}
}

func (l *rateLimiter) allow(u engine.UserID) bool {
	if l.limit <= 0 {
		return true
	}
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
	return lim.AllowN(now, 1)
}
