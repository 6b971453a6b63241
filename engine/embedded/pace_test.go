package embedded

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/wal"
)

// TestPacer checks the pacer's rule: no pause while the log takes
// nothing, and after each slice in which it took records a pause of
// paceRatio times the slice (at most paceMaxPause), so that the pauses
// never add up to more than paceRatio times the work.
func TestPacer(t *testing.T) {
	var index uint64
	var pauses []time.Duration
	p := newPacer(func() uint64 { return index }, func(d time.Duration) { pauses = append(pauses, d) })
	work := func() {
		for start := time.Now(); time.Since(start) < paceSlice; {
		}
	}
	for range 5 {
		work()
		for range 64 {
			p.tick()
		}
	}
	if len(pauses) != 0 || p.worked < 5*paceSlice {
		t.Fatalf("idle log: %d pauses after %v of work, want none after at least %v", len(pauses), p.worked, 5*paceSlice)
	}
	idle := p.worked
	for range 5 {
		index++
		work()
		p.step()
	}
	if len(pauses) != 5 {
		t.Fatalf("writers at work: %d pauses after 5 slices, want 5", len(pauses))
	}
	var paused time.Duration
	for _, d := range pauses {
		if d < min(paceRatio*paceSlice, paceMaxPause) || d > paceMaxPause {
			t.Errorf("a pause of %v after a slice of at least %v; want paceRatio times the slice, at most %v", d, paceSlice, paceMaxPause)
		}
		paused += d
	}
	if busy := p.worked - idle; paused > paceRatio*busy {
		t.Errorf("paused %v after %v of work, more than %d times it", paused, busy, paceRatio)
	}
	// A step before the slice is over neither pauses nor ends it.
	index++
	p.step()
	if len(pauses) != 5 {
		t.Errorf("a pause before the slice was over")
	}
	// Recovery's nil pacer and a backup's, which has no log to watch,
	// never pause.
	var none *pacer
	none.tick()
	none.step()
	(&pacer{}).step()
}

// TestSnapshotInterruptedWhilePaced interrupts a snapshot written under
// durable writes while its pacer pauses for them (the file half written
// and written back a range at a time): once by cancelling it, which
// leaves no file and an engine that goes on serving and snapshotting, and
// once by a crash, copying the data directory at that moment, which
// recovers every acknowledged like.
func TestSnapshotInterruptedWhilePaced(t *testing.T) {
	if testing.Short() {
		t.Skip("imports 300,000 posts")
	}
	dir := t.TempDir()
	opts := Options{Dir: dir, Sync: wal.SyncAlways, SweepInterval: -1, Logger: quiet,
		SnapshotInterval: -1, SnapshotLogBytes: -1}
	e := openE(t, opts)
	const n = 300_000
	id := importPosts(t, e, n)
	ok(t, e.Snapshot(bg))
	before := snapshots(t, dir)

	type like struct {
		user engine.UserID
		post engine.PostID
	}
	var mu sync.Mutex
	var acked []like
	// Writers hold writing to like; the crash image is copied with no
	// like in flight, a file at a time.
	var writing sync.RWMutex
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				l := like{engine.UserID(1<<40 + w<<32 + i), id((i*7919 + w) % n)}
				writing.RLock()
				err := e.Like(bg, l.user, l.post)
				if err == nil {
					mu.Lock()
					acked = append(acked, l)
					mu.Unlock()
				}
				writing.RUnlock()
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	for started := false; !started; time.Sleep(time.Millisecond) {
		mu.Lock()
		started = len(acked) >= 100
		mu.Unlock()
	}
	crash := filepath.Join(t.TempDir(), "crash")
	var crashAcked atomic.Int64
	var pauses atomic.Int64
	ctx, cancel := context.WithCancel(bg)
	e.sleep = func(ctx context.Context, d time.Duration) {
		// Only a pause while the file is written (a .tmp exists) is the
		// one this test interrupts: the check of the older snapshot after
		// the install is paced too.
		if m, _ := filepath.Glob(filepath.Join(dir, "*.tmp")); len(m) > 0 && pauses.Add(1) == 1 {
			writing.Lock()
			crashAcked.Store(int64(len(acked)))
			err := os.CopyFS(crash, os.DirFS(dir))
			writing.Unlock()
			ok(t, err)
			cancel()
		}
		sleepCtx(ctx, d)
	}
	err := e.Snapshot(ctx)
	close(stop)
	wg.Wait()
	if pauses.Load() == 0 {
		t.Fatal("the snapshot never paused for the writers")
	}
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("snapshot cancelled while paused: %v, want context.Canceled", err)
	}
	if got := snapshots(t, dir); len(got) != len(before) || got[len(got)-1] != before[len(before)-1] {
		t.Fatalf("snapshots after a cancelled one: %v, want %v", got, before)
	}
	tmps := func(dir string) []string {
		m, _ := filepath.Glob(filepath.Join(dir, "*.tmp"))
		return m
	}
	if m := tmps(dir); len(m) != 0 {
		t.Fatalf("a cancelled snapshot left %v", m)
	}
	if m := tmps(crash); len(m) != 1 {
		t.Fatalf("the crash image holds %v, want the snapshot being written", m)
	}
	ok(t, e.Like(bg, 5, id(1)))
	e.sleep = sleepCtx
	ok(t, e.Snapshot(bg))
	if got := snapshots(t, dir); got[len(got)-1].Index <= before[len(before)-1].Index {
		t.Fatalf("no snapshot after the cancelled one: %v", got)
	}

	check := func(name string, e *Engine, likes []like) {
		t.Helper()
		for _, l := range likes {
			got, err := e.Liked(bg, l.user, []engine.PostID{l.post})
			ok(t, err)
			if !got[0] {
				t.Fatalf("%s: the acknowledged like of %d on %d is lost", name, l.user, l.post)
			}
		}
	}
	c := openE(t, Options{Dir: crash, Sync: wal.SyncNone, SweepInterval: -1, Logger: quiet,
		SnapshotInterval: -1, SnapshotLogBytes: -1})
	check("crash mid-pacing", c, acked[:crashAcked.Load()])
	if m := tmps(crash); len(m) != 0 {
		t.Fatalf("the half-written snapshot was not removed at start: %v", m)
	}
	ok(t, e.Close())
	check("reopened", openE(t, opts), acked)
}
