package redisstore_test

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/redisstore"
	"github.com/tally-dev/tally/engine/redisstore/redistest"
	"github.com/tally-dev/tally/engine/snowflake"
)

// Rules the conformance suite does not reach: import, cursor expiry on an
// injected clock, paging after an unknown id, and the stats counters.

// clock is a settable Options.Now.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func TestImport(t *testing.T) {
	addr, _ := redistest.StartSingle(t)
	s := open(t, redisstore.Options{Addrs: []string{addr}, KeyPrefix: prefix()})
	now := time.Now().UnixMilli()
	id := func(i int64) engine.PostID { return engine.PostID(snowflake.Make(now-i*1000, 5, 0)) }
	big := int64(1) << 40 // past 2^31: exact 64-bit counts
	rows := []engine.ImportRow{
		{Post: id(1), Author: 7, Counts: engine.Counts{Likes: 3, Views: big}},
		{Post: id(2), Counts: engine.Counts{Comments: 2}}, // no author, a count: known
		{Post: id(3)},            // neither: skipped
		{Post: id(4), Author: 7}, // author, zero counts: known
	}
	must(t, s.Import(bg, rows))
	infos, err := s.Posts(bg, []engine.PostID{id(1), id(2), id(3), id(4)})
	must(t, err)
	want := []engine.PostInfo{{Exists: true, Author: 7}, {Exists: true}, {}, {Exists: true, Author: 7}}
	if !slices.Equal(infos, want) {
		t.Fatalf("Posts after import = %+v, want %+v", infos, want)
	}
	cs, err := s.Counts(bg, []engine.PostID{id(1), id(2)})
	must(t, err)
	if cs[0] != (engine.Counts{Likes: 3, Views: big}) || cs[1] != (engine.Counts{Comments: 2}) {
		t.Fatalf("counts after import = %+v", cs)
	}
	uc, err := s.UserCounts(bg, []engine.UserID{7, 8})
	must(t, err)
	if uc[0].Posts != 2 || uc[1].Posts != 0 {
		t.Fatalf("postCounts after import = %+v, want 2 and 0", uc)
	}
	// A re-import replaces counts; a known author stays; a post known
	// without one takes the imported author (and it counts for them).
	must(t, s.Import(bg, []engine.ImportRow{
		{Post: id(1), Author: 8, Counts: engine.Counts{Likes: 1}},
		{Post: id(2), Author: 8, Counts: engine.Counts{Comments: 5}},
	}))
	infos, err = s.Posts(bg, []engine.PostID{id(1), id(2)})
	must(t, err)
	cs, err = s.Counts(bg, []engine.PostID{id(1), id(2)})
	must(t, err)
	uc, err = s.UserCounts(bg, []engine.UserID{7, 8})
	must(t, err)
	if infos[0].Author != 7 || infos[1].Author != 8 || cs[0] != (engine.Counts{Likes: 1}) ||
		cs[1] != (engine.Counts{Comments: 5}) || uc[0].Posts != 2 || uc[1].Posts != 1 {
		t.Fatalf("after re-import: %+v %+v %+v", infos, cs, uc)
	}
	// Imported posts take likes like any other, on top of imported counts.
	must(t, s.Like(bg, 9, id(2)))
	cs, err = s.Counts(bg, []engine.PostID{id(2)})
	must(t, err)
	if cs[0] != (engine.Counts{Likes: 1, Comments: 5}) {
		t.Fatalf("after a like on an imported post: %+v", cs[0])
	}
	if err := s.Import(bg, []engine.ImportRow{{Post: id(5), Counts: engine.Counts{Views: -1}}}); err == nil {
		t.Fatal("a negative count was imported")
	}
}

func TestSystemCursorExpiry(t *testing.T) {
	addr, _ := redistest.StartSingle(t)
	clk := &clock{t: time.Now()}
	s := open(t, redisstore.Options{Addrs: []string{addr}, KeyPrefix: prefix(), Now: clk.now, CursorTTL: 30 * 24 * time.Hour})
	const active, idle = 1, 2
	for _, u := range []engine.UserID{active, idle} {
		_, err := s.Unread(bg, u)
		must(t, err)
	}
	for range 2 {
		_, err := s.PublishNotification(bg, "t", "b", "")
		must(t, err)
	}
	// The active user keeps reading; 20 days pass in steps.
	for range 4 {
		clk.add(5 * 24 * time.Hour)
		n, err := s.Unread(bg, active)
		must(t, err)
		if n.System != 2 {
			t.Fatalf("active user's system unread = %d, want 2", n.System)
		}
	}
	// 31 days after the idle user was last seen, their cursor is gone:
	// they are new again, starting at the newest notification.
	clk.add(11 * 24 * time.Hour)
	n, err := s.Unread(bg, idle)
	must(t, err)
	if n.System != 0 {
		t.Fatalf("idle user's system unread = %d after 31 days, want 0 (cursor dropped)", n.System)
	}
	n, err = s.Unread(bg, active)
	must(t, err)
	if n.System != 2 {
		t.Fatalf("active user's system unread = %d, want 2", n.System)
	}
	_, err = s.PublishNotification(bg, "t", "b", "")
	must(t, err)
	n, err = s.Unread(bg, idle)
	must(t, err)
	if n.System != 1 {
		t.Fatalf("returning user's system unread = %d after a new notification, want 1", n.System)
	}

	// The sweep frees cursors nobody read for longer than the TTL: only the
	// user who went quiet 31 days ago (the others were just seen).
	const quiet = 3
	_, err = s.Unread(bg, quiet)
	must(t, err)
	clk.add(31 * 24 * time.Hour)
	_, err = s.Unread(bg, active)
	must(t, err)
	dropped, err := s.SweepCursors(bg)
	must(t, err)
	if dropped != 2 { // quiet, and idle (last seen 31 days ago too)
		t.Fatalf("sweep dropped %d cursors, want 2", dropped)
	}
	if st := s.Stats(); st.Users != 1 {
		t.Fatalf("users with state after the sweep = %d, want 1", st.Users)
	}
	if dropped, err = s.SweepCursors(bg); err != nil || dropped != 0 {
		t.Fatalf("second sweep dropped %d (%v)", dropped, err)
	}
}

func TestNotificationsAfterUnknownID(t *testing.T) {
	addr, _ := redistest.StartSingle(t)
	s := open(t, redisstore.Options{Addrs: []string{addr}, KeyPrefix: prefix()})
	var ids []engine.NotificationID
	for range 5 {
		n, err := s.PublishNotification(bg, "t", "b", "")
		must(t, err)
		ids = append(ids, n.ID)
		time.Sleep(2 * time.Millisecond)
	}
	// An id between the third and fourth: the page starts at the third.
	between := ids[2] + 1
	page, err := s.Notifications(bg, 2, between)
	must(t, err)
	if len(page) != 2 || page[0].ID != ids[2] || page[1].ID != ids[1] {
		t.Fatalf("page after an unknown id = %+v", page)
	}
	// Older than everything, and newer than everything.
	if page, _ = s.Notifications(bg, 10, 1); len(page) != 0 {
		t.Fatalf("page after id 1 = %+v", page)
	}
	page, err = s.Notifications(bg, 10, ^engine.NotificationID(0))
	must(t, err)
	if len(page) != 5 || page[0].ID != ids[4] {
		t.Fatalf("page after the largest id = %+v", page)
	}
}

func TestStats(t *testing.T) {
	addr, _ := redistest.StartSingle(t)
	s := open(t, redisstore.Options{Addrs: []string{addr}, KeyPrefix: prefix()})
	p, err := s.CreatePost(bg, 1, 0, "")
	must(t, err)
	_, err = s.CreatePost(bg, 1, 0, "")
	must(t, err)
	must(t, s.Like(bg, 2, p))
	g, err := s.CreateGroup(bg, 1, []engine.UserID{2})
	must(t, err)
	_, err = s.SendMessage(bg, 1, g, "hi", nil, "")
	must(t, err)
	_, err = s.PublishNotification(bg, "t", "b", "")
	must(t, err)
	st := s.Stats()
	// Users with records: 1 (posts) and 2 (a message badge).
	want := engine.Stats{Posts: 2, CountedPosts: 1, Users: 2, Groups: 1, Messages: 1, Notifications: 1}
	got := st
	got.MemoryBytes = 0
	if got != want || st.MemoryBytes <= 0 {
		t.Fatalf("Stats = %+v, want %+v and some memory", st, want)
	}
	must(t, s.Unlike(bg, 2, p))
	if st := s.Stats(); st.CountedPosts != 0 {
		t.Fatalf("CountedPosts after the only like was removed = %d", st.CountedPosts)
	}
}

// A 200-member group's message costs seed 004's 54 bytes (docs/seeds.md) of receipts:
// {maxid: 4 bytes, quitbits: 25, readbits: 25}.
func TestReceiptRecordSize(t *testing.T) {
	addr, _ := redistest.StartSingle(t)
	s := open(t, redisstore.Options{Addrs: []string{addr}, KeyPrefix: prefix()})
	g, err := s.CreateGroup(bg, 1, nil)
	must(t, err)
	var batch []engine.UserID
	for u := engine.UserID(2); u <= 200; u++ {
		if batch = append(batch, u); len(batch) == engine.MaxIDsPerCall || u == 200 {
			must(t, s.AddGroupMembers(bg, 1, g, batch))
			batch = batch[:0]
		}
	}
	m, err := s.SendMessage(bg, 1, g, "hi", nil, "")
	must(t, err)
	_, err = s.MarkMessagesRead(bg, 77, []engine.MessageID{m.ID})
	must(t, err)
	if n := s.ReceiptBytes(g, m.ID); n != 54 {
		t.Fatalf("receipts of a 200-member group take %d bytes, want 54", n)
	}
}
