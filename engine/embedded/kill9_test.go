package embedded

import (
	"bufio"
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/enginetest"
	"github.com/tally-dev/tally/engine/wal"
)

// The kill -9 test runs the engine in a child process (this test binary,
// re-run with TALLY_KILL9_DIR set) that snapshots every few milliseconds
// while it likes and comments as fast as it can, printing each mutation
// before it tries it and after it is acknowledged. The parent kills it at
// random moments — mid-snapshot, mid-rename, mid-truncation — restarts it,
// and finally checks that every acknowledged mutation is there, that
// comments retried with their idempotency keys after a crash counted
// exactly once, and that the counts agree with the like sets.

const (
	kill9Posts  = 16
	kill9Author = 7
)

func kill9Opts(dir string) Options {
	return Options{Dir: dir, Sync: wal.SyncNone, SweepInterval: -1, Logger: quiet,
		SnapshotInterval: 5 * time.Millisecond, SnapshotLogBytes: 64 << 10, LogSegmentBytes: 32 << 10}
}

// TestKill9Child is the child; it does nothing in a normal test run.
func TestKill9Child(t *testing.T) {
	dir := os.Getenv("TALLY_KILL9_DIR")
	if dir == "" {
		t.Skip("run by TestKill9DuringSnapshots")
	}
	e, err := Open(kill9Opts(dir))
	if err != nil {
		fmt.Printf("open-error %v\n", err)
		os.Exit(3)
	}
	out := bufio.NewWriter(os.Stdout)
	say := func(format string, args ...any) {
		fmt.Fprintf(out, format+"\n", args...)
		out.Flush()
	}
	posts := make([]engine.PostID, kill9Posts)
	for i := range posts {
		p, err := e.CreatePost(bg, kill9Author, 0, fmt.Sprint("post-", i))
		if err != nil {
			say("error %v", err)
			os.Exit(3)
		}
		posts[i] = p
	}
	say("posts %s", strings.Trim(fmt.Sprint(posts), "[]"))
	// Comments left unacknowledged by the last crash are retried first,
	// with the same keys: each must count once whether or not it had been
	// applied before the crash.
	for _, key := range strings.Fields(os.Getenv("TALLY_KILL9_RETRY")) {
		var v, p int
		fmt.Sscanf(key, "c-%d-%d", &v, &p)
		if err := e.Comment(bg, engine.UserID(v), posts[p], 0, nil, key); err != nil {
			say("error %v", err)
			os.Exit(3)
		}
		say("ack comment %s", key)
	}
	if os.Getenv("TALLY_KILL9_FINAL") != "" {
		e.Close()
		say("done")
		return
	}
	base := 1 + rand.IntN(1<<30)*100
	for i := 0; ; i++ {
		v, p := base+i, i%kill9Posts
		say("try like %d %d", v, p)
		if err := e.Like(bg, engine.UserID(v), posts[p]); err != nil {
			say("error %v", err)
			os.Exit(3)
		}
		say("ack like %d %d", v, p)
		if i%3 == 0 {
			key := fmt.Sprintf("c-%d-%d", v, p)
			say("try comment %s", key)
			if err := e.Comment(bg, engine.UserID(v), posts[p], 0, nil, key); err != nil {
				say("error %v", err)
				os.Exit(3)
			}
			say("ack comment %s", key)
		}
	}
}

func TestKill9DuringSnapshots(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	dir := t.TempDir()
	type like struct{ v, p int }
	ackedLikes := map[like]bool{}
	triedLikes := map[like]bool{}
	ackedComments := map[string]bool{}
	pending := map[string]bool{}
	run := func(final bool, killAfter time.Duration) {
		var retry []string
		for k := range pending {
			retry = append(retry, k)
		}
		env := []string{"TALLY_KILL9_DIR=" + dir, "TALLY_KILL9_RETRY=" + strings.Join(retry, " ")}
		if final {
			env = append(env, "TALLY_KILL9_FINAL=1")
		}
		runKill9Child(t, "TestKill9Child", env, final, killAfter, func(line string, f []string) {
			switch {
			case len(f) == 4 && f[1] == "like":
				var l like
				fmt.Sscan(f[2], &l.v)
				fmt.Sscan(f[3], &l.p)
				triedLikes[l] = true
				if f[0] == "ack" {
					ackedLikes[l] = true
				}
			case len(f) == 3 && f[1] == "comment":
				if f[0] == "ack" {
					ackedComments[f[2]] = true
					delete(pending, f[2])
				} else {
					pending[f[2]] = true
				}
			}
		})
	}
	rounds := 6
	for r := range rounds {
		run(false, time.Duration(150+rand.IntN(400))*time.Millisecond)
		t.Logf("round %d: %d likes and %d comments acknowledged so far, %d snapshots on disk", r,
			len(ackedLikes), len(ackedComments), len(snapshots(t, dir)))
	}
	run(true, 0)
	if len(pending) != 0 {
		t.Fatalf("%d comments never acknowledged", len(pending))
	}

	e := openE(t, durableOpts(dir, nil))
	posts := make([]engine.PostID, kill9Posts)
	for i := range posts {
		p, err := e.CreatePost(bg, kill9Author, 0, fmt.Sprint("post-", i))
		ok(t, err)
		posts[i] = p
	}
	counts, err := e.Counts(bg, posts)
	ok(t, err)
	likedPer := make([]int64, kill9Posts)
	for l := range triedLikes {
		liked, err := e.Liked(bg, engine.UserID(l.v), []engine.PostID{posts[l.p]})
		ok(t, err)
		if liked[0] {
			likedPer[l.p]++
		} else if ackedLikes[l] {
			t.Fatalf("acknowledged like %+v lost", l)
		}
	}
	commentsPer := make([]int64, kill9Posts)
	for k := range ackedComments {
		var v, p int
		fmt.Sscanf(k, "c-%d-%d", &v, &p)
		commentsPer[p]++
	}
	var total int64
	for i, c := range counts {
		if c.Likes != likedPer[i] {
			t.Fatalf("post %d: %d likes counted, %d users like it", i, c.Likes, likedPer[i])
		}
		if c.Comments != commentsPer[i] {
			t.Fatalf("post %d: %d comments counted, %d distinct keys acknowledged", i, c.Comments, commentsPer[i])
		}
		total += c.Likes
	}
	u, err := e.Unread(bg, kill9Author)
	ok(t, err)
	if u.Likes != total {
		t.Fatalf("author's unread likes %d, %d likes counted", u.Likes, total)
	}
	enginetest.CheckClean(t, e)
	entries, _ := os.ReadDir(dir)
	for _, en := range entries {
		if strings.HasSuffix(en.Name(), ".corrupt") {
			t.Fatalf("a snapshot was found corrupt after kill -9: %s", en.Name())
		}
	}
	t.Logf("%d likes, %d comments; files: %s", total, len(ackedComments), names(entries))
}

func names(entries []os.DirEntry) string {
	var out []string
	for _, e := range entries {
		out = append(out, filepath.Base(e.Name()))
	}
	return strings.Join(out, " ")
}

// runKill9Child runs the test named child in a child process with env
// added, kills it with SIGKILL after killAfter unless final, and calls
// line for every complete line it prints, with its fields. Only a line
// with its newline is complete: the kill can cut the last one short, and
// a cut "ack" line would name the wrong operation. An "error" or
// "open-error" line fails the test, and so does a final child that does
// not exit cleanly.
func runKill9Child(t *testing.T, child string, env []string, final bool, killAfter time.Duration, line func(line string, fields []string)) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+child+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	defer func() {
		if stderr.Len() > 0 {
			t.Logf("child's stderr:\n%s", stderr.String())
		}
	}()
	stdout, err := cmd.StdoutPipe()
	ok(t, err)
	ok(t, cmd.Start())
	if !final {
		timer := time.AfterFunc(killAfter, func() { cmd.Process.Signal(syscall.SIGKILL) })
		defer timer.Stop()
	}
	rd := bufio.NewReader(stdout)
	for {
		l, err := rd.ReadString('\n')
		if err != nil {
			break
		}
		f := strings.Fields(l)
		if len(f) > 0 && (f[0] == "error" || f[0] == "open-error") {
			t.Fatalf("child: %s", l)
		}
		line(l, f)
	}
	if err := cmd.Wait(); final && err != nil {
		t.Fatalf("final child: %v", err)
	}
}
