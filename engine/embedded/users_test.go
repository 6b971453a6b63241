package embedded

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/ops"
	"github.com/tally-dev/tally/engine/snapshot"
	"github.com/tally-dev/tally/engine/snowflake"
	"github.com/tally-dev/tally/engine/wal"
)

// roundTrip writes st as a snapshot image and reads it back.
func roundTrip(t *testing.T, st *state) *state {
	t.Helper()
	var buf bytes.Buffer
	w, err := snapshot.NewWriter(&buf, 1)
	ok(t, err)
	ok(t, writeImage(w, &image{st: st, index: 1}, func() error { return nil }, nil))
	_, err = w.Finish()
	ok(t, err)
	rd, err := snapshot.NewReader(bytes.NewReader(buf.Bytes()), int64(buf.Len()), "mem")
	ok(t, err)
	back, err := readImage(rd, false, tables{})
	ok(t, err)
	return back.st
}

// TestPublicCountersCostWhatIsUsed: an author with only posts holds one
// posted entry and nothing else; a user followed and unfollowed keeps a
// zero follower count only while nothing else keeps them known; the Users
// statistic counts each user once; and a snapshot round trip gives the
// same state, which goes on to count users as the live one does.
func TestPublicCountersCostWhatIsUsed(t *testing.T) {
	st := newState(tables{})
	var tm int64
	follow := func(v, u engine.UserID, undo bool) {
		tm++
		st.apply(&followRec{recHeader: recHeader{time: tm}, Follow: ops.Follow{Viewer: v, Target: u, Undo: undo}}, nil, false)
	}
	importAuthored(st, 3, func(i int) uint64 { return uint64(i%2) + 1 }) // authors 1 (2 posts) and 2
	if st.posted.Len() != 2 || st.followers.Len() != 0 || st.userRecords() != 0 || st.nusers != 2 {
		t.Fatalf("authors only: posted %d followers %d badge records %d users %d", st.posted.Len(), st.followers.Len(), st.userRecords(), st.nusers)
	}
	follow(3, 1, false) // 3 follows author 1
	follow(3, 1, true)  // and stops: author 1 needs no follower entry
	follow(3, 4, false) // 4 has no posts
	follow(3, 4, true)  // 4 stays known by a zero follower count
	if _, ok := st.followers.Get(1); ok {
		t.Fatal("author 1 kept a zero follower count")
	}
	if n, ok := st.followers.Get(4); !ok || n != 0 {
		t.Fatalf("user 4's follower count: %d, %v", n, ok)
	}
	if st.nusers != 4 {
		t.Fatalf("users %d, want 4", st.nusers)
	}
	back := roundTrip(t, st)
	if a, b := st.dump(), back.dump(); a != b {
		t.Fatalf("round trip:\n%s", lineDiff(a, b))
	}
	// 4 now posts: the zero follower count gives way to a post count,
	// on both states alike, and 4 is not counted again.
	for _, s := range []*state{st, back} {
		s.apply(&importRec{recHeader: recHeader{time: 100}, rows: []engine.ImportRow{{Post: 1<<50 + 99, Author: 4}}}, nil, false)
		if _, ok := s.followers.Get(4); ok || s.postCount(4) != 1 || s.nusers != 4 {
			t.Fatalf("after 4 posts: followers entry %v, posts %d, users %d", ok, s.postCount(4), s.nusers)
		}
	}
	if a, b := st.dump(), back.dump(); a != b {
		t.Fatalf("after the round trip:\n%s", lineDiff(a, b))
	}
}

// TestBadgeRecordsCostWhatIsUsed: a user who only reads their badges has
// a visit record and no badge record; a user who is only bumped has a
// badge record and no visit record; a click is a click stamp alone; a badge read of a user with neither
// leaves an empty visit record (the user is known); and a snapshot round
// trip gives the same state and Users statistic.
func TestBadgeRecordsCostWhatIsUsed(t *testing.T) {
	st := newState(tables{})
	st.apply(&touchRec{recHeader: recHeader{time: 1}, viewer: 1, reset: true, cursor: 3}, nil, false)
	if _, ok := st.seens.Get(keyOf(1)); !ok || st.badges.Len() != 0 {
		t.Fatalf("reader: visit record %v, %d badge records", ok, st.badges.Len())
	}
	st.bump(2, nLikes)
	if _, ok := st.badges.Get(keyOf(2)); !ok || st.seens.Len() != 1 {
		t.Fatalf("bumped: badge record %v, %d visit records", ok, st.seens.Len())
	}
	st.applyRead(ops.ReadMark{User: 3, Kind: engine.Likes})
	if r, ok := st.seens.Get(keyOf(3)); !ok || r != (seenRec{}) || st.badges.Len() != 1 {
		t.Fatalf("a read of nothing: %+v, %v; %d badge records", r, ok, st.badges.Len())
	}
	st.applyRead(ops.ReadMark{User: 1, Kind: engine.Likes}) // 1 is known by their visit
	if _, ok := st.badges.Get(keyOf(1)); ok || st.seens.Len() != 2 {
		t.Fatalf("a read of nothing gave a reader a record (%d visit records)", st.seens.Len())
	}
	st.setClick(4, 77)
	if _, ok := st.clicks.Get(keyOf(4)); !ok || st.badges.Len() != 1 || st.seens.Len() != 2 {
		t.Fatalf("a click: stamp %v, %d badge and %d visit records", ok, st.badges.Len(), st.seens.Len())
	}
	if st.nusers != 4 || st.userRecords() != 4 {
		t.Fatalf("users %d, records %d; want 4", st.nusers, st.userRecords())
	}
	if v, _ := st.userView(1); v.cursor != 3 || v.flags != flagCursor || v.day != 0 {
		t.Fatalf("reader's record: %+v", v)
	}
	back := roundTrip(t, st)
	if a, b := st.dump(), back.dump(); a != b {
		t.Fatalf("round trip:\n%s", lineDiff(a, b))
	}
}

// userSection writes a snapshot holding one USER section of the given
// items (user, then the eight fields as writeUsers masks them) and reads
// it into a fresh state with readUsers.
func userSection(t *testing.T, items ...[9]uint64) (*state, error) {
	t.Helper()
	var buf bytes.Buffer
	w, err := snapshot.NewWriter(&buf, 1)
	ok(t, err)
	e := &enc{w: w}
	w.Begin(tagUsers)
	for _, it := range items {
		e.start()
		e.u(it[0])
		e.masked(it[1:])
		e.end()
	}
	w.End()
	_, err = w.Finish()
	ok(t, err)
	rd, err := snapshot.NewReader(bytes.NewReader(buf.Bytes()), int64(buf.Len()), "mem")
	ok(t, err)
	sr, found := rd.Section(tagUsers)
	if !found {
		t.Fatal("no USER section")
	}
	st := newState(tables{})
	return st, readUsers(sr, nil, st)
}

// TestReadUsersSplitsAndRejects: USER items land in the tables their
// fields belong to, and fields no encoder writes (unknown flag bits, a day
// that would collide with the cursor bit, a user listed twice) are
// rejected as damage.
func TestReadUsersSplitsAndRejects(t *testing.T) {
	//                 user  men com lik msg click cursor day flags
	st, err := userSection(t, [9]uint64{1, 0, 0, 5, 0, 0, 0, 0, 0},
		[9]uint64{2, 0, 0, 0, 0, 0, 9, 20000, flagCursor},
		[9]uint64{3, 0, 0, 0, 0, 123, 0, 0, 0},
		[9]uint64{4},
		[9]uint64{5, 1 << 33, 0, 0, 0, 7, 9, 20000, flagCursor})
	ok(t, err)
	if st.badges.Len() != 2 || st.seens.Len() != 3 || st.clicks.Len() != 2 || st.wide.Len() != 1 {
		t.Fatalf("badges %d seens %d clicks %d wide %d", st.badges.Len(), st.seens.Len(), st.clicks.Len(), st.wide.Len())
	}
	if v, _ := st.userView(5); v.cursor != 9 || v.day != 20000 || v.flags != flagCursor || v.click != 7 || st.userFields(5, &v)[0] != 1<<33 {
		t.Fatalf("user 5: %+v", v)
	}
	var ce *snapshot.CorruptError
	for name, it := range map[string][9]uint64{
		"flag bits":  {1, 0, 0, 0, 0, 0, 0, 0, 2},
		"day bit 31": {1, 0, 0, 0, 0, 0, 0, seenCursor, 0},
	} {
		if _, err := userSection(t, it); !errors.As(err, &ce) {
			t.Errorf("%s: %v, want a CorruptError", name, err)
		}
	}
	if _, err := userSection(t, [9]uint64{1, 0, 0, 1}, [9]uint64{1, 0, 0, 0, 0, 0, 0, 3}); !errors.As(err, &ce) {
		t.Errorf("a user twice: %v, want a CorruptError", err)
	}
}

// TestUsersStatisticFollowsKnown: Stats.Users, kept up as users enter
// the tables one way or another (a first post, a first follower, a first
// followee, a badge), equals the number of users known() finds, whatever
// order they arrive in. addPosts and addFollowers count a user from what
// usercounts.Table.Add says it created, not from a lookup of their own.
func TestUsersStatisticFollowsKnown(t *testing.T) {
	e := open(t, Options{})
	rng := rand.New(rand.NewPCG(7, 13))
	const users = 40
	var posts []engine.PostID
	for step := range 3000 {
		viewer := engine.UserID(1 + rng.IntN(users))
		target := engine.UserID(1 + rng.IntN(users))
		var err error
		switch op := rng.IntN(10); {
		case op < 2:
			var p engine.PostID
			if p, err = e.CreatePost(bg, viewer, 0, ""); err == nil {
				posts = append(posts, p)
			}
		case op < 5:
			err = e.Follow(bg, viewer, target)
		case op < 8:
			err = e.Unfollow(bg, viewer, target)
		case len(posts) > 0:
			err = e.Like(bg, viewer, posts[rng.IntN(len(posts))])
		}
		if err != nil && !errors.Is(err, engine.ErrInvalid) && !errors.Is(err, engine.ErrNotFound) {
			t.Fatalf("step %d: %v", step, err)
		}
		e.mu.RLock()
		known := int64(0)
		for u := uint64(1); u <= users; u++ {
			if e.st.known(u) {
				known++
			}
		}
		e.mu.RUnlock()
		if got := e.Stats().Users; got != known {
			t.Fatalf("step %d: Stats.Users %d, known() finds %d", step, got, known)
		}
	}
}

// importAuthors imports n posts, one a millisecond from a day ago, each
// by a new author: users 1,000,000, 1,000,007, ... (authorOf).
func importAuthors(t *testing.T, e *Engine, n int) {
	t.Helper()
	t0 := time.Now().Add(-24 * time.Hour).UnixMilli()
	rows := make([]engine.ImportRow, 0, MaxImportBatch)
	for i := range n {
		rows = append(rows, engine.ImportRow{Post: engine.PostID(snowflake.Make(t0+int64(i), 1, 0)), Author: authorOf(i)})
		if len(rows) == MaxImportBatch || i == n-1 {
			ok(t, e.Import(bg, rows))
			rows = rows[:0]
		}
	}
}

func authorOf(i int) engine.UserID { return engine.UserID(1_000_000 + 7*i) }

// TestImportFoldsAuthorsAsItGoes: an import brings new authors far faster
// than the maintenance interval folds them; Import folds the authors'
// post counts once a quarter of them wait in the overlay, so that after
// an import most of them take the packed form's bytes, not the
// overlay's. With maintenance off it folds nothing.
func TestImportFoldsAuthorsAsItGoes(t *testing.T) {
	const authors = 300_000
	for _, maintained := range []bool{true, false} {
		opts := Options{MaintainInterval: time.Hour} // no tick during the test
		if !maintained {
			opts.MaintainInterval = -1
		}
		e := open(t, opts)
		importAuthors(t, e, authors)
		e.mu.RLock()
		overlay, packed := e.st.posted.Unfolded()
		perAuthor := float64(e.st.posted.MemoryBytes()) / authors
		e.mu.RUnlock()
		t.Logf("maintained %v: %d waiting, %d packed, %.1f B per author", maintained, overlay, packed, perAuthor)
		switch {
		case maintained && (overlay+packed != authors || overlay > max(importFoldMin, packed/4)+MaxImportBatch):
			t.Errorf("after the import %d authors wait in the overlay and %d are packed; want at most a quarter of the packed ones waiting", overlay, packed)
		case !maintained && overlay != authors:
			t.Errorf("with maintenance off the import folded anyway: %d of %d authors wait", overlay, authors)
		}
	}
}

// TestReplayFoldsAuthorsAsItGoes: replaying an import's log (at start,
// and when a snapshot is rebuilt) folds the authors' post counts as
// Import does, so that the overlay never holds every author of the log.
func TestReplayFoldsAuthorsAsItGoes(t *testing.T) {
	const authors = 300_000
	dir := t.TempDir()
	opts := Options{Dir: dir, Sync: wal.SyncNone, MaintainInterval: -1, SnapshotInterval: -1, SnapshotLogBytes: -1}
	e := open(t, opts)
	importAuthors(t, e, authors)
	if overlay, _ := e.st.posted.Unfolded(); overlay != authors {
		t.Fatalf("with maintenance off the import folded: %d of %d authors wait", overlay, authors)
	}
	ok(t, e.Close())
	e = open(t, opts)
	overlay, packed := e.st.posted.Unfolded()
	if overlay+packed != authors || overlay > max(importFoldMin, packed/4)+MaxImportBatch {
		t.Fatalf("after replay %d authors wait in the overlay and %d are packed; want at most a quarter of the packed ones waiting", overlay, packed)
	}
}

// TestImportFoldsBesideMaintenanceAndReaders: Import's own folds run
// beside the maintenance loop's and beside readers of the counts; every
// author's count is exact throughout (go test -race checks the rest).
func TestImportFoldsBesideMaintenanceAndReaders(t *testing.T) {
	const authors = 150_000
	e := open(t, Options{MaintainInterval: 2 * time.Millisecond})
	stop := make(chan struct{})
	readerDone := make(chan error, 1)
	go func() {
		probe := []engine.UserID{authorOf(0), authorOf(1), authorOf(authors - 1)}
		for {
			select {
			case <-stop:
				readerDone <- nil
				return
			default:
			}
			uc, err := e.UserCounts(bg, probe)
			if err != nil {
				readerDone <- err
				return
			}
			for i, c := range uc {
				if c.Posts > 1 {
					readerDone <- fmt.Errorf("user %d has %d posts, want at most 1", probe[i], c.Posts)
					return
				}
			}
		}
	}()
	importAuthors(t, e, authors)
	close(stop)
	ok(t, <-readerDone)
	ids := make([]engine.UserID, 0, authors)
	for i := range authors {
		ids = append(ids, authorOf(i))
	}
	for start := 0; start < authors; start += 100 {
		uc, err := e.UserCounts(bg, ids[start:start+100])
		ok(t, err)
		for i, c := range uc {
			if c.Posts != 1 {
				t.Fatalf("user %d has %d posts, want 1", ids[start+i], c.Posts)
			}
		}
	}
}

// lineDiff shows the first lines where want and got differ.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	shown := 0
	for i := 0; i < max(len(w), len(g)) && shown < 10; i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			fmt.Fprintf(&b, "line %d\n  want %s\n  got  %s\n", i+1, wl, gl)
			shown++
		}
	}
	return b.String()
}
