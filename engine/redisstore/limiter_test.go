package redisstore_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tally-dev/tally/engine/redisstore"
	"github.com/tally-dev/tally/engine/redisstore/redistest"
)

// The GCRA limiter takes n tokens or none, says when n will be there,
// keeps users apart, and never lets racing takers spend more than the
// burst between them.
func TestLimiterAllOrNothing(t *testing.T) {
	addr, stop := redistest.StartSingle(t)
	defer stop()
	s := open(t, redisstore.Options{Addrs: []string{addr}, KeyPrefix: prefix()})
	if _, err := s.NewLimiter(0, 10); err == nil {
		t.Fatal("a rate of 0 was accepted")
	}
	if _, err := s.NewLimiter(1, 0); err == nil {
		t.Fatal("a burst of 0 was accepted")
	}
	l, err := s.NewLimiter(0.01, 10) // one token per 100 s: nothing refills during the test
	must(t, err)

	take := func(user uint64, n int) (bool, time.Duration) {
		t.Helper()
		ok, wait, err := l.Take(bg, user, n)
		must(t, err)
		return ok, wait
	}
	if ok, _ := take(1, 7); !ok {
		t.Fatal("7 of a full burst of 10 refused")
	}
	ok, wait := take(1, 5)
	if ok {
		t.Fatal("5 taken with 3 left")
	}
	// 2 tokens missing at one per 100 s.
	if wait < 190*time.Second || wait > 201*time.Second {
		t.Fatalf("retry after %v, want about 200 s", wait)
	}
	if ok, _ := take(1, 3); !ok {
		t.Fatal("the refused take spent tokens: 3 left were not there")
	}
	if ok, _ := take(1, 1); ok {
		t.Fatal("an 11th token of a burst of 10")
	}
	if ok, _ := take(2, 10); !ok {
		t.Fatal("user 2's budget was spent by user 1")
	}
	if _, _, err := l.Take(bg, 3, 11); err == nil {
		t.Fatal("11 tokens of a burst of 10 asked without an error")
	}

	// 20 racing takers of 1 token each, on a fresh user: exactly 10 win.
	var wins atomic.Int64
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			if ok, _, err := l.Take(bg, 4, 1); err == nil && ok {
				wins.Add(1)
			}
		})
	}
	wg.Wait()
	if wins.Load() != 10 {
		t.Fatalf("%d racing takers won, want the burst of 10", wins.Load())
	}
}
