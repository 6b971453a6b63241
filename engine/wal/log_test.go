package wal

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestRoundTripAcrossRotation(t *testing.T) {
	for _, mode := range []SyncMode{SyncAlways, SyncBatch, SyncNone} {
		t.Run(mode.String(), func(t *testing.T) {
			dir := t.TempDir()
			opts := Options{Sync: mode, SegmentBytes: 2 << 10, BatchWindow: time.Millisecond}
			l := mustOpen(t, dir, opts)
			appendN(t, l, 1, 300)
			if got := l.LastIndex(); got != 300 {
				t.Fatalf("LastIndex = %d, want 300", got)
			}
			checkRecords(t, replayAll(t, l, 1), 1, 300)
			checkRecords(t, replayAll(t, l, 123), 123, 300)
			mustClose(t, l)

			files := segmentFiles(t, dir)
			if len(files) < 5 {
				t.Fatalf("expected rotation into several segments, got %d files", len(files))
			}
			var onDisk int64
			for _, f := range files {
				info, _ := os.Stat(f)
				onDisk += info.Size()
			}

			l = mustOpen(t, dir, opts)
			defer mustClose(t, l)
			if l.Size() != onDisk {
				t.Fatalf("Size = %d, files hold %d bytes", l.Size(), onDisk)
			}
			checkRecords(t, replayAll(t, l, 0), 1, 300)
			appendN(t, l, 301, 50)
			checkRecords(t, replayAll(t, l, 290), 290, 350)
		})
	}
}

func TestRotateAndTruncateBefore(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{})
	defer func() { mustClose(t, l) }()

	appendN(t, l, 1, 10)
	first, err := l.Rotate()
	if err != nil || first != 11 {
		t.Fatalf("Rotate = %d, %v; want 11", first, err)
	}
	// Rotating an empty segment keeps it.
	if again, err := l.Rotate(); err != nil || again != 11 {
		t.Fatalf("second Rotate = %d, %v; want 11", again, err)
	}
	appendN(t, l, 11, 10)
	if _, err := l.Rotate(); err != nil {
		t.Fatal(err)
	}
	appendN(t, l, 21, 5)
	if n := len(segmentFiles(t, dir)); n != 3 {
		t.Fatalf("%d segments, want 3", n)
	}

	before := l.Size()
	// Segment 1..10 is wholly below 15; segment 11..20 is not.
	if err := l.TruncateBefore(15); err != nil {
		t.Fatal(err)
	}
	if got := l.FirstIndex(); got != 11 {
		t.Fatalf("FirstIndex = %d, want 11", got)
	}
	if l.Size() >= before {
		t.Fatalf("Size did not shrink: %d -> %d", before, l.Size())
	}
	if _, err := os.Stat(segmentPath(dir, 1)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("segment 1 still there: %v", err)
	}
	err = l.Replay(5, func(uint64, []byte) error { return nil })
	if !errors.Is(err, ErrOutOfRange) {
		t.Fatalf("Replay of truncated records: %v, want ErrOutOfRange", err)
	}
	checkRecords(t, replayAll(t, l, 11), 11, 25)

	// Everything covered: only the active segment survives.
	if _, err := l.Rotate(); err != nil {
		t.Fatal(err)
	}
	if err := l.TruncateBefore(26); err != nil {
		t.Fatal(err)
	}
	if n := len(segmentFiles(t, dir)); n != 1 {
		t.Fatalf("%d segments after full truncation, want 1", n)
	}
	if got := l.FirstIndex(); got != 26 {
		t.Fatalf("FirstIndex = %d, want 26", got)
	}
	if l.Size() != headerSize {
		t.Fatalf("Size = %d, want %d", l.Size(), headerSize)
	}
	if recs := replayAll(t, l, 26); len(recs) != 0 {
		t.Fatalf("replayed %d records from an empty log", len(recs))
	}
	mustClose(t, l)

	l = mustOpen(t, dir, Options{})
	if l.LastIndex() != 25 || l.FirstIndex() != 26 {
		t.Fatalf("reopened: LastIndex %d FirstIndex %d, want 25, 26", l.LastIndex(), l.FirstIndex())
	}
	appendN(t, l, 26, 3)
	checkRecords(t, replayAll(t, l, 26), 26, 28)
}

func TestConcurrentAppenders(t *testing.T) {
	const goroutines, each = 64, 500
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{Sync: SyncAlways, SegmentBytes: 256 << 10})

	got := make([][]uint64, goroutines)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				idx, err := l.Append(fmt.Appendf(nil, "g%d-%d", g, i))
				if err != nil {
					t.Errorf("Append: %v", err)
					return
				}
				got[g] = append(got[g], idx)
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}

	owner := make(map[uint64]string, goroutines*each)
	for g, idxs := range got {
		if !slices.IsSorted(idxs) {
			t.Fatalf("goroutine %d got decreasing indices", g)
		}
		for i, idx := range idxs {
			if prev, dup := owner[idx]; dup {
				t.Fatalf("index %d given twice (%s and g%d-%d)", idx, prev, g, i)
			}
			owner[idx] = fmt.Sprintf("g%d-%d", g, i)
		}
	}
	check := func(l *Log) {
		t.Helper()
		n := 0
		err := l.Replay(1, func(index uint64, payload []byte) error {
			n++
			if index != uint64(n) {
				return fmt.Errorf("record %d has index %d", n, index)
			}
			if want := owner[index]; string(payload) != want {
				return fmt.Errorf("index %d holds %q, want %q", index, payload, want)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if n != goroutines*each {
			t.Fatalf("replayed %d records, want %d", n, goroutines*each)
		}
	}
	check(l)
	syncs := l.syncs.Load()
	t.Logf("%d records, %d fsyncs (%.1f records per fsync)", goroutines*each, syncs, float64(goroutines*each)/float64(syncs))
	if syncs > goroutines*each/4 {
		t.Errorf("%d fsyncs for %d concurrent records: group commit is not batching", syncs, goroutines*each)
	}
	mustClose(t, l)
	l = mustOpen(t, dir, Options{})
	defer mustClose(t, l)
	check(l)
}

// The engine's pattern: AppendAsync under its own lock fixes the order,
// Wait after releasing it.
func TestAppendAsyncOrderIsCallOrder(t *testing.T) {
	l := mustOpen(t, t.TempDir(), Options{Sync: SyncBatch, BatchWindow: time.Millisecond})
	defer mustClose(t, l)

	var engineMu sync.Mutex
	var order []uint64 // indices in the order the "engine" applied them
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				engineMu.Lock()
				idx, err := l.AppendAsync(fmt.Appendf(nil, "op %d/%d", g, i))
				if err == nil {
					order = append(order, idx)
				}
				engineMu.Unlock()
				if err != nil {
					t.Error(err)
					return
				}
				if err := l.Wait(idx); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	for k, idx := range order {
		if idx != uint64(k+1) {
			t.Fatalf("call %d got index %d", k+1, idx)
		}
	}
	if err := l.Wait(l.LastIndex() + 1); !errors.Is(err, ErrOutOfRange) {
		t.Fatalf("Wait beyond the last record: %v, want ErrOutOfRange", err)
	}
}

func TestSyncBatchReturnsBeforeFsync(t *testing.T) {
	dir := t.TempDir()
	// An hour-long window: Append must not wait for the fsync.
	l := mustOpen(t, dir, Options{Sync: SyncBatch, BatchWindow: time.Hour})
	appendN(t, l, 1, 20)
	if n := l.syncs.Load(); n != 0 {
		t.Fatalf("%d fsyncs before the batch window elapsed", n)
	}
	mustClose(t, l)
	if n := l.syncs.Load(); n != 1 {
		t.Fatalf("Close did %d fsyncs, want 1", n)
	}

	// A short window: the fsync follows on its own.
	l = mustOpen(t, dir, Options{Sync: SyncBatch, BatchWindow: 5 * time.Millisecond})
	defer mustClose(t, l)
	appendN(t, l, 21, 1)
	deadline := time.Now().Add(5 * time.Second)
	for l.syncs.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no fsync within the batch window")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestSyncAlwaysFsyncsBeforeReturning(t *testing.T) {
	l := mustOpen(t, t.TempDir(), Options{Sync: SyncAlways})
	defer mustClose(t, l)
	for i := 1; i <= 5; i++ {
		appendN(t, l, i, 1)
		if n := l.syncs.Load(); n != int64(i) {
			t.Fatalf("after %d sequential appends, %d fsyncs", i, n)
		}
	}
}

func TestReplayBounds(t *testing.T) {
	l := mustOpen(t, t.TempDir(), Options{Sync: SyncNone})
	defer mustClose(t, l)
	appendN(t, l, 1, 10)

	if recs := replayAll(t, l, 11); len(recs) != 0 {
		t.Fatalf("Replay(LastIndex+1) gave %d records", len(recs))
	}
	if err := l.Replay(12, func(uint64, []byte) error { return nil }); !errors.Is(err, ErrOutOfRange) {
		t.Fatalf("Replay past the end: %v, want ErrOutOfRange", err)
	}
	stop := errors.New("stop")
	n := 0
	err := l.Replay(3, func(index uint64, _ []byte) error {
		n++
		if index == 5 {
			return stop
		}
		return nil
	})
	if err != stop || n != 3 {
		t.Fatalf("Replay with fn error: err %v after %d calls, want stop after 3", err, n)
	}
}

func TestOpenFirstIndex(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{FirstIndex: 1001})
	if l.LastIndex() != 1000 || l.FirstIndex() != 1001 {
		t.Fatalf("LastIndex %d FirstIndex %d, want 1000, 1001", l.LastIndex(), l.FirstIndex())
	}
	idx, err := l.Append([]byte("a"))
	if err != nil || idx != 1001 {
		t.Fatalf("Append = %d, %v; want 1001", idx, err)
	}
	if err := l.Replay(1, func(uint64, []byte) error { return nil }); !errors.Is(err, ErrOutOfRange) {
		t.Fatalf("Replay(1): %v, want ErrOutOfRange", err)
	}
	mustClose(t, l)
	// An existing log ignores FirstIndex.
	l = mustOpen(t, dir, Options{FirstIndex: 5})
	defer mustClose(t, l)
	if l.LastIndex() != 1001 {
		t.Fatalf("reopened LastIndex %d, want 1001", l.LastIndex())
	}
}

func TestCloseIdempotentAndClosedErrors(t *testing.T) {
	l := mustOpen(t, t.TempDir(), Options{})
	appendN(t, l, 1, 3)
	// Records queued but not waited for are durable once Close returns.
	idx, err := l.AppendAsync([]byte("late"))
	if err != nil {
		t.Fatal(err)
	}
	mustClose(t, l)
	mustClose(t, l)
	if err := l.Wait(idx); err != nil {
		t.Fatalf("Wait after Close for a record queued before it: %v", err)
	}
	if _, err := l.Append([]byte("x")); !errors.Is(err, ErrClosed) {
		t.Fatalf("Append after Close: %v", err)
	}
	if _, err := l.Rotate(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Rotate after Close: %v", err)
	}
	if err := l.Replay(1, func(uint64, []byte) error { return nil }); !errors.Is(err, ErrClosed) {
		t.Fatalf("Replay after Close: %v", err)
	}
}

func TestLockExcludesSecondUser(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{})
	if _, err := Open(dir, Options{}); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("second Open: %v, want in-use error", err)
	}
	if _, err := Repair(dir); err == nil {
		t.Fatal("Repair on an open log succeeded")
	}
	mustClose(t, l)
	l = mustOpen(t, dir, Options{})
	mustClose(t, l)
}

func TestStrayAndTempFiles(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{})
	appendN(t, l, 1, 3)
	mustClose(t, l)
	tmp := segmentPath(dir, 4) + tmpSuffix
	stray := filepath.Join(dir, "wal-1.log")
	snapshot := filepath.Join(dir, "snapshot-00000003.snap")
	for _, p := range []string{tmp, stray, snapshot} {
		if err := os.WriteFile(p, []byte("junk"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	l = mustOpen(t, dir, Options{})
	defer mustClose(t, l)
	checkRecords(t, replayAll(t, l, 1), 1, 3)
	if _, err := os.Stat(tmp); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("unfinished segment %s not removed: %v", tmp, err)
	}
	for _, p := range []string{stray, snapshot} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("file that is not ours was touched: %v", err)
		}
	}
}

func TestRecordTooLarge(t *testing.T) {
	l := mustOpen(t, t.TempDir(), Options{Sync: SyncNone})
	defer mustClose(t, l)
	if _, err := l.Append(make([]byte, MaxRecordBytes+1)); err == nil {
		t.Fatal("oversized record accepted")
	}
	// A refused record does not poison the log.
	appendN(t, l, 1, 1)
}

func TestAppendAllocs(t *testing.T) {
	l := mustOpen(t, t.TempDir(), Options{Sync: SyncNone})
	defer mustClose(t, l)
	payload := make([]byte, 100)
	appendN(t, l, 1, 100) // warm the buffers
	allocs := testing.AllocsPerRun(2000, func() {
		if _, err := l.Append(payload); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 0.1 {
		t.Fatalf("Append allocates %.2f times per record", allocs)
	}
}

func TestParseSyncMode(t *testing.T) {
	for _, m := range []SyncMode{SyncAlways, SyncBatch, SyncNone} {
		got, err := ParseSyncMode(m.String())
		if err != nil || got != m {
			t.Fatalf("ParseSyncMode(%q) = %v, %v", m.String(), got, err)
		}
	}
	if _, err := ParseSyncMode("sometimes"); err == nil {
		t.Fatal("bad mode accepted")
	}
}

// TestEndSegment: the segment ends exactly after the records appended
// before EndSegment, whether they were still queued (one batch cut in
// two) or already written, and an EndSegment with nothing after it, or
// on an empty segment, makes no empty segment.
func TestEndSegment(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{Sync: SyncNone})
	defer func() { mustClose(t, l) }()
	appendAsync := func(from, n int) uint64 {
		var last uint64
		for i := from; i < from+n; i++ {
			idx, err := l.AppendAsync(payloadFor(i))
			if err != nil {
				t.Fatal(err)
			}
			last = idx
		}
		return last
	}
	l.wmu.Lock() // the flusher waits: all twenty records are one batch
	appendAsync(1, 10)
	if got := l.EndSegment(); got != 10 {
		t.Fatalf("EndSegment = %d, want 10", got)
	}
	last := appendAsync(11, 10)
	l.wmu.Unlock()
	if err := l.Wait(last); err != nil {
		t.Fatal(err)
	}
	if got := l.EndSegment(); got != 20 {
		t.Fatalf("EndSegment = %d, want 20", got)
	}
	l.EndSegment() // nothing appended since: the same end
	appendN(t, l, 21, 5)
	want := []string{segmentPath(dir, 1), segmentPath(dir, 11), segmentPath(dir, 21)}
	if got := segmentFiles(t, dir); !slices.Equal(got, want) {
		t.Fatalf("segments %v, want %v", got, want)
	}
	checkRecords(t, replayAll(t, l, 1), 1, 25)
	// The active segment is empty right after a rotation: ending it
	// makes no empty segment.
	if _, err := l.Rotate(); err != nil {
		t.Fatal(err)
	}
	l.EndSegment()
	appendN(t, l, 26, 3)
	if n := len(segmentFiles(t, dir)); n != 4 {
		t.Fatalf("%d segments, want 4", n)
	}
	checkRecords(t, replayAll(t, l, 1), 1, 28)
}
