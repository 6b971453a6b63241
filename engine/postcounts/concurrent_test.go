package postcounts

import (
	"bytes"
	"io"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/snowflake"
)

// TestConcurrent runs the store as the engine will: one writer under the
// write lock, readers under the read lock, and a maintenance goroutine that
// plans and finishes jobs under the write lock but runs them with no lock,
// plus snapshots written outside the lock. Writes only increase counts,
// so every reader must see each post's counts never decrease — a window
// swap that lost a delta, or counted one twice, for an instant would show.
// Run it with -race to check the claims about Job.Run and Snapshot.
func TestConcurrent(t *testing.T) {
	opts := Options{WindowMillis: 60_000, OpenAge: 2 * time.Minute, ColdAge: 6 * time.Minute, CompactMin: 8,
		Dir: t.TempDir(), ColdCacheBytes: 1 << 20}
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rng := rand.New(rand.NewPCG(1, 1))
	ids := make([]uint64, 1500)
	for i := range ids {
		ids[i] = snowflake.Make(t0.UnixMilli()-rng.Int64N(1_800_000), rng.Uint64N(1024), 0)
	}
	var (
		mu    sync.RWMutex
		now   atomic.Int64
		done  atomic.Bool
		wg    sync.WaitGroup
		jobs  atomic.Int64
		snaps atomic.Int64
	)
	now.Store(t0.UnixMilli())
	model := map[uint64]vals{}

	wg.Add(1)
	go func() { // maintenance
		defer wg.Done()
		for n := 0; !done.Load(); n++ {
			if n%4 == 0 {
				mu.RLock()
				snap := s.Snapshot()
				mu.RUnlock()
				if _, err := snap.WriteTo(io.Discard); err != nil {
					t.Error(err)
					return
				}
				snaps.Add(1)
			}
			mu.Lock()
			j := s.Plan(time.UnixMilli(now.Load()))
			mu.Unlock()
			if j == nil {
				time.Sleep(time.Millisecond)
				continue
			}
			if err := j.Run(); err != nil {
				t.Error(err)
			}
			mu.Lock()
			if err := s.Finish(j); err != nil {
				t.Error(err)
			}
			mu.Unlock()
			jobs.Add(1)
		}
	}()
	for r := range 3 {
		wg.Add(1)
		go func() { // reader
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(r), 9))
			seen := map[uint64]engine.Counts{}
			page := make([]uint64, 50)
			out := make([]engine.Counts, 50)
			for !done.Load() {
				for i := range page {
					page[i] = ids[rng.IntN(len(ids))]
				}
				mu.RLock()
				s.GetMany(page, out)
				mu.RUnlock()
				for i, id := range page {
					p, c := seen[id], out[i]
					if c.Likes < p.Likes || c.Comments < p.Comments || c.Reposts < p.Reposts || c.Views < p.Views || c.Favorites < p.Favorites {
						t.Errorf("post %d went from %+v to %+v", id, p, c)
						return
					}
					seen[id] = c
				}
				// Two cores: readers that never pause starve the writer.
				time.Sleep(50 * time.Microsecond)
			}
		}()
	}
	// The writer: increments, now and then a large one that overflows a
	// narrow field, and the clock moving so that windows seal and cool.
	// Until enough jobs overlapped the writes, or a time limit (a slow
	// machine, -race) says it must do.
	deadline := time.Now().Add(3 * time.Second)
	for i := 0; i < 8000 || (jobs.Load() < 300 && time.Now().Before(deadline)); i++ {
		id := ids[rng.IntN(len(ids))]
		f := Field(rng.IntN(NumFields))
		d := int64(1 + rng.IntN(3))
		if rng.IntN(50) == 0 {
			d = 1 << (10 + rng.IntN(30))
		}
		mu.Lock()
		got := s.Add(id, f, d)
		mu.Unlock()
		v := model[id]
		v[f] = clampAdd(v[f], d)
		model[id] = v
		if got != v[f] {
			t.Fatalf("Add(%d, %v, %d) = %d, want %d", id, f, d, got, v[f])
		}
		if i%40 == 0 && now.Load() < t0.UnixMilli()+3_600_000 {
			now.Add(10_000)
		}
		if i%8 == 0 {
			time.Sleep(20 * time.Microsecond) // let maintenance and readers in
		}
	}
	done.Store(true)
	wg.Wait()
	if jobs.Load() == 0 || snaps.Load() == 0 {
		t.Fatalf("%d jobs, %d snapshots: maintenance did not overlap the writes", jobs.Load(), snaps.Load())
	}
	if err := s.Maintain(time.UnixMilli(now.Load())); err != nil {
		t.Fatal(err)
	}
	for id, v := range model {
		if got := s.Get(id); got != toCounts(v) {
			t.Fatalf("Get(%d) = %+v, want %+v", id, got, v)
		}
	}
	if s.Len() != len(model) {
		t.Fatalf("Len = %d, want %d", s.Len(), len(model))
	}
	checkInternals(t, s)
	st := s.Stats()
	if st.ColdWindows == 0 {
		t.Fatalf("no window went cold: %+v", st)
	}
	t.Logf("%d jobs, %d snapshots; %+v", jobs.Load(), snaps.Load(), st)
	var buf bytes.Buffer
	if _, err := s.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
}
