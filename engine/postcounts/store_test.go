package postcounts

import (
	"bytes"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
	"unsafe"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/snowflake"
)

var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// harness drives a Store and a map model with the same operations.
type harness struct {
	t     *testing.T
	s     *Store
	opts  Options
	model map[uint64]vals
	ids   []uint64
	now   time.Time
	rng   *rand.Rand
	span  time.Duration // the ids' timestamps lie in [t0-span, t0)
}

func newHarness(t *testing.T, seed uint64, opts Options) *harness {
	return newHarnessSpan(t, seed, opts, time.Hour)
}

func newHarnessSpan(t *testing.T, seed uint64, opts Options, span time.Duration) *harness {
	h := &harness{t: t, opts: opts, model: map[uint64]vals{}, now: t0, rng: rand.New(rand.NewPCG(seed, 2)), span: span}
	h.opts.Now = func() time.Time { return h.now }
	s, err := New(h.opts)
	if err != nil {
		t.Fatal(err)
	}
	h.s = s
	t.Cleanup(func() { h.s.Close() })
	// Posts over the hour before t0, a few per millisecond at times, and
	// the edges of the id space.
	for range 1500 {
		ms := t0.UnixMilli() - h.rng.Int64N(span.Milliseconds())
		h.ids = append(h.ids, snowflake.Make(ms, h.rng.Uint64N(1024), h.rng.Uint64N(4)))
	}
	h.ids = append(h.ids, 0, 1, 1<<22-1, math.MaxUint64, math.MaxUint64-1,
		snowflake.Make(t0.UnixMilli()+3_600_000, 5, 5))
	return h
}

func (h *harness) id() uint64 { return h.ids[h.rng.IntN(len(h.ids))] }

func (h *harness) add(id uint64, f Field, d int64) {
	v := h.model[id]
	v[f] = clampAdd(v[f], d)
	if got := h.s.Add(id, f, d); got != v[f] {
		h.t.Fatalf("Add(%d, %v, %d) = %d, want %d", id, f, d, got, v[f])
	}
	setModel(h.model, id, v)
}

func (h *harness) set(id uint64, c engine.Counts) {
	h.s.Set(id, c)
	v := fromCounts(c)
	for f := range v {
		v[f] = max(v[f], 0)
	}
	setModel(h.model, id, v)
}

func (h *harness) randomCounts() engine.Counts {
	var v vals
	if h.rng.IntN(5) > 0 {
		for f := range v {
			if h.rng.IntN(2) == 0 {
				v[f] = edgeValue(h.rng)
				if h.rng.IntN(10) == 0 {
					v[f] = -v[f]
				}
			}
		}
	}
	return toCounts(v)
}

// write does one random Add or Set.
func (h *harness) write() {
	id := h.id()
	if h.rng.IntN(4) == 0 {
		h.set(id, h.randomCounts())
		return
	}
	d := int64(1)
	switch h.rng.IntN(4) {
	case 0:
		d = -1
	case 1:
		d = edgeValue(h.rng)
		if h.rng.IntN(3) == 0 {
			d = -d
		}
	}
	h.add(id, Field(h.rng.IntN(NumFields)), d)
}

func (h *harness) checkGet(id uint64) {
	if got, want := h.s.Get(id), toCounts(h.model[id]); got != want {
		h.t.Fatalf("Get(%d) = %+v, want %+v", id, got, want)
	}
}

func (h *harness) checkGetMany() {
	ids := make([]uint64, 1+h.rng.IntN(150))
	for i := range ids {
		ids[i] = h.id()
	}
	out := make([]engine.Counts, len(ids)+1)
	out[len(ids)] = engine.Counts{Likes: 42}
	h.s.GetMany(ids, out)
	for i, id := range ids {
		if want := toCounts(h.model[id]); out[i] != want {
			h.t.Fatalf("GetMany: ids[%d] = %d: %+v, want %+v", i, id, out[i], want)
		}
	}
	if out[len(ids)].Likes != 42 {
		h.t.Fatal("GetMany wrote past len(ids)")
	}
}

// checkAll compares everything: every id, Len, Range, and the store's
// internal bookkeeping.
func (h *harness) checkAll() {
	h.t.Helper()
	if err := h.s.Err(); err != nil {
		h.t.Fatal(err)
	}
	for _, id := range h.ids {
		h.checkGet(id)
	}
	if h.s.Len() != len(h.model) {
		h.t.Fatalf("Len = %d, want %d", h.s.Len(), len(h.model))
	}
	seen := map[uint64]bool{}
	h.s.Range(func(id uint64, c engine.Counts) bool {
		if seen[id] || c.IsZero() || toCounts(h.model[id]) != c {
			h.t.Fatalf("Range: %d = %+v (seen %v), model %+v", id, c, seen[id], h.model[id])
		}
		seen[id] = true
		return true
	})
	if len(seen) != len(h.model) {
		h.t.Fatalf("Range saw %d posts, want %d", len(seen), len(h.model))
	}
	checkInternals(h.t, h.s)
}

// checkInternals checks what the model cannot see: no zero entries in open
// tables and deltas, live counts, window order and ranges.
func checkInternals(t *testing.T, s *Store) {
	t.Helper()
	total := 0
	for i, w := range s.wins {
		if s.los[i] != w.lo || (i > 0 && s.wins[i-1].num >= w.num) {
			t.Fatalf("window %d out of order", w.num)
		}
		if num, lo, last := s.windowOf(w.lo); num != w.num || lo != w.lo || last != w.last {
			t.Fatalf("window %d has range [%d, %d]", w.num, w.lo, w.last)
		}
		bases := 0
		for _, b := range []bool{w.open != nil, w.sealed != nil, w.cold != nil} {
			if b {
				bases++
			}
		}
		if bases != 1 {
			t.Fatalf("window %d has %d bases", w.num, bases)
		}
		if w.busy != (s.jobs[w] != nil) || (w.frozen != nil && !w.busy) || (w.open != nil && !w.busy && w.delta != nil) {
			t.Fatalf("window %d: busy %v, frozen %v, delta %v", w.num, w.busy, w.frozen != nil, w.delta != nil)
		}
		for _, tb := range []*narrow{w.open, w.frozen, w.delta} {
			if tb == nil {
				continue
			}
			tb.each(func(k uint64, v vals) bool {
				if v == (vals{}) || k > w.last-w.lo {
					t.Fatalf("window %d stores key %d with %v", w.num, k, v)
				}
				return true
			})
		}
		live := 0
		for range s.windowPosts(w) {
			live++
		}
		if live != w.live {
			t.Fatalf("window %d: live %d, holds %d", w.num, w.live, live)
		}
		total += live
	}
	if total != s.live {
		t.Fatalf("live %d, windows hold %d", s.live, total)
	}
}

// windowPosts yields the non-zero posts of one window.
func (s *Store) windowPosts(w *window) func(func(uint64, engine.Counts) bool) {
	return func(yield func(uint64, engine.Counts) bool) { s.rangeWindow(w, yield) }
}

// job runs one Plan/Run/Finish with writes and reads interleaved, as the
// engine's background maintenance does; fail makes the job fail.
func (h *harness) job(fail bool) {
	j := h.s.Plan(h.now)
	if j == nil {
		return
	}
	if fail {
		j.toFile = true
		j.path = filepath.Join(h.opts.Dir, "missing", "x.win")
		if h.opts.Dir == "" {
			j.path = filepath.Join(h.t.TempDir(), "missing", "x.win")
		}
	}
	for range h.rng.IntN(30) {
		h.write()
	}
	h.checkGetMany()
	if h.rng.IntN(4) == 0 {
		h.checkSnapshot()
	}
	err := j.Run()
	for range h.rng.IntN(30) {
		h.write()
	}
	h.checkGetMany()
	if h.rng.IntN(4) == 0 {
		h.checkSnapshot()
	}
	if ferr := h.s.Finish(j); (ferr != nil) != fail || (err != nil) != fail {
		h.t.Fatalf("job %v: Run %v, Finish %v (fail=%v)", j, err, ferr, fail)
	}
}

func (h *harness) importRows() {
	var rows []importRow
	for range h.rng.IntN(200) {
		rows = append(rows, importRow{h.id(), h.randomCounts()})
	}
	if h.rng.IntN(2) == 0 {
		slices.SortFunc(rows, func(a, b importRow) int {
			if a.id < b.id {
				return -1
			}
			if a.id > b.id {
				return 1
			}
			return 0
		})
	}
	err := h.s.Import(func(yield func(uint64, engine.Counts) bool) {
		for _, r := range rows {
			if !yield(r.id, r.c) {
				return
			}
		}
	})
	if err != nil {
		h.t.Fatal(err)
	}
	for _, r := range rows {
		v := fromCounts(r.c)
		for f := range v {
			v[f] = max(v[f], 0)
		}
		setModel(h.model, r.id, v)
	}
}

// checkSnapshot loads a snapshot of the store, taken while a job is
// running, into a second store and compares it with the model.
func (h *harness) checkSnapshot() {
	h.t.Helper()
	var buf bytes.Buffer
	if _, err := h.s.WriteTo(&buf); err != nil {
		h.t.Fatal(err)
	}
	s2, err := New(h.opts)
	if err != nil {
		h.t.Fatal(err)
	}
	defer s2.Close()
	if err := s2.Load(&buf, ""); err != nil {
		h.t.Fatal(err)
	}
	for _, id := range h.ids {
		if got, want := s2.Get(id), toCounts(h.model[id]); got != want {
			h.t.Fatalf("loaded snapshot: Get(%d) = %+v, want %+v", id, got, want)
		}
	}
	if s2.Len() != len(h.model) {
		h.t.Fatalf("loaded snapshot: Len = %d, want %d", s2.Len(), len(h.model))
	}
	checkInternals(h.t, s2)
}

// reload writes the store out, loads it into a new store on the same
// directory and goes on with that one, dropping the files only the old
// one knew.
func (h *harness) reload() {
	var buf bytes.Buffer
	snap := h.s.Snapshot()
	if _, err := snap.WriteTo(&buf); err != nil {
		h.t.Fatal(err)
	}
	want := slices.Clone(h.s.Files())
	s2, err := New(h.opts)
	if err != nil {
		h.t.Fatal(err)
	}
	// Trailing bytes stay unread: the format is self-delimiting.
	buf.WriteString("tail")
	if err := s2.Load(&buf, ""); err != nil {
		h.t.Fatal(err)
	}
	if buf.String() != "tail" {
		h.t.Fatalf("Load left %q unread, want \"tail\"", buf.String())
	}
	if got := s2.Files(); !slices.Equal(got, want) || !slices.Equal(snap.Files(), want) {
		h.t.Fatalf("files %v, snapshot %v, want %v", got, snap.Files(), want)
	}
	old := h.s
	// Jobs of the old store are discarded; its files stay until the new
	// store says they are unreferenced.
	h.s = s2
	old.Close()
	if _, err := h.s.RemoveUnreferenced(nil); err != nil {
		h.t.Fatal(err)
	}
}

func runModel(t *testing.T, seed uint64, opts Options, span time.Duration, steps int) *harness {
	h := newHarnessSpan(t, seed, opts, span)
	tick := func() time.Duration { return time.Duration(h.rng.Int64N(int64(span / 30))) }
	for step := range steps {
		switch op := h.rng.IntN(1000); {
		case op < 450:
			h.write()
		case op < 600:
			h.checkGet(h.id())
		case op < 750:
			h.checkGetMany()
		case op < 800:
			h.now = h.now.Add(tick())
			if err := h.s.Maintain(h.now); err != nil {
				t.Fatal(err)
			}
		case op < 900:
			h.now = h.now.Add(tick() / 2)
			h.job(false)
		case op < 910:
			h.job(true)
		case op < 940:
			h.importRows()
		case op < 950:
			h.reload()
		case op < 960:
			if _, err := h.s.RemoveUnreferenced(nil); err != nil {
				t.Fatal(err)
			}
		default:
			if step%7 == 0 {
				h.checkAll()
			}
		}
	}
	h.checkAll()
	return h
}

// TestModel runs random writes, reads, imports, maintenance (synchronous
// and interleaved with writes), failing jobs and snapshot round trips
// against a map: the store must answer exactly as the map does at every
// step, whichever tier each post is in.
func TestModel(t *testing.T) {
	cases := []struct {
		name  string
		opts  Options
		span  time.Duration
		steps int
	}{
		{"5min-windows-cold", Options{WindowMillis: 300_000, OpenAge: 10 * time.Minute, ColdAge: 25 * time.Minute, CompactMin: 4, ColdCacheBytes: 1 << 20}, time.Hour, 8000},
		{"budget-no-cache", Options{WindowMillis: 120_000, OpenAge: 3 * time.Minute, MemoryBudget: 20 << 10, CompactMin: 4, ColdCacheBytes: -1}, time.Hour, 6000},
		{"day-windows-memory", Options{CompactMin: 2}, 30 * 24 * time.Hour, 12000},
		{"tiny-windows", Options{WindowMillis: 1, OpenAge: -1, CompactMin: 1}, time.Second, 8000},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.opts.MemoryBudget > 0 || c.opts.ColdAge > 0 {
				c.opts.Dir = t.TempDir()
			}
			h := runModel(t, uint64(i+1), c.opts, c.span, c.steps)
			st := h.s.Stats()
			t.Logf("%+v", st)
			if c.opts.Dir != "" && (st.ColdWindows == 0 || st.SealedWindows+st.ColdWindows == 0) {
				t.Fatalf("no cold windows: the test did not exercise the cold tier: %+v", st)
			}
			if c.name == "day-windows-memory" && st.SealedWindows == 0 {
				t.Fatalf("no sealed windows: %+v", st)
			}
		})
	}
}

// TestFilesRemoved checks that compaction leaves superseded files for
// RemoveUnreferenced, which keeps those of a snapshot until told.
func TestFilesRemoved(t *testing.T) {
	dir := t.TempDir()
	h := newHarness(t, 9, Options{WindowMillis: 60_000, OpenAge: time.Minute, ColdAge: time.Minute, CompactMin: 1, Dir: dir})
	for range 3000 {
		h.write()
	}
	h.now = t0.Add(2 * time.Hour)
	if err := h.s.Maintain(h.now); err != nil {
		t.Fatal(err)
	}
	snapFiles := h.s.Files()
	if len(snapFiles) == 0 {
		t.Fatal("no cold files")
	}
	for range 3000 {
		h.write()
	}
	if err := h.s.Maintain(h.now); err != nil {
		t.Fatal(err)
	}
	removed, err := h.s.RemoveUnreferenced(snapFiles)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range snapFiles {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("kept file %s removed: %v", p, err)
		}
	}
	removed2, err := h.s.RemoveUnreferenced(nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(removed2) == 0 {
		t.Fatalf("compactions superseded no file of the snapshot (removed %v first)", removed)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != len(h.s.Files()) {
		t.Fatalf("%d files in the directory, the store reads %d", len(ents), len(h.s.Files()))
	}
	h.checkAll()
}

// TestColdReadError damages a cold file: reads of its posts return zeros
// and the error is kept, never wrong counts or a panic.
func TestColdReadError(t *testing.T) {
	dir := t.TempDir()
	h := newHarness(t, 11, Options{WindowMillis: 3_600_000 * 2, OpenAge: time.Minute, ColdAge: time.Minute, Dir: dir, ColdCacheBytes: -1})
	for range 2000 {
		h.write()
	}
	h.now = t0.Add(4 * time.Hour)
	if err := h.s.Maintain(h.now); err != nil {
		t.Fatal(err)
	}
	files := h.s.Files()
	if len(files) == 0 {
		t.Fatal("no cold files")
	}
	for _, p := range files {
		b, _ := os.ReadFile(p)
		for i := 100; i < len(b)-200; i += 50 {
			b[i] ^= 0x55
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	wrong := 0
	for id, v := range h.model {
		if c := h.s.Get(id); c != toCounts(v) && !c.IsZero() {
			wrong++
		}
	}
	if wrong > 0 {
		t.Fatalf("%d posts read wrong counts from damaged files", wrong)
	}
	if err := h.s.Err(); err == nil {
		t.Fatal("no error kept after reading damaged files")
	}
}

// TestImport imports a data set into an empty store and into one that
// already holds posts and deltas, sorted and unsorted, and checks the
// sealed windows it wrote.
func TestImport(t *testing.T) {
	for _, sorted := range []bool{true, false} {
		dir := t.TempDir()
		h := newHarness(t, 13, Options{WindowMillis: 600_000, OpenAge: 10 * time.Minute, ColdAge: 40 * time.Minute, CompactMin: 1 << 30, Dir: dir})
		for range 500 {
			h.write()
		}
		h.now = t0.Add(time.Minute)
		if err := h.s.Maintain(h.now); err != nil {
			t.Fatal(err)
		}
		for range 500 {
			h.write() // deltas over sealed and cold windows
		}
		rows := make([]importRow, 0, 5000)
		for range 5000 {
			rows = append(rows, importRow{h.id(), h.randomCounts()})
		}
		if sorted {
			slices.SortStableFunc(rows, func(a, b importRow) int {
				return cmpU64(a.id, b.id)
			})
		}
		err := h.s.Import(func(yield func(uint64, engine.Counts) bool) {
			for _, r := range rows {
				if !yield(r.id, r.c) {
					return
				}
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			v := fromCounts(r.c)
			for f := range v {
				v[f] = max(v[f], 0)
			}
			setModel(h.model, r.id, v)
		}
		h.checkAll()
		st := h.s.Stats()
		if st.SealedWindows == 0 || st.ColdWindows == 0 || st.DeltaPosts != 0 {
			t.Fatalf("import did not write sealed and cold windows without deltas: %+v", st)
		}
	}
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// TestImportStopsEarly checks Import with a sequence that yields nothing.
func TestImportEmpty(t *testing.T) {
	s, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Import(maps.All(map[uint64]engine.Counts{})); err != nil || s.Len() != 0 {
		t.Fatal(err, s.Len())
	}
}

func TestOptions(t *testing.T) {
	for _, wm := range []int64{-1, MaxWindowMillis + 1} {
		if _, err := New(Options{WindowMillis: wm}); err == nil {
			t.Fatalf("WindowMillis %d accepted", wm)
		}
	}
	if _, err := New(Options{Dir: filepath.Join(t.TempDir(), "nope")}); err == nil {
		t.Fatal("missing Dir accepted")
	}
}

// TestLoadWrongWindow refuses a snapshot made with another window size.
// TestLoadOtherWindow: a snapshot taken with other windows (the operator
// changed -window) loads re-partitioned into an empty store, sealed
// windows included, and is refused by a store that holds posts.
func TestLoadOtherWindow(t *testing.T) {
	a, _ := New(Options{WindowMillis: 1000, OpenAge: -1})
	want := map[uint64]engine.Counts{}
	for i := range 300 {
		id := snowflake.Make(t0.UnixMilli()+int64(i)*37, uint64(i%7), 1)
		a.Add(id, Likes, int64(i+1))
		a.Add(id, Views, 1000)
		want[id] = engine.Counts{Likes: int64(i + 1), Views: 1000}
	}
	if err := a.Maintain(t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := a.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	img := buf.Bytes()
	b, _ := New(Options{WindowMillis: 2000})
	if err := b.Load(bytes.NewReader(img), ""); err != nil {
		t.Fatal(err)
	}
	if b.Len() != len(want) {
		t.Fatalf("Len = %d, want %d", b.Len(), len(want))
	}
	for id, c := range want {
		if got := b.Get(id); got != c {
			t.Fatalf("post %d: %+v, want %+v", id, got, c)
		}
	}
	if err := b.Load(bytes.NewReader(img), ""); err == nil {
		t.Fatal("a store holding posts loaded a snapshot of other windows")
	}
	c, _ := New(Options{WindowMillis: 2000})
	if err := c.Load(bytes.NewReader(img[:len(img)-3]), ""); err == nil || c.Len() != 0 {
		t.Fatalf("a truncated snapshot: Load = %v, %d posts", err, c.Len())
	}
}

// TestNoAlloc checks that reads and writes to existing posts do not
// allocate, in open and sealed windows alike.
func TestNoAlloc(t *testing.T) {
	h := newHarness(t, 17, Options{WindowMillis: 600_000, OpenAge: 30 * time.Minute})
	for _, id := range h.ids {
		h.set(id, engine.Counts{Likes: 1, Views: 5})
	}
	h.now = t0.Add(10 * time.Minute)
	if err := h.s.Maintain(h.now); err != nil {
		t.Fatal(err)
	}
	st := h.s.Stats()
	if st.OpenWindows == 0 || st.SealedWindows == 0 {
		t.Fatalf("want open and sealed windows: %+v", st)
	}
	for _, id := range h.ids {
		h.s.Add(id, Views, 1) // deltas exist before measuring
	}
	out := make([]engine.Counts, 50)
	ids := h.ids[:50]
	if n := testing.AllocsPerRun(50, func() {
		h.s.GetMany(ids, out)
		for _, id := range ids {
			h.s.Get(id)
			h.s.Add(id, Views, 1)
		}
	}); n != 0 {
		t.Fatalf("%v allocations", n)
	}
}

func TestCountsLayout(t *testing.T) {
	c := engine.Counts{Likes: 1, Comments: 2, Reposts: 3, Views: 4, Favorites: 5}
	if *asVals(&c) != fromCounts(c) || unsafe.Sizeof(c) != unsafe.Sizeof(vals{}) {
		t.Fatal("engine.Counts is no longer five int64s in vals order")
	}
}

// TestWindowMath checks window ranges at the edges of the id space: every
// id belongs to exactly one window, whose key fits the layout.
func TestWindowMath(t *testing.T) {
	for _, wm := range []int64{1, 1000, DefaultWindowMillis, MaxWindowMillis} {
		s, err := New(Options{WindowMillis: wm})
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range []uint64{0, 1, snowflake.Make(snowflake.TwitterEpoch+wm, 0, 0), snowflake.Make(t0.UnixMilli(), 7, 7), math.MaxUint64 - 1, math.MaxUint64} {
			num, lo, last := s.windowOf(id)
			if id < lo || id > last || last-lo > s.lay.keyMask {
				t.Fatalf("window %d ms: id %d in window %d [%d, %d], key mask %x", wm, id, num, lo, last, s.lay.keyMask)
			}
			if last != math.MaxUint64 {
				if n2, lo2, _ := s.windowOf(last + 1); n2 != num+1 || lo2 != last+1 {
					t.Fatalf("window %d ms: window %d ends at %d, next is %d from %d", wm, num, last, n2, lo2)
				}
			}
			s.Add(id, Likes, 1)
			if s.Get(id).Likes != 1 {
				t.Fatalf("window %d ms: id %d lost", wm, id)
			}
		}
	}
}

// TestBudget checks that a memory budget moves sealed windows to files,
// and then folds deltas into them, until the store fits.
func TestBudget(t *testing.T) {
	h := newHarness(t, 21, Options{WindowMillis: 300_000, OpenAge: time.Minute, Dir: t.TempDir(), ColdCacheBytes: -1,
		MemoryBudget: 1, CompactMin: 50})
	for range 3000 {
		h.write()
	}
	h.now = t0.Add(2 * time.Hour)
	if err := h.s.Maintain(h.now); err != nil {
		t.Fatal(err)
	}
	if st := h.s.Stats(); st.SealedWindows != 0 || st.ColdWindows == 0 {
		t.Fatalf("over budget, sealed windows stay in memory: %+v", st)
	}
	for range 3000 {
		h.write() // deltas over the cold windows
	}
	before := h.s.Stats().DeltaPosts
	if err := h.s.Maintain(h.now); err != nil {
		t.Fatal(err)
	}
	st := h.s.Stats()
	if before < 100 || st.DeltaPosts > before/4 {
		t.Fatalf("over budget, deltas of %d posts became %d", before, st.DeltaPosts)
	}
	h.checkAll()
}
