package redisstore_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/enginetest"
	"github.com/tally-dev/tally/engine/redisstore"
	"github.com/tally-dev/tally/engine/redisstore/redistest"
	"github.com/tally-dev/tally/engine/snowflake"
)

// erased is the user the erasure tests erase: an id whose decimal and
// base-36 forms no other number of the tests holds by chance.
const erased = engine.UserID(987654321987)

// scene is a user with something of every kind Tally keeps, for an
// erasure to remove: likes (enough like sets for the keyspace walk to
// take several steps), favorites, posts (liked, reposted), a repost,
// comments with ids, mentions both ways, follows both ways, two groups
// (one the user made and wrote in, one they read in), idempotency keys
// of each kind, a rate-limit key and an open socket's key.
type scene struct {
	liked     []engine.PostID
	favs      []engine.PostID
	own       []engine.PostID
	repost    engine.PostID // the user's repost of liked[0]
	commented engine.PostID // liked[1], with the user's comment ids
	followees []engine.UserID
	followers []engine.UserID
	g1, g2    engine.GroupID
	m1, m2    engine.MessageID // sent by the user in g1; read by the user in g2
}

// others are the users of a scene besides the erased one.
const firstOther = 11

func buildScene(t *testing.T, s *redisstore.Store, likes int) *scene {
	t.Helper()
	sc := &scene{}
	now := time.Now().Add(-time.Hour).UnixMilli()
	rows := make([]engine.ImportRow, likes)
	for i := range rows {
		rows[i] = engine.ImportRow{Post: engine.PostID(snowflake.Make(now+int64(i), 7, 0)), Author: engine.UserID(firstOther + i%20)}
		sc.liked = append(sc.liked, rows[i].Post)
	}
	must(t, s.Import(bg, rows))
	parallel(t, len(sc.liked), func(i int) error {
		if err := s.Like(bg, erased, sc.liked[i]); err != nil {
			return err
		}
		if i%10 == 0 {
			return s.Like(bg, firstOther+1, sc.liked[i])
		}
		return nil
	})
	sc.favs = sc.liked[:100]
	parallel(t, len(sc.favs), func(i int) error { return s.Favorite(bg, erased, sc.favs[i]) })
	for i := range 5 {
		key := ""
		if i == 0 {
			key = "kp"
		}
		p, err := s.CreatePost(bg, erased, 0, key)
		must(t, err)
		sc.own = append(sc.own, p)
		must(t, s.Like(bg, firstOther+2, p))
		must(t, s.Like(bg, erased, p))
	}
	var err error
	_, err = s.Repost(bg, firstOther+3, sc.own[0], []engine.UserID{erased}, "")
	must(t, err)
	sc.repost, err = s.Repost(bg, erased, sc.liked[0], []engine.UserID{firstOther + 4}, "kr")
	must(t, err)
	sc.commented = sc.liked[1]
	for i := range 3 {
		key := ""
		if i == 0 {
			key = "kc"
		}
		cid := engine.CommentID(snowflake.Make(time.Now().UnixMilli(), 5, uint64(i)))
		must(t, s.Comment(bg, erased, sc.commented, cid, []engine.UserID{firstOther + 4}, key))
	}
	must(t, s.Comment(bg, firstOther+4, sc.own[1], engine.CommentID(snowflake.Make(time.Now().UnixMilli(), 5, 9)),
		[]engine.UserID{erased}, ""))
	for i := range 10 {
		u := engine.UserID(firstOther + i)
		sc.followees = append(sc.followees, u)
		must(t, s.Follow(bg, erased, u))
		f := engine.UserID(firstOther + 10 + i)
		sc.followers = append(sc.followers, f)
		must(t, s.Follow(bg, f, erased))
	}
	sc.g1, err = s.CreateGroup(bg, erased, []engine.UserID{firstOther, firstOther + 1, firstOther + 2})
	must(t, err)
	m, err := s.SendMessage(bg, erased, sc.g1, "hello", []engine.UserID{firstOther}, "km")
	must(t, err)
	sc.m1 = m.ID
	_, err = s.MarkMessagesRead(bg, firstOther+1, []engine.MessageID{sc.m1})
	must(t, err)
	sc.g2, err = s.CreateGroup(bg, firstOther, []engine.UserID{erased, firstOther + 3})
	must(t, err)
	m, err = s.SendMessage(bg, firstOther, sc.g2, "hi", []engine.UserID{erased}, "")
	must(t, err)
	sc.m2 = m.ID
	_, err = s.MarkMessagesRead(bg, erased, []engine.MessageID{sc.m2})
	must(t, err)
	// A rate-limit key and a socket left open by a replica that is gone.
	lim, err := s.NewLimiter(0.001, 10)
	must(t, err)
	if ok, _, err := lim.Take(bg, uint64(erased), 1); err != nil || !ok {
		t.Fatalf("limiter: %v %v", ok, err)
	}
	sockets, err := s.NewSocketCap(4, time.Hour)
	must(t, err)
	if _, ok, err := sockets.Acquire(bg, uint64(erased)); err != nil || !ok {
		t.Fatalf("socket cap: %v %v", ok, err)
	}
	sockets.Close()
	if n, err := s.Unread(bg, erased); err != nil || n.Mentions == 0 || n.Likes == 0 {
		t.Fatalf("the scene's user reads %+v, %v: badges to drop", n, err)
	}
	return sc
}

// parallel runs do(0..n-1) on 8 goroutines.
func parallel(t *testing.T, n int, do func(i int) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 8 {
				if err := do(i); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		must(t, err)
	}
}

// checkErased checks what the scene looks like once its user is erased:
// every count they added dropped exactly once, their posts without an
// author, the groups without them, and no trace of their id anywhere.
func (sc *scene) checkErased(t *testing.T, s *redisstore.Store) {
	t.Helper()
	_, counts := postsOf(t, s, sc.liked)
	for i, c := range counts {
		want := int64(0)
		if i%10 == 0 {
			want = 1
		}
		if c.Likes != want || c.Favorites != 0 {
			t.Fatalf("post %d (#%d) after the erasure: %+v, want %d likes and no favorite", sc.liked[i], i, c, want)
		}
	}
	if counts[0].Reposts != 1 || counts[1].Comments != 3 {
		t.Fatalf("the reposted and commented posts: %+v %+v: a repost and comments stay counted", counts[0], counts[1])
	}
	infos, err := s.Posts(bg, append(append([]engine.PostID(nil), sc.own...), sc.repost))
	must(t, err)
	for _, in := range infos {
		if !in.Exists || in.Author != 0 {
			t.Fatalf("the user's posts after the erasure: %+v, want them kept without an author", infos)
		}
	}
	oc, err := s.Counts(bg, sc.own)
	must(t, err)
	if oc[0].Likes != 1 || oc[0].Reposts != 1 || oc[1].Comments != 1 {
		t.Fatalf("the user's posts' counts %+v: others' likes, repost and comment stay, the user's own like goes", oc)
	}
	uc, err := s.UserCounts(bg, append(append([]engine.UserID{erased}, sc.followees...), sc.followers...))
	must(t, err)
	for i, c := range uc {
		if c != (engine.UserCounts{}) && (i == 0 || c.Followers != 0 || c.Following != 0) {
			t.Fatalf("user counts after the erasure %+v: no follow edge of the user's is left", uc)
		}
	}
	// Before the user reads anything: a read sets a new user's cursor.
	traces, err := s.Traces(bg, uint64(erased))
	must(t, err)
	if len(traces) > 0 {
		t.Fatalf("the erased id is still in %d places:\n%s", len(traces), strings.Join(traces, "\n"))
	}
	if n, err := s.Unread(bg, erased); err != nil || n != (engine.Unread{RedDot: n.RedDot}) {
		t.Fatalf("the erased user reads %+v, %v: as a new user", n, err)
	}
	members, err := s.GroupMembers(bg, firstOther, sc.g1, 10, 0)
	must(t, err)
	if fmt.Sprint(members) != fmt.Sprint([]engine.UserID{firstOther, firstOther + 1, firstOther + 2}) {
		t.Fatalf("g1's members %v", members)
	}
	msg, err := s.Message(bg, firstOther, sc.m1)
	must(t, err)
	if msg.Sender != 0 || msg.Text != "hello" {
		t.Fatalf("the user's message %+v: kept without its sender", msg)
	}
	r, err := s.Receipts(bg, firstOther, sc.m2, 10)
	must(t, err)
	if r.ReadCount != 1 || r.UnreadCount != 1 || len(r.Readers) != 0 {
		t.Fatalf("receipts of the message the user read: %+v, want them counted and unnamed", r)
	}
	if _, err := s.Message(bg, erased, sc.m2); err == nil {
		t.Fatal("the erased user still reads a group's message")
	}
	if st := s.Stats(); st.Erasures != 0 {
		t.Fatalf("%d erasures under way after the erasure", st.Erasures)
	}
}

// TestEraseLeavesNoTrace builds a user with something of every kind,
// checks the walk finds the id everywhere before the erasure (so the
// check can fail), erases them, and checks every count and list and that
// no key name or value, decoded or serialized, holds the id.
func TestEraseLeavesNoTrace(t *testing.T) {
	addr, _ := redistest.StartSingle(t)
	eraseLeavesNoTrace(t, []string{addr})
}

func eraseLeavesNoTrace(t *testing.T, addrs []string) {
	s := open(t, redisstore.Options{Addrs: addrs, KeyPrefix: prefix(), IntentSweepInterval: -1})
	sc := buildScene(t, s, 2500)
	before, err := s.Traces(bg, uint64(erased))
	must(t, err)
	for _, want := range []string{"user record", "author of post", "set ", "hash ", "string ", "key name", "serialized"} {
		found := false
		for _, tr := range before {
			found = found || strings.HasPrefix(tr, want)
		}
		if !found {
			t.Fatalf("before the erasure the walk finds no %q among %d traces: it would not see one", want, len(before))
		}
	}
	start := time.Now()
	must(t, s.EraseUser(bg, erased))
	t.Logf("erased a user with %d likes in %v (%d traces before)", len(sc.liked)+len(sc.own), time.Since(start), len(before))
	sc.checkErased(t, s)
	// A repeat changes nothing; the id then comes back as a new user.
	must(t, s.EraseUser(bg, erased))
	sc.checkErased(t, s)
	must(t, s.Like(bg, erased, sc.liked[5]))
	must(t, s.Follow(bg, erased, firstOther))
	if c, err := s.Counts(bg, sc.liked[5:6]); err != nil || c[0].Likes != 1 {
		t.Fatalf("a like by the id after its erasure: %+v %v", c, err)
	}
}

// TestLifecycleRaces races likes, unlikes, favorites, comments with ids,
// comment deletes, post deletes and erasures of the same users on the
// same posts, then checks what no interleaving may break: every post's
// counts equal its sets (likers, favoriters, counted comment ids), none
// is below zero, a deleted post has no set left; and once the users are
// erased again with nothing racing, no trace of them is left.
func TestLifecycleRaces(t *testing.T) {
	addr, _ := redistest.StartSingle(t)
	lifecycleRaces(t, []string{addr})
}

func lifecycleRaces(t *testing.T, addrs []string) {
	p := prefix()
	s := open(t, redisstore.Options{Addrs: addrs, KeyPrefix: p, IntentSweepInterval: -1})
	const authors, racers = 50, 8
	var posts []engine.PostID
	for i := range 40 {
		id, err := s.CreatePost(bg, engine.UserID(authors+i%4), 0, "")
		must(t, err)
		posts = append(posts, id)
	}
	cids := make([]engine.CommentID, 64)
	for i := range cids {
		cids[i] = engine.CommentID(snowflake.Make(time.Now().UnixMilli(), 6, uint64(i)))
	}
	user := func(rng *rand.Rand) engine.UserID { return engine.UserID(erased) + engine.UserID(rng.IntN(racers)) }
	deadline := time.Now().Add(3 * time.Second)
	var ops, erasures sync.Map
	parallel(t, 8, func(w int) error {
		rng := rand.New(rand.NewPCG(uint64(w), 42))
		n := 0
		for ; time.Now().Before(deadline); n++ {
			u, post := user(rng), posts[rng.IntN(len(posts))]
			var err error
			switch r := rng.IntN(100); {
			case r < 30:
				err = s.Like(bg, u, post)
			case r < 45:
				err = s.Unlike(bg, u, post)
			case r < 55:
				err = s.Favorite(bg, u, post)
			case r < 60:
				err = s.Unfavorite(bg, u, post)
			case r < 80:
				err = s.Comment(bg, u, post, cids[rng.IntN(len(cids))], nil, "")
			case r < 90:
				err = s.DeleteComment(bg, engine.Actor{User: u, Privileged: true}, post, cids[rng.IntN(len(cids))])
			case r < 92:
				err = s.DeletePost(bg, engine.Actor{User: u, Privileged: true}, post)
			default:
				err = s.EraseUser(bg, u)
				erasures.Store(w*1_000_000+n, u)
			}
			if err != nil && !isProductError(err) {
				return err
			}
		}
		ops.Store(w, n)
		return nil
	})
	total, erasing := 0, 0
	ops.Range(func(_, n any) bool { total += n.(int); return true })
	erasures.Range(func(_, _ any) bool { erasing++; return true })
	t.Logf("%d racing operations, %d of them erasures", total, erasing)
	checkSetsAgree(t, s, addrs, p, posts)
	enginetest.CheckClean(t, s)
	for i := range racers {
		must(t, s.EraseUser(bg, erased+engine.UserID(i)))
	}
	checkSetsAgree(t, s, addrs, p, posts)
	enginetest.CheckClean(t, s)
	for i := range racers {
		traces, err := s.Traces(bg, uint64(erased)+uint64(i))
		must(t, err)
		if len(traces) > 0 {
			t.Fatalf("user %d erased again after the races is still in:\n%s", uint64(erased)+uint64(i), strings.Join(traces, "\n"))
		}
	}
}

func isProductError(err error) bool {
	return errors.Is(err, engine.ErrNotFound) || errors.Is(err, engine.ErrForbidden) || errors.Is(err, engine.ErrInvalid)
}

// checkSetsAgree reads each post's record and sets straight from Redis:
// a post's likes and favorites are its sets' sizes and its comments the
// comment ids counted (every comment of the races has an id); a deleted
// post has no set left.
func checkSetsAgree(t *testing.T, s *redisstore.Store, addrs []string, p string, posts []engine.PostID) {
	t.Helper()
	rdb := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: addrs})
	defer rdb.Close()
	infos, counts := postsOf(t, s, posts)
	for i, post := range posts {
		bucket := s.PostKey(post)
		low := strconv.FormatUint(uint64(post)&(1<<32-1), 10)
		likers := rdb.SCard(bg, bucket+"l"+low).Val()
		favs := rdb.SCard(bg, bucket+"f"+low).Val()
		live := rdb.SCard(bg, bucket+"c"+low).Val()
		c := counts[i]
		if !infos[i].Exists {
			if likers+favs+live+rdb.SCard(bg, bucket+"d"+low).Val() != 0 || c != (engine.Counts{}) {
				t.Fatalf("deleted post %d keeps sets (%d likers, %d favoriters, %d comment ids) or counts %+v", post, likers, favs, live, c)
			}
			continue
		}
		if c.Likes != likers || c.Favorites != favs || c.Comments != live || c.Likes < 0 || c.Comments < 0 || c.Favorites < 0 {
			t.Fatalf("post %d: counts %+v, sets: %d likers, %d favoriters, %d comment ids counted", post, c, likers, favs, live)
		}
	}
}

// postsOf reads the registry entries and counts of any number of posts.
func postsOf(t *testing.T, s *redisstore.Store, posts []engine.PostID) ([]engine.PostInfo, []engine.Counts) {
	t.Helper()
	var infos []engine.PostInfo
	var counts []engine.Counts
	for i := 0; i < len(posts); i += engine.MaxIDsPerCall {
		page := posts[i:min(i+engine.MaxIDsPerCall, len(posts))]
		in, err := s.Posts(bg, page)
		must(t, err)
		cs, err := s.Counts(bg, page)
		must(t, err)
		infos, counts = append(infos, in...), append(counts, cs...)
	}
	return infos, counts
}
