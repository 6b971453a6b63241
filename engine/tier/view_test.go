package tier

import (
	"bytes"
	"errors"
	"github.com/tally-dev/tally/engine/counters"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tally-dev/tally/engine"
)

// postWrites makes n random writes to tr and model: new posts, counts
// and authors, on windows of every form.
func postWrites(t *testing.T, tr *Posts, model map[uint64]Post, rng *rand.Rand, nWin, n int) {
	t.Helper()
	for range n {
		id := randID(rng, nWin)
		if len(model) > 0 && rng.IntN(2) == 0 {
			for k := range model {
				id = k
				break
			}
		}
		switch rng.IntN(3) {
		case 0:
			p := randPost(rng)
			if err := tr.Put(id, p); err != nil {
				t.Fatal(err)
			}
			model[id] = p
		case 1:
			_, is, err := tr.AddCounts(id, engine.Counts{Likes: 1, Views: 2})
			if err != nil {
				t.Fatal(err)
			}
			model[id] = is
		default:
			if err := tr.SetAuthor(id, 7); err != nil {
				t.Fatal(err)
			}
			p := model[id]
			p.Author = 7
			model[id] = p
		}
	}
}

// TestViewModel takes views of a post table holding open, sealed and
// cold windows with deltas, writes on while each is out (to every kind of
// window), and checks: the live table answers as the model throughout,
// the view's image loads (into a table with no cold tier) as the model
// was at Capture, and after Release the table still answers as the model,
// through maintenance too.
func TestViewModel(t *testing.T) {
	for seed := range uint64(3) {
		rng := rand.New(rand.NewPCG(seed, 5))
		opts := testOpts(t.TempDir())
		tr, err := NewPosts(opts)
		if err != nil {
			t.Fatal(err)
		}
		const nWin = 40 // the clock reaches window 24: some stay open
		model := map[uint64]Post{}
		clock := testEpoch
		for round := range 6 {
			postWrites(t, tr, model, rng, nWin, 400)
			clock = clock.Add(4 * time.Second)
			if err := tr.Maintain(clock); err != nil {
				t.Fatal(err)
			}
			postWrites(t, tr, model, rng, nWin, 100) // deltas
			v, err := tr.Capture()
			if err != nil {
				t.Fatal(err)
			}
			atCapture := maps.Clone(model)
			postWrites(t, tr, model, rng, nWin, 300)
			check(t, tr, model, rng, nWin)
			if tr.Plan(clock.Add(time.Hour)) != nil {
				t.Fatal("Plan planned jobs on held windows")
			}
			var buf bytes.Buffer
			if _, err := v.WriteTo(&buf); err != nil {
				t.Fatal(err)
			}
			if v.Len() != len(atCapture) {
				t.Fatalf("round %d: view of %d records, %d at Capture", round, v.Len(), len(atCapture))
			}
			if err := tr.Release(v); err != nil {
				t.Fatal(err)
			}
			check(t, tr, model, rng, nWin)
			loaded, err := NewPosts(Options{WindowMillis: testWindow, OpenAge: opts.OpenAge})
			if err != nil {
				t.Fatal(err)
			}
			if err := loaded.Load(&buf); err != nil {
				t.Fatalf("round %d: Load of the view's image: %v", round, err)
			}
			check(t, loaded, atCapture, rng, nWin)
			checkRange(t, loaded, atCapture)
		}
		kinds := map[Kind]int{}
		for _, s := range tr.Stats() {
			kinds[s.Kind]++
		}
		if kinds[Cold] == 0 || kinds[Sealed] == 0 || kinds[Open] == 0 {
			t.Fatalf("windows %v: want every form", kinds)
		}
		if err := tr.Maintain(clock.Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
		check(t, tr, model, rng, nWin)
		tr.Close()
	}
}

// TestSetViewModel is TestViewModel for a set.
func TestSetViewModel(t *testing.T) {
	for seed := range uint64(3) {
		rng := rand.New(rand.NewPCG(seed, 6))
		opts := setOpts(t.TempDir())
		s := newTestSet(t, opts, 16)
		const nWin = 40
		hot := []uint64{randID(rng, nWin), randID(rng, nWin)}
		model := map[upair]counters.Kind{}
		writes := func(n int) {
			for range n {
				q := upair{randUser(rng), randLikedPost(rng, hot, nWin)}
				if rng.IntN(3) == 0 {
					if _, err := s.Remove(q.u, q.p); err != nil {
						t.Fatal(err)
					}
					delete(model, q)
					continue
				}
				// Kinds change too, so that a view's deltas carry them.
				kind := counters.Kind(1 + rng.IntN(3))
				if _, err := s.React(q.u, q.p, kind); err != nil {
					t.Fatal(err)
				}
				model[q] = kind
			}
		}
		clock := testEpoch
		for round := range 6 {
			writes(500)
			clock = clock.Add(4 * time.Second)
			if err := s.Maintain(clock); err != nil {
				t.Fatal(err)
			}
			writes(100)
			v, err := s.Capture()
			if err != nil {
				t.Fatal(err)
			}
			atCapture := maps.Clone(model)
			writes(300)
			checkSet(t, s, model, rng, hot, nWin, false)
			var buf bytes.Buffer
			if _, err := v.WriteTo(&buf); err != nil {
				t.Fatal(err)
			}
			if err := s.Release(v); err != nil {
				t.Fatal(err)
			}
			checkSet(t, s, model, rng, hot, nWin, false)
			loaded := newTestSet(t, Options{WindowMillis: testWindow, OpenAge: opts.OpenAge}, 16)
			if err := loaded.Load(&buf); err != nil {
				t.Fatalf("round %d: Load of the view's image: %v", round, err)
			}
			checkSet(t, loaded, atCapture, rng, hot, nWin, false)
		}
		if st := statsOf(s); st.coldWindows == 0 || st.sealedWindows == 0 || st.openWindows == 0 {
			t.Fatalf("windows %+v: want every form", st)
		}
		if err := s.Maintain(clock.Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
		checkSet(t, s, model, rng, hot, nWin, false)
		s.Close()
	}
}

// TestViewConcurrent writes a view's image with no lock while writers
// like posts of every window under the write lock and readers read pages
// under the read lock. Run with -race: the view reads nothing a writer
// touches. The image loads as the counts were at Capture.
func TestViewConcurrent(t *testing.T) {
	opts := testOpts(t.TempDir())
	tr, err := NewPosts(opts)
	if err != nil {
		t.Fatal(err)
	}
	const nWin = 20
	rng := rand.New(rand.NewPCG(3, 3))
	ids := make([]uint64, 2000)
	for i := range ids {
		ids[i] = randID(rng, nWin)
		tr.Put(ids[i], Post{Author: authorFor(ids[i])})
	}
	if err := tr.Maintain(testEpoch.Add(15 * time.Second)); err != nil { // cold, sealed and open windows
		t.Fatal(err)
	}
	var mu sync.RWMutex
	likes := map[uint64]int64{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
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
	wg.Go(func() {
		var out [50]Post
		var found [50]bool
		page := ids[:50]
		for {
			select {
			case <-stop:
				return
			default:
			}
			mu.RLock()
			if err := tr.GetMany(page, out[:], found[:]); err != nil {
				t.Error(err)
			}
			mu.RUnlock()
		}
	})
	for range 5 {
		mu.Lock()
		v, err := tr.Capture()
		atCapture := maps.Clone(likes)
		mu.Unlock()
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		if _, err := v.WriteTo(&buf); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		err = tr.Release(v)
		mu.Unlock()
		if err != nil {
			t.Fatal(err)
		}
		loaded, _ := NewPosts(Options{WindowMillis: testWindow})
		if err := loaded.Load(&buf); err != nil {
			t.Fatal(err)
		}
		for _, id := range ids {
			p, ok, err := loaded.Get(id)
			if err != nil || !ok || p.Counts.Likes != atCapture[id] || p.Author != authorFor(id) {
				t.Fatalf("post %d in the view: %+v %v %v; %d likes at Capture", id, p, ok, err, atCapture[id])
			}
		}
	}
	close(stop)
	wg.Wait()
	for _, id := range ids {
		if p, _, _ := tr.Get(id); p.Counts.Likes != likes[id] {
			t.Fatalf("post %d: %d likes, want %d", id, p.Counts.Likes, likes[id])
		}
	}
}

// TestViewCorruptColdFile: a cold file whose block was damaged after it
// was opened fails the view's image with ErrCorrupt, naming the file,
// rather than copying the damage into a snapshot.
func TestViewCorruptColdFile(t *testing.T) {
	dir := t.TempDir()
	tr, err := NewPosts(testOpts(dir))
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 1))
	for range 3000 {
		tr.Put(randID(rng, 3), Post{Author: 1, Counts: engine.Counts{Views: 3}})
	}
	if err := tr.Maintain(testEpoch.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	files := tr.Files()
	if len(files) == 0 {
		t.Fatal("no cold file")
	}
	path := filepath.Join(dir, files[0])
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[headerSize+5] ^= 0x10 // inside the first block
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	v, err := tr.Capture()
	if err != nil {
		t.Fatal(err)
	}
	var ce *CorruptError
	if _, err := v.WriteTo(&bytes.Buffer{}); !errors.As(err, &ce) || ce.File != files[0] {
		t.Fatalf("WriteTo of a damaged file: %v; want a CorruptError naming %s", err, files[0])
	}
	if err := tr.Release(v); err != nil {
		t.Fatal(err)
	}
}

// TestCaptureRules: a view needs no job pending and is the only one; its
// holds are never run or finished; Load waits for Release.
func TestCaptureRules(t *testing.T) {
	tr, err := NewPosts(testOpts(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(2, 2))
	for range 500 {
		tr.Put(randID(rng, 10), Post{Author: 2})
	}
	jobs := tr.Plan(testEpoch.Add(5 * time.Second))
	if len(jobs) == 0 {
		t.Fatal("no job planned")
	}
	if _, err := tr.Capture(); err == nil {
		t.Fatal("Capture with jobs pending")
	}
	for _, j := range jobs {
		j.Run()
		if err := j.Finish(); err != nil {
			t.Fatal(err)
		}
	}
	v, err := tr.Capture()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Capture(); err == nil {
		t.Fatal("a second Capture while the first view is out")
	}
	hold := tr.wins[0].job
	if hold.Run() == nil || tr.Finish(hold) == nil {
		t.Fatal("a view's hold was run or finished")
	}
	var buf bytes.Buffer
	if _, err := v.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	if err := tr.Load(bytes.NewReader(buf.Bytes())); err == nil {
		t.Fatal("Load while a view is out")
	}
	if err := tr.Release(v); err != nil {
		t.Fatal(err)
	}
	if err := tr.Release(v); err == nil {
		t.Fatal("a view released twice")
	}
	if err := tr.Load(bytes.NewReader(buf.Bytes())); err != nil {
		t.Fatal(err)
	}
}

// TestViewWithScans takes views while erasure-style scans read open
// windows with no lock, in both orders (a scan planned before the
// Capture, and one planned on a window the view holds), while writes,
// Forget and Scrub go on and the view is Released before the scan ends:
// the scan finds every pair of its user, the live set answers as the
// model after the scan's Finish, and the view's image loads as the set
// was at Capture. Run with -race: neither the view's writer nor the
// scan reads what the writes touch.
func TestViewWithScans(t *testing.T) {
	for seed := range uint64(4) {
		rng := rand.New(rand.NewPCG(seed, 25))
		opts := setOpts(t.TempDir())
		s := newTestSet(t, opts, 16)
		const nWin = 40
		const user = 4242
		hot := []uint64{randID(rng, nWin)}
		model := map[upair]counters.Kind{}
		gone := map[uint64]bool{} // posts forgotten
		var target *window        // the open window scanned, which half the writes go to
		var mu sync.Mutex
		writes := func(n int) {
			mu.Lock()
			defer mu.Unlock()
			for range n {
				q := upair{randUser(rng), randLikedPost(rng, hot, nWin)}
				if target != nil && rng.IntN(2) == 0 {
					q.p = target.lo + rng.Uint64N(target.last-target.lo+1)
				}
				if gone[q.p] {
					continue // Forget: Add and Remove change nothing
				}
				switch rng.IntN(8) {
				case 0:
					if _, err := s.Remove(q.u, q.p); err != nil {
						t.Fatal(err)
					}
					delete(model, q)
				case 1:
					s.Scrub(q.p)
				case 2:
					q.u = user
					fallthrough
				default:
					kind := counters.Kind(1 + rng.IntN(3))
					if _, err := s.React(q.u, q.p, kind); err != nil {
						t.Fatal(err)
					}
					model[q] = kind
				}
			}
		}
		writes(2000)
		if err := s.Maintain(testEpoch.Add(4 * time.Second)); err != nil {
			t.Fatal(err)
		}
		forgot := false
		for round := range 4 {
			writes(300)
			mu.Lock()
			var open *window
			for _, w := range s.wins {
				if w.body.kind() == Open {
					open = w
					break
				}
			}
			if open == nil {
				t.Fatal("no open window to scan")
			}
			target = open
			from := Cursor{Post: open.lo}
			var sc *Scan
			if round%2 == 0 {
				sc = s.PlanScan(user, from, 1<<20)
			}
			v, err := s.Capture()
			if err != nil {
				t.Fatal(err)
			}
			if round%2 == 1 {
				sc = s.PlanScan(user, from, 1<<20)
			}
			if sc.w != open {
				t.Fatalf("round %d: the scan is not of the open window", round)
			}
			atCapture := maps.Clone(model)
			mu.Unlock()
			var image bytes.Buffer
			// Two groups: the view's writer ends before Release, the
			// scan's run may not, and nothing orders it before Release
			// or the writes after it.
			var wg, scanning sync.WaitGroup
			scanning.Go(func() {
				if err := sc.Run(); err != nil {
					t.Error(err)
				}
			})
			wg.Go(func() {
				if _, err := v.WriteTo(&image); err != nil {
					t.Error(err)
				}
			})
			writes(300)
			mu.Lock()
			p := randLikedPost(rng, hot, nWin)
			s.Forget(p)
			gone[p], forgot = true, true
			for q := range model {
				if q.p == p {
					delete(model, q)
				}
			}
			mu.Unlock()
			writes(100)
			wg.Wait() // the view's writer must end before Release
			mu.Lock()
			if err := s.Release(v); err != nil {
				t.Fatal(err)
			}
			mu.Unlock()
			writes(200)
			scanning.Wait()
			mu.Lock()
			found, _, _, err := sc.Finish()
			if err != nil {
				t.Fatal(err)
			}
			// Every pair of user in the window at Capture is found, or
			// was written since (and is then in the delta scanned too).
			for q := range atCapture {
				if q.u == user && q.p >= open.lo && q.p <= open.last && !slices.Contains(found, q.p) {
					t.Fatalf("seed %d round %d: the scan missed post %d", seed, round, q.p)
				}
			}
			checkSet(t, s, model, rng, hot, nWin, forgot)
			mu.Unlock()
			loaded := newTestSet(t, Options{WindowMillis: testWindow, OpenAge: opts.OpenAge}, 16)
			if err := loaded.Load(&image); err != nil {
				t.Fatalf("seed %d round %d: Load of the view's image: %v", seed, round, err)
			}
			checkSet(t, loaded, atCapture, rng, hot, nWin, true)
		}
		s.Close()
	}
}

// TestViewKeepsKinds: a view's image holds the kinds table as Capture
// found it, not one the live table took since (a kinds record replayed
// while a snapshot is written).
func TestViewKeepsKinds(t *testing.T) {
	tr, err := NewPosts(testOpts(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if err := tr.SetKinds([]string{"like", "love"}); err != nil {
		t.Fatal(err)
	}
	atCapture := tr.Kinds()
	v, err := tr.Capture()
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.SetKinds([]string{"like", "love", "haha"}); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := v.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	if err := tr.Release(v); err != nil {
		t.Fatal(err)
	}
	loaded, err := NewPosts(Options{WindowMillis: testWindow})
	if err != nil {
		t.Fatal(err)
	}
	defer loaded.Close()
	if err := loaded.Load(&buf); err != nil {
		t.Fatal(err)
	}
	if got := loaded.Kinds(); got != atCapture {
		t.Fatalf("the view's image has kinds %v, want %v as at Capture", got.IDs(), atCapture.IDs())
	}
	if tr.Kinds() == atCapture {
		t.Fatal("the live table's kinds did not change: the test shows nothing")
	}
}
