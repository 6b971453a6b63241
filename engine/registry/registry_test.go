package registry

import (
	"bytes"
	"cmp"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/tally-dev/tally/engine/cold"
	"github.com/tally-dev/tally/engine/snowflake"
)

var day = 24 * time.Hour

// now is a fixed clock: windows of the last 7 days stay open.
var now = time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)

func idAt(t time.Time, node, seq uint64) uint64 { return snowflake.Make(t.UnixMilli(), node, seq) }

// check compares r with the model through Get, Len and Range.
func check(t *testing.T, r *Registry, model map[uint64]uint64, probes []uint64) {
	t.Helper()
	if r.Len() != len(model) {
		t.Fatalf("Len = %d, model %d", r.Len(), len(model))
	}
	authors := make([]uint64, len(probes))
	found := make([]bool, len(probes))
	if err := r.GetMany(probes, authors, found); err != nil {
		t.Fatalf("GetMany: %v", err)
	}
	for i, id := range probes {
		a, ok, err := r.Get(id)
		if err != nil {
			t.Fatalf("Get(%d): %v", id, err)
		}
		ma, mok := model[id]
		if ok != mok || a != ma {
			t.Fatalf("Get(%d) = %d,%v; model %d,%v", id, a, ok, ma, mok)
		}
		if found[i] != mok || authors[i] != ma {
			t.Fatalf("GetMany: post %d = %d,%v; model %d,%v", id, authors[i], found[i], ma, mok)
		}
	}
	var got []Row
	if err := r.Range(func(id, author uint64) bool {
		got = append(got, Row{id, author})
		return true
	}); err != nil {
		t.Fatalf("Range: %v", err)
	}
	want := make([]Row, 0, len(model))
	for id, a := range model {
		want = append(want, Row{id, a})
	}
	slices.SortFunc(want, func(a, b Row) int { return cmp.Compare(a.ID, b.ID) })
	if !slices.Equal(got, want) {
		t.Fatalf("Range gave %d rows, model %d (first diff at %d)", len(got), len(want), firstDiff(got, want))
	}
}

func firstDiff(a, b []Row) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// modelPolicies are the option sets TestModel runs with: memory only; a
// cold tier by age (windows older than 30 days in files, a small shared
// cache); and one by memory budget with caching disabled (every cold
// lookup a pread).
func modelPolicies(t *testing.T) map[string]Options {
	return map[string]Options{
		"memory":  {CompactMin: 50},
		"coldAge": {CompactMin: 50, Dir: t.TempDir(), ColdAge: 30 * day, Cache: cold.NewCache(256 << 10)},
		"budget":  {CompactMin: 50, Dir: t.TempDir(), MemoryBudget: 64 << 10, ColdCacheBytes: -1},
	}
}

// TestModel drives puts (new posts, re-puts, author changes, ids 0 and
// 2^64-1, ids of every age) through sealing, cooling and compaction and
// compares with a map after each phase, Loader and image (WriteTo, Load)
// round trips included.
func TestModel(t *testing.T) {
	for name, opts := range modelPolicies(t) {
		t.Run(name, func(t *testing.T) { testModel(t, opts) })
	}
}

func testModel(t *testing.T, opts Options) {
	rng := rand.New(rand.NewPCG(7, 8))
	r, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	model := map[uint64]uint64{}
	var ids []uint64
	newID := func() uint64 {
		switch rng.IntN(50) {
		case 0:
			return uint64(rng.IntN(1000)) // small ids: the epoch's window
		case 1:
			return ^uint64(0) - uint64(rng.IntN(3))
		}
		age := time.Duration(rng.Int64N(int64(60 * day)))
		return idAt(now.Add(-age), rng.Uint64N(1024), rng.Uint64N(16))
	}
	put := func(id, a uint64) {
		_, had := model[id]
		isNew, err := r.Put(id, a)
		if err != nil {
			t.Fatal(err)
		}
		if isNew == had {
			t.Fatalf("Put(%d) new=%v but model had=%v", id, isNew, had)
		}
		model[id] = a
		if !had {
			ids = append(ids, id)
		}
	}
	probes := func() []uint64 {
		p := slices.Clone(ids)
		for range 500 {
			p = append(p, newID())
		}
		return p
	}
	// A window of one post whose author is 0 packs to zero-width records.
	put(idAt(now.Add(-30*day), 1, 1), 0)
	for phase := range 8 {
		for range 3000 {
			switch {
			case len(ids) > 0 && rng.IntN(10) == 0:
				id := ids[rng.IntN(len(ids))]
				put(id, model[id]) // no-op re-put
			case len(ids) > 0 && rng.IntN(10) == 0:
				put(ids[rng.IntN(len(ids))], rng.Uint64N(1<<40))
			default:
				a := rng.Uint64N(1 << 24)
				if rng.IntN(20) == 0 {
					a = 0
				}
				put(newID(), a)
			}
		}
		check(t, r, model, probes())
		switch phase % 3 {
		case 0:
			if err := r.Maintain(now); err != nil {
				t.Fatal(err)
			}
		case 1:
			// A planned job that is finished without running leaves
			// everything as it was.
			if j := r.Plan(now); j != nil {
				check(t, r, model, probes()) // frozen entries visible
				if err := j.Finish(); err == nil {
					t.Fatal("Finish before Run succeeded")
				}
			}
		case 2:
			// Puts while a job runs land in the open table and win.
			j := r.Plan(now)
			for range 200 {
				if len(ids) > 0 {
					put(ids[rng.IntN(len(ids))], rng.Uint64N(1<<30))
				}
				put(newID(), rng.Uint64N(1<<30))
			}
			if j != nil {
				if err := j.Run(); err != nil {
					t.Fatal(err)
				}
				check(t, r, model, probes())
				if err := j.Finish(); err != nil {
					t.Fatal(err)
				}
			}
		}
		check(t, r, model, probes())

		// A registry loaded from Range, in order and shuffled, is the same.
		var rows []Row
		r.Range(func(id, a uint64) bool { rows = append(rows, Row{id, a}); return true })
		// So is one loaded from its image, with the same windows or others.
		var img bytes.Buffer
		if _, err := r.WriteTo(&img); err != nil {
			t.Fatal(err)
		}
		for _, wm := range []int64{0, 3_600_000} {
			l, _ := New(Options{CompactMin: 50, WindowMillis: wm})
			if err := l.Load(bytes.NewReader(img.Bytes()), now); err != nil {
				t.Fatal(err)
			}
			check(t, l, model, probes())
		}
		for _, shuffle := range []bool{false, true} {
			if shuffle {
				rng.Shuffle(len(rows), func(i, j int) { rows[i], rows[j] = rows[j], rows[i] })
			}
			l, _ := New(Options{CompactMin: 50})
			ld := l.NewLoader(now)
			for _, p := range rows {
				ld.Add(p.ID, p.Author)
			}
			ld.Close()
			check(t, l, model, probes())
		}
	}
	st := r.Stats()
	if st.SealedPosts+st.ColdPosts == 0 || st.OpenPosts == 0 {
		t.Fatalf("the model test should leave posts both sealed and open: %+v", st)
	}
	if opts.Dir != "" {
		if st.ColdPosts == 0 {
			t.Fatalf("no cold window: %+v", st)
		}
		checkDir(t, r, opts.Dir)
	}
	t.Logf("%+v", st)
}

// checkDir checks that Dir holds exactly the registry's cold files.
func checkDir(t *testing.T, r *Registry, dir string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var have, want []string
	for _, e := range ents {
		have = append(have, e.Name())
	}
	for _, p := range r.Files() {
		want = append(want, filepath.Base(p))
	}
	slices.Sort(have)
	slices.Sort(want)
	if !slices.Equal(have, want) {
		t.Fatalf("directory holds %v, the registry reads %v", have, want)
	}
}

// TestSealedIsCompact: with old windows sealed, the registry keeps a post
// in far fewer bytes than an open table.
func TestSealedIsCompact(t *testing.T) {
	r, _ := New(Options{})
	rng := rand.New(rand.NewPCG(1, 1))
	const n = 200_000
	for range n {
		age := 8*day + time.Duration(rng.Int64N(int64(300*day)))
		r.Put(idAt(now.Add(-age), rng.Uint64N(1024), rng.Uint64N(16)), rng.Uint64N(10_000_000))
	}
	open := r.MemoryBytes()
	if err := r.Maintain(now); err != nil {
		t.Fatal(err)
	}
	sealed := r.MemoryBytes()
	if st := r.Stats(); st.OpenPosts != 0 || st.SealedPosts != r.Len() {
		t.Fatalf("all windows are past OpenAge, yet %+v", st)
	}
	perOpen, perSealed := float64(open)/float64(r.Len()), float64(sealed)/float64(r.Len())
	t.Logf("open %.1f B/post, sealed %.1f B/post", perOpen, perSealed)
	if perSealed > 12 {
		t.Fatalf("sealed registry costs %.1f B/post", perSealed)
	}
}

func TestBadOptions(t *testing.T) {
	if _, err := New(Options{WindowMillis: -1}); err == nil {
		t.Fatal("negative window accepted")
	}
	if _, err := New(Options{WindowMillis: 1 << 35}); err == nil {
		t.Fatal("window beyond 2^34 ms accepted")
	}
}

// TestImport: old windows are built sealed, straight from the rows (an
// empty window, then a big enough batch merged into it), small batches
// and recent windows go through the open tables, and everything reads as
// a map of the last row of each id says.
func TestImport(t *testing.T) {
	r, _ := New(Options{})
	rng := rand.New(rand.NewPCG(11, 12))
	model := map[uint64]uint64{}
	var ids []uint64
	batch := func(n int, minAge, maxAge time.Duration, repeat bool) {
		rows := make([]Row, 0, n)
		for range n {
			var id uint64
			if repeat && len(ids) > 0 && rng.IntN(4) == 0 {
				id = ids[rng.IntN(len(ids))]
			} else {
				age := minAge + time.Duration(rng.Int64N(int64(maxAge-minAge)))
				id = idAt(now.Add(-age), rng.Uint64N(1024), rng.Uint64N(16))
			}
			a := rng.Uint64N(1 << 30)
			rows = append(rows, Row{id, a})
			if _, ok := model[id]; !ok {
				ids = append(ids, id)
			}
			model[id] = a
		}
		if err := r.Import(rows, now); err != nil {
			t.Fatal(err)
		}
	}
	batch(20000, 20*day, 30*day, false) // old, empty windows: built sealed
	if st := r.Stats(); st.OpenPosts != 0 || st.SealedPosts != len(model) {
		t.Fatalf("a bulk import of old posts went through open tables: %+v", st)
	}
	batch(20000, 20*day, 30*day, true) // as many again: merged into the runs
	if st := r.Stats(); st.OpenPosts != 0 {
		t.Fatalf("a large second batch went through open tables: %+v", st)
	}
	batch(30, 20*day, 30*day, true) // a few rows: through Put
	batch(500, 0, 2*day, true)      // recent: open
	if st := r.Stats(); st.OpenPosts == 0 {
		t.Fatalf("small and recent batches should be open: %+v", st)
	}
	check(t, r, model, ids)
	// A repeated id in one batch: the last row wins.
	id := ids[0]
	if err := r.Import([]Row{{id, 1}, {id, 2}}, now); err != nil {
		t.Fatal(err)
	}
	model[id] = 2
	check(t, r, model, ids)
}
