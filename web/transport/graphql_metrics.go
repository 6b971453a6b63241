package transport

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"github.com/tally-dev/tally/resolvers"
)

// metrics counts and times GraphQL operations by type (query, mutation,
// subscription; "" for a request that never became an operation) and
// operation name. Names are the client's, so their cardinality is bounded
// here: an anonymous operation, a name longer than 64 bytes, and any name
// beyond the first maxOperationNames distinct ones the process has seen
// are all labelled "". Subscription events have a histogram of their own:
// a subscription's response handler waits for its next event, so timing
// it with the requests would measure idle time.
type metrics struct {
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	events   *prometheus.CounterVec
	eventDur *prometheus.HistogramVec
	subsOpen *prometheus.GaugeVec
	names    nameLimiter
}

// maxOperationNames bounds the distinct operation names used as labels.
const maxOperationNames = 100

var latencyBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tally_graphql_responses_total",
			Help: "GraphQL responses to queries and mutations (and requests that failed before becoming one, type \"\"), by operation type, name and outcome (ok; internal: an INTERNAL error, a bug; unavailable: the store could not be reached, UNAVAILABLE; error: any other error, the client's).",
		}, []string{"type", "name", "outcome"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "tally_graphql_response_seconds",
			Help:    "Time to produce a GraphQL response to a query or mutation, by operation type and name.",
			Buckets: latencyBuckets,
		}, []string{"type", "name"}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tally_graphql_subscription_events_total",
			Help: "Events sent on GraphQL subscriptions, by operation name and outcome (ok, internal, unavailable, error: as tally_graphql_responses_total).",
		}, []string{"name", "outcome"}),
		eventDur: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "tally_graphql_subscription_event_seconds",
			Help:    "Time to resolve and encode one subscription event once it arrived, by operation name.",
			Buckets: latencyBuckets,
		}, []string{"name"}),
		subsOpen: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tally_graphql_subscriptions_open",
			Help: "Open GraphQL subscriptions, by operation name.",
		}, []string{"name"}),
		names: nameLimiter{seen: map[string]bool{}},
	}
	reg.MustRegister(m.requests, m.latency, m.events, m.eventDur, m.subsOpen)
	return m
}

var _ interface {
	graphql.HandlerExtension
	graphql.OperationContextMutator
	graphql.OperationInterceptor
	graphql.ResponseInterceptor
} = (*metrics)(nil)

func (m *metrics) ExtensionName() string                   { return "TallyMetrics" }
func (m *metrics) Validate(graphql.ExecutableSchema) error { return nil }

// MutateOperationContext times subscription events from the first field
// resolved after the event arrived: only subscriptions pay for the extra
// middleware, queries keep gqlgen's chain as it is.
func (m *metrics) MutateOperationContext(ctx context.Context, opCtx *graphql.OperationContext) *gqlerror.Error {
	if opCtx.Operation == nil || opCtx.Operation.Operation != ast.Subscription {
		return nil
	}
	inner := opCtx.ResolverMiddleware
	opCtx.ResolverMiddleware = func(ctx context.Context, next graphql.Resolver) (any, error) {
		// Field resolvers of one event run concurrently: the first one sets it.
		if t, ok := ctx.Value(eventStartKey{}).(*atomic.Int64); ok && t.Load() == 0 {
			t.CompareAndSwap(0, time.Now().UnixNano())
		}
		return inner(ctx, next)
	}
	return nil
}

type eventStartKey struct{}

func (m *metrics) InterceptOperation(ctx context.Context, next graphql.OperationHandler) graphql.ResponseHandler {
	opCtx := graphql.GetOperationContext(ctx)
	noteOperation(ctx, opCtx)
	if opCtx.Operation == nil || opCtx.Operation.Operation != ast.Subscription {
		return next(ctx)
	}
	// A subscription ends when its handler returns nil, or when its
	// context ends (a transport may stop reading once the client is gone).
	gauge := m.subsOpen.WithLabelValues(m.names.label(opCtx.Operation.Name))
	gauge.Inc()
	var once sync.Once
	stop := whenOperationEnds(ctx, func() { once.Do(gauge.Dec) })
	handler := next(ctx)
	return func(ctx context.Context) *graphql.Response {
		resp := handler(ctx)
		if resp == nil {
			stop()
			once.Do(gauge.Dec)
		}
		return resp
	}
}

func (m *metrics) InterceptResponse(ctx context.Context, next graphql.ResponseHandler) *graphql.Response {
	typ, name := "", ""
	if graphql.HasOperationContext(ctx) {
		if op := graphql.GetOperationContext(ctx).Operation; op != nil {
			typ, name = string(op.Operation), m.names.label(op.Name)
		}
	}
	if typ == string(ast.Subscription) {
		var start atomic.Int64 // UnixNano of the event's first field, 0 until then
		resp := next(context.WithValue(ctx, eventStartKey{}, &start))
		if resp == nil {
			return nil // the subscription ended
		}
		m.events.WithLabelValues(name, outcome(resp)).Inc()
		if t := start.Load(); t != 0 {
			m.eventDur.WithLabelValues(name).Observe(time.Since(time.Unix(0, t)).Seconds())
		}
		return resp
	}
	start := time.Now()
	resp := next(ctx)
	if resp == nil {
		return nil
	}
	m.requests.WithLabelValues(typ, name, outcome(resp)).Inc()
	m.latency.WithLabelValues(typ, name).Observe(time.Since(start).Seconds())
	return resp
}

// outcome labels a response: "ok"; "internal" when an error is INTERNAL
// (a bug: the server's failure); "unavailable" when the store could not
// be reached (UNAVAILABLE: Redis down or failing over, the log failed);
// otherwise "error" (the client's mistake or a refusal: BAD_USER_INPUT,
// NOT_FOUND, RATE_LIMITED, ...). Alerts watch the first two apart.
func outcome(resp *graphql.Response) string {
	if len(resp.Errors) == 0 {
		return "ok"
	}
	unavailable := false
	for _, e := range resp.Errors {
		switch code, _ := e.Extensions["code"].(string); code {
		case resolvers.CodeInternal:
			return "internal"
		case resolvers.CodeUnavailable:
			unavailable = true
		}
	}
	if unavailable {
		return "unavailable"
	}
	return "error"
}

// nameLimiter admits the first maxOperationNames distinct operation names
// as label values; every other name is "".
type nameLimiter struct {
	mu   sync.RWMutex
	seen map[string]bool
}

func (n *nameLimiter) label(name string) string {
	if name == "" || len(name) > 64 {
		return ""
	}
	n.mu.RLock()
	ok := n.seen[name]
	full := len(n.seen) >= maxOperationNames
	n.mu.RUnlock()
	if ok {
		return name
	}
	if full {
		return ""
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.seen) >= maxOperationNames {
		return ""
	}
	n.seen[name] = true
	return name
}
