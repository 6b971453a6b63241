package embedded

import (
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/wal"
)

// importPosts registers n posts with skewed non-zero counts, 10,000 per
// log record, and returns their ids' generator.
func importPosts(t testing.TB, e *Engine, n int) func(i int) engine.PostID {
	t.Helper()
	id := func(i int) engine.PostID { return engine.PostID(1<<50 + uint64(i)*2654435761) }
	rows := make([]engine.ImportRow, 0, MaxImportBatch)
	for i := range n {
		rows = append(rows, engine.ImportRow{Post: id(i), Author: engine.UserID(i%100_000 + 1),
			Counts: engine.Counts{Likes: int64(i % 50), Comments: int64(i % 7), Reposts: int64(i % 3),
				Views: int64(i%1000 + 1), Favorites: int64(i % 11)}})
		if len(rows) == cap(rows) || i == n-1 {
			if err := e.Import(bg, rows); err != nil {
				t.Fatal(err)
			}
			rows = rows[:0]
		}
	}
	return id
}

// loadStats is what the load goroutines observed while a window was open.
type loadStats struct {
	window   atomic.Bool
	ops      [2]atomic.Int64 // writes, reads completed inside the window
	maxNanos [2]atomic.Int64
	// keep: also keep every latency, for quantiles (a benchmark's).
	keep bool
	mu   sync.Mutex
	lat  [2][]time.Duration
}

func (s *loadStats) record(kind int, d time.Duration) {
	if !s.window.Load() {
		return
	}
	s.ops[kind].Add(1)
	if s.keep {
		s.mu.Lock()
		s.lat[kind] = append(s.lat[kind], d)
		s.mu.Unlock()
	}
	for {
		cur := s.maxNanos[kind].Load()
		if int64(d) <= cur || s.maxNanos[kind].CompareAndSwap(cur, int64(d)) {
			return
		}
	}
}

// takeLatencies returns the latencies kept of kind since the last call.
func (s *loadStats) takeLatencies(kind int) []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.lat[kind]
	s.lat[kind] = nil
	return l
}

// quantile returns the q-quantile of ds (sorting them), 0 for none.
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[min(len(ds)-1, int(q*float64(len(ds))))]
}

// runLoad keeps writers and readers busy on e until stop closes. Each
// pauses briefly between operations, as request handlers waiting on the
// network do: four goroutines spinning on two cores would measure the Go
// scheduler's 10 ms time slice, not the engine.
func runLoad(t testing.TB, e *Engine, id func(int) engine.PostID, n int, st *loadStats, stop chan struct{}) *sync.WaitGroup {
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 9))
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				start := time.Now()
				var err error
				if i%8 == 0 {
					err = e.RecordViews(bg, []engine.PostID{id(rng.IntN(n)), id(rng.IntN(n))})
				} else {
					err = e.Like(bg, engine.UserID(1<<40+w<<32+i), id(rng.IntN(n)))
				}
				if err != nil {
					t.Error(err)
					return
				}
				st.record(0, time.Since(start))
				time.Sleep(50 * time.Microsecond)
			}
		})
	}
	for r := range 2 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(r), 7))
			page := make([]engine.PostID, 50)
			for {
				select {
				case <-stop:
					return
				default:
				}
				for j := range page {
					page[j] = id(rng.IntN(n))
				}
				start := time.Now()
				if _, err := e.Counts(bg, page); err != nil {
					t.Error(err)
					return
				}
				if _, err := e.Liked(bg, 5, page); err != nil {
					t.Error(err)
					return
				}
				st.record(1, time.Since(start))
				time.Sleep(50 * time.Microsecond)
			}
		})
	}
	return &wg
}

// TestSnapshotUnderLoad takes a snapshot of 2M counted posts while writers
// and readers keep going, and checks that no operation waited anywhere
// near as long as the snapshot took.
func TestSnapshotUnderLoad(t *testing.T) {
	n := 2_000_000
	if testing.Short() {
		n = 200_000
	}
	dir := t.TempDir()
	e := openE(t, Options{Dir: dir, Sync: wal.SyncNone, SweepInterval: -1, Logger: quiet,
		SnapshotInterval: -1, SnapshotLogBytes: -1})
	id := importPosts(t, e, n)
	start := time.Now()
	ok(t, e.Snapshot(bg))
	t.Logf("first snapshot of %d posts: %v", n, time.Since(start))

	var base, st loadStats
	stop := make(chan struct{})
	both := &loadStats{}
	wg := runLoad(t, e, id, n, both, stop)
	time.Sleep(100 * time.Millisecond)
	// The same load without a snapshot, for comparison, then with one.
	window := func(s *loadStats, fn func()) {
		both.window.Store(true)
		fn()
		both.window.Store(false)
		for k := range 2 {
			s.ops[k].Store(both.ops[k].Swap(0))
			s.maxNanos[k].Store(both.maxNanos[k].Swap(0))
		}
	}
	var err error
	var snapTook time.Duration
	window(&st, func() {
		start := time.Now()
		err = e.Snapshot(bg)
		snapTook = time.Since(start)
	})
	window(&base, func() { time.Sleep(snapTook) })
	close(stop)
	wg.Wait()
	ok(t, err)
	maxW, maxR := time.Duration(st.maxNanos[0].Load()), time.Duration(st.maxNanos[1].Load())
	t.Logf("snapshot under load: %v; meanwhile %d writes (max %v) and %d page reads (max %v); "+
		"without a snapshot, in as long: %d writes (max %v), %d page reads (max %v)",
		snapTook, st.ops[0].Load(), maxW, st.ops[1].Load(), maxR,
		base.ops[0].Load(), time.Duration(base.maxNanos[0].Load()), base.ops[1].Load(), time.Duration(base.maxNanos[1].Load()))
	if st.ops[0].Load() == 0 || st.ops[1].Load() == 0 {
		t.Fatal("operations stopped during the snapshot")
	}
	// Two noisy cores are shared by the snapshot, four load goroutines and
	// the garbage collector (and in CI other packages' tests), so waits of
	// several time slices come and go with or without a snapshot; a stall
	// for the snapshot's duration is what this looks for. Half of it, or
	// twice the longest wait of the same load without a snapshot when the
	// machine is that noisy, still tells them apart.
	baseMax := time.Duration(max(base.maxNanos[0].Load(), base.maxNanos[1].Load()))
	if limit := max(snapTook/2, 2*baseMax, 50*time.Millisecond); maxW > limit || maxR > limit {
		t.Fatalf("an operation waited %v/%v during a snapshot of %v", maxW, maxR, snapTook)
	}
}
