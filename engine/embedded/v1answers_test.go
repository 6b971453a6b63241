package embedded

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/wal"
)

// v1Golden is what the engine that wrote testdata/v1log (records of
// format version 1, before typed records) answered after writing it,
// with the ids to ask about.
type v1Golden struct {
	Now      time.Time
	TTL      time.Duration
	Users    []engine.UserID
	Posts    []engine.PostID
	Groups   []engine.GroupID
	Messages []engine.MessageID
	Answers  string
	// Dump is that engine's state (state.dump) with the red-dot click
	// fields left out: a click used to keep its own time and keeps the
	// push stamp it saw now (ops.ClickRedDot), which answers the same.
	Dump string
}

var clickField = regexp.MustCompile(`click:-?[0-9]+`)

func dumpNoClicks(e *Engine) string {
	e.mu.RLock()
	defer e.mu.RUnlock()
	return clickField.ReplaceAllString(e.st.dump(), "click:_")
}

func errClass(err error) string {
	for _, c := range []struct {
		err  error
		name string
	}{{engine.ErrNotFound, "NOT_FOUND"}, {engine.ErrForbidden, "FORBIDDEN"}, {engine.ErrInvalid, "INVALID"}} {
		if errors.Is(err, c.err) {
			return c.name
		}
	}
	return "ERROR " + err.Error()
}

// v1Answers asks e everything the public API can tell about g's ids.
// Badges are read last: a badge read may record a visit.
func v1Answers(t testing.TB, e *Engine, g *v1Golden) string {
	t.Helper()
	var b strings.Builder
	say := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	res := func(what string, v any, err error) {
		if err != nil {
			say("%s: %s", what, errClass(err))
		} else {
			say("%s: %+v", what, v)
		}
	}
	infos, err := e.Posts(bg, g.Posts)
	res("posts", infos, err)
	counts, err := e.Counts(bg, g.Posts)
	res("counts", counts, err)
	uc, err := e.UserCounts(bg, g.Users)
	res("userCounts", uc, err)
	ns, err := e.Notifications(bg, 100, 0)
	res("notifications", ns, err)
	for _, u := range g.Users {
		liked, err := e.Liked(bg, u, g.Posts)
		res(fmt.Sprint("liked ", u), liked, err)
		favs, err := e.Favorited(bg, u, g.Posts)
		res(fmt.Sprint("favorited ", u), favs, err)
		fs, err := e.Followees(bg, u)
		res(fmt.Sprint("followees ", u), fs, err)
		for _, id := range g.Groups {
			grp, err := e.Group(bg, u, id)
			res(fmt.Sprint("group ", u, " ", id), grp, err)
			ms, err := e.GroupMembers(bg, u, id, 100, 0)
			res(fmt.Sprint("members ", u, " ", id), ms, err)
		}
		for _, id := range g.Messages {
			m, err := e.Message(bg, u, id)
			res(fmt.Sprint("message ", u, " ", id), m, err)
			rc, err := e.Receipts(bg, u, id, 100)
			res(fmt.Sprint("receipts ", u, " ", id), rc, err)
		}
	}
	for _, u := range g.Users {
		n, err := e.Unread(bg, u)
		res(fmt.Sprint("unread ", u), n, err)
	}
	return b.String()
}

// copyLogDir copies the log and snapshot files of data directory dir to a
// new temporary directory.
func copyLogDir(t testing.TB, dir string) string {
	t.Helper()
	cp := t.TempDir()
	files, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if f.IsDir() || strings.HasSuffix(f.Name(), ".lock") || strings.HasSuffix(f.Name(), ".txt") ||
			strings.HasSuffix(f.Name(), ".json") {
			continue // the cold tier is derived data; locks are per process
		}
		b, err := os.ReadFile(filepath.Join(dir, f.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(cp, f.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return cp
}

// answersOf opens a copy of the data directory dir at g.Now and returns
// the recovered state's dump (without clicks) and its answers.
func answersOf(t testing.TB, dir string, g *v1Golden) (dump, answers string) {
	t.Helper()
	e, err := Open(Options{Dir: copyLogDir(t, dir), Sync: wal.SyncNone, SweepInterval: -1, Logger: quiet,
		SnapshotInterval: -1, SnapshotLogBytes: -1, CursorTTL: g.TTL, Now: func() time.Time { return g.Now }})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	dump = dumpNoClicks(e)
	return dump, v1Answers(t, e, g)
}
