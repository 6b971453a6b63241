package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/redisstore"
	"github.com/tally-dev/tally/engine/redisstore/redistest"
)

// TestCheckCommandData: `tally check -data` on a stopped server's
// directory prints a line per derived count and exits 0 when every count
// is what it counts (imported counts are skipped, and said so); it refuses
// a directory a server holds, one that holds no store, and stray
// arguments, each with its exit code.
func TestCheckCommandData(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the tally binary")
	}
	dir := t.TempDir()
	csv := filepath.Join(dir, "counts.csv")
	os.WriteFile(csv, []byte("post_id,author_id,likes,favorites\n1589000000000000001,7,10,3\n1589000000000000002,7,0,0\n"), 0o644)
	data := filepath.Join(dir, "data")
	if code, out, errs := runCLI(t, "import", "-data", data, csv); code != 0 {
		t.Fatalf("import: %d\n%s\n%s", code, out, errs)
	}

	code, out, errs := runCLI(t, "check", "-data", data)
	if code != 0 || !strings.Contains(out, "0 drifts") ||
		!strings.Contains(out, "note: posts 1589000000000000001..1589000000000000002 may hold imported counts") {
		t.Fatalf("check of a clean directory: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	for _, count := range []string{"post.likes", "post.favorites", "user.followers", "user.posts"} {
		if !strings.Contains(out, count) {
			t.Errorf("the summary has no line for %s:\n%s", count, out)
		}
	}
	if code, out, errs := runCLI(t, "check", "-data", data, "-repair"); code != 0 || !strings.Contains(out, "0 drifts") {
		t.Fatalf("check -repair of a clean directory: exit %d\n%s\n%s", code, out, errs)
	}

	p := startTally(t, data)
	if code, _, errs := runCLI(t, "check", "-data", data); code != 1 || !strings.Contains(errs, "in use") {
		t.Fatalf("check of a directory a server holds: exit %d\n%s", code, errs)
	}
	p.kill9()

	if code, _, errs := runCLI(t, "check", "-data", t.TempDir()); code != 1 || !strings.Contains(errs, "holds no data directory") {
		t.Fatalf("check of an empty directory: exit %d\n%s", code, errs)
	}
	if code, _, errs := runCLI(t, "check", "-data", data, "extra"); code != 2 || !strings.Contains(errs, "unexpected arguments") {
		t.Fatalf("check with a stray argument: exit %d\n%s", code, errs)
	}
}

// TestCheckCommandRedis: drifts made behind Tally's back in Redis (a liker
// removed from a like set, an author's user record deleted) are printed
// one line each — what, which id, stored, recounted — with exit status 3;
// -repair prints them repaired and exits 4; a check after that exits 0.
func TestCheckCommandRedis(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the tally binary, starts redis-server")
	}
	addr, stop := redistest.StartSingle(t)
	defer stop()
	s, err := redisstore.Open(t.Context(), redisstore.Options{Addrs: []string{addr}, KeyPrefix: "app:"})
	if err != nil {
		t.Fatal(err)
	}
	post, err := s.CreatePost(t.Context(), 7, 0, "")
	if err == nil {
		_, err = s.CreatePost(t.Context(), 7, 0, "")
	}
	for u := engine.UserID(10); u <= 12 && err == nil; u++ {
		err = s.Like(t.Context(), u, post)
		if err == nil && u < 12 {
			err = s.Follow(t.Context(), u, 7)
		}
	}
	s.Close()
	if err != nil {
		t.Fatal(err)
	}
	rc := redis.NewClient(&redis.Options{Addr: addr})
	defer rc.Close()
	likers, err := rc.Keys(t.Context(), "app:{p*}l*").Result()
	if err != nil || len(likers) != 1 {
		t.Fatalf("like sets %v, %v", likers, err)
	}
	if err := rc.SRem(t.Context(), likers[0], "10").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rc.HDel(t.Context(), "app:{u0}", "7").Err(); err != nil { // user 7's record
		t.Fatal(err)
	}

	drifts := []string{
		fmt.Sprintf("drift post.likes %d: stored 3, recounted 2", post),
		"drift user.followers 7: stored 0, recounted 2",
		"drift user.posts 7: stored 0, recounted 2",
	}
	args := []string{"check", "-redis", addr, "-redis-prefix", "app:"}
	code, out, errs := runCLI(t, args...)
	if code != 3 || !strings.Contains(errs, "3 drifts found (tally check -repair fixes them)") || !strings.Contains(out, "3 drifts, 0 repaired") {
		t.Fatalf("check: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	for _, d := range drifts {
		if !strings.Contains(out, d+"\n") {
			t.Errorf("check does not print %q:\n%s", d, out)
		}
	}
	code, out, errs = runCLI(t, append(args, "-repair")...)
	if code != 4 || !strings.Contains(errs, "3 drifts found and repaired") || !strings.Contains(out, "3 drifts, 3 repaired") {
		t.Fatalf("check -repair: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	for _, d := range drifts {
		if !strings.Contains(out, d+" (repaired)\n") {
			t.Errorf("check -repair does not print %q repaired:\n%s", d, out)
		}
	}
	if code, out, errs := runCLI(t, args...); code != 0 || !strings.Contains(out, "0 drifts") {
		t.Fatalf("check after repair: exit %d\n%s\n%s", code, out, errs)
	}
	// A prefix that names no data set (a typo) is refused, and left
	// without a key.
	if code, _, errs := runCLI(t, "check", "-redis", addr, "-redis-prefix", "other:"); code != 1 || !strings.Contains(errs, "no Tally keyspace") {
		t.Fatalf("check of an empty keyspace: exit %d\n%s", code, errs)
	}
	if keys, _ := rc.Keys(t.Context(), "other:*").Result(); len(keys) != 0 {
		t.Fatalf("check of an empty keyspace wrote %v", keys)
	}
}
