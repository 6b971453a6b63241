package tier

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tally-dev/tally/engine/counters"
)

// TestSetConcurrentJobs runs a set's maintenance jobs (planned and
// finished under the write lock, run outside it) while writers like,
// react, switch kinds and unreact under the write lock, readers read
// pages and take snapshots under the read lock, and a scanner looks for
// one user's pairs with no lock. A reader checks that a pair only its own
// writer touches reads as that writer left it; at the end the set is the
// writers' model. Run with -race.
func TestSetConcurrentJobs(t *testing.T) {
	dir := t.TempDir()
	opts := setOpts(dir)
	opts.CompactMin = 8
	s := newTestSet(t, opts, 32)
	var mu sync.RWMutex
	const nWin = 20
	rng := rand.New(rand.NewPCG(7, 7))
	posts := make([]uint64, 2000)
	for i := range posts {
		posts[i] = randID(rng, nWin)
	}
	model := map[upair]counters.Kind{} // under mu
	// A user no writer touches, whom a scanner looks for throughout.
	const still = 1 << 40
	var stillPosts []uint64
	for _, p := range posts[:300] {
		if added, err := s.Add(still, p); err != nil {
			t.Fatal(err)
		} else if added {
			model[upair{still, p}] = counters.Like
			stillPosts = append(stillPosts, p)
		}
	}
	slices.Sort(stillPosts)
	var clock atomic.Int64
	clock.Store(testEpoch.UnixMilli())
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var jobs, snaps, pages atomic.Int64
	for w := range 2 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			for {
				select {
				case <-stop:
					return
				default:
				}
				// Writer w owns users w, w+2, w+4, ...
				q := upair{uint64(w + 2*rng.IntN(50)), posts[rng.IntN(len(posts))]}
				mu.Lock()
				var err error
				switch rng.IntN(3) {
				case 0:
					_, err = s.Unreact(q.u, q.p)
					delete(model, q)
				case 1:
					_, err = s.Add(q.u, q.p)
					if model[q] == counters.NoKind {
						model[q] = counters.Like
					}
				default: // a reaction, or a switch of kind
					kind := randKind(rng, 6)
					_, err = s.React(q.u, q.p, kind)
					model[q] = kind
				}
				mu.Unlock()
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	for r := range 2 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(r), 2))
			var out [50]counters.Kind
			page := make([]uint64, 50)
			for {
				select {
				case <-stop:
					return
				default:
				}
				for i := range page {
					page[i] = posts[rng.IntN(len(posts))]
				}
				slices.Sort(page)
				slices.Reverse(page)
				user := uint64(rng.IntN(100))
				mu.RLock()
				err := s.KindsOf(user, page, out[:])
				want := make([]counters.Kind, len(page))
				for i, p := range page {
					want[i] = model[upair{user, p}]
				}
				if rng.IntN(50) == 0 {
					var buf bytes.Buffer
					if _, err := s.WriteTo(&buf); err != nil {
						t.Error(err)
					}
					snaps.Add(1)
				}
				mu.RUnlock()
				if err != nil {
					t.Error(err)
					return
				}
				if !slices.Equal(out[:], want) {
					t.Errorf("user %d: KindsOf %v, model %v", user, out, want)
					return
				}
				pages.Add(1)
			}
		})
	}
	var scans atomic.Int64
	wg.Go(func() {
		// Scans read bodies with no lock, as an erasure does.
		for {
			select {
			case <-stop:
				return
			default:
			}
			var got []uint64
			var cur Cursor
			for done := false; !done; {
				mu.Lock()
				sc := s.PlanScan(still, cur, 100)
				mu.Unlock()
				runErr := sc.Run()
				mu.Lock()
				found, next, d, err := sc.Finish()
				for _, p := range found {
					if has, herr := s.Has(still, p); herr != nil {
						err = herr
					} else if has {
						got = append(got, p)
					}
				}
				mu.Unlock()
				// A run may fail reading a cold file that a job replaced
				// and Collect closed meanwhile: Finish then reports no
				// error and not done, to read the new body.
				if err != nil || runErr != nil && d {
					t.Error(err, runErr)
					return
				}
				cur, done = next, d
			}
			slices.Sort(got)
			if got = slices.Compact(got); !slices.Equal(got, stillPosts) {
				t.Errorf("a scan found %d posts, want %d", len(got), len(stillPosts))
				return
			}
			scans.Add(1)
		}
	})
	wg.Go(func() { maintainRounds(t, &mu, s, &clock, &jobs) })
	waitRounds(&clock)
	close(stop)
	wg.Wait()
	st := statsOf(s)
	if jobs.Load() == 0 || snaps.Load() == 0 || pages.Load() == 0 || scans.Load() == 0 || st.coldWindows == 0 {
		t.Fatalf("%d jobs, %d snapshots, %d pages, %d scans, %+v: the test did not exercise them", jobs.Load(), snaps.Load(), pages.Load(), scans.Load(), st)
	}
	checkSet(t, s, model, rng, posts[:3], nWin, false)
	t.Logf("%d jobs, %d snapshots, %d pages, %+v", jobs.Load(), snaps.Load(), pages.Load(), st)
}

// TestSetMaintainerList runs a post table's and two sets' maintenance
// through one loop over Maintainers, as the engine's loop does.
func TestSetMaintainerList(t *testing.T) {
	posts, _ := NewPosts(testOpts(t.TempDir()))
	likes := newTestSet(t, setOpts(t.TempDir()), 0)
	fopts := setOpts(t.TempDir())
	fopts.Prefix = ""
	favs, err := NewSet("FAVS", fopts)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(8, 8))
	for range 2000 {
		id := randID(rng, 10)
		posts.Put(id, Post{Author: 1})
		likes.Add(rng.Uint64N(100), id)
		favs.Add(rng.Uint64N(100), id)
	}
	n := runWork(t, testEpoch.Add(time.Minute), posts, likes, favs)
	if n < 30 || len(likes.Files()) == 0 || len(favs.Files()) == 0 {
		t.Fatalf("%d jobs; files %v %v", n, likes.Files(), favs.Files())
	}
	if f := favs.Files()[0]; f[:5] != "FAVS-" {
		t.Fatalf("favorites' file %q is not named by its tag", f)
	}
}
