package tier

import (
	"bytes"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tally-dev/tally/engine"
)

// TestConcurrentJobs runs maintenance jobs (planned and finished under
// the write lock, run outside it) while writers add likes and register
// posts under the write lock and readers read pages and take snapshots
// under the read lock. Readers check that a post's author never changes
// and that its likes never go backwards; at the end every like is there.
// Run with -race.
func TestConcurrentJobs(t *testing.T) {
	dir := t.TempDir()
	opts := testOpts(dir)
	opts.CompactMin = 8
	tr, err := NewPosts(opts)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.RWMutex
	const nWin = 20
	rng := rand.New(rand.NewPCG(7, 7))
	ids := make([]uint64, 3000)
	for i := range ids {
		ids[i] = randID(rng, nWin)
		tr.Put(ids[i], Post{Author: authorFor(ids[i])})
	}
	var clock atomic.Int64
	clock.Store(testEpoch.UnixMilli())
	likes := make(map[uint64]int64) // the writers' count, under mu
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var jobs, snaps atomic.Int64
	for w := range 2 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			for {
				select {
				case <-stop:
					return
				default:
				}
				id := ids[rng.IntN(len(ids))]
				mu.Lock()
				if _, _, err := tr.AddCounts(id, engine.Counts{Likes: 1}); err != nil {
					t.Error(err)
				}
				likes[id]++
				mu.Unlock()
			}
		})
	}
	for r := range 2 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(r), 2))
			seen := map[uint64]int64{}
			var out [50]Post
			var found [50]bool
			var page [50]uint64
			for {
				select {
				case <-stop:
					return
				default:
				}
				for i := range page {
					page[i] = ids[rng.IntN(len(ids))]
				}
				mu.RLock()
				err := tr.GetMany(page[:], out[:], found[:])
				if rng.IntN(50) == 0 {
					var buf bytes.Buffer
					if _, err := tr.WriteTo(&buf); err != nil {
						t.Error(err)
					}
					snaps.Add(1)
				}
				mu.RUnlock()
				if err != nil {
					t.Error(err)
					return
				}
				for i, id := range page {
					if !found[i] || out[i].Author != authorFor(id) {
						t.Errorf("post %d: %+v %v", id, out[i], found[i])
						return
					}
					if out[i].Counts.Likes < seen[id] {
						t.Errorf("post %d: likes went from %d to %d", id, seen[id], out[i].Counts.Likes)
						return
					}
					seen[id] = out[i].Counts.Likes
				}
			}
		})
	}
	wg.Go(func() { maintainRounds(t, &mu, tr, &clock, &jobs) })
	waitRounds(&clock)
	close(stop)
	wg.Wait()
	if jobs.Load() == 0 || snaps.Load() == 0 {
		t.Fatalf("%d jobs, %d snapshots: the test did not exercise them", jobs.Load(), snaps.Load())
	}
	kinds := map[Kind]int{}
	for _, s := range tr.Stats() {
		kinds[s.Kind]++
	}
	if kinds[Cold] == 0 || kinds[Sealed]+kinds[Cold] < nWin/2 {
		t.Fatalf("windows %v after the run", kinds)
	}
	for _, id := range ids {
		p, ok, err := tr.Get(id)
		if err != nil || !ok || p.Counts.Likes != likes[id] || p.Author != authorFor(id) {
			t.Fatalf("post %d: %+v %v %v, want %d likes", id, p, ok, err, likes[id])
		}
	}
	t.Logf("%d jobs, %d snapshots, windows %v", jobs.Load(), snaps.Load(), kinds)
}

func authorFor(id uint64) uint64 { return id%1000 + 1 }

// maintainRounds is a maintenance loop as an engine runs it over m: 40
// rounds, each 700 ms later on clock, planning under mu's write lock,
// running the jobs with no lock, finishing them and collecting under the
// write lock again; it counts the jobs in jobs.
func maintainRounds(t *testing.T, mu *sync.RWMutex, m Maintainer, clock, jobs *atomic.Int64) {
	for range 40 {
		now := time.UnixMilli(clock.Add(700))
		mu.Lock()
		ws := m.PlanWork(now)
		mu.Unlock()
		for _, w := range ws {
			if err := w.Run(); err != nil {
				t.Error(err)
			}
		}
		mu.Lock()
		for _, w := range ws {
			if err := w.Finish(); err != nil {
				t.Error(err)
			}
		}
		if err := m.Collect(nil); err != nil {
			t.Error(err)
		}
		mu.Unlock()
		jobs.Add(int64(len(ws)))
		time.Sleep(2 * time.Millisecond)
	}
}

// waitRounds waits at least 300 ms and until maintainRounds is done.
func waitRounds(clock *atomic.Int64) {
	time.Sleep(300 * time.Millisecond)
	for clock.Load() < testEpoch.UnixMilli()+40*700 {
		time.Sleep(10 * time.Millisecond)
	}
}

// TestMaintainerList runs the maintenance of two tiers of the post codec
// (say posts and a second table) through the Maintainer interface, as
// the engine's loop over its tiers does.
func TestMaintainerList(t *testing.T) {
	a, _ := NewPosts(testOpts(t.TempDir()))
	b, _ := NewPosts(testOpts(t.TempDir()))
	rng := rand.New(rand.NewPCG(8, 8))
	for range 2000 {
		a.Put(randID(rng, 10), Post{Author: 1})
		b.Put(randID(rng, 10), Post{Author: 2})
	}
	n := runWork(t, testEpoch.Add(time.Minute), a, b)
	if n < 20 || len(a.Files()) == 0 || len(b.Files()) == 0 {
		t.Fatalf("%d jobs; files %v %v", n, a.Files(), b.Files())
	}
}

// runWork plans, runs and finishes the jobs of each table in turn and
// collects its replaced files, as the engine's loop over its tables
// does; it returns how many jobs ran.
func runWork(t *testing.T, now time.Time, tables ...Maintainer) int {
	t.Helper()
	n := 0
	for _, tb := range tables {
		for _, w := range tb.PlanWork(now) {
			if err := w.Run(); err != nil {
				t.Fatal(err)
			}
			if err := w.Finish(); err != nil {
				t.Fatal(err)
			}
			n++
		}
		if err := tb.Collect(nil); err != nil {
			t.Fatal(err)
		}
	}
	return n
}
