// Package fastpath owns compiled execution of Tally's hot GraphQL
// operations: feed pages (posts, post), the viewer's badges, user counters
// and unreadChanged pushes. An operation whose validated selection touches
// only these plain data fields is compiled once into a plan that reads a
// page with one Store.Page call (plus one UserCounts and one Unread read
// when selected) and appends the JSON response directly: no FieldContext
// per field, no goroutine per list element, no per-field allocation.
//
// The fast path hooks in as a wrapper of gqlgen's graphql.ExecutableSchema
// rather than as an HTTP entry of its own, because gqlgen stays the
// executor of record: by the time Exec is called gqlgen has parsed and
// validated the document (through its query cache and APQ), coerced the
// variables, priced the operation against the complexity limit and run the
// operation interceptors (token checks, rate limits, metrics), and after
// Exec returns it runs the response interceptors (loaders, metrics, error
// presenter, extensions) around whatever the handler produces. A plan's
// response is a graphql.Response whose Data is the json.RawMessage the plan
// appended, so nothing encodes the data again; over HTTP the plan appends
// it to the transport's own output buffer (WithResponseBuffer), so it is
// not copied either. Every transport (POST, GET, WebSocket) reaches the
// plans the same way. For a query whose plan is already compiled (Planned),
// the HTTP transport also makes the operation context without gqlgen's
// CreateOperationContext, from what gqlgen parsed, validated and priced for
// the same document before (web/transport/plan_context.go). What plans
// skip is per-field work, so field interceptors (AroundFields,
// AroundRootFields) do not see plan-served fields; Tally installs none for
// queries, and a push calls the field middleware once, as the
// subscription's root field.
//
// A plan serves only responses without errors. When anything would make
// gqlgen report an error — a bad id, more than MaxIDsPerCall ids, an
// anonymous viewer asking for viewer, a store failure — the plan gives the
// operation back to gqlgen's own executor, which produces the error with
// its path, locations and code exactly as it always has; errors are rare
// and not the hot path. Everything outside the plain data fields
// (mutations, introspection, @defer, groups, messages, notifications)
// goes to gqlgen untouched.
package fastpath

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/99designs/gqlgen/graphql"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/vektah/gqlparser/v2/ast"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/web/auth"
	"github.com/tally-dev/tally/web/hub"
)

// Config is what the fast path reads from.
type Config struct {
	Store engine.Store
	// Hub tells when a viewer's badges may have changed: plans push
	// unreadChanged from it (see subscribe.go). Nil leaves every
	// subscription to gqlgen.
	Hub *hub.Hub
	// TracePushes makes each re-read of pushed badges a push span
	// (tracing.StartPush); off, the re-reads make none (a span from the
	// global provider costs even when tracing is off).
	TracePushes bool
	// CacheSize bounds the compiled operations kept; 0 means 1000 (as
	// gqlgen's query cache in transport.NewHandler).
	CacheSize int
	// Metrics registers the count of operations by executor; nil skips it.
	Metrics prometheus.Registerer
}

// Schema is a graphql.ExecutableSchema that executes plan-eligible
// operations with their plans and hands every other one to the schema it
// wraps.
type Schema struct {
	graphql.ExecutableSchema
	cfg   Config
	cache planCache
	feeds feeds

	byPlan, byGqlgen prometheus.Counter // nil without Config.Metrics
}

var _ graphql.ExecutableSchema = (*Schema)(nil)

// Wrap returns es with the fast path in front of its Exec.
func Wrap(es graphql.ExecutableSchema, cfg Config) *Schema {
	if cfg.CacheSize <= 0 {
		cfg.CacheSize = 1000
	}
	s := &Schema{ExecutableSchema: es, cfg: cfg, cache: planCache{max: cfg.CacheSize}}
	if cfg.Metrics != nil {
		ops := prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tally_graphql_executed_operations_total",
			Help: "Operations (queries, and subscriptions when they start) that reached execution, by executor: plan (a compiled plan of web/fastpath answered) or gqlgen (gqlgen's executor ran it).",
		}, []string{"executor"})
		cfg.Metrics.MustRegister(ops)
		s.byPlan, s.byGqlgen = ops.WithLabelValues("plan"), ops.WithLabelValues("gqlgen")
	}
	return s
}

// Counters of responses and subscriptions served by plans and handed to
// gqlgen, process-wide (tests use them to prove plans ran).
var served, fellBack atomic.Uint64

// Served reports how many operations plans answered and how many went to
// gqlgen's executor since the process started.
func Served() (plans, gqlgen uint64) { return served.Load(), fellBack.Load() }

// count records who executed one operation.
func (s *Schema) count(byPlan bool) {
	if byPlan {
		served.Add(1)
		if s.byPlan != nil {
			s.byPlan.Inc()
		}
		return
	}
	fellBack.Add(1)
	if s.byGqlgen != nil {
		s.byGqlgen.Inc()
	}
}

// Exec implements graphql.ExecutableSchema.
func (s *Schema) Exec(ctx context.Context) graphql.ResponseHandler {
	opCtx := graphql.GetOperationContext(ctx)
	if opCtx.Operation == nil {
		return s.ExecutableSchema.Exec(ctx)
	}
	switch opCtx.Operation.Operation {
	case ast.Query:
		if p := s.planFor(opCtx); p != nil {
			return s.query(ctx, opCtx, p)
		}
	case ast.Subscription:
		if s.cfg.Hub != nil {
			if p := s.planFor(opCtx); p != nil {
				if h := s.subscribe(ctx, opCtx, p); h != nil {
					return h
				}
			}
		}
	}
	s.count(false)
	return s.ExecutableSchema.Exec(ctx)
}

// query answers a query with p, or with gqlgen when p cannot serve it
// without an error. The plan runs inside the response handler, as gqlgen's
// executor does, so response interceptors wrap it.
func (s *Schema) query(ctx context.Context, opCtx *graphql.OperationContext, p *plan) graphql.ResponseHandler {
	var inner graphql.ResponseHandler
	done := false
	return func(rctx context.Context) *graphql.Response {
		if inner != nil {
			return inner(rctx)
		}
		if done {
			return nil
		}
		done = true
		viewer, err := auth.From(rctx)
		if err == nil {
			if data, ok := p.run(rctx, s.cfg.Store, opCtx.Variables, viewer.User); ok {
				s.count(true)
				return &graphql.Response{Data: data}
			}
		}
		s.count(false)
		inner = s.ExecutableSchema.Exec(ctx)
		return inner(rctx)
	}
}

// planCache holds each operation's compiled plans, keyed by the parsed
// operation (one document and operation name; gqlgen's query cache hands
// out the same *ast.OperationDefinition for the same document). It is
// bounded by dropping everything when full: a miss costs one compile.
type planCache struct {
	mu  sync.RWMutex
	max int
	ops map[*ast.OperationDefinition]*opPlans
}

func (c *planCache) get(op *ast.OperationDefinition, doc *ast.QueryDocument) *opPlans {
	c.mu.RLock()
	o := c.ops[op]
	c.mu.RUnlock()
	if o != nil {
		return o
	}
	o = newOpPlans(op, doc)
	c.mu.Lock()
	if c.ops == nil || len(c.ops) >= c.max {
		c.ops = make(map[*ast.OperationDefinition]*opPlans)
	}
	if prev := c.ops[op]; prev != nil {
		o = prev
	} else {
		c.ops[op] = o
	}
	c.mu.Unlock()
	return o
}

// peek returns op's compiled plans, or nil when none were made yet.
func (c *planCache) peek(op *ast.OperationDefinition) *opPlans {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.ops[op]
}

// Planned reports whether a plan already compiled answers the query op
// under vars (coerced as gqlgen coerces them), and which variant of op
// that is (its mask: the values of its @skip/@include conditions). It
// compiles nothing: an operation not yet executed once is not planned.
// The HTTP transport (package transport) uses it to skip the parts of
// gqlgen's pipeline that depend only on the document (see
// web/transport/plan_context.go); the plan itself still runs from Exec.
func (s *Schema) Planned(op *ast.OperationDefinition, vars map[string]any) (mask uint64, ok bool) {
	if op == nil || op.Operation != ast.Query {
		return 0, false
	}
	o := s.cache.peek(op)
	if o == nil || o.ineligible {
		return 0, false
	}
	if mask, ok = o.mask(vars); !ok {
		return 0, false
	}
	o.mu.RLock()
	p := o.variants[mask]
	o.mu.RUnlock()
	return mask, p != nil
}

// planFor returns the plan of the operation under its variables' @skip and
// @include values, or nil when gqlgen must run it.
func (s *Schema) planFor(opCtx *graphql.OperationContext) *plan {
	o := s.cache.get(opCtx.Operation, opCtx.Doc)
	if o.ineligible {
		return nil
	}
	mask, ok := o.mask(opCtx.Variables)
	if !ok {
		return nil
	}
	return o.variant(mask, opCtx)
}
