package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tally-dev/tally/bench/benchutil"
	"github.com/tally-dev/tally/bench/pgpeer"
	"github.com/tally-dev/tally/bench/redispeers"
	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/redisstore/redistest"
)

func TestFlagsRejectBadValues(t *testing.T) {
	for args, want := range map[string]string{
		"-authors some":        "-authors must be with, without or both",
		"-posts 0":             "-posts 0: must be positive",
		"-posts -5":            "-posts -5",
		"-users 0":             "-users 0: must be positive",
		"-verify -1":           "-verify -1",
		"-env GOGC":            `-env: "GOGC" is not KEY=VALUE`,
		"-compare-env nothing": `-compare-env: "nothing" is not KEY=VALUE`,
		"-posts 10 extra":      "unexpected arguments",
		"-redis -redis-peers tally-redis,memcached": `-redis-peers: "memcached" is neither`,
		"-redis-workers 0":                          "-redis-workers 0: must be positive",
		"-redis-import-attempts 0":                  "-redis-import-attempts 0: must be positive",
	} {
		_, err := parseFlags(strings.Fields(args), io.Discard)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v; want one saying %q", args, err, want)
		}
	}
	c, err := parseFlags(strings.Fields("-compare -gc-pacing=heap -serve-args -pprof-x -env GOGC=50"), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.variants) != 2 || strings.Join(c.variants[1].args, " ") != "-pprof-x -gc-pacing=heap" || c.variants[1].env[0] != "GOGC=50" {
		t.Errorf("variants %+v", c.variants)
	}
}

func TestLoadTurnsAdd(t *testing.T) {
	var l *loadResult
	l = l.add(loadResult{Seconds: 1, Pages: 10, ServerCPU: 0.5, GCCPU: 0.1, GCCycles: 2, RSSPeak: 100, RSSMean: 90, HeapPeak: 50, HeapMean: 40})
	l = l.add(loadResult{Seconds: 3, Pages: 20, ServerCPU: 1, GCCPU: -1, GCCycles: 1, RSSPeak: 80, RSSMean: 70, HeapPeak: 60, HeapMean: 20})
	want := loadResult{Seconds: 4, Pages: 30, ServerCPU: 1.5, GCCPU: -1, GCCycles: 3, RSSPeak: 100, RSSMean: 75, HeapPeak: 60, HeapMean: 25}
	if *l != want {
		t.Errorf("sum %+v; want %+v", *l, want)
	}
}

// TestLikesInSnapshots checks how the writes phase splits the likes
// between the snapshots and the rest of the run: each 50 ms bucket by the
// share of its time a snapshot covers, so that a short snapshot is not
// credited with the likes of the whole buckets it touches.
func TestLikesInSnapshots(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const every = 50 * time.Millisecond
	buckets := []int64{100, 100, 100, 100, 100, 100, 100, 100, 100, 100}
	at := func(ms int) time.Time { return start.Add(time.Duration(ms) * time.Millisecond) }
	r := writeResult{Seconds: 0.5, Likes: 1000}
	r.inSnapshots([]snapSpan{
		{end: at(-10), took: 30 * time.Millisecond},  // before the run: not counted
		{end: at(40), took: 20 * time.Millisecond},   // 20 ms of bucket 0
		{end: at(175), took: 100 * time.Millisecond}, // buckets 1 (25 ms), 2 (whole), 3 (25 ms)
		{end: at(520), took: 40 * time.Millisecond},  // 20 ms of bucket 9, 20 after the run
	}, start, buckets, every)
	if r.SnapshotsWritten != 3 {
		t.Errorf("%d snapshots counted, want 3", r.SnapshotsWritten)
	}
	if want := 0.14; math.Abs(r.SnapshotSeconds-want) > 1e-9 {
		t.Errorf("%.3f s in snapshots, want %.3f", r.SnapshotSeconds, want)
	}
	if want := int64(100*20/50 + 100*25/50 + 100 + 100*25/50 + 100*20/50); r.LikesInSnapshots != want {
		t.Errorf("%d likes in snapshots, want %d", r.LikesInSnapshots, want)
	}
	if in, out := r.rateInSnapshots(), r.rateOutsideSnapshots(); math.Abs(in-2000) > 1e-6 || math.Abs(out-2000) > 1e-6 {
		t.Errorf("likes/s in %.1f and outside %.1f snapshots, want 2000 both (an even load)", in, out)
	}
}

// TestEndToEnd runs the tool on a small data set against a tally built
// from this repository: import, serve, verification of every post through
// GraphQL and both memory readings, for both sets, a compared server,
// Tally on a redis-server of the run's own and the Instagram-style buckets
// on another, checked post by post, and where it is installed PostgreSQL
// with seed 003's tables, checked through SQL.
func TestEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts tally")
	}
	work := t.TempDir()
	benchutil.SkipUnless(t, redistest.Available(), "TALLY_REQUIRE_REDIS", "redis-server is not installed (apt-get install -y redis-server)")
	_, err := pgpeer.Binaries()
	withPostgres := err == nil
	benchutil.SkipUnless(t, withPostgres || os.Getenv("TALLY_REQUIRE_POSTGRES") == "", "TALLY_REQUIRE_POSTGRES", "PostgreSQL is not installed")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	bin := filepath.Join(work, "tally")
	if o, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "../..").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, o)
	}
	// The first tally import -redis fails half-way, as one did on a busy
	// machine: the tool must empty Redis, import again and still verify
	// every post.
	flaky := filepath.Join(work, "flaky-tally")
	mark := filepath.Join(work, "failed-once")
	script := fmt.Sprintf(`#!/bin/sh
if [ "$1" = import ] && [ "$4" = -redis ] && [ ! -e %[1]q ]; then
	touch %[1]q
	head -n 5000 "$6" > %[1]q.csv
	%[2]q import -log-format json -redis "$5" %[1]q.csv
	echo "injected failure after 4999 rows" >&2
	exit 1
fi
exec %[2]q "$@"
`, mark, bin)
	if err := os.WriteFile(flaky, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	args := []string{"-posts", "20000", "-users", "3000", "-verify", "20000", "-work", work, "-tally", flaky,
		"-after-gc", "0", "-load", "1s", "-compare", "-gc-pacing heap", "-redis"}
	if withPostgres {
		args = append(args, "-postgres")
	} else {
		t.Log("PostgreSQL is not installed (apt-get install -y postgresql): the run goes without it")
	}
	s := runTool(t, ctx, args)
	for _, want := range []string{
		"known posts 20000, with counts", "20000 posts verified exactly through GraphQL", // every post, with its author
		"posts verified exactly", "idle, after a forced GC", "under load, mean (heap incl. garbage)", "redis-server CPU during the import", "GOGC 100", "B (-gc-pacing heap) against A",
		"redis-server: used_memory, RSS", "tally serve -redis: live heap, RSS",
		"injected failure after 4999 rows); emptying Redis and importing again", "it was run again on an emptied Redis", "== Redis, Instagram buckets: 20000 posts",
		"loaded 20000 posts", "every bucket's size and 20000 sampled posts, their authors and the authors' post counts, checked",
		"authors  Tally embedded A", "counts   Tally on Redis", "counts   Redis, Instagram buckets",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q:\n%s", want, s)
		}
	}
	if strings.Count(s, "20000 posts verified exactly") != 6 {
		t.Errorf("want 6 servers (2 sets × 2 variants and Redis) each verifying all 20000 posts:\n%s", s)
	}
	if n := strings.Count(s, "every bucket's size and 20000 sampled"); n != 2 {
		t.Errorf("want the buckets checked in both sets, got %d:\n%s", n, s)
	}
	if strings.Count(s, "data directory on disk") != 4 {
		t.Errorf("want the data directory's size of each embedded server:\n%s", s)
	}
	if withPostgres {
		for _, want := range []string{
			"loaded 20000 posts (8004 with counts)", "20000 sampled posts, their authors and the authors' post counts, checked through SQL",
			"loaded 8004 posts (8004 with counts)", "20000 sampled posts checked through SQL",
			"authors  PostgreSQL, seed 003's tables", "counts   PostgreSQL, seed 003's tables",
			"on disk: the tables with their keys", "postgres: buffers in use, Σ Pss",
		} {
			if !strings.Contains(s, want) {
				t.Errorf("output lacks %q:\n%s", want, s)
			}
		}
	}
}

// TestPostgresCheckCatchesAWrongLoad loads a small set into PostgreSQL
// and damages it one way at a time, inside a transaction rolled back
// after: each damage must fail the check, so a wrong load cannot pass.
func TestPostgresCheckCatchesAWrongLoad(t *testing.T) {
	_, err := pgpeer.Binaries()
	benchutil.SkipUnless(t, err == nil, "TALLY_REQUIRE_POSTGRES", "PostgreSQL is not installed (apt-get install -y postgresql)")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cluster, err := pgpeer.Start(ctx, pgpeer.Options{SharedBuffers: "32MB"})
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Stop()
	cfg := config{posts: 3000, users: 200, seed: 3, sample: 3000, work: t.TempDir()}
	for _, authors := range []bool{true, false} {
		ds, err := dataset(cfg, authors, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		conn, err := cluster.Connect(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, table := range pgpeer.Tables() {
			conn.Exec(ctx, "DROP TABLE IF EXISTS "+table)
		}
		if _, err := loadPostgres(ctx, conn, ds); err != nil {
			t.Fatal(err)
		}
		var victim, zero sampled // a post with likes; a post without counts
		for _, s := range ds.sample {
			if s.counts.Likes > 0 {
				victim = s
			}
			if s.counts == (engine.Counts{}) {
				zero = s
			}
		}
		damages := map[string]string{
			"none":            "",
			"a count changed": fmt.Sprintf("UPDATE post_counts SET likes = likes + 1 WHERE post_id = %d", victim.id),
			"counts missing":  fmt.Sprintf("DELETE FROM post_counts WHERE post_id = %d", victim.id),
			"an extra post":   fmt.Sprintf("INSERT INTO post_counts VALUES (%d, 1, 0, 0, 0, 0)", zero.id),
		}
		if authors {
			damages["an author changed"] = fmt.Sprintf("UPDATE posts SET author_id = author_id + 1 WHERE id = %d", victim.id)
			damages["an author's count off"] = fmt.Sprintf("UPDATE users SET post_count = post_count + 1 WHERE id = %d", victim.author)
			damages["a post missing"] = fmt.Sprintf("DELETE FROM posts WHERE id = %d", zero.id)
		}
		for name, damage := range damages {
			tx, err := conn.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if damage != "" {
				if _, err := tx.Exec(ctx, damage); err != nil {
					t.Fatalf("%s: %v", damage, err)
				}
			}
			n, err := verifyPostgres(ctx, tx, ds)
			tx.Rollback(ctx)
			if (err == nil) != (name == "none") || (err == nil && n != len(ds.sample)) {
				t.Errorf("authors=%v, %s: check says %v after %d posts", authors, name, err, n)
			}
		}
		conn.Close(ctx)
	}
}

func TestParseRowRejectsWhatIsNotARow(t *testing.T) {
	id, a, c, err := parseRow([]byte("123,7,1,2,3,4,5"), true)
	if err != nil || id != 123 || a != 7 || c != (engine.Counts{Likes: 1, Comments: 2, Reposts: 3, Views: 4, Favorites: 5}) {
		t.Errorf("parseRow: %d %d %+v %v", id, a, c, err)
	}
	for line, want := range map[string]string{
		"123,1,2,3,4":     "5 fields, want 6",
		"123,1,2,3,4,5,6": "more than 6 fields",
		"123,1,2,3,4,":    `field 6: ""`,
		"123,1,x,3,4,5":   `field 3: "x"`,
		"-1,1,2,3,4,5":    `field 1: "-1"`,
	} {
		if _, _, _, err := parseRow([]byte(line), false); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("parseRow(%q): %v; want an error saying %q", line, err, want)
		}
	}
}

// TestBucketCheckCatchesAWrongLoad loads the buckets of a small set into a
// redis-server of the test's own, then damages them one way at a time:
// each must fail the check, so a wrong load cannot pass.
func TestBucketCheckCatchesAWrongLoad(t *testing.T) {
	if !redistest.Available() {
		t.Skip("redis-server not installed")
	}
	ctx := context.Background()
	cfg := config{posts: 3000, users: 200, seed: 3, sample: 3000, work: t.TempDir()}
	node := redistest.StartSingleNode(t, redispeers.ServerArgs...)
	c := redis.NewClient(&redis.Options{Addr: node.Addr})
	defer c.Close()
	for _, authors := range []bool{true, false} {
		ds, err := dataset(cfg, authors, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		stored := ds.counted
		if authors {
			stored = cfg.posts
		}
		var victim sampled // a post with counts and an author
		for _, s := range ds.sample {
			if s.counts.Likes > 0 {
				victim = s
			}
		}
		var zero sampled
		for _, s := range ds.sample {
			if s.counts == (engine.Counts{}) {
				zero = s
			}
		}
		b := redispeers.NewBuckets(stored, authors)
		for name, damage := range map[string]func(){
			"none": func() {},
			"a count changed": func() {
				n := victim.counts
				n.Likes++
				c.HSet(ctx, b.Key(victim.id), redispeers.Field(victim.id), b.Value(victim.author, n))
			},
			"a post missing": func() { c.HDel(ctx, b.Key(victim.id), redispeers.Field(victim.id)) },
			"an extra post": func() {
				c.HSet(ctx, b.Key(zero.id+1), redispeers.Field(zero.id+1), b.Value(victim.author, victim.counts))
			},
			"a bucket past the listpack limit": func() {
				// Rewriting a post as it is, under a lower limit, converts
				// its bucket; nothing else changes.
				check := func(err error) {
					if err != nil {
						t.Fatal(err)
					}
				}
				check(c.ConfigSet(ctx, "hash-max-listpack-entries", "2").Err())
				defer c.ConfigSet(ctx, "hash-max-listpack-entries", "1024")
				check(c.HSet(ctx, b.Key(victim.id), redispeers.Field(victim.id), b.Value(victim.author, victim.counts)).Err())
			},
			"an author's count off": func() {
				if !authors {
					c.HSet(ctx, b.Key(zero.id), redispeers.Field(zero.id), "")
					return // without authors: an all-zero post present instead
				}
				c.HIncrBy(ctx, redispeers.UserKey(victim.author), strconv.FormatUint(uint64(victim.author), 10), 1)
			},
		} {
			if err := c.FlushAll(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			ld, err := loadBuckets(ctx, c, b, ds.csv, 3)
			if err != nil {
				t.Fatal(err)
			}
			damage()
			err = checkBuckets(ctx, c, b, ds, ld, stored)
			want := map[string]string{
				"a count changed": "reads author", "a post missing": "the buckets hold", "an extra post": "the buckets hold",
				"a bucket past the listpack limit": "not listpack", "an author's count off": "the buckets hold",
			}[name]
			if authors && name == "an author's count off" {
				want = "post count reads"
			}
			if (err == nil) != (name == "none") || (err != nil && !strings.Contains(err.Error(), want)) {
				t.Errorf("authors=%v, %s: check says %v; want an error saying %q", authors, name, err, want)
			}
		}
	}
}

// TestWritesPhase runs the writes phase on a small data set: a server
// without snapshots and one taking them, likes from many users, their
// RSS, CPU per like and heap profiles saved settled and after the likes.
func TestWritesPhase(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts tally")
	}
	work := t.TempDir()
	profiles := filepath.Join(work, "profiles")
	if err := os.Mkdir(profiles, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s := runTool(t, ctx, []string{"-posts", "20000", "-users", "3000", "-verify", "200", "-authors", "with", "-work", work, "-repo", "../..",
		"-after-gc", "0", "-load", "0", "-writes", "2s", "-write-users", "500", "-write-clients", "4",
		"-write-snapshot-interval", "1s", "-write-profiles", profiles})
	if !strings.Contains(s, "CPU/like") || strings.Count(s, " µs ") != 2 || strings.Count(s, "%\n") != 2 || !strings.Contains(s, "likes/s with snapshots") {
		t.Errorf("want both servers' ratio, likes/s, CPU per like and the GC's share:\n%s", s)
	}
	for _, name := range []string{"A-round0-nosnapshots-settled", "A-round0-nosnapshots-likes", "A-round0-snapshots-settled", "A-round0-snapshots-likes"} {
		if st, err := os.Stat(filepath.Join(profiles, name+".pb.gz")); err != nil || st.Size() == 0 {
			t.Errorf("heap profile %s: %v", name, err)
		}
	}
}

// runTool runs the tool with args and returns what it printed.
func runTool(t *testing.T, ctx context.Context, args []string) string {
	t.Helper()
	cfg, err := parseFlags(args, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := run(ctx, cfg, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	return out.String()
}
