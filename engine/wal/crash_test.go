package wal

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

const (
	crashDirEnv  = "TALLY_WAL_CRASH_DIR"
	crashModeEnv = "TALLY_WAL_CRASH_SYNC"
	crashTagEnv  = "TALLY_WAL_CRASH_TAG"
)

// TestCrashKill9 re-runs the test binary as a child that appends from many
// goroutines and prints every acknowledged index, kill -9s it at a random
// moment, and checks that every acknowledged record survived. Rounds reuse
// the directory, so each one also recovers whatever the previous kill left.
func TestCrashKill9(t *testing.T) {
	if dir := os.Getenv(crashDirEnv); dir != "" {
		crashChild(dir)
		return
	}
	if testing.Short() {
		t.Skip("spawns processes")
	}
	dir := t.TempDir()
	acked := map[uint64]string{}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 9))
	for round := range 6 {
		mode := []string{"always", "batch"}[round%2]
		before := len(acked)
		runCrashRound(t, dir, mode, round, time.Duration(50+rng.IntN(250))*time.Millisecond, acked)
		if len(acked) == before {
			t.Fatalf("round %d: the child acknowledged nothing", round)
		}

		l := mustOpen(t, dir, Options{})
		n := uint64(0)
		err := l.Replay(1, func(index uint64, payload []byte) error {
			n++
			if index != n {
				return fmt.Errorf("record %d has index %d", n, index)
			}
			if want, ok := acked[index]; ok && want != string(payload) {
				return fmt.Errorf("index %d holds %q, acknowledged as %q", index, payload, want)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		for idx := range acked {
			if idx > n {
				t.Fatalf("round %d (%s): acknowledged record %d lost; log ends at %d", round, mode, idx, n)
			}
		}
		t.Logf("round %d (%s): %d acknowledged so far, log holds %d, %d segments", round, mode, len(acked), n, len(segmentFiles(t, dir)))
		mustClose(t, l)
	}
}

func runCrashRound(t *testing.T, dir, mode string, round int, after time.Duration, acked map[uint64]string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashKill9$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashDirEnv+"="+dir, crashModeEnv+"="+mode, crashTagEnv+"="+strconv.Itoa(round))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{})
	lines := make(chan map[uint64]string, 1)
	go func() {
		got := map[uint64]string{}
		r := bufio.NewReader(out)
		for {
			// Only a line with its newline is complete: the kill can cut
			// the last one short (bufio.Scanner would hand that fragment
			// back as a line, a payload the child never acknowledged).
			line, err := r.ReadString('\n')
			if err != nil {
				break
			}
			f := strings.Fields(line)
			switch {
			case len(f) == 1 && f[0] == "ready":
				close(ready)
			case len(f) == 3 && f[0] == "ack":
				idx, err := strconv.ParseUint(f[1], 10, 64)
				if err == nil {
					got[idx] = f[2]
				}
			}
		}
		lines <- got
	}()
	select {
	case <-ready:
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		t.Fatal("crash child did not start")
	}
	time.Sleep(after)
	if err := cmd.Process.Kill(); err != nil { // SIGKILL: no deferred cleanup runs
		t.Fatal(err)
	}
	cmd.Wait()
	for idx, p := range <-lines {
		acked[idx] = p
	}
}

// crashChild appends until it is killed; it never returns normally.
func crashChild(dir string) {
	mode, err := ParseSyncMode(os.Getenv(crashModeEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	l, err := Open(dir, Options{Sync: mode, BatchWindow: 2 * time.Millisecond, SegmentBytes: 64 << 10})
	if err != nil {
		fmt.Fprintln(os.Stderr, "crash child:", err)
		os.Exit(2)
	}
	tag := os.Getenv(crashTagEnv)
	var outMu sync.Mutex
	fmt.Println("ready")
	for g := range 16 {
		go func() {
			for i := 0; ; i++ {
				p := fmt.Sprintf("r%s-g%d-%d-%s", tag, g, i, strings.Repeat("p", i%150))
				idx, err := l.Append([]byte(p))
				if err != nil {
					fmt.Fprintln(os.Stderr, "crash child:", err)
					os.Exit(2)
				}
				outMu.Lock()
				fmt.Printf("ack %d %s\n", idx, p)
				outMu.Unlock()
			}
		}()
	}
	time.Sleep(30 * time.Second) // the parent kills long before this
	os.Exit(3)
}
