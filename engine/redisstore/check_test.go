package redisstore_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/enginetest"
	"github.com/tally-dev/tally/engine/redisstore"
	"github.com/tally-dev/tally/engine/redisstore/redistest"
	"github.com/tally-dev/tally/engine/snowflake"
)

func TestCheckSingle(t *testing.T) {
	addr, _ := redistest.StartSingle(t)
	t.Run("FindsAndRepairs", func(t *testing.T) { testCheckFindsAndRepairs(t, []string{addr}) })
	t.Run("Unsettled", func(t *testing.T) { testCheckUnsettled(t, []string{addr}) })
	t.Run("Reactions", func(t *testing.T) { testCheckReactions(t, []string{addr}) })
	t.Run("Reacted", func(t *testing.T) { testCheckReacted(t, []string{addr}) })
}

func TestCheckCluster(t *testing.T) {
	c := redistest.StartCluster(t, 3, 0)
	t.Run("FindsAndRepairs", func(t *testing.T) { testCheckFindsAndRepairs(t, c.Addrs()) })
	t.Run("Unsettled", func(t *testing.T) { testCheckUnsettled(t, c.Addrs()) })
	t.Run("Reactions", func(t *testing.T) { testCheckReactions(t, c.Addrs()) })
	t.Run("Reacted", func(t *testing.T) { testCheckReacted(t, c.Addrs()) })
}

// rawClient talks to the Redis of addrs directly: a cluster client for
// several addresses, a plain one for one.
func rawClient(t testing.TB, addrs []string) redis.UniversalClient {
	c := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: addrs})
	t.Cleanup(func() { c.Close() })
	return c
}

// keyspaceDump is every key of prefix p with its DUMP, for proving that
// a check wrote nothing.
func keyspaceDump(t testing.TB, rdb redis.UniversalClient, p string) map[string]string {
	t.Helper()
	out := map[string]string{}
	dump := func(ctx context.Context, c *redis.Client) error {
		keys, err := c.Keys(ctx, p+"*").Result()
		if err != nil {
			return err
		}
		for _, k := range keys {
			v, err := c.Dump(ctx, k).Result()
			if err != nil {
				return err
			}
			out[k] = v
		}
		return nil
	}
	var err error
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		var mu = make(chan struct{}, 1)
		err = cc.ForEachMaster(bg, func(ctx context.Context, c *redis.Client) error {
			mu <- struct{}{}
			defer func() { <-mu }()
			return dump(ctx, c)
		})
	} else {
		err = dump(bg, rdb.(*redis.Client))
	}
	must(t, err)
	return out
}

// checkLines runs s.Check and returns its drifts as sorted lines.
func checkLines(t testing.TB, s *redisstore.Store, repair bool) ([]string, engine.CheckResult) {
	t.Helper()
	var lines []string
	res, err := s.Check(bg, engine.CheckOptions{Repair: repair, Drift: func(d engine.Drift) {
		lines = append(lines, fmt.Sprintf("%s %d %d->%d repaired=%v unsettled=%v", d.Count, d.ID, d.Stored, d.Recounted, d.Repaired, d.Unsettled))
	}})
	must(t, err)
	slices.Sort(lines)
	return lines, res
}

// setPostCounts rewrites a post's record with counts c (HSET), as a bug
// or a partial restore would leave it.
func setPostCounts(t testing.TB, rdb redis.UniversalClient, s *redisstore.Store, p engine.PostID, c engine.Counts) {
	t.Helper()
	key, field := s.PostField(p)
	rec, err := rdb.HGet(bg, key, field).Result()
	must(t, err)
	must(t, rdb.HSet(bg, key, field, redisstore.WithPostCounts(rec, c)).Err())
}

// setUserCounts rewrites a user's record with counts c.
func setUserCounts(t testing.TB, rdb redis.UniversalClient, s *redisstore.Store, u engine.UserID, c engine.UserCounts) {
	t.Helper()
	key, field := s.UserField(u)
	rec, err := rdb.HGet(bg, key, field).Result()
	if err == redis.Nil {
		rec, err = "", nil
	}
	must(t, err)
	must(t, rdb.HSet(bg, key, field, redisstore.WithUserCounts(rec, c)).Err())
}

func userCounts(t testing.TB, s *redisstore.Store, u engine.UserID) engine.UserCounts {
	t.Helper()
	uc, err := s.UserCounts(bg, []engine.UserID{u})
	must(t, err)
	return uc[0]
}

// testCheckFindsAndRepairs writes a keyspace, corrupts one count of each
// kind in each direction behind Tally's back (a wrong packed count, a
// set member removed, user records rewritten, a followee entry deleted),
// and checks it: check finds exactly those drifts and writes nothing;
// check -repair fixes each; a check after that is clean.
func testCheckFindsAndRepairs(t *testing.T, addrs []string) {
	p := prefix()
	opts := redisstore.Options{Addrs: addrs, KeyPrefix: p}
	s := open(t, opts)
	rdb := rawClient(t, addrs)
	posts := enginetest.CheckWorld(t, s)
	// A deleted post (a tombstone) counts for nothing.
	gone, err := s.CreatePost(bg, 2, 0, "")
	must(t, err)
	must(t, s.Like(bg, 10, gone))
	must(t, s.DeletePost(bg, engine.Actor{User: 2}, gone))
	// An imported count has no set behind it: not recounted.
	must(t, s.Import(bg, []engine.ImportRow{{Post: posts[0] + 1000, Author: 4, Counts: engine.Counts{Likes: 77, Favorites: 5}}}))
	if lines, res := checkLines(t, s, false); len(lines) != 0 || res.Totals().Skipped != 3 {
		t.Fatalf("a fresh keyspace: %v %+v", lines, res.Totals())
	}

	setPostCounts(t, rdb, s, posts[0], engine.Counts{Likes: 9, Favorites: 2, Comments: 3}) // above its set; below it; no ids
	must(t, rdb.SRem(bg, s.LikersKey(posts[1]), "10").Err())                               // a liker lost: the count is above
	setPostCounts(t, rdb, s, posts[2], engine.Counts{Likes: 4})                            // a count with no set
	setUserCounts(t, rdb, s, 1, engine.UserCounts{Posts: 0, Followers: 6})                 // no post count; above the edges
	setUserCounts(t, rdb, s, 3, engine.UserCounts{Posts: 1, Followers: 2})                 // followed by none
	setUserCounts(t, rdb, s, 10, engine.UserCounts{Posts: 1, Following: 2})                // never posted
	setUserCounts(t, rdb, s, 12, engine.UserCounts{Following: 7})                          // above its followee hash
	must(t, rdb.HDel(bg, s.FolloweesKey(11), "1").Err())                                   // 11 no longer follows 1
	for _, u := range []engine.UserID{2, 13} {                                             // records lost
		key, field := s.UserField(u)
		must(t, rdb.HDel(bg, key, field).Err())
	}
	must(t, s.Close())

	want := []string{
		fmt.Sprintf("post.comments %d 3->0", posts[0]),
		fmt.Sprintf("post.favorites %d 2->5", posts[0]),
		fmt.Sprintf("post.likes %d 9->5", posts[0]),
		fmt.Sprintf("post.likes %d 5->4", posts[1]),
		fmt.Sprintf("post.likes %d 4->0", posts[2]),
		"user.followers 1 6->4",
		"user.followers 2 0->5",
		"user.followers 3 2->0",
		"user.following 11 2->1",
		"user.following 12 7->2",
		"user.following 13 0->2",
		"user.posts 1 0->1",
		"user.posts 2 0->1",
		"user.posts 10 1->0",
	}
	with := func(suffix string) []string {
		out := make([]string, len(want))
		for i, w := range want {
			out[i] = w + suffix
		}
		slices.Sort(out)
		return out
	}
	// The check's own store takes a node: Open would otherwise allocate
	// one, a write.
	checker := open(t, redisstore.Options{Addrs: addrs, KeyPrefix: p, Node: 1})
	before := keyspaceDump(t, rdb, p)
	lines, res := checkLines(t, checker, false)
	if !slices.Equal(lines, with(" repaired=false unsettled=false")) {
		t.Fatalf("check found:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
	if tot := res.Totals(); tot.Drifts != int64(len(want)) || tot.Repaired != 0 || tot.Skipped != 3 {
		t.Fatalf("totals %+v", tot)
	}
	if after := keyspaceDump(t, rdb, p); !mapsEqual(before, after) {
		t.Fatal("check without -repair changed the keyspace")
	}

	lines, res = checkLines(t, checker, true)
	if !slices.Equal(lines, with(" repaired=true unsettled=false")) || res.Totals().Repaired != int64(len(want)) {
		t.Fatalf("check -repair:\n%s\n%+v", strings.Join(lines, "\n"), res.Totals())
	}
	if lines, _ := checkLines(t, checker, false); len(lines) != 0 {
		t.Fatalf("drifts after repair:\n%s", strings.Join(lines, "\n"))
	}
	counts, err := checker.Counts(bg, posts)
	must(t, err)
	if counts[0].Likes != 5 || counts[0].Favorites != 5 || counts[1].Likes != 4 || counts[2].Likes != 0 {
		t.Fatalf("counts after repair: %+v", counts)
	}
	for u, w := range map[engine.UserID]engine.UserCounts{
		1: {Posts: 1, Followers: 4}, 2: {Posts: 1, Followers: 5}, 3: {Posts: 1}, 10: {Following: 2},
		11: {Following: 1}, 12: {Following: 2}, 13: {Following: 2},
	} {
		if got := userCounts(t, checker, u); got != w {
			t.Errorf("user %d after repair: %+v, want %+v", u, got, w)
		}
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// testCheckUnsettled: a count kept in another slot than what it counts
// (followers) that changes while the check scans is reported unsettled,
// not judged; a repair whose count changed after the scans is not
// applied, and the write that changed it stays.
func testCheckUnsettled(t *testing.T, addrs []string) {
	p := prefix()
	s := open(t, redisstore.Options{Addrs: addrs, KeyPrefix: p})
	rdb := rawClient(t, addrs)
	must(t, s.Follow(bg, 20, 3))
	setUserCounts(t, rdb, s, 3, engine.UserCounts{Followers: 5})
	checker := open(t, redisstore.Options{Addrs: addrs, KeyPrefix: p, Node: 1})

	// A follow between the two reads of the user records.
	checker.SetCheckPause(func(step string) {
		if step == "sources" {
			must(t, s.Follow(bg, 21, 3))
		}
	})
	lines, res := checkLines(t, checker, true)
	if !slices.Equal(lines, []string{"user.followers 3 6->2 repaired=false unsettled=true"}) || res.Totals().Unsettled != 1 {
		t.Fatalf("a count that moved during the scans: %v %+v", lines, res.Totals())
	}
	if got := userCounts(t, s, 3).Followers; got != 6 {
		t.Fatalf("followers %d after an unsettled check, want 6 (untouched)", got)
	}

	// A follow between the scans and the repair: the compare-and-set
	// refuses, and the follow's count stays.
	checker.SetCheckPause(func(step string) {
		if step == "settle" {
			must(t, s.Follow(bg, 22, 3))
		}
	})
	lines, _ = checkLines(t, checker, true)
	if !slices.Equal(lines, []string{"user.followers 3 6->2 repaired=false unsettled=true"}) {
		t.Fatalf("a count that moved before its repair: %v", lines)
	}
	if got := userCounts(t, s, 3).Followers; got != 7 {
		t.Fatalf("followers %d, want 7: the follow during the check was lost", got)
	}

	checker.SetCheckPause(nil)
	lines, _ = checkLines(t, checker, true)
	if !slices.Equal(lines, []string{"user.followers 3 7->3 repaired=true unsettled=false"}) {
		t.Fatalf("a quiet check -repair: %v", lines)
	}
	if lines, _ := checkLines(t, checker, false); len(lines) != 0 || userCounts(t, s, 3).Followers != 3 {
		t.Fatalf("after repair: %v, followers %d", lines, userCounts(t, s, 3).Followers)
	}
}

// TestCheckComments: a post's comment count is recounted exactly from
// its counted comment ids plus the comments sent without one; deleted
// ids do not count; a drift either way is found and repaired.
func TestCheckComments(t *testing.T) {
	addr, _ := redistest.StartSingle(t)
	s := open(t, redisstore.Options{Addrs: []string{addr}, KeyPrefix: prefix()})
	rdb := rawClient(t, []string{addr})
	p, err := s.CreatePost(bg, 1, 0, "")
	must(t, err)
	now := time.Now().UnixMilli()
	for i := range 3 {
		must(t, s.Comment(bg, 2, p, engine.CommentID(snowflake.Make(now, 1, uint64(i))), nil, ""))
	}
	must(t, s.Comment(bg, 3, p, 0, nil, ""))
	must(t, s.Comment(bg, 3, p, 0, nil, ""))
	must(t, s.DeleteComment(bg, engine.Actor{User: 2}, p, engine.CommentID(snowflake.Make(now, 1, 0))))
	if lines, _ := checkLines(t, s, false); len(lines) != 0 {
		t.Fatalf("2 counted ids and 2 comments without one: %v", lines)
	}
	for _, stored := range []int64{7, 1} {
		setPostCounts(t, rdb, s, p, engine.Counts{Comments: stored})
		want := fmt.Sprintf("post.comments %d %d->4 repaired=true unsettled=false", p, stored)
		if lines, _ := checkLines(t, s, true); !slices.Equal(lines, []string{want}) {
			t.Fatalf("comments set to %d: %v", stored, lines)
		}
		if c, _ := s.Counts(bg, []engine.PostID{p}); c[0].Comments != 4 {
			t.Fatalf("comments after repair: %+v", c)
		}
	}
}

// TestCheckImportedBuckets: posts whose counts an import wrote are not
// recounted from their sets, and a bucket all of whose posts are in the
// import span is read without a script: its authors still count.
func TestCheckImportedBuckets(t *testing.T) {
	addr, _ := redistest.StartSingle(t)
	s := open(t, redisstore.Options{Addrs: []string{addr}, KeyPrefix: prefix()})
	rdb := rawClient(t, []string{addr})
	now := time.Now().Add(-time.Hour).UnixMilli()
	var rows []engine.ImportRow
	for i, author := range []engine.UserID{5, 5, 6} { // three windows: the middle one wholly imported
		id := engine.PostID(snowflake.Make(now+int64(i)*10_000, 1, 0))
		rows = append(rows, engine.ImportRow{Post: id, Author: author, Counts: engine.Counts{Likes: 40, Favorites: 2}})
	}
	must(t, s.Import(bg, rows))
	lines, res := checkLines(t, s, false)
	// Checked: the two authors' post counts and following counts, and
	// the reacted bits of the two posts a script read; skipped: the
	// three posts' three counts, and the bit of the post read by HVALS.
	if tot := res.Totals(); len(lines) != 0 || tot.Skipped != 10 || tot.Checked != 6 {
		t.Fatalf("an imported keyspace: %v %+v", lines, tot)
	}
	if stats, err := rdb.Info(bg, "commandstats").Result(); err != nil || !strings.Contains(stats, "cmdstat_hvals:calls=1,") {
		t.Fatalf("the wholly imported bucket was not read with one HVALS: %v\n%s", err, stats)
	}
	setUserCounts(t, rdb, s, 5, engine.UserCounts{})
	if lines, _ := checkLines(t, s, false); !slices.Equal(lines, []string{"user.posts 5 0->2 repaired=false unsettled=false"}) {
		t.Fatalf("an imported author's count: %v", lines)
	}
}

// testCheckReactions: every reaction kind of the keyspace's table is
// recounted from the reactors hash, and repaired; a check opened without
// kinds (tally check) takes the keyspace's.
func testCheckReactions(t *testing.T, addrs []string) {
	p := prefix()
	s := open(t, redisstore.Options{Addrs: addrs, KeyPrefix: p, Reactions: []string{"like", "love", "haha"}})
	rdb := rawClient(t, addrs)
	post, err := s.CreatePost(bg, 1, 0, "")
	must(t, err)
	for u, kind := range map[engine.UserID]string{10: "love", 11: "love", 12: "love", 13: "haha", 14: "like"} {
		must(t, s.ReactToPost(bg, u, post, kind))
	}
	must(t, s.Close())
	checker := open(t, redisstore.Options{Addrs: addrs, KeyPrefix: p, Node: 1, Existing: true})
	if got := checker.ReactionKinds(); !slices.Equal(got, []string{"like", "love", "haha"}) {
		t.Fatalf("a check's kinds: %v", got)
	}
	lines, res := checkLines(t, checker, false)
	if len(lines) != 0 || res.Tally("post.reactions.love").Checked != 1 || res.Tally("post.reactions.haha").Checked != 1 {
		t.Fatalf("a fresh keyspace: %v %+v", lines, res)
	}
	// 12's love becomes a haha behind Tally's back.
	must(t, rdb.HSet(bg, checker.ReactorsKey(post), "12", "3").Err())
	want := []string{fmt.Sprintf("post.reactions.haha %d 1->2", post), fmt.Sprintf("post.reactions.love %d 3->2", post)}
	if lines, _ := checkLines(t, checker, false); !slices.Equal(lines, []string{want[0] + " repaired=false unsettled=false", want[1] + " repaired=false unsettled=false"}) {
		t.Fatalf("check found:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
	if lines, _ := checkLines(t, checker, true); len(lines) != 2 || !strings.HasSuffix(lines[0], "repaired=true unsettled=false") {
		t.Fatalf("check -repair:\n%s", strings.Join(lines, "\n"))
	}
	if lines, _ := checkLines(t, checker, false); len(lines) != 0 {
		t.Fatalf("drifts after repair:\n%s", strings.Join(lines, "\n"))
	}
	out := make([]engine.PostView, 1)
	must(t, checker.Page(bg, 12, []engine.PostID{post}, engine.PageWant{Reactions: true, ViewerReaction: true}, out))
	if [3]int64(out[0].Reactions.Count[:3]) != [3]int64{1, 2, 2} || out[0].ViewerReaction != "haha" {
		t.Fatalf("after repair: %+v", out[0])
	}
}
