package embedded

import (
	"errors"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/snapshot"
	"github.com/tally-dev/tally/engine/tier"
)

// stateAt is the state a snapshot of the data directory should hold at
// index: the older snapshot in, plus the log's records up to index.
func stateAt(t *testing.T, e *Engine, older snapshot.Info, index uint64) string {
	t.Helper()
	im, err := loadSnapshot(older, false, tables{})
	ok(t, err)
	errDone := errors.New("replayed up to the index")
	err = e.log.Replay(im.index+1, func(i uint64, p []byte) error {
		if i > index {
			return errDone
		}
		return im.applyRecord(i, p)
	})
	if err != nil && !errors.Is(err, errDone) {
		t.Fatal(err)
	}
	if im.index != index {
		t.Fatalf("the log ends at %d, before %d", im.index, index)
	}
	return im.st.dump()
}

// TestSnapshotsWhileWriting takes snapshots while every kind of write
// goes on (likes on open, sealed and cold windows, follows, badges,
// groups, receipts, notifications, idempotency keys) and the maintenance
// loop seals and cools windows: each snapshot holds exactly the state at
// its index, which is the one before it plus the log in between (what the
// snapshotter used to rebuild), and the live state, thawed after each,
// is what a restart recovers.
func TestSnapshotsWhileWriting(t *testing.T) {
	for seed := range uint64(3) {
		dir := t.TempDir()
		clk := newClock()
		opts := durableOpts(dir, clk)
		opts.MaintainInterval = 2 * time.Millisecond
		opts.Tables = tier.Options{WindowMillis: 3_600_000, OpenAge: time.Hour, ColdAge: 6 * time.Hour, CompactMin: 8}
		e := openE(t, opts)
		var wg sync.WaitGroup
		done := make(chan struct{})
		snapped := make(chan struct{}, 1)
		wg.Go(func() {
			defer close(done)
			// In rounds, each waiting for a snapshot taken while it ran:
			// a workload faster than the snapshots would leave them few.
			for round := range 12 {
				workload(t, e, clk, seed<<8|uint64(round), 500)
				<-snapped
			}
			bigShapes(t, e)
		})
		var checked, cold int
		for more := true; more; {
			select {
			case <-done:
				more = false
			default:
			}
			ok(t, e.Snapshot(bg))
			select {
			case snapped <- struct{}{}:
			default:
			}
			list := snapshots(t, dir)
			if len(list) < 2 {
				continue
			}
			older, newer := list[len(list)-2], list[len(list)-1]
			got, err := loadSnapshot(newer, false, tables{})
			ok(t, err)
			if want, have := stateAt(t, e, older, newer.Index), got.st.dump(); want != have {
				t.Fatalf("seed %d: snapshot %d differs from snapshot %d plus the log\nwant:\n%s\ngot:\n%s",
					seed, newer.Index, older.Index, want, have)
			}
			checked++
			e.mu.RLock()
			for _, w := range e.st.likes.Stats() {
				if w.Kind == tier.Cold {
					cold++
				}
			}
			e.mu.RUnlock()
		}
		wg.Wait()
		t.Logf("seed %d: %d snapshots checked, %d cold", seed, checked, cold)
		if checked < 3 || cold == 0 {
			t.Fatalf("seed %d: %d snapshots checked, %d cold windows seen; the test covers too little", seed, checked, cold)
		}
		live := dumpOf(e)
		ok(t, e.Close())
		if again := dumpOf(openE(t, opts)); again != live {
			t.Fatalf("seed %d: the state recovered differs from the live one\nlive:\n%s\nrecovered:\n%s", seed, live, again)
		}
	}
}

// TestScrubKeepsAnOlderSnapshot: a snapshot that rotted on disk after it
// was written is found by the next snapshot's scrub and moved aside, and
// the one before it is kept with its log: when the newest is then damaged
// too, Repair recovers every record from that one and the log.
func TestScrubKeepsAnOlderSnapshot(t *testing.T) {
	dir := t.TempDir()
	clk := newClock()
	opts := durableOpts(dir, clk)
	e := openE(t, opts)
	for round := range 3 {
		workloadKept(t, e, clk, 40+uint64(round), 400)
		ok(t, e.Snapshot(bg))
	}
	list := snapshots(t, dir)
	rotten := list[len(list)-1]
	flipByte(t, rotten.Path, 100)
	workloadKept(t, e, clk, 43, 400)
	ok(t, e.Snapshot(bg))
	if _, err := os.Stat(rotten.Path + ".corrupt"); err != nil {
		t.Fatalf("the rotten snapshot was not moved aside: %v", err)
	}
	kept := snapshots(t, dir)
	if len(kept) != 2 || kept[0].Index != list[len(list)-2].Index {
		t.Fatalf("snapshots kept %v; want the one before the rotten one and the new one", kept)
	}
	workload(t, e, clk, 44, 200)
	state := dumpOf(e)
	ok(t, e.Close())
	flipByte(t, kept[1].Path, 100)
	repairOK(t, dir)
	if reopenState(t, dir) != state {
		t.Fatal("state differs after repair")
	}
}

// TestFollowsDuringSnapshot writes to the follow graph while a snapshot
// of it is being written: follows and unfollows that split, merge and drop
// the packed blocks of lists the snapshot is reading, and feed reads that
// rewrite their snapshots. The snapshot holds the graph as it was at its
// cut, the live graph after the thaw holds every write, and a restart
// recovers it.
func TestFollowsDuringSnapshot(t *testing.T) {
	dir := t.TempDir()
	clk := newClock()
	opts := durableOpts(dir, clk)
	e := openE(t, opts)
	rng := rand.New(rand.NewPCG(7, 7))
	const viewers, authors = 120, 400
	for a := range engine.UserID(authors) {
		for range int(a % 3) {
			_, err := e.CreatePost(bg, 10_000+a, 0, "")
			ok(t, err)
		}
	}
	for v := range engine.UserID(viewers) {
		for _, a := range rng.Perm(authors)[:rng.IntN(authors)] {
			ok(t, e.Follow(bg, v+1, 10_000+engine.UserID(a)))
		}
	}
	ok(t, e.Snapshot(bg))

	for round := range 3 {
		_, err := e.CreatePost(bg, 10_000, 0, "") // a record after the newest snapshot
		ok(t, err)
		c, _, err := e.takeCut()
		ok(t, err)
		if c == nil {
			t.Fatal("no cut taken")
		}
		atCut := dumpOf(e)
		mutate := func(n int) {
			for range n {
				v, a := 1+engine.UserID(rng.IntN(viewers)), 10_000+engine.UserID(rng.IntN(authors))
				switch rng.IntN(5) {
				case 0, 1:
					ok(t, e.Follow(bg, v, a))
				case 2, 3:
					ok(t, e.Unfollow(bg, v, a))
				default:
					_, err := e.CreatePost(bg, a, 0, "")
					ok(t, err)
					ok(t, e.MarkRead(bg, v, engine.Feed))
				}
			}
		}
		// Half the writes before the snapshot's writer starts, so that
		// it reads what they changed, half while it writes.
		mutate(1500)
		written := make(chan error, 1)
		go func() {
			_, _, err := e.writeSnapshot(bg, c, newPacer(e.log.LastIndex, time.Sleep))
			written <- err
		}()
		mutate(1500)
		ok(t, <-written)
		e.thaw(c)
		list := snapshots(t, dir)
		newest := list[len(list)-1]
		if newest.Index != c.index {
			t.Fatalf("round %d: newest snapshot at %d, the cut at %d", round, newest.Index, c.index)
		}
		got, err := loadSnapshot(newest, false, tables{})
		ok(t, err)
		if have := got.st.dump(); have != atCut {
			t.Fatalf("round %d: the snapshot differs from the state at its cut\nwant:\n%s\ngot:\n%s", round, atCut, have)
		}
		e.mu.RLock()
		err = e.st.follows.Check()
		e.mu.RUnlock()
		ok(t, err)
	}
	live := dumpOf(e)
	ok(t, e.Close())
	if again := dumpOf(openE(t, opts)); again != live {
		t.Fatalf("the state recovered differs from the live one\nlive:\n%s\nrecovered:\n%s", live, again)
	}
}
