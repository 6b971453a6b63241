// Package resolvers translates GraphQL to engine calls. It stays thin: it
// parses ids, checks who is asking, calls the engine (through the
// per-response loaders for anything read per post or per user) and maps
// engine errors to GraphQL error codes. Product rules live in engine/.
package resolvers

//go:generate go run github.com/99designs/gqlgen generate

import (
	"context"
	"fmt"

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

// ContentWrites says who may call the content writes (the @contentWrite
// fields: creating and deleting posts, reposts and comments): the
// server's -content-writes.
type ContentWrites int

const (
	// ContentWritesAny lets every signed-in user write content.
	ContentWritesAny ContentWrites = iota
	// ContentWritesService keeps content writes for trusted tokens (role
	// service or admin): the app's backend reports the posts and comments
	// it stores, so an end user's client cannot count what the app never
	// saw.
	ContentWritesService
)

// ParseContentWrites reads -content-writes: "any" or "service".
func ParseContentWrites(s string) (ContentWrites, error) {
	switch s {
	case "any":
		return ContentWritesAny, nil
	case "service":
		return ContentWritesService, nil
	}
	return 0, fmt.Errorf("-content-writes must be any or service, got %q", s)
}

// Policy is what the directives enforce beyond a signed-in viewer.
type Policy struct {
	ContentWrites ContentWrites
}

// trusted is a token that vouches for more than its user: an admin, or
// the app's backend (a service).
func trusted(p auth.Principal) bool { return p.Admin || p.Service }

// GraphConfig is the schema's resolvers and its @auth, @admin, @trusted
// and @contentWrite directives over store; the transport adds the
// complexity functions (it prices operations) and builds the executable
// schema from it.
func GraphConfig(store engine.Store, h *hub.Hub, policy Policy) graph.Config {
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
	gc.Directives.Trusted = func(ctx context.Context, _ any, next graphql.Resolver) (any, error) {
		p, _ := auth.From(ctx)
		if p.User == 0 {
			return nil, Errorf(CodeUnauthenticated, "sign in: this field needs a service or admin token")
		}
		if !trusted(p) {
			return nil, Errorf(CodeForbidden, "this field needs a service or admin token")
		}
		return next(ctx)
	}
	gc.Directives.ContentWrite = func(ctx context.Context, _ any, next graphql.Resolver) (any, error) {
		if policy.ContentWrites == ContentWritesService {
			if p, _ := auth.From(ctx); !trusted(p) {
				return nil, Errorf(CodeForbidden, "this server takes posts, reposts and comments from the app's backend only (-content-writes service): send this through the app, whose service token may write it")
			}
		}
		return next(ctx)
	}
	return gc
}
