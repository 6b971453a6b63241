// Package loaders batches the per-user reads of one GraphQL response (the
// counters of every author, member or reader it shows, the viewer's badges)
// into one engine multi-get per kind, and carries the viewer's per-post flag
// reads for the page resolver, which reads a whole page's posts, counts and
// flags itself (one multi-get per kind, see resolvers.loadPage). Loaders
// live for one response (a query, a mutation, or one event of a
// subscription), never longer, so a subscription never serves stale counts.
package loaders

import (
	"context"
	"time"

	"github.com/graph-gophers/dataloader/v7"

	"github.com/tally-dev/tally/engine"
)

// Wait is how long a loader collects keys before it calls the engine. The
// resolvers of one page run concurrently and enqueue within microseconds; a
// millisecond bounds the added latency (the library's 16 ms default would
// dominate a page served from memory).
const Wait = time.Millisecond

// Loaders are one response's batched readers.
type Loaders struct {
	// Store is the engine; LikedBy and FavoritedBy are its flag reads for
	// this response's viewer. Resolvers that read a whole page at once call
	// them directly and prime the loaders (see resolvers.loadPage).
	Store       engine.Store
	LikedBy     func(context.Context, []engine.PostID) ([]bool, error)
	FavoritedBy func(context.Context, []engine.PostID) ([]bool, error)

	UserCounts *dataloader.Loader[engine.UserID, engine.UserCounts]
	Unread     *dataloader.Loader[engine.UserID, engine.Unread]
}

// New makes the loaders of one response by viewer (0 = anonymous: the
// viewer's flags read false without an engine call).
func New(s engine.Store, viewer engine.UserID) *Loaders {
	liked := func(ctx context.Context, ids []engine.PostID) ([]bool, error) {
		if viewer == 0 {
			return make([]bool, len(ids)), nil
		}
		return s.Liked(ctx, viewer, ids)
	}
	favorited := func(ctx context.Context, ids []engine.PostID) ([]bool, error) {
		if viewer == 0 {
			return make([]bool, len(ids)), nil
		}
		return s.Favorited(ctx, viewer, ids)
	}
	return &Loaders{
		Store:       s,
		LikedBy:     liked,
		FavoritedBy: favorited,
		UserCounts:  newLoader(s.UserCounts),
		Unread: newLoader(func(ctx context.Context, ids []engine.UserID) ([]engine.Unread, error) {
			out := make([]engine.Unread, len(ids))
			for i, id := range ids {
				u, err := s.Unread(ctx, id)
				if err != nil {
					return nil, err
				}
				out[i] = u
			}
			return out, nil
		}),
	}
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
