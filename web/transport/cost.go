package transport

import (
	"context"
	"fmt"
	"hash/maphash"
	"strconv"
	"strings"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/handler/extension"
	"github.com/99designs/gqlgen/graphql/handler/lru"
	"github.com/99designs/gqlgen/graphql/introspection"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/graph"
	"github.com/tally-dev/tally/resolvers"
)

// costLimit prices an operation by what it will do and refuses it, before
// anything runs, when the price is over the limit or when it holds more
// mutation fields than one request may carry. It replaces gqlgen's
// complexity limit, whose walker prices what executes on the schema's own
// types but skips introspection (__schema costs 0 there, so a request of
// aliased __schema selections passed as cheap and answered megabytes) and
// does not count list arguments.
//
// The price of an operation, after @skip/@include with its variables:
//   - every field costs 1 plus the price of its selection;
//   - a list field multiplies its selection by the most it can return (the
//     schema's complexity functions of setComplexity: ids given, page size,
//     the deployment's reaction kinds);
//   - every element of every list argument costs 1 more (posts(ids),
//     recordViews(postIds), markMessagesRead(messageIds), createGroup's
//     memberIds, addGroupMembers' userIds, mentions), across aliases;
//   - eraseUser costs EraseUserPrice: its work is what the user did;
//   - introspection is priced by what it returns: the walk follows the
//     schema itself (each type, field, argument, enum value listed costs
//     its selection), so a whole-schema dump costs what it sends.
//
// The walk stops as soon as the running price passes the limit, so
// pricing a hostile document costs at most about limit steps.
type costLimit struct {
	limit        int
	maxMutations int
	// introspection false refuses __schema and __type (not __typename).
	introspection bool
	// budget, when set, spends each operation's price from its client's
	// budget per second.
	budget *costBudget

	es     graphql.ExecutableSchema
	schema *introspection.Schema
	prices *lru.LRU[pricedOp]
	seed   maphash.Seed
}

var _ interface {
	graphql.HandlerExtension
	graphql.OperationContextMutator
} = &costLimit{}

// mutationFieldsKey is the operation-stats key under which costLimit
// leaves how many mutation fields the operation executes (an int) for
// the rate limit to spend.
const mutationFieldsKey = "MutationFields"

// ExtensionName keeps gqlgen's name: extension.GetComplexityStats keeps
// reporting what this extension computed.
func (c *costLimit) ExtensionName() string { return "ComplexityLimit" }

func (c *costLimit) Validate(es graphql.ExecutableSchema) error {
	if c.limit <= 0 {
		return fmt.Errorf("cost limit must be positive, got %d", c.limit)
	}
	c.es = es
	c.schema = introspection.WrapSchema(es.Schema())
	c.prices = lru.New[pricedOp](1000)
	c.seed = maphash.MakeSeed()
	return nil
}

func (c *costLimit) MutateOperationContext(ctx context.Context, opCtx *graphql.OperationContext) *gqlerror.Error {
	op := opCtx.Operation
	if op == nil {
		return nil // gqlgen reports the missing operation itself
	}
	if op.Operation == ast.Mutation {
		n, more := countMutationFields(op.SelectionSet, opCtx.Variables, c.maxMutations)
		opCtx.Stats.SetExtension(mutationFieldsKey, n)
		if more {
			c.budget.charge(ctx, c.limit)
			return &gqlerror.Error{
				Message: fmt.Sprintf("more than %d mutation fields in one request (aliases count one each); send the rest in further requests", c.maxMutations),
				Extensions: map[string]any{
					"code": resolvers.CodeBadUserInput, "reason": "TOO_MANY_MUTATIONS", "limit": c.maxMutations,
				},
			}
		}
	}
	price, over, refused := c.price(ctx, opCtx)
	if refused != nil {
		return refused
	}
	if over {
		opCtx.Stats.SetExtension(c.ExtensionName(), &extension.ComplexityStats{Complexity: price, ComplexityLimit: c.limit})
		c.budget.charge(ctx, c.limit)
		return &gqlerror.Error{
			Message: fmt.Sprintf("operation costs more than the limit of %d (each field 1, lists by the most they can return, list arguments by their length, introspection by what it returns)", c.limit),
			Extensions: map[string]any{
				"code": resolvers.CodeBadUserInput, "reason": "COMPLEXITY_LIMIT_EXCEEDED", "limit": c.limit,
			},
		}
	}
	return c.spendPriced(ctx, opCtx, price)
}

// spendPriced reports an operation's price within the limit and spends it
// from the client's budget. The fast path (plan_context.go) calls it for a
// query whose price it learnt, in place of MutateOperationContext.
func (c *costLimit) spendPriced(ctx context.Context, opCtx *graphql.OperationContext, price int) *gqlerror.Error {
	opCtx.Stats.SetExtension(c.ExtensionName(), &extension.ComplexityStats{Complexity: price, ComplexityLimit: c.limit})
	return c.budget.spend(ctx, price)
}

// pricedOp is an operation's price, kept for the next request of the
// same document.
type pricedOp struct {
	price int
	over  bool
}

// price walks the operation, or takes the price of the same document from
// the cache: a document without variables prices the same every time,
// and a flood repeats one document (walking 1,400 aliased __schema up to
// the limit took a quarter of the CPU of a flood of them).
func (c *costLimit) price(ctx context.Context, opCtx *graphql.OperationContext) (price int, over bool, refused *gqlerror.Error) {
	op := opCtx.Operation
	key := ""
	if len(op.VariableDefinitions) == 0 {
		key = strconv.FormatUint(maphash.String(c.seed, opCtx.RawQuery), 36) + " " + opCtx.OperationName
		if p, ok := c.prices.Get(ctx, key); ok {
			return p.price, p.over, nil
		}
	}
	w := costWalker{ctx: ctx, c: c, vars: opCtx.Variables, limit: c.limit}
	price = w.selectionSet(op.SelectionSet)
	if w.refused != nil {
		return price, w.over, w.refused
	}
	if key != "" {
		c.prices.Add(ctx, key, pricedOp{price, w.over})
	}
	return price, w.over, nil
}

// countMutationFields is how many root fields of a mutation gqlgen will
// execute: aliases count one each, fragments are followed, @skip/@include
// are applied with the request's variables, and two selections under one
// response name (which validation only allows when they are the same
// call) count once, as they run once. It stops, reporting more, as soon
// as the count passes max (when max > 0): a hostile request of thousands
// of aliases costs max steps to refuse. (gqlgen's CollectFields, which
// finds the same fields, merges names by a linear search: 1,000 aliases
// cost half a million comparisons, the most of the CPU a flood of them
// took.)
func countMutationFields(sel ast.SelectionSet, vars map[string]any, max int) (n int, more bool) {
	names := map[string]bool{}
	visited := map[string]bool{}
	var walk func(ast.SelectionSet) bool
	walk = func(sel ast.SelectionSet) bool {
		for _, s := range sel {
			switch s := s.(type) {
			case *ast.Field:
				if !included(s.Directives, vars) || strings.HasPrefix(s.Name, "__") {
					continue
				}
				key := s.Alias
				if key == "" {
					key = s.Name
				}
				if !names[key] {
					names[key] = true
					if max > 0 && len(names) > max {
						return false
					}
				}
			case *ast.InlineFragment:
				// On a mutation's root every valid type condition is
				// Mutation itself.
				if included(s.Directives, vars) && !walk(s.SelectionSet) {
					return false
				}
			case *ast.FragmentSpread:
				if visited[s.Name] || s.Definition == nil || !included(s.Directives, vars) {
					continue
				}
				visited[s.Name] = true
				if !walk(s.Definition.SelectionSet) {
					return false
				}
			}
		}
		return true
	}
	complete := walk(sel)
	return len(names), !complete
}

// costWalker prices one operation; see costLimit.
type costWalker struct {
	ctx   context.Context
	c     *costLimit
	vars  map[string]any
	limit int
	// over: a running price passed limit (the walk stopped there).
	over bool
	// refused: introspection asked of a server with it turned off.
	refused *gqlerror.Error
}

// stop reports whether the walk is done: over the limit or refused.
func (w *costWalker) stop(price int) bool {
	if price > w.limit {
		w.over = true
	}
	return w.over || w.refused != nil
}

// fieldsOf calls visit for every field sel selects, through fragments,
// leaving out what @skip/@include exclude. visit returns false to stop.
func (w *costWalker) fieldsOf(sel ast.SelectionSet, visit func(*ast.Field) bool) bool {
	for _, s := range sel {
		switch s := s.(type) {
		case *ast.Field:
			if included(s.Directives, w.vars) && !visit(s) {
				return false
			}
		case *ast.InlineFragment:
			if included(s.Directives, w.vars) && !w.fieldsOf(s.SelectionSet, visit) {
				return false
			}
		case *ast.FragmentSpread:
			if s.Definition != nil && included(s.Directives, w.vars) && !w.fieldsOf(s.Definition.SelectionSet, visit) {
				return false
			}
		}
	}
	return true
}

// selectionSet prices a selection on one of the schema's own types.
func (w *costWalker) selectionSet(sel ast.SelectionSet) int {
	price := 0
	w.fieldsOf(sel, func(f *ast.Field) bool {
		price = safeAdd(price, w.field(f))
		return !w.stop(price)
	})
	return price
}

func (w *costWalker) field(f *ast.Field) int {
	switch f.Name {
	case "__typename":
		return 1
	case "__schema":
		if !w.introspectionAllowed(f) {
			return 0
		}
		return safeAdd(1, w.introSchema(f.SelectionSet))
	case "__type":
		if !w.introspectionAllowed(f) {
			return 0
		}
		name, _ := f.ArgumentMap(w.vars)["name"].(string)
		def := w.c.es.Schema().Types[name]
		if def == nil {
			return 1 // answers null
		}
		return safeAdd(1, w.introType(f.SelectionSet, introspection.WrapTypeFromDef(w.c.es.Schema(), def)))
	}
	child := 0
	if len(f.SelectionSet) > 0 {
		child = w.selectionSet(f.SelectionSet)
		if w.over || w.refused != nil {
			return child
		}
	}
	args := f.ArgumentMap(w.vars)
	price := safeAdd(1, child)
	if f.ObjectDefinition != nil {
		if p, ok := w.c.es.Complexity(w.ctx, f.ObjectDefinition.Name, f.Name, child, args); ok && p >= 1 {
			price = p
		}
	}
	return safeAdd(price, listArgumentLength(args))
}

func (w *costWalker) introspectionAllowed(f *ast.Field) bool {
	if w.c.introspection {
		return true
	}
	w.refused = &gqlerror.Error{
		Message:    fmt.Sprintf("introspection (%s) is turned off on this server", f.Name),
		Locations:  []gqlerror.Location{{Line: f.Position.Line, Column: f.Position.Column}},
		Extensions: map[string]any{"code": resolvers.CodeBadUserInput, "reason": "INTROSPECTION_DISABLED"},
	}
	return false
}

// listArgumentLength is how many elements the field's list arguments hold
// in all: each is an id the resolver will look up or write.
func listArgumentLength(args map[string]any) int {
	n := 0
	for _, v := range args {
		if l, ok := v.([]any); ok {
			n = safeAdd(n, len(l))
		}
	}
	return n
}

// The intro* methods price a selection on an introspection value by
// walking the values gqlgen's introspection will return for it.

func (w *costWalker) introSchema(sel ast.SelectionSet) int {
	price := 0
	schema := w.c.schema
	w.fieldsOf(sel, func(f *ast.Field) bool {
		p := 1
		switch f.Name {
		case "types":
			types := schema.Types()
			for i := range types {
				if p = safeAdd(p, w.introType(f.SelectionSet, &types[i])); w.stop(p) {
					break
				}
			}
		case "queryType":
			p = safeAdd(p, w.introType(f.SelectionSet, schema.QueryType()))
		case "mutationType":
			p = safeAdd(p, w.introType(f.SelectionSet, schema.MutationType()))
		case "subscriptionType":
			p = safeAdd(p, w.introType(f.SelectionSet, schema.SubscriptionType()))
		case "directives":
			ds := schema.Directives()
			for i := range ds {
				if p = safeAdd(p, w.introDirective(f.SelectionSet, &ds[i])); w.stop(p) {
					break
				}
			}
		}
		price = safeAdd(price, p)
		return !w.stop(price)
	})
	return price
}

func (w *costWalker) introType(sel ast.SelectionSet, t *introspection.Type) int {
	if t == nil {
		return 0 // null
	}
	price := 0
	w.fieldsOf(sel, func(f *ast.Field) bool {
		p := 1
		includeDeprecated, _ := f.ArgumentMap(w.vars)["includeDeprecated"].(bool)
		switch f.Name {
		case "fields":
			fs := t.Fields(includeDeprecated)
			for i := range fs {
				if p = safeAdd(p, w.introField(f.SelectionSet, &fs[i])); w.stop(p) {
					break
				}
			}
		case "inputFields":
			vs := t.InputFields()
			for i := range vs {
				if p = safeAdd(p, w.introInputValue(f.SelectionSet, &vs[i])); w.stop(p) {
					break
				}
			}
		case "enumValues":
			p = safeAdd(p, len(t.EnumValues(includeDeprecated))*w.scalarsOnly(f.SelectionSet))
		case "interfaces":
			p = safeAdd(p, w.introTypes(f.SelectionSet, t.Interfaces()))
		case "possibleTypes":
			p = safeAdd(p, w.introTypes(f.SelectionSet, t.PossibleTypes()))
		case "ofType":
			p = safeAdd(p, w.introType(f.SelectionSet, t.OfType()))
		}
		price = safeAdd(price, p)
		return !w.stop(price)
	})
	return price
}

func (w *costWalker) introTypes(sel ast.SelectionSet, ts []introspection.Type) int {
	price := 0
	for i := range ts {
		if price = safeAdd(price, w.introType(sel, &ts[i])); w.stop(price) {
			break
		}
	}
	return price
}

func (w *costWalker) introField(sel ast.SelectionSet, fd *introspection.Field) int {
	price := 0
	w.fieldsOf(sel, func(f *ast.Field) bool {
		p := 1
		switch f.Name {
		case "args":
			p = w.introArgs(f.SelectionSet, fd.Args, p)
		case "type":
			p = safeAdd(p, w.introType(f.SelectionSet, fd.Type))
		}
		price = safeAdd(price, p)
		return !w.stop(price)
	})
	return price
}

// introArgs adds to p the price of args (a field's or a directive's),
// stopping once over the limit.
func (w *costWalker) introArgs(sel ast.SelectionSet, args []introspection.InputValue, p int) int {
	for i := range args {
		if p = safeAdd(p, w.introInputValue(sel, &args[i])); w.stop(p) {
			break
		}
	}
	return p
}

func (w *costWalker) introInputValue(sel ast.SelectionSet, v *introspection.InputValue) int {
	price := 0
	w.fieldsOf(sel, func(f *ast.Field) bool {
		p := 1
		if f.Name == "type" {
			p = safeAdd(p, w.introType(f.SelectionSet, v.Type))
		}
		price = safeAdd(price, p)
		return !w.stop(price)
	})
	return price
}

func (w *costWalker) introDirective(sel ast.SelectionSet, d *introspection.Directive) int {
	price := 0
	w.fieldsOf(sel, func(f *ast.Field) bool {
		p := 1
		switch f.Name {
		case "args":
			p = w.introArgs(f.SelectionSet, d.Args, p)
		case "locations":
			p = safeAdd(p, len(d.Locations))
		}
		price = safeAdd(price, p)
		return !w.stop(price)
	})
	return price
}

// scalarsOnly prices a selection of scalar fields (an __EnumValue's).
func (w *costWalker) scalarsOnly(sel ast.SelectionSet) int {
	n := 0
	w.fieldsOf(sel, func(*ast.Field) bool { n++; return true })
	return n
}

// included applies @skip and @include with the request's variables.
func included(ds ast.DirectiveList, vars map[string]any) bool {
	if d := ds.ForName("skip"); d != nil {
		if v, _ := d.ArgumentMap(vars)["if"].(bool); v {
			return false
		}
	}
	if d := ds.ForName("include"); d != nil {
		if v, _ := d.ArgumentMap(vars)["if"].(bool); !v {
			return false
		}
	}
	return true
}

// safeAdd adds prices without overflowing (a huge document saturates).
func safeAdd(a, b int) int {
	if c := a + b; c >= a && c >= b {
		return c
	}
	return int(^uint(0) >> 1)
}

// setComplexity makes list fields cost what they can return, so a deep or
// wide query is refused before it runs.
// kinds is the deployment's number of reaction kinds (Post.reactions
// returns one element each).
func setComplexity(gc *graph.Config, kinds int) {
	c := &gc.Complexity
	c.Post.Reactions = func(child int) int { return 1 + child*max(kinds, 1) }
	c.Query.Posts = func(child int, ids []string) int { return 1 + child*max(len(ids), 1) }
	c.Query.SystemNotifications = func(child int, first *int, _ *string) int {
		n := engine.DefaultNotificationPageSize
		if first != nil {
			n = *first
		}
		return 1 + child*max(min(n, engine.MaxPageSize), 1)
	}
	// Lists that can grow are paged: each field costs the page it asks
	// for (first, default engine.DefaultMemberPageSize), never the size of
	// the group. A first over engine.MaxPageSize is refused when it runs;
	// priced as asked, a big one is usually refused before anything runs.
	page := func(child int, first *int, _ *string) int {
		return 1 + child*limitOr(first, engine.DefaultMemberPageSize)
	}
	c.ReadReceipts.Readers = page
	c.ReadReceipts.Unreaders = page
	c.Group.Members = page
	c.Mutation.MarkMessagesRead = func(child int, ids []string) int { return 1 + child*max(len(ids), 1) }
	// An erasure's work grows with what the user did (every like,
	// favorite, follow edge and group), not with its arguments: it is
	// priced as the largest page, so that a client's cost budget bounds
	// how many it starts per second.
	c.Mutation.EraseUser = func(child int, _ string) int { return EraseUserPrice + child }
}

// EraseUserPrice is what an eraseUser field costs before its selection:
// a page of engine.MaxIDsPerCall posts, each read once.
const EraseUserPrice = engine.MaxIDsPerCall

func limitOr(first *int, def int) int {
	if first == nil {
		return def
	}
	return max(min(*first, engine.MaxGroupMembers), 1)
}
