package embedded

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/wal"
)

func benchPosts(b *testing.B, e *Engine, n int) []engine.PostID {
	ps := make([]engine.PostID, n)
	for i := range ps {
		p, err := e.CreatePost(bg, engine.UserID(i%1000+1), 0, "")
		if err != nil {
			b.Fatal(err)
		}
		ps[i] = p
	}
	return ps
}

// BenchmarkLike measures the write path in memory: validation, apply and
// the author's badge bump, one new like per iteration.
func BenchmarkLike(b *testing.B) {
	e, _ := Open(Options{SweepInterval: -1})
	defer e.Close()
	ps := benchPosts(b, e, 1000)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if err := e.Like(bg, engine.UserID(10000+i), ps[i%len(ps)]); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLikeLogged adds record encoding and the log (no fsync).
func BenchmarkLikeLogged(b *testing.B) {
	e, err := Open(Options{Dir: b.TempDir(), Sync: wal.SyncNone, SweepInterval: -1, Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	ps := benchPosts(b, e, 1000)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			i++
			if err := e.Like(bg, engine.UserID(10000+i), ps[i%len(ps)]); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkFeedPage reads a page of 50 posts' counts and like flags, as
// the GraphQL loaders do.
func BenchmarkFeedPage(b *testing.B) {
	e, _ := Open(Options{SweepInterval: -1})
	defer e.Close()
	ps := benchPosts(b, e, 50)
	for i, p := range ps {
		if i%3 == 0 {
			e.Like(bg, 7, p)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := e.Counts(bg, ps); err != nil {
				b.Fatal(err)
			}
			if _, err := e.Liked(bg, 7, ps); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkUnread is a badge poll by a user with 100 followees.
func BenchmarkUnread(b *testing.B) {
	e, _ := Open(Options{SweepInterval: -1})
	defer e.Close()
	for u := engine.UserID(2); u < 102; u++ {
		e.Follow(bg, 1, u)
	}
	e.Unread(bg, 1)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := e.Unread(bg, 1); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkDurableWrites measures acknowledged mutations per second with
// fsync=always through the public API, for 1 and 64 concurrent clients,
// aimed at 1000 posts uniformly and at one hot post, measured side by side
// in each iteration: hot/uniform near 1 means a hot post serialises
// nothing beyond what every write shares (the state lock and the log's
// group commit). Likes come from distinct users, so each is a real change.
//
// The sync=none variants take the disk out, leaving the CPU path (state
// lock, apply, encoding, group commit hand-off) as the limit.
func BenchmarkDurableWrites(b *testing.B) {
	for _, mode := range []wal.SyncMode{wal.SyncAlways, wal.SyncNone} {
		for _, clients := range []int{1, 64} {
			for _, kind := range []string{"like", "views"} {
				b.Run(fmt.Sprintf("sync=%s/clients=%d/%s", mode, clients, kind), func(b *testing.B) {
					benchDurable(b, mode, clients, kind)
				})
			}
		}
	}
}

func benchDurable(b *testing.B, mode wal.SyncMode, clients int, kind string) {
	e, err := Open(Options{Dir: b.TempDir(), Sync: mode, SweepInterval: -1, Logger: quiet,
		SnapshotInterval: -1, SnapshotLogBytes: -1})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	posts := benchPosts(b, e, 1000)
	perClient := max(6400/clients, 100)
	var viewer atomic.Uint64
	viewer.Store(1 << 40)
	run := func(hot bool) time.Duration {
		start := time.Now()
		var wg sync.WaitGroup
		for c := range clients {
			wg.Go(func() {
				for i := range perClient {
					p := posts[0]
					if !hot {
						p = posts[(c*perClient+i)%len(posts)]
					}
					var err error
					if kind == "like" {
						err = e.Like(bg, engine.UserID(viewer.Add(1)), p)
					} else {
						err = e.RecordViews(bg, []engine.PostID{p})
					}
					if err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		return time.Since(start)
	}
	var uni, hot time.Duration
	for b.Loop() {
		uni += run(false)
		hot += run(true)
	}
	ops := float64(b.N * clients * perClient)
	b.ReportMetric(ops/uni.Seconds(), "uniform_ops/s")
	b.ReportMetric(ops/hot.Seconds(), "hot_ops/s")
	b.ReportMetric(uni.Seconds()/hot.Seconds(), "hot/uniform")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkGroupPage: reading a group (count and first page) and a page
// of 100 members from a cursor near the end cost the same in a group of
// 1,000 and of 100,000 members (compare the sub-benchmarks' ns/op).
func BenchmarkGroupPage(b *testing.B) {
	for _, n := range []int{1_000, 100_000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			e := openE(b, Options{})
			g, err := e.CreateGroup(bg, 1, nil)
			if err != nil {
				b.Fatal(err)
			}
			for i := 0; i < n; i += engine.MaxIDsPerCall {
				batch := make([]engine.UserID, 0, engine.MaxIDsPerCall)
				for j := i; j < i+engine.MaxIDsPerCall && j < n; j++ {
					batch = append(batch, engine.UserID(10+j))
				}
				if err := e.AddGroupMembers(bg, 1, g, batch); err != nil {
					b.Fatal(err)
				}
			}
			cursor := engine.UserID(10 + n - 200)
			b.ResetTimer()
			for range b.N {
				grp, err := e.Group(bg, 1, g)
				if err != nil || grp.MemberCount != n+1 {
					b.Fatal(err, grp.MemberCount)
				}
				page, err := e.GroupMembers(bg, 1, g, engine.MaxPageSize, cursor)
				if err != nil || len(page) != engine.MaxPageSize {
					b.Fatal(err, len(page))
				}
			}
		})
	}
}
