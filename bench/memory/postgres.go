package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tally-dev/tally/bench/pgpeer"
	"github.com/tally-dev/tally/engine"
)

// pgMem is what PostgreSQL holds for the data set.
type pgMem struct {
	Version  string        `json:"version"`
	Tables   []pgpeer.Size `json:"tables"`
	Disk     int64         `json:"diskBytes"`     // Σ pg_total_relation_size of the design's tables: rows, keys, maps
	Database int64         `json:"databaseBytes"` // pg_database_size: the tables and the catalogs
	// SharedBuffers is shared_buffers's size, set at the restart to hold
	// the whole database; BuffersUsed the bytes of it holding pages.
	SharedBuffers int64 `json:"sharedBuffers"`
	BuffersUsed   int64 `json:"sharedBuffersUsed"`
	PSS           int64 `json:"pss"` // Σ Pss of the cluster's processes: shared pages once
	RSS           int64 `json:"rss"` // Σ VmRSS: shared pages once per process that touched them
	Processes     int   `json:"processes"`
}

// measurePostgres measures seed 003's relational design on PostgreSQL
// with the same data: a throwaway cluster of its own (bench/pgpeer), the
// same CSV file copied in (posts with their author and the authors' post
// counts in users when the set has authors; a post_counts row per post
// with a count), its size on disk, then memory as a server holding its
// data in memory needs it: restarted with shared_buffers sized to the
// whole database, every table and key read into it (pg_prewarm), the
// sample checked through SQL, and the cluster's processes' Pss summed.
// The OS page cache holds the files a second time; that is not counted.
func measurePostgres(ctx context.Context, cfg config, ds *data, out io.Writer) (result, error) {
	r := result{Authors: ds.authors, Posts: cfg.posts, Label: labelPostgres, NonZeroPosts: int64(ds.counted)}
	cluster, err := pgpeer.Start(ctx, pgpeer.Options{})
	if err != nil {
		return r, err
	}
	defer cluster.Stop()
	conn, err := cluster.Connect(ctx)
	if err != nil {
		return r, err
	}
	pm := &pgMem{}
	if err := conn.QueryRow(ctx, "SHOW server_version").Scan(&pm.Version); err != nil {
		return r, err
	}
	fmt.Fprintf(out, "loading %s into PostgreSQL %s on %s (COPY, keys built after, VACUUM ANALYZE)\n", ds.csv, pm.Version, cluster.Addr)
	start := time.Now()
	authors, err := loadPostgres(ctx, conn, ds)
	if err != nil {
		conn.Close(ctx)
		return r, err
	}
	r.ImportSeconds = time.Since(start).Seconds()
	if pm.Tables, err = pgpeer.Sizes(ctx, conn); err != nil {
		conn.Close(ctx)
		return r, err
	}
	rows := map[string]int64{}
	for _, s := range pm.Tables {
		pm.Disk += s.Total
		rows[s.Table] = s.Rows
	}
	r.DiskBytes = pm.Disk
	err = conn.QueryRow(ctx, "SELECT pg_database_size(current_database())").Scan(&pm.Database)
	conn.Close(ctx)
	if err != nil {
		return r, err
	}
	r.CountedPosts, r.KnownPosts = rows["post_counts"], rows["post_counts"]
	wantPosts := 0
	if ds.authors {
		r.KnownPosts, wantPosts = rows["posts"], cfg.posts
	}
	if rows["posts"] != int64(wantPosts) || rows["post_counts"] != int64(ds.counted) || rows["users"] != int64(authors) {
		return r, fmt.Errorf("PostgreSQL holds %d posts, %d counts rows and %d users; the data set has %d, %d and %d",
			rows["posts"], rows["post_counts"], rows["users"], wantPosts, ds.counted, authors)
	}
	fmt.Fprintf(out, "loaded in %.1f s; database %s\n", r.ImportSeconds, mib(pm.Database))

	// shared_buffers to hold the whole database, with room for the
	// catalogs' and the extensions' pages.
	buffers := (pm.Database+pm.Database/10+(16<<20))>>20 + 1
	if err := cluster.Restart(ctx, pgpeer.Options{SharedBuffers: strconv.FormatInt(buffers, 10) + "MB"}); err != nil {
		return r, err
	}
	if conn, err = cluster.Connect(ctx); err != nil {
		return r, err
	}
	defer conn.Close(ctx)
	if pm.BuffersUsed, pm.SharedBuffers, err = pgpeer.Prewarm(ctx, conn); err != nil {
		return r, err
	}
	if r.Verified, err = verifyPostgres(ctx, conn, ds); err != nil {
		return r, fmt.Errorf("verification on PostgreSQL: %v", err)
	}
	pm.PSS, pm.RSS = cluster.Memory()
	pm.Processes = len(cluster.Processes())
	r.Postgres = pm
	return r, nil
}

// loadPostgres copies the data set's CSV file into the design's tables
// and returns how many authors it has.
func loadPostgres(ctx context.Context, conn *pgx.Conn, ds *data) (authors int, err error) {
	counts, err := csvRows(ds.csv, ds.authors, func(id uint64, _ engine.UserID, c engine.Counts) []any {
		if c == (engine.Counts{}) {
			return nil
		}
		return []any{int64(id), c.Likes, c.Comments, c.Reposts, c.Views, c.Favorites}
	})
	if err != nil {
		return 0, err
	}
	defer counts.Close()
	src := pgpeer.Sources{Counts: counts}
	if ds.authors {
		posts, err := csvRows(ds.csv, ds.authors, func(id uint64, author engine.UserID, _ engine.Counts) []any {
			return []any{int64(id), int64(author)}
		})
		if err != nil {
			return 0, err
		}
		defer posts.Close()
		src.Posts = posts
		uid := 0
		src.Users = pgx.CopyFromFunc(func() ([]any, error) {
			for uid++; uid < len(ds.perUser) && ds.perUser[uid] == 0; uid++ {
			}
			if uid >= len(ds.perUser) {
				return nil, nil
			}
			authors++
			return []any{int64(uid), int64(ds.perUser[uid]), int64(0), int64(0)}, nil
		})
	}
	return authors, pgpeer.Load(ctx, conn, src)
}

// csvRows streams the CSV file's rows into COPY, each laid out by row
// (nil: the post has no row in this table).
func csvRows(path string, authors bool, row func(uint64, engine.UserID, engine.Counts) []any) (*csvSource, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	s := &csvSource{f: f, sc: bufio.NewScanner(f), path: path, authors: authors, layout: row}
	s.sc.Buffer(make([]byte, 1<<16), 1<<20)
	if !s.sc.Scan() {
		f.Close()
		return nil, fmt.Errorf("%s: no header", path)
	}
	if withAuthors := bytes.HasPrefix(s.sc.Bytes(), []byte("post_id,author_id,")); withAuthors != authors {
		f.Close()
		return nil, fmt.Errorf("%s: header %q; want authors=%v", path, s.sc.Text(), authors)
	}
	return s, nil
}

// csvSource is a pgx.CopyFromSource over the data set's CSV file.
type csvSource struct {
	f       *os.File
	sc      *bufio.Scanner
	path    string
	line    int
	authors bool
	layout  func(uint64, engine.UserID, engine.Counts) []any
	values  []any
	err     error
}

func (s *csvSource) Next() bool {
	for s.err == nil && s.sc.Scan() {
		s.line++
		id, author, c, err := parseRow(s.sc.Bytes(), s.authors)
		if err != nil {
			s.err = fmt.Errorf("%s:%d: %v", s.path, s.line+1, err)
			return false
		}
		if s.values = s.layout(id, author, c); s.values != nil {
			return true
		}
	}
	if s.err == nil {
		s.err = s.sc.Err()
	}
	return false
}

func (s *csvSource) Values() ([]any, error) { return s.values, nil }
func (s *csvSource) Err() error             { return s.err }
func (s *csvSource) Close() error           { return s.f.Close() }

// querier is a connection or a transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// verifyPostgres reads the sampled posts back in pages of 100, through
// the same checks as a server's GraphQL answer (check): counts, author,
// the author's post count; absent when the set has no row for it.
func verifyPostgres(ctx context.Context, conn querier, ds *data) (int, error) {
	checked := 0
	for lo := 0; lo < len(ds.sample); lo += 100 {
		page := ds.sample[lo:min(lo+100, len(ds.sample))]
		ids := make([]int64, len(page))
		for i, s := range page {
			ids[i] = int64(s.id)
		}
		rows, err := conn.Query(ctx, `SELECT q.id, p.author_id, u.post_count, c.post_id IS NOT NULL,
				coalesce(c.likes, 0), coalesce(c.comments, 0), coalesce(c.reposts, 0), coalesce(c.views, 0), coalesce(c.favorites, 0)
			FROM unnest($1::bigint[]) AS q(id)
			LEFT JOIN posts p ON p.id = q.id
			LEFT JOIN post_counts c ON c.post_id = q.id
			LEFT JOIN users u ON u.id = p.author_id`, ids)
		if err != nil {
			return checked, err
		}
		got := map[uint64]*gqlPost{}
		var id int64
		var author, postCount *int64
		var hasCounts bool
		var c [5]int64
		_, err = pgx.ForEachRow(rows, []any{&id, &author, &postCount, &hasCounts, &c[0], &c[1], &c[2], &c[3], &c[4]}, func() error {
			if author == nil && !hasCounts {
				return nil // no row anywhere: the post is unknown
			}
			p := &gqlPost{ID: strconv.FormatInt(id, 10)}
			p.Counts.Likes, p.Counts.Comments, p.Counts.Reposts, p.Counts.Views, p.Counts.Favorites = c[0], c[1], c[2], c[3], c[4]
			if author != nil {
				p.Author = &struct {
					ID        string `json:"id"`
					PostCount int64  `json:"postCount"`
				}{ID: strconv.FormatInt(*author, 10)}
				if postCount != nil {
					p.Author.PostCount = *postCount
				}
			}
			got[uint64(id)] = p
			return nil
		})
		if err != nil {
			return checked, err
		}
		for _, s := range page {
			if err := check(s, got[s.id], ds.perUser, ds.authors); err != nil {
				return checked, fmt.Errorf("post %d: %v", s.id, err)
			}
			checked++
		}
	}
	return checked, nil
}
