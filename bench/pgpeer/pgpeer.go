// Package pgpeer is PostgreSQL as the peer Tally is measured against:
// what a team would build for the seeds' job starting from seed 003's
// relational design. It owns three things the bench tools share:
//
//   - a throwaway cluster (Start): Debian's postgresql package, initdb
//     into a fresh directory, one postgres on a free loopback port, run as
//     an unprivileged user when the tool is root, stopped by its pid;
//   - the design (Load, Sizes, Prewarm): a counts table keyed by post id
//     with the five counts, (user, post) likes and favorites tables whose
//     key is the unique index, posts with their author, users with their
//     counters;
//   - a GraphQL server over it (Handler, Serve), built the way most teams
//     build one: gqlgen's executable schema (the part of Tally's schema a
//     feed page reads, generated into graph/), a dataloader per field kind
//     per request (graph-gophers/dataloader, as Tally's loaders), pgx's
//     pool. A 50-post page with the viewer's flags is five queries: the
//     posts, then one batch each for counts, authors, likes and
//     favorites.
//
// It promises that the server answers a feed page with the same bytes as
// Tally given the same data (bench/load checks this before it measures),
// and nothing about writes: the peer serves reads only.
package pgpeer

//go:generate go run github.com/99designs/gqlgen generate

import (
	"context"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/99designs/gqlgen/graphql/handler"
	"github.com/99designs/gqlgen/graphql/handler/extension"
	"github.com/99designs/gqlgen/graphql/handler/lru"
	"github.com/99designs/gqlgen/graphql/handler/transport"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/vektah/gqlparser/v2/ast"

	"github.com/tally-dev/tally/bench/pgpeer/graph"
	"github.com/tally-dev/tally/web/auth"
)

// Handler serves GraphQL at /query (POST and GET) and /healthz. A request
// with a bearer token is the token's user's (HS256 with keys, as Tally
// checks it; an invalid token is UNAUTHENTICATED); nil keys or no token:
// anonymous, the viewer's flags false.
func Handler(pool *pgxpool.Pool, keys *auth.Keys) http.Handler {
	srv := handler.New(graph.NewExecutableSchema(graph.Config{Resolvers: &resolver{pool: pool}}))
	srv.AddTransport(transport.GET{})
	srv.AddTransport(transport.POST{})
	srv.SetQueryCache(lru.New[*ast.QueryDocument](1000))
	srv.Use(extension.Introspection{})
	mux := http.NewServeMux()
	mux.HandleFunc("/query", func(w http.ResponseWriter, r *http.Request) {
		var viewer int64
		if h := r.Header.Get("Authorization"); h != "" && keys != nil {
			p, _, err := keys.FromHeader(h)
			if err != nil {
				w.Header().Set("Content-Type", "application/json")
				io.WriteString(w, `{"errors":[{"message":"invalid or expired token","extensions":{"code":"UNAUTHENTICATED"}}],"data":null}`)
				return
			}
			viewer = int64(p.User)
		}
		ctx := context.WithValue(r.Context(), loadersKey{}, newRequestLoaders(pool, viewer))
		srv.ServeHTTP(w, r.WithContext(ctx))
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") })
	return mux
}

// Serve runs Handler on addr over a pool on dsn until ctx ends.
func Serve(ctx context.Context, addr, dsn string, keys *auth.Keys) error {
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := pool.Ping(ctx); err != nil {
		return err
	}
	srv := &http.Server{Addr: addr, Handler: Handler(pool, keys), ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 2 * time.Minute}
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
