package embedded

import (
	"testing"

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
