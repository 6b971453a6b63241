package embedded

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/snapshot"
	"github.com/tally-dev/tally/engine/wal"
)

// benchSizes returns the post counts of the recovery benchmark: 1M by
// default, or the comma-separated list in TALLY_BENCH_POSTS (e.g.
// 1000000,10000000,100000000; 100M needs about 16 GiB of memory).
func benchSizes() []int {
	s := os.Getenv("TALLY_BENCH_POSTS")
	if s == "" {
		return []int{1_000_000}
	}
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err == nil && n > 0 {
			out = append(out, n)
		}
	}
	return out
}

// buildDirs writes n counted posts (five skewed counters each, as
// importPosts makes) into two data directories holding the same state:
// snapDir as one snapshot, logDir (unless "") as the import records in the
// log, nothing else. The state is built straight into tables sized for n,
// so that even 100M posts need one copy of it in memory. It returns how
// long writing the snapshot took and the tables' size.
func buildDirs(b *testing.B, snapDir, logDir string, n int) (time.Duration, int64) {
	st := newState(tables{})
	var l *wal.Log
	if logDir != "" {
		var err error
		if l, err = wal.Open(logDir, wal.Options{Sync: wal.SyncNone}); err != nil {
			b.Fatal(err)
		}
	}
	row := make([]engine.ImportRow, 0, MaxImportBatch)
	var index uint64
	var rec []byte
	flush := func() {
		index++
		r := &importRec{recHeader: recHeader{time: int64(index)}, rows: row}
		if l != nil {
			rec = appendRecord(rec[:0], r)
			if _, err := l.Append(rec); err != nil {
				b.Fatal(err)
			}
		}
		st.apply(r, nil, false)
		row = row[:0]
	}
	for i := range n {
		row = append(row, engine.ImportRow{Post: engine.PostID(1<<50 + uint64(i)*2654435761), Author: engine.UserID(i%100_000 + 1),
			Counts: engine.Counts{Likes: int64(i % 50), Comments: int64(i % 7), Reposts: int64(i % 3),
				Views: int64(i%1000 + 1), Favorites: int64(i % 11)}})
		if len(row) == cap(row) {
			flush()
		}
	}
	if len(row) > 0 {
		flush()
	}
	if l != nil {
		if err := l.Close(); err != nil {
			b.Fatal(err)
		}
	}
	// As the maintenance loop would before a snapshot: seal what is
	// old, fold deltas.
	if err := errors.Join(st.posts.Maintain(time.Now()), st.likes.Maintain(time.Now()), st.favs.Maintain(time.Now())); err != nil {
		b.Fatal(err)
	}
	mem := st.posts.MemoryBytes()
	start := time.Now()
	f, err := snapshot.Create(snapDir, index, true)
	if err != nil {
		b.Fatal(err)
	}
	if err := writeImage(f.Writer, &image{st: st, index: index, lastTime: int64(index)}, func() error { return nil }, nil); err != nil {
		b.Fatal(err)
	}
	if _, err := f.Commit(nil); err != nil {
		b.Fatal(err)
	}
	return time.Since(start), int64(mem)
}

// BenchmarkRecovery measures Open on a data directory holding N counted
// posts as a snapshot, and (its peer, in the same run) as log records
// only: load time, snapshot size, bytes per post. Sizes: see benchSizes;
// TALLY_BENCH_NOLOG=1 skips the log peer (slow and memory-hungry at 100M,
// where replay grows the tables by doubling).
func BenchmarkRecovery(b *testing.B) {
	for _, n := range benchSizes() {
		b.Run(fmt.Sprintf("posts=%d", n), func(b *testing.B) {
			debug.SetMemoryLimit(20 << 30)
			defer debug.SetMemoryLimit(math.MaxInt64)
			snapDir, logDir := b.TempDir(), ""
			if os.Getenv("TALLY_BENCH_NOLOG") == "" {
				logDir = b.TempDir()
			}
			wrote, mem := buildDirs(b, snapDir, logDir, n)
			runtime.GC()
			debug.FreeOSMemory()
			list, _ := snapshot.List(snapDir)
			info, err := os.Stat(list[0].Path)
			if err != nil {
				b.Fatal(err)
			}
			open := func(dir string) time.Duration {
				start := time.Now()
				e, err := Open(Options{Dir: dir, Sync: wal.SyncNone, SweepInterval: -1, Logger: quiet,
					SnapshotInterval: -1, SnapshotLogBytes: -1})
				if err != nil {
					b.Fatal(err)
				}
				took := time.Since(start)
				if got := e.Stats().CountedPosts; got != int64(n) {
					b.Fatalf("%d counted posts loaded, want %d", got, n)
				}
				e.Close()
				e = nil
				runtime.GC()
				debug.FreeOSMemory()
				return took
			}
			var fromSnap, fromLog time.Duration
			for b.Loop() {
				fromSnap += open(snapDir)
				if logDir != "" {
					fromLog += open(logDir)
				}
			}
			per := func(d time.Duration) float64 { return d.Seconds() / float64(b.N) }
			b.ReportMetric(per(fromSnap), "open_snapshot_s")
			b.ReportMetric(float64(n)/per(fromSnap), "posts/s")
			if logDir != "" {
				b.ReportMetric(per(fromLog), "open_log_only_s")
				b.ReportMetric(fromLog.Seconds()/fromSnap.Seconds(), "log/snapshot")
			}
			b.ReportMetric(float64(info.Size())/(1<<20), "snapshot_MiB")
			b.ReportMetric(float64(info.Size())/float64(n), "snapshot_B/post")
			b.ReportMetric(float64(mem)/float64(n), "memory_B/post")
			b.ReportMetric(wrote.Seconds(), "write_s")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// holdLog keeps the longest cut and thaw step of the snapshots an engine
// logs (the "snapshot written" line's cut and thaw).
type holdLog struct {
	mu        sync.Mutex
	cut, thaw time.Duration
}

func (h *holdLog) Enabled(context.Context, slog.Level) bool { return true }
func (h *holdLog) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *holdLog) WithGroup(string) slog.Handler            { return h }

func (h *holdLog) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "embedded: snapshot written" {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	r.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "cut":
			h.cut = max(h.cut, a.Value.Duration())
		case "thaw":
			h.thaw = max(h.thaw, a.Value.Duration())
		}
		return true
	})
	return nil
}

// BenchmarkSnapshotPause takes a snapshot of 1M counted posts while
// writers (fsync=always) and readers keep going, and reports in the same
// run: the snapshot's duration; the longest and the 99th percentile write
// and page read observed meanwhile and, for as long again, without a
// snapshot, and the writes completed in the one against the other; the
// longest the write lock was held to take a cut and to thaw a part of it;
// and the pause a stop-the-world capture of the same tables would have
// cost (a memcpy of their bytes).
func BenchmarkSnapshotPause(b *testing.B) {
	n := 1_000_000
	dir := b.TempDir()
	holds := &holdLog{}
	e, err := Open(Options{Dir: dir, Sync: wal.SyncAlways, SweepInterval: -1, Logger: slog.New(holds),
		SnapshotInterval: -1, SnapshotLogBytes: -1})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	id := importPosts(b, e, n)
	if err := e.Snapshot(bg); err != nil {
		b.Fatal(err)
	}
	holds.cut, holds.thaw = 0, 0
	mem := e.Stats().MemoryBytes
	st := loadStats{keep: true}
	stop := make(chan struct{})
	wg := runLoad(b, e, id, n, &st, stop)
	defer func() { close(stop); wg.Wait() }()
	time.Sleep(100 * time.Millisecond)
	var snap, copyTook time.Duration
	var maxW, maxR, baseW, baseR time.Duration
	var latW, latR, baseLatW, baseLatR []time.Duration
	var writes, baseWrites int64
	src := make([]byte, mem)
	dst := make([]byte, mem)
	for b.Loop() {
		st.window.Store(true)
		start := time.Now()
		if err := e.Snapshot(bg); err != nil {
			b.Fatal(err)
		}
		took := time.Since(start)
		snap += took
		st.window.Store(false)
		maxW = max(maxW, time.Duration(st.maxNanos[0].Swap(0)))
		maxR = max(maxR, time.Duration(st.maxNanos[1].Swap(0)))
		writes += st.ops[0].Swap(0)
		latW, latR = append(latW, st.takeLatencies(0)...), append(latR, st.takeLatencies(1)...)
		// The same load for as long without a snapshot: what the disk
		// and the scheduler cost anyway.
		st.window.Store(true)
		time.Sleep(took)
		st.window.Store(false)
		baseW = max(baseW, time.Duration(st.maxNanos[0].Swap(0)))
		baseR = max(baseR, time.Duration(st.maxNanos[1].Swap(0)))
		baseWrites += st.ops[0].Swap(0)
		baseLatW, baseLatR = append(baseLatW, st.takeLatencies(0)...), append(baseLatR, st.takeLatencies(1)...)
		start = time.Now()
		copy(dst, src)
		copyTook += time.Since(start)
		// Give the next snapshot something to do.
		if _, err := e.CreatePost(bg, 1, 0, ""); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(snap.Seconds()*1e3/float64(b.N), "snapshot_ms")
	b.ReportMetric(float64(maxW.Microseconds())/1e3, "max_write_ms")
	b.ReportMetric(float64(maxR.Microseconds())/1e3, "max_read_ms")
	b.ReportMetric(float64(baseW.Microseconds())/1e3, "nosnap_max_write_ms")
	b.ReportMetric(float64(baseR.Microseconds())/1e3, "nosnap_max_read_ms")
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1e3 }
	b.ReportMetric(ms(quantile(latW, 0.99)), "p99_write_ms")
	b.ReportMetric(ms(quantile(latR, 0.99)), "p99_read_ms")
	b.ReportMetric(ms(quantile(baseLatW, 0.99)), "nosnap_p99_write_ms")
	b.ReportMetric(ms(quantile(baseLatR, 0.99)), "nosnap_p99_read_ms")
	// The writers pause alike in both windows, so the ratio of writes
	// completed is the write throughput during a snapshot against without.
	if baseWrites > 0 {
		b.ReportMetric(float64(writes)/float64(baseWrites), "writes_snap/nosnap")
	}
	b.ReportMetric(float64(holds.cut.Microseconds())/1e3, "max_cut_ms")
	b.ReportMetric(float64(holds.thaw.Microseconds())/1e3, "max_thaw_step_ms")
	b.ReportMetric(copyTook.Seconds()*1e3/float64(b.N), "memcpy_capture_ms")
	b.ReportMetric(float64(mem)/(1<<20), "state_MiB")
	b.ReportMetric(0, "ns/op")
}
