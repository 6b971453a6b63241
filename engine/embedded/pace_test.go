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
	const n = 300_000
	e, dir, opts, id := snapshottedEngine(t, n)
	before := snapshots(t, dir)

	ld := startLikes(e, id, n, 2)
	for started := false; !started; time.Sleep(time.Millisecond) {
		started = ld.count() >= 100
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
			ld.writing.Lock()
			crashAcked.Store(int64(ld.count()))
			err := os.CopyFS(crash, os.DirFS(dir))
			ld.writing.Unlock()
			ok(t, err)
			cancel()
		}
		sleepCtx(ctx, d)
	}
	err := e.Snapshot(ctx)
	acked := ld.stop(t)
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

	c := openE(t, Options{Dir: crash, Sync: wal.SyncNone, SweepInterval: -1, Logger: quiet,
		SnapshotInterval: -1, SnapshotLogBytes: -1})
	checkLikes(t, "crash mid-pacing", c, acked[:crashAcked.Load()])
	if m := tmps(crash); len(m) != 0 {
		t.Fatalf("the half-written snapshot was not removed at start: %v", m)
	}
	ok(t, e.Close())
	checkLikes(t, "reopened", openE(t, opts), acked)
}

// TestKilledDuringPacedPrune takes a crash image while a snapshot's prune
// pauses for the writers halfway through freeing the oldest snapshot, and
// checks that the image loads with every acknowledged like, its
// shortened file set aside under a name no one loads and deleted at
// start.
func TestKilledDuringPacedPrune(t *testing.T) {
	if testing.Short() {
		t.Skip("imports 100,000 posts")
	}
	const n = 100_000
	e, dir, _, id := snapshottedEngine(t, n)
	ok(t, e.Like(bg, 1, id(0)))
	ok(t, e.Snapshot(bg))
	ok(t, e.Like(bg, 2, id(1)))
	oldest := snapshots(t, dir)[0]
	info, err := os.Stat(oldest.Path)
	ok(t, err)
	// Steps small enough that freeing the file takes several of the
	// pacer's slices: it pauses only once a slice has lasted paceSlice.
	e.pruneStepBytes = 4096
	if info.Size() < 100*e.pruneStepBytes {
		t.Fatalf("the oldest snapshot is %d bytes, too small for a prune of many steps", info.Size())
	}

	ld := startLikes(e, id, n, 1)
	crash := filepath.Join(t.TempDir(), "crash")
	var crashAcked int
	var crashed bool
	pruning := oldest.Path + ".prune"
	e.sleep = func(ctx context.Context, d time.Duration) {
		if got, err := os.Stat(pruning); !crashed && err == nil && got.Size() < info.Size() {
			crashed = true
			ld.writing.Lock()
			crashAcked = ld.count()
			ok(t, os.CopyFS(crash, os.DirFS(dir)))
			ld.writing.Unlock()
		}
		sleepCtx(ctx, d)
	}
	err = e.Snapshot(bg)
	acked := ld.stop(t)
	ok(t, err)
	if !crashed {
		t.Fatal("the prune never paused for the writers with the oldest snapshot shortened")
	}
	if got := snapshots(t, dir); len(got) != keepSnapshots || got[0].Index == oldest.Index {
		t.Fatalf("snapshots after the prune: %v", got)
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "*.prune")); len(m) != 0 {
		t.Fatalf("the prune left %v", m)
	}
	if got := snapshots(t, crash); len(got) != keepSnapshots {
		t.Fatalf("the crash image lists %v, want the two newest snapshots only", got)
	}

	c := openE(t, Options{Dir: crash, Sync: wal.SyncNone, SweepInterval: -1, Logger: quiet,
		SnapshotInterval: -1, SnapshotLogBytes: -1})
	checkLikes(t, "crash mid-prune", c, append(acked[:crashAcked:crashAcked], ackedLike{1, id(0)}, ackedLike{2, id(1)}))
	if m, _ := filepath.Glob(filepath.Join(crash, "*.prune")); len(m) != 0 {
		t.Fatalf("the shortened snapshot was not removed at start: %v", m)
	}

}

// ackedLike is a like its writer saw acknowledged.
type ackedLike struct {
	user engine.UserID
	post engine.PostID
}

// likeLoad is writers liking posts until stopped, each like made with
// writing read-held, so that a test holding it takes a crash image with
// no like in flight.
type likeLoad struct {
	writing sync.RWMutex
	mu      sync.Mutex
	acked   []ackedLike
	done    chan struct{}
	wg      sync.WaitGroup
	err     atomic.Pointer[error]
}

// startLikes starts writers goroutines liking posts id(0..n-1) as new
// users.
func startLikes(e *Engine, id func(int) engine.PostID, n, writers int) *likeLoad {
	ld := &likeLoad{done: make(chan struct{})}
	for w := range writers {
		ld.wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-ld.done:
					return
				default:
				}
				l := ackedLike{engine.UserID(1<<40 + w<<32 + i), id((i*7919 + w) % n)}
				ld.writing.RLock()
				err := e.Like(bg, l.user, l.post)
				if err == nil {
					ld.mu.Lock()
					ld.acked = append(ld.acked, l)
					ld.mu.Unlock()
				}
				ld.writing.RUnlock()
				if err != nil {
					ld.err.Store(&err)
					return
				}
			}
		})
	}
	return ld
}

// count returns how many likes were acknowledged so far.
func (ld *likeLoad) count() int {
	ld.mu.Lock()
	defer ld.mu.Unlock()
	return len(ld.acked)
}

// stop stops the writers and returns the likes acknowledged, in order.
func (ld *likeLoad) stop(t *testing.T) []ackedLike {
	t.Helper()
	close(ld.done)
	ld.wg.Wait()
	if err := ld.err.Load(); err != nil {
		t.Fatal(*err)
	}
	return ld.acked
}

// checkLikes fails unless e has every like of likes.
func checkLikes(t *testing.T, name string, e *Engine, likes []ackedLike) {
	t.Helper()
	for _, l := range likes {
		got, err := e.Liked(bg, l.user, []engine.PostID{l.post})
		ok(t, err)
		if !got[0] {
			t.Fatalf("%s: the acknowledged like of %d on %d is lost", name, l.user, l.post)
		}
	}
}

// snapshottedEngine opens an engine on a new data directory that syncs
// every write and snapshots only when told, imports n posts and takes a
// first snapshot of them.
func snapshottedEngine(t *testing.T, n int) (e *Engine, dir string, opts Options, id func(int) engine.PostID) {
	dir = t.TempDir()
	opts = Options{Dir: dir, Sync: wal.SyncAlways, SweepInterval: -1, Logger: quiet,
		SnapshotInterval: -1, SnapshotLogBytes: -1}
	e = openE(t, opts)
	id = importPosts(t, e, n)
	ok(t, e.Snapshot(bg))
	return e, dir, opts, id
}
