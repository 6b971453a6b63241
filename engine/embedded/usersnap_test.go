package embedded

import (
	"context"
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/wal"
)

// userSnapUsers are the users testdata/usersnap's answers are read for:
// authors (one with a post count past 2^32), readers, followers and
// followed users, a user followed and then unfollowed, a user with unread
// likes past 2^32, and users the snapshot does not know.
var userSnapUsers = []engine.UserID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 20, 21, 30, 31, 40, 41, 99, 1000}

// userSnapNow is the clock testdata/usersnap's answers are read at.
var userSnapNow = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// userSnapAnswers is what an engine opened on a data directory answers
// about userSnapUsers (Unread reads may record touches: the directory is
// a copy).
type userSnapAnswers struct {
	Users  int64
	Counts []engine.UserCounts
	Unread []engine.Unread
	// UsersAfter is the Users statistic after the reads' touches.
	UsersAfter int64
}

func userSnapAnswersOf(t testing.TB, dir string) userSnapAnswers {
	t.Helper()
	e, err := Open(Options{Dir: dir, Sync: wal.SyncNone, SweepInterval: -1, Logger: quiet,
		SnapshotInterval: -1, SnapshotLogBytes: -1, CursorTTL: 30 * 24 * time.Hour,
		Now: func() time.Time { return userSnapNow }})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	var a userSnapAnswers
	a.Users = e.Stats().Users
	if a.Counts, err = e.UserCounts(context.Background(), userSnapUsers); err != nil {
		t.Fatal(err)
	}
	for _, u := range userSnapUsers {
		un, err := e.Unread(context.Background(), u)
		if err != nil {
			t.Fatal(err)
		}
		a.Unread = append(a.Unread, un)
	}
	a.UsersAfter = e.Stats().Users
	return a
}

// TestUserSnapshotLoads opens testdata/usersnap, a data directory holding
// only a snapshot written by the engine before per-user counts were
// packed (its USER and PROF sections from one badge-record table and one
// profile table; the generator is testdata/usersnap/gen_usersnap_test.go.txt),
// and checks that it answers as that engine did (golden.json).
func TestUserSnapshotLoads(t *testing.T) {
	b, err := os.ReadFile("testdata/usersnap/golden.json")
	ok(t, err)
	var want userSnapAnswers
	ok(t, json.Unmarshal(b, &want))
	got := userSnapAnswersOf(t, copyLogDir(t, "testdata/usersnap"))
	gb, _ := json.MarshalIndent(got, "", " ")
	wb, _ := json.MarshalIndent(want, "", " ")
	if string(gb) != string(wb) {
		t.Fatalf("answers differ:\n%s", lineDiff(string(wb), string(gb)))
	}
}
