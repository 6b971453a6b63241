// Package resolvers translates GraphQL to engine calls. It stays thin: it
// parses ids, checks who is asking, calls the engine (through the
// per-response loaders for anything read per post or per user) and maps
// engine errors to GraphQL error codes. Product rules live in engine/.
package resolvers

//go:generate go run github.com/99designs/gqlgen generate

import (
	"context"

	"github.com/99designs/gqlgen/graphql"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/graph"
	"github.com/tally-dev/tally/web/auth"
	"github.com/tally-dev/tally/web/hub"
)

// Resolver is the root resolver; one per server.
type Resolver struct {
	Store engine.Store
	Hub   *hub.Hub
}

// GraphConfig is the schema's resolvers and its @auth and @admin
// directives over store; the transport adds the complexity functions
// (it prices operations) and builds the executable schema from it.
func GraphConfig(store engine.Store, h *hub.Hub) graph.Config {
	gc := graph.Config{Resolvers: &Resolver{Store: store, Hub: h}}
	gc.Directives.Auth = func(ctx context.Context, _ any, next graphql.Resolver) (any, error) {
		if p, _ := auth.From(ctx); p.User == 0 {
			return nil, Errorf(CodeUnauthenticated, "sign in: this field needs Authorization: Bearer <token>")
		}
		return next(ctx)
	}
	gc.Directives.Admin = func(ctx context.Context, _ any, next graphql.Resolver) (any, error) {
		p, _ := auth.From(ctx)
		if p.User == 0 {
			return nil, Errorf(CodeUnauthenticated, "sign in: this field needs an admin token")
		}
		if !p.Admin {
			return nil, Errorf(CodeForbidden, "this field needs an admin token")
		}
		return next(ctx)
	}
	return gc
}
