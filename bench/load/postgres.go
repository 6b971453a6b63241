package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/jackc/pgx/v5"

	"github.com/tally-dev/tally/bench/benchutil"
	"github.com/tally-dev/tally/bench/pgpeer"
	"github.com/tally-dev/tally/web/auth"
)

// The PostgreSQL peer (-postgres): seed 003's relational design on a
// throwaway cluster, loaded with the same world the reference gets (the
// posts as the first tally counted them, the likes and favorites it
// acknowledged), and the GraphQL server a team would build over it
// (bench/pgpeer: gqlgen, dataloader, pgx) in a process of its own — this
// program again with -pg-peer. Its CPU is the server's plus the
// cluster's.

// startPostgresPeer starts the cluster, loads rw and starts the peer.
// The cluster is returned even when the peer fails, for the caller to
// stop.
func startPostgresPeer(ctx context.Context, dir, cpus, secret string, rw refWorld) (*server, *pgpeer.Cluster, string, error) {
	cluster, err := pgpeer.Start(ctx, pgpeer.Options{CPUs: cpus})
	if err != nil {
		return nil, nil, "", err
	}
	conn, err := cluster.Connect(ctx)
	if err != nil {
		return nil, cluster, "", err
	}
	defer conn.Close(ctx)
	var version string
	if err := conn.QueryRow(ctx, "SHOW server_version").Scan(&version); err != nil {
		return nil, cluster, "", err
	}
	if err := pgpeer.Load(ctx, conn, postgresRows(rw)); err != nil {
		return nil, cluster, version, err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, cluster, version, err
	}
	port, err := benchutil.FreePort()
	if err != nil {
		return nil, cluster, version, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	s, err := start("postgres", cpus, self, []string{"-pg-peer", "-addr", addr, "-pg", cluster.DSN},
		[]string{"TALLY_JWT_SECRET=" + secret}, filepath.Join(dir, "pgpeer.log"))
	if err != nil {
		return nil, cluster, version, err
	}
	s.base = "http://" + addr
	s.backendCPU = cluster.CPU
	if err := s.waitHTTP("/healthz"); err != nil {
		s.stop()
		return nil, cluster, version, err
	}
	return s, cluster, version, nil
}

// postgresRows lays rw out in the design's tables: every post with its
// author, a counts row for each post with a count, each author once with
// their counters.
func postgresRows(rw refWorld) pgpeer.Sources {
	var users, posts, counts, likes, favs [][]any
	seen := map[string]bool{}
	for _, p := range rw.Posts {
		id := int64(postID(p.ID))
		if p.Author != nil {
			posts = append(posts, []any{id, int64(postID(p.Author.ID))})
			if !seen[p.Author.ID] {
				seen[p.Author.ID] = true
				a := p.Author
				users = append(users, []any{int64(postID(a.ID)), a.PostCount, a.FollowerCount, a.FollowingCount})
			}
		}
		if c := p.Counts; c != (refCounts{}) {
			counts = append(counts, []any{id, c.Likes, c.Comments, c.Reposts, c.Views, c.Favorites})
		}
	}
	for _, l := range rw.Likes {
		likes = append(likes, []any{int64(l[0]), int64(l[1])})
	}
	for _, f := range rw.Favorites {
		favs = append(favs, []any{int64(f[0]), int64(f[1])})
	}
	return pgpeer.Sources{Users: pgx.CopyFromRows(users), Posts: pgx.CopyFromRows(posts), Counts: pgx.CopyFromRows(counts),
		Likes: pgx.CopyFromRows(likes), Favorites: pgx.CopyFromRows(favs)}
}

// servePostgresPeer is -pg-peer: the peer on addr over the cluster at
// dsn, until SIGTERM.
func servePostgresPeer(addr, dsn string) error {
	var keys *auth.Keys
	if secret := os.Getenv("TALLY_JWT_SECRET"); secret != "" {
		k, err := auth.NewKeys([]byte(secret))
		if err != nil {
			return err
		}
		keys = k
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := pgpeer.Serve(ctx, addr, dsn, keys); err != nil {
		return fmt.Errorf("postgres peer: %w", err)
	}
	return nil
}
