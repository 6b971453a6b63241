package pgpeer

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// table is one table of the design: its columns, all bigint and NOT
// NULL, and its key.
type table struct {
	name    string
	columns []string
	key     string
}

// The design, seed 003's: "a user id + post id table holding each
// person's likes, used to tell whether the user has liked (insert if not);
// a post like-count table, found by post id and incremented", both in one
// transaction, with user id + post id a unique index "to prevent duplicate
// inserts". Here the count table carries all five counts of a post (a
// missing row reads zeros, so all-zero posts cost nothing, as in Tally),
// favorites get a table of their own like likes, posts carry their author,
// and users their counters (kept up to date by the writes, as the counts
// are). No foreign keys: counts may be imported without posts, as Tally
// imports them.
var tables = []table{
	{"users", []string{"id", "post_count", "follower_count", "following_count"}, "PRIMARY KEY (id)"},
	{"posts", []string{"id", "author_id"}, "PRIMARY KEY (id)"},
	{"post_counts", []string{"post_id", "likes", "comments", "reposts", "views", "favorites"}, "PRIMARY KEY (post_id)"},
	{"likes", []string{"user_id", "post_id"}, "PRIMARY KEY (user_id, post_id)"},
	{"favorites", []string{"user_id", "post_id"}, "PRIMARY KEY (user_id, post_id)"},
}

// Tables names the design's tables.
func Tables() []string {
	names := make([]string, len(tables))
	for i, t := range tables {
		names[i] = t.name
	}
	return names
}

// Sources are the rows Load copies in, one source per table, each row in
// the table's columns' order: users (id, post_count, follower_count,
// following_count), posts (id, author_id), post_counts (post_id, likes,
// comments, reposts, views, favorites), likes and favorites (user_id,
// post_id). A nil source leaves its table empty.
type Sources struct {
	Users, Posts, Counts, Likes, Favorites pgx.CopyFromSource
}

// Load creates the design's tables on conn's database (which must not
// have them) and copies the sources in. The keys are built once the rows
// are in, one sort each, as pg_restore does; then VACUUM ANALYZE sets the
// visibility map and the statistics, so that look-ups by key can be
// index-only scans and the planner knows the tables' sizes.
func Load(ctx context.Context, conn *pgx.Conn, src Sources) error {
	sources := map[string]pgx.CopyFromSource{"users": src.Users, "posts": src.Posts, "post_counts": src.Counts,
		"likes": src.Likes, "favorites": src.Favorites}
	for _, t := range tables {
		cols := make([]string, len(t.columns))
		for i, c := range t.columns {
			cols[i] = c + " bigint NOT NULL"
		}
		if _, err := conn.Exec(ctx, fmt.Sprintf("CREATE TABLE %s (%s)", t.name, strings.Join(cols, ", "))); err != nil {
			return fmt.Errorf("creating %s: %w", t.name, err)
		}
		if s := sources[t.name]; s != nil {
			if _, err := conn.CopyFrom(ctx, pgx.Identifier{t.name}, t.columns, s); err != nil {
				return fmt.Errorf("copying into %s: %w", t.name, err)
			}
		}
		if _, err := conn.Exec(ctx, fmt.Sprintf("ALTER TABLE %s ADD %s", t.name, t.key)); err != nil {
			return fmt.Errorf("the key of %s: %w", t.name, err)
		}
	}
	if _, err := conn.Exec(ctx, "VACUUM (ANALYZE, FREEZE)"); err != nil {
		return fmt.Errorf("vacuum: %w", err)
	}
	return nil
}

// Size is what one table takes on disk.
type Size struct {
	Table   string
	Rows    int64
	Heap    int64 // pg_table_size: the rows (with their visibility and free space maps)
	Indexes int64 // pg_indexes_size: the key's index
	Total   int64 // pg_total_relation_size: both, and TOAST
}

// Sizes measures every table of the design.
func Sizes(ctx context.Context, conn *pgx.Conn) ([]Size, error) {
	var out []Size
	for _, t := range tables {
		s := Size{Table: t.name}
		err := conn.QueryRow(ctx, fmt.Sprintf(`SELECT (SELECT count(*) FROM %[1]s), pg_table_size('%[1]s'), pg_indexes_size('%[1]s'), pg_total_relation_size('%[1]s')`, t.name)).
			Scan(&s.Rows, &s.Heap, &s.Indexes, &s.Total)
		if err != nil {
			return nil, fmt.Errorf("size of %s: %w", t.name, err)
		}
		out = append(out, s)
	}
	return out, nil
}

// Prewarm reads every table of the design and its indexes into
// shared_buffers (pg_prewarm), and returns the bytes of shared_buffers in
// use afterwards (pg_buffercache) and the size of shared_buffers.
func Prewarm(ctx context.Context, conn *pgx.Conn) (used, size int64, err error) {
	for _, ext := range []string{"pg_prewarm", "pg_buffercache"} {
		if _, err := conn.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS "+ext); err != nil {
			return 0, 0, fmt.Errorf("%s: %w", ext, err)
		}
	}
	for _, t := range tables {
		_, err := conn.Exec(ctx, `SELECT pg_prewarm(c.oid) FROM pg_class c WHERE c.oid = $1::regclass
			UNION ALL SELECT pg_prewarm(i.indexrelid) FROM pg_index i WHERE i.indrelid = $1::regclass`, t.name)
		if err != nil {
			return 0, 0, fmt.Errorf("prewarming %s: %w", t.name, err)
		}
	}
	err = conn.QueryRow(ctx, `SELECT count(*) FILTER (WHERE relfilenode IS NOT NULL) * current_setting('block_size')::bigint,
		count(*) * current_setting('block_size')::bigint FROM pg_buffercache`).Scan(&used, &size)
	return used, size, err
}
