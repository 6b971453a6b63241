package embedded

import (
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/snowflake"
	"github.com/tally-dev/tally/engine/tier"
)

// TestEraseCost erases a user with many likes from an engine whose like
// set also holds other users' likes, spread over a year of day windows
// (sealed, the older ones cold), and reports what the erasure costs: its
// total time and steps, and the latency of a 50-post read and of a like
// by another user while it runs, beside the same before it. Every read
// during the erasure must answer as after it (likes of the erased user
// never counted). Sizes: TALLY_ERASE_LIKES (the user's likes; default
// 20,000) and TALLY_ERASE_OTHERS (other users' likes; default 100,000).
// The figures are in docs/durability.md.
func TestEraseCost(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a large like set")
	}
	envInt := func(name string, def int) int {
		if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
			return v
		}
		return def
	}
	mine, others := envInt("TALLY_ERASE_LIKES", 20_000), envInt("TALLY_ERASE_OTHERS", 100_000)
	clk := newClock()
	opts := durableOpts(t.TempDir(), clk)
	opts.Tables = tier.Options{OpenAge: 24 * time.Hour, ColdAge: 90 * 24 * time.Hour}
	opts.MaintainInterval = -1 // the test maintains
	e := openE(t, opts)

	// Posts over a year, one row per post: as many as the erased user likes.
	rng := rand.New(rand.NewPCG(7, 8))
	posts := make([]engine.PostID, mine)
	rows := make([]engine.ImportRow, 0, 5000)
	for i := range posts {
		at := clk.Now().Add(-time.Duration(rng.Int64N(int64(365 * 24 * time.Hour))))
		posts[i] = engine.PostID(snowflake.Make(at.UnixMilli(), 1, uint64(i)))
		rows = append(rows, engine.ImportRow{Post: posts[i], Author: engine.UserID(1_000 + i%5_000)})
		if len(rows) == cap(rows) || i == len(posts)-1 {
			ok(t, e.Import(bg, rows))
			rows = rows[:0]
		}
	}
	for _, p := range posts {
		ok(t, e.Like(bg, erased, p))
	}
	for i := range others {
		ok(t, e.Like(bg, engine.UserID(10_000+i), posts[rng.IntN(len(posts))]))
	}
	e.maintain() // seal and cool the windows: the scan reads blocks and cold files
	page := posts[:50]
	want, err := e.Counts(bg, page)
	ok(t, err)
	for i := range want {
		want[i].Likes-- // the erased user liked every post
	}

	// time runs fn n times, spaced, and returns the latencies sorted.
	sample := func(fn func(), stop func() bool) []time.Duration {
		var lat []time.Duration
		for !stop() {
			start := time.Now()
			fn()
			lat = append(lat, time.Since(start))
			time.Sleep(200 * time.Microsecond)
		}
		slices.Sort(lat)
		return lat
	}
	pct := func(lat []time.Duration, p float64) time.Duration {
		if len(lat) == 0 {
			return 0
		}
		return lat[min(len(lat)-1, int(float64(len(lat))*p))]
	}
	var liker atomic.Int64
	liker.Store(1 << 40)
	read := func() {
		got, err := e.Counts(bg, page)
		ok(t, err)
		_ = got
	}
	like := func() { ok(t, e.Like(bg, engine.UserID(liker.Add(1)), posts[len(posts)-1])) }
	n := 0
	beforeReads := sample(read, func() bool { n++; return n > 2000 })
	n = 0
	beforeLikes := sample(like, func() bool { n++; return n > 2000 })

	var steps atomic.Int64
	setStepGate(e, func() { steps.Add(1) })
	start := time.Now()
	ok(t, e.EraseUser(bg, erased))
	done := func() bool { return e.Stats().Erasures == 0 }
	var wg sync.WaitGroup
	var duringLikes []time.Duration
	wg.Add(1)
	go func() { defer wg.Done(); duringLikes = sample(like, done) }()
	var wrong int
	duringReads := sample(func() {
		got, err := e.Counts(bg, page)
		ok(t, err)
		for i := range got {
			// Likes by others keep landing on the last post only.
			if i != len(got)-1 && got[i] != want[i] {
				wrong++
			}
		}
	}, done)
	wg.Wait()
	took := time.Since(start)
	if wrong > 0 {
		t.Fatalf("%d reads during the erasure answered other than after it", wrong)
	}
	if steps.Load() < 2 {
		t.Fatalf("the erasure of %d likes took %d steps", mine, steps.Load())
	}
	t.Logf("erased a user with %d likes among %d others' in %v, %d steps", mine, others, took.Round(time.Millisecond), steps.Load())
	t.Logf("50-post read before: p50 %v p99 %v max %v (%d reads)", pct(beforeReads, .5), pct(beforeReads, .99), pct(beforeReads, 1), len(beforeReads))
	t.Logf("50-post read during: p50 %v p99 %v max %v (%d reads, all exact)", pct(duringReads, .5), pct(duringReads, .99), pct(duringReads, 1), len(duringReads))
	t.Logf("like before: p50 %v p99 %v max %v", pct(beforeLikes, .5), pct(beforeLikes, .99), pct(beforeLikes, 1))
	t.Logf("like during: p50 %v p99 %v max %v (%d likes)", pct(duringLikes, .5), pct(duringLikes, .99), pct(duringLikes, 1), len(duringLikes))
}
