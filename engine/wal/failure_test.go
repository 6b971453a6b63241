package wal

import (
	"errors"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// faultyFile forwards to a real segment file until armed, then writes only
// the first half of a batch (as a disk filling up mid-write does) and
// fails, or fails fsync.
type faultyFile struct {
	*os.File
	mu        sync.Mutex
	failWrite bool
	failSync  bool
}

func (f *faultyFile) arm(write, sync bool) {
	f.mu.Lock()
	f.failWrite, f.failSync = write, sync
	f.mu.Unlock()
}

func (f *faultyFile) Write(p []byte) (int, error) {
	f.mu.Lock()
	fail := f.failWrite
	f.mu.Unlock()
	if !fail {
		return f.File.Write(p)
	}
	n, _ := f.File.Write(p[:len(p)/2])
	return n, syscall.ENOSPC
}

func (f *faultyFile) Sync() error {
	f.mu.Lock()
	fail := f.failSync
	f.mu.Unlock()
	if fail {
		return syscall.EIO
	}
	return f.File.Sync()
}

// injectFile swaps the active segment's file for what wrap makes of it.
func injectFile(l *Log, wrap func(*os.File) writableFile) {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	l.f = wrap(l.f.(*os.File))
}

func checkFailedClosed(t *testing.T, l *Log, firstErr error, errno error) {
	t.Helper()
	if !errors.Is(firstErr, ErrWriteFailed) || !errors.Is(firstErr, errno) {
		t.Fatalf("Append error %v, want ErrWriteFailed wrapping %v", firstErr, errno)
	}
	if !strings.Contains(firstErr.Error(), "cannot write") {
		t.Fatalf("message does not say the log cannot write: %v", firstErr)
	}
	for range 3 {
		start := time.Now()
		_, err := l.AppendAsync([]byte("more"))
		if !errors.Is(err, ErrWriteFailed) || err.Error() != firstErr.Error() {
			t.Fatalf("later AppendAsync: %v, want the same failure %v", err, firstErr)
		}
		if _, err := l.Append([]byte("more")); !errors.Is(err, ErrWriteFailed) {
			t.Fatalf("later Append: %v", err)
		}
		if d := time.Since(start); d > 100*time.Millisecond {
			t.Fatalf("failed log took %v to refuse", d)
		}
	}
	if _, err := l.Rotate(); !errors.Is(err, ErrWriteFailed) {
		t.Fatalf("Rotate on a failed log: %v", err)
	}
}

func TestWriteFailureDiskFull(t *testing.T) {
	full, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
	if err != nil {
		t.Skip("no /dev/full:", err)
	}
	dir := t.TempDir()
	var logs logBuf
	l := mustOpen(t, dir, Options{Logger: logs.logger()})
	appendN(t, l, 1, 5)
	// A real ENOSPC from the kernel.
	injectFile(l, func(f *os.File) writableFile { f.Close(); return full })

	_, err = l.Append([]byte("does not fit"))
	checkFailedClosed(t, l, err, syscall.ENOSPC)
	if !strings.Contains(logs.String(), "cannot write") {
		t.Fatalf("failure not logged: %q", logs.String())
	}
	// What was durable can still be read.
	checkRecords(t, replayAll(t, l, 1), 1, 5)
	if err := l.Close(); !errors.Is(err, ErrWriteFailed) {
		t.Fatalf("Close of a failed log: %v, want the failure", err)
	}
	reopenKeeps(t, dir, 5, nil)
}

func TestWriteFailureHalfWrittenBatch(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{})
	appendN(t, l, 1, 5)
	var ff *faultyFile
	injectFile(l, func(f *os.File) writableFile { ff = &faultyFile{File: f}; return ff })
	ff.arm(true, false)

	_, err := l.Append(payloadFor(6))
	checkFailedClosed(t, l, err, syscall.ENOSPC)
	checkRecords(t, replayAll(t, l, 1), 1, 5)
	l.Close()

	// Half a record is on disk; the next Open cuts it as a torn tail.
	info, _ := os.Stat(segmentPath(dir, 1))
	offs := recordOffsets(t, segmentPath(dir, 1))
	if info.Size() <= offs[len(offs)-1] {
		t.Fatal("the fault left no half-written record behind; the test proves nothing")
	}
	var logs logBuf
	reopenKeeps(t, dir, 5, &logs)
	if !strings.Contains(logs.String(), "torn") {
		t.Fatalf("half-written batch not reported as torn: %q", logs.String())
	}
}

func TestWriteFailureFsync(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{})
	appendN(t, l, 1, 3)
	var ff *faultyFile
	injectFile(l, func(f *os.File) writableFile { ff = &faultyFile{File: f}; return ff })
	ff.arm(false, true)
	_, err := l.Append([]byte("written, never synced"))
	checkFailedClosed(t, l, err, syscall.EIO)
	if err := l.Wait(4); !errors.Is(err, ErrWriteFailed) {
		t.Fatalf("Wait for the unsynced record: %v, want ErrWriteFailed", err)
	}
	checkRecords(t, replayAll(t, l, 1), 1, 3)
	l.Close()
}

// Many appenders when the disk fills: every Append that returned nil must
// be in the log after reopening, whatever failed around it.
func TestWriteFailureUnderConcurrency(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{})
	var ff *faultyFile
	injectFile(l, func(f *os.File) writableFile { ff = &faultyFile{File: f}; return ff })

	var mu sync.Mutex
	acked := map[uint64]string{}
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				p := string(payloadFor(g*1000 + i))
				idx, err := l.Append([]byte(p))
				if err != nil {
					if !errors.Is(err, ErrWriteFailed) {
						t.Errorf("Append: %v", err)
					}
					return
				}
				mu.Lock()
				acked[idx] = p
				mu.Unlock()
			}
		}()
	}
	time.Sleep(50 * time.Millisecond)
	ff.arm(true, false)
	wg.Wait()
	l.Close()

	l = mustOpen(t, dir, Options{})
	defer mustClose(t, l)
	got := map[uint64]string{}
	for _, r := range replayAll(t, l, 1) {
		got[r.index] = r.payload
	}
	if len(acked) == 0 {
		t.Fatal("nothing was acknowledged before the fault")
	}
	for idx, p := range acked {
		if got[idx] != p {
			t.Fatalf("acknowledged record %d lost or changed after the disk filled", idx)
		}
	}
	t.Logf("%d acknowledged, %d recovered", len(acked), len(got))
}

func TestReadOnlyDirectory(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root ignores directory permissions; the injected-fault tests cover this path")
	}
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{})
	appendN(t, l, 1, 3)
	if err := os.Chmod(dir, 0o555); err != nil {
		t.Fatal(err)
	}
	defer os.Chmod(dir, 0o755)
	_, err := l.Rotate() // creating the next segment needs the directory
	checkFailedClosed(t, l, err, syscall.EACCES)
	checkRecords(t, replayAll(t, l, 1), 1, 3)
	l.Close()
}

// gatedFile holds every write until the gate opens, standing in for a disk
// slower than the appenders.
type gatedFile struct {
	*os.File
	gate chan struct{}
}

func (f *gatedFile) Write(p []byte) (int, error) {
	<-f.gate
	return f.File.Write(p)
}

func TestAppendAsyncBackpressure(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{Sync: SyncNone})
	gate := make(chan struct{})
	injectFile(l, func(f *os.File) writableFile { return &gatedFile{File: f, gate: gate} })
	l.mu.Lock()
	l.maxQueued = 1 << 10
	l.mu.Unlock()

	// The first record goes to the (stuck) flusher, the next ones fill the
	// queue past its limit, and then AppendAsync must block.
	done := make(chan int)
	go func() {
		n := 0
		for i := 1; i <= 200; i++ {
			if _, err := l.AppendAsync(payloadFor(i)); err != nil {
				t.Error(err)
				break
			}
			n++
		}
		done <- n
	}()
	select {
	case n := <-done:
		t.Fatalf("%d records queued behind a stuck disk without blocking", n)
	case <-time.After(100 * time.Millisecond):
	}
	close(gate)
	if n := <-done; n != 200 {
		t.Fatalf("queued %d records, want 200", n)
	}
	if err := l.Wait(200); err != nil {
		t.Fatal(err)
	}
	checkRecords(t, replayAll(t, l, 1), 1, 200)
	mustClose(t, l)
}
