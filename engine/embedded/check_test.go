package embedded

import (
	"crypto/sha256"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/enginetest"
	"github.com/tally-dev/tally/engine/snowflake"
	"github.com/tally-dev/tally/engine/tier"
	"github.com/tally-dev/tally/engine/wal"
)

// checkCode returns the code of the check named name.
func checkCode(t testing.TB, name string) byte {
	for _, c := range postChecks {
		if c.name == name {
			return c.code
		}
	}
	for _, c := range userChecks {
		if c.name == name {
			return c.code
		}
	}
	t.Fatalf("no check %q", name)
	return 0
}

// setCount corrupts a count on purpose: it logs the record a repair
// would, with a wrong value, so that the drift is durable and replayed
// like any write.
func setCount(t testing.TB, e *Engine, name string, id uint64, to int64) {
	t.Helper()
	r := recountRec{id: id, to: to}
	e.mu.RLock()
	for _, c := range e.st.postChecksOf() {
		if c.name == name {
			r.check = c.code
		}
	}
	if r.check == 0 {
		r.check = checkCode(t, name)
	}
	from, _, err := e.st.storedCount(&r)
	e.mu.RUnlock()
	if err != nil {
		t.Fatal(err)
	}
	r.from = from
	if _, err := e.commit(&r); err != nil {
		t.Fatalf("set %s of %d to %d: %v", name, id, to, err)
	}
}

// driftOnPurpose is the replay workload's recount: a random count of post
// or user moved by a little, or nothing when that count cannot be set
// (a post that does not exist).
func driftOnPurpose(e *Engine, rng *rand.Rand, post engine.PostID, user engine.UserID) error {
	codes := []byte{}
	for _, c := range postChecks {
		codes = append(codes, c.code)
	}
	for _, c := range userChecks {
		codes = append(codes, c.code)
	}
	r := recountRec{check: codes[rng.IntN(len(codes))], id: uint64(user)}
	if postCheckOf(r.check) != nil {
		r.id = uint64(post)
	}
	e.mu.RLock()
	from, exists, err := e.st.storedCount(&r)
	e.mu.RUnlock()
	if err != nil || !exists {
		return err
	}
	r.from, r.to = from, from+1+int64(rng.IntN(3))
	if from > 0 && rng.IntN(2) == 0 {
		r.to = from - 1
	}
	_, err = e.commit(&r)
	return err
}

// dirDigest is the names, sizes and contents of the files of dir.
func dirDigest(t testing.TB, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		fmt.Fprintf(&b, "%s %d %x\n", rel, len(data), sha256.Sum256(data))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// runCheck checks dir and returns the drifts as lines, sorted.
func runCheck(t testing.TB, dir string, repair bool) ([]string, engine.CheckResult) {
	t.Helper()
	var lines []string
	res, err := CheckDir(bg, dir, engine.CheckOptions{Repair: repair, Drift: func(d engine.Drift) {
		lines = append(lines, fmt.Sprintf("%s %d %d->%d repaired=%v unsettled=%v", d.Count, d.ID, d.Stored, d.Recounted, d.Repaired, d.Unsettled))
	}}, tier.Options{}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(lines)
	return lines, res
}

// TestCheckFindsAndRepairsEachDrift writes a data directory, corrupts one
// count of each kind, in each direction, through durable records, stops
// the engine and checks the directory: check finds exactly those drifts
// and writes nothing; check -repair fixes them with records of its own,
// which a restart replays; a check after that is clean.
func TestCheckFindsAndRepairsEachDrift(t *testing.T) {
	dir := t.TempDir()
	clk := newClock()
	opts := Options{Dir: dir, Sync: wal.SyncNone, Now: clk.Now, SweepInterval: -1, Logger: quiet,
		Reactions: []string{"like", "love", "haha"}}
	e, err := Open(opts)
	ok(t, err)
	posts := enginetest.CheckWorld(t, e)
	// Reactions of other kinds are not likes: each kind is recounted
	// against its own pairs.
	ok(t, e.ReactToPost(bg, 20, posts[2], "love"))
	ok(t, e.ReactToPost(bg, 21, posts[2], "love"))
	ok(t, e.ReactToPost(bg, 22, posts[2], "haha"))
	ok(t, e.ReactToPost(bg, 22, posts[0], "love"))
	// Imported counts are not recounted: a post the import wrote keeps
	// likes no set backs.
	ok(t, e.Import(bg, []engine.ImportRow{{Post: posts[0] + 1000, Author: 4, Counts: engine.Counts{Likes: 77, Favorites: 5}}}))

	if lines, res := runCheckLive(t, e); len(lines) != 0 {
		t.Fatalf("a fresh engine has drifts: %v %+v", lines, res)
	}
	setCount(t, e, engine.CheckLikes, uint64(posts[0]), 9)            // above its set (5)
	setCount(t, e, engine.CheckLikes, uint64(posts[1]), 0)            // below it
	setCount(t, e, engine.CheckLikes, uint64(posts[2]), 4)            // a count with no set at all
	setCount(t, e, engine.CheckFavorites, uint64(posts[0]), 2)        // below its set (5)
	setCount(t, e, engine.CheckFollowers, 1, 6)                       // above its edges (5)
	setCount(t, e, engine.CheckFollowers, 2, 0)                       // below them
	setCount(t, e, engine.CheckFollowers, 3, 2)                       // followed by none
	setCount(t, e, engine.CheckPosts, 1, 0)                           // an author with no post count
	setCount(t, e, engine.CheckPosts, 2, 5)                           // above their posts
	setCount(t, e, engine.CheckPosts, 10, 1)                          // a user who never posted
	setCount(t, e, engine.CheckReactions+"love", uint64(posts[2]), 1) // below its pairs (2)
	setCount(t, e, engine.CheckReactions+"haha", uint64(posts[0]), 3) // a post with no haha
	ok(t, e.Close())

	want := []string{
		fmt.Sprintf("post.favorites %d 2->5", posts[0]),
		fmt.Sprintf("post.likes %d 9->5", posts[0]),
		fmt.Sprintf("post.likes %d 0->5", posts[1]),
		fmt.Sprintf("post.likes %d 4->0", posts[2]),
		"user.followers 1 6->5",
		"user.followers 2 0->5",
		"user.followers 3 2->0",
		"user.posts 1 0->1",
		"user.posts 2 5->1",
		"user.posts 10 1->0",
		fmt.Sprintf("post.reactions.love %d 1->2", posts[2]),
		fmt.Sprintf("post.reactions.haha %d 3->0", posts[0]),
	}
	slices.Sort(want)
	with := func(suffix string) []string {
		out := make([]string, len(want))
		for i, w := range want {
			out[i] = w + suffix
		}
		slices.Sort(out)
		return out
	}

	before := dirDigest(t, dir)
	lines, res := runCheck(t, dir, false)
	if !slices.Equal(lines, with(" repaired=false unsettled=false")) {
		t.Fatalf("check found:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
	if tot := res.Totals(); tot.Drifts != int64(len(want)) || tot.Repaired != 0 || tot.Skipped != 5 { // the imported post, by each of five post checks
		t.Fatalf("totals %+v", tot)
	}
	if after := dirDigest(t, dir); after != before {
		t.Fatalf("check without -repair changed the directory:\n%s\nthen:\n%s", before, after)
	}

	// A running engine holds the directory: check refuses it.
	e, err = Open(opts)
	ok(t, err)
	if _, err := CheckDir(bg, dir, engine.CheckOptions{}, tier.Options{}, quiet); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("check of a directory in use: %v", err)
	}
	ok(t, e.Close())

	lines, res = runCheck(t, dir, true)
	if !slices.Equal(lines, with(" repaired=true unsettled=false")) || res.Totals().Repaired != int64(len(want)) {
		t.Fatalf("check -repair:\n%s\n%+v", strings.Join(lines, "\n"), res.Totals())
	}
	if lines, _ := runCheck(t, dir, false); len(lines) != 0 {
		t.Fatalf("drifts after repair:\n%s", strings.Join(lines, "\n"))
	}

	// The repairs are records: a restart replays them, and the counts
	// read as what they count.
	e, err = Open(opts)
	ok(t, err)
	defer e.Close()
	counts, err := e.Counts(bg, posts)
	ok(t, err)
	if counts[0].Likes != 5 || counts[0].Favorites != 5 || counts[1].Likes != 5 || counts[2].Likes != 0 {
		t.Fatalf("counts after repair: %+v", counts)
	}
	if m, _ := reactionsOf(t, e, 20, posts[2]); m["love"] != 2 || m["haha"] != 1 || m["like"] != 0 {
		t.Fatalf("reactions after repair: %v", m)
	}
	if m, _ := reactionsOf(t, e, 20, posts[0]); m["love"] != 1 || m["haha"] != 0 || m["like"] != 5 {
		t.Fatalf("reactions after repair: %v", m)
	}
	uc, err := e.UserCounts(bg, []engine.UserID{1, 2, 3, 10})
	ok(t, err)
	if uc[0].Followers != 5 || uc[1].Followers != 5 || uc[2].Followers != 0 || uc[0].Posts != 1 || uc[1].Posts != 1 || uc[3].Posts != 0 {
		t.Fatalf("user counts after repair: %+v", uc)
	}
	if lines, _ := runCheckLive(t, e); len(lines) != 0 {
		t.Fatalf("drifts after restart:\n%s", strings.Join(lines, "\n"))
	}
}

func runCheckLive(t *testing.T, e *Engine) ([]string, engine.CheckResult) {
	t.Helper()
	var lines []string
	res, err := e.Check(bg, engine.CheckOptions{Drift: func(d engine.Drift) {
		lines = append(lines, fmt.Sprintf("%s %d %d->%d", d.Count, d.ID, d.Stored, d.Recounted))
	}})
	ok(t, err)
	return lines, res
}

// TestCheckRepairLeavesAMovedCount: a repair whose count changed since the
// recount (a live engine) is not applied and is reported unsettled.
func TestCheckRepairLeavesAMovedCount(t *testing.T) {
	e := open(t, Options{})
	p, err := e.CreatePost(bg, 1, 0, "")
	ok(t, err)
	ok(t, e.Like(bg, 2, p))
	setCount(t, e, engine.CheckLikes, uint64(p), 3)
	e.mu.RLock()
	_, drifts, err := e.st.recount(bg)
	e.mu.RUnlock()
	ok(t, err)
	ok(t, e.Like(bg, 3, p)) // after the recount, before the repair
	var res engine.CheckResult
	var got []engine.Drift
	err = reportDrifts(&res, drifts, engine.CheckOptions{Repair: true, Drift: func(d engine.Drift) { got = append(got, d) }},
		func(r *recountRec) error { _, err := e.commit(r); return err })
	ok(t, err)
	if len(got) != 1 || !got[0].Unsettled || got[0].Repaired || res.Totals().Unsettled != 1 {
		t.Fatalf("moved count: %+v %+v", got, res.Totals())
	}
	if c, _ := e.Counts(bg, []engine.PostID{p}); c[0].Likes != 4 {
		t.Fatalf("the like after the recount was lost: %+v", c)
	}
}

// TestCheckDirRefusesNoStore: a directory without a snapshot or log is
// not checked (a mistyped -data would check an empty store).
func TestCheckDirRefusesNoStore(t *testing.T) {
	if _, err := CheckDir(bg, t.TempDir(), engine.CheckOptions{}, tier.Options{}, quiet); err == nil || !strings.Contains(err.Error(), "no data directory") {
		t.Fatalf("empty directory: %v", err)
	}
	if _, err := CheckDir(bg, filepath.Join(t.TempDir(), "nope"), engine.CheckOptions{}, tier.Options{}, quiet); err == nil {
		t.Fatal("missing directory checked")
	}
}

// TestCheckAtLeast: a post's comments also count those sent without an
// id, which no pair records: the count is a drift only below its live
// comment ids (a deleted one no longer counts), and is repaired up to
// them.
func TestCheckAtLeast(t *testing.T) {
	e := open(t, Options{})
	p, err := e.CreatePost(bg, 1, 0, "")
	ok(t, err)
	// One time for every id: a millisecond ticking between the comment
	// and its delete would name another comment.
	now := time.Now().UnixMilli()
	id := func(seq uint64) engine.CommentID {
		return engine.CommentID(snowflake.Make(now, 5, seq))
	}
	ok(t, e.Comment(bg, 2, p, id(1), nil, ""))
	ok(t, e.Comment(bg, 3, p, id(2), nil, ""))
	ok(t, e.Comment(bg, 3, p, 0, nil, "")) // no id: counted, nothing to show for it
	ok(t, e.Comment(bg, 4, p, id(3), nil, ""))
	ok(t, e.DeleteComment(bg, engine.Actor{User: 4}, p, id(3)))
	if lines, _ := runCheckLive(t, e); len(lines) != 0 {
		t.Fatalf("a count above its ids drifted: %v", lines)
	}
	setCount(t, e, engine.CheckComments, uint64(p), 1)
	var got []string
	_, err = e.Check(bg, engine.CheckOptions{Repair: true, Drift: func(d engine.Drift) {
		got = append(got, fmt.Sprintf("%s %d->%d %v", d.Count, d.Stored, d.Recounted, d.Repaired))
	}})
	ok(t, err)
	if !slices.Equal(got, []string{"post.comments 1->2 true"}) {
		t.Fatalf("a count below its ids: %v", got)
	}
	if c, _ := e.Counts(bg, []engine.PostID{p}); c[0].Comments != 2 {
		t.Fatalf("comments after repair: %+v", c)
	}
}
