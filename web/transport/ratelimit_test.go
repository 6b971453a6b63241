package transport

import (
	"math/rand/v2"
	"testing"
	"time"

	"golang.org/x/time/rate"
)

// The GCRA buckets decide as x/time/rate's token bucket does, which is
// the model here: for random spends, debts and checks of a few keys at
// random times, the same answers, and retry waits within a microsecond
// (the model counts tokens in floats, the buckets time in nanoseconds).
func TestBucketsMatchTokenBucket(t *testing.T) {
	for _, tc := range []struct {
		perSecond float64
		burst     int
	}{{50, 100}, {0.05, 10}, {3, 7}, {10000, 50000}, {1, 1}} {
		rng := rand.New(rand.NewPCG(uint64(tc.burst), 1))
		var now int64
		epoch := time.Unix(1_700_000_000, 0)
		b := newBucketsClock[int](tc.perSecond, tc.burst, func() int64 { return now })
		model := map[int]*rate.Limiter{}
		limiter := func(k int) *rate.Limiter {
			if model[k] == nil {
				model[k] = rate.NewLimiter(rate.Limit(tc.perSecond), tc.burst)
			}
			return model[k]
		}
		// A step is a few tenths of a token on average, so buckets empty,
		// refill and go into debt.
		step := float64(time.Second) / tc.perSecond
		near := func(got, want time.Duration) bool { return (got - want).Abs() <= time.Microsecond }
		for i := range 20000 {
			now += int64(rng.Float64() * step * 0.6)
			at := epoch.Add(time.Duration(now))
			k := rng.IntN(3)
			switch op := rng.IntN(10); {
			case op < 6:
				n := 1 + rng.IntN(tc.burst)
				if rng.IntN(20) == 0 {
					n = tc.burst + 1
				}
				ok, wait, err := b.take(k, n)
				r := limiter(k).ReserveN(at, n)
				wantOK, wantWait := r.OK(), time.Duration(0)
				if wantOK {
					if d := r.DelayFrom(at); d > 0 {
						r.CancelAt(at)
						wantOK, wantWait = false, d
					}
				}
				if (err != nil) != !r.OK() || ok != wantOK || !near(wait, wantWait) {
					t.Fatalf("rate %v burst %d, op %d: take(%d, %d) = %v, %v, %v; the token bucket says %v, %v (ok %v)",
						tc.perSecond, tc.burst, i, k, n, ok, wait, err, wantOK, wantWait, r.OK())
				}
			case op < 8:
				n := 1 + rng.IntN(2*tc.burst)
				b.owe(k, n)
				limiter(k).ReserveN(at, min(n, tc.burst))
			default:
				empty, wait := b.empty(k)
				wantEmpty, wantWait := false, time.Duration(0)
				if lim := model[k]; lim != nil && lim.TokensAt(at) < 1 {
					r := lim.ReserveN(at, 1)
					wantEmpty, wantWait = true, r.DelayFrom(at)
					r.CancelAt(at)
				}
				if empty != wantEmpty || !near(wait, wantWait) {
					t.Fatalf("rate %v burst %d, op %d: empty(%d) = %v, %v; the token bucket says %v, %v",
						tc.perSecond, tc.burst, i, k, empty, wait, wantEmpty, wantWait)
				}
			}
		}
	}
}

// A key's state is dropped once its bucket is full again, and the map is
// rebuilt small once a crowd of keys has gone: memory follows the keys
// active in the last sweep interval.
func TestBucketsForgetFullKeys(t *testing.T) {
	var now int64
	b := newBucketsClock[uint64](1, 10, func() int64 { return now })
	for k := range uint64(10000) {
		if ok, _, _ := b.take(k, 1); !ok {
			t.Fatalf("first spend of %d refused", k)
		}
	}
	now = sweepEvery - int64(5*time.Second) // the crowd's buckets are full again
	b.take(1<<40, 10)                       // this one is empty for ten seconds
	now = sweepEvery + 1
	if ok, _, _ := b.take(1<<41, 1); !ok {
		t.Fatal("a new key's spend refused")
	}
	if got := len(b.full); got != 2 {
		t.Fatalf("%d keys kept after the sweep; want the 2 spent since", got)
	}
	if b.held != 1 {
		t.Fatalf("the map was not rebuilt for the keys left (held %d)", b.held)
	}
}
