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
	"github.com/tally-dev/tally/engine/redisstore/redistest"
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
