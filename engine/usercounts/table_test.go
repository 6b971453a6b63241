package usercounts

import (
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tally-dev/tally/engine/tier"
)

// modelHarness runs a Table against a plain map, with the locking of the
// engine: reads under mu's read lock, writes, plans and finishes under
// its write lock, and a fold job's Run under no lock on its own goroutine
// while a reader goroutine keeps checking Get against the model.
type modelHarness struct {
	t     *testing.T
	rng   *rand.Rand
	mu    sync.RWMutex
	tab   *Table
	model map[uint64]int64
	next  uint64   // an increasing id: new users above all others
	pool  []uint64 // sparse 64-bit ids, revisited

	job     tier.Work
	ran     chan struct{} // closed when the job's Run returned; nil if not started
	readers sync.WaitGroup
	stopRd  chan struct{}
	folds   int

	view     *Table           // Freeze's, until Thaw
	atFreeze map[uint64]int64 // the model when it was frozen
	freezes  int
}

func newModelHarness(t *testing.T, seed uint64, minFold int) *modelHarness {
	h := &modelHarness{
		t: t, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		tab: New(0), model: map[uint64]int64{}, next: 1 << 40,
	}
	h.tab.minFold = minFold
	for range 200 {
		h.pool = append(h.pool, h.rng.Uint64())
	}
	return h
}

func (h *modelHarness) id() uint64 {
	switch r := h.rng.IntN(100); {
	case r < 30:
		return h.rng.Uint64N(700) // dense, several blocks
	case r < 45:
		return h.pool[h.rng.IntN(len(h.pool))]
	case r < 52:
		return []uint64{0, 1, math.MaxUint64, math.MaxUint64 - 1, 1 << 63, 1<<32 - 1, 1 << 32}[h.rng.IntN(7)]
	case r < 67:
		h.next += 1 + h.rng.Uint64N(3)
		return h.next
	case r < 72:
		// Just under recent increasing ids: lands inside a tail.
		return h.next - h.rng.Uint64N(40)
	default:
		for u := range h.model { // an existing user, if any
			return u
		}
		return h.rng.Uint64()
	}
}

func (h *modelHarness) count() int64 {
	switch r := h.rng.IntN(100); {
	case r < 70:
		return h.rng.Int64N(100)
	case r < 85:
		return 1<<32 + h.rng.Int64N(1<<20) - 1<<10 // around 2^32
	case r < 95:
		return h.rng.Int64N(1 << 50)
	default:
		return math.MaxInt64 - h.rng.Int64N(3)
	}
}

// check compares u in the table and the model; call it holding mu.
func (h *modelHarness) check(u uint64, when string) {
	want, wantOK := h.model[u]
	got, ok := h.tab.Get(u)
	if ok != wantOK || got != want {
		h.t.Fatalf("%s: Get(%d) = %d, %v; model %d, %v", when, u, got, ok, want, wantOK)
	}
	if h.tab.Has(u) != wantOK {
		h.t.Fatalf("%s: Has(%d) = %v; model %v", when, u, !wantOK, wantOK)
	}
}

// full checks Len, Range and every user; call it holding mu.
func (h *modelHarness) full(when string) {
	if h.tab.Len() != len(h.model) {
		h.t.Fatalf("%s: Len = %d, model %d", when, h.tab.Len(), len(h.model))
	}
	want := make([]uint64, 0, len(h.model))
	for u := range h.model {
		want = append(want, u)
	}
	slices.Sort(want)
	i := 0
	h.tab.Range(func(u uint64, v int64) bool {
		if i >= len(want) || u != want[i] || v != h.model[u] {
			var w string
			if i < len(want) {
				w = fmt.Sprintf("%d=%d", want[i], h.model[want[i]])
			}
			h.t.Fatalf("%s: Range entry %d is %d=%d, model %s", when, i, u, v, w)
		}
		i++
		return true
	})
	if i != len(want) {
		h.t.Fatalf("%s: Range gave %d entries, model %d", when, i, len(want))
	}
	for _, u := range want {
		h.check(u, when)
	}
	h.checkMany(want, when)
	if len(want) > 0 && h.tab.MemoryBytes() <= 0 {
		h.t.Fatalf("%s: MemoryBytes = %d with %d users", when, h.tab.MemoryBytes(), len(want))
	}
}

// checkMany compares GetMany with the model over users, each followed by
// its successor (most of them without a count), in descending order
// (GetMany must not lean on sorted input); call it holding mu.
func (h *modelHarness) checkMany(users []uint64, when string) {
	var qs []uint64
	for i := len(users) - 1; i >= 0; i-- {
		qs = append(qs, users[i], users[i]+1)
	}
	got := make([]int64, len(qs)+1)
	got[len(qs)] = -7 // past len(us): left alone
	h.tab.GetMany(qs, got)
	for i, u := range qs {
		if got[i] != h.model[u] {
			h.t.Fatalf("%s: GetMany gave %d for %d (query %d of %d); model %d", when, got[i], u, i, len(qs), h.model[u])
		}
	}
	if got[len(qs)] != -7 {
		h.t.Fatalf("%s: GetMany wrote past its users", when)
	}
}

// startReader checks random ids against the model under the read lock
// until stopReaders, so that reads overlap a running job.
func (h *modelHarness) startReader(seed uint64) {
	h.readers.Add(1)
	rng := rand.New(rand.NewPCG(seed, 7))
	pool := h.pool
	go func() {
		defer h.readers.Done()
		for {
			select {
			case <-h.stopRd:
				return
			default:
			}
			h.mu.RLock()
			var qs [40]uint64
			for i := range 50 {
				u := rng.Uint64N(700)
				if rng.IntN(2) == 0 {
					u = pool[rng.IntN(len(pool))]
				}
				want, wantOK := h.model[u]
				if got, ok := h.tab.Get(u); ok != wantOK || got != want {
					h.t.Errorf("reader: Get(%d) = %d, %v; model %d, %v", u, got, ok, want, wantOK)
				}
				qs[i%len(qs)] = u
			}
			many := make([]int64, len(qs))
			h.tab.GetMany(qs[:], many)
			for i, u := range qs[:] {
				if many[i] != h.model[u] {
					h.t.Errorf("reader: GetMany gave %d for %d; model %d", many[i], u, h.model[u])
				}
			}
			h.mu.RUnlock()
		}
	}()
}

func (h *modelHarness) plan() {
	h.mu.Lock()
	jobs := h.tab.PlanWork(time.Now())
	h.mu.Unlock()
	if h.job != nil {
		if jobs != nil {
			h.t.Fatalf("PlanWork returned %d jobs while one is out", len(jobs))
		}
		return
	}
	if len(jobs) == 0 {
		return
	}
	if len(jobs) != 1 || jobs[0].What() == "" {
		h.t.Fatalf("PlanWork returned %d jobs (What %q)", len(jobs), jobs[0].What())
	}
	h.job, h.folds = jobs[0], h.folds+1
	if h.rng.IntN(10) == 0 {
		return // finished without Run
	}
	h.ran = make(chan struct{})
	h.stopRd = make(chan struct{})
	h.startReader(h.rng.Uint64())
	go func(j tier.Work, ran chan struct{}) {
		defer close(ran)
		if err := j.Run(); err != nil {
			h.t.Errorf("Run: %v", err)
		}
	}(h.job, h.ran)
}

func (h *modelHarness) finish() {
	if h.job == nil {
		return
	}
	if h.ran != nil {
		<-h.ran
		close(h.stopRd)
		h.readers.Wait()
	}
	h.mu.Lock()
	if err := h.job.Finish(); err != nil {
		h.t.Fatalf("Finish: %v", err)
	}
	h.full("after Finish")
	h.mu.Unlock()
	h.job, h.ran = nil, nil
}

func (h *modelHarness) step() {
	r := h.rng.IntN(1000)
	switch {
	case r < 300:
		u := h.id()
		cur := h.model[u]
		d := h.rng.Int64N(200) - 100
		switch h.rng.IntN(10) {
		case 0:
			d = 1 << 33
		case 1:
			d = -cur
		}
		d = max(d, -cur)
		if d > 0 && cur > math.MaxInt64-d {
			d = 0
		}
		h.mu.Lock()
		_, had := h.model[u]
		if created := h.tab.Add(u, d); created == had {
			h.t.Errorf("Add(%d, %d) created=%v, but the model had the user: %v", u, d, created, had)
		}
		h.model[u] = cur + d
		h.check(u, "after Add")
		h.mu.Unlock()
	case r < 450:
		u, v := h.id(), h.count()
		h.mu.Lock()
		h.tab.Set(u, v)
		h.model[u] = v
		h.check(u, "after Set")
		h.mu.Unlock()
	case r < 620:
		u := h.id()
		h.mu.Lock()
		h.tab.Delete(u)
		delete(h.model, u)
		h.check(u, "after Delete")
		h.mu.Unlock()
	case r < 850:
		h.mu.RLock()
		h.check(h.id(), "Get")
		if h.tab.Len() != len(h.model) {
			h.t.Fatalf("Len = %d, model %d", h.tab.Len(), len(h.model))
		}
		h.mu.RUnlock()
	case r < 920:
		h.plan()
	case r < 970:
		h.finish()
	case r < 975:
		h.mu.Lock()
		h.tab.Compact()
		h.full("after Compact")
		h.mu.Unlock()
		// A job out (maybe running now) is stale: its Finish must
		// install nothing, which finish's full check verifies.
		h.finish()
	case r < 978:
		h.mu.RLock()
		h.stopEarly()
		h.mu.RUnlock()
	case r < 986:
		h.freezeOrThaw()
	default:
		h.mu.RLock()
		h.full("full check")
		h.mu.RUnlock()
	}
}

// freezeOrThaw freezes the table when no job is out, or checks the
// frozen view against the model at the freeze and thaws it.
func (h *modelHarness) freezeOrThaw() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.view == nil {
		v, err := h.tab.Freeze()
		if (err == nil) != (h.job == nil) {
			h.t.Fatalf("Freeze with job %v: %v", h.job != nil, err)
		}
		if err == nil {
			h.view, h.atFreeze = v, maps.Clone(h.model)
			h.freezes++
		}
		return
	}
	h.checkView()
	h.tab.Thaw()
	h.view = nil
	h.full("after Thaw")
}

// checkView compares the frozen view with the model at the freeze.
func (h *modelHarness) checkView() {
	v, model := h.view, h.atFreeze
	if v.Len() != len(model) {
		h.t.Fatalf("view: Len = %d, model at the freeze %d", v.Len(), len(model))
	}
	n := 0
	v.Range(func(u uint64, c int64) bool {
		if want, ok := model[u]; !ok || want != c {
			h.t.Fatalf("view: Range gave %d=%d, model at the freeze %d, %v", u, c, want, ok)
		}
		n++
		return true
	})
	if n != len(model) {
		h.t.Fatalf("view: Range gave %d entries, model at the freeze %d", n, len(model))
	}
	for u, want := range model {
		if got, ok := v.Get(u); !ok || got != want {
			h.t.Fatalf("view: Get(%d) = %d, %v; want %d", u, got, ok, want)
		}
	}
}

// stopEarly checks that Range stops when fn returns false.
func (h *modelHarness) stopEarly() {
	stop := h.rng.IntN(len(h.model) + 1)
	calls := 0
	h.tab.Range(func(uint64, int64) bool {
		calls++
		return calls <= stop
	})
	if want := min(stop+1, len(h.model)); calls != want {
		h.t.Fatalf("Range returning false after %d calls made %d calls, want %d", stop+1, calls, want)
	}
}

func TestModel(t *testing.T) {
	steps := 30000
	if testing.Short() {
		steps = 5000
	}
	for seed := range uint64(6) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			h := newModelHarness(t, seed, []int{1, 4, 16, 64, 256, 4096}[seed])
			for range steps {
				h.step()
			}
			h.finish()
			if h.view != nil {
				h.freezeOrThaw()
			}
			if h.freezes == 0 {
				t.Fatal("never frozen")
			}
			h.mu.Lock()
			h.full("end")
			h.tab.Compact()
			h.full("end, compacted")
			h.mu.Unlock()
			if seed < 5 && h.folds == 0 {
				t.Fatalf("no fold job ran")
			}
		})
	}
}

// TestCompactWhileJobOut checks that a job that Compact made stale
// installs nothing: its result would lack the writes Compact folded.
func TestCompactWhileJobOut(t *testing.T) {
	tab := New(0)
	tab.minFold = 1
	for u := range uint64(100) {
		tab.Set(u, int64(u))
	}
	jobs := tab.PlanWork(time.Now())
	if len(jobs) != 1 {
		t.Fatalf("PlanWork gave %d jobs", len(jobs))
	}
	tab.Set(500, 5)
	tab.Delete(3)
	tab.Compact()
	for u := uint64(1000); u < 1020; u++ {
		tab.Set(u, 70) // past the fold threshold, 101/16
	}
	tab.Set(7, 70)
	if err := jobs[0].Run(); err != nil {
		t.Fatal(err)
	}
	if err := jobs[0].Finish(); err != nil {
		t.Fatal(err)
	}
	for u, want := range map[uint64]int64{500: 5, 7: 70, 99: 99} {
		if v, ok := tab.Get(u); !ok || v != want {
			t.Errorf("Get(%d) = %d, %v; want %d", u, v, ok, want)
		}
	}
	if tab.Has(3) || tab.Len() != 120 {
		t.Errorf("Has(3) = %v, Len = %d; want false, 120", tab.Has(3), tab.Len())
	}
	if jobs := tab.PlanWork(time.Now()); len(jobs) != 1 {
		t.Errorf("PlanWork after a stale job's Finish gave %d jobs, want 1", len(jobs))
	}
}

func TestEmpty(t *testing.T) {
	tab := New(100)
	for _, u := range []uint64{0, 1, math.MaxUint64} {
		if v, ok := tab.Get(u); ok || v != 0 || tab.Has(u) {
			t.Errorf("empty: Get(%d) = %d, %v", u, v, ok)
		}
	}
	tab.Delete(5)
	tab.Range(func(u uint64, v int64) bool { t.Errorf("empty Range gave %d=%d", u, v); return true })
	if tab.Len() != 0 || tab.PlanWork(time.Now()) != nil {
		t.Errorf("empty: Len %d, or a job planned", tab.Len())
	}
	tab.Compact()
	if tab.Len() != 0 {
		t.Errorf("empty after Compact: Len %d", tab.Len())
	}
	if tab.Collect(nil) != nil || tab.Files() != nil {
		t.Errorf("Collect or Files not empty")
	}
}

// TestBlocks checks lookups at block boundaries of packed parts of
// several sizes, each compacted: first and last users of a block, ids
// between and beyond them, widths from 0 bits to 64.
func TestBlocks(t *testing.T) {
	for _, n := range []int{1, 2, 63, 64, 65, 127, 128, 129, 1000} {
		for _, spread := range []string{"dense", "step3", "wide"} {
			t.Run(fmt.Sprint(n, spread), func(t *testing.T) {
				ids := make([]uint64, n)
				for i := range ids {
					switch spread {
					case "dense":
						ids[i] = uint64(i)
					case "step3":
						ids[i] = 10 + 3*uint64(i)
					case "wide":
						ids[i] = uint64(i) * (math.MaxUint64 / uint64(max(n-1, 1)))
					}
				}
				tab := New(n)
				for i, u := range ids {
					tab.Set(u, int64(i%5)*int64(i)<<28) // zeros, small and past 2^32
				}
				tab.Compact()
				if tab.live.size() != 0 || tab.packed.n != n {
					t.Fatalf("after Compact: overlay %d, packed %d", tab.live.size(), tab.packed.n)
				}
				for i, u := range ids {
					if v, ok := tab.Get(u); !ok || v != int64(i%5)*int64(i)<<28 {
						t.Fatalf("Get(%d) = %d, %v; want %d", u, v, ok, int64(i%5)*int64(i)<<28)
					}
					if u > 0 && (i == 0 || ids[i-1] != u-1) && tab.Has(u-1) {
						t.Fatalf("Has(%d) for an id never set", u-1)
					}
					if u < math.MaxUint64 && (i == n-1 || ids[i+1] != u+1) && tab.Has(u+1) {
						t.Fatalf("Has(%d) for an id never set", u+1)
					}
				}
				if got := tab.packed.maxID(); got != ids[n-1] {
					t.Fatalf("maxID = %d, want %d", got, ids[n-1])
				}
				i := 0
				tab.Range(func(u uint64, v int64) bool {
					if u != ids[i] {
						t.Fatalf("Range entry %d is %d, want %d", i, u, ids[i])
					}
					i++
					return i < 65 // stops after 65, in the second block
				})
				if i != min(n, 65) {
					t.Fatalf("Range stopped after %d entries, want %d", i, min(n, 65))
				}
			})
		}
	}
}

// TestExtremeIDs puts 0 and MaxUint64 in one block (a 64-bit id width).
func TestExtremeIDs(t *testing.T) {
	tab := New(0)
	tab.Set(math.MaxUint64, math.MaxInt64)
	tab.Set(0, 0)
	tab.Set(1<<63, 1<<40)
	tab.Compact()
	for u, want := range map[uint64]int64{0: 0, 1 << 63: 1 << 40, math.MaxUint64: math.MaxInt64} {
		if v, ok := tab.Get(u); !ok || v != want {
			t.Errorf("Get(%d) = %d, %v; want %d", u, v, ok, want)
		}
	}
	for _, u := range []uint64{1, 1<<63 - 1, 1<<63 + 1, math.MaxUint64 - 1} {
		if tab.Has(u) {
			t.Errorf("Has(%d)", u)
		}
	}
	tab.Add(math.MaxUint64, -1)
	tab.Delete(0)
	if v, _ := tab.Get(math.MaxUint64); v != math.MaxInt64-1 || tab.Has(0) || tab.Len() != 2 {
		t.Errorf("after Add and Delete: %d, Has(0) %v, Len %d", v, tab.Has(0), tab.Len())
	}
}

// TestNegativePanics checks that a count driven below 0 (or past
// MaxInt64) panics and leaves the count as it was.
func TestNegativePanics(t *testing.T) {
	tab := New(0)
	tab.Set(7, 3)
	tab.Set(8, math.MaxInt64)
	tab.Compact()
	tab.Set(9, 1) // in the overlay
	for _, c := range []struct {
		what string
		do   func()
	}{
		{"Add below 0 (packed)", func() { tab.Add(7, -4) }},
		{"Add below 0 (overlay)", func() { tab.Add(9, -2) }},
		{"Add below 0 (new user)", func() { tab.Add(10, -1) }},
		{"Add past MaxInt64", func() { tab.Add(8, 1) }},
		{"Set below 0", func() { tab.Set(7, -1) }},
	} {
		func() {
			defer func() {
				if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "usercounts:") {
					t.Errorf("%s: recovered %v, want a usercounts panic", c.what, r)
				}
			}()
			c.do()
		}()
	}
	for u, want := range map[uint64]int64{7: 3, 8: math.MaxInt64, 9: 1} {
		if v, ok := tab.Get(u); !ok || v != want {
			t.Errorf("Get(%d) = %d, %v after the panics; want %d", u, v, ok, want)
		}
	}
	if tab.Has(10) || tab.Len() != 3 {
		t.Errorf("Has(10) %v, Len %d after the panics", tab.Has(10), tab.Len())
	}
}

// TestLoadGoesToTail checks the load path: Set in increasing id order
// appends to the tail (no hashing), and Compact leaves a packed part only.
func TestLoadGoesToTail(t *testing.T) {
	tab := New(0)
	for u := range uint64(10000) {
		tab.Set(u*7, int64(u))
	}
	if tab.live.m.Len() != 0 || len(tab.live.tail) != 10000 {
		t.Fatalf("load: %d users hashed, %d in the tail; want 0, 10000", tab.live.m.Len(), len(tab.live.tail))
	}
	tab.Set(7*5000+1, 1) // inside the tail: spills its front into m
	if tab.live.m.Len() != 5002 || len(tab.live.tail) != 4999 {
		t.Fatalf("spill: %d hashed, %d in the tail; want 5002, 4999", tab.live.m.Len(), len(tab.live.tail))
	}
	tab.Compact()
	if tab.live.size() != 0 || tab.packed.n != 10001 || tab.Len() != 10001 {
		t.Fatalf("Compact: overlay %d, packed %d, Len %d", tab.live.size(), tab.packed.n, tab.Len())
	}
	if v, _ := tab.Get(7*5000 + 1); v != 1 {
		t.Fatalf("Get(35001) = %d", v)
	}
}
