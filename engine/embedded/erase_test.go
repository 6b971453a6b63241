package embedded

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/snowflake"
	"github.com/tally-dev/tally/engine/tier"
)

// erased is the user the erasure tests erase: an id whose 8 bytes and
// decimal digits are unlikely anywhere by chance.
const erased engine.UserID = 0x0123456789ABCDEF

// lifeWorld builds a data directory where the erased user has a bit of
// everything, spread over windows that are open, sealed and cold, and
// kept in snapshots and the log: likes, favorites, comments with ids
// (writer records), posts, follows both ways, groups and messages,
// idempotency records, badges, a cursor and a red-dot click.
// lifeKinds are lifeWorld's reaction kinds; the erased user reacts to
// post i with kind i%3.
var lifeKinds = []string{"like", "love", "haha"}

// pageReactions reads every kind's count of posts.
func pageReactions(t *testing.T, e *Engine, posts []engine.PostID) []engine.Reactions {
	t.Helper()
	out := make([]engine.PostView, len(posts))
	ok(t, e.Page(bg, 0, posts, engine.PageWant{Reactions: true}, out))
	rs := make([]engine.Reactions, len(posts))
	for i, v := range out {
		rs[i] = v.Reactions
	}
	return rs
}

func lifeWorld(t *testing.T, dir string, clk *clock) (*Engine, Options, []engine.PostID) {
	t.Helper()
	opts := durableOpts(dir, clk)
	opts.Tables = tier.Options{OpenAge: -1, ColdAge: 48 * time.Hour}
	opts.MaintainInterval = -1 // the test maintains
	opts.Reactions = lifeKinds
	e := openE(t, opts)
	var posts []engine.PostID
	for day := 10; day >= 0; day-- {
		for i := range 5 {
			at := clk.Now().Add(-time.Duration(day)*24*time.Hour - time.Duration(i)*time.Minute)
			id := engine.PostID(snowflake.Make(at.UnixMilli(), 3, uint64(i)))
			author := engine.UserID(100 + i)
			if i == 4 {
				author = erased
			}
			p, err := e.CreatePost(bg, author, id, "")
			ok(t, err)
			posts = append(posts, p)
		}
	}
	for i, p := range posts {
		// Reactions of other kinds in every window: each comes off its
		// own kind's count.
		ok(t, e.ReactToPost(bg, erased, p, lifeKinds[i%len(lifeKinds)]))
		ok(t, e.Like(bg, engine.UserID(200+i%3), p))
		if i%2 == 1 {
			ok(t, e.ReactToPost(bg, engine.UserID(210+i%3), p, "haha"))
		}
		if i%2 == 0 {
			ok(t, e.Favorite(bg, erased, p))
		}
		if i%3 == 0 {
			c := engine.CommentID(snowflake.Make(clk.Now().UnixMilli(), 9, uint64(i)))
			ok(t, e.Comment(bg, erased, p, c, []engine.UserID{100}, fmt.Sprint("k", i)))
		}
		ok(t, e.Comment(bg, 100, p, 0, []engine.UserID{erased}, ""))
	}
	for i := range 5 {
		ok(t, e.Follow(bg, erased, engine.UserID(100+i)))
		ok(t, e.Follow(bg, engine.UserID(200+i), erased))
	}
	g, err := e.CreateGroup(bg, 100, []engine.UserID{erased, 101, 102})
	ok(t, err)
	m, err := e.SendMessage(bg, erased, g, "hello", nil, "mk")
	ok(t, err)
	_, err = e.MarkMessagesRead(bg, 101, []engine.MessageID{m.ID})
	ok(t, err)
	_, err = e.SendMessage(bg, 101, g, "hi", []engine.UserID{erased}, "")
	ok(t, err)
	_, err = e.Unread(bg, erased)
	ok(t, err)
	ok(t, e.PushRedDot(bg))
	ok(t, e.ClickRedDot(bg, erased))
	// Windows older than two days go to cold files; a snapshot and the
	// log hold everything so far.
	e.maintain()
	ok(t, e.Snapshot(bg))
	// More after the snapshot: in the log only.
	ok(t, e.Unlike(bg, erased, posts[0]))
	ok(t, e.Like(bg, erased, posts[0]))
	clk.Advance(time.Second)
	return e, opts, posts
}

// TestEraseLeavesNoTrace: after eraseUser and the next snapshot, no file
// of the data directory — log, snapshot, cold file — holds the erased
// user's id: checked through the tables of the state the directory
// recovers to and every record of the log, and by searching every file's
// bytes for the id's 8-byte, varint and decimal forms.
func TestEraseLeavesNoTrace(t *testing.T) {
	dir := t.TempDir()
	clk := newClock()
	e, opts, posts := lifeWorld(t, dir, clk)
	cold := 0
	for _, s := range e.st.likes.Stats() {
		if s.Kind == tier.Cold {
			cold++
		}
	}
	if cold == 0 {
		t.Fatal("no cold window: the test would not check cold files")
	}
	if !traceOf(t, dir) {
		t.Fatal("the id is nowhere before the erasure: the search finds nothing")
	}
	before, err := e.Counts(bg, posts)
	ok(t, err)
	reactionsBefore := pageReactions(t, e, posts)
	ok(t, e.EraseUser(bg, erased))
	waitErasures(t, e)
	after, err := e.Counts(bg, posts)
	ok(t, err)
	reactionsAfter := pageReactions(t, e, posts)
	for i := range posts {
		want := before[i]
		if i%len(lifeKinds) == 0 {
			want.Likes--
		}
		if i%2 == 0 {
			want.Favorites--
		}
		if after[i] != want {
			t.Fatalf("post %d: counts %+v after the erasure, want %+v", i, after[i], want)
		}
		wantR := reactionsBefore[i]
		wantR.Count[i%len(lifeKinds)]--
		if reactionsAfter[i] != wantR {
			t.Fatalf("post %d: reactions %v after the erasure, want %v", i, reactionsAfter[i].Count[:3], wantR.Count[:3])
		}
	}
	ok(t, e.Snapshot(bg))
	ok(t, e.Close())
	if traceOf(t, dir) {
		t.Fatal("a file still holds the erased user's id")
	}
	// The directory recovers to a state that knows nothing of the user.
	e2 := openE(t, opts)
	checkNoUser(t, e2, uint64(erased))
	if n := len(snapshots(t, dir)); n != 1 {
		t.Fatalf("%d snapshots kept after the erasure's snapshot, want 1", n)
	}
}

// traceOf reports whether any file under dir holds the erased id, in its
// 8-byte little- or big-endian, uvarint or decimal form.
func traceOf(t *testing.T, dir string) bool {
	t.Helper()
	var le, be [8]byte
	binary.LittleEndian.PutUint64(le[:], uint64(erased))
	binary.BigEndian.PutUint64(be[:], uint64(erased))
	forms := [][]byte{le[:], be[:], binary.AppendUvarint(nil, uint64(erased)), []byte(strconv.FormatUint(uint64(erased), 10))}
	found := false
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, f := range forms {
			if bytes.Contains(b, f) {
				t.Logf("%s holds the id (%x)", path, f)
				found = true
			}
		}
		return nil
	})
	ok(t, err)
	return found
}

// checkNoUser decodes what the engine's state holds, table by table and
// record by record of its log, and fails on any mention of u.
func checkNoUser(t *testing.T, e *Engine, u uint64) {
	t.Helper()
	e.mu.RLock()
	defer e.mu.RUnlock()
	st := e.st
	if st.known(u) || st.isErasing(u) {
		t.Fatalf("user %d is still known", u)
	}
	for i, s := range st.sets() {
		err := s.Range(func(a, b uint64) bool {
			if a == u || b == u {
				t.Errorf("set %d holds (%d, %d)", i, a, b)
			}
			return true
		})
		ok(t, err)
	}
	ok(t, st.posts.Range(func(id uint64, p tier.Post) bool {
		if p.Author == u {
			t.Errorf("post %d is still by the erased user", id)
		}
		return true
	}))
	st.follows.Range(func(v uint64, ts []uint64, _ []int64) bool {
		if v == u || strings.Contains(fmt.Sprint(ts), fmt.Sprint(u)) {
			t.Errorf("follow list of %d names the user: %v", v, ts)
		}
		return true
	})
	for _, g := range st.groupList {
		for _, m := range g.byMap {
			if m == u {
				t.Errorf("group %d names the user", g.id)
			}
		}
	}
	for _, m := range st.msgList {
		if m.sender == u {
			t.Errorf("message %d is still from the user", m.id)
		}
	}
	st.idem.Range(func(k idemKey, _ idemVal) bool {
		if k[0] == u {
			t.Errorf("an idempotency record of the user")
		}
		return true
	})
	if e.log != nil {
		var rd recordReader
		err := e.log.Replay(e.log.FirstIndex(), func(index uint64, payload []byte) error {
			r, err := rd.decode(payload)
			if err != nil {
				return err
			}
			if s := show(r); strings.Contains(s, fmt.Sprint(u)) {
				t.Errorf("log record %d names the user: %s", index, s)
			}
			return nil
		})
		ok(t, err)
	}
}

// TestEraseReadsExactWhileRunning holds the eraser between steps and
// reads after each: every answer is the one after the whole erasure,
// from the moment EraseUser returns.
func TestEraseReadsExactWhileRunning(t *testing.T) {
	dir := t.TempDir()
	clk := newClock()
	e, _, posts := lifeWorld(t, dir, clk)
	gate := make(chan struct{})
	defer close(gate)
	setStepGate(e, func() { <-gate })
	others := []engine.UserID{100, 101, 102, 103, 104, 200, 201, 202, 203, 204}
	want := func() string {
		cs, err := e.Counts(bg, posts)
		ok(t, err)
		infos, err := e.Posts(bg, posts)
		ok(t, err)
		ucs, err := e.UserCounts(bg, append(others, erased))
		ok(t, err)
		var fs []string
		for _, u := range others {
			f, err := e.Followees(bg, u)
			ok(t, err)
			fs = append(fs, fmt.Sprint(f))
		}
		un, err := e.Unread(bg, 200)
		ok(t, err)
		return fmt.Sprint(cs, infos, ucs, fs, un, pageReactions(t, e, posts))
	}
	ok(t, e.EraseUser(bg, erased))
	first := want()
	if strings.Contains(first, fmt.Sprint(uint64(erased))) {
		t.Fatalf("a read names the user being erased: %s", first)
	}
	steps := 0
	for e.Stats().Erasures > 0 {
		select {
		case gate <- struct{}{}:
			steps++
		case <-time.After(10 * time.Millisecond):
		}
		if got := want(); got != first {
			t.Fatalf("after %d steps the reads changed:\n%s\nwant\n%s", steps, got, first)
		}
	}
	if steps < 4 {
		t.Fatalf("the erasure took %d steps", steps)
	}
	// A call by the user waited for the erasure; now it goes through.
	ok(t, e.Like(bg, erased, posts[0]))
}

// TestEraseWaitsForTheUser: a call by a user being erased waits for the
// erasure, and gives up UNAVAILABLE when its context ends.
func TestEraseWaitsForTheUser(t *testing.T) {
	clk := newClock()
	e := open(t, Options{Now: clk.Now, SweepInterval: -1})
	p, err := e.CreatePost(bg, 1, 0, "")
	ok(t, err)
	ok(t, e.Like(bg, erased, p))
	gate := make(chan struct{})
	setStepGate(e, func() { <-gate })
	ok(t, e.EraseUser(bg, erased))
	ctx, cancel := context.WithTimeout(bg, 20*time.Millisecond)
	defer cancel()
	if err := e.Like(ctx, erased, p); !errors.Is(err, engine.ErrUnavailable) {
		t.Fatalf("a like by a user being erased: %v", err)
	}
	done := make(chan error)
	go func() { done <- e.Like(bg, erased, p) }()
	close(gate)
	ok(t, <-done)
	c, err := e.Counts(bg, []engine.PostID{p})
	ok(t, err)
	if c[0].Likes != 1 {
		t.Fatalf("likes %d: the like after the erasure counts, the one before does not", c[0].Likes)
	}
}

// TestEraseReactionsWhileRunning holds the eraser before its first step:
// every read takes the erased user's reactions off their own kinds' counts
// at once, a reaction by another user on the same posts settles the
// pending ones first (no count goes below what the whole erasure leaves),
// and the finished erasure leaves the same counts.
func TestEraseReactionsWhileRunning(t *testing.T) {
	const erased, other, third = engine.UserID(7), engine.UserID(8), engine.UserID(9)
	e := open(t, Options{Reactions: []string{"like", "love", "haha"}, SweepInterval: -1})
	p1, err := e.CreatePost(bg, 1, 0, "")
	ok(t, err)
	p2, err := e.CreatePost(bg, 1, 0, "")
	ok(t, err)
	p3, err := e.CreatePost(bg, 1, 0, "")
	ok(t, err)
	ok(t, e.ReactToPost(bg, erased, p3, "haha"))
	ok(t, e.ReactToPost(bg, erased, p1, "love"))
	ok(t, e.ReactToPost(bg, erased, p2, "like"))
	ok(t, e.ReactToPost(bg, other, p1, "love"))
	gate := make(chan struct{})
	release := sync.OnceFunc(func() { close(gate) })
	t.Cleanup(release) // before Close, which waits for the eraser, on a failure too
	setStepGate(e, func() { <-gate })
	ok(t, e.EraseUser(bg, erased))
	check := func(when string, post engine.PostID, want map[string]int64) {
		t.Helper()
		got, _ := reactionsOf(t, e, third, post)
		if !maps.Equal(got, want) {
			t.Fatalf("%s: post %d reads %v, want %v", when, post, got, want)
		}
	}
	check("erasure pending", p1, map[string]int64{"like": 0, "love": 1, "haha": 0})
	check("erasure pending", p2, map[string]int64{"like": 0, "love": 0, "haha": 0})
	// Changes to the counts the erased user's reactions are in.
	ok(t, e.UnreactToPost(bg, other, p1))
	ok(t, e.ReactToPost(bg, third, p2, "haha"))
	ok(t, e.ReactToPost(bg, third, p2, "like"))
	check("after other reactions", p1, map[string]int64{"like": 0, "love": 0, "haha": 0})
	check("after other reactions", p2, map[string]int64{"like": 1, "love": 0, "haha": 0})
	// An import replaces the five counts and leaves the other kinds'.
	ok(t, e.Import(bg, []engine.ImportRow{{Post: p3, Author: 1, Counts: engine.Counts{Likes: 5}}}))
	check("after an import", p3, map[string]int64{"like": 5, "love": 0, "haha": 0})
	release()
	for deadline := time.Now().Add(10 * time.Second); e.Stats().Erasures > 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the erasure did not end")
		}
	}
	check("erasure done", p1, map[string]int64{"like": 0, "love": 0, "haha": 0})
	check("erasure done", p2, map[string]int64{"like": 1, "love": 0, "haha": 0})
	check("erasure done", p3, map[string]int64{"like": 5, "love": 0, "haha": 0})
	if _, viewer := reactionsOf(t, e, erased, p1); viewer != "" {
		t.Fatalf("the erased user still reacts %q", viewer)
	}
}

// TestEraseAfterDeleteInOpenWindow: a deleted post's pairs stay in its
// open window, hidden, until the window is sealed; an erased user's
// among them must not. The user likes and favorites posts of today's
// (open) window, the posts are deleted, the user is erased: after the
// next snapshot no file holds the id, and the window still holds the
// other likers' hidden pairs until it seals. One of the user's pairs is a
// love, so that the purge takes a pair of any kind.
func TestEraseAfterDeleteInOpenWindow(t *testing.T) {
	dir := t.TempDir()
	clk := newClock()
	opts := durableOpts(dir, clk)
	opts.MaintainInterval = -1
	opts.Reactions = []string{"like", "love"}
	e := openE(t, opts)
	var posts []engine.PostID
	for i := range 4 {
		p, err := e.CreatePost(bg, engine.UserID(100+i), 0, "")
		ok(t, err)
		posts = append(posts, p)
		if i == 1 {
			ok(t, e.ReactToPost(bg, erased, p, "love"))
		} else {
			ok(t, e.Like(bg, erased, p))
		}
		ok(t, e.Favorite(bg, erased, p))
		ok(t, e.Like(bg, 200, p))
		clk.Advance(time.Millisecond)
	}
	for _, p := range posts[:3] {
		ok(t, e.DeletePost(bg, engine.Actor{User: 1, Privileged: true}, p))
	}
	ok(t, e.EraseUser(bg, erased))
	waitErasures(t, e)
	e.mu.RLock()
	open := 0
	for _, w := range e.st.likes.Stats() {
		if w.Kind == tier.Open {
			open++
		}
	}
	e.mu.RUnlock()
	if open == 0 {
		t.Fatal("the posts' window is not open: the test needs it open")
	}
	ok(t, e.Snapshot(bg))
	ok(t, e.Close())
	if traceOf(t, dir) {
		t.Fatal("a file still holds the erased user's id")
	}
	e = openE(t, opts)
	checkNoUser(t, e, uint64(erased))
	if c, _ := e.Counts(bg, posts[3:]); c[0].Likes != 1 || c[0].Favorites != 0 {
		t.Fatalf("the post left: %+v", c[0])
	}
}
