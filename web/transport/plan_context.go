package transport

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/handler/extension"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"github.com/tally-dev/tally/web/fastpath"
)

// planContexts makes the operation context of a query a compiled plan answers
// without gqlgen's CreateOperationContext, which re-derived on every
// request what depends only on the document: the query-cache lookup, the
// variables' validation by reflection and the cost walk (the walk alone
// re-coerced each of a page's 50 ids through the generated argument code
// to price posts(ids)). On a 50-post page that was a quarter of what the
// server spent.
//
// Why the result is what CreateOperationContext would have made:
//
//   - The document and operation are the ones gqlgen parsed and validated
//     for the same query text and operation name, learnt from an earlier
//     request that gqlgen served (validation depends on nothing else).
//   - The variables are coerced here only when they have the shapes the
//     plans' arguments take (ID, Boolean and lists of ID, no default
//     values) and values whose coercion by validator.VariableValues is the
//     identity (strings and json.Numbers for ID, booleans); the map holds
//     the declared variables only, as VariableValues' does. Anything else
//     — a missing non-null variable, a null, an Int, an input object —
//     goes to gqlgen, which reports its errors.
//   - Every extension's hooks run as gqlgen runs them, in the order they
//     were registered (handler.go registers each through use): parameter
//     mutators (persisted queries), then context mutators (introspection,
//     metrics). The one replaced is costLimit's walk: the price of a
//     plan-served query is a function of the document, its @skip/@include
//     values (the plan's mask) and the lengths of its list variables — the
//     plan fields' prices depend on their arguments only through the
//     length of posts(ids) (setComplexity, listArgumentLength) — so it is
//     learnt once per such key from a request gqlgen priced and charged to
//     the client's cost budget exactly as costLimit charges it. A price
//     over the limit is never learnt: such a request goes to gqlgen.
//     TestPlanContextsMatchGqlgen compares the two operation contexts field by
//     field over generated requests, including the price.
//   - What follows (DispatchOperation: the operation interceptors, the
//     token check, metrics, the response interceptors and the error
//     presenter) is gqlgen's, unchanged, and the plan runs from Exec as
//     before, falling back to gqlgen's executor when it cannot answer
//     without an error.
//
// Only queries whose variant is already compiled (fastpath.Schema.Planned)
// take this path; everything else is gqlgen's, start to end.
type planContexts struct {
	schema *fastpath.Schema
	exts   []graphql.HandlerExtension // as registered with gqlgen, in order
	cost   *costLimit                 // among exts; priced here from learnt prices
	base   atomic.Pointer[opBase]

	mu   sync.RWMutex
	docs map[docKey]*fastDoc
}

// maxFastDocs bounds the documents learnt (as gqlgen's query cache);
// maxFastQuery the size of one (hot queries are short, and a key keeps its
// text); maxFastPrices the prices learnt per document.
const (
	maxFastDocs   = 1000
	maxFastQuery  = 16 << 10
	maxFastPrices = 256
	maxListVars   = 4
)

// opBase is what gqlgen's executor puts in every operation context before
// any extension runs: its recover function and field middleware chains.
type opBase struct {
	recover graphql.RecoverFunc
	field   graphql.FieldMiddleware
	root    graphql.RootFieldMiddleware
}

type docKey struct{ query, operation string }

// fastDoc is one learnt document and operation.
type fastDoc struct {
	doc  *ast.QueryDocument
	op   *ast.OperationDefinition
	vars []fastVar

	mu     sync.RWMutex
	prices map[priceKey]int
}

// fastVar is one declared variable of a shape coerced here.
type fastVar struct {
	name        string
	id          bool // ID, else Boolean
	list        bool // [ID] (list of ID only)
	nonNull     bool
	elemNonNull bool
}

// priceKey is what a plan-served query's price depends on besides its
// document: the plan's variant and its list variables' lengths.
type priceKey struct {
	mask uint64
	lens [maxListVars]int32
}

func newPlanContexts(schema *fastpath.Schema) *planContexts {
	return &planContexts{schema: schema, docs: map[docKey]*fastDoc{}}
}

// fastContexts counts the operation contexts planContexts made, process-wide.
var fastContexts atomic.Uint64

// FastOperationContexts reports how many operation contexts plan-served
// queries got without gqlgen's CreateOperationContext since the process
// started (tests use it to prove that path ran).
func FastOperationContexts() uint64 { return fastContexts.Load() }

// observeOperation, set by tests, sees every operation context the HTTP
// transport goes on with, and whether planContexts made it.
var observeOperation func(opCtx *graphql.OperationContext, errs gqlerror.List, fast bool)

// use registers ext with gqlgen and records it for the replay.
func (f *planContexts) use(srv interface {
	Use(graphql.HandlerExtension)
}, ext graphql.HandlerExtension) {
	srv.Use(ext)
	if f == nil {
		return
	}
	f.exts = append(f.exts, ext)
	if c, ok := ext.(*costLimit); ok {
		f.cost = c
	}
}

// baseCapture is registered first: as a parameter mutator it sees the
// operation context as the executor made it, before any extension ran.
type baseCapture struct{ f *planContexts }

func (baseCapture) ExtensionName() string                   { return "TallyPlanContextBase" }
func (baseCapture) Validate(graphql.ExecutableSchema) error { return nil }

func (b baseCapture) MutateOperationParameters(ctx context.Context, _ *graphql.RawParams) *gqlerror.Error {
	if b.f.base.Load() == nil {
		opCtx := graphql.GetOperationContext(ctx)
		b.f.base.Store(&opBase{recover: opCtx.RecoverFunc, field: opCtx.ResolverMiddleware, root: opCtx.RootResolverMiddleware})
	}
	return nil
}

// operationContext makes params' operation context as gqlgen's
// CreateOperationContext would, when a plan answers it. ok false: the
// caller must call CreateOperationContext. errs: the request is refused
// (its cost budget is spent), to be answered as gqlgen answers errors of
// CreateOperationContext.
func (f *planContexts) operationContext(ctx context.Context, params *graphql.RawParams) (opCtx *graphql.OperationContext, errs gqlerror.List, ok bool) {
	base := f.base.Load()
	if base == nil {
		return nil, nil, false
	}
	// A query sent whole can be looked up before any extension runs; one
	// sent by its persisted hash only after.
	var fd *fastDoc
	if params.Query != "" {
		if fd = f.lookup(params.Query, params.OperationName); fd == nil {
			return nil, nil, false
		}
	}
	opCtx = &graphql.OperationContext{
		DisableIntrospection:   true,
		RecoverFunc:            base.recover,
		ResolverMiddleware:     base.field,
		RootResolverMiddleware: base.root,
		Stats: graphql.Stats{
			Read:           params.ReadTime,
			OperationStart: graphql.GetStartTime(ctx),
		},
	}
	octx := graphql.WithOperationContext(ctx, opCtx)
	// The mutators change a copy: on a miss gqlgen gets the parameters as
	// they came.
	p := *params
	for _, e := range f.exts {
		if m, isM := e.(graphql.OperationParameterMutator); isM {
			if err := m.MutateOperationParameters(octx, &p); err != nil {
				return nil, nil, false
			}
		}
	}
	if fd == nil || p.Query != params.Query || p.OperationName != params.OperationName {
		if fd = f.lookup(p.Query, p.OperationName); fd == nil {
			return nil, nil, false
		}
	}
	opCtx.RawQuery, opCtx.OperationName, opCtx.Extensions, opCtx.Headers = p.Query, p.OperationName, p.Extensions, p.Headers
	now := graphql.Now()
	opCtx.Stats.Parsing = graphql.TraceTiming{Start: now, End: now}
	opCtx.Stats.Validation.Start = now
	opCtx.Doc, opCtx.Operation = fd.doc, fd.op
	vars, key, coerced := fd.coerce(p.Variables)
	if !coerced {
		return nil, nil, false
	}
	opCtx.Variables = vars
	if key.mask, ok = f.schema.Planned(fd.op, vars); !ok {
		return nil, nil, false
	}
	price, priced := 0, f.cost == nil
	if !priced {
		if price, priced = fd.price(key); !priced {
			return nil, nil, false
		}
	}
	opCtx.Stats.Validation.End = graphql.Now()
	for _, e := range f.exts {
		m, isM := e.(graphql.OperationContextMutator)
		if !isM {
			continue
		}
		if e == graphql.HandlerExtension(f.cost) {
			// costLimit.MutateOperationContext for a query whose price is
			// known and within the limit: report it, spend it.
			if err := f.cost.spendPriced(octx, opCtx, price); err != nil {
				return opCtx, gqlerror.List{err}, true
			}
			continue
		}
		if err := m.MutateOperationContext(octx, opCtx); err != nil {
			return opCtx, gqlerror.List{err}, true
		}
	}
	fastContexts.Add(1)
	return opCtx, nil, true
}

func (f *planContexts) lookup(query, operation string) *fastDoc {
	f.mu.RLock()
	fd := f.docs[docKey{query, operation}]
	f.mu.RUnlock()
	return fd
}

// learn records what opCtx, which gqlgen made and a plan answered,
// teaches: its document and the price of its key.
func (f *planContexts) learn(opCtx *graphql.OperationContext) {
	op := opCtx.Operation
	if op == nil || op.Operation != ast.Query || len(opCtx.RawQuery) > maxFastQuery {
		return
	}
	mask, planned := f.schema.Planned(op, opCtx.Variables)
	if !planned {
		return
	}
	fd := f.lookup(opCtx.RawQuery, opCtx.OperationName)
	if fd == nil || fd.op != op {
		if fd = newFastDoc(opCtx.Doc, op); fd == nil {
			return
		}
	} else if f.cost == nil {
		return // known, and nothing to price
	}
	_, key, ok := fd.coerce(opCtx.Variables)
	if !ok {
		return
	}
	key.mask = mask
	if f.cost != nil {
		stats, _ := opCtx.Stats.GetExtension(f.cost.ExtensionName()).(*extension.ComplexityStats)
		if stats == nil || stats.Complexity > f.cost.limit {
			return
		}
		fd.learnPrice(key, stats.Complexity)
	}
	// The key's own copies: a request's strings may be slices of its
	// whole body.
	k := docKey{strings.Clone(opCtx.RawQuery), strings.Clone(opCtx.OperationName)}
	f.mu.Lock()
	if prev := f.docs[k]; prev == nil || prev.op != op {
		if len(f.docs) >= maxFastDocs {
			f.docs = map[docKey]*fastDoc{} // a miss costs one request through gqlgen
		}
		f.docs[k] = fd
	}
	f.mu.Unlock()
}

// newFastDoc returns op's entry, or nil when a variable has a shape not
// coerced here.
func newFastDoc(doc *ast.QueryDocument, op *ast.OperationDefinition) *fastDoc {
	fd := &fastDoc{doc: doc, op: op, prices: map[priceKey]int{}}
	lists := 0
	for _, v := range op.VariableDefinitions {
		if v.DefaultValue != nil {
			return nil
		}
		t := v.Type
		fv := fastVar{name: v.Variable, nonNull: t.NonNull}
		if t.Elem != nil {
			if t.Elem.Elem != nil || t.Elem.NamedType != "ID" {
				return nil
			}
			fv.list, fv.id, fv.elemNonNull = true, true, t.Elem.NonNull
			if lists++; lists > maxListVars {
				return nil
			}
		} else {
			switch t.NamedType {
			case "ID":
				fv.id = true
			case "Boolean":
			default:
				return nil
			}
		}
		fd.vars = append(fd.vars, fv)
	}
	return fd
}

// coerce returns the variables as validator.VariableValues would coerce
// raw, and the lengths of the list variables; ok false when raw holds
// anything whose coercion is not the identity, or an error.
func (fd *fastDoc) coerce(raw map[string]any) (vars map[string]any, key priceKey, ok bool) {
	vars = make(map[string]any, len(fd.vars))
	lists := 0
	for _, v := range fd.vars {
		val, has := raw[v.name]
		switch {
		case !has:
			if v.nonNull {
				return nil, key, false
			}
			continue // absent stays absent
		case val == nil:
			if v.nonNull {
				return nil, key, false
			}
		case v.list:
			l, isList := val.([]any)
			if !isList {
				return nil, key, false // a single value to be wrapped: gqlgen's
			}
			for _, e := range l {
				if !isIDValue(e) {
					return nil, key, false
				}
			}
			key.lens[lists] = int32(len(l))
			lists++
		case v.id:
			if !isIDValue(val) {
				return nil, key, false
			}
		default:
			if _, isBool := val.(bool); !isBool {
				return nil, key, false
			}
		}
		vars[v.name] = val
	}
	return vars, key, true
}

// isIDValue: what VariableValues accepts for ID and keeps as it is.
func isIDValue(v any) bool {
	switch v.(type) {
	case string, json.Number:
		return true
	}
	return false
}

func (fd *fastDoc) price(k priceKey) (int, bool) {
	fd.mu.RLock()
	p, ok := fd.prices[k]
	fd.mu.RUnlock()
	return p, ok
}

func (fd *fastDoc) learnPrice(k priceKey, price int) {
	fd.mu.Lock()
	if len(fd.prices) >= maxFastPrices {
		clear(fd.prices)
	}
	fd.prices[k] = price
	fd.mu.Unlock()
}
