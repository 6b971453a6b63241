package embedded

import (
	"syscall"
	"testing"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/wal"
)

// BenchmarkComment measures a comment with two mentions in memory: the
// author's and the mentioned users' badges and the post's count.
func BenchmarkComment(b *testing.B) {
	e := memEngine(b)
	ps := benchPosts(b, e, 1000)
	defer startCPU(b)()
	for i := range b.N {
		v := engine.UserID(10000 + i)
		if err := e.Comment(bg, v, ps[i%len(ps)], 0, []engine.UserID{v + 1, v + 2}, ""); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkViews measures a page of 20 views in memory.
func BenchmarkViews(b *testing.B) {
	e := memEngine(b)
	ps := benchPosts(b, e, 1000)
	defer startCPU(b)()
	for i := range b.N {
		j := i % (len(ps) - 20)
		if err := e.RecordViews(bg, ps[j:j+20]); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSendMessage measures a message to a group of 50 in memory.
func BenchmarkSendMessage(b *testing.B) {
	e := memEngine(b)
	members := make([]engine.UserID, 49)
	for i := range members {
		members[i] = engine.UserID(i + 2)
	}
	g, err := e.CreateGroup(bg, 1, members)
	if err != nil {
		b.Fatal(err)
	}
	defer startCPU(b)()
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
	writeMixed(b, e, ps, 200_000)
	if err := e.Close(); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu := cpuTime()
	var closing int64
	for b.Loop() {
		e, err := Open(opts)
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		c := cpuTime()
		e.Close()
		closing += cpuTime() - c
		b.StartTimer()
	}
	reportCPU(b, cpu+closing)
}

// cpuTime is the process's user and system CPU time so far: on a shared
// machine it varies less with other load than the wall time does.
func cpuTime() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// reportCPU reports the CPU time per iteration since start.
func reportCPU(b *testing.B, start int64) {
	b.ReportMetric(float64(cpuTime()-start)/float64(b.N), "cpu-ns/op")
}

// BenchmarkLikeCPU is BenchmarkLike reporting CPU time too.
func BenchmarkLikeCPU(b *testing.B) {
	e := memEngine(b)
	ps := benchPosts(b, e, 1000)
	defer startCPU(b)()
	for i := range b.N {
		if err := e.Like(bg, engine.UserID(10000+i), ps[i%len(ps)]); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkApplyRecords replays 100,000 mixed records (likes, comments,
// views, follows) into a fresh in-memory state per iteration: decoding
// and apply, without the log's I/O.
func BenchmarkApplyRecords(b *testing.B) {
	e := memEngine(b)
	var recs [][]byte
	e.tap = func(rec []byte) { recs = append(recs, append([]byte(nil), rec...)) }
	ps := benchPosts(b, e, 1000)
	writeMixed(b, e, ps, 100_000)
	defer startCPU(b)()
	for range b.N {
		im := newImage(tables{})
		for i, rec := range recs {
			if err := im.applyRecord(uint64(i+1), rec); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// writeMixed commits n mixed operations on ps: likes, comments, views and
// follows, 2:1:1:1.
func writeMixed(b *testing.B, e *Engine, ps []engine.PostID, n int) {
	for i := range n {
		v := engine.UserID(10000 + i)
		p := ps[i%len(ps)]
		var err error
		switch i % 5 {
		case 0, 1:
			err = e.Like(bg, v, p)
		case 2:
			err = e.Comment(bg, v, p, 0, []engine.UserID{v + 1}, "")
		case 3:
			err = e.RecordViews(bg, []engine.PostID{p, ps[(i+1)%len(ps)]})
		case 4:
			err = e.Follow(bg, v, engine.UserID(i%1000+1))
		}
		if err != nil {
			b.Fatal(err)
		}
	}
}

// memEngine opens an in-memory engine for a benchmark, closed when it ends.
func memEngine(b *testing.B) *Engine {
	e, err := Open(Options{SweepInterval: -1})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { e.Close() })
	return e
}

// startCPU starts the timed part of a benchmark; the function it returns
// reports the CPU time per op.
func startCPU(b *testing.B) func() {
	b.ReportAllocs()
	b.ResetTimer()
	cpu := cpuTime()
	return func() { reportCPU(b, cpu) }
}
