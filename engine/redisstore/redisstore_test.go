package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/counters"
	"github.com/tally-dev/tally/engine/enginetest"
	"github.com/tally-dev/tally/engine/redisstore"
	"github.com/tally-dev/tally/engine/redisstore/redistest"
	"github.com/tally-dev/tally/engine/snowflake"
)

var bg = context.Background()

// prefixes gives every store of the package run its own key prefix, so
// subtests share one Redis (one cluster per run) without seeing each
// other's data. The prefix sits outside the hash tags.
var prefixes atomic.Int64

func prefix() string { return fmt.Sprintf("t%d:", prefixes.Add(1)) }

func open(t testing.TB, opts redisstore.Options) *redisstore.Store {
	t.Helper()
	if opts.ReadTimeout == 0 {
		// Tests share a small machine with each other and with builds; the
		// production default (1s) would turn a scheduling stall into a
		// spurious failure. Fail-fast tests rely on refused connections,
		// which this does not slow down.
		opts.ReadTimeout = 5 * time.Second
	}
	s, err := redisstore.Open(bg, opts)
	if err != nil {
		t.Fatalf("open %v: %v (cause: %v)", opts.Addrs, err, redisstore.Cause(err))
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%v (cause: %v)", err, redisstore.Cause(err))
	}
}

func TestConformanceSingle(t *testing.T) {
	addr, _ := redistest.StartSingle(t)
	enginetest.Run(t, func(t *testing.T) engine.Store {
		return open(t, redisstore.Options{Addrs: []string{addr}, KeyPrefix: prefix()})
	})
}

// clockedBackend opens stores on addrs for the clocked suites (rule
// scripts, metamorphic test), each under its own key prefix. A restart is
// a new Store (a replica restarting) on the same data.
func clockedBackend(name string, addrs []string) enginetest.Backend {
	return enginetest.Backend{
		Name: name,
		Open: func(t *testing.T, cfg enginetest.Config) (engine.Store, func() (engine.Store, error)) {
			opts := redisstore.Options{Addrs: addrs, KeyPrefix: prefix(), Now: cfg.Now, CursorTTL: cfg.CursorTTL, Reactions: cfg.Reactions}
			cur := open(t, opts)
			return cur, func() (engine.Store, error) {
				if err := cur.Close(); err != nil {
					return nil, err
				}
				cur = open(t, opts)
				return cur, nil
			}
		},
	}
}

func TestClockedSingle(t *testing.T) {
	addr, _ := redistest.StartSingle(t)
	enginetest.RunClocked(t, clockedBackend("single", []string{addr}))
}

// TestCluster runs everything that needs a healthy 3-master cluster on one
// cluster: the conformance suite, cross-replica events, slot spreading.
func TestCluster(t *testing.T) {
	c := redistest.StartCluster(t, 3, 0)
	addrs := c.Addrs()

	t.Run("UnreadMany", func(t *testing.T) { checkUnreadMany(t, addrs) })

	t.Run("Conformance", func(t *testing.T) {
		enginetest.Run(t, func(t *testing.T) engine.Store {
			return open(t, redisstore.Options{Addrs: addrs, KeyPrefix: prefix()})
		})
	})

	t.Run("Clocked", func(t *testing.T) { enginetest.RunClocked(t, clockedBackend("cluster", addrs)) })

	t.Run("KindsReconcile", func(t *testing.T) { testKindsReconcile(t, addrs) })

	t.Run("EventsAcrossReplicas", func(t *testing.T) {
		p := prefix()
		a := open(t, redisstore.Options{Addrs: addrs[:1], KeyPrefix: p})
		b := open(t, redisstore.Options{Addrs: addrs[1:], KeyPrefix: p})
		got := make(chan engine.Event, 64)
		cancel := b.Subscribe(func(ev engine.Event) {
			select {
			case got <- ev:
			default:
			}
		})
		defer cancel()
		const author, fan = 500, 501
		post, err := a.CreatePost(bg, author, 0, "")
		must(t, err)
		must(t, a.Like(bg, fan, post))
		must(t, a.PushRedDot(bg))
		want := map[engine.EventKind]bool{engine.AuthorPosted: true, engine.UnreadChanged: true, engine.Broadcast: true}
		deadline := time.After(time.Second)
		for len(want) > 0 {
			select {
			case ev := <-got:
				switch {
				case ev.Kind == engine.AuthorPosted && ev.Author == author,
					ev.Kind == engine.UnreadChanged && slices.Contains(ev.Users, author),
					ev.Kind == engine.Broadcast:
					delete(want, ev.Kind)
				}
			case <-deadline:
				t.Fatalf("events published through replica A not seen by B within 1s: missing %v", want)
			}
		}
		// Both replicas read the same state.
		n, err := b.Unread(bg, author)
		must(t, err)
		if n.Likes != 1 || !n.RedDot {
			t.Fatalf("replica B reads %+v", n)
		}
	})

	t.Run("WriteFollowsMovedSlot", func(t *testing.T) {
		// A write whose slot moved since the Store loaded its slot map is
		// answered MOVED (so it did not run) and is re-sent to the new
		// owner; go-redis's own write retries are off.
		s := open(t, redisstore.Options{Addrs: addrs, KeyPrefix: prefix()})
		_, err := s.Counts(bg, []engine.PostID{1 << 40}) // warm the slot map
		must(t, err)
		id := engine.PostID(snowflake.Make(time.Now().UnixMilli(), 999, 1))
		key := s.PostKey(id)
		from := c.MasterForKey(key)
		var to string
		for _, m := range c.Masters() {
			if m != from {
				to = m
				break
			}
		}
		moveEmptySlot(t, key, from, to, addrs)
		got, err := s.CreatePost(bg, 5, id, "")
		must(t, err)
		infos, err := s.Posts(bg, []engine.PostID{got})
		must(t, err)
		if !infos[0].Exists || c.MasterForKey(key) != to {
			t.Fatalf("post %d after the slot moved: %+v, owner %s", got, infos[0], c.MasterForKey(key))
		}
	})

	// The lifecycle on a cluster: the erasure walks every master, and its
	// changes and the deletes' intents span slots and nodes.
	t.Run("EraseLeavesNoTrace", func(t *testing.T) { eraseLeavesNoTrace(t, addrs) })
	t.Run("LifecycleRaces", func(t *testing.T) { lifecycleRaces(t, addrs) })
	t.Run("EraseKill9", func(t *testing.T) { runEraseKill9(t, addrs, false) })
	t.Run("DeleteBurstKill9", func(t *testing.T) { runDeleteBurstKill9(t, addrs) })

	t.Run("PostsSpreadOverSlots", func(t *testing.T) {
		// Posts of the same second must not all land on one node: the
		// newest posts are the hottest (docs/seeds.md#seed-000).
		s := open(t, redisstore.Options{Addrs: addrs, KeyPrefix: prefix()})
		nodes := map[string]bool{}
		for range 64 {
			id, err := s.CreatePost(bg, 7, 0, "")
			must(t, err)
			nodes[c.MasterForKey(s.PostKey(id))] = true
		}
		if len(nodes) < 3 {
			t.Fatalf("64 posts of one second live on %d of 3 masters", len(nodes))
		}
	})
}

// moveEmptySlot hands key's (empty) slot from one master to another the
// way redis-cli --cluster reshard does, without keys to migrate.
func moveEmptySlot(t *testing.T, key, from, to string, all []string) {
	t.Helper()
	cl := func(addr string) *redis.Client {
		return redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, DisableIdentity: true})
	}
	src, dst := cl(from), cl(to)
	defer src.Close()
	defer dst.Close()
	slot, err := src.ClusterKeySlot(bg, key).Result()
	must(t, err)
	srcID, err := src.Do(bg, "CLUSTER", "MYID").Text()
	must(t, err)
	dstID, err := dst.Do(bg, "CLUSTER", "MYID").Text()
	must(t, err)
	must(t, dst.Do(bg, "CLUSTER", "SETSLOT", slot, "IMPORTING", srcID).Err())
	must(t, src.Do(bg, "CLUSTER", "SETSLOT", slot, "MIGRATING", dstID).Err())
	for _, a := range all {
		c := cl(a)
		_ = c.Do(bg, "CLUSTER", "SETSLOT", slot, "NODE", dstID).Err() // replicas refuse; fine
		c.Close()
	}
}

// TestRedisDownAndBack kills the only Redis: calls fail fast with
// ErrUnavailable, Ready reports it, and once Redis is back (reloading its
// append-only file) the same Store serves again with nothing lost.
func TestRedisDownAndBack(t *testing.T) {
	node := redistest.StartSingleNode(t, redistest.AlwaysFsync...)
	s := open(t, redisstore.Options{Addrs: []string{node.Addr}, KeyPrefix: prefix()})
	post, err := s.CreatePost(bg, 1, 0, "")
	must(t, err)
	must(t, s.Like(bg, 2, post))

	node.Kill()
	start := time.Now()
	_, err = s.Counts(bg, []engine.PostID{post})
	if !errors.Is(err, engine.ErrUnavailable) {
		t.Fatalf("Counts with Redis down: %v, want ErrUnavailable", err)
	}
	if err.Error() != engine.ErrUnavailable.Error() {
		t.Fatalf("error text %q leaks details", err.Error())
	}
	if err := s.Like(bg, 3, post); !errors.Is(err, engine.ErrUnavailable) {
		t.Fatalf("Like with Redis down: %v", err)
	}
	if err := s.Ready(bg); !errors.Is(err, engine.ErrUnavailable) {
		t.Fatalf("Ready with Redis down: %v", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("three failing calls took %v; want fast failure", d)
	} else {
		t.Logf("three calls failed in %v with Redis down", d)
	}

	node.Restart()
	deadline := time.Now().Add(10 * time.Second)
	for s.Ready(bg) != nil {
		if time.Now().After(deadline) {
			t.Fatal("store not ready 10s after Redis came back")
		}
		time.Sleep(50 * time.Millisecond)
	}
	must(t, s.Like(bg, 3, post))
	cs, err := s.Counts(bg, []engine.PostID{post})
	must(t, err)
	if cs[0].Likes != 2 {
		t.Fatalf("likes after restart = %d, want 2 (1 before the kill + 1 after)", cs[0].Likes)
	}
	// Events flow again through the re-established subscription.
	got := make(chan engine.Event, 16)
	cancel := s.Subscribe(func(ev engine.Event) {
		select {
		case got <- ev:
		default:
		}
	})
	defer cancel()
	deadline = time.Now().Add(5 * time.Second)
	for {
		must(t, s.PushRedDot(bg))
		select {
		case <-got:
			return
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("no events after Redis came back")
		}
	}
}

// TestFailover kills the master that owns a post's slot in a 3-master,
// 3-replica cluster. Writes acknowledged with WaitReplicas=1 before the
// kill survive the promotion of its replica, and service resumes.
func TestFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("failover takes several seconds")
	}
	c := redistest.StartCluster(t, 3, 1)
	s := open(t, redisstore.Options{Addrs: c.Addrs(), KeyPrefix: prefix(), WaitReplicas: 1, WaitTimeout: 2 * time.Second})
	woke := make(chan engine.UserID, 1024)
	cancel := s.Subscribe(func(ev engine.Event) {
		if ev.Kind == engine.UnreadChanged {
			for _, u := range ev.Users {
				select {
				case woke <- u:
				default:
				}
			}
		}
	})
	defer cancel()
	const author = 900
	post, err := s.CreatePost(bg, author, 0, "")
	must(t, err)
	const likes = 50
	for u := range likes {
		must(t, s.Like(bg, engine.UserID(1000+u), post))
	}
	must(t, s.Comment(bg, 901, post, 0, nil, "k1"))

	victim := c.MasterForKey(s.PostKey(post))
	c.Kill(victim)
	c.WaitFailover(victim, 30*time.Second)

	deadline := time.Now().Add(15 * time.Second)
	var cs []engine.Counts
	for {
		if cs, err = s.Counts(bg, []engine.PostID{post}); err == nil {
			break
		}
		if !errors.Is(err, engine.ErrUnavailable) {
			t.Fatalf("during failover: %v, want ErrUnavailable", err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no service 15s after the promotion: %v", redisstore.Cause(err))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if want := (engine.Counts{Likes: likes, Comments: 1}); cs[0] != want {
		t.Fatalf("after failover counts = %+v, want %+v", cs[0], want)
	}
	// The promoted replica has no replica of its own, so a write there
	// cannot be acknowledged by one: it fails as unavailable rather than
	// being reported durable.
	err = s.Like(bg, 5000, post)
	if !errors.Is(err, engine.ErrUnavailable) {
		t.Fatalf("write without a live replica: %v, want ErrUnavailable", err)
	}
	t.Logf("write to the promoted master without a replica: %v", redisstore.Cause(err))

	// The old master comes back as a replica of the new one; acknowledged
	// writes resume. Like is idempotent, so retrying the failed one is safe.
	c.Restart(victim)
	c.WaitOK(30 * time.Second)
	deadline = time.Now().Add(15 * time.Second)
	for {
		if err = s.Like(bg, 5000, post); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("writes not acknowledged 15s after the old master rejoined: %v", redisstore.Cause(err))
		}
		time.Sleep(100 * time.Millisecond)
	}
	must(t, s.Comment(bg, 901, post, 0, nil, "k1")) // a retry: applies nothing
	cs, err = s.Counts(bg, []engine.PostID{post})
	must(t, err)
	if want := (engine.Counts{Likes: likes + 1, Comments: 1}); cs[0] != want {
		t.Fatalf("after failover and more writes counts = %+v, want %+v", cs[0], want)
	}
	n, err := s.Unread(bg, author)
	must(t, err)
	if n.Likes != likes+1 || n.Comments != 1 {
		t.Fatalf("author badges after failover = %+v", n)
	}
	if err := s.Ready(bg); err != nil {
		t.Fatalf("not ready after failover: %v", err)
	}

	// Every event shard, including those whose master died, is subscribed
	// again: badge changes of 40 users (spread over all shards) arrive.
	seen := map[engine.UserID]bool{}
	deadline = time.Now().Add(10 * time.Second)
	for u := engine.UserID(1); u <= 40; u++ {
		for !seen[u] {
			must(t, s.MarkRead(bg, u, engine.Likes))
			wait := time.After(300 * time.Millisecond)
		drain:
			for !seen[u] {
				select {
				case w := <-woke:
					seen[w] = true
				case <-wait:
					break drain
				}
			}
			if !seen[u] && time.Now().After(deadline) {
				t.Fatalf("no event for user %d 10s after the failover", u)
			}
		}
	}
}

// TestReceiptsLargeGroup crosses the representation switch: a group past
// the dense limit keeps a sparse quit list or a quit bitmap, and read bits
// in their own key; the answers are the same as for a small group.
func TestReceiptsLargeGroup(t *testing.T) {
	addr, _ := redistest.StartSingle(t)
	s := open(t, redisstore.Options{Addrs: []string{addr}, KeyPrefix: prefix()})
	const sender = 1
	const size = 4200 // > dense limit of 4096 mapids
	g, err := s.CreateGroup(bg, sender, nil)
	must(t, err)
	var batch []engine.UserID
	for u := engine.UserID(2); u <= size; u++ {
		batch = append(batch, u)
		if len(batch) == engine.MaxIDsPerCall || u == size {
			must(t, s.AddGroupMembers(bg, sender, g, batch))
			batch = batch[:0]
		}
	}
	// Few quits: sparse list. Then many quits: bitmap.
	for _, u := range []engine.UserID{10, 4100} {
		_, err := s.LeaveGroup(bg, u, g)
		must(t, err)
	}
	sparse, err := s.SendMessage(bg, sender, g, "sparse", nil, "")
	must(t, err)
	for u := engine.UserID(2000); u < 3500; u++ {
		_, err := s.LeaveGroup(bg, u, g)
		must(t, err)
	}
	dense, err := s.SendMessage(bg, sender, g, "bitmap", nil, "")
	must(t, err)

	for _, u := range []engine.UserID{4200, 3, 10, 2500, sender} {
		_, err := s.MarkMessagesRead(bg, u, []engine.MessageID{sparse.ID, dense.ID})
		if u == 10 || u == 2500 {
			if !errors.Is(err, engine.ErrForbidden) {
				t.Fatalf("read by a member who left: %v", err)
			}
			continue
		}
		must(t, err)
	}
	r, err := s.Receipts(bg, sender, sparse.ID, 3)
	must(t, err)
	if r.ReadCount != 2 || r.UnreadCount != size-1-2-2 || !slices.Equal(r.Readers, []engine.UserID{3, 4200}) ||
		!slices.Equal(r.Unreaders, []engine.UserID{2, 4, 5}) {
		t.Fatalf("sparse receipts %d/%d %v %v", r.ReadCount, r.UnreadCount, r.Readers, r.Unreaders)
	}
	r, err = s.Receipts(bg, sender, dense.ID, 2)
	must(t, err)
	if r.ReadCount != 2 || r.UnreadCount != size-1-2-1500-2 || !slices.Equal(r.Unreaders, []engine.UserID{2, 4}) {
		t.Fatalf("bitmap receipts %d/%d %v", r.ReadCount, r.UnreadCount, r.Unreaders)
	}
	// A repeated read changes nothing.
	_, err = s.MarkMessagesRead(bg, 3, []engine.MessageID{dense.ID})
	must(t, err)
	r2, err := s.Receipts(bg, sender, dense.ID, 2)
	must(t, err)
	if r2.ReadCount != r.ReadCount {
		t.Fatalf("repeated read counted: %d -> %d", r.ReadCount, r2.ReadCount)
	}
}

// UnreadMany reads, in one batch, what Unread reads viewer by viewer:
// viewers with and without followees, with badges of every kind, one
// never seen before (whose cursor is set up by the read). On a cluster
// (TestCluster) the batch's keys span slots.
func TestUnreadManyIsUnreadPerViewer(t *testing.T) {
	addr, _ := redistest.StartSingle(t)
	checkUnreadMany(t, []string{addr})
}

func checkUnreadMany(t *testing.T, addrs []string) {
	s := open(t, redisstore.Options{Addrs: addrs, KeyPrefix: prefix()})
	const author, fan, lurker, fresh = 1, 2, 3, 4
	must(t, s.Follow(bg, fan, author))
	must(t, s.Follow(bg, lurker, fan))
	post, err := s.CreatePost(bg, author, 0, "")
	must(t, err)
	_, err = s.CreatePost(bg, fan, 0, "")
	must(t, err)
	must(t, s.Like(bg, fan, post))
	must(t, s.Comment(bg, lurker, post, 0, []engine.UserID{fan}, ""))
	_, err = s.PublishNotification(bg, "t", "b", "")
	must(t, err)
	must(t, s.PushRedDot(bg))
	viewers := []engine.UserID{author, fan, lurker}
	want := make([]engine.Unread, len(viewers))
	for i, v := range viewers {
		want[i], err = s.Unread(bg, v)
		must(t, err)
	}
	viewers = append(viewers, fresh)
	got := make([]engine.Unread, len(viewers))
	must(t, s.UnreadMany(bg, viewers, got))
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("viewer %d: UnreadMany %+v, Unread %+v", viewers[i], got[i], want[i])
		}
	}
	if one, err := s.Unread(bg, fresh); err != nil || one != got[3] {
		t.Errorf("a viewer first seen by UnreadMany: %+v, then Unread %+v %v", got[3], one, err)
	}
	if err := s.UnreadMany(bg, []engine.UserID{author, 0}, make([]engine.Unread, 2)); !errors.Is(err, engine.ErrInvalid) {
		t.Errorf("user 0 in a batch: %v", err)
	}
	if err := s.UnreadMany(bg, viewers, got[:1]); !errors.Is(err, engine.ErrInvalid) {
		t.Errorf("out shorter than viewers: %v", err)
	}
}

// testKindsReconcile: the keyspace's kinds table follows -reactions as
// the embedded engine's does: a kind added at a start works; leaving out
// a kind whose reactions are counted (on any master) is refused with the
// kind and its count; once none is counted it may go, and its id is free.
func testKindsReconcile(t *testing.T, addrs []string) {
	p := prefix()
	opts := func(kinds ...string) redisstore.Options {
		return redisstore.Options{Addrs: addrs, KeyPrefix: p, Reactions: kinds}
	}
	s := open(t, opts("like"))
	var posts []engine.PostID
	for range 8 {
		post, err := s.CreatePost(bg, 1, 0, "")
		must(t, err)
		posts = append(posts, post)
	}
	must(t, s.Close())
	s = open(t, opts("like", "love", "haha"))
	must(t, s.ReactToPost(bg, 2, posts[0], "love"))
	must(t, s.ReactToPost(bg, 2, posts[7], "love"))
	must(t, s.ReactToPost(bg, 3, posts[3], "haha"))
	must(t, s.ReactToPost(bg, 3, posts[3], "like")) // haha counts nothing now
	must(t, s.Close())

	_, err := redisstore.Open(bg, opts("like"))
	var inUse *counters.KindInUseError
	if !errors.As(err, &inUse) || inUse.Name != "love" || inUse.Count != 2 || !strings.Contains(err.Error(), `"love" still counts 2 reactions`) {
		t.Fatalf("leaving out love with 2 counted: %v", err)
	}
	// haha counts none: it may go, and sad takes its id.
	s = open(t, opts("sad", "like", "love"))
	if got := s.ReactionKinds(); !slices.Equal(got, []string{"sad", "like", "love"}) {
		t.Fatalf("kinds %v", got)
	}
	must(t, s.ReactToPost(bg, 4, posts[0], "sad"))
	out := make([]engine.PostView, 1)
	must(t, s.Page(bg, 2, posts[:1], engine.PageWant{Reactions: true, ViewerReaction: true}, out))
	if got := out[0].Reactions.Count[:3]; got[0] != 1 || got[1] != 0 || got[2] != 1 || out[0].ViewerReaction != "love" {
		t.Fatalf("after the change of kinds: %v %q", got, out[0].ViewerReaction)
	}
	if raw, err := rawClient(t, addrs).Get(bg, p+"{s}kinds").Result(); err != nil || raw != "1=like,2=love,3=sad" {
		t.Fatalf("kinds table %q (%v)", raw, err)
	}
}

func TestKindsReconcileSingle(t *testing.T) {
	addr, _ := redistest.StartSingle(t)
	testKindsReconcile(t, []string{addr})
}
