package pgpeer

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tally-dev/tally/bench/benchutil"
	"github.com/tally-dev/tally/web/auth"
)

// startCluster starts a cluster for the test, or skips it when
// PostgreSQL is not installed (fails it with TALLY_REQUIRE_POSTGRES).
func startCluster(t *testing.T, ctx context.Context) *Cluster {
	t.Helper()
	_, err := Binaries()
	benchutil.SkipUnless(t, err == nil, "TALLY_REQUIRE_POSTGRES", "PostgreSQL is not installed (apt-get install -y postgresql)")
	c, err := Start(ctx, Options{SharedBuffers: "32MB"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	return c
}

// TestPeerServesTheFeedPage loads a few rows of each table and asks the
// peer for a page as a viewer, anonymously, and wrongly.
func TestPeerServesTheFeedPage(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := startCluster(t, ctx)
	conn, err := c.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	err = Load(ctx, conn, Sources{
		Users:     pgx.CopyFromRows([][]any{{int64(7), int64(2), int64(30), int64(1)}}),
		Posts:     pgx.CopyFromRows([][]any{{int64(100), int64(7)}, {int64(200), int64(7)}, {int64(300), int64(8)}}),
		Counts:    pgx.CopyFromRows([][]any{{int64(100), int64(3), int64(1), int64(0), int64(5_000_000_000), int64(2)}}),
		Likes:     pgx.CopyFromRows([][]any{{int64(9), int64(100)}, {int64(10), int64(200)}}),
		Favorites: pgx.CopyFromRows([][]any{{int64(9), int64(200)}}),
	})
	if err != nil {
		t.Fatal(err)
	}
	// The keys are unique indexes: a second like of a post by one user is
	// refused, as seed 003 asks.
	if _, err := conn.Exec(ctx, "INSERT INTO likes VALUES (9, 100)"); err == nil || !strings.Contains(err.Error(), "duplicate key") {
		t.Errorf("a repeated like: %v; want a duplicate key error", err)
	}

	pool, err := pgxpool.New(ctx, c.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	keys, err := auth.NewKeys([]byte("pgpeer-test-secret-0123"))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(Handler(pool, keys))
	defer srv.Close()
	viewer, _ := keys.Sign(9, false, 0)
	ask := func(token string, ids ...string) string {
		t.Helper()
		body, _ := json.Marshal(map[string]any{"query": `query($ids: [ID!]!) { posts(ids: $ids) { id author { id postCount followerCount followingCount } counts { likes comments reposts views favorites } viewerHasLiked viewerHasFavorited } }`,
			"variables": map[string]any{"ids": ids}})
		req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL+"/query", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	got := ask(viewer, "100", "200", "999", "300", "100")
	want := `{"data":{"posts":[` +
		`{"id":"100","author":{"id":"7","postCount":2,"followerCount":30,"followingCount":1},"counts":{"likes":3,"comments":1,"reposts":0,"views":5000000000,"favorites":2},"viewerHasLiked":true,"viewerHasFavorited":false},` +
		`{"id":"200","author":{"id":"7","postCount":2,"followerCount":30,"followingCount":1},"counts":{"likes":0,"comments":0,"reposts":0,"views":0,"favorites":0},"viewerHasLiked":false,"viewerHasFavorited":true},` +
		`null,` +
		`{"id":"300","author":{"id":"8","postCount":0,"followerCount":0,"followingCount":0},"counts":{"likes":0,"comments":0,"reposts":0,"views":0,"favorites":0},"viewerHasLiked":false,"viewerHasFavorited":false},` +
		`{"id":"100","author":{"id":"7","postCount":2,"followerCount":30,"followingCount":1},"counts":{"likes":3,"comments":1,"reposts":0,"views":5000000000,"favorites":2},"viewerHasLiked":true,"viewerHasFavorited":false}` +
		`]}}`
	if got != want {
		t.Errorf("page as user 9:\n got %s\nwant %s", got, want)
	}
	if got := ask("", "100"); !strings.Contains(got, `"viewerHasLiked":false,"viewerHasFavorited":false`) {
		t.Errorf("anonymous page: %s", got)
	}
	for name, c := range map[string]struct {
		token string
		ids   []string
		code  string
	}{
		"a token signed with another secret": {"eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiI5In0.c2lnbmF0dXJl", []string{"100"}, "UNAUTHENTICATED"},
		"an id that is not a number":         {viewer, []string{"x1"}, "BAD_USER_INPUT"},
		"an id beyond bigint":                {viewer, []string{"18446744073709551615"}, "BAD_USER_INPUT"},
		"101 ids":                            {viewer, strings.Fields(strings.Repeat("100 ", 101)), "BAD_USER_INPUT"},
	} {
		if got := ask(c.token, c.ids...); !strings.Contains(got, `"code":"`+c.code+`"`) {
			t.Errorf("%s: %s; want %s", name, got, c.code)
		}
	}

	sizes, err := Sizes(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]int64{}
	for _, s := range sizes {
		rows[s.Table] = s.Rows
		if s.Total < s.Heap+s.Indexes || s.Indexes <= 0 {
			t.Errorf("%+v: want an index, and the total at least heap + index", s)
		}
	}
	if rows["users"] != 1 || rows["posts"] != 3 || rows["post_counts"] != 1 || rows["likes"] != 2 || rows["favorites"] != 1 {
		t.Errorf("rows %v", rows)
	}
	used, size, err := Prewarm(ctx, conn)
	if err != nil || used <= 0 || size != 32<<20 {
		t.Errorf("prewarm: %d of %d bytes of shared_buffers in use, %v", used, size, err)
	}
	if pss, rss := c.Memory(); pss <= 0 || rss < pss || len(c.Processes()) < 3 {
		t.Errorf("memory: pss %d, rss %d over %d processes", pss, rss, len(c.Processes()))
	}
}

// TestRestartKeepsTheDataAndStopEndsAll: a restart takes new settings
// on the same data and port; after Stop nothing of the cluster is left.
func TestRestartKeepsTheDataAndStopEndsAll(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := startCluster(t, ctx)
	conn, err := c.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := Load(ctx, conn, Sources{Posts: pgx.CopyFromRows([][]any{{int64(5), int64(6)}})}); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)
	before := c.PID()
	if err := c.Restart(ctx, Options{SharedBuffers: "16MB"}); err != nil {
		t.Fatal(err)
	}
	if c.PID() == before {
		t.Error("the same postmaster after a restart")
	}
	conn, err = c.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var author int64
	var buffers string
	if err := conn.QueryRow(ctx, "SELECT author_id, current_setting('shared_buffers') FROM posts WHERE id = 5").Scan(&author, &buffers); err != nil || author != 6 || buffers != "16MB" {
		t.Errorf("after the restart: author %d, shared_buffers %q, %v", author, buffers, err)
	}
	conn.Close(ctx)
	pids := c.Processes()
	c.Stop()
	if _, err := os.Stat(c.Dir); !os.IsNotExist(err) {
		t.Errorf("%s still there: %v", c.Dir, err)
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); err == nil {
			if b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat"); !strings.Contains(string(b), ") Z ") {
				t.Errorf("postgres process %d still runs", pid)
			}
		}
	}
	if _, err := c.Connect(ctx); err == nil {
		t.Error("the stopped cluster still accepts connections")
	}
}
