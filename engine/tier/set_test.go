package tier

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/tally-dev/tally/engine/counters"
)

func setOpts(dir string) Options {
	o := testOpts(dir)
	o.Prefix = "like"
	return o
}

// newTestSet returns a set with small blocks, so that windows have many.
func newTestSet(t testing.TB, opts Options, limit int) *Set {
	t.Helper()
	s, err := NewSet("LIKE", opts)
	if err != nil {
		t.Fatal(err)
	}
	s.blockLimit = limit
	return s
}

type upair struct{ u, p uint64 }

// setStats sums a set's windows by form, for the tests' checks and the
// benchmarks' figures.
type setStats struct {
	openWindows, sealedWindows, coldWindows int
	sealedPairs, coldPairs                  int
	sealedBytes                             int // the sealed windows' images
	jobs                                    int
}

func statsOf(s *Set) setStats {
	st := setStats{jobs: s.jobs}
	for _, w := range s.wins {
		switch b := w.body.(type) {
		case *pairTable:
			st.openWindows++
		case *sealedWindow:
			st.sealedWindows++
			st.sealedPairs += b.records()
			st.sealedBytes += b.memoryBytes()
		case *coldWindow:
			st.coldWindows++
			st.coldPairs += b.records()
		}
	}
	return st
}

// randUser returns a user: mostly small ids, some hot, some wide (beyond
// the open table's narrow slots, and spanning 64 bits in a block).
func randUser(rng *rand.Rand) uint64 {
	switch rng.IntN(10) {
	case 0:
		return rng.Uint64()
	case 1:
		return math.MaxUint64 - rng.Uint64N(3)
	case 2, 3:
		return rng.Uint64N(4) // hot users
	}
	return rng.Uint64N(5000)
}

// randLikedPost returns a post: a few hot ones (whose likers span
// blocks), the rest spread over nWin windows.
func randLikedPost(rng *rand.Rand, hot []uint64, nWin int) uint64 {
	if rng.IntN(3) == 0 {
		return hot[rng.IntN(len(hot))]
	}
	return randID(rng, nWin)
}

// checkSet compares the set with the model: Len, KindOf and Has of every
// pair and of absent ones, KindsOf and HasMany pages, RangeKinds. forgot
// says that the set has forgotten posts, whose pairs count in Len until
// their window's rewrite.
func checkSet(t *testing.T, s *Set, model map[upair]counters.Kind, rng *rand.Rand, hot []uint64, nWin int, forgot bool) {
	t.Helper()
	// Forgotten pairs count until their window's rewrite drops them.
	if s.Len() != len(model) && (!forgot || s.Len() < len(model)) {
		t.Fatalf("Len %d, model %d", s.Len(), len(model))
	}
	var pairs []upair
	for q, want := range model {
		if kind, err := s.KindOf(q.u, q.p); err != nil || kind != want {
			t.Fatalf("KindOf(%d, %d) = %v %v, want %d", q.u, q.p, kind, err, want)
		}
		pairs = append(pairs, q)
	}
	for range 300 {
		q := upair{randUser(rng), randLikedPost(rng, hot, nWin+2)}
		if has, err := s.Has(q.u, q.p); err != nil || has != (model[q] != counters.NoKind) {
			t.Fatalf("Has(%d, %d) = %v %v, want %v", q.u, q.p, has, err, model[q])
		}
	}
	var out [300]counters.Kind
	var flags [300]bool
	for range 30 {
		user := randUser(rng)
		if len(pairs) > 0 && rng.IntN(2) == 0 {
			user = pairs[rng.IntN(len(pairs))].u
		}
		n := 1 + rng.IntN(len(out))
		page := make([]uint64, n)
		for i := range page {
			if len(pairs) > 0 && rng.IntN(2) == 0 {
				page[i] = pairs[rng.IntN(len(pairs))].p
			} else {
				page[i] = randLikedPost(rng, hot, nWin+2)
			}
		}
		switch rng.IntN(3) {
		case 0:
			slices.Sort(page)
		case 1:
			slices.Sort(page)
			slices.Reverse(page)
		}
		if err := s.KindsOf(user, page, out[:n]); err != nil {
			t.Fatal(err)
		}
		if err := s.HasMany(user, page, flags[:n]); err != nil {
			t.Fatal(err)
		}
		for i, p := range page {
			want := model[upair{user, p}]
			if out[i] != want || flags[i] != (want != counters.NoKind) {
				t.Fatalf("KindsOf[%d] (%d, %d) = %d (HasMany %v), want %d", i, user, p, out[i], flags[i], want)
			}
		}
	}
	seen := map[upair]bool{}
	if err := s.RangeKinds(func(u, p uint64, kind counters.Kind) bool {
		q := upair{u, p}
		if seen[q] || model[q] != kind {
			t.Fatalf("RangeKinds yields (%d, %d, %d): seen %v, the model has %d", u, p, kind, seen[q], model[q])
		}
		seen[q] = true
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if len(seen) != len(model) {
		t.Fatalf("RangeKinds yields %d pairs, model %d", len(seen), len(model))
	}
}

// TestSetModel drives a set and a map through random likes, reactions
// of other kinds, switches between kinds and unreactions, clock steps
// with maintenance (sealing, cooling by age or by the memory budget,
// compaction of sealed and cold windows, jobs whose windows take writes
// while they run, failed jobs), snapshots reloaded into a new set over
// the same cold files, LoadReactions and Collect, checking every answer.
// Seeds 0 and 1 are sets of likes (Add and Remove alone), the others
// reaction sets of 6 and 16 kinds.
func TestSetModel(t *testing.T) {
	for seed := range uint64(4) {
		t.Run("", func(t *testing.T) { runSetModel(t, seed, 4000) })
	}
}

func runSetModel(t *testing.T, seed uint64, steps int) {
	rng := rand.New(rand.NewPCG(seed, 7))
	dir := t.TempDir()
	opts := setOpts(dir)
	if seed%2 == 1 {
		opts.MemoryBudget = 2 << 10 // the budget, not age, sends windows to files
		opts.ColdAge = 0
	}
	limit := []int{3, 8, 0, 40}[seed]
	kinds := []int{1, 1, 6, counters.MaxKinds}[seed]
	s := newTestSet(t, opts, limit)
	model := map[upair]counters.Kind{}
	const nWin = 30
	hot := []uint64{randID(rng, nWin), randID(rng, nWin), randID(rng, 3)}
	clock := testEpoch
	var kept []string
	var pending []*Job
	pick := func() upair {
		q := upair{randUser(rng), randLikedPost(rng, hot, nWin)}
		if len(model) > 0 && rng.IntN(3) > 0 {
			for k := range model {
				return k
			}
		}
		return q
	}
	forgot := map[uint64]bool{}
	for step := range steps {
		switch r := rng.IntN(110); {
		case r >= 108:
			// A deleted post's pairs are forgotten.
			p := randLikedPost(rng, hot, nWin)
			if len(model) > 0 && rng.IntN(2) == 0 {
				for k := range model {
					p = k.p
					break
				}
			}
			s.Forget(p)
			forgot[p] = true
			for q := range model {
				if q.p == p {
					delete(model, q)
				}
			}
		case r >= 105:
			s.Scrub(randLikedPost(rng, hot, nWin))
		case r >= 100:
			if rng.IntN(8) != 0 {
				continue // a whole scan is costly: rarely
			}
			user := randUser(rng)
			if len(model) > 0 && rng.IntN(2) == 0 {
				for k := range model {
					user = k.u
					break
				}
			}
			checkScan(t, s, model, user, 1+rng.IntN(300))
		case r < 35:
			q := upair{randUser(rng), randLikedPost(rng, hot, nWin)}
			if forgot[q.p] {
				continue // a deleted post takes no more likes
			}
			added, err := s.Add(q.u, q.p)
			if err != nil {
				t.Fatal(err)
			}
			if added != (model[q] == counters.NoKind) {
				t.Fatalf("step %d: Add(%d, %d) = %v, the model has %d", step, q.u, q.p, added, model[q])
			}
			if added {
				model[q] = counters.Like
			}
		case r < 55:
			q := upair{randUser(rng), randLikedPost(rng, hot, nWin)}
			if rng.IntN(2) == 0 {
				q = pick() // a switch, mostly
			}
			if forgot[q.p] {
				continue // a deleted post takes no more reactions
			}
			kind := randKind(rng, kinds)
			was, err := s.React(q.u, q.p, kind)
			if err != nil {
				t.Fatal(err)
			}
			if was != model[q] {
				t.Fatalf("step %d: React(%d, %d, %d) = %d, the model has %d", step, q.u, q.p, kind, was, model[q])
			}
			model[q] = kind
		case r < 75:
			q := pick()
			was, err := s.Unreact(q.u, q.p)
			if err != nil {
				t.Fatal(err)
			}
			if was != model[q] {
				t.Fatalf("step %d: Unreact(%d, %d) = %d, the model has %d", step, q.u, q.p, was, model[q])
			}
			delete(model, q)
		case r < 85:
			clock = clock.Add(time.Duration(rng.IntN(1500)) * time.Millisecond)
			if rng.IntN(2) == 0 {
				if err := s.Maintain(clock); err != nil {
					t.Fatal(err)
				}
			} else {
				pending = append(pending, s.Plan(clock)...)
			}
		case r < 90:
			for _, j := range pending {
				if rng.IntN(8) == 0 {
					// A job that fails (its file's directory is gone
					// for it): the window stays as it was.
					j.err, j.ran = os.ErrPermission, true
					if err := s.Finish(j); err == nil {
						t.Fatal("a failed job finished without its error")
					}
					continue
				}
				if err := j.Run(); err != nil {
					t.Fatal(err)
				}
				if err := j.Finish(); err != nil {
					t.Fatal(err)
				}
			}
			pending = nil
		case r < 94:
			var buf bytes.Buffer
			if _, err := s.WriteTo(&buf); err != nil {
				t.Fatal(err)
			}
			kept = s.Files()
			for _, j := range pending {
				j.Run()
				s.Finish(j)
			}
			pending = nil
			if err := s.Collect(kept); err != nil {
				t.Fatal(err)
			}
			s.Close()
			s = newTestSet(t, opts, limit)
			if err := s.Load(&buf); err != nil {
				t.Fatalf("step %d: Load: %v", step, err)
			}
		case r < 96:
			// A reload through LoadReactions, in RangeKinds' order or
			// shuffled.
			var all []Reaction
			if err := s.RangeKinds(func(u, p uint64, kind counters.Kind) bool {
				all = append(all, Reaction{User: u, Post: p, Kind: kind})
				return true
			}); err != nil {
				t.Fatal(err)
			}
			if rng.IntN(2) == 0 {
				rng.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
			}
			for _, j := range pending {
				j.Run()
				s.Finish(j)
			}
			pending = nil
			s.Close()
			s = newTestSet(t, opts, limit)
			if err := s.LoadReactions(func(yield func(Reaction) bool) {
				for _, q := range all {
					if !yield(q) || !yield(q) { // duplicates are ignored
						return
					}
				}
			}, clock); err != nil {
				t.Fatal(err)
			}
		default:
			if len(pending) == 0 {
				if err := s.Collect(kept); err != nil {
					t.Fatal(err)
				}
			}
		}
		if step%400 == 0 {
			checkSet(t, s, model, rng, hot, nWin, len(forgot) > 0)
		}
	}
	for _, j := range pending {
		j.Run()
		if err := s.Finish(j); err != nil {
			t.Fatal(err)
		}
	}
	checkSet(t, s, model, rng, hot, nWin, len(forgot) > 0)
	if err := s.Maintain(clock.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	checkSet(t, s, model, rng, hot, nWin, len(forgot) > 0)
	st := statsOf(s)
	if st.coldWindows == 0 || st.openWindows != 0 {
		t.Fatalf("at the end %+v; want every window cold or sealed, some cold", st)
	}
	if err := s.VerifyFiles(); err != nil {
		t.Fatal(err)
	}
	checkCollect(t, s, dir)
	checkSet(t, s, model, rng, hot, nWin, len(forgot) > 0)
	s.Close()
}

// TestSetHasManyAllocs: a page read (HasMany, KindsOf) allocates
// nothing, from open, sealed and cold windows (cached or not) with kinds
// and deltas over them.
func TestSetHasManyAllocs(t *testing.T) {
	for _, policy := range []string{"open", "sealed", "cold", "cold-nocache"} {
		opts := setOpts("")
		switch policy {
		case "open":
			opts.OpenAge = time.Hour
		case "sealed":
			opts.OpenAge = -1
		default:
			opts.Dir, opts.OpenAge, opts.ColdAge = t.TempDir(), -1, time.Nanosecond
			if policy == "cold-nocache" {
				opts.ColdCacheBytes = -1
			}
		}
		s := newTestSet(t, opts, 0)
		rng := rand.New(rand.NewPCG(4, 4))
		var posts []uint64
		for range 20000 {
			p := randID(rng, 3)
			s.React(rng.Uint64N(50), p, randKind(rng, 6))
			posts = append(posts, p)
		}
		if err := s.Maintain(testEpoch.Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
		for _, p := range posts[:20] { // a delta on sealed and cold windows
			s.Add(3, p)
			s.React(5, p, 4)
			s.Remove(4, p)
		}
		page := slices.Clone(posts[100:150])
		slices.Sort(page)
		slices.Reverse(page)
		var out [50]bool
		s.HasMany(3, page, out[:])
		if n := testing.AllocsPerRun(50, func() {
			if err := s.HasMany(3, page, out[:]); err != nil {
				t.Fatal(err)
			}
		}); n != 0 && !(raceOn && policy == "cold-nocache") {
			t.Errorf("%s: HasMany allocates %v times a page", policy, n)
		}
		var kinds [50]counters.Kind
		if n := testing.AllocsPerRun(50, func() {
			if err := s.KindsOf(5, page, kinds[:]); err != nil {
				t.Fatal(err)
			}
		}); n != 0 && !(raceOn && policy == "cold-nocache") {
			t.Errorf("%s: KindsOf allocates %v times a page", policy, n)
		}
		if n := testing.AllocsPerRun(50, func() {
			if _, err := s.Has(3, page[7]); err != nil {
				t.Fatal(err)
			}
		}); n != 0 && !(raceOn && policy == "cold-nocache") {
			t.Errorf("%s: Has allocates %v times", policy, n)
		}
		s.Close()
	}
}

// TestSetLoadPairsMerge: an old window loaded in parts is merged into
// its sealed body each time, and the arena packs the windows it holds
// (regions moved, reads unchanged, MemoryBytes counting them once).
func TestSetLoadPairsMerge(t *testing.T) {
	s := newTestSet(t, setOpts(""), 0)
	rng := rand.New(rand.NewPCG(5, 5))
	model := map[upair]counters.Kind{}
	now := testEpoch.Add(time.Hour)
	for part := range 6 {
		var batch []upair
		for range 30000 {
			q := upair{rng.Uint64N(1 << 20), randID(rng, 40)}
			batch = append(batch, q)
			model[q] = counters.Like
		}
		if err := s.LoadPairs(func(yield func(uint64, uint64) bool) {
			for _, q := range batch {
				if !yield(q.u, q.p) {
					return
				}
			}
		}, now); err != nil {
			t.Fatal(err)
		}
		if st := statsOf(s); st.openWindows != 0 || st.sealedPairs != len(model) {
			t.Fatalf("part %d: %+v, model %d", part, st, len(model))
		}
	}
	if len(s.arena.closed) != 0 {
		t.Fatalf("%d full chunks left unpacked", len(s.arena.closed))
	}
	var live int64
	for _, w := range s.wins {
		live += int64(w.body.(*sealedWindow).memoryBytes())
	}
	if got := s.arena.size(); got < live || got > live+chunkBytes {
		t.Fatalf("arena counts %d bytes for %d live", got, live)
	}
	checkSet(t, s, model, rng, []uint64{randID(rng, 40)}, 40, false)
}

// TestSetJobAcrossLoad: jobs planned before a Load are dropped by Finish
// with their files, the set reads as the image says, and images of other
// windows, of a post table or of another set are refused.
func TestSetJobAcrossLoad(t *testing.T) {
	dir := t.TempDir()
	opts := setOpts(dir)
	opts.OpenAge, opts.ColdAge = -1, time.Nanosecond
	s := newTestSet(t, opts, 8)
	rng := rand.New(rand.NewPCG(10, 10))
	model := map[upair]counters.Kind{}
	hot := []uint64{randID(rng, 3)}
	for range 500 {
		q := upair{randUser(rng), randLikedPost(rng, hot, 3)}
		s.Add(q.u, q.p)
		model[q] = counters.Like
	}
	var snap bytes.Buffer
	s.WriteTo(&snap) // every window open
	dropJobsAcrossLoad(t, s, snap.Bytes(), s.Stats, dir, func() {
		s.Add(1, hot[0]) // after the image: gone with the Load
	})
	checkSet(t, s, model, rng, hot, 3, false)
	if err := s.Maintain(testEpoch.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if st := statsOf(s); st.coldWindows == 0 || st.jobs != 0 {
		t.Fatalf("after Maintain: %+v", st)
	}
	checkSet(t, s, model, rng, hot, 3, false)
	other := setOpts("")
	other.WindowMillis = 2000
	o, _ := NewSet("LIKE", other)
	if err := o.Load(bytes.NewReader(snap.Bytes())); err == nil {
		t.Fatal("Load of an image of other windows")
	}
	p, _ := NewPosts(testOpts(""))
	if err := p.Load(bytes.NewReader(snap.Bytes())); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a post table loaded a set's image: %v", err)
	}
	var pimg bytes.Buffer
	p.WriteTo(&pimg)
	o2, _ := NewSet("LIKE", setOpts(""))
	if err := o2.Load(bytes.NewReader(pimg.Bytes())); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a set loaded a post table's image: %v", err)
	}
	if _, err := NewSet("LIKES", opts); err == nil {
		t.Fatal("a 5-byte tag")
	}
}

// randKind returns a reaction kind among the first kinds: mostly likes,
// the others rarer the higher their id, as a deployment's mix is.
func randKind(rng *rand.Rand, kinds int) counters.Kind {
	if kinds <= 1 || rng.IntN(4) > 0 {
		return counters.Like
	}
	return counters.Kind(2 + min(rng.IntN(kinds-1), rng.IntN(kinds-1)))
}

// TestPairTableKinds drives a pair table through inserts, kind changes
// and removals of users narrow and wide and kinds that widen its kind
// bits, against a map.
func TestPairTableKinds(t *testing.T) {
	for run := range 8 {
		kinds := []int{1, 2, 6, counters.MaxKinds}[run%4]
		rng := rand.New(rand.NewPCG(uint64(run), 9))
		tb := newPairTable(32, 0)
		model := map[upair]counters.Kind{}
		for step := range 20000 {
			q := upair{randUser(rng), rng.Uint64N(1 << 20)}
			if run >= 4 {
				// Users that fit a narrow slot until kind bits squeeze
				// them out: the table must widen then.
				q.u = rng.Uint64N(1000)
				if rng.IntN(50) == 0 {
					q.u = 1<<(96-33-rng.IntN(5)) - 1 - rng.Uint64N(3)
				}
			}
			if len(model) > 0 && rng.IntN(2) == 0 {
				for k := range model {
					q = k
					break
				}
			}
			switch rng.IntN(3) {
			case 0:
				if was := tb.remove(q.u, q.p); was != model[q] {
					t.Fatalf("kinds %d step %d: remove %v = %d, want %d", kinds, step, q, was, model[q])
				}
				delete(model, q)
			default:
				kind := randKind(rng, kinds)
				if run >= 4 && rng.IntN(200) > 0 {
					kind = counters.Like // kind bits grow late, over wide users
				}
				if was := tb.put(q.u, q.p, kind); was != model[q] {
					t.Fatalf("kinds %d step %d: put %v = %d, want %d", kinds, step, q, was, model[q])
				}
				model[q] = kind
			}
			if tb.len() != len(model) {
				t.Fatalf("kinds %d step %d: len %d, want %d", kinds, step, tb.len(), len(model))
			}
		}
		for q, want := range model {
			if got := tb.kindOf(q.u, q.p); got != want {
				t.Fatalf("kinds %d: kindOf %v = %d, want %d (stride %d kb %d)", kinds, q, got, want, tb.stride, tb.kb)
			}
		}
		n := 0
		tb.each(func(u, k uint64, kind counters.Kind) bool {
			if model[upair{u, k}] != kind {
				t.Fatalf("kinds %d: each yields %d %d %d, the model has %d", kinds, u, k, kind, model[upair{u, k}])
			}
			n++
			return true
		})
		if n != len(model) {
			t.Fatalf("kinds %d: each yields %d, want %d", kinds, n, len(model))
		}
	}
}

// scanAll runs the scans plan makes from the start of a table to its end,
// as an erasure does, checking that the cursor only moves forward, and
// returns the candidates that holds (checked under no lock: the tests
// run one goroutine).
func scanAll(t *testing.T, plan func(Cursor) *Scan, holds func(id uint64) bool) []uint64 {
	t.Helper()
	var got []uint64
	var cur Cursor
	for steps := 0; ; steps++ {
		if steps > 1<<20 {
			t.Fatal("the scan makes no progress")
		}
		sc := plan(cur)
		if err := sc.Run(); err != nil {
			t.Fatal(err)
		}
		found, next, done, err := sc.Finish()
		if err != nil {
			t.Fatal(err)
		}
		if next.Post < cur.Post || (next.Post == cur.Post && next.User < cur.User) {
			t.Fatalf("the scan went back from %+v to %+v", cur, next)
		}
		for _, id := range found {
			if holds(id) {
				got = append(got, id)
			}
		}
		cur = next
		if done {
			return got
		}
	}
}

// checkScan scans the whole set for user's pairs, limit pairs a step, as
// an erasure does, and compares the candidates that hold (Has) with the
// model.
func checkScan(t *testing.T, s *Set, model map[upair]counters.Kind, user uint64, limit int) {
	t.Helper()
	got := scanAll(t, func(cur Cursor) *Scan { return s.PlanScan(user, cur, limit) }, func(p uint64) bool {
		has, err := s.Has(user, p)
		if err != nil {
			t.Fatal(err)
		}
		return has
	})
	slices.Sort(got)
	got = slices.Compact(got)
	var want []uint64
	for q := range model {
		if q.u == user {
			want = append(want, q.p)
		}
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("scan of user %d found %v, want %v", user, got, want)
	}
}
