// Package loaders batches the per-user reads of one GraphQL response (the
// counters of every author, member or reader it shows, the viewer's badges)
// into one engine multi-get per kind. A page of posts (registry, counts and
// the viewer's flags) is read by the page resolver itself with one
// Store.Page call (see resolvers.loadPage), which primes the authors'
// counters here. Loaders
// live for one response (a query, a mutation, or one event of a
// subscription), never longer, so a subscription never serves stale counts.
package loaders

import (
	"context"
	"sync"
	"time"

	"github.com/graph-gophers/dataloader/v7"

	"github.com/tally-dev/tally/engine"
)

// Wait is how long a loader collects keys before it calls the engine. The
// resolvers of one page run concurrently and enqueue within microseconds; a
// millisecond bounds the added latency (the library's 16 ms default would
// dominate a page served from memory).
const Wait = time.Millisecond

// Loaders are one response's batched readers. Each loader is made on
// first use: most responses (a page served by a plan, a mutation) use
// none, and making both cost every response about ten allocations.
type Loaders struct {
	// Store is the engine, for resolvers that read a whole page at once
	// and prime the loaders (see resolvers.loadPage).
	Store engine.Store

	mu         sync.Mutex
	userCounts *dataloader.Loader[engine.UserID, engine.UserCounts]
	unread     *dataloader.Loader[engine.UserID, engine.Unread]
}

// New makes the loaders of one response.
func New(s engine.Store) *Loaders { return &Loaders{Store: s} }

// UserCounts batches the response's reads of users' counters.
func (l *Loaders) UserCounts() *dataloader.Loader[engine.UserID, engine.UserCounts] {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.userCounts == nil {
		l.userCounts = newLoader(l.Store.UserCounts)
	}
	return l.userCounts
}

// Unread batches the response's reads of badges.
func (l *Loaders) Unread() *dataloader.Loader[engine.UserID, engine.Unread] {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.unread == nil {
		s := l.Store
		l.unread = newLoader(func(ctx context.Context, ids []engine.UserID) ([]engine.Unread, error) {
			out := make([]engine.Unread, len(ids))
			for i, id := range ids {
				u, err := s.Unread(ctx, id)
				if err != nil {
					return nil, err
				}
				out[i] = u
			}
			return out, nil
		})
	}
	return l.unread
}

// newLoader adapts a positional multi-get (results in key order) to a
// dataloader, capping batches at the engine's per-call limit.
func newLoader[K comparable, V any](get func(context.Context, []K) ([]V, error)) *dataloader.Loader[K, V] {
	batch := func(ctx context.Context, keys []K) []*dataloader.Result[V] {
		out := make([]*dataloader.Result[V], len(keys))
		vals, err := get(ctx, keys)
		if err == nil && len(vals) != len(keys) {
			err = engine.ErrUnavailable
		}
		for i := range keys {
			if err != nil {
				out[i] = &dataloader.Result[V]{Error: err}
			} else {
				out[i] = &dataloader.Result[V]{Data: vals[i]}
			}
		}
		return out
	}
	return dataloader.NewBatchedLoader(batch,
		dataloader.WithWait[K, V](Wait),
		dataloader.WithBatchCapacity[K, V](engine.MaxIDsPerCall))
}

type ctxKey struct{}

// With returns ctx carrying l.
func With(ctx context.Context, l *Loaders) context.Context {
	return context.WithValue(ctx, ctxKey{}, l)
}

// For returns the loaders of ctx's response.
func For(ctx context.Context) *Loaders {
	l, _ := ctx.Value(ctxKey{}).(*Loaders)
	return l
}
