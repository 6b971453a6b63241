package tier

import (
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/snowflake"
)

// crashPosts posts in one window, crashPerMilli to a millisecond.
const (
	crashPosts    = 30000
	crashPerMilli = 30
)

// writeGeneration writes window 0's file at path with generation g: every
// post's likes are g, so a file mixing two generations, or a partial
// one, is detectable. It writes as a Derived table does, with no fsync:
// a kill leaves the page cache, so the rename alone must keep every name
// whole (what the fsyncs add is for power loss, which a kill is not).
func writeGeneration(path string, g int) error {
	return createFile(path, false, func(w io.Writer) error {
		pw := newPostWriter(w)
		for i := range crashPosts {
			p := Post{Author: uint64(i + 1), Counts: engine.Counts{Likes: int64(g), Views: int64(i + 1)}}
			r := p.row()
			if err := pw.add(snowflake.Make(testEpoch.UnixMilli()+int64(i/crashPerMilli), 0, uint64(i%crashPerMilli)), &r); err != nil {
				return err
			}
		}
		return pw.close()
	})
}

// TestCrashDuringCreate kills (SIGKILL) a process that rewrites a window
// file over and over, at random moments, and checks that the file is
// always one complete generation, and that a new table in the directory
// clears the temporary files the kills left.
func TestCrashDuringCreate(t *testing.T) {
	if path := os.Getenv("TALLY_TIER_CRASH_CHILD"); path != "" {
		g, _ := strconv.Atoi(os.Getenv("TALLY_TIER_CRASH_GEN"))
		for ; ; g++ {
			if err := writeGeneration(path, g); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(3)
			}
		}
	}
	if testing.Short() {
		t.Skip("spawns processes")
	}
	dir := t.TempDir()
	opts := testOpts(dir)
	num, _, _ := (snowflake.Windows{Millis: testWindow}).Of(snowflake.Make(testEpoch.UnixMilli(), 0, 0))
	name := fileName(opts.Prefix, num, 0)
	path := filepath.Join(dir, name)
	if err := writeGeneration(path, 0); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	debris := 0
	for round := 1; round <= 8; round++ {
		cmd := exec.Command(os.Args[0], "-test.run=^TestCrashDuringCreate$")
		cmd.Env = append(os.Environ(), "TALLY_TIER_CRASH_CHILD="+path, "TALLY_TIER_CRASH_GEN="+strconv.Itoa(round*1000))
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(20+rng.IntN(200)) * time.Millisecond)
		cmd.Process.Kill()
		cmd.Wait()

		if ents, _ := os.ReadDir(dir); len(ents) > 1 {
			debris += len(ents) - 1
		}
		p, err := NewPosts(opts) // clears what the kill left
		if err != nil {
			t.Fatal(err)
		}
		if left, _ := os.ReadDir(dir); len(left) != 1 {
			t.Fatalf("round %d: %d files after a new table, want the window's", round, len(left))
		}
		f, err := p.openCold(name)
		if err != nil {
			t.Fatalf("round %d: the file does not open after kill -9: %v", round, err)
		}
		likes := int64(-1)
		err = p.eachRow(f, 0, func(id uint64, r *postRow) error {
			if likes >= 0 && int64(r[1]) != likes {
				return fmt.Errorf("generations %d and %d mixed in one file", likes, r[1])
			}
			likes = int64(r[1])
			return nil
		})
		if err != nil || f.records() != crashPosts {
			t.Fatalf("round %d: %d posts (%v), want %d of one generation", round, f.records(), err, crashPosts)
		}
		f.close()
	}
	t.Logf("8 kills, %d temporary files cleared", debris)
}
