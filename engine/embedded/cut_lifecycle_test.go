package embedded

import (
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/snowflake"
	"github.com/tally-dev/tally/engine/tier"
)

// TestLifecycleDuringSnapshot erases users and deletes posts and comments
// while a snapshot's cut is out: every step of each erasure (its scans of
// open, sealed and cold windows, its removals and Scrub marks, its group,
// message and idempotency phases) and every delete (a post's row
// deleted, its sets forgotten, a comment id moved between sets) runs
// after the cut, some while the writer reads the state. The snapshot
// holds the state exactly as it was at the cut; the live state after the
// thaw holds every change; a restart from that snapshot and the log
// recovers it, with no trace of the erased users; and after the next
// snapshot no file of the directory holds the last one's id. Posts are
// deleted from open, sealed and cold windows: an open window keeps a
// deleted post's pairs, hidden, until it is sealed, but not an erased
// user's (Set.Purge).
func TestLifecycleDuringSnapshot(t *testing.T) {
	dir := t.TempDir()
	clk := newClock()
	opts := durableOpts(dir, clk)
	opts.Tables = tier.Options{OpenAge: -1, ColdAge: 48 * time.Hour}
	opts.MaintainInterval = 2 * time.Millisecond
	e := openE(t, opts)
	rng := rand.New(rand.NewPCG(25, 25))
	victims := []engine.UserID{7001, 7002, erased}
	others := []engine.UserID{100, 101, 102, 103, 104}
	var posts []engine.PostID
	for day := 10; day >= 0; day-- {
		for i := range 6 {
			at := clk.Now().Add(-time.Duration(day)*24*time.Hour - time.Duration(i)*time.Minute)
			id := engine.PostID(snowflake.Make(at.UnixMilli(), 3, uint64(i)))
			a := others[i%len(others)]
			if i == 5 {
				a = victims[day%len(victims)]
			}
			p, err := e.CreatePost(bg, a, id, "")
			ok(t, err)
			posts = append(posts, p)
		}
	}
	type comment struct {
		post engine.PostID
		id   engine.CommentID
	}
	var comments []comment
	seq := uint64(0)
	newComment := func(by engine.UserID, p engine.PostID, key string) {
		seq++
		c := engine.CommentID(snowflake.Make(clk.Now().UnixMilli(), 9, seq))
		ok(t, e.Comment(bg, by, p, c, []engine.UserID{others[0]}, key))
		comments = append(comments, comment{p, c})
	}
	for i, p := range posts {
		for j, v := range victims {
			if (i+j)%2 == 0 {
				ok(t, e.Like(bg, v, p))
			}
			if (i+j)%3 == 0 {
				ok(t, e.Favorite(bg, v, p))
			}
			if (i+j)%4 == 0 {
				newComment(v, p, fmt.Sprint("k", i, "-", j))
			}
		}
		ok(t, e.Like(bg, others[i%len(others)], p))
		newComment(others[i%len(others)], p, "")
		if i%5 == 0 {
			_, err := e.Repost(bg, victims[i%len(victims)], p, nil, fmt.Sprint("r", i))
			ok(t, err)
		}
	}
	for _, v := range victims {
		for _, o := range others {
			ok(t, e.Follow(bg, v, o))
			ok(t, e.Follow(bg, o, v))
		}
		g, err := e.CreateGroup(bg, others[0], []engine.UserID{v, others[1], others[2]})
		ok(t, err)
		m, err := e.SendMessage(bg, v, g, "hello", nil, fmt.Sprint("m", v))
		ok(t, err)
		_, err = e.MarkMessagesRead(bg, others[1], []engine.MessageID{m.ID})
		ok(t, err)
		_, err = e.SendMessage(bg, others[1], g, "hi", []engine.UserID{v}, "")
		ok(t, err)
	}
	e.maintain() // windows older than two days go cold
	ok(t, e.Snapshot(bg))

	var steps atomic.Int64
	setStepGate(e, func() { steps.Add(1) })
	deleted := map[engine.PostID]bool{}
	for round, victim := range victims {
		ok(t, e.Like(bg, engine.UserID(9000+round), posts[len(posts)-1])) // a record after the newest snapshot
		c, _, err := e.takeCut()
		ok(t, err)
		if c == nil {
			t.Fatal("no cut taken")
		}
		atCut := dumpOf(e)
		stepsAtCut := steps.Load()
		ok(t, e.EraseUser(bg, victim))
		written := make(chan error, 1)
		go func() {
			_, _, err := e.writeSnapshot(bg, c, newPacer(e.log.LastIndex, time.Sleep))
			written <- err
		}()
		for range 40 {
			p := posts[rng.IntN(len(posts))]
			if deleted[p] {
				continue
			}
			switch rng.IntN(4) {
			case 0:
				ok(t, e.DeletePost(bg, engine.Actor{User: others[0], Privileged: true}, p))
				deleted[p] = true
			case 1:
				cm := comments[rng.IntN(len(comments))]
				if !deleted[cm.post] {
					ok(t, e.DeleteComment(bg, engine.Actor{User: others[0], Privileged: true}, cm.post, cm.id))
				}
			case 2:
				ok(t, e.Like(bg, others[rng.IntN(len(others))], p))
			default:
				ok(t, e.Unlike(bg, others[rng.IntN(len(others))], p))
			}
		}
		waitErasures(t, e)
		ok(t, <-written)
		e.thaw(c)
		if steps.Load() == stepsAtCut {
			t.Fatalf("round %d: no erasure step ran while the cut was out", round)
		}
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
		left := e.st.known(uint64(victim)) || e.st.isErasing(uint64(victim))
		e.mu.RUnlock()
		if left {
			t.Fatalf("round %d: user %d is still known after the erasure and the thaw", round, victim)
		}
	}
	live := dumpOf(e)
	ok(t, e.Close())
	e = openE(t, opts)
	if again := dumpOf(e); again != live {
		t.Fatalf("the state recovered from the snapshot and the log differs from the live one\nlive:\n%s\nrecovered:\n%s", live, again)
	}
	ok(t, e.Like(bg, 8999, posts[len(posts)-1]))
	ok(t, e.Snapshot(bg))
	ok(t, e.Close())
	if traceOf(t, dir) {
		t.Fatal("a file still holds the erased user's id after the next snapshot")
	}
	e = openE(t, opts)
	for _, v := range victims {
		checkNoUser(t, e, uint64(v))
	}
}
