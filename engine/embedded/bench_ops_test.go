package embedded

import (
	"testing"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/wal"
)

// BenchmarkComment measures a comment with two mentions in memory: the
// author's and the mentioned users' badges and the post's count.
func BenchmarkComment(b *testing.B) {
	e, _ := Open(Options{SweepInterval: -1})
	defer e.Close()
	ps := benchPosts(b, e, 1000)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		v := engine.UserID(10000 + i)
		if err := e.Comment(bg, v, ps[i%len(ps)], []engine.UserID{v + 1, v + 2}, ""); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkViews measures a page of 20 views in memory.
func BenchmarkViews(b *testing.B) {
	e, _ := Open(Options{SweepInterval: -1})
	defer e.Close()
	ps := benchPosts(b, e, 1000)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		j := i % (len(ps) - 20)
		if err := e.RecordViews(bg, ps[j:j+20]); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSendMessage measures a message to a group of 50 in memory.
func BenchmarkSendMessage(b *testing.B) {
	e, _ := Open(Options{SweepInterval: -1})
	defer e.Close()
	members := make([]engine.UserID, 49)
	for i := range members {
		members[i] = engine.UserID(i + 2)
	}
	g, err := e.CreateGroup(bg, 1, members)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := e.SendMessage(bg, 1, g, "hello", []engine.UserID{2}, ""); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReplay measures Open replaying a log of 200,000 mixed records
// (likes, comments, views, follows, badge reads), no snapshot.
func BenchmarkReplay(b *testing.B) {
	dir := b.TempDir()
	opts := Options{Dir: dir, Sync: wal.SyncNone, SweepInterval: -1, Logger: quiet,
		SnapshotInterval: -1, SnapshotLogBytes: -1}
	e, err := Open(opts)
	if err != nil {
		b.Fatal(err)
	}
	ps := benchPosts(b, e, 1000)
	for i := range 200_000 {
		v := engine.UserID(10000 + i)
		p := ps[i%len(ps)]
		switch i % 5 {
		case 0, 1:
			err = e.Like(bg, v, p)
		case 2:
			err = e.Comment(bg, v, p, []engine.UserID{v + 1}, "")
		case 3:
			err = e.RecordViews(bg, []engine.PostID{p, ps[(i+1)%len(ps)]})
		case 4:
			err = e.Follow(bg, v, engine.UserID(i%1000+1))
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	if err := e.Close(); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		e, err := Open(opts)
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		e.Close()
		b.StartTimer()
	}
}
