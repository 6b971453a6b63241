package registry

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/tally-dev/tally/engine/cold"
)

// coldRegistry fills a registry whose windows past 20 days are cold.
func coldRegistry(t testing.TB, opts Options, posts int) (*Registry, map[uint64]uint64) {
	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}
	if opts.ColdAge == 0 {
		opts.ColdAge = 20 * day
	}
	r, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	model := map[uint64]uint64{}
	rng := rand.New(rand.NewPCG(21, 22))
	for range posts {
		id := idAt(now.Add(-time.Duration(rng.Int64N(int64(40*day)))), rng.Uint64N(1024), rng.Uint64N(16))
		a := rng.Uint64N(1 << 30)
		r.Put(id, a)
		model[id] = a
	}
	if err := r.Maintain(now); err != nil {
		t.Fatal(err)
	}
	if r.Stats().ColdWindows == 0 {
		t.Fatal("no cold window")
	}
	return r, model
}

// TestColdCompaction: late registrations into a cold window wait in its
// open table, then a compaction writes the next generation of its file
// and deletes the old one — also when a snapshot holding the old file is
// written after the swap.
func TestColdCompaction(t *testing.T) {
	r, model := coldRegistry(t, Options{CompactMin: 20}, 5000)
	defer r.Close()
	files := r.Files()
	cw := r.wins[0]
	if cw.cold == nil {
		t.Fatal("oldest window not cold")
	}
	old := cw.cold.path
	rng := rand.New(rand.NewPCG(1, 2))
	for range cw.cold.n/8 + 20 {
		id := cw.lo + rng.Uint64N(cw.last-cw.lo)
		r.Put(id, 7)
		model[id] = 7
	}
	var ids []uint64
	for id := range model {
		ids = append(ids, id)
	}
	check(t, r, model, ids)
	snap := r.Snapshot()
	j := r.Plan(now)
	if j == nil || j.kind != "compact" || !j.toFile || j.w != cw {
		t.Fatalf("planned %v", j)
	}
	// Readers and writers carry on while it runs.
	if err := j.Run(); err != nil {
		t.Fatal(err)
	}
	r.Put(cw.lo+5, 8)
	model[cw.lo+5] = 8
	ids = append(ids, cw.lo+5)
	check(t, r, model, ids)
	if err := j.Finish(); err != nil {
		t.Fatal(err)
	}
	check(t, r, model, ids)
	if cw.cold.path == old {
		t.Fatal("compaction kept the file name")
	}
	if _, err := os.Stat(old); err != nil {
		t.Fatal("the superseded file went while a snapshot holds it")
	}
	var img bytes.Buffer
	if _, err := snap.WriteTo(&img); err != nil {
		t.Fatal(err)
	}
	snap.Close()
	if _, err := os.Stat(old); !os.IsNotExist(err) {
		t.Fatalf("superseded file still there: %v", err)
	}
	checkDir(t, r, r.opts.Dir)
	if len(r.Files()) != len(files) {
		t.Fatalf("%d files, then %d", len(files), len(r.Files()))
	}
}

// TestColdCorruptBlock flips every byte of one cold file's blocks in turn:
// every lookup of the file's posts then errs (ErrCorrupt) or answers
// right, never a wrong author; Range and WriteTo refuse the file.
func TestColdCorruptBlock(t *testing.T) {
	r, model := coldRegistry(t, Options{ColdCacheBytes: -1}, 2000)
	defer r.Close()
	var cw *window
	for _, w := range r.wins {
		if w.cold != nil && len(w.cold.firsts) >= 1 {
			cw = w
			break
		}
	}
	cf := cw.cold
	var ids []uint64
	for id := range model {
		if id >= cw.lo && id <= cw.last {
			ids = append(ids, id, id+1)
		}
	}
	orig, err := os.ReadFile(cf.path)
	if err != nil {
		t.Fatal(err)
	}
	fh, err := os.OpenFile(cf.path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	errs := 0
	authors := make([]uint64, len(ids))
	found := make([]bool, len(ids))
	for off := int(cf.offs[0]); off < int(cf.offs[len(cf.offs)-1]); off++ {
		bad := orig[off] ^ byte(1+off%255)
		fh.WriteAt([]byte{bad}, int64(off))
		for _, id := range ids {
			a, ok, err := r.Get(id)
			ma, mok := model[id]
			switch {
			case err != nil:
				if !errors.Is(err, ErrCorrupt) {
					t.Fatalf("byte %d: %v", off, err)
				}
				errs++
			case a != ma || ok != mok:
				t.Fatalf("byte %d flipped: Get(%d) = %d,%v, want %d,%v", off, id, a, ok, ma, mok)
			}
		}
		if err := r.GetMany(ids, authors, found); err == nil {
			t.Fatalf("byte %d flipped: GetMany gave no error", off)
		}
		if err := r.Range(func(uint64, uint64) bool { return true }); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("byte %d flipped: Range: %v", off, err)
		}
		if _, err := r.WriteTo(new(bytes.Buffer)); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("byte %d flipped: WriteTo: %v", off, err)
		}
		fh.WriteAt(orig[off:off+1], int64(off))
	}
	if errs == 0 {
		t.Fatal("no error seen")
	}
	check(t, r, model, ids)
}

// TestColdBudget: with a memory budget, the oldest sealed windows go cold
// until the registry's own memory is within it.
func TestColdBudget(t *testing.T) {
	r, _ := New(Options{Dir: t.TempDir(), MemoryBudget: 200 << 10, ColdCacheBytes: 1 << 20})
	defer r.Close()
	rng := rand.New(rand.NewPCG(3, 4))
	model := map[uint64]uint64{}
	for range 60_000 {
		id := idAt(now.Add(-8*day-time.Duration(rng.Int64N(int64(100*day)))), rng.Uint64N(1024), rng.Uint64N(16))
		model[id] = rng.Uint64N(1 << 20)
		r.Put(id, model[id])
	}
	full := r.MemoryBytes()
	if err := r.Maintain(now); err != nil {
		t.Fatal(err)
	}
	st := r.Stats()
	t.Logf("%d bytes open, %d after: %+v", full, r.MemoryBytes(), st)
	if r.MemoryBytes() > 200<<10 || st.ColdWindows == 0 || st.SealedWindows == 0 {
		t.Fatalf("budget not kept, or overshot: %d bytes, %+v", r.MemoryBytes(), st)
	}
	// The cold windows are the oldest.
	seenSealed := false
	for _, w := range r.wins {
		if w.sealed != nil {
			seenSealed = true
		} else if w.cold != nil && seenSealed {
			t.Fatal("a cold window newer than a sealed one")
		}
	}
	var ids []uint64
	for id := range model {
		ids = append(ids, id)
	}
	check(t, r, model, ids[:5000])
}

// TestColdAllocs: cold lookups, hits and misses, allocate nothing in the
// steady state.
func TestColdAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under -race")
	}
	for _, cache := range []int{-1, 4 << 20} {
		r, model := coldRegistry(t, Options{ColdCacheBytes: cache}, 5000)
		var ids []uint64
		for id := range model {
			if w := r.wins[r.find(id)]; w.cold != nil {
				ids = append(ids, id)
			}
		}
		page := ids[:50]
		authors := make([]uint64, 50)
		found := make([]bool, 50)
		i := 0
		n := testing.AllocsPerRun(200, func() {
			r.Get(ids[i%len(ids)])
			i++
			r.GetMany(page, authors, found)
		})
		if n != 0 {
			t.Fatalf("cache %d: %.1f allocations per Get+GetMany", cache, n)
		}
		r.Close()
	}
}

// TestColdShareCache: a registry and postcounts-style cold.Files share one
// cache without their blocks colliding.
func TestColdShareCache(t *testing.T) {
	c := cold.NewCache(1 << 20)
	a, ma := coldRegistry(t, Options{Cache: c}, 3000)
	b, mb := coldRegistry(t, Options{Cache: c}, 3000)
	defer a.Close()
	defer b.Close()
	var ia, ib []uint64
	for id := range ma {
		ia = append(ia, id)
	}
	for id := range mb {
		ib = append(ib, id)
	}
	for range 2 {
		check(t, a, ma, ia)
		check(t, b, mb, ib)
	}
	if c.Stats().Hits == 0 {
		t.Fatal("no cache hit")
	}
}
