package redisstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/ops"
	"github.com/tally-dev/tally/engine/redisstore/redistest"
	"github.com/tally-dev/tally/engine/snowflake"
)

// Tests of the paths where the store applies what engine/ops decided:
// the facts a script re-verifies, and the compare-and-set retries when
// they changed in between.

// A self-like writes an intent with no user effects, which is deleted; a
// like by someone else bumps the author; an unlike never does. No intent
// is left behind either way.
func TestLikeIntentsAreFinished(t *testing.T) {
	ctx := context.Background()
	s := openInternal(t)
	const author, fan = 1, 2
	post, err := s.CreatePost(ctx, author, 0, "")
	check(t, err)
	check(t, s.Like(ctx, author, post))
	check(t, s.Like(ctx, fan, post))
	check(t, s.Unlike(ctx, fan, post))
	check(t, s.Like(ctx, fan, post))
	check(t, s.Like(ctx, fan, post)) // a repeat changes nothing
	bucket, _ := s.k.post(uint64(post))
	if n := s.rdb.HLen(ctx, intentsKey(bucket)).Val(); n != 0 {
		t.Fatalf("%d intents left in the post's slot", n)
	}
	u, err := s.Unread(ctx, author)
	check(t, err)
	cs, err := s.Counts(ctx, []engine.PostID{post})
	check(t, err)
	if u.Likes != 2 || cs[0].Likes != 2 {
		t.Fatalf("author's like badge %d, likes %d; want 2, 2", u.Likes, cs[0].Likes)
	}
}

// The cursor touch is a compare-and-set on the fields it decided on: a
// badge bump since the read does not make it fail (nor is it lost), and
// a touch by another replica since the read makes it decide again on the
// record found.
func TestTouchDecidesAgainOnChangedCursor(t *testing.T) {
	ctx := context.Background()
	s := openInternal(t)
	const user = 7
	check(t, s.bumpUsers(ctx, "", "", []bump{{user, uMentions, 1}}))
	bucket, low := s.k.user(user)
	now := time.Now()
	u, err := s.touch(ctx, bucket, low, "" /* read before the bump */, 4, now)
	check(t, err)
	if u.get(uCursor) != 5 || u.get(uActive) != now.Unix() {
		t.Fatalf("touched record %v", u)
	}
	raw, err := s.rdb.HGet(ctx, bucket, low).Result()
	check(t, err)
	stored, err := decodeUser(raw)
	check(t, err)
	if stored.get(uMentions) != 1 || stored.get(uCursor) != 5 || stored.get(uActive) != now.Unix() {
		t.Fatalf("stored record %v lost the bump or the touch", stored)
	}
	// Decided on the record before that touch: the cursor fields differ,
	// so it decides again on the record found (touched today: nothing).
	again, err := s.touch(ctx, bucket, low, "", 9, now)
	check(t, err)
	if again != stored {
		t.Fatalf("stale touch returned %v, want the stored %v", again, stored)
	}
	if raw2 := s.rdb.HGet(ctx, bucket, low).Val(); raw2 != raw {
		t.Fatalf("stale touch rewrote the record: %q, was %q", raw2, raw)
	}
}

// Pushes at one instant still give strictly increasing stamps
// (ops.PushRedDot), however many replicas race: each stamp is a
// compare-and-set on the one it was decided from.
func TestPushRedDotRacesKeepStampsDistinct(t *testing.T) {
	ctx := context.Background()
	addr, _ := redistest.StartSingle(t)
	at := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	var stores []*Store
	for range 4 {
		s, err := Open(ctx, Options{Addrs: []string{addr}, KeyPrefix: "push:", ReadTimeout: 5 * time.Second,
			Now: func() time.Time { return at }})
		check(t, err)
		t.Cleanup(func() { s.Close() })
		stores = append(stores, s)
	}
	const each = 10
	var wg sync.WaitGroup
	for _, s := range stores {
		wg.Go(func() {
			for range each {
				if err := s.PushRedDot(ctx); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	v, err := stores[0].rdb.Get(ctx, stores[0].k.redDot()).Result()
	check(t, err)
	want := at.UnixMilli() + int64(len(stores)*each) - 1
	if got, _ := strconv.ParseInt(v, 10, 64); got != want {
		t.Fatalf("stamp %d after %d pushes at one instant, want %d", got, len(stores)*each, want)
	}
}

// Concurrent AddGroupMembers each decide on the group's facts and apply
// their joins only if those still hold: every user gets exactly one
// mapid, none is lost.
func TestAddMembersRacesGiveEachOneMapid(t *testing.T) {
	ctx := context.Background()
	s := openInternal(t)
	const creator = 1
	g, err := s.CreateGroup(ctx, creator, nil)
	check(t, err)
	const adders, per = 6, 5
	var wg sync.WaitGroup
	for a := range adders {
		wg.Go(func() {
			var users []engine.UserID
			for i := range per {
				users = append(users, engine.UserID(100+a*per+i))
			}
			users = append(users, 100) // everyone also adds user 100
			if err := s.AddGroupMembers(ctx, creator, g, users); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	gr, err := s.Group(ctx, creator, g)
	check(t, err)
	if gr.MemberCount != 1+adders*per {
		t.Fatalf("member count %d, want %d", gr.MemberCount, 1+adders*per)
	}
	k := s.k.group(uint64(g))
	ids, err := s.rdb.HVals(ctx, k.M).Result()
	check(t, err)
	slices.Sort(ids)
	if n := s.rdb.StrLen(ctx, k.U).Val(); n != int64(8*len(ids)) || len(slices.Compact(ids)) != 1+adders*per {
		t.Fatalf("packed members %d bytes, mapids %v", n, ids)
	}
	// A user who left is current again after a re-add, with their mapid.
	_, err = s.LeaveGroup(ctx, 100, g)
	check(t, err)
	if _, err = s.LeaveGroup(ctx, 100, g); !errors.Is(err, engine.ErrForbidden) { // and changes nothing
		t.Fatalf("leaving again: %v", err)
	}
	before := s.rdb.HGet(ctx, k.M, "100").Val()
	check(t, s.AddGroupMembers(ctx, creator, g, []engine.UserID{100}))
	if after := s.rdb.HGet(ctx, k.M, "100").Val(); after != before {
		t.Fatalf("returning member's mapid %s, was %s", after, before)
	}
	if gr, err = s.Group(ctx, creator, g); err != nil || gr.MemberCount != 1+adders*per {
		t.Fatalf("after leave and re-add: %v %+v", err, gr)
	}
}

// ReceiptsChanged names the message's sender (ops.MarkMessagesRead), as
// the embedded engine's does; a second read of the same message tells
// nobody.
func TestReceiptsChangedNamesSender(t *testing.T) {
	ctx := context.Background()
	s := openInternal(t)
	const sender, reader = 1, 2
	events := make(chan engine.Event, 16)
	cancel := s.Subscribe(func(ev engine.Event) {
		if ev.Kind == engine.ReceiptsChanged {
			events <- ev
		}
	})
	defer cancel()
	g, err := s.CreateGroup(ctx, sender, []engine.UserID{reader})
	check(t, err)
	m, err := s.SendMessage(ctx, sender, g, "hi", nil, "")
	check(t, err)
	_, err = s.MarkMessagesRead(ctx, reader, []engine.MessageID{m.ID, m.ID})
	check(t, err)
	select {
	case ev := <-events:
		if ev.Message != m.ID || !slices.Equal(ev.Users, []engine.UserID{sender}) {
			t.Fatalf("event %+v", ev)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no ReceiptsChanged event")
	}
	_, err = s.MarkMessagesRead(ctx, reader, []engine.MessageID{m.ID})
	check(t, err)
	// The sender's own read does not count either.
	_, err = s.MarkMessagesRead(ctx, sender, []engine.MessageID{m.ID})
	check(t, err)
	select {
	case ev := <-events:
		t.Fatalf("unexpected %+v", ev)
	case <-time.After(300 * time.Millisecond):
	}
	rc, err := s.Receipts(ctx, sender, m.ID, 10)
	check(t, err)
	if rc.ReadCount != 1 || rc.UnreadCount != 0 {
		t.Fatalf("receipts %+v", rc)
	}
}

// Import rows of one post in one chunk are decided in order, each on the
// post as the rows before left it (ops.DecideImport).
func TestImportDecidesRowsInOrder(t *testing.T) {
	ctx := context.Background()
	s := openInternal(t)
	post := engine.PostID(s.gen.Next())
	check(t, s.Import(ctx, []engine.ImportRow{
		{Post: post, Counts: engine.Counts{Likes: 3}}, // registered without an author
		{Post: post, Author: 7, Counts: engine.Counts{Likes: 5}},
		{Post: post, Author: 8, Counts: engine.Counts{Views: 1}}, // a known author is kept
	}))
	ps, err := s.Posts(ctx, []engine.PostID{post})
	check(t, err)
	cs, err := s.Counts(ctx, []engine.PostID{post})
	check(t, err)
	uc, err := s.UserCounts(ctx, []engine.UserID{7, 8})
	check(t, err)
	if ps[0].Author != 7 || cs[0] != (engine.Counts{Views: 1}) || uc[0].Posts != 1 || uc[1].Posts != 0 {
		t.Fatalf("post %+v counts %+v user counts %+v", ps[0], cs[0], uc)
	}
}

// An import of several chunks, with posts that are new (HSETNX), known,
// and repeated within and across chunks: every row of a post is decided in
// order on what the rows before left, wherever in the batch they are. The
// expected state folds ops.DecideImport over the rows in order.
func TestImportKeepsEachPostsOrder(t *testing.T) {
	ctx := context.Background()
	s := openInternal(t)
	t0 := time.Now().Add(-48 * time.Hour).UnixMilli()
	n := importChunk*4 + 123
	var rows []engine.ImportRow
	var ids []engine.PostID
	for i := range n {
		// 37 ms apart: posts spread over many buckets, several per bucket.
		id := engine.PostID(snowflake.Make(t0+int64(i)*37, uint64(i%5), 0))
		ids = append(ids, id)
		r := engine.ImportRow{Post: id, Author: engine.UserID(1 + i%300), Counts: engine.Counts{Likes: int64(i % 7)}}
		if i%3 == 0 {
			r.Author = 0 // some registered without an author, some skipped (no counts either)
		}
		rows = append(rows, r)
	}
	// Every 10th post again near the end (with an author: a post known
	// without one takes it and counts for them) and once more at the very
	// end (a known author is kept; the counts are the last row's).
	for i := 0; i < n; i += 10 {
		rows = append(rows, engine.ImportRow{Post: ids[i], Author: 1000 + engine.UserID(i%50), Counts: engine.Counts{Views: int64(i)}})
	}
	for i := 0; i < n; i += 10 {
		rows = append(rows, engine.ImportRow{Post: ids[i], Author: 2000, Counts: engine.Counts{Comments: int64(i + 1)}})
	}
	want := map[engine.PostID]ops.PostFacts{}
	wantCounts := map[engine.PostID]engine.Counts{}
	wantPosts := map[engine.UserID]int64{}
	for _, r := range rows {
		known := want[r.Post]
		skip, register, authorPosts := ops.DecideImport(r, known)
		if skip {
			continue
		}
		if register {
			known = ops.PostFacts{Exists: true, Author: r.Author}
		}
		want[r.Post], wantCounts[r.Post] = known, r.Counts
		if authorPosts {
			wantPosts[r.Author]++
		}
	}
	if err := s.Import(ctx, rows); err != nil {
		t.Fatalf("import: %v (%v)", err, Cause(err))
	}
	// Reads take at most 100 ids a call.
	var infos []engine.PostInfo
	var cs []engine.Counts
	for lo := 0; lo < len(ids); lo += 100 {
		page := ids[lo:min(lo+100, len(ids))]
		in, err := s.Posts(ctx, page)
		check(t, err)
		c, err := s.Counts(ctx, page)
		check(t, err)
		infos, cs = append(infos, in...), append(cs, c...)
	}
	var counted int64
	for i, id := range ids {
		w := want[id]
		if infos[i].Exists != w.Exists || infos[i].Author != w.Author || cs[i] != wantCounts[id] {
			t.Fatalf("post %d (row %d): %+v %+v; want %+v %+v", id, i, infos[i], cs[i], w, wantCounts[id])
		}
		if !cs[i].IsZero() {
			counted++
		}
	}
	var users []engine.UserID
	for u := range wantPosts {
		users = append(users, u)
	}
	checkUsers := func(when string) {
		t.Helper()
		for lo := 0; lo < len(users); lo += 100 {
			page := users[lo:min(lo+100, len(users))]
			uc, err := s.UserCounts(ctx, page)
			check(t, err)
			for i, u := range page {
				if uc[i].Posts != wantPosts[u] {
					t.Fatalf("%s: user %d's post count %d; want %d", when, u, uc[i].Posts, wantPosts[u])
				}
			}
		}
	}
	checkUsers("after the import")
	if st := s.Stats(); st.Posts != int64(len(want)) || st.CountedPosts != counted {
		t.Errorf("stats: %d posts, %d counted; want %d, %d", st.Posts, st.CountedPosts, len(want), counted)
	}
	// A re-import changes nothing: no post counts twice.
	check(t, s.Import(ctx, rows))
	checkUsers("after a re-import")
}

// An import whose context has ended writes nothing and says so; one whose
// Redis is gone returns ErrUnavailable instead of hanging.
func TestImportStopsOnCancelAndFailure(t *testing.T) {
	node := redistest.StartSingleNode(t)
	s, err := Open(context.Background(), Options{Addrs: []string{node.Addr}, KeyPrefix: "ic:", ReadTimeout: time.Second,
		SweepInterval: -1, IntentSweepInterval: -1})
	check(t, err)
	t.Cleanup(func() { s.Close() })
	rows := make([]engine.ImportRow, 3*importChunk)
	for i := range rows {
		rows[i] = engine.ImportRow{Post: engine.PostID(s.gen.Next()), Author: 7, Counts: engine.Counts{Likes: 1}}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Import(ctx, rows); !errors.Is(err, context.Canceled) {
		t.Fatalf("import with an ended context: %v", err)
	}
	infos, err := s.Posts(context.Background(), []engine.PostID{rows[0].Post, rows[len(rows)-1].Post})
	check(t, err)
	if infos[0].Exists || infos[1].Exists {
		t.Fatalf("an import with an ended context wrote posts: %+v", infos)
	}
	node.Kill()
	done := make(chan error, 1)
	go func() { done <- s.Import(context.Background(), rows) }()
	select {
	case err := <-done:
		if !errors.Is(err, engine.ErrUnavailable) {
			t.Fatalf("import into a dead Redis: %v; want ErrUnavailable", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("import into a dead Redis still running after 30 s")
	}
}

// A post that another writer creates between the import's read and its
// HSETNX is read and decided again: it keeps its author, takes the row's
// counts, and the row's author gets no post for it; the rows beside it in
// the pipeline are written as usual.
func TestImportDecidesAgainWhenAPostAppears(t *testing.T) {
	ctx := context.Background()
	s, other := openQuiet(t, "ia:", nil)
	t0 := time.Now().Add(-time.Hour).UnixMilli()
	var ids []engine.PostID
	for i := range 3 {
		ids = append(ids, engine.PostID(snowflake.Make(t0+int64(i)*5000, 1, 0))) // a bucket each
	}
	b, low := s.k.post(uint64(ids[1]))
	race := &beforeHSETNX{fn: func() {
		check(t, other.HSet(ctx, b, low, postHead(9)+encodeCounts(engine.Counts{Views: 4}, nil)).Err())
	}}
	s.wdb.AddHook(race)
	before := s.Stats()
	check(t, s.Import(ctx, []engine.ImportRow{
		{Post: ids[0], Author: 7, Counts: engine.Counts{Likes: 1}},
		{Post: ids[1], Author: 7, Counts: engine.Counts{Likes: 2}},
		{Post: ids[2], Author: 7},
	}))
	if race.fired.Load() != 1 {
		t.Fatalf("the other writer ran %d times; the import sent no HSETNX?", race.fired.Load())
	}
	infos, err := s.Posts(ctx, ids)
	check(t, err)
	cs, err := s.Counts(ctx, ids)
	check(t, err)
	uc, err := s.UserCounts(ctx, []engine.UserID{7, 9})
	check(t, err)
	want := []engine.PostInfo{{Exists: true, Author: 7}, {Exists: true, Author: 9}, {Exists: true, Author: 7}}
	if !slices.Equal(infos, want) || cs[0] != (engine.Counts{Likes: 1}) || cs[1] != (engine.Counts{Likes: 2}) || !cs[2].IsZero() {
		t.Fatalf("posts %+v counts %+v; want %+v, likes 1, 2 and none", infos, cs, want)
	}
	if uc[0].Posts != 2 || uc[1].Posts != 0 {
		t.Fatalf("post counts: user 7 %d, user 9 %d; want 2 and 0 (the other writer bumped no one)", uc[0].Posts, uc[1].Posts)
	}
	// The store counts what it registered: two posts; one more counted
	// post (ids[1] had counts already, from the other writer; ids[2] has
	// none).
	if st := s.Stats(); st.Posts-before.Posts != 2 || st.CountedPosts-before.CountedPosts != 1 {
		t.Errorf("stats moved by %d posts, %d counted; want 2 and 1", st.Posts-before.Posts, st.CountedPosts-before.CountedPosts)
	}
}

// beforeHSETNX runs fn once, before the first pipeline holding an HSETNX.
type beforeHSETNX struct {
	fn    func()
	fired atomic.Int64
}

func (h *beforeHSETNX) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *beforeHSETNX) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *beforeHSETNX) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			if c.Name() == "hsetnx" && h.fired.Load() == 0 {
				h.fired.Add(1)
				h.fn()
				break
			}
		}
		return next(ctx, cmds)
	}
}

// Group, message and receipt reads are judged by ops.ViewGroup,
// ViewMessage and ViewReceipts on the facts the read's script returned
// with its data: each refusal is the ops error, before the cursor is
// judged, and nothing of the data it read comes back.
func TestReadsJudgedByOps(t *testing.T) {
	ctx := context.Background()
	s := openInternal(t)
	const sender, member, leaver, stranger = 1, 2, 3, 4
	g, err := s.CreateGroup(ctx, sender, []engine.UserID{member, leaver})
	check(t, err)
	m, err := s.SendMessage(ctx, sender, g, "hi", nil, "")
	check(t, err)
	_, err = s.LeaveGroup(ctx, leaver, g)
	check(t, err)
	refused := func(what string, err error, want error) {
		t.Helper()
		if !errors.Is(err, want) {
			t.Errorf("%s: %v, want %v", what, err, want)
		}
	}
	// Groups: an ex-member and a stranger are refused even with a cursor
	// that names nobody (the rule comes first), and get no page.
	for _, u := range []engine.UserID{leaver, stranger} {
		grp, err := s.Group(ctx, u, g)
		refused("group read by a non-member", err, ops.ErrNotMember)
		if grp.MemberCount != 0 || len(grp.Members) != 0 {
			t.Errorf("a refused group read returned %+v", grp)
		}
		page, err := s.GroupMembers(ctx, u, g, 10, 999)
		refused("member page by a non-member", err, ops.ErrNotMember)
		if page != nil {
			t.Errorf("a refused member page returned %v", page)
		}
	}
	_, err = s.Group(ctx, sender, g+1)
	refused("unknown group", err, engine.ErrNotFound)
	_, err = s.GroupMembers(ctx, member, g, 10, 999)
	refused("a member's page after a stranger", err, engine.ErrInvalid)
	// Messages.
	for _, u := range []engine.UserID{leaver, stranger} {
		got, err := s.Message(ctx, u, m.ID)
		refused("message read by a non-member", err, ops.ErrNotMember)
		if got.Text != "" {
			t.Errorf("a refused message read returned %+v", got)
		}
	}
	for _, id := range []engine.MessageID{0, m.ID + 1} {
		_, err = s.Message(ctx, member, id)
		refused("unknown message", err, engine.ErrNotFound)
		_, err = s.Receipts(ctx, sender, id, 10)
		refused("receipts of an unknown message", err, engine.ErrNotFound)
	}
	// Receipts: the sender only, while a member; a non-sender is told
	// so whatever their standing, before a bad cursor is judged.
	for _, u := range []engine.UserID{member, leaver, stranger} {
		rc, err := s.Receipts(ctx, u, m.ID, 10)
		refused("receipts read by a non-sender", err, ops.ErrNotSender)
		if rc.ReadCount+rc.UnreadCount != 0 || rc.Readers != nil || rc.Unreaders != nil {
			t.Errorf("a refused receipts read returned %+v", rc)
		}
		_, err = s.ReceiptMembers(ctx, u, m.ID, false, 10, 999)
		refused("receipt members read by a non-sender", err, ops.ErrNotSender)
	}
	_, err = s.ReceiptMembers(ctx, sender, m.ID, false, 10, 999)
	refused("the sender's receipt page after a stranger", err, engine.ErrInvalid)
	rc, err := s.Receipts(ctx, sender, m.ID, 10)
	check(t, err)
	if rc.UnreadCount != 2 {
		t.Fatalf("the sender's receipts %+v, want 2 unread", rc)
	}
	_, err = s.LeaveGroup(ctx, sender, g)
	check(t, err)
	_, err = s.Receipts(ctx, sender, m.ID, 10)
	refused("receipts read by a sender who left", err, ops.ErrSenderLeft)
	_, err = s.ReceiptMembers(ctx, sender, m.ID, true, 10, 0)
	refused("receipt members read by a sender who left", err, ops.ErrSenderLeft)
}

// Import checks every row (ops.CheckImport) before it writes any: a bad
// row anywhere leaves the store as it was, and the error names the row.
func TestImportChecksAllRowsFirst(t *testing.T) {
	ctx := context.Background()
	s := openInternal(t)
	good := engine.PostID(s.gen.Next())
	for _, bad := range []engine.ImportRow{
		{Post: 0, Counts: engine.Counts{Likes: 1}},
		{Post: good + 1, Counts: engine.Counts{Favorites: -1}},
	} {
		err := s.Import(ctx, []engine.ImportRow{{Post: good, Author: 7, Counts: engine.Counts{Likes: 5}}, bad})
		if !errors.Is(err, engine.ErrInvalid) {
			t.Fatalf("import with %+v: %v, want invalid", bad, err)
		}
		if bad.Post == 0 && !strings.Contains(err.Error(), "row 2") {
			t.Errorf("error %q does not name row 2", err)
		}
	}
	cs, err := s.Counts(ctx, []engine.PostID{good})
	check(t, err)
	uc, err := s.UserCounts(ctx, []engine.UserID{7})
	check(t, err)
	if cs[0] != (engine.Counts{}) || uc[0].Posts != 0 {
		t.Fatalf("a refused import wrote: counts %+v, author's posts %d", cs[0], uc[0].Posts)
	}
}

// tripCounter counts round trips to Redis: each command or pipeline sent,
// except the store's once-a-second stats flush.
type tripCounter struct{ n atomic.Int64 }

func (c *tripCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *tripCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmd)
	}
}

func (c *tripCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) == 0 || cmds[0].Name() != "hincrby" {
			c.n.Add(1)
		}
		return next(ctx, cmds)
	}
}

// TestRoundTrips pins how many round trips the hot operations cost, so
// that deciding in Go (engine/ops) does not quietly add any: a like of
// someone else's post is its step, the badge, the intent's deletion, its
// markers' deletion and the event; a comment likewise; a page is one; a
// badge read is two (three once a day, the cursor touch); a group read
// is one, refused or not (the rule is judged on the facts its script
// returns); a message read two (the id -> group index, then the
// script); a receipts read three (index, script, member ids). A comment
// with an id costs one more (the writer's record of it), a known id one
// (the step that finds it); a comment's delete two (its facts, its
// script); a post's delete its facts, the tombstone and the intent of
// the author's count (and a repost's original's) finished like a like's;
// a repeat one. An erasure on this small keyspace: its intent, start,
// the user's own edges, one walk step per master (SCAN, the facts, the
// authored posts, the changes, the progress) and its end; a repeat walks
// again (nothing remembers that an erased user was erased). A script call
// costing two (NOSCRIPT, then EVAL) shows here too.
func TestRoundTrips(t *testing.T) {
	ctx := context.Background()
	addr, _ := redistest.StartSingle(t)
	s, err := Open(ctx, Options{Addrs: []string{addr}, KeyPrefix: "rt:", ReadTimeout: 5 * time.Second,
		SweepInterval: -1, IntentSweepInterval: -1})
	check(t, err)
	t.Cleanup(func() { s.Close() })
	var c tripCounter
	s.rdb.AddHook(&c)
	s.wdb.AddHook(&c)
	const author, fan, other = 1, 2, 3
	post, err := s.CreatePost(ctx, author, 0, "")
	check(t, err)
	check(t, s.Follow(ctx, fan, author))
	trips := func(name string, want int64, op func() error) {
		t.Helper()
		c.n.Store(0)
		check(t, op())
		if got := c.n.Load(); got != want {
			t.Errorf("%s: %d round trips, want %d", name, got, want)
		}
	}
	trips("like", 5, func() error { return s.Like(ctx, fan, post) })
	trips("repeated like", 1, func() error { return s.Like(ctx, fan, post) })
	trips("unlike", 1, func() error { return s.Unlike(ctx, fan, post) })
	trips("self-like", 2, func() error { return s.Like(ctx, author, post) })
	trips("comment", 5, func() error { return s.Comment(ctx, fan, post, 0, []engine.UserID{other}, "") })
	ids := []engine.PostID{post}
	views := make([]engine.PostView, 1)
	trips("page", 1, func() error {
		return s.Page(ctx, fan, ids, engine.PageWant{Counts: true, Liked: true, Favorited: true}, views)
	})
	trips("first badge read", 3, func() error { _, err := s.Unread(ctx, fan); return err })
	trips("badge read", 2, func() error { _, err := s.Unread(ctx, fan); return err })
	g, err := s.CreateGroup(ctx, author, []engine.UserID{fan})
	check(t, err)
	m, err := s.SendMessage(ctx, author, g, "hi", nil, "")
	check(t, err)
	trips("group read", 1, func() error { _, err := s.Group(ctx, fan, g); return err })
	trips("refused group read", 1, func() error {
		if _, err := s.Group(ctx, other, g); !errors.Is(err, ops.ErrNotMember) {
			return fmt.Errorf("group read by a stranger: %v", err)
		}
		return nil
	})
	trips("message read", 2, func() error { _, err := s.Message(ctx, fan, m.ID); return err })
	trips("receipts read", 3, func() error { _, err := s.Receipts(ctx, author, m.ID, 10); return err })

	cid := engine.CommentID(snowflake.Make(time.Now().UnixMilli(), 1, 1))
	trips("comment with an id", 6, func() error { return s.Comment(ctx, fan, post, cid, nil, "") })
	trips("comment id again", 1, func() error { return s.Comment(ctx, fan, post, cid, nil, "") })
	trips("delete comment", 2, func() error { return s.DeleteComment(ctx, engine.Actor{User: fan}, post, cid) })
	trips("delete comment again", 1, func() error { return s.DeleteComment(ctx, engine.Actor{User: fan}, post, cid) })
	repost, err := s.Repost(ctx, fan, post, nil, "")
	check(t, err)
	trips("delete repost", 6, func() error { return s.DeletePost(ctx, engine.Actor{User: fan}, repost) })
	trips("delete post", 5, func() error { return s.DeletePost(ctx, engine.Actor{User: author}, post) })
	trips("delete post again", 1, func() error { return s.DeletePost(ctx, engine.Actor{User: author}, post) })
	trips("erase user", 21, func() error { return s.EraseUser(ctx, fan) })
	trips("erase user again", 14, func() error { return s.EraseUser(ctx, fan) })
}
