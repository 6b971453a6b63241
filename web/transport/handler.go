package transport

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/handler"
	"github.com/99designs/gqlgen/graphql/handler/extension"
	"github.com/99designs/gqlgen/graphql/handler/lru"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"
	"go.opentelemetry.io/otel/trace"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/graph"
	"github.com/tally-dev/tally/loaders"
	"github.com/tally-dev/tally/resolvers"
	"github.com/tally-dev/tally/web/auth"
	"github.com/tally-dev/tally/web/fastpath"
	"github.com/tally-dev/tally/web/hub"
	"github.com/tally-dev/tally/web/tracing"
)

// Config is what the GraphQL endpoint needs.
type Config struct {
	Store engine.Store
	Hub   *hub.Hub
	Keys  *auth.Keys
	// ContentWrites says who may create and delete posts, reposts and
	// comments (-content-writes): every signed-in user, or only trusted
	// tokens (service, admin).
	ContentWrites resolvers.ContentWrites
	// Metrics registers request metrics; nil skips them.
	Metrics prometheus.Registerer
	// ComplexityLimit bounds a query's cost (each field 1, lists multiplied
	// by their size argument where the schema has one). 0 means 5000.
	ComplexityLimit int
	// MaxBodyBytes bounds a request body; 0 means 1 MiB.
	MaxBodyBytes int64
	// OriginPatterns are the extra host patterns allowed to open WebSockets
	// from a browser (same-origin is always allowed).
	OriginPatterns []string
	// CORSOrigins are the browser origins (e.g. https://app.example.com,
	// or "*") allowed to call the endpoint from another origin; none by
	// default. Tokens travel in the Authorization header, never in
	// cookies, so allowing an origin grants it nothing by itself.
	CORSOrigins []string
	// RateLimit is mutations per second per user (0 = unlimited), with
	// bursts of RateBurst: each mutation field of a request spends one
	// token, and a request that would overdraw is refused whole (see
	// ratelimit.go). RateLimiter holds the budgets; nil keeps them in this
	// process (SharedRateLimiter shares them across replicas on Redis).
	RateLimit   float64
	RateBurst   int
	RateLimiter RateLimiter
	// MaxMutationsPerRequest caps the mutation fields of one request
	// (BAD_USER_INPUT beyond); 0 means DefaultMaxMutationsPerRequest,
	// negative no cap. Never above RateBurst when rate limiting is on.
	MaxMutationsPerRequest int
	// DisableIntrospection refuses __schema and __type (production).
	DisableIntrospection bool
	// CostRate is the operations' price (see cost.go) each client may
	// spend per second, with bursts of CostBurst (at least
	// ComplexityLimit): per signed-in user, else per remote address.
	// 0 = no budget.
	CostRate  float64
	CostBurst int
	// WebSocket bounds sockets and their operations (see WSConfig).
	WebSocket WSConfig
	// SocketCap counts each user's open WebSockets against
	// WebSocket.MaxPerUser; nil counts them in this process
	// (SharedSocketCap counts them across replicas on Redis).
	SocketCap SocketCap
	// APQCache holds automatic persisted queries (by SHA-256); nil keeps
	// 100 in this process. Replicas share one through NewRedisAPQCache.
	APQCache graphql.Cache[string]
	// DisableFastPath runs every operation through gqlgen's executor (the
	// differential tests compare both); see web/fastpath.
	DisableFastPath bool
	// StoreTimeout is one deadline for all the store calls of a query or
	// mutation, the rate limiter's included: what has not answered by
	// then fails UNAVAILABLE, so a stalled store holds no request longer.
	// 0: none (each store call has its own bounds).
	StoreTimeout time.Duration
	// Tracer, when set, traces requests, operations and engine calls (see
	// tracing.go); nil installs no tracing at all.
	Tracer trace.TracerProvider
}

// NewHandler returns the /query endpoint: GraphQL over POST and GET, and
// subscriptions over WebSocket (graphql-transport-ws).
func NewHandler(cfg Config) http.Handler {
	if cfg.ComplexityLimit == 0 {
		cfg.ComplexityLimit = 5000
	}
	if cfg.MaxBodyBytes == 0 {
		cfg.MaxBodyBytes = 1 << 20
	}
	var tracer trace.Tracer
	if cfg.Tracer != nil {
		tracer = cfg.Tracer.Tracer(tracing.Name)
		cfg.Store = tracing.WrapStore(cfg.Store, cfg.Tracer)
	}
	gc := resolvers.GraphConfig(cfg.Store, cfg.Hub, resolvers.Policy{ContentWrites: cfg.ContentWrites})
	kinds := 1
	if cfg.Store != nil {
		kinds = len(cfg.Store.ReactionKinds())
	}
	setComplexity(&gc, kinds)

	// Plain-data queries and unreadChanged pushes run as compiled plans
	// inside gqlgen's pipeline (see web/fastpath).
	var es graphql.ExecutableSchema = graph.NewExecutableSchema(gc)
	var fast *planContexts // nil: every operation context is gqlgen's
	if !cfg.DisableFastPath {
		fs := fastpath.Wrap(es, fastpath.Config{Store: cfg.Store, Hub: cfg.Hub, TracePushes: cfg.Tracer != nil,
			Metrics: cfg.Metrics})
		es, fast = fs, newPlanContexts(fs)
	}
	srv := handler.New(es)
	var m *metrics // (the WebSocket transport counts the pushes it sends without gqlgen)
	if cfg.Metrics != nil {
		m = newMetrics(cfg.Metrics)
	}
	srv.AddTransport(newWSTransport(cfg, m))
	// GraphQL over HTTP by the spec (see http.go); refuseTransport takes
	// whatever no transport above it supports, so it stays last.
	srv.AddTransport(httpTransport{maxBody: cfg.MaxBodyBytes, fast: fast})
	srv.AddTransport(refuseTransport{})
	srv.SetQueryCache(lru.New[*ast.QueryDocument](1000))
	srv.SetParserTokenLimit(15000)
	srv.SetErrorPresenter(presentError)
	srv.SetRecoverFunc(resolvers.RecoverPanic)
	// Extensions go through fast.use: plan-served queries replay their
	// parameter and context mutators without gqlgen's
	// CreateOperationContext (see plan_context.go), so one registered with
	// srv.Use directly would be skipped there.
	if fast != nil {
		srv.Use(baseCapture{fast})
	}
	if tracer != nil {
		// First of the interceptors, so that operations refused by the
		// ones after it are named too.
		srv.Use(operationSpans{tracer})
	}
	if !cfg.DisableIntrospection {
		fast.use(srv, extension.Introspection{})
	}
	apq := cfg.APQCache
	if apq == nil {
		apq = lru.New[string](100)
	}
	fast.use(srv, extension.AutomaticPersistedQuery{Cache: apq})
	budget, maxMutations := newMutationBudget(cfg)
	costs := newCostBudget(cfg.CostRate, cfg.CostBurst, cfg.ComplexityLimit)
	fast.use(srv, &costLimit{limit: cfg.ComplexityLimit, maxMutations: maxMutations, introspection: !cfg.DisableIntrospection, budget: costs})
	if m != nil {
		fast.use(srv, m)
		countRefusals(cfg.Metrics, &budget, costs)
	}

	if cfg.StoreTimeout > 0 {
		srv.AroundOperations(func(ctx context.Context, next graphql.OperationHandler) graphql.ResponseHandler {
			if op := graphql.GetOperationContext(ctx).Operation; op != nil && op.Operation == ast.Subscription {
				return next(ctx) // lives as long as its socket
			}
			ctx, cancel := context.WithTimeout(ctx, cfg.StoreTimeout)
			responses := next(ctx)
			return func(ctx context.Context) *graphql.Response {
				defer cancel()
				return responses(ctx)
			}
		})
	}
	// A presented but bad token fails the whole operation, even one that
	// would be allowed anonymously: the client should learn its token is
	// wrong rather than silently see a signed-out view.
	srv.AroundOperations(func(ctx context.Context, next graphql.OperationHandler) graphql.ResponseHandler {
		p, err := auth.From(ctx)
		if err != nil {
			return graphql.OneShot(errorResponse(resolvers.CodeUnauthenticated, err.Error()))
		}
		op := graphql.GetOperationContext(ctx).Operation
		if op != nil && op.Operation == ast.Mutation && p.User != 0 {
			if refused := budget.spend(ctx, p.User); refused != nil {
				return graphql.OneShot(refused)
			}
		}
		return next(ctx)
	})
	// Loaders live for one response: one query or mutation, or one event of
	// a subscription (a WebSocket's context outlives any single read).
	srv.AroundResponses(func(ctx context.Context, next graphql.ResponseHandler) *graphql.Response {
		return next(loaders.With(ctx, loaders.New(cfg.Store)))
	})

	fromHeader := cfg.Keys.FromHeader
	if fast != nil {
		fromHeader = newTokenCache(cfg.Keys).fromHeader // see http_tokens.go
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if cors(w, r, cfg.CORSOrigins) {
			return // a preflight, answered
		}
		if tracer != nil && r.Header.Get("Upgrade") == "" {
			ctx, span := traceRequest(tracer, r)
			defer span.End()
			r = r.WithContext(ctx)
		}
		p, _, err := fromHeader(r.Header.Get("Authorization"))
		ctx := auth.With(r.Context(), p, err)
		ctx = withLimitInfo(ctx, w, r)
		noteUser(ctx, p.User)
		if costs.refuseSpent(ctx, w, r) {
			return // before the body is read: the client's budget is spent
		}
		if r.ContentLength > cfg.MaxBodyBytes {
			writeRequestError(w, r, http.StatusRequestEntityTooLarge, resolvers.CodeBadUserInput,
				fmt.Sprintf("request body of %d bytes is over the limit of %d", r.ContentLength, cfg.MaxBodyBytes))
			return
		}
		if r.Body != nil {
			r.Body = http.MaxBytesReader(w, r.Body, cfg.MaxBodyBytes)
		}
		srv.ServeHTTP(w, r.WithContext(ctx))
	})
}

func errorResponse(code, msg string) *graphql.Response {
	return &graphql.Response{Errors: gqlerror.List{{
		Message:    msg,
		Extensions: map[string]any{"code": code},
	}}}
}
