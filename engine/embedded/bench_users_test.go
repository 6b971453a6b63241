package embedded

import (
	"runtime"
	"testing"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/ops"
)

// usersPerKind is how many users BenchmarkUserMemory loads of each kind:
// the ~735k distinct authors of the 10M-post import (bench/datagen), so
// that the tables' load is the one that import leaves.
const usersPerKind = 735_000

// userKinds builds the users of one kind into st: load applies n of them;
// base applies what those users' records sit beside but do not own (an
// author's posts, written by one author), so that the difference is what
// the users themselves cost.
var userKinds = []struct {
	name       string
	load, base func(st *state, n int)
}{
	// An author with only posts: one imported post each, the common
	// case of the import with authors.
	{"author", func(st *state, n int) { importAuthored(st, n, func(i int) uint64 { return uint64(i) + 1 }) },
		func(st *state, n int) { importAuthored(st, n, func(int) uint64 { return 1 }) }},
	// A user who only reads their badges: the first read records a touch
	// (today's activity and the system cursor).
	{"reader", func(st *state, n int) {
		for i := range n {
			st.apply(&touchRec{recHeader: recHeader{time: int64(i) + 1}, viewer: engine.UserID(i + 1), reset: true, cursor: 7}, nil, false)
		}
	}, nil},
	// A user who follows one account (the same one for all).
	{"follower", func(st *state, n int) {
		for i := range n {
			st.apply(&followRec{recHeader: recHeader{time: int64(i) + 1},
				Follow: ops.Follow{Viewer: engine.UserID(i + 2), Target: 1}}, nil, false)
		}
	}, nil},
	// An author with one post and an unread like on it (the like itself
	// is the liker's, in the like set, and not counted).
	{"liked-author", func(st *state, n int) {
		importAuthored(st, n, func(i int) uint64 { return uint64(i) + 1 })
		for i := range n {
			st.bump(uint64(i)+1, nLikes)
		}
	}, func(st *state, n int) { importAuthored(st, n, func(int) uint64 { return 1 }) }},
	// An author with one post and one follower: one fan follows them all
	// (so the fan's followee list, engine/follows, is counted too).
	{"followed-author", func(st *state, n int) {
		importAuthored(st, n, func(i int) uint64 { return uint64(i) + 2 })
		for i := range n {
			st.apply(&followRec{recHeader: recHeader{time: int64(n + i + 1)},
				Follow: ops.Follow{Viewer: 1, Target: engine.UserID(i + 2)}}, nil, false)
		}
	}, func(st *state, n int) { importAuthored(st, n, func(int) uint64 { return 2 }) }},
}

// importAuthored imports n posts, the i-th by author(i), in import
// records of MaxImportBatch rows.
func importAuthored(st *state, n int, author func(i int) uint64) {
	rows := make([]engine.ImportRow, 0, MaxImportBatch)
	var t int64
	flush := func() {
		t++
		st.apply(&importRec{recHeader: recHeader{time: t}, rows: rows}, nil, false)
		rows = rows[:0]
	}
	for i := range n {
		rows = append(rows, engine.ImportRow{Post: engine.PostID(1<<50 + uint64(i)*2654435761), Author: engine.UserID(author(i))})
		if len(rows) == cap(rows) {
			flush()
		}
	}
	if len(rows) > 0 {
		flush()
	}
}

// folded folds the per-user counts' overlays into their packed form, as
// the maintenance loop does within a tick of the writes.
func folded(st *state) {
	st.posted.Compact()
	st.followers.Compact()
}

// liveHeap returns the live heap after a full collection.
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// BenchmarkUserMemory reports the live heap bytes one user of each kind
// costs (B/user): the heap after loading usersPerKind users of the kind
// into a fresh state, less the heap after loading the same state without
// them (base). Run it with -benchtime=1x: each iteration builds the states
// again and reports the same figure.
func BenchmarkUserMemory(b *testing.B) {
	for _, k := range userKinds {
		b.Run(k.name, func(b *testing.B) {
			for b.Loop() {
				before := liveHeap()
				base := newState(tables{})
				if k.base != nil {
					k.base(base, usersPerKind)
				}
				folded(base)
				mid := liveHeap()
				st := newState(tables{})
				k.load(st, usersPerKind)
				folded(st)
				after := liveHeap()
				perUser := (float64(after-mid) - float64(mid-before)) / usersPerKind
				b.ReportMetric(perUser, "B/user")
				b.ReportMetric(float64(st.nusers), "users")
				runtime.KeepAlive(base)
				runtime.KeepAlive(st)
			}
		})
	}
}
