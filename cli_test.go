package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/embedded"
	"github.com/tally-dev/tally/engine/redisstore/redistest"
	"github.com/tally-dev/tally/web/auth"
)

func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var o, e bytes.Buffer
	code = run(context.Background(), args, &o, &e)
	return code, o.String(), e.String()
}

func TestTokenCommand(t *testing.T) {
	t.Setenv("TALLY_JWT_SECRET", "cli-test-secret-0123456789")
	code, out, errs := runCLI(t, "token", "-user", "42", "-admin")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	k, _ := auth.NewKeys([]byte("cli-test-secret-0123456789"))
	p, err := k.Verify(strings.TrimSpace(out))
	if err != nil || p.User != 42 || !p.Admin {
		t.Fatalf("token %q → %+v %v", out, p, err)
	}
	if code, _, _ := runCLI(t, "token", "-user", "abc"); code != 2 {
		t.Fatalf("bad -user exit %d, want 2", code)
	}
	// Env fills flags: TALLY_USER is -user.
	t.Setenv("TALLY_USER", "7")
	code, out, _ = runCLI(t, "token")
	if p, err := k.Verify(strings.TrimSpace(out)); code != 0 || err != nil || p.User != 7 || p.Admin {
		t.Fatalf("token from env: %d %+v %v", code, p, err)
	}
	t.Setenv("TALLY_JWT_SECRET", "short")
	if code, _, errs := runCLI(t, "token", "-user", "1"); code != 1 || !strings.Contains(errs, "at least 16 bytes") {
		t.Fatalf("short secret: %d %s", code, errs)
	}
}

func TestTokenCommandUsesDevServerSecret(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("TALLY_JWT_SECRET", "") // empty is unset, and restored after the test
	if code, _, errs := runCLI(t, "token", "-user", "1", "-data", dir); code != 1 || !strings.Contains(errs, "TALLY_JWT_SECRET") {
		t.Fatalf("no secret anywhere: %d %s", code, errs)
	}
	k, dev, err := keys(dir, true) // what a dev server does at start
	if err != nil || !dev {
		t.Fatal(err)
	}
	code, out, errs := runCLI(t, "token", "-user", "9", "-data", dir)
	if code != 0 {
		t.Fatal(errs)
	}
	if p, err := k.Verify(strings.TrimSpace(out)); err != nil || p.User != 9 {
		t.Fatalf("dev token not accepted by the dev server's keys: %v", err)
	}
}

func TestImportCommand(t *testing.T) {
	dir := t.TempDir()
	csv := filepath.Join(dir, "counts.csv")
	os.WriteFile(csv, []byte("msg_id,author_id,like_count,comment_count,repost_count,view_count,favor_count\n"+
		"1589000000000000001,7,10,2,1,500,3\n"+
		"1589000000000000002,,0,0,0,0,0\n"+ // no author, no counts: not known
		"1589000000000000003,,5,0,0,0,0\n"+ // no author, counts: known
		"bad,1,1,1,1,1,1\n"), 0o644)
	ndjson := filepath.Join(dir, "more.ndjson")
	os.WriteFile(ndjson, []byte(`{"id": "1589000000000000001", "user_id": 7, "likes": 11}`+"\n"), 0o644)
	data := filepath.Join(dir, "data")
	code, out, errs := runCLI(t, "import", "-data", data, csv, ndjson)
	if code != 1 || !strings.Contains(errs, "counts.csv:5") || !strings.Contains(out, "imported 4 rows") {
		t.Fatalf("import: exit %d\nstdout %s\nstderr %s", code, out, errs)
	}
	e, err := embedded.Open(embedded.Options{Dir: data})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ids := []engine.PostID{1589000000000000001, 1589000000000000002, 1589000000000000003}
	infos, _ := e.Posts(t.Context(), ids)
	counts, _ := e.Counts(t.Context(), ids)
	if !infos[0].Exists || infos[0].Author != 7 || infos[1].Exists || !infos[2].Exists || infos[2].Author != 0 {
		t.Fatalf("registry = %+v", infos)
	}
	// The NDJSON row replaced the CSV row's counts (not added to them).
	if counts[0] != (engine.Counts{Likes: 11}) || counts[2] != (engine.Counts{Likes: 5}) {
		t.Fatalf("counts = %+v", counts)
	}
	uc, _ := e.UserCounts(t.Context(), []engine.UserID{7})
	if uc[0].Posts != 1 {
		t.Fatalf("author post count after import and re-import = %d, want 1", uc[0].Posts)
	}
}

func TestUnknownCommandAndHelp(t *testing.T) {
	if code, _, _ := runCLI(t, "frobnicate"); code != 2 {
		t.Fatalf("unknown command exit %d", code)
	}
	if code, out, _ := runCLI(t, "help"); code != 0 || !strings.Contains(out, "tally import") {
		t.Fatalf("help: %d %s", code, out)
	}
	if code, _, _ := runCLI(t, "-fsync", "sometimes", "-addr", "127.0.0.1:0", "-data", t.TempDir()); code != 2 {
		t.Fatalf("bad -fsync exit %d, want 2", code)
	}
}

// SIGTERM drains and exits 0; what was acknowledged is there on restart.
func TestGracefulShutdown(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	dir := t.TempDir()
	p := startTally(t, dir)
	keys, _ := auth.NewKeys([]byte(crashSecret))
	c := &crashClient{http: httpClient(), keys: keys}
	d, err := c.call(p.url, 3, false, `mutation { createPost { id } }`, nil)
	if err != nil {
		t.Fatal(err)
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v\n%s", err, p.log())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("no exit 15 s after SIGTERM")
	}
	if !strings.Contains(p.log(), "stopped") {
		t.Fatalf("no clean stop in the log:\n%s", p.log())
	}
	p = startTally(t, dir)
	d2, err := c.call(p.url, 3, false, `{ viewer { user { postCount } } }`, nil)
	if err != nil || !strings.Contains(string(d2), `"postCount":1`) {
		t.Fatalf("after restart: %s %v (created %s)", d2, err, d)
	}
}

// tally backup while the server runs, tally restore into a new directory,
// and a server on the restored directory serves the same state.
func TestBackupRestoreCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	dir := t.TempDir()
	p := startTally(t, filepath.Join(dir, "data"))
	keys, _ := auth.NewKeys([]byte(crashSecret))
	c := &crashClient{http: httpClient(), keys: keys}
	d, err := c.call(p.url, 3, false, `mutation { createPost { id } }`, nil)
	if err != nil {
		t.Fatal(err)
	}
	var r struct{ CreatePost struct{ ID string } }
	json.Unmarshal(d, &r)
	if _, err := c.call(p.url, 4, false, `mutation($p: ID!) { likePost(postId: $p) { id } }`, map[string]any{"p": r.CreatePost.ID}); err != nil {
		t.Fatal(err)
	}
	backup := filepath.Join(dir, "tally.backup")
	if code, out, errs := runCLI(t, "backup", "-data", filepath.Join(dir, "data"), "-out", backup); code != 0 || !strings.Contains(out, "tally restore") {
		t.Fatalf("backup: %d %s %s", code, out, errs)
	}
	restored := filepath.Join(dir, "restored")
	if code, out, errs := runCLI(t, "restore", "-in", backup, "-data", restored); code != 0 {
		t.Fatalf("restore: %d %s %s", code, out, errs)
	}
	if code, _, _ := runCLI(t, "restore", "-in", backup, "-data", restored); code == 0 {
		t.Fatal("restore over a data directory that has data succeeded")
	}
	p2 := startTally(t, restored)
	d, err = c.call(p2.url, 4, false, `query($p: ID!) { post(id: $p) { counts { likes } viewerHasLiked author { id } } }`, map[string]any{"p": r.CreatePost.ID})
	if err != nil || !strings.Contains(string(d), `"likes":1`) || !strings.Contains(string(d), `"viewerHasLiked":true`) {
		t.Fatalf("restored server: %s %v", d, err)
	}
}

// A corrupt log stops the start with a message naming the file and offset;
// tally repair sets the damage aside and says what was lost; the server
// then starts.
func TestRepairCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	data, c, segs := killedAfterPosts(t, 50)
	seg := segs[len(segs)-1]
	b, _ := os.ReadFile(seg)
	b[len(b)/2] ^= 0xFF // a flipped byte in the middle of the log
	os.WriteFile(seg, b, 0o644)

	out, err := refusedStart(data)
	if err == nil || !strings.Contains(out, filepath.Base(seg)) || !strings.Contains(out, "offset") {
		t.Fatalf("start on a corrupt log: %v\n%s", err, out)
	}
	code, rep, errs := runCLI(t, "repair", "-data", data)
	if code != 0 {
		t.Fatalf("repair: %d\n%s\n%s", code, rep, errs)
	}
	t.Logf("repair report:\n%s", rep)
	var kept int
	if _, err := fmt.Sscanf(rep[strings.Index(rep, "the log now ends at record "):], "the log now ends at record %d", &kept); err != nil || kept <= 0 || kept >= 50 {
		t.Fatalf("report does not say where the log ends: %v", err)
	}
	// Each createPost is one record: exactly the records before the cut remain.
	p := startTally(t, data)
	d, err := c.call(p.url, 3, false, `{ viewer { user { postCount } } }`, nil)
	if err != nil || !strings.Contains(string(d), fmt.Sprintf(`"postCount":%d`, kept)) {
		t.Fatalf("after repair: %s %v, want postCount %d", d, err, kept)
	}
}

// killedAfterPosts starts tally on a fresh data directory with snapshots
// off, creates posts through it, kills it with SIGKILL and returns the data
// directory, a client signed like the server's, and the log segments,
// oldest first.
func killedAfterPosts(t *testing.T, posts int) (data string, c *crashClient, segs []string) {
	t.Helper()
	data = filepath.Join(t.TempDir(), "data")
	p := startTally(t, data, "-snapshot-interval", "-1s", "-snapshot-log-bytes", "-1")
	keys, _ := auth.NewKeys([]byte(crashSecret))
	c = &crashClient{http: httpClient(), keys: keys}
	for range posts {
		if _, err := c.call(p.url, 3, false, `mutation { createPost { id } }`, nil); err != nil {
			t.Fatal(err)
		}
	}
	p.kill9()
	segs, _ = filepath.Glob(filepath.Join(data, "wal-*.log"))
	if len(segs) == 0 {
		t.Fatal("no log segment")
	}
	return data, c, segs
}

// refusedStart runs the server on data until it exits, as it must when the
// directory is damaged, and returns what it printed.
func refusedStart(data string) (string, error) {
	bin, err := buildTally()
	if err != nil {
		return "", err
	}
	cmd := exec.Command(bin, "-addr", "127.0.0.1:0", "-data", data)
	cmd.Env = append(os.Environ(), "TALLY_JWT_SECRET="+crashSecret)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestImportLeavesRedisSweepsToServers: the store `tally import -redis`
// opens runs no background sweeper, whose SCAN of the whole keyspace
// every 5 s took 39% of redis-server's CPU during a 10M-post import; a
// server's store (the control) does sweep.
func TestImportLeavesRedisSweepsToServers(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server and waits for a sweep")
	}
	for _, batchJob := range []bool{true, false} {
		t.Run(fmt.Sprint("batchJob=", batchJob), func(t *testing.T) {
			t.Parallel()
			addr, stop := redistest.StartSingle(t)
			defer stop()
			sf := storeFlags{redis: addr, redisStartWait: 10 * time.Second, cursorTTL: engine.DefaultCursorTTL, batchJob: batchJob}
			store, err := sf.open(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			defer store.Close()
			time.Sleep(5*time.Second + 700*time.Millisecond) // past the intent sweeper's first tick
			rc := redis.NewClient(&redis.Options{Addr: addr})
			defer rc.Close()
			stats, err := rc.Info(t.Context(), "commandstats").Result()
			if err != nil {
				t.Fatal(err)
			}
			if swept := strings.Contains(stats, "cmdstat_scan:"); swept == batchJob {
				t.Fatalf("batchJob %v: SCAN run %v\n%s", batchJob, swept, stats)
			}
		})
	}
}

// TestImportNamesWhyRedisWentAway: when Redis goes away in the middle of
// `tally import -redis`, the command fails saying how many rows were
// imported and what Redis's error was, not only the client-facing "the
// store is unavailable". The rows come through a FIFO, so Redis is
// stopped between the first batch and the second.
func TestImportNamesWhyRedisWentAway(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	addr, stop := redistest.StartSingle(t)
	defer stop()
	fifo := filepath.Join(t.TempDir(), "rows.csv")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	wrote := make(chan error, 1)
	go func() {
		w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
		if err != nil {
			wrote <- err
			return
		}
		defer w.Close()
		fmt.Fprintf(w, "post_id,author_id,likes\n1589000000000000001,7,3\n")
		rc := redis.NewClient(&redis.Options{Addr: addr})
		defer rc.Close()
		// A row lands in two keys, its post's bucket and then its
		// author's: stopping Redis after the first alone would fail the
		// first batch, and the importer would quit before the second row.
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			if n, _ := rc.DBSize(t.Context()).Result(); n >= 2 {
				break
			}
			if time.Now().After(deadline) {
				wrote <- fmt.Errorf("the first row never reached Redis")
				return
			}
		}
		stop()
		_, err = fmt.Fprintf(w, "1589000000000000002,8,4\n")
		if errors.Is(err, syscall.EPIPE) {
			// Redis was stopped after it wrote the author's key but
			// before the importer read its reply: the first batch failed.
			err = nil
		}
		wrote <- err
	}()
	code, _, errs := runCLI(t, "import", "-redis", addr, "-batch", "1", fifo)
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	if code == 0 || !regexp.MustCompile(`import stopped after [01] rows: the store is unavailable \(cause: `).MatchString(errs) {
		t.Fatalf("exit %d; stderr:\n%s", code, errs)
	}
}
