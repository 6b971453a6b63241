package embedded

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/wal"
)

// mountTmpfs mounts a tmpfs of the given size, a real file system that
// really fills up and really goes read-only. It needs root (or a user
// namespace allowing mounts); without it the test is skipped.
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs (needs root): %v %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", "-l", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v %s", dir, err, out)
		}
	})
	return dir
}

func remount(t *testing.T, dir, opts string) {
	t.Helper()
	if out, err := exec.Command("mount", "-o", "remount,"+opts, dir).CombinedOutput(); err != nil {
		t.Fatalf("remount %s: %v %s", opts, err, out)
	}
}

func checkCannotWrite(t *testing.T, err error) {
	t.Helper()
	if !errors.Is(err, engine.ErrUnavailable) || !strings.Contains(err.Error(), "cannot write") {
		t.Fatalf("mutation error %v, want ErrUnavailable saying the store cannot write", err)
	}
}

// TestDiskFull fills a real file system under a running engine: the
// mutation that hits the full disk and every later one fail with a clear
// error, reads keep working, a snapshot attempt fails harmlessly, and after
// a restart exactly the acknowledged mutations are there.
func TestDiskFull(t *testing.T) {
	mnt := mountTmpfs(t, "256k")
	dir := filepath.Join(mnt, "data")
	opts := Options{Dir: dir, Sync: wal.SyncAlways, SweepInterval: -1, Logger: quiet,
		SnapshotInterval: -1, SnapshotLogBytes: -1}
	e := openE(t, opts)
	post, err := e.CreatePost(bg, 1, 0, "")
	ok(t, err)
	acked := int64(0)
	var failure error
	for i := range 1_000_000 {
		if err := e.Like(bg, engine.UserID(100+i), post); err != nil {
			failure = err
			break
		}
		acked++
	}
	if failure == nil {
		t.Fatal("the disk never filled")
	}
	checkCannotWrite(t, failure)
	t.Logf("%d likes acknowledged before the disk filled: %v", acked, failure)
	start := time.Now()
	checkCannotWrite(t, e.Like(bg, 1, post))
	_, err = e.CreatePost(bg, 1, 0, "k")
	checkCannotWrite(t, err)
	if d := time.Since(start); d > time.Second {
		t.Fatalf("a failed engine took %v to refuse", d)
	}
	if err := e.Ready(bg); err == nil {
		t.Fatal("Ready after the disk filled")
	}
	// Reads keep working. The like whose record failed was applied in
	// memory before its write failed, so it may show until the restart.
	cs, err := e.Counts(bg, []engine.PostID{post})
	ok(t, err)
	if cs[0].Likes < acked || cs[0].Likes > acked+1 {
		t.Fatalf("%d likes read, %d acknowledged", cs[0].Likes, acked)
	}
	if _, err := e.Unread(bg, 1); err != nil {
		t.Fatalf("Unread on a full disk: %v", err)
	}
	if err := e.Snapshot(bg); err == nil {
		t.Fatal("a snapshot succeeded on a failed log")
	}
	e.Close()

	remount(t, mnt, "size=16m")
	e2 := openE(t, opts)
	cs, err = e2.Counts(bg, []engine.PostID{post})
	ok(t, err)
	if cs[0].Likes != acked {
		t.Fatalf("after restart %d likes, %d were acknowledged", cs[0].Likes, acked)
	}
	ok(t, e2.Like(bg, 1, post))
}

// TestSnapshotDiskFull: a snapshot that does not fit fails, leaves no file
// behind and does not disturb the engine, whose log still has room; once
// space is freed the next snapshot succeeds.
func TestSnapshotDiskFull(t *testing.T) {
	mnt := mountTmpfs(t, "8m")
	dir := filepath.Join(mnt, "data")
	opts := Options{Dir: dir, Sync: wal.SyncAlways, SweepInterval: -1, Logger: quiet,
		SnapshotInterval: -1, SnapshotLogBytes: -1}
	e := openE(t, opts)
	rows := make([]engine.ImportRow, 0, MaxImportBatch)
	for i := range 30000 {
		rows = append(rows, engine.ImportRow{Post: engine.PostID(1<<40 + i*7919), Author: engine.UserID(i%500 + 1),
			Counts: engine.Counts{Likes: int64(i % 97), Views: int64(i)}})
		if len(rows) == cap(rows) {
			ok(t, e.Import(bg, rows))
			rows = rows[:0]
		}
	}
	// Leave about 96 KiB: room for log records, not for the snapshot.
	var st syscall.Statfs_t
	ok(t, syscall.Statfs(mnt, &st))
	free := int64(st.Bavail) * st.Bsize
	filler := filepath.Join(mnt, "filler")
	ok(t, os.WriteFile(filler, make([]byte, free-96<<10), 0o644))
	err := e.Snapshot(bg)
	if err == nil {
		t.Fatal("a snapshot fitted in 96 KiB")
	}
	t.Logf("snapshot on a full disk: %v", err)
	entries, _ := os.ReadDir(dir)
	for _, en := range entries {
		if strings.HasPrefix(en.Name(), "snap-") {
			t.Fatalf("left behind %s", en.Name())
		}
	}
	p, err := e.CreatePost(bg, 7, 0, "")
	ok(t, err)
	ok(t, e.Like(bg, 8, p))
	ok(t, e.Ready(bg))
	ok(t, os.Remove(filler))
	ok(t, e.Snapshot(bg))
	state := dumpOf(e)
	ok(t, e.Close())
	if reopenState(t, dir) != state {
		t.Fatal("state differs after restart")
	}
}

// TestReadOnlyDir: an engine opened on a data directory it cannot write
// serves every read from the recovered state and refuses every mutation
// with a clear error.
func TestReadOnlyDir(t *testing.T) {
	mnt := mountTmpfs(t, "16m")
	dir := filepath.Join(mnt, "data")
	clk := newClock()
	opts := durableOpts(dir, clk)
	e := openE(t, opts)
	workload(t, e, clk, 60, 600)
	ok(t, e.Snapshot(bg))
	workload(t, e, clk, 61, 300) // a log tail too
	post, err := e.CreatePost(bg, 1, 0, "")
	ok(t, err)
	ok(t, e.Like(bg, 2, post))
	state := dumpOf(e)
	ok(t, e.Close())

	remount(t, mnt, "ro")
	ro := openE(t, opts)
	if got := dumpOf(ro); got != state {
		t.Fatal("read-only engine recovered a different state")
	}
	if err := ro.Ready(bg); err == nil || !strings.Contains(err.Error(), "cannot write") {
		t.Fatalf("Ready on a read-only directory: %v", err)
	}
	cs, err := ro.Counts(bg, []engine.PostID{post})
	ok(t, err)
	liked, err := ro.Liked(bg, 2, []engine.PostID{post})
	ok(t, err)
	if cs[0].Likes != 1 || !liked[0] {
		t.Fatalf("reads on a read-only directory: %+v %v", cs, liked)
	}
	if _, err := ro.Unread(bg, 99); err != nil {
		t.Fatalf("Unread: %v", err)
	}
	checkCannotWrite(t, ro.Like(bg, 3, post))
	_, err = ro.CreatePost(bg, 1, 0, "")
	checkCannotWrite(t, err)
	if err := ro.Snapshot(bg); err == nil {
		t.Fatal("Snapshot on a read-only directory")
	}
	if got := dumpOf(ro); got != state {
		t.Fatal("a refused mutation changed the state")
	}
	// A backup of the read-only directory stages outside it.
	var buf strings.Builder
	if _, err := backupDir(bg, dir, &buf); err != nil {
		t.Fatalf("backupDir of a read-only directory: %v", err)
	}
	ok(t, ro.Close())

	remount(t, mnt, "rw")
	if reopenState(t, dir) != state {
		t.Fatal("state differs once writable again")
	}
}
