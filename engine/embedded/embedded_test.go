package embedded

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/counters"
	"github.com/tally-dev/tally/engine/enginetest"
	"github.com/tally-dev/tally/engine/snowflake"
	"github.com/tally-dev/tally/engine/tier"
	"github.com/tally-dev/tally/engine/wal"
)

var bg = context.Background()

// quiet keeps replay reports out of test output.
var quiet = slog.New(slog.DiscardHandler)

func open(t *testing.T, opts Options) *Engine {
	t.Helper()
	opts.Logger = quiet
	e, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

func TestConformance(t *testing.T) {
	enginetest.Run(t, func(t *testing.T) engine.Store { return open(t, Options{}) })
}

// TestConformanceDurable runs the suite with the log on, so that every
// rule is also exercised through record encoding.
func TestConformanceDurable(t *testing.T) {
	enginetest.Run(t, func(t *testing.T) engine.Store {
		return open(t, Options{Dir: t.TempDir(), Sync: wal.SyncNone})
	})
}

// clock is a fake time source.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func ok(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func unread(t *testing.T, e *Engine, u engine.UserID) engine.Unread {
	t.Helper()
	n, err := e.Unread(bg, u)
	ok(t, err)
	return n
}

func publish(t *testing.T, e *Engine, n int) {
	t.Helper()
	for i := range n {
		_, err := e.PublishNotification(bg, fmt.Sprint("n", i), "", "")
		ok(t, err)
	}
}

func TestCursorTTL(t *testing.T) {
	clk := newClock()
	const ttl = 10 * 24 * time.Hour
	e := open(t, Options{Now: clk.Now, CursorTTL: ttl, SweepInterval: -1})
	const active, idle = 1, 2
	unread(t, e, active)
	unread(t, e, idle)
	publish(t, e, 2)
	if n := unread(t, e, idle).System; n != 2 {
		t.Fatalf("idle user: %d unread, want 2", n)
	}
	// active polls daily; idle does not come back for longer than the TTL.
	for range 10 {
		clk.Advance(24 * time.Hour)
		unread(t, e, active)
	}
	publish(t, e, 1)
	if n := unread(t, e, active).System; n != 3 {
		t.Fatalf("active user: %d unread, want 3", n)
	}
	// Just under the TTL after the end of idle's last active day, the cursor
	// still counts; one day later it is gone and idle starts over as new.
	clk.Advance(12*time.Hour - time.Minute) // day 0 12:00 + 10d + 11:59 = day 10 23:59
	e.mu.RLock()
	got, _ := e.st.unread(idle, clk.Now().UnixNano(), e.ttl)
	e.mu.RUnlock()
	if got.System != 3 {
		t.Fatalf("idle user just before expiry: %d unread, want 3", got.System)
	}
	clk.Advance(2 * time.Minute)
	if n := unread(t, e, idle).System; n != 0 {
		t.Fatalf("idle user after expiry: %d unread, want 0 (new again)", n)
	}
	publish(t, e, 1)
	if n := unread(t, e, idle).System; n != 1 {
		t.Fatalf("idle user after expiry and a publish: %d unread, want 1", n)
	}
	if n := unread(t, e, active).System; n != 4 {
		t.Fatalf("active user: %d unread, want 4", n)
	}
}

// TestPollWritesOncePerDay: polling is a read; only the first poll of a
// day records a touch.
func TestPollWritesOncePerDay(t *testing.T) {
	clk := newClock()
	e := open(t, Options{Now: clk.Now, SweepInterval: -1})
	var recs int
	e.tap = func([]byte) { recs++ }
	for range 100 {
		unread(t, e, 7)
	}
	if recs != 1 {
		t.Fatalf("%d records for 100 polls on one day, want 1", recs)
	}
	clk.Advance(24 * time.Hour)
	for range 100 {
		unread(t, e, 7)
	}
	if recs != 2 {
		t.Fatalf("%d records for polls on two days, want 2", recs)
	}
}

func TestSweepCursors(t *testing.T) {
	clk := newClock()
	const ttl = 5 * 24 * time.Hour
	e := open(t, Options{Now: clk.Now, CursorTTL: ttl, SweepInterval: -1})
	const idle, clicked, liked, active = 1, 2, 3, 4
	p, err := e.CreatePost(bg, liked, 0, "")
	ok(t, err)
	ok(t, e.Like(bg, active, p))
	for _, u := range []engine.UserID{idle, clicked, liked, active} {
		unread(t, e, u)
	}
	ok(t, e.PushRedDot(bg))
	ok(t, e.ClickRedDot(bg, clicked))
	publish(t, e, 1)
	users := func() int {
		e.mu.RLock()
		defer e.mu.RUnlock()
		return e.st.userRecords()
	}
	if n := users(); n != 4 {
		t.Fatalf("%d badge records, want 4", n)
	}
	for range 7 {
		clk.Advance(24 * time.Hour)
		unread(t, e, active)
	}
	before := e.Stats().Users
	_, err = e.commit(&sweepRec{ttl: int64(ttl)})
	ok(t, err)
	// idle had nothing but a cursor: gone. clicked keeps the push stamp
	// it saw (dropping it would show that push again), liked keeps its
	// badge.
	if n := users(); n != 3 {
		t.Fatalf("%d badge records after the sweep, want 3", n)
	}
	if got := e.Stats().Users; got != before-1 {
		t.Fatalf("Stats.Users %d after the sweep, want %d", got, before-1)
	}
	e.mu.RLock()
	r, _ := e.st.userView(uint64(liked))
	e.mu.RUnlock()
	if r.flags&flagCursor != 0 || r.n[nLikes] != 1 {
		t.Fatalf("liked's record after the sweep: %+v", r)
	}
	if n := unread(t, e, liked); n != (engine.Unread{Likes: 1, RedDot: true}) {
		t.Fatalf("liked reads %+v", n)
	}
	if unread(t, e, clicked).RedDot {
		t.Fatal("clicked sees the push they clicked away again after the sweep")
	}
	if n := unread(t, e, active).System; n != 1 {
		t.Fatalf("active: %d system unread, want 1", n)
	}
}

func TestIdempotencyTTL(t *testing.T) {
	clk := newClock()
	e := open(t, Options{Now: clk.Now, SweepInterval: -1})
	a, err := e.CreatePost(bg, 1, 0, "key")
	ok(t, err)
	clk.Advance(engine.IdempotencyTTL - time.Second)
	b, err := e.CreatePost(bg, 1, 0, "key")
	ok(t, err)
	if a != b {
		t.Fatalf("retry within the TTL made a new post: %d, %d", a, b)
	}
	clk.Advance(2 * time.Second)
	c, err := e.CreatePost(bg, 1, 0, "key")
	ok(t, err)
	if c == a {
		t.Fatal("retry after the TTL returned the old post")
	}
	// The expired key was dropped from memory by the apply of that op,
	// and the new one is remembered.
	e.mu.RLock()
	n := e.st.idem.Len()
	e.mu.RUnlock()
	if n != 1 {
		t.Fatalf("%d idempotency keys held, want 1", n)
	}
	d, err := e.CreatePost(bg, 1, 0, "key")
	ok(t, err)
	if d != c {
		t.Fatalf("retry of the new op made another post: %d, %d", c, d)
	}
	// A key is bound to its first use: the same key on a repost is refused.
	if _, err := e.Repost(bg, 1, a, nil, "key"); !errors.Is(err, engine.ErrInvalid) {
		t.Fatalf("a repost with a live createPost key: %v, want ErrInvalid", err)
	}
}

// TestIdemFingerprintsPersist: a key stays bound to its first use's
// fingerprint across a restart (the log) and a snapshot (IDEM).
func TestIdemFingerprintsPersist(t *testing.T) {
	dir := t.TempDir()
	e := open(t, Options{Dir: dir, Sync: wal.SyncNone})
	post, err := e.CreatePost(bg, 1, 0, "")
	ok(t, err)
	ok(t, e.Comment(bg, 2, post, 0, nil, "new"))
	ok(t, e.Close())
	e = open(t, Options{Dir: dir, Sync: wal.SyncNone})
	if err := e.Comment(bg, 2, post, 0, []engine.UserID{3}, "new"); !errors.Is(err, engine.ErrInvalid) {
		t.Fatalf("reuse with other mentions after a restart: %v, want ErrInvalid", err)
	}
	// And through a snapshot (the IDEM section keeps fingerprints).
	ok(t, e.Snapshot(bg))
	ok(t, e.Close())
	e = open(t, Options{Dir: dir, Sync: wal.SyncNone})
	if err := e.Comment(bg, 2, post, 0, []engine.UserID{3}, "new"); !errors.Is(err, engine.ErrInvalid) {
		t.Fatalf("reuse with other mentions after a snapshot: %v, want ErrInvalid", err)
	}
	ok(t, e.Comment(bg, 2, post, 0, nil, "new")) // a retry
	cs, err := e.Counts(bg, []engine.PostID{post})
	ok(t, err)
	if cs[0].Comments != 1 {
		t.Fatalf("comments = %d after a comment and its retries, want 1", cs[0].Comments)
	}
}

func TestImport(t *testing.T) {
	e := open(t, Options{SweepInterval: -1})
	const author = 9
	rows := []engine.ImportRow{
		{Post: 100, Author: author, Counts: engine.Counts{Likes: 5, Views: 1 << 40}},
		{Post: 101, Counts: engine.Counts{Comments: 2}},
		{Post: 102}, // neither author nor counts: skipped
		{Post: 103, Author: author},
	}
	ok(t, e.Import(bg, rows))
	infos, err := e.Posts(bg, []engine.PostID{100, 101, 102, 103})
	ok(t, err)
	want := []engine.PostInfo{{Exists: true, Author: author}, {Exists: true}, {}, {Exists: true, Author: author}}
	if !slices.Equal(infos, want) {
		t.Fatalf("Posts = %+v, want %+v", infos, want)
	}
	// Re-import replaces counts and does not count the post twice.
	ok(t, e.Import(bg, []engine.ImportRow{{Post: 100, Author: author, Counts: engine.Counts{Likes: 3}}}))
	cs, err := e.Counts(bg, []engine.PostID{100, 101})
	ok(t, err)
	if !slices.Equal(cs, []engine.Counts{{Likes: 3}, {Comments: 2}}) {
		t.Fatalf("Counts = %+v", cs)
	}
	uc, err := e.UserCounts(bg, []engine.UserID{author})
	ok(t, err)
	if uc[0].Posts != 2 {
		t.Fatalf("author postCount %d, want 2", uc[0].Posts)
	}
	// Imported posts behave as posts.
	ok(t, e.Like(bg, 5, 100))
	if n := unread(t, e, author).Likes; n != 1 {
		t.Fatalf("author unread likes %d, want 1", n)
	}
	err = e.Import(bg, []engine.ImportRow{{Post: 1, Counts: engine.Counts{Likes: -1}}})
	if !errors.Is(err, engine.ErrInvalid) {
		t.Fatalf("negative count: %v", err)
	}
	err = e.Import(bg, make([]engine.ImportRow, MaxImportBatch+1))
	if !errors.Is(err, engine.ErrInvalid) {
		t.Fatalf("oversized batch: %v", err)
	}
	// A batch of old posts is registered straight into sealed windows,
	// counts and authors alike, with the same answers as through Put.
	var old []engine.ImportRow
	var oldIDs []engine.PostID
	for i := range 2000 {
		id := snowflake.Make(time.Now().Add(-30*24*time.Hour).UnixMilli()+int64(i)*1000, 1, 0)
		old = append(old, engine.ImportRow{Post: engine.PostID(id), Author: engine.UserID(1000 + i%7), Counts: engine.Counts{Views: int64(i + 1)}})
		oldIDs = append(oldIDs, engine.PostID(id))
	}
	ok(t, e.Import(bg, old))
	e.mu.RLock()
	kinds, n := recordsByKind(e.st.posts), e.st.posts.Len()
	e.mu.RUnlock()
	if kinds[tier.Open] != 0 || kinds[tier.Sealed] != n {
		t.Fatalf("post table after importing old posts: %v of %d", kinds, n)
	}
	for first := 0; first < len(oldIDs); first += 100 {
		infos, err = e.Posts(bg, oldIDs[first:first+100])
		ok(t, err)
		for j, p := range infos {
			if i := first + j; !p.Exists || p.Author != engine.UserID(1000+i%7) {
				t.Fatalf("old post %d: %+v", i, p)
			}
		}
	}
}

// TestStuckSubscriber: a subscriber that never returns loses its own
// events beyond its buffer and delays no one.
func TestStuckSubscriber(t *testing.T) {
	e := open(t, Options{SweepInterval: -1})
	block := make(chan struct{})
	var seen atomic.Int64
	cancel := e.Subscribe(func(engine.Event) { seen.Add(1); <-block })
	defer cancel()
	got := make(chan engine.Event, 1)
	cancel2 := e.Subscribe(func(ev engine.Event) {
		select {
		case got <- ev:
		default:
		}
	})
	defer cancel2()
	start := time.Now()
	for range SubscriberBuffer + 100 {
		ok(t, e.PushRedDot(bg))
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("pushes took %v behind a stuck subscriber", d)
	}
	select {
	case <-got:
	case <-time.After(time.Second):
		t.Fatal("the healthy subscriber got nothing")
	}
	// Unstuck, it gets its buffer's events (and the one it held, if its
	// goroutine had taken one), no more: the rest were dropped.
	close(block)
	for deadline := time.Now().Add(5 * time.Second); seen.Load() < SubscriberBuffer && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond)
	if n := seen.Load(); n < SubscriberBuffer || n > SubscriberBuffer+1 {
		t.Fatalf("the stuck subscriber got %d of %d events, want its buffer's %d (+1)", n, SubscriberBuffer+100, SubscriberBuffer)
	}
}

func TestStats(t *testing.T) {
	e := open(t, Options{SweepInterval: -1})
	p, err := e.CreatePost(bg, 1, 0, "")
	ok(t, err)
	_, err = e.CreatePost(bg, 2, 0, "")
	ok(t, err)
	ok(t, e.Like(bg, 3, p))
	ok(t, e.Follow(bg, 4, 1))
	g, err := e.CreateGroup(bg, 1, []engine.UserID{2})
	ok(t, err)
	_, err = e.SendMessage(bg, 1, g, "hi", nil, "")
	ok(t, err)
	_, err = e.PublishNotification(bg, "t", "b", "")
	ok(t, err)
	s := e.Stats()
	// Users: 1 and 2 (posts, badges) and 4 (follows); 3 only liked, which
	// leaves no per-user state.
	want := engine.Stats{Posts: 2, CountedPosts: 1, Users: 3, Groups: 1, Messages: 1, Notifications: 1}
	s.MemoryBytes, want.MemoryBytes = 0, 0
	if s != want {
		t.Fatalf("Stats = %+v, want %+v", s, want)
	}
	if e.Stats().MemoryBytes <= 0 {
		t.Fatal("MemoryBytes not reported")
	}
}

// recordsByKind counts a post table's records by the form of their
// windows.
func recordsByKind(t *tier.Posts) map[tier.Kind]int {
	kinds := map[tier.Kind]int{}
	for _, w := range t.Stats() {
		kinds[w.Kind] += w.Records
	}
	return kinds
}

// dump renders the whole state canonically (sorted where the tables have
// no order), so two states can be compared for equality.
func (st *state) dump() string {
	var b strings.Builder
	line := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	type kv struct {
		k string
		v string
	}
	section := func(name string, rows []kv) {
		sort.Slice(rows, func(i, j int) bool { return rows[i].k < rows[j].k })
		line("%s %d", name, len(rows))
		for _, r := range rows {
			line("  %s %s", r.k, r.v)
		}
	}
	var rows []kv
	counted := 0
	st.posts.Range(func(k uint64, p tier.Post) bool {
		rows = append(rows, kv{fmt.Sprint(k), fmt.Sprintf("%+v", p)})
		if p.HasCounts() {
			counted++
		}
		return true
	})
	section("posts", rows)
	line("counted %d, %d posts have counts", st.counted, counted)
	line("imported %d..%d", st.imported.Lo, st.imported.Hi)
	for i, set := range st.sets() {
		rows = nil
		set.RangeKinds(func(u, p uint64, k counters.Kind) bool {
			rows = append(rows, kv{fmt.Sprint(u, " ", p), fmt.Sprint(k)})
			return true
		})
		section([]string{"likes", "favs", "deleted", "comments", "uncounted", "writers"}[i], rows)
	}
	rows = nil
	st.origins.Range(func(k uint64, v int64) bool { rows = append(rows, kv{fmt.Sprint(k), fmt.Sprint(v)}); return true })
	section("origins", rows)
	line("erasing %+v", st.erasing)
	rows = nil
	userRow := func(k uint64) {
		v, _ := st.userView(k)
		rows = append(rows, kv{fmt.Sprint(k), fmt.Sprintf("%+v", v)})
	}
	st.rangeUserRecs(userRow)
	section("users", rows)
	rows = nil
	// The public counters render joined per user, as PROF keeps them.
	type profile struct{ posts, followers, unposted int64 }
	profiles := map[uint64]profile{}
	st.posted.Range(func(k uint64, v int64) bool { profiles[k] = profile{posts: v}; return true })
	st.unposted.Range(func(k uint64, v int64) bool {
		p := profiles[k]
		p.unposted = v
		profiles[k] = p
		return true
	})
	st.followers.Range(func(k uint64, v int64) bool {
		p := profiles[k]
		p.followers = v
		profiles[k] = p
		return true
	})
	for k, v := range profiles {
		rows = append(rows, kv{fmt.Sprint(k), fmt.Sprintf("%+v", v)})
	}
	section("profiles", rows)
	rows = nil
	st.follows.Range(func(viewer uint64, targets []uint64, snaps []int64) bool {
		rows = append(rows, kv{fmt.Sprint(viewer), fmt.Sprintf("%v %v", targets, snaps)})
		return true
	})
	section("follows", rows)
	line("nfollows %d nusers %d push %d", st.follows.Len(), st.nusers, st.push)
	line("notifs %+v %q", st.notifs, st.notifText)
	rows = nil
	st.groups.Range(func(k uint64, v uint32) bool { rows = append(rows, kv{fmt.Sprint(k), fmt.Sprint(v)}); return true })
	section("groups", rows)
	for _, g := range st.groupList {
		line("group %d %v %v %d", g.id, g.byMap, g.quit[:(len(g.byMap)+63)/64], g.current)
	}
	rows = nil
	st.members.Range(func(k pair, v uint32) bool { rows = append(rows, kv{fmt.Sprint(k), fmt.Sprint(v)}); return true })
	section("members", rows)
	rows = nil
	st.msgs.Range(func(k uint64, v uint32) bool { rows = append(rows, kv{fmt.Sprint(k), fmt.Sprint(v)}); return true })
	section("msgs", rows)
	for i := range st.msgList {
		m := &st.msgList[i]
		rc, err := m.rc.MarshalBinary()
		if err != nil {
			panic(err)
		}
		line("msg %d %d %d %d %d %d %x", m.id, m.group, m.sender, m.time, m.off, m.textLen, rc)
	}
	line("msgText %q rcBytes %d", st.msgText, st.rcBytes)
	rows = nil
	st.idem.Range(func(k idemKey, v idemVal) bool { rows = append(rows, kv{fmt.Sprint(k), fmt.Sprint(v)}); return true })
	section("idem", rows)
	var q []idemExpiry
	for _, x := range st.idemQ[st.idemHead:] {
		if x.key != (idemKey{}) { // emptied by an erasure: as if gone
			q = append(q, x)
		}
	}
	line("idemQ %v", q)
	return b.String()
}

// workload drives a random but reproducible mix of every operation,
// including invalid and repeated ones, with the fake clock jumping ahead
// now and then so that idempotency keys and cursors expire on the way.
// It erases users too, and waits at the end for the erasures to finish.
func workload(t testing.TB, e *Engine, clk *clock, seed uint64, n int) {
	t.Helper()
	runWorkload(t, e, clk, seed, n, true)
}

// workloadKept is workload without erasures, for tests of the snapshots
// kept: the snapshot after an erasure is kept alone (afterSnapshot).
func workloadKept(t testing.TB, e *Engine, clk *clock, seed uint64, n int) {
	t.Helper()
	runWorkload(t, e, clk, seed, n, false)
}

func runWorkload(t testing.TB, e *Engine, clk *clock, seed uint64, n int, erase bool) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 1))
	user := func() engine.UserID { return engine.UserID(1 + rng.IntN(12)) }
	var posts []engine.PostID
	var groups []engine.GroupID
	var msgs []engine.MessageID
	type commented struct {
		p engine.PostID
		c engine.CommentID
	}
	var comments []commented
	pick := func(n int) int { return rng.IntN(max(n, 1)) }
	post := func() engine.PostID {
		if len(posts) == 0 || rng.IntN(20) == 0 {
			return engine.PostID(rng.Uint64N(1 << 50))
		}
		return posts[pick(len(posts))]
	}
	users := func() []engine.UserID {
		us := make([]engine.UserID, rng.IntN(4))
		for i := range us {
			us[i] = user()
		}
		return us
	}
	key := func() string {
		if rng.IntN(3) == 0 {
			return fmt.Sprint("k", rng.IntN(5))
		}
		return ""
	}
	for range n {
		if rng.IntN(50) == 0 {
			clk.Advance(time.Duration(rng.IntN(48)) * time.Hour)
		} else {
			clk.Advance(time.Duration(rng.IntN(1000)) * time.Millisecond)
		}
		var err error
		switch rng.IntN(30) {
		case 24:
			// A comment with the app's id, new or sent before.
			c := engine.CommentID(snowflake.Make(clk.Now().UnixMilli(), 7, uint64(rng.IntN(4))))
			if rng.IntN(2) == 0 && len(comments) > 0 {
				c = comments[pick(len(comments))].c
			}
			p := post()
			if err = e.Comment(bg, user(), p, c, users(), key()); err == nil {
				comments = append(comments, commented{p, c})
			}
		case 25:
			if len(comments) > 0 {
				pc := comments[pick(len(comments))]
				err = e.DeleteComment(bg, engine.Actor{User: user(), Privileged: rng.IntN(2) == 0}, pc.p, pc.c)
			}
		case 26:
			err = e.DeletePost(bg, engine.Actor{User: user(), Privileged: rng.IntN(3) == 0}, post())
		case 27:
			if rng.IntN(16) == 0 && erase {
				err = e.EraseUser(bg, user())
			}
		case 0, 1:
			var p engine.PostID
			p, err = e.CreatePost(bg, user(), 0, key())
			if err == nil {
				posts = append(posts, p)
			}
		case 2, 3, 4:
			err = e.Like(bg, user(), post())
		case 5:
			err = e.Unlike(bg, user(), post())
		case 6:
			err = e.Favorite(bg, user(), post())
		case 7:
			err = e.Unfavorite(bg, user(), post())
		case 8:
			err = e.Comment(bg, user(), post(), 0, users(), key())
		case 9:
			var p engine.PostID
			p, err = e.Repost(bg, user(), post(), users(), key())
			if err == nil {
				posts = append(posts, p)
			}
		case 10:
			err = e.RecordViews(bg, []engine.PostID{post(), post()})
		case 11:
			err = e.Follow(bg, user(), user())
		case 12:
			err = e.Unfollow(bg, user(), user())
		case 13:
			_, err = e.Unread(bg, user())
		case 14:
			err = e.MarkRead(bg, user(), engine.UnreadKind(1+rng.IntN(6)))
		case 15:
			err = e.ClickRedDot(bg, user())
		case 16:
			if rng.IntN(2) == 0 {
				err = e.PushRedDot(bg)
			} else {
				_, err = e.PublishNotification(bg, "title", fmt.Sprint("body ", rng.IntN(9)), key())
			}
		case 17:
			var g engine.GroupID
			g, err = e.CreateGroup(bg, user(), users())
			if err == nil {
				groups = append(groups, g)
			}
		case 18:
			if len(groups) > 0 {
				err = e.AddGroupMembers(bg, user(), groups[pick(len(groups))], users())
			}
		case 19:
			if len(groups) > 0 {
				_, err = e.LeaveGroup(bg, user(), groups[pick(len(groups))])
			}
		case 20, 21:
			if len(groups) > 0 {
				var m engine.Message
				m, err = e.SendMessage(bg, user(), groups[pick(len(groups))], "msg", users(), key())
				if err == nil {
					msgs = append(msgs, m.ID)
				}
			}
		case 22:
			if len(msgs) > 0 {
				_, err = e.MarkMessagesRead(bg, user(), []engine.MessageID{msgs[pick(len(msgs))], msgs[pick(len(msgs))]})
			}
		case 28:
			kinds := e.ReactionKinds()
			err = e.ReactToPost(bg, user(), post(), kinds[rng.IntN(len(kinds))])
		case 29:
			err = e.UnreactToPost(bg, user(), post())
		case 23:
			switch rng.IntN(8) {
			case 0, 1:
				_, err = e.commit(&sweepRec{ttl: e.ttl})
			case 2:
				err = driftOnPurpose(e, rng, post(), user())
			default:
				err = e.Import(bg, []engine.ImportRow{{Post: post(), Author: user(), Counts: engine.Counts{Views: int64(rng.IntN(3))}}})
			}
		}
		if err != nil && !errors.Is(err, engine.ErrNotFound) && !errors.Is(err, engine.ErrForbidden) && !errors.Is(err, engine.ErrInvalid) {
			t.Fatal(err)
		}
	}
	waitErasures(t, e)
}

// waitErasures waits until the engine's eraser has finished every
// erasure under way.
func waitErasures(t testing.TB, e *Engine) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); e.Stats().Erasures > 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("erasures still under way after a minute")
		}
	}
}

// TestReplayDeterminism applies a random op sequence, then replays its
// records into a fresh state: the two states must be identical.
func TestReplayDeterminism(t *testing.T) {
	for seed := range uint64(4) {
		clk := newClock()
		e := open(t, Options{Now: clk.Now, CursorTTL: 3 * 24 * time.Hour, SweepInterval: -1})
		var recs [][]byte
		e.tap = func(rec []byte) { recs = append(recs, bytes.Clone(rec)) }
		ok(t, e.setKinds(enginetest.ScriptKinds)) // a kinds record, as at a start that adds kinds
		workload(t, e, clk, seed, 6000)
		replayed := newState(tables{})
		kinds := map[opKind]int{}
		var rd recordReader // reused, as replay does
		for i, rec := range recs {
			r, err := rd.decode(rec)
			if err != nil {
				t.Fatalf("record %d: %v", i, err)
			}
			if re := appendRecord(nil, r); !bytes.Equal(re, rec) {
				t.Fatalf("record %d does not re-encode to itself:\n%x\n%x", i, rec, re)
			}
			_, kind, _, _ := recordInfo(r)
			kinds[kind]++
			replayed.apply(r, nil, false)
		}
		for k := opCreatePost; k < opKindEnd; k++ {
			if kinds[k] == 0 {
				t.Errorf("seed %d: the workload logged no %v op", seed, k)
			}
		}
		e.mu.RLock()
		live := e.st.dump()
		e.mu.RUnlock()
		if got := replayed.dump(); got != live {
			t.Fatalf("seed %d: replayed state differs from the live one\nlive:\n%s\nreplayed:\n%s", seed, live, got)
		}
	}
}

// TestRestart: close and reopen on the same directory gives the same
// state, ids made afterwards do not collide, and no events are emitted
// during replay.
func TestRestart(t *testing.T) {
	dir := t.TempDir()
	clk := newClock()
	opts := Options{Dir: dir, Sync: wal.SyncNone, Now: clk.Now, SweepInterval: -1, Logger: quiet}
	e, err := Open(opts)
	ok(t, err)
	workload(t, e, clk, 7, 3000)
	p, err := e.CreatePost(bg, 1, 0, "restart-key")
	ok(t, err)
	n1, err := e.PublishNotification(bg, "before", "", "")
	ok(t, err)
	e.mu.RLock()
	before := e.st.dump()
	e.mu.RUnlock()
	ok(t, e.Close())

	// The clock steps back: ids made after the restart must still sort
	// after those made before.
	clk.Advance(-time.Hour)
	e2 := open(t, opts)
	e2.mu.RLock()
	after := e2.st.dump()
	e2.mu.RUnlock()
	if after != before {
		t.Fatalf("state after restart differs\nbefore:\n%s\nafter:\n%s", before, after)
	}
	q, err := e2.CreatePost(bg, 1, 0, "restart-key")
	ok(t, err)
	if q != p {
		t.Fatalf("idempotency key forgotten across restart: %d then %d", p, q)
	}
	n2, err := e2.PublishNotification(bg, "after", "", "")
	ok(t, err)
	if n2.ID <= n1.ID {
		t.Fatalf("notification id %d after restart is not above %d", n2.ID, n1.ID)
	}
	var recs int
	e2.tap = func([]byte) { recs++ }
	p2, err := e2.CreatePost(bg, 1, 0, "")
	ok(t, err)
	if recs != 1 || p2 == p {
		t.Fatalf("after restart: %d records for one post, id %d", recs, p2)
	}
	ok(t, e2.Close())

	// A third open replays the records of both runs.
	e3 := open(t, opts)
	infos, err := e3.Posts(bg, []engine.PostID{p, p2})
	ok(t, err)
	if !infos[0].Exists || !infos[1].Exists {
		t.Fatalf("posts after second restart: %+v", infos)
	}
	list, err := e3.Notifications(bg, 1, 0)
	ok(t, err)
	if len(list) != 1 || list[0].ID != n2.ID || list[0].Title != "after" {
		t.Fatalf("newest notification after restart: %+v", list)
	}
}

// TestWideUnreadCounters: an unread counter that passes 32 bits escapes to
// the wide table and stays exact through bumps, reads, a snapshot round
// trip and a reset, which drops the wide entry.
func TestWideUnreadCounters(t *testing.T) {
	st := newState(tables{})
	const u = 42
	st.bump(u, nMentions)
	st.badge(u).n[nLikes] = wideMark - 2
	for range 3 {
		st.bump(u, nLikes)
	}
	r, _ := st.badges.Get(keyOf(u))
	if got := st.counter(u, &r, nLikes); got != wideMark+1 {
		t.Fatalf("likes = %d, want %d", got, int64(wideMark)+1)
	}
	if r.n[nLikes] != wideMark || st.wide.Len() != 1 {
		t.Fatalf("the counter did not escape: %+v, %d wide", r, st.wide.Len())
	}
	back := roundTrip(t, st)
	u2, _ := back.unread(u, 0, 1)
	if u2.Likes != wideMark+1 || u2.Mentions != 1 {
		t.Fatalf("after a snapshot: %+v", u2)
	}
	st.setCounter(u, st.badge(u), nLikes, 0)
	if r, _ := st.badges.Get(keyOf(u)); r.n[nLikes] != 0 || st.wide.Len() != 0 {
		t.Fatalf("a reset left %+v, %d wide", r, st.wide.Len())
	}
}

// TestClocked runs the suites that drive the engine's clock (the rule
// scripts and the metamorphic test against the reference model), in
// memory and durable; the durable engine is restarted at random points.
func TestClocked(t *testing.T) {
	memory := func(t *testing.T, cfg enginetest.Config) (engine.Store, func() (engine.Store, error)) {
		return open(t, Options{Now: cfg.Now, CursorTTL: cfg.CursorTTL, Reactions: cfg.Reactions}), nil
	}
	durable := func(t *testing.T, cfg enginetest.Config) (engine.Store, func() (engine.Store, error)) {
		opts := Options{Dir: t.TempDir(), Sync: wal.SyncNone, Now: cfg.Now, CursorTTL: cfg.CursorTTL, Logger: quiet, Reactions: cfg.Reactions}
		cur, err := Open(opts)
		ok(t, err)
		t.Cleanup(func() { cur.Close() })
		return cur, func() (engine.Store, error) {
			if err := cur.Close(); err != nil {
				return nil, err
			}
			next, err := Open(opts)
			if err != nil {
				return nil, err
			}
			cur = next
			return next, nil
		}
	}
	enginetest.RunClocked(t, enginetest.Backend{Name: "memory", Open: memory})
	enginetest.RunClocked(t, enginetest.Backend{Name: "durable", Open: durable})
}
