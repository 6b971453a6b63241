package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/enginetest"
	"github.com/tally-dev/tally/engine/redisstore"
	"github.com/tally-dev/tally/engine/redisstore/redistest"
	"github.com/tally-dev/tally/engine/snowflake"
)

// TestLifecycleKill9 kills a tally process in the middle of an erasure
// and in the middle of a burst of deletes (see runEraseKill9 and
// runDeleteBurstKill9); TestCluster runs the same on a cluster.
func TestLifecycleKill9(t *testing.T) {
	if !redistest.Available() {
		t.Skip("redis-server not installed")
	}
	addr, _ := redistest.StartSingle(t)
	t.Run("Erase", func(t *testing.T) { runEraseKill9(t, []string{addr}, true) })
	t.Run("DeleteBurst", func(t *testing.T) { runDeleteBurstKill9(t, []string{addr}) })
}

// runEraseKill9 kills the process erasing a user after the keyspace
// walk's second step applied its changes and before it saved its
// progress. Mid-erasure the erasure is recorded, the user reads as new,
// part of their likes are gone and part are not, every count agrees with
// its set, and a follow of the user waits. Then either a later process's
// sweep (sweep) or the client's retry (a repeated eraseUser joins the
// erasure) finishes it from its last saved step, redoing the unsaved one
// without applying anything twice: every count exact, no trace left, and
// a second sweep finds nothing to do.
func runEraseKill9(t *testing.T, addrs []string, sweep bool) {
	p := prefix()
	s := open(t, redisstore.Options{Addrs: addrs, KeyPrefix: p, IntentSweepInterval: -1})
	sc := buildScene(t, s, 4000)
	out, killed := child(t, addrs, p, "erase", "TALLY_INTENT_VIEWER="+strconv.FormatUint(uint64(erased), 10),
		"TALLY_REDIS_CRASH_AFTER_STEP1=erase")
	if !killed {
		t.Fatalf("the erasing child was not killed mid-erasure:\n%s", out)
	}
	if st := s.Stats(); st.Erasures != 1 {
		t.Fatalf("%d erasures recorded after the crash, want 1", st.Erasures)
	}
	left := 0
	for i := 0; i < len(sc.liked); i += engine.MaxIDsPerCall {
		liked, err := s.Liked(bg, erased, sc.liked[i:min(i+engine.MaxIDsPerCall, len(sc.liked))])
		must(t, err)
		for _, l := range liked {
			if l {
				left++
			}
		}
	}
	if left == 0 || left == len(sc.liked) {
		t.Fatalf("%d of %d likes left after the crash: the erasure did not stop in the middle", left, len(sc.liked))
	}
	checkSetsAgree(t, s, addrs, p, sc.liked)
	// Mid-erasure, a check finds no drift: the counts the erasure has
	// yet to move are unsettled, left to it.
	res, err := s.Check(bg, engine.CheckOptions{})
	must(t, err)
	if tot := res.Totals(); tot.Drifts != 0 {
		t.Fatalf("a check mid-erasure: %+v", res.Tallies)
	}
	uc, err := s.UserCounts(bg, []engine.UserID{erased})
	must(t, err)
	if uc[0] != (engine.UserCounts{}) {
		t.Fatalf("the user mid-erasure counts %+v, want a new user's", uc[0])
	}
	ctx, cancel := context.WithTimeout(bg, 200*time.Millisecond)
	err = s.Follow(ctx, firstOther+5, erased)
	cancel()
	if !errors.Is(err, engine.ErrUnavailable) {
		t.Fatalf("a follow of a user being erased: %v, want it to wait and give up with ErrUnavailable", err)
	}
	if n, err := s.SweepIntents(bg); err != nil || n != 0 {
		t.Fatalf("a sweep within the lease finished %d (%v), want 0", n, err)
	}
	if sweep {
		out, killed = child(t, addrs, p, "sweep", "TALLY_INTENT_VIEWER=0")
		if killed || !strings.Contains(out, "finished 1 intents") {
			t.Fatalf("the sweeping process:\n%s", out)
		}
	} else {
		must(t, s.EraseUser(bg, erased))
	}
	t.Logf("%d of %d likes were left by the crash", left, len(sc.liked))
	sc.checkErased(t, s)
	checkSetsAgree(t, s, addrs, p, sc.liked)
	out, _ = child(t, addrs, p, "sweep", "TALLY_INTENT_VIEWER=0")
	if !strings.Contains(out, "finished 0 intents") {
		t.Fatalf("a second sweep:\n%s", out)
	}
	enginetest.CheckClean(t, s)
}

// runDeleteBurstKill9 kills a process in the middle of a burst of
// deletes (a comment on an original, then a repost of it, six times),
// right after the third repost's delete took its first step (the
// tombstone) and before the rest (its author's post count, its
// original's reposts). Every acknowledged delete is applied; the
// interrupted one is half applied, and a later process's sweep finishes
// it once; the whole burst retried changes nothing it did already.
func runDeleteBurstKill9(t *testing.T, addrs []string) {
	p := prefix()
	s := open(t, redisstore.Options{Addrs: addrs, KeyPrefix: p, IntentSweepInterval: -1})
	const author, reposter, commenter, deleter = 31, 32, 33, 34
	var originals, reposts []engine.PostID
	var burst []string // comment i on original i, then repost i
	for i := range 6 {
		o, err := s.CreatePost(bg, author, 0, "")
		must(t, err)
		r, err := s.Repost(bg, reposter, o, nil, "")
		must(t, err)
		cid := engine.CommentID(snowflake.Make(time.Now().UnixMilli(), 8, uint64(i)))
		must(t, s.Comment(bg, commenter, o, cid, nil, ""))
		originals, reposts = append(originals, o), append(reposts, r)
		burst = append(burst, fmt.Sprintf("%d:%d:%d", o, cid, r))
	}
	state := func() (posts int64, reps, comments []int64, known []bool) {
		t.Helper()
		uc, err := s.UserCounts(bg, []engine.UserID{reposter})
		must(t, err)
		cs, err := s.Counts(bg, originals)
		must(t, err)
		infos, err := s.Posts(bg, reposts)
		must(t, err)
		for i := range originals {
			reps, comments = append(reps, cs[i].Reposts), append(comments, cs[i].Comments)
			known = append(known, infos[i].Exists)
		}
		return uc[0].Posts, reps, comments, known
	}
	env := []string{"TALLY_INTENT_VIEWER=" + strconv.Itoa(deleter), "TALLY_INTENT_DELETES=" + strings.Join(burst, ",")}
	out, killed := child(t, addrs, p, "deletes", append(env, "TALLY_REDIS_CRASH_AFTER_STEP1=delete", "TALLY_REDIS_CRASH_SKIP=2")...)
	if !killed {
		t.Fatalf("the deleting child was not killed mid-burst:\n%s", out)
	}
	if strings.Count(out, "deleted post") != 2 || strings.Count(out, "deleted comment") != 3 {
		t.Fatalf("the child acknowledged other deletes than 3 comments and 2 posts before the crash:\n%s", out)
	}
	want := func(what string, posts int64, reps, comments []int64, known []bool) {
		t.Helper()
		gp, gr, gc, gk := state()
		if gp != posts || fmt.Sprint(gr, gc, gk) != fmt.Sprint(reps, comments, known) {
			t.Fatalf("%s: reposter's posts %d, originals' reposts %v and comments %v, reposts known %v; want %d, %v, %v, %v",
				what, gp, gr, gc, gk, posts, reps, comments, known)
		}
	}
	// Acknowledged: comments 0-2 and reposts 0-1. Repost 2 is a
	// tombstone, its author's count and its original's not yet moved.
	want("after the crash", 6-2, []int64{0, 0, 1, 1, 1, 1}, []int64{0, 0, 0, 1, 1, 1}, []bool{false, false, false, true, true, true})
	if n, err := s.SweepIntents(bg); err != nil || n != 0 {
		t.Fatalf("an immediate sweep finished %d intents (%v), want 0", n, err)
	}
	out, killed = child(t, addrs, p, "sweep", "TALLY_INTENT_VIEWER=0")
	if killed || !strings.Contains(out, "finished 1 intents") {
		t.Fatalf("the sweeping process:\n%s", out)
	}
	want("after the sweep", 6-3, []int64{0, 0, 0, 1, 1, 1}, []int64{0, 0, 0, 1, 1, 1}, []bool{false, false, false, true, true, true})
	// The client retries the whole burst: what was done changes nothing.
	out, killed = child(t, addrs, p, "deletes", env...)
	if killed || strings.Count(out, "deleted post") != 6 {
		t.Fatalf("the retried burst:\n%s", out)
	}
	want("after the retried burst", 0, []int64{0, 0, 0, 0, 0, 0}, []int64{0, 0, 0, 0, 0, 0}, []bool{false, false, false, false, false, false})
	out, _ = child(t, addrs, p, "sweep", "TALLY_INTENT_VIEWER=0")
	if !strings.Contains(out, "finished 0 intents") {
		t.Fatalf("a second sweep:\n%s", out)
	}
	want("after a second sweep", 0, []int64{0, 0, 0, 0, 0, 0}, []int64{0, 0, 0, 0, 0, 0}, []bool{false, false, false, false, false, false})
	enginetest.CheckClean(t, s)
}
