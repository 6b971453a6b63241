package cold

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/sealed"
)

const crashPosts = 30000

// generation builds window number g: every post's likes are g, so a file
// mixing two generations, or a partial one, is detectable.
func generation(t testing.TB, g int) *sealed.Window {
	w, err := sealed.Build(func(yield func(uint64, engine.Counts) bool) {
		for i := range crashPosts {
			if !yield(uint64(i)*7919+1, engine.Counts{Likes: int64(g), Views: int64(i + 1)}) {
				return
			}
		}
	}, sealed.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// TestCrashDuringCreate kills (SIGKILL) a process that rewrites a window
// file over and over, at random moments, and checks that the file is
// always one complete generation and that CleanTemp clears the debris.
func TestCrashDuringCreate(t *testing.T) {
	if path := os.Getenv("TALLY_COLD_CRASH_CHILD"); path != "" {
		g, _ := strconv.Atoi(os.Getenv("TALLY_COLD_CRASH_GEN"))
		for ; ; g++ {
			if err := writeWindow(path, generation(t, g)); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(3)
			}
		}
	}
	if testing.Short() {
		t.Skip("spawns processes")
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "w.win")
	if err := writeWindow(path, generation(t, 0)); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	debris := 0
	for round := 1; round <= 8; round++ {
		cmd := exec.Command(os.Args[0], "-test.run=^TestCrashDuringCreate$")
		cmd.Env = append(os.Environ(), "TALLY_COLD_CRASH_CHILD="+path,
			"TALLY_COLD_CRASH_GEN="+strconv.Itoa(round*1000))
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(20+rng.IntN(200)) * time.Millisecond)
		cmd.Process.Kill()
		cmd.Wait()

		f, err := Open(path, nil)
		if err != nil {
			t.Fatalf("round %d: the file does not open after kill -9: %v", round, err)
		}
		if err := f.Verify(); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if f.Len() != crashPosts {
			t.Fatalf("round %d: %d posts, want %d", round, f.Len(), crashPosts)
		}
		it := f.Iter()
		it.Next()
		g := it.Counts().Likes
		for it.Next() {
			if it.Counts().Likes != g {
				t.Fatalf("round %d: generations %d and %d mixed in one file", round, g, it.Counts().Likes)
			}
		}
		f.Close()
		n, err := CleanTemp(dir)
		if err != nil {
			t.Fatal(err)
		}
		debris += n
		if left, _ := os.ReadDir(dir); len(left) != 1 {
			t.Fatalf("round %d: %d files after CleanTemp", round, len(left))
		}
	}
	t.Logf("8 kills, %d temporary files cleaned", debris)
}
