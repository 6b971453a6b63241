package pgpeer

import (
	"context"
	"errors"
	"strconv"

	"github.com/99designs/gqlgen/graphql"
	"github.com/graph-gophers/dataloader/v7"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"github.com/tally-dev/tally/bench/pgpeer/graph"
	"github.com/tally-dev/tally/bench/pgpeer/model"
	"github.com/tally-dev/tally/loaders"
)

// maxIDs is Tally's page limit.
const maxIDs = 100

type resolver struct{ pool *pgxpool.Pool }

func (r *resolver) Query() graph.QueryResolver { return queryResolver{r} }
func (r *resolver) Post() graph.PostResolver   { return postResolver{r} }

type queryResolver struct{ *resolver }

// Posts reads the page's posts in one query; their fields come through
// the request's loaders.
func (r queryResolver) Posts(ctx context.Context, ids []string) ([]*model.Post, error) {
	if len(ids) > maxIDs {
		return nil, inputError(ctx, "at most 100 ids")
	}
	keys := make([]int64, len(ids))
	for i, id := range ids {
		k, err := strconv.ParseInt(id, 10, 64)
		if err != nil || k <= 0 {
			return nil, inputError(ctx, "id "+strconv.Quote(id)+" is not a post id")
		}
		keys[i] = k
	}
	rows, err := r.pool.Query(ctx, "SELECT id, author_id FROM posts WHERE id = ANY($1)", keys)
	if err != nil {
		return nil, err
	}
	found := map[int64]*model.Post{}
	var key, author int64
	_, err = pgx.ForEachRow(rows, []any{&key, &author}, func() error {
		found[key] = &model.Post{ID: strconv.FormatInt(key, 10), Key: key, AuthorID: author}
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := make([]*model.Post, len(keys))
	for i, k := range keys {
		out[i] = found[k]
	}
	return out, nil
}

func inputError(ctx context.Context, msg string) error {
	return &gqlerror.Error{Message: msg, Path: graphql.GetPath(ctx), Extensions: map[string]any{"code": "BAD_USER_INPUT"}}
}

type postResolver struct{ *resolver }

func (postResolver) Author(ctx context.Context, p *model.Post) (*model.User, error) {
	return loadersOf(ctx).users.Load(ctx, p.AuthorID)()
}

func (postResolver) Counts(ctx context.Context, p *model.Post) (*model.PostCounts, error) {
	return loadersOf(ctx).counts.Load(ctx, p.Key)()
}

func (postResolver) ViewerHasLiked(ctx context.Context, p *model.Post) (bool, error) {
	l := loadersOf(ctx)
	if l.viewer == 0 {
		return false, nil
	}
	return l.liked.Load(ctx, p.Key)()
}

func (postResolver) ViewerHasFavorited(ctx context.Context, p *model.Post) (bool, error) {
	l := loadersOf(ctx)
	if l.viewer == 0 {
		return false, nil
	}
	return l.favorited.Load(ctx, p.Key)()
}

// requestLoaders are one request's batched readers: each gathers the keys
// the page's resolvers ask for during loaders.Wait (Tally's own loaders'
// wait) and reads them with one query.
type requestLoaders struct {
	viewer           int64 // 0: anonymous
	counts           *dataloader.Loader[int64, *model.PostCounts]
	users            *dataloader.Loader[int64, *model.User]
	liked, favorited *dataloader.Loader[int64, bool]
}

type loadersKey struct{}

// loadersOf returns the request's loaders, which Handler puts in every
// request's context.
func loadersOf(ctx context.Context) *requestLoaders {
	l, ok := ctx.Value(loadersKey{}).(*requestLoaders)
	if !ok {
		panic(errNoLoaders)
	}
	return l
}

func newRequestLoaders(pool *pgxpool.Pool, viewer int64) *requestLoaders {
	l := &requestLoaders{viewer: viewer}
	l.counts = newLoader(pool, "SELECT post_id, likes, comments, reposts, views, favorites FROM post_counts WHERE post_id = ANY($1)",
		func(rows pgx.Rows) (int64, *model.PostCounts, error) {
			var id int64
			var c model.PostCounts
			err := rows.Scan(&id, &c.Likes, &c.Comments, &c.Reposts, &c.Views, &c.Favorites)
			return id, &c, err
		}, func(int64) *model.PostCounts { return &model.PostCounts{} })
	l.users = newLoader(pool, "SELECT id, post_count, follower_count, following_count FROM users WHERE id = ANY($1)",
		func(rows pgx.Rows) (int64, *model.User, error) {
			var u model.User
			var id int64
			err := rows.Scan(&id, &u.PostCount, &u.FollowerCount, &u.FollowingCount)
			u.ID = strconv.FormatInt(id, 10)
			return id, &u, err
		}, func(id int64) *model.User { return &model.User{ID: strconv.FormatInt(id, 10)} })
	flag := func(table string) *dataloader.Loader[int64, bool] {
		return newLoader(pool, "SELECT post_id, true FROM "+table+" WHERE user_id = $2 AND post_id = ANY($1)",
			func(rows pgx.Rows) (int64, bool, error) {
				var id int64
				var set bool
				err := rows.Scan(&id, &set)
				return id, set, err
			}, func(int64) bool { return false }, viewer)
	}
	l.liked, l.favorited = flag("likes"), flag("favorites")
	return l
}

// newLoader batches look-ups by key into query, which takes the keys as
// $1 (and args as $2…) and returns a row per key it has; a key without a
// row gets absent(key).
func newLoader[V any](pool *pgxpool.Pool, query string, scan func(pgx.Rows) (int64, V, error), absent func(int64) V, args ...any) *dataloader.Loader[int64, V] {
	batch := func(ctx context.Context, keys []int64) []*dataloader.Result[V] {
		out := make([]*dataloader.Result[V], len(keys))
		fail := func(err error) []*dataloader.Result[V] {
			for i := range out {
				out[i] = &dataloader.Result[V]{Error: err}
			}
			return out
		}
		rows, err := pool.Query(ctx, query, append([]any{keys}, args...)...)
		if err != nil {
			return fail(err)
		}
		found := make(map[int64]V, len(keys))
		for rows.Next() {
			k, v, err := scan(rows)
			if err != nil {
				rows.Close()
				return fail(err)
			}
			found[k] = v
		}
		if err := rows.Err(); err != nil {
			return fail(err)
		}
		for i, k := range keys {
			v, ok := found[k]
			if !ok {
				v = absent(k)
			}
			out[i] = &dataloader.Result[V]{Data: v}
		}
		return out
	}
	return dataloader.NewBatchedLoader(batch, dataloader.WithWait[int64, V](loaders.Wait))
}

var errNoLoaders = errors.New("pgpeer: a request without loaders (not through Handler)")
