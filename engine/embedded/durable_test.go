package embedded

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/enginetest"
	"github.com/tally-dev/tally/engine/snapshot"
	"github.com/tally-dev/tally/engine/wal"
)

// dumpOf renders e's whole state (see state.dump).
func dumpOf(e *Engine) string {
	e.mu.RLock()
	defer e.mu.RUnlock()
	return e.st.dump()
}

// durableOpts are options for an engine on dir whose snapshots are only
// taken when a test asks.
func durableOpts(dir string, clk *clock) Options {
	o := Options{Dir: dir, Sync: wal.SyncNone, SweepInterval: -1, Logger: quiet,
		SnapshotInterval: -1, SnapshotLogBytes: -1, CursorTTL: 3 * 24 * time.Hour,
		Reactions: enginetest.ScriptKinds} // the workload's reactions are of every kind
	if clk != nil {
		o.Now = clk.Now
	}
	return o
}

func openE(t testing.TB, opts Options) *Engine {
	t.Helper()
	e, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

func snapshots(t testing.TB, dir string) []snapshot.Info {
	t.Helper()
	list, err := snapshot.List(dir)
	if err != nil {
		t.Fatal(err)
	}
	return list
}

// bigShapes adds the state the random workload never reaches: a follow
// list longer than one FOLW item, a group large enough for Roaring
// receipts, counts past 2^32, many idempotency keys.
func bigShapes(t testing.TB, e *Engine) {
	t.Helper()
	ctx := context.Background()
	for u := engine.UserID(1000); u < 1000+followsPerItem+10; u++ {
		if err := e.Follow(ctx, 999, u); err != nil {
			t.Fatal(err)
		}
	}
	g, err := e.CreateGroup(ctx, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	for base := engine.UserID(20000); base < 22000; base += 100 {
		us := make([]engine.UserID, 100)
		for i := range us {
			us[i] = base + engine.UserID(i)
		}
		if err := e.AddGroupMembers(ctx, 1, g, us); err != nil {
			t.Fatal(err)
		}
	}
	m, err := e.SendMessage(ctx, 1, g, "to the crowd", []engine.UserID{20001}, "big-msg")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.MarkMessagesRead(ctx, 20005, []engine.MessageID{m.ID}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.LeaveGroup(ctx, 20007, g); err != nil {
		t.Fatal(err)
	}
	if err := e.Import(ctx, []engine.ImportRow{{Post: 1 << 55, Author: 3, Counts: engine.Counts{Views: 1 << 40, Likes: 7}}}); err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		if _, err := e.CreatePost(ctx, 2, 0, fmt.Sprint("idem-", i)); err != nil {
			t.Fatal(err)
		}
	}
}

// TestImageRoundTrip: a state written as snapshot sections and read back
// is the same state, section by section.
func TestImageRoundTrip(t *testing.T) {
	for seed := range uint64(3) {
		clk := newClock()
		e := open(t, Options{Now: clk.Now, CursorTTL: 3 * 24 * time.Hour, SweepInterval: -1})
		workload(t, e, clk, seed, 3000)
		if seed == 0 {
			bigShapes(t, e)
		}
		im := &image{st: e.st, index: 77, lastTime: e.lastTime, genHigh: 12345}
		var buf bytes.Buffer
		w, err := snapshot.NewWriter(&buf, im.index)
		ok(t, err)
		// The cut is taken as Snapshot takes it, with no maintenance job
		// pending, and written while the maintenance loop goes on.
		e.maintMu.Lock()
		e.mu.Lock()
		c, err := im.cut()
		e.mu.Unlock()
		e.maintMu.Unlock()
		ok(t, err)
		ok(t, writeCut(w, c, func() error { return nil }, nil))
		e.mu.Lock()
		ok(t, c.thaw())
		e.mu.Unlock()
		_, err = w.Finish()
		ok(t, err)
		r, err := snapshot.NewReader(bytes.NewReader(buf.Bytes()), int64(buf.Len()), "mem")
		ok(t, err)
		got, err := readImage(r, true, tables{})
		ok(t, err)
		e.mu.RLock()
		want := e.st.dump()
		e.mu.RUnlock()
		if have := got.st.dump(); want != have {
			t.Fatalf("seed %d: state differs after a round trip\nwant:\n%s\ngot:\n%s", seed, want, have)
		}
		if got.index != 77 || got.lastTime != e.lastTime || got.genHigh != 12345 {
			t.Fatalf("meta: %+v", got)
		}
		if got.st.follows.Len() != e.st.follows.Len() || got.st.rcBytes != e.st.rcBytes || got.st.nusers != e.st.nusers {
			t.Fatalf("counters: follows %d/%d rcBytes %d/%d nusers %d/%d", got.st.follows.Len(), e.st.follows.Len(),
				got.st.rcBytes, e.st.rcBytes, got.st.nusers, e.st.nusers)
		}
		for i := range got.st.groupList {
			if a, b := got.st.groupList[i].current, e.st.groupList[i].current; a != b {
				t.Fatalf("group %d: %d current members, want %d", i, a, b)
			}
		}
	}
}

// TestSnapshotRecovery: snapshots taken between bursts of random ops, then
// a restart, give back exactly the state before it; old snapshots and
// the log they cover are pruned; idempotency keys and like de-dup state
// survive.
func TestSnapshotRecovery(t *testing.T) {
	dir := t.TempDir()
	clk := newClock()
	opts := durableOpts(dir, clk)
	opts.LogSegmentBytes = 4 << 10
	e := openE(t, opts)
	ctx := context.Background()
	for round := range uint64(3) {
		workloadKept(t, e, clk, 10+round, 1500)
		ok(t, e.Snapshot(ctx))
	}
	// Idempotency keys and like de-dup state, in the snapshot and in the
	// log tail after it.
	// (The workload moves the clock by days, so keys go after it.)
	workloadKept(t, e, clk, 20, 300)
	post, err := e.CreatePost(ctx, 1, 0, "keep-me")
	ok(t, err)
	ok(t, e.Like(ctx, 2, post))
	ok(t, e.Snapshot(ctx))
	// A log tail after the last snapshot.
	bigShapes(t, e)
	post2, err := e.CreatePost(ctx, 1, 0, "keep-me-too")
	ok(t, err)
	ok(t, e.Like(ctx, 3, post2))
	n1, err := e.PublishNotification(ctx, "before", "", "")
	ok(t, err)
	before := dumpOf(e)
	lastIndex := e.lastIndex
	list := snapshots(t, dir)
	if len(list) != keepSnapshots {
		t.Fatalf("%d snapshots kept, want %d", len(list), keepSnapshots)
	}
	if first := e.log.FirstIndex(); first <= 1 || first > list[0].Index+1 {
		t.Fatalf("log starts at %d; want it truncated to just before the older snapshot's %d", first, list[0].Index)
	}
	ok(t, e.Close())

	clk.Advance(-time.Hour) // ids after the restart must still sort after
	e2 := openE(t, opts)
	if after := dumpOf(e2); after != before {
		t.Fatalf("state after restart differs\nbefore:\n%s\nafter:\n%s", before, after)
	}
	if e2.lastIndex != lastIndex {
		t.Fatalf("last index %d after restart, want %d", e2.lastIndex, lastIndex)
	}
	for _, k := range []struct {
		key  string
		post engine.PostID
		fan  engine.UserID
	}{{"keep-me", post, 2}, {"keep-me-too", post2, 3}} {
		again, err := e2.CreatePost(ctx, 1, 0, k.key)
		ok(t, err)
		if again != k.post {
			t.Fatalf("idempotency key %q lost: %d then %d", k.key, k.post, again)
		}
		c0, _ := e2.Counts(ctx, []engine.PostID{k.post})
		ok(t, e2.Like(ctx, k.fan, k.post))
		c1, _ := e2.Counts(ctx, []engine.PostID{k.post})
		if c0[0].Likes != c1[0].Likes || c0[0].Likes == 0 {
			t.Fatalf("a repeated like counted again after restart: %d -> %d", c0[0].Likes, c1[0].Likes)
		}
	}
	n2, err := e2.PublishNotification(ctx, "after", "", "")
	ok(t, err)
	if n2.ID <= n1.ID {
		t.Fatalf("notification id %d after restart is not above %d", n2.ID, n1.ID)
	}
}

// TestRestartFromSnapshotOnly: a snapshot covering every record restarts
// with no replay, and the log continues after it.
func TestRestartFromSnapshotOnly(t *testing.T) {
	dir := t.TempDir()
	clk := newClock()
	e := openE(t, durableOpts(dir, clk))
	workload(t, e, clk, 3, 1000)
	n1, err := e.PublishNotification(bg, "before", "", "")
	ok(t, err)
	ok(t, e.Snapshot(bg))
	ok(t, e.Snapshot(bg)) // nothing new: no second file
	if n := len(snapshots(t, dir)); n != 1 {
		t.Fatalf("%d snapshots after a repeated Snapshot", n)
	}
	before, idx, lastTime := dumpOf(e), e.lastIndex, e.lastTime
	ok(t, e.Close())
	e2 := openE(t, durableOpts(dir, clk))
	if e2.lastTime != lastTime {
		t.Fatalf("last record time %d after restart, want %d", e2.lastTime, lastTime)
	}
	if e2.snapIndex.Load() != idx {
		t.Fatalf("restart replayed the log instead of loading the snapshot at %d", idx)
	}
	// The id generator's high-water mark came from the snapshot alone: with
	// the clock stepped back, its next id is still above every id it made.
	clk.Advance(-time.Hour)
	if next := e2.gen.Next(); next <= uint64(n1.ID) {
		t.Fatalf("generator's next id %d after a restart from a snapshot is not above %d", next, n1.ID)
	}
	if dumpOf(e2) != before || e2.lastIndex != idx {
		t.Fatal("state differs after restart")
	}
	if _, err := e2.CreatePost(bg, 1, 0, ""); err != nil {
		t.Fatal(err)
	}
	if e2.lastIndex != idx+1 {
		t.Fatalf("the log continued at %d, want %d", e2.lastIndex, idx+1)
	}

}

// TestAutoSnapshot: the interval and log-size triggers take snapshots by
// themselves.
func TestAutoSnapshot(t *testing.T) {
	for _, tc := range []struct {
		name     string
		interval time.Duration
		bytes    int64
	}{{"interval", 20 * time.Millisecond, -1}, {"logbytes", -1, 1}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			opts := durableOpts(dir, nil)
			opts.SnapshotInterval, opts.SnapshotLogBytes = tc.interval, tc.bytes
			e := openE(t, opts)
			for i := range 20 {
				if _, err := e.CreatePost(bg, engine.UserID(i+1), 0, ""); err != nil {
					t.Fatal(err)
				}
			}
			deadline := time.Now().Add(10 * time.Second)
			for {
				if list := snapshots(t, dir); len(list) > 0 && list[len(list)-1].Index == e.log.LastIndex() {
					return
				}
				if time.Now().After(deadline) {
					t.Fatal("no snapshot taken")
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}

// TestSnapshotLag: what the newest snapshot does not cover, as /metrics
// shows it, follows writes and snapshots, also once snapshots start
// truncating the log, and survives a restart.
func TestSnapshotLag(t *testing.T) {
	dir := t.TempDir()
	clk := newClock()
	opts := durableOpts(dir, clk)
	opts.LogSegmentBytes = 4 << 10 // small segments: snapshots truncate the log
	opts.Reactions = nil           // like alone: an empty directory's kinds, no kinds record
	e := openE(t, opts)
	if records, bytes, newest := e.SnapshotLag(); records != 0 || bytes != 0 || !newest.IsZero() {
		t.Fatalf("empty engine: lag %d records, %d bytes, newest %v; want none", records, bytes, newest)
	}
	for round := range uint64(3) {
		workload(t, e, clk, 30+round, 500)
		records, bytes, _ := e.SnapshotLag()
		if records == 0 || bytes <= 0 {
			t.Fatalf("round %d: lag %d records, %d bytes after writes; want both above 0", round, records, bytes)
		}
		before := time.Now()
		ok(t, e.Snapshot(bg))
		records, bytes, newest := e.SnapshotLag()
		if records != 0 || bytes != 0 || newest.Before(before) || newest.After(time.Now()) {
			t.Fatalf("round %d: lag %d records, %d bytes, newest %v after a snapshot at %v; want 0, 0, then", round, records, bytes, newest, before)
		}
		// One record after it: its bytes, not less because the snapshot
		// removed log segments.
		_, err := e.CreatePost(bg, 1, 0, "")
		ok(t, err)
		if records, bytes, _ := e.SnapshotLag(); records != 1 || bytes <= 0 || bytes > opts.LogSegmentBytes {
			t.Fatalf("round %d: lag %d records, %d bytes after one write; want 1 and that record's bytes", round, records, bytes)
		}
	}
	if first := e.log.FirstIndex(); first <= 1 {
		t.Fatal("the log was never truncated: the test does not cover truncation")
	}
	ok(t, e.Close())
	list := snapshots(t, dir)
	fi, err := os.Stat(list[len(list)-1].Path)
	ok(t, err)
	e2 := openE(t, opts)
	records, bytes, newest := e2.SnapshotLag()
	if records != 1 || bytes <= 0 || !newest.Equal(fi.ModTime()) {
		t.Fatalf("after restart: lag %d records, %d bytes, newest %v; want 1 record, its bytes, %v", records, bytes, newest, fi.ModTime())
	}
}

// countingMetrics counts what the engine reports to Options.Metrics.
type countingMetrics struct{ written, failed atomic.Int64 }

func (*countingMetrics) LogBatchWritten(records, bytes int)                       {}
func (*countingMetrics) LogSynced(took time.Duration)                             {}
func (m *countingMetrics) SnapshotWritten(took, paced time.Duration, bytes int64) { m.written.Add(1) }
func (m *countingMetrics) SnapshotFailed()                                        { m.failed.Add(1) }

// TestSnapshotterReportsFailure: a periodic snapshot that fails is
// reported to Options.Metrics (tally_snapshot_failures_total), and the
// engine keeps serving.
func TestSnapshotterReportsFailure(t *testing.T) {
	dir := t.TempDir()
	var m countingMetrics
	opts := durableOpts(dir, nil)
	opts.SnapshotInterval, opts.Metrics = 20*time.Millisecond, &m
	e := openE(t, opts)
	// A snapshot file ahead of every record the log holds: the next
	// snapshot refuses to be written behind it.
	ok(t, os.WriteFile(filepath.Join(dir, snapshot.FileName(1<<40)), nil, 0o644))
	_, err := e.CreatePost(bg, 1, 0, "")
	ok(t, err)
	deadline := time.Now().Add(10 * time.Second)
	for m.failed.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the snapshotter's failure was not reported")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if m.written.Load() != 0 {
		t.Fatal("a snapshot was reported written")
	}
	ok(t, e.Ready(bg))
	_, err = e.CreatePost(bg, 2, 0, "")
	ok(t, err)
}

// corruptDir makes a directory holding one snapshot and no log records
// after it, and returns the snapshot's path and the state it holds.
func corruptDir(t *testing.T) (dir, path, state string) {
	dir = t.TempDir()
	clk := newClock()
	e := openE(t, durableOpts(dir, clk))
	workloadKept(t, e, clk, 5, 120)
	ok(t, e.Snapshot(bg))
	state = dumpOf(e)
	ok(t, e.Close())
	list := snapshots(t, dir)
	return dir, list[0].Path, state
}

func checkOpenRefused(t *testing.T, dir, path string, what string) {
	t.Helper()
	e, err := Open(durableOpts(dir, nil))
	if err == nil {
		e.Close()
		t.Fatalf("%s: Open loaded a damaged snapshot", what)
	}
	var ce *snapshot.CorruptError
	if !errors.As(err, &ce) || ce.File != path {
		t.Fatalf("%s: Open error %v is not a CorruptError naming %s", what, err, path)
	}
	msg := err.Error()
	if !strings.Contains(msg, path) || !strings.Contains(msg, fmt.Sprintf("offset %d", ce.Offset)) ||
		!strings.Contains(msg, "tally repair") {
		t.Fatalf("%s: message does not name file, offset and the way out: %s", what, msg)
	}
}

// TestCorruptSnapshotEveryByte flips every byte of a real snapshot in turn:
// Open must refuse each one, naming the file and an offset, and never load
// a state.
func TestCorruptSnapshotEveryByte(t *testing.T) {
	dir, path, _ := corruptDir(t)
	good, err := os.ReadFile(path)
	ok(t, err)
	t.Logf("snapshot of %d bytes", len(good))
	for i := range good {
		bad := bytes.Clone(good)
		bad[i] ^= 0x5a
		ok(t, os.WriteFile(path, bad, 0o644))
		checkOpenRefused(t, dir, path, fmt.Sprintf("byte %d flipped", i))
	}
	ok(t, os.WriteFile(path, good, 0o644))
	openE(t, durableOpts(dir, nil)).Close()
}

// TestTruncatedSnapshot cuts the snapshot at every length.
func TestTruncatedSnapshot(t *testing.T) {
	dir, path, _ := corruptDir(t)
	good, err := os.ReadFile(path)
	ok(t, err)
	for n := range len(good) {
		ok(t, os.WriteFile(path, good[:n], 0o644))
		checkOpenRefused(t, dir, path, fmt.Sprintf("cut at %d", n))
	}
}

// twoSnapshotDir makes a directory with two snapshots and a log tail, and
// returns the final state; the log still holds every record from the
// older snapshot's index on.
func twoSnapshotDir(t *testing.T, segBytes int64) (dir string, list []snapshot.Info, state string) {
	dir = t.TempDir()
	clk := newClock()
	opts := durableOpts(dir, clk)
	opts.LogSegmentBytes = segBytes
	e := openE(t, opts)
	workloadKept(t, e, clk, 30, 800)
	ok(t, e.Snapshot(bg))
	workloadKept(t, e, clk, 31, 800)
	ok(t, e.Snapshot(bg))
	workloadKept(t, e, clk, 32, 300)
	state = dumpOf(e)
	ok(t, e.Close())
	return dir, snapshots(t, dir), state
}

func flipByte(t *testing.T, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	ok(t, err)
	defer f.Close()
	b := []byte{0}
	_, err = f.ReadAt(b, off)
	ok(t, err)
	b[0] ^= 0xff
	_, err = f.WriteAt(b, off)
	ok(t, err)
}

func repairOK(t *testing.T, dir string, want ...string) string {
	t.Helper()
	rep, err := Repair(dir)
	if err != nil {
		t.Fatalf("Repair: %v\nreport:\n%s", err, rep)
	}
	for _, w := range want {
		if !strings.Contains(rep, w) {
			t.Fatalf("report lacks %q:\n%s", w, rep)
		}
	}
	return rep
}

func reopenState(t *testing.T, dir string) string {
	t.Helper()
	e, err := Open(durableOpts(dir, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	return dumpOf(e)
}

func TestRepair(t *testing.T) {
	t.Run("healthy", func(t *testing.T) {
		dir, _, state := twoSnapshotDir(t, 0)
		repairOK(t, dir, "nothing to repair", "the directory loads")
		if reopenState(t, dir) != state {
			t.Fatal("state changed")
		}
	})
	t.Run("in use", func(t *testing.T) {
		dir := t.TempDir()
		e := openE(t, durableOpts(dir, nil))
		defer e.Close()
		if _, err := Repair(dir); err == nil || !strings.Contains(err.Error(), "in use") {
			t.Fatalf("Repair of an open directory: %v", err)
		}
	})
	t.Run("corrupt newest snapshot", func(t *testing.T) {
		dir, list, state := twoSnapshotDir(t, 0)
		newest := list[1].Path
		flipByte(t, newest, 100)
		checkOpenRefused(t, dir, newest, "corrupt newest")
		repairOK(t, dir, "does not verify", "moved "+newest, "nothing is lost")
		if reopenState(t, dir) != state {
			t.Fatal("state differs after repair: something was lost")
		}
		if _, err := os.Stat(newest + ".corrupt"); err != nil {
			t.Fatal("the corrupt snapshot was not kept aside")
		}
	})
	t.Run("only snapshot corrupt, log from record 1", func(t *testing.T) {
		dir, path, state := corruptDir(t)
		flipByte(t, path, 40)
		repairOK(t, dir, "the empty state", "nothing is lost")
		if reopenState(t, dir) != state {
			t.Fatal("state differs after repair")
		}
	})
	t.Run("no complete history", func(t *testing.T) {
		dir, list, _ := twoSnapshotDir(t, 2<<10)
		// Both snapshots damaged and the log truncated past record 1: no
		// base exists; Repair must change nothing and say so.
		flipByte(t, list[0].Path, 30)
		flipByte(t, list[1].Path, 30)
		rep, err := Repair(dir)
		if err == nil || !strings.Contains(err.Error(), "Restore a backup") {
			t.Fatalf("Repair without a complete history: %v\n%s", err, rep)
		}
		if n := len(snapshots(t, dir)); n != 2 {
			t.Fatalf("%d snapshots left, want both untouched", n)
		}
	})
	// Snapshots end where segments end, so damage in records a snapshot
	// covers is always in whole segments that can go, with big segments
	// (one per snapshot) as with small ones.
	for _, segBytes := range []int64{0, 2 << 10} {
		t.Run(fmt.Sprintf("damaged covered log segment/%d", segBytes), func(t *testing.T) {
			dir, list, state := twoSnapshotDir(t, segBytes)
			segs, err := listSegments(dir)
			ok(t, err)
			if len(segs) < 2 || segs[1].first > list[1].Index+1 {
				t.Fatalf("setup: segments %v, newest snapshot %d", segs, list[1].Index)
			}
			flipByte(t, filepath.Join(dir, segs[0].name), 40)
			if _, err := Open(durableOpts(dir, nil)); err == nil || !strings.Contains(err.Error(), segs[0].name) {
				t.Fatalf("Open over a damaged segment: %v", err)
			}
			repairOK(t, dir, "deleted log segments", "nothing is lost")
			if reopenState(t, dir) != state {
				t.Fatal("state differs after repair")
			}
		})
	}
	t.Run("damaged log tail", func(t *testing.T) {
		dir, list, _ := twoSnapshotDir(t, 0)
		segs, err := listSegments(dir)
		ok(t, err)
		last := filepath.Join(dir, segs[len(segs)-1].name)
		info, err := os.Stat(last)
		ok(t, err)
		// Damage a record in the middle of the tail after the newest
		// snapshot: records after it are lost, and the report says so.
		flipByte(t, last, info.Size()-200)
		if _, err := Open(durableOpts(dir, nil)); err == nil {
			t.Fatal("Open over a damaged log")
		}
		rep := repairOK(t, dir, "cut the log", "is lost")
		e, err := Open(durableOpts(dir, nil))
		ok(t, err)
		defer e.Close()
		if e.lastIndex < list[1].Index {
			t.Fatalf("state ends at %d, before the newest snapshot %d\n%s", e.lastIndex, list[1].Index, rep)
		}
	})
	t.Run("missing tail segment", func(t *testing.T) {
		dir := t.TempDir()
		clk := newClock()
		opts := durableOpts(dir, clk)
		opts.LogSegmentBytes = 2 << 10
		e := openE(t, opts)
		workload(t, e, clk, 42, 300)
		full := e.lastIndex
		ok(t, e.Close())
		segs, err := listSegments(dir)
		ok(t, err)
		if len(segs) < 3 {
			t.Fatalf("setup: %d segments", len(segs))
		}
		newest := segs[len(segs)-1]
		ok(t, os.Remove(filepath.Join(dir, newest.name)))
		// Nothing in the names left shows a gap; the manifest does.
		_, err = Open(durableOpts(dir, nil))
		var ce *wal.CorruptError
		if !errors.As(err, &ce) || !ce.Missing || !strings.Contains(err.Error(), newest.name) ||
			!strings.Contains(err.Error(), "tally repair") {
			t.Fatalf("Open without the newest log segment: %v", err)
		}
		rep := repairOK(t, dir, "log incomplete: "+newest.name+" is missing", "accepted the loss", "the log now ends at record", "the directory loads")
		e, err = Open(durableOpts(dir, nil))
		ok(t, err)
		defer e.Close()
		if e.lastIndex != newest.first-1 || e.lastIndex >= full {
			t.Fatalf("after repair the state ends at %d, want %d (the log ended at %d)\n%s", e.lastIndex, newest.first-1, full, rep)
		}
	})
	t.Run("log behind snapshot", func(t *testing.T) {
		dir := t.TempDir()
		clk := newClock()
		e := openE(t, durableOpts(dir, clk))
		workload(t, e, clk, 40, 300)
		ok(t, e.Close())
		saved := t.TempDir()
		segs, _ := listSegments(dir)
		for _, s := range segs {
			ok(t, linkOrCopy(filepath.Join(dir, s.name), filepath.Join(saved, s.name), false))
		}
		e = openE(t, durableOpts(dir, clk))
		workload(t, e, clk, 41, 300)
		ok(t, e.Snapshot(bg))
		state := dumpOf(e)
		ok(t, e.Close())
		segs, _ = listSegments(dir)
		ok(t, removeSegments(dir, segs))
		old, _ := listSegments(saved)
		for _, s := range old {
			ok(t, linkOrCopy(filepath.Join(saved, s.name), filepath.Join(dir, s.name), false))
		}
		if _, err := Open(durableOpts(dir, nil)); err == nil || !strings.Contains(err.Error(), "tally repair") {
			t.Fatalf("Open with a log behind the snapshot: %v", err)
		}
		repairOK(t, dir, "restarted it after the snapshot")
		if reopenState(t, dir) != state {
			t.Fatal("state differs after repair")
		}
	})
}

// TestSnapshotFailureKeepsServing: a snapshot that cannot be written
// leaves no file behind, breaks nothing, and the next one succeeds.
func TestSnapshotFailureKeepsServing(t *testing.T) {
	dir := t.TempDir()
	clk := newClock()
	e := openE(t, durableOpts(dir, clk))
	workload(t, e, clk, 50, 500)
	e.createSnapshot = func(dir string, index uint64, sync bool) (*snapshot.File, error) {
		f, err := snapshot.Create(dir, index, sync)
		if err == nil {
			f.Writer, _ = snapshot.NewWriter(failingWriter{}, index) // fails mid-way
		}
		return f, err
	}
	if err := e.Snapshot(bg); err == nil {
		t.Fatal("a failing snapshot reported success")
	}
	entries, _ := os.ReadDir(dir)
	for _, en := range entries {
		if strings.HasPrefix(en.Name(), "snap-") {
			t.Fatalf("left behind %s", en.Name())
		}
	}
	workload(t, e, clk, 51, 200)
	if err := e.Ready(bg); err != nil {
		t.Fatalf("not ready after a failed snapshot: %v", err)
	}
	e.createSnapshot = snapshot.Create
	ok(t, e.Snapshot(bg))
	state := dumpOf(e)
	ok(t, e.Close())
	if reopenState(t, dir) != state {
		t.Fatal("state differs")
	}
}

type failingWriter struct{}

func (failingWriter) Write(p []byte) (int, error) {
	if len(p) <= 24 {
		return len(p), nil // the header
	}
	return 0, errors.New("injected write failure")
}

// TestBackupRestore: a backup taken while writers keep going holds every
// mutation acknowledged before it started, restores into an empty
// directory with one call, and the restored engine continues the log.
func TestBackupRestore(t *testing.T) {
	dir := t.TempDir()
	opts := durableOpts(dir, nil)
	e := openE(t, opts)
	ctx := context.Background()
	posts := make([]engine.PostID, 50)
	for i := range posts {
		p, err := e.CreatePost(ctx, engine.UserID(i+1), 0, "")
		ok(t, err)
		posts[i] = p
	}
	stop := make(chan struct{})
	done := make(chan int)
	// acked counts the likes Like returned for, per post: a reader may
	// already see a like whose record is not yet durable, so Counts would
	// overstate what was acknowledged.
	var ackedMu sync.Mutex
	acked := make([]uint64, len(posts))
	go func() {
		n := 0
		for {
			select {
			case <-stop:
				done <- n
				return
			default:
			}
			if err := e.Like(ctx, engine.UserID(1000+n), posts[n%len(posts)]); err != nil {
				t.Error(err)
			} else {
				ackedMu.Lock()
				acked[n%len(posts)]++
				ackedMu.Unlock()
			}
			n++
		}
	}()
	time.Sleep(20 * time.Millisecond)
	// Everything acknowledged before the call must be in the backup.
	ackedMu.Lock()
	ackedBefore := slices.Clone(acked)
	ackedMu.Unlock()
	// Beside the running engine, as `tally backup` does.
	bfile := filepath.Join(t.TempDir(), "b.snap")
	idx, err := BackupFile(ctx, dir, bfile)
	ok(t, err)
	data, err := os.ReadFile(bfile)
	ok(t, err)
	close(stop)
	t.Logf("%d likes during the backup; backup at index %d", <-done, idx)
	if n := len(snapshots(t, dir)); n != 0 {
		t.Fatalf("Backup wrote %d snapshots into the data directory", n)
	}
	final := dumpOf(e)
	ok(t, e.Close())

	// The expected state at idx: replay the original log up to it.
	expect := func(index uint64) string {
		l, err := wal.Open(dir, wal.Options{Sync: wal.SyncNone})
		ok(t, err)
		defer l.Close()
		im := newImage(tables{})
		errDone := errors.New("replayed up to the backup's index")
		err = l.Replay(1, func(i uint64, p []byte) error {
			if i > index {
				return errDone
			}
			return im.applyRecord(i, p)
		})
		if err != nil && !errors.Is(err, errDone) {
			t.Fatal(err)
		}
		return im.st.dump()
	}
	into := filepath.Join(t.TempDir(), "restored")
	ok(t, Restore(bfile, into))
	if err := Restore(bfile, into); err == nil || !strings.Contains(err.Error(), "already holds a store") {
		t.Fatalf("Restore over a store: %v", err)
	}
	e2 := openE(t, durableOpts(into, nil))
	if got := dumpOf(e2); got != expect(idx) {
		t.Fatalf("restored state differs from the log replayed to %d", idx)
	}
	cs, _ := e2.Counts(ctx, posts)
	for i := range cs {
		if uint64(cs[i].Likes) < ackedBefore[i] {
			t.Fatalf("post %d: %d likes restored, %d were acknowledged before the backup", i, cs[i].Likes, ackedBefore[i])
		}
	}
	ok(t, e2.Like(ctx, 1, posts[0]))
	if e2.lastIndex != idx+1 {
		t.Fatalf("restored log continues at %d, want %d", e2.lastIndex, idx+1)
	}
	ok(t, e2.Close())
	if expect(1<<62) != final {
		t.Fatal("the original log does not replay to the final state")
	}

	// A damaged backup is refused before anything is installed.
	bad := bytes.Clone(data)
	bad[len(bad)/2] ^= 1
	file := filepath.Join(t.TempDir(), "bad.snap")
	ok(t, os.WriteFile(file, bad, 0o644))
	into = t.TempDir()
	var ce *snapshot.CorruptError
	if err := Restore(file, into); !errors.As(err, &ce) {
		t.Fatalf("Restore of a damaged backup: %v", err)
	}
	if entries, _ := os.ReadDir(into); slices.ContainsFunc(entries, func(e os.DirEntry) bool { return strings.HasPrefix(e.Name(), "snap-") }) {
		t.Fatal("a damaged backup was installed")
	}
}

// TestFuzzSeeds keeps the seed corpus of FuzzSnapshot honest: the valid
// seed decodes.
func TestFuzzSeeds(t *testing.T) {
	data := validSnapshot(t)
	r, err := snapshot.NewReader(bytes.NewReader(data), int64(len(data)), "seed")
	ok(t, err)
	if _, err := readImage(r, true, tables{}); err != nil {
		t.Fatal(err)
	}
}

// validSnapshot is a small snapshot touching every section.
func validSnapshot(t testing.TB) []byte {
	clk := newClock()
	e, err := Open(Options{Now: clk.Now, SweepInterval: -1, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	workload(t, e, clk, 1, 150)
	var buf bytes.Buffer
	w, _ := snapshot.NewWriter(&buf, 9)
	e.mu.RLock() // see TestImageRoundTrip
	defer e.mu.RUnlock()
	if err := writeImage(w, &image{st: e.st, index: 9, lastTime: e.lastTime}, func() error { return nil }, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Finish(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
