package likeset

import (
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// TestConcurrentJobs runs jobs the way the engine would — Plan and Finish
// under the write lock, Run with no lock — while writers and page readers
// take the lock; run it with -race. At the end the set must equal the
// model the writers kept.
func TestConcurrentJobs(t *testing.T) {
	s, _ := New(Options{OpenAge: 24 * time.Hour, CompactMin: 4})
	s.blockLimit = 16
	var mu sync.RWMutex
	model := map[pair]bool{}
	var posts []uint64
	for i := range 100 {
		posts = append(posts, postAt(t0.Add(time.Duration(i)*7*time.Hour), 1, 0))
	}
	now := t0
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(3)
	go func() { // writer
		defer wg.Done()
		r := rand.New(rand.NewPCG(1, 1))
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			u, p := r.Uint64N(20), posts[r.IntN(len(posts))]
			mu.Lock()
			if r.IntN(3) == 0 {
				s.Remove(u, p)
				delete(model, pair{u, p})
			} else {
				s.Add(u, p)
				model[pair{u, p}] = true
			}
			mu.Unlock()
		}
	}()
	go func() { // reader
		defer wg.Done()
		out := make([]bool, 50)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			mu.RLock()
			s.HasMany(uint64(i%20), posts[i%50:i%50+50], out)
			mu.RUnlock()
		}
	}()
	go func() { // maintenance
		defer wg.Done()
		for step := range 60 {
			mu.Lock()
			now = t0.Add(time.Duration(step) * 12 * time.Hour)
			j := s.Plan(now)
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
		}
		close(stop)
	}()
	wg.Wait()
	r := rand.New(rand.NewPCG(2, 2))
	checkModel(t, "after", s, model, posts, []uint64{0, 1, 5, 19, 20}, r)
	if st := s.Stats(); st.SealedWindows == 0 {
		t.Fatalf("nothing sealed: %+v", st)
	}
}
