package e2e

import (
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
	"github.com/tally-dev/tally/engine/redisstore"
	"github.com/tally-dev/tally/engine/redisstore/redistest"
	"github.com/tally-dev/tally/web/transport"
)

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

// TestImportLeavesRedisSweepsToServers: the store `tally import -redis`
// opens (batchJob) runs no background sweeper, whose SCAN of the whole keyspace
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
			rc := redis.NewClient(&redis.Options{Addr: addr})
			defer rc.Close()
			if batchJob {
				// The import opens its store, then waits on a FIFO no one
				// writes to.
				fifo := filepath.Join(t.TempDir(), "rows.csv")
				if err := syscall.Mkfifo(fifo, 0o600); err != nil {
					t.Fatal(err)
				}
				bin, err := buildTally()
				if err != nil {
					t.Fatal(err)
				}
				cmd := exec.Command(bin, "import", "-redis", addr, fifo)
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				defer func() { cmd.Process.Kill(); cmd.Wait() }()
				for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
					info, _ := rc.Info(t.Context(), "clients").Result()
					if n := regexp.MustCompile(`connected_clients:(\d+)`).FindStringSubmatch(info); n != nil && n[1] != "1" {
						break // another client than rc: the import's store is open
					}
					if time.Now().After(deadline) {
						t.Fatal("the import never connected to Redis")
					}
				}
			} else {
				startTally(t, t.TempDir(), "-redis", addr)
			}
			time.Sleep(5*time.Second + 700*time.Millisecond) // past the intent sweeper's first tick
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

// TestImportReactions: `tally import` reads the <kind>_count and <kind>s
// columns of the kinds its -reactions gives the store (reconciled as a
// server start reconciles them), names the columns it ignored, rejects a
// bad count with its file and line; the page then shows the imported
// counts, `tally check` agrees, and an import that leaves out a kind now
// counted is refused as a server start would be.
func TestImportReactions(t *testing.T) {
	for _, backend := range []string{"embedded", "redis"} {
		t.Run(backend, func(t *testing.T) {
			if backend == "redis" && testing.Short() {
				t.Skip("starts redis-server")
			}
			dir := t.TempDir()
			csv := filepath.Join(dir, "counts.csv")
			os.WriteFile(csv, []byte("post_id,author_id,like_count,LOVE_COUNT,hahas,lovee_count\n"+
				"1589000000000000001,7,10,4,2,99\n"+
				"1589000000000000002,7,1,-3,0,0\n"+ // rejected: a negative count
				"1589000000000000003,,0,0,5,0\n"), 0o644) // known by its haha count alone
			kinds := []string{"like", "love", "haha"}
			where := []string{"-data", filepath.Join(dir, "data")}
			open := func() (engine.Store, error) {
				return embedded.Open(embedded.Options{Dir: where[1], Reactions: kinds})
			}
			if backend == "redis" {
				addr, _ := redistest.StartSingle(t)
				where = []string{"-redis", addr}
				open = func() (engine.Store, error) {
					return redisstore.Open(t.Context(), redisstore.Options{Addrs: []string{addr}, Reactions: kinds})
				}
			}
			cli := func(args ...string) (int, string, string) {
				return runCLI(t, append(append(args[:1:1], where...), args[1:]...)...)
			}
			code, out, errs := cli("import", "-reactions", strings.Join(kinds, ","), csv)
			if code != 1 || !strings.Contains(out, "imported 2 rows") ||
				!regexp.MustCompile(`counts.csv:3: column LOVE_COUNT: .*-3.* is not a non-negative integer`).MatchString(errs) ||
				!regexp.MustCompile(`columns ignored.*columns=lovee_count `).MatchString(errs) {
				t.Fatalf("import: exit %d\nstdout %s\nstderr %s", code, out, errs)
			}

			t.Run("page", func(t *testing.T) {
				store, err := open()
				if err != nil {
					t.Fatal(err)
				}
				s := newTestServerWith(t, store, transport.Config{})
				page := s.q(t, 2, `query($ids: [ID!]!) { posts(ids: $ids) { `+reactionFields+` } }`,
					map[string]any{"ids": []string{"1589000000000000001", "1589000000000000002", "1589000000000000003"}})["posts"].([]any)
				want := []string{"like=10 love=4 haha=2 viewer=null", "", "like=0 love=0 haha=5 viewer=null"}
				for i, p := range page {
					got := ""
					if p != nil {
						got = reactionsOf(p)
					}
					if got != want[i] {
						t.Errorf("post %d reads %q, want %q", i+1, got, want[i])
					}
				}
			})

			code, out, errs = cli("check")
			if code != 0 || !strings.Contains(out, "0 drifts") || !strings.Contains(out, "post.reactions.haha") {
				t.Fatalf("check after the import: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
			}
			// -reactions like would drop love, which now counts 4.
			code, _, errs = cli("import", csv)
			if code == 0 || !regexp.MustCompile(`love.* still counts 4 reactions`).MatchString(errs) {
				t.Fatalf("import leaving out love: exit %d\n%s", code, errs)
			}
		})
	}
}
