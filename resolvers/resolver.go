// Package resolvers translates GraphQL to engine calls. It stays thin: it
// parses ids, checks who is asking, calls the engine (through the
// per-response loaders for anything read per post or per user) and maps
// engine errors to GraphQL error codes. Product rules live in engine/.
package resolvers

//go:generate go run github.com/99designs/gqlgen generate

import (
	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/resolvers/hub"
)

// Resolver is the root resolver; one per server.
type Resolver struct {
	Store engine.Store
	Hub   *hub.Hub
}
