package wal

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
)

// BenchmarkAppend measures durable appends of 100-byte records by 1 and 64
// concurrent appenders. Each op is one record; records/s and
// fsyncs/record show what group commit buys.
func BenchmarkAppend(b *testing.B) {
	for _, mode := range []SyncMode{SyncAlways, SyncNone} {
		for _, appenders := range []int{1, 64} {
			b.Run(fmt.Sprintf("sync=%s/appenders=%d", mode, appenders), func(b *testing.B) {
				benchAppend(b, mode, appenders)
			})
		}
	}
}

func benchAppend(b *testing.B, mode SyncMode, appenders int) {
	l := mustOpen(b, b.TempDir(), Options{Sync: mode})
	defer l.Close()
	payload := make([]byte, 100)
	b.SetBytes(int64(len(payload)))
	b.ReportAllocs()
	syncs0 := l.syncs.Load()
	b.ResetTimer()
	// Goroutines of our own rather than RunParallel, so that the number of
	// appenders is exactly what the name says whatever GOMAXPROCS is.
	var left atomic.Int64
	left.Store(int64(b.N))
	var wg sync.WaitGroup
	for range appenders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for left.Add(-1) >= 0 {
				if _, err := l.Append(payload); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	secs := b.Elapsed().Seconds()
	b.ReportMetric(float64(b.N)/secs, "records/s")
	b.ReportMetric(float64(l.syncs.Load()-syncs0)/float64(b.N), "fsyncs/record")
}

// BenchmarkReplay measures reading a log back, as recovery does.
func BenchmarkReplay(b *testing.B) {
	const records = 100_000
	l := mustOpen(b, b.TempDir(), Options{Sync: SyncNone})
	defer l.Close()
	payload := make([]byte, 100)
	for range records {
		if _, err := l.AppendAsync(payload); err != nil {
			b.Fatal(err)
		}
	}
	if err := l.Wait(l.LastIndex()); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(l.Size())
	b.ReportAllocs()
	for b.Loop() {
		n := 0
		if err := l.Replay(1, func(uint64, []byte) error { n++; return nil }); err != nil || n != records {
			b.Fatalf("replayed %d, %v", n, err)
		}
	}
	b.ReportMetric(float64(records*b.N)/b.Elapsed().Seconds(), "records/s")
}
