package tier

import (
	"bytes"
	"errors"
	"io"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/counters"
	"github.com/tally-dev/tally/engine/snowflake"
)

// testEpoch is the first window of the tests' ids.
var testEpoch = time.Date(2024, 3, 1, 0, 0, 0, 0, time.UTC)

const testWindow = 1000 // ms

func testOpts(dir string) Options {
	return Options{
		WindowMillis: testWindow,
		OpenAge:      3 * time.Second,
		ColdAge:      8 * time.Second,
		CompactMin:   4,
		Dir:          dir,
		Prefix:       "post",
	}
}

// randID returns an id in one of the first nWin windows.
func randID(rng *rand.Rand, nWin int) uint64 {
	ms := testEpoch.UnixMilli() + rng.Int64N(int64(nWin)*testWindow)
	return snowflake.Make(ms, rng.Uint64N(4), rng.Uint64N(3))
}

func randPost(rng *rand.Rand) Post {
	var p Post
	switch rng.IntN(4) {
	case 0: // an author only
		p.Author = 1 + rng.Uint64N(1_000_000)
	case 1:
		p.Author = 1 + rng.Uint64N(1_000_000)
		p.Counts.Likes = rng.Int64N(100)
		p.Counts.Views = rng.Int64N(100_000)
		if rng.IntN(3) == 0 { // a few reactions beyond like
			for range 1 + rng.IntN(3) {
				p.Reactions[rng.IntN(len(p.Reactions))] = 1 + rng.Int64N(20)
			}
		}
	case 2: // wide values: the open table's overflow, columns' exceptions
		p.Author = rng.Uint64()
		p.Counts = engine.Counts{Likes: math.MaxInt64, Comments: rng.Int64N(1 << 40), Reposts: 1, Views: rng.Int64(), Favorites: rng.Int64N(1 << 20)}
		if rng.IntN(2) == 0 {
			p.Reactions[rng.IntN(len(p.Reactions))] = rng.Int64N(math.MaxInt64)
		}
	case 3: // no author, counts
		p.Counts.Comments = 1 + rng.Int64N(10)
	}
	return p
}

// testKinds are the kinds of the model tests' post tables: as many as
// there may be, so that every kind id is written.
var testKinds = []string{"like", "love", "haha", "wow", "sad", "angry", "care", "clap", "fire", "eyes", "rocket", "tada", "heart_eyes", "thinking", "pray", "hundred"}

// testKindIDs are the ids SetKinds gives testKinds in a new table.
var testKindIDs = func() map[string]counters.Kind {
	m := map[string]counters.Kind{}
	for i, name := range testKinds {
		m[name] = counters.Kind(i + 1)
	}
	return m
}()

// check compares the table with the model: Len, Get of every model id and
// of absent ids, GetMany of random pages.
func check(t *testing.T, tr *Posts, model map[uint64]Post, rng *rand.Rand, nWin int) {
	t.Helper()
	if tr.Len() != len(model) {
		t.Fatalf("Len %d, model %d", tr.Len(), len(model))
	}
	ids := make([]uint64, 0, len(model))
	for id, want := range model {
		got, ok, err := tr.Get(id)
		if err != nil || !ok || got != want {
			t.Fatalf("Get(%d) = %+v %v %v, want %+v", id, got, ok, err, want)
		}
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for range 200 {
		id := randID(rng, nWin+2)
		want, in := model[id]
		got, ok, err := tr.Get(id)
		if err != nil || ok != in || got != want {
			t.Fatalf("Get(%d) = %+v %v %v, want %+v %v", id, got, ok, err, want, in)
		}
	}
	var out [100]Post
	var found [100]bool
	for range 20 {
		n := 1 + rng.IntN(100)
		page := make([]uint64, n)
		for i := range page {
			if len(ids) > 0 && rng.IntN(3) > 0 {
				page[i] = ids[rng.IntN(len(ids))]
			} else {
				page[i] = randID(rng, nWin+2)
			}
		}
		if err := tr.GetMany(page, out[:n], found[:n]); err != nil {
			t.Fatal(err)
		}
		for i, id := range page {
			want, in := model[id]
			if found[i] != in || out[i] != want {
				t.Fatalf("GetMany[%d] id %d = %+v %v, want %+v %v", i, id, out[i], found[i], want, in)
			}
		}
	}
}

// TestModel drives a post table and a map through random writes, clock
// steps with maintenance (sealing, cooling, compaction, jobs whose
// windows take writes while they run), snapshots reloaded into a new
// table over the same cold files, and Collect, checking every answer.
func TestModel(t *testing.T) {
	for seed := range uint64(4) {
		t.Run("", func(t *testing.T) { runModel(t, seed, 3000) })
	}
}

func runModel(t *testing.T, seed uint64, steps int) {
	rng := rand.New(rand.NewPCG(seed, 99))
	dir := t.TempDir()
	opts := testOpts(dir)
	if seed%2 == 1 {
		opts.MemoryBudget = 4 << 10 // the budget, not age, sends windows to files
		opts.ColdAge = 0
	}
	tr, err := NewPosts(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.SetKinds(testKinds); err != nil {
		t.Fatal(err)
	}
	model := map[uint64]Post{}
	const nWin = 30
	clock := testEpoch
	var kept []string // files of the last snapshot
	var pending []*Job
	for step := range steps {
		switch r := rng.IntN(106); {
		case r >= 103:
			// A deleted post, existing or not.
			id := randID(rng, nWin)
			if len(model) > 0 && rng.IntN(3) > 0 {
				for k := range model {
					id = k
					break
				}
			}
			_, had := model[id]
			deleted, err := tr.Delete(id)
			if err != nil {
				t.Fatal(err)
			}
			if deleted != had {
				t.Fatalf("step %d: Delete(%d) = %v, the model has it: %v", step, id, deleted, had)
			}
			delete(model, id)
		case r >= 100:
			if rng.IntN(2) == 0 {
				tr.Scrub(randID(rng, nWin))
				continue
			}
			checkAuthorScan(t, tr, model, rng.Uint64N(100), 1+rng.IntN(600))
		case r < 60:
			id := randID(rng, nWin)
			p := randPost(rng)
			if err := tr.Put(id, p); err != nil {
				t.Fatal(err)
			}
			model[id] = p
		case r < 75:
			id := randID(rng, nWin)
			if len(model) > 0 && rng.IntN(2) == 0 {
				for k := range model { // an existing post
					id = k
					break
				}
			}
			d := engine.Counts{Likes: rng.Int64N(5) - 2, Views: rng.Int64N(50)}
			was, got, err := tr.AddCounts(id, d)
			if err != nil {
				t.Fatal(err)
			}
			if was != model[id] {
				t.Fatalf("AddCounts: was %+v, the model has %+v", was, model[id])
			}
			want, ok := model[id]
			want.Counts.Likes = counters.Add(want.Counts.Likes, d.Likes)
			want.Counts.Views = counters.Add(want.Counts.Views, d.Views)
			if ok || !want.Counts.IsZero() {
				model[id] = want
			}
			if got != want {
				t.Fatalf("AddCounts = %+v, want %+v", got, want)
			}
		case r < 77:
			// A reaction: a first one, a switch or an unreaction.
			id := randID(rng, nWin)
			if len(model) > 0 && rng.IntN(2) == 0 {
				for k := range model {
					id = k
					break
				}
			}
			from, to := randKind(rng, counters.MaxKinds), randKind(rng, counters.MaxKinds)
			switch rng.IntN(3) {
			case 0:
				from = counters.NoKind
			case 1:
				to = counters.NoKind
			}
			was, got, err := moveReaction(tr, id, from, to)
			if err != nil {
				t.Fatal(err)
			}
			if was != model[id] {
				t.Fatalf("moveReaction: was %+v, the model has %+v", was, model[id])
			}
			want, ok := model[id]
			if from != to {
				if from != counters.NoKind {
					want.AddReaction(from, -1)
				}
				if to != counters.NoKind {
					want.AddReaction(to, 1)
				}
			}
			if ok || want.HasCounts() {
				model[id] = want
			}
			if got != want {
				t.Fatalf("moveReaction(%d, %d) = %+v, want %+v", from, to, got, want)
			}
		case r < 80:
			id := randID(rng, nWin)
			a := rng.Uint64N(100)
			if err := tr.SetAuthor(id, a); err != nil {
				t.Fatal(err)
			}
			p := model[id]
			p.Author = a
			model[id] = p
		case r < 88:
			clock = clock.Add(time.Duration(rng.IntN(1500)) * time.Millisecond)
			if rng.IntN(2) == 0 {
				if err := tr.Maintain(clock); err != nil {
					t.Fatal(err)
				}
			} else {
				// Jobs stay planned across the next steps' writes.
				pending = append(pending, tr.Plan(clock)...)
			}
		case r < 93:
			for _, j := range pending {
				if err := j.Run(); err != nil {
					t.Fatal(err)
				}
				if err := tr.Finish(j); err != nil {
					t.Fatal(err)
				}
			}
			pending = nil
		case r < 96:
			var buf bytes.Buffer
			if _, err := tr.WriteTo(&buf); err != nil {
				t.Fatal(err)
			}
			kept = tr.Files()
			for _, j := range pending { // planned before the snapshot: still run and finish
				j.Run()
				tr.Finish(j)
			}
			pending = nil
			if err := tr.Collect(kept); err != nil {
				t.Fatal(err)
			}
			tr.Close()
			if tr, err = NewPosts(opts); err != nil {
				t.Fatal(err)
			}
			if err := tr.Load(&buf); err != nil {
				t.Fatalf("step %d: Load: %v", step, err)
			}
			if got := tr.Kinds(); got.Len() != len(testKinds) || got.ID("angry") != testKindIDs["angry"] {
				t.Fatalf("step %d: kinds after Load: %v", step, got.IDs())
			}
		default:
			if len(pending) == 0 {
				if err := tr.Collect(kept); err != nil {
					t.Fatal(err)
				}
			}
		}
		if step%500 == 0 {
			check(t, tr, model, rng, nWin)
			checkRange(t, tr, model)
		}
	}
	for _, j := range pending {
		j.Run()
		if err := tr.Finish(j); err != nil {
			t.Fatal(err)
		}
	}
	check(t, tr, model, rng, nWin)
	if err := tr.Maintain(clock.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	check(t, tr, model, rng, nWin)
	kinds := map[Kind]int{}
	for _, s := range tr.Stats() {
		kinds[s.Kind]++
	}
	if kinds[Cold] == 0 || kinds[Open] != 0 {
		t.Fatalf("windows at the end: %v; want every window cold or sealed, some cold", kinds)
	}
	checkCollect(t, tr, dir)
	check(t, tr, model, rng, nWin)
	tr.Close()
}

// checkCollect checks that Collect(nil) leaves in dir exactly the files
// the table uses.
func checkCollect(t *testing.T, m Maintainer, dir string) {
	t.Helper()
	if err := m.Collect(nil); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(dir)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	files := m.Files()
	slices.Sort(names)
	slices.Sort(files)
	if !slices.Equal(names, files) {
		t.Fatalf("dir holds %v, the table uses %v", names, files)
	}
}

// TestGenerations checks that a rewrite of a cold window writes a new
// generation, that the old file stays while a kept snapshot names it,
// and that a table loaded from that snapshot reads it.
func TestGenerations(t *testing.T) {
	dir := t.TempDir()
	opts := testOpts(dir)
	opts.OpenAge, opts.ColdAge = -1, time.Nanosecond
	tr, _ := NewPosts(opts)
	id := snowflake.Make(testEpoch.UnixMilli(), 1, 0)
	tr.Put(id, Post{Author: 7})
	now := testEpoch.Add(time.Minute)
	if err := tr.Maintain(now); err != nil {
		t.Fatal(err)
	}
	first := tr.Files()
	if len(first) != 1 {
		t.Fatalf("files %v", first)
	}
	var snap bytes.Buffer
	tr.WriteTo(&snap)
	for i := range 8 { // enough late writes to fold back
		tr.Put(id+uint64(i+1), Post{Author: uint64(i)})
	}
	if err := tr.Maintain(now); err != nil {
		t.Fatal(err)
	}
	second := tr.Files()
	if len(second) != 1 || second[0] == first[0] {
		t.Fatalf("after compaction files %v, before %v", second, first)
	}
	if _, err := os.Stat(filepath.Join(dir, first[0])); err != nil {
		t.Fatal("the old generation went before Collect")
	}
	tr.Collect(first) // a snapshot still names it
	if _, err := os.Stat(filepath.Join(dir, first[0])); err != nil {
		t.Fatal("Collect removed a kept file")
	}
	old, _ := NewPosts(opts)
	if err := old.Load(bytes.NewReader(snap.Bytes())); err != nil {
		t.Fatal(err)
	}
	if p, ok, err := old.Get(id); err != nil || !ok || p.Author != 7 {
		t.Fatalf("old snapshot: %+v %v %v", p, ok, err)
	}
	if _, ok, _ := old.Get(id + 1); ok {
		t.Fatal("old snapshot sees a later write")
	}
	old.Close()
	tr.Collect(nil)
	if _, err := os.Stat(filepath.Join(dir, first[0])); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("unreferenced generation kept: %v", err)
	}
	if p, ok, err := tr.Get(id + 3); err != nil || !ok || p.Author != 2 {
		t.Fatalf("%+v %v %v", p, ok, err)
	}
	// A new table in the same directory never reuses a generation.
	again, _ := NewPosts(opts)
	if again.nextGen <= tr.nextGen-1 {
		t.Fatalf("nextGen %d after files up to %d", again.nextGen, tr.nextGen-1)
	}
}

// TestArena checks the arena's accounting through sealing, trimming,
// compaction and cooling: the bytes it reports are the chunks its live
// windows occupy, and every chunk goes once its windows have moved to
// files.
func TestArena(t *testing.T) {
	dir := t.TempDir()
	opts := testOpts(dir)
	opts.OpenAge, opts.ColdAge = -1, 0
	tr, _ := NewPosts(opts)
	rng := rand.New(rand.NewPCG(3, 3))
	model := map[uint64]Post{}
	for range 20000 {
		id := randID(rng, 40)
		p := randPost(rng)
		tr.Put(id, p)
		model[id] = p
	}
	now := testEpoch.Add(time.Hour)
	if err := tr.Maintain(now); err != nil {
		t.Fatal(err)
	}
	var live int64
	for _, w := range tr.wins {
		if b, ok := w.body.(*sealedWindow); ok {
			live += int64(cap(b.data))
		}
	}
	if got := tr.arena.size(); got < live || got > live+chunkBytes {
		t.Fatalf("arena holds %d bytes for %d of windows", got, live)
	}
	if len(tr.arena.closed) != 0 {
		t.Fatalf("%d full chunks left untrimmed with no job running", len(tr.arena.closed))
	}
	check(t, tr, model, rng, 40)
	// Everything to files: the arena empties.
	tr.opts.ColdAge = time.Nanosecond
	if err := tr.Maintain(now); err != nil {
		t.Fatal(err)
	}
	if got := tr.arena.size(); got != 0 {
		t.Fatalf("arena holds %d bytes with every window in a file", got)
	}
	check(t, tr, model, rng, 40)
}

// TestGetManyAllocs: a page read does not allocate, from open, sealed and
// cold windows (blocks cached, and not: a miss reads into a pooled
// buffer) and through a delta.
func TestGetManyAllocs(t *testing.T) {
	for _, policy := range []string{"open", "sealed", "cold", "cold-nocache"} {
		opts := testOpts("")
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
		tr, _ := NewPosts(opts)
		rng := rand.New(rand.NewPCG(4, 4))
		var ids []uint64
		for range 5000 {
			id := randID(rng, 3)
			tr.Put(id, randPost(rng))
			ids = append(ids, id)
		}
		if err := tr.Maintain(testEpoch.Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
		for _, id := range ids[:20] { // a delta on sealed and cold windows
			tr.Put(id, Post{Author: 1})
		}
		page := ids[100:150]
		var out [50]Post
		var found [50]bool
		tr.GetMany(page, out[:], found[:])
		if n := testing.AllocsPerRun(50, func() {
			if err := tr.GetMany(page, out[:], found[:]); err != nil {
				t.Fatal(err)
			}
		}); n != 0 && !(raceOn && policy == "cold-nocache") {
			t.Errorf("%s: GetMany allocates %v times a page", policy, n)
		}
		tr.Close()
	}
}

// TestImport: records imported in id order read back as put, whether
// their windows are sealed on the way in or put into open tables; later
// imports into the same table (batches of a file: new records and
// replaced ones, large enough to rebuild a sealed window or small enough
// to go to its delta) read back as the model says; an import out of
// order is refused.
func TestImport(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	model := map[uint64]Post{}
	for range 20000 {
		model[randID(rng, 30)] = randPost(rng)
	}
	ids := slices.Sorted(maps.Keys(model))
	seq := func(yield func(uint64, Post) bool) {
		for _, id := range ids {
			if !yield(id, model[id]) {
				return
			}
		}
	}
	opts := testOpts(t.TempDir())
	tr, _ := NewPosts(opts)
	now := testEpoch.Add(20 * time.Second) // windows 0..16 sealed, the rest open
	if err := tr.Import(seq, now); err != nil {
		t.Fatal(err)
	}
	kinds := map[Kind]int{}
	for _, s := range tr.Stats() {
		kinds[s.Kind]++
	}
	if kinds[Sealed] == 0 || kinds[Open] == 0 {
		t.Fatalf("windows after Import: %v", kinds)
	}
	check(t, tr, model, rng, 30)
	if err := tr.Maintain(now); err != nil {
		t.Fatal(err)
	}
	check(t, tr, model, rng, 30)
	for batch, size := range []int{6000, 40, 3000} {
		var more []uint64
		for range size {
			id := randID(rng, 30)
			if rng.IntN(3) == 0 {
				id = ids[rng.IntN(len(ids))] // a replaced record
			}
			model[id] = randPost(rng)
			more = append(more, id)
		}
		slices.Sort(more)
		more = slices.Compact(more)
		if err := tr.Import(func(yield func(uint64, Post) bool) {
			for _, id := range more {
				if !yield(id, model[id]) {
					return
				}
			}
		}, now); err != nil {
			t.Fatalf("batch %d: %v", batch, err)
		}
		check(t, tr, model, rng, 30)
		if batch == 1 {
			deltas := 0
			for _, s := range tr.Stats() {
				if s.Kind == Sealed && s.Delta > 0 {
					deltas++
				}
			}
			if deltas == 0 {
				t.Fatal("a small batch rebuilt every sealed window instead of writing to their deltas")
			}
		}
	}
	if err := tr.Maintain(now); err != nil {
		t.Fatal(err)
	}
	check(t, tr, model, rng, 30)
	other, _ := NewPosts(testOpts(""))
	err := other.Import(func(yield func(uint64, Post) bool) {
		_ = yield(ids[1], Post{}) && yield(ids[0], Post{})
	}, now)
	if !errors.Is(err, errOrder) {
		t.Fatalf("Import out of order: %v", err)
	}
}

// TestSlotLayout: records round-trip through an open table's slots for
// window lengths from 1 ms to 2^34 ms, at the largest key of the window;
// a value one bit too wide for its column goes to the overflow map; the
// counts of kinds beyond like go to the kind table (its own overflow for
// wide ones) and leave it when they go back to zero.
func TestSlotLayout(t *testing.T) {
	rng := rand.New(rand.NewPCG(6, 6))
	for _, ms := range []int64{1, 1000, 86_400_000, 1 << 34} {
		win := snowflake.Windows{Millis: ms}
		l, ok := newSlotLayout(win.KeyBits())
		if !ok {
			t.Fatalf("%d ms: no layout", ms)
		}
		tb := newRowTable()
		want := map[uint64]postRow{}
		maxKey := uint64(1) << win.KeyBits() // offset 2^KeyBits-1, plus one
		for i := range 3000 {
			key := 1 + rng.Uint64N(maxKey)
			if i == 0 {
				key = maxKey
			}
			if i%7 == 0 && len(want) > 0 {
				for k := range want { // a post rewritten
					key = k
					break
				}
			}
			var r postRow
			for f := range fixedCols {
				w := int(l.width[f])
				switch rng.IntN(3) {
				case 0:
					r[f] = rng.Uint64N(1 << uint(w))
				case 1:
					r[f] = 1<<uint(w) - 1
				}
			}
			if i%100 == 0 {
				f := rng.IntN(fixedCols)
				r[f] = 1 << l.width[f] // one bit too wide
			}
			if rng.IntN(3) == 0 { // some kinds beyond like
				for range 1 + rng.IntN(kindCols) {
					r[fixedCols+rng.IntN(kindCols)] = 1 + rng.Uint64N(1<<uint(rng.IntN(50)))
				}
			}
			tb.put(key, &l, &r)
			want[key] = r
		}
		if tb.n != len(want) || len(tb.over) == 0 || tb.kinds == nil || len(tb.kinds.over) == 0 {
			t.Fatalf("%d ms: %d keys, %d overflowed", ms, tb.n, len(tb.over))
		}
		withKinds := 0
		for key, r := range want {
			var got postRow
			if !tb.get(key, &l, &got) || got != r {
				t.Fatalf("%d ms: key %d: %v, want %v", ms, key, got, r)
			}
			if *(*kindRow)(r[fixedCols:]) != (kindRow{}) {
				withKinds++
			}
		}
		if tb.kinds.live != withKinds {
			t.Fatalf("%d ms: the kind table holds %d posts, %d have kinds", ms, tb.kinds.live, withKinds)
		}
		if keys := tb.sorted(&l); len(keys) != len(want) || keys[len(keys)-1] > maxKey {
			t.Fatalf("%d ms: sorted keys", ms)
		}
		for key, r := range want { // every kind back to zero
			*(*kindRow)(r[fixedCols:]) = kindRow{}
			tb.put(key, &l, &r)
			var got postRow
			if !tb.get(key, &l, &got) || got != r {
				t.Fatalf("%d ms: key %d: %v, want %v", ms, key, got, r)
			}
		}
		if tb.kinds.live != 0 || len(tb.kinds.over) != 0 {
			t.Fatalf("%d ms: %d posts left in the kind table", ms, tb.kinds.live)
		}
	}
}

// checkRange compares Range with the model: every record once, in id
// order.
func checkRange(t *testing.T, tr *Posts, model map[uint64]Post) {
	t.Helper()
	n := 0
	var last uint64
	err := tr.Range(func(id uint64, p Post) bool {
		if want, ok := model[id]; !ok || p != want || (n > 0 && id <= last) {
			t.Fatalf("Range: %d %+v after %d, model %+v %v", id, p, last, want, ok)
		}
		last = id
		n++
		return true
	})
	if err != nil || n != len(model) {
		t.Fatalf("Range: %d records, model %d, %v", n, len(model), err)
	}
}

// TestNewCleansOwnTemp: a new table removes the temporary files a crash
// left of its own writes, and no other table's or store's.
func TestNewCleansOwnTemp(t *testing.T) {
	dir := t.TempDir()
	mine := filepath.Join(dir, "post-3-7.tier"+tempMarker+"123")
	others := []string{
		filepath.Join(dir, "like-3-7.tier"+tempMarker+"456"),
		filepath.Join(dir, "wal-0000000000000001.log.tmp"),
		filepath.Join(dir, "post-3-7.tier"),
	}
	for _, p := range append(others, mine) {
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := NewPosts(testOpts(dir)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(mine); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("own temporary file kept: %v", err)
	}
	for _, p := range others {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("another's file: %v", err)
		}
	}
}

// TestCreateFailureLeavesNothing: a write that fails leaves no file, not
// even a temporary one.
func TestCreateFailureLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	if err := createFile(filepath.Join(dir, "post-1-1.tier"), true, func(io.Writer) error { return errors.New("boom") }); err == nil {
		t.Fatal("createFile swallowed the write error")
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Fatalf("a failed createFile left %d files", len(left))
	}
}

// dropJobsAcrossLoad plans the jobs due an hour after testEpoch on tbl,
// calls between, loads snap (an image of tbl with every window open) and
// then runs and finishes the jobs: Finish must drop them, leaving every
// window open and no file in dir.
func dropJobsAcrossLoad(t *testing.T, tbl interface {
	PlanWork(time.Time) []Work
	Load(io.Reader) error
}, snap []byte, windows func() []WindowStat, dir string, between func()) {
	t.Helper()
	jobs := tbl.PlanWork(testEpoch.Add(time.Hour))
	if len(jobs) == 0 {
		t.Fatal("no job planned")
	}
	between()
	if err := tbl.Load(bytes.NewReader(snap)); err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs {
		if err := j.Run(); err != nil {
			t.Fatal(err)
		}
		if err := j.Finish(); err != nil {
			t.Fatal(err)
		}
	}
	for _, w := range windows() {
		if w.Kind != Open {
			t.Fatalf("window %d is %v after a dropped job", w.Num, w.Kind)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("a dropped job's files stay: %d entries", len(ents))
	}
}

// TestJobAcrossLoad: a job planned before a Load is dropped by Finish,
// its file deleted, and the loaded state stands; Load refuses an image of
// another window length.
func TestJobAcrossLoad(t *testing.T) {
	dir := t.TempDir()
	opts := testOpts(dir)
	opts.OpenAge, opts.ColdAge = -1, time.Nanosecond
	tr, _ := NewPosts(opts)
	rng := rand.New(rand.NewPCG(10, 10))
	for range 500 {
		tr.Put(randID(rng, 3), randPost(rng))
	}
	var snap bytes.Buffer
	tr.WriteTo(&snap) // every window open
	dropJobsAcrossLoad(t, tr, snap.Bytes(), tr.Stats, dir, func() {})
	other := testOpts("")
	other.WindowMillis = 2000
	o, _ := NewPosts(other)
	if err := o.Load(bytes.NewReader(snap.Bytes())); err == nil {
		t.Fatal("Load of an image of other windows")
	}
}

// TestArenaPending: a chunk with a region handed out but not yet attached
// (a job still encoding into it) is not packed; once attached, it is, the
// windows read the same, and the arena counts the live regions.
func TestArenaPending(t *testing.T) {
	p, _ := NewPosts(testOpts(""))
	img := func(n int) []byte {
		var buf bytes.Buffer
		pw := newPostWriter(&buf)
		for i := range n {
			pw.add(uint64(1000+7*i), &postRow{uint64(i), uint64(i % 3)})
		}
		pw.close()
		return buf.Bytes()
	}
	one := img(300)
	// A job's region, handed out and being filled.
	region, c1 := p.arena.alloc(len(one))
	copy(region, one)
	var wins []*sealedWindow
	for range 2 * chunkBytes / len(one) { // fill and close the chunk
		s, err := p.newSealed(one, false)
		if err != nil {
			t.Fatal(err)
		}
		s.installed = true
		wins = append(wins, s)
	}
	notInstalled := func(s *sealedWindow) bool { return !s.installed }
	p.arena.trim(notInstalled)
	if c1.packed {
		t.Fatal("a chunk with a pending region was packed")
	}
	idx, err := parseImage(region, p.image)
	if err != nil {
		t.Fatal(err)
	}
	s1 := &sealedWindow{data: region, idx: idx, chunk: c1, installed: true}
	p.arena.attach(c1, s1)
	wins = append(wins, s1)
	p.arena.trim(notInstalled)
	if len(p.arena.closed) != 0 {
		t.Fatalf("%d chunks left to pack", len(p.arena.closed))
	}
	var live int64
	var r postRow
	for _, s := range wins {
		live += int64(cap(s.data))
		if !getSealed(s, 1000+7*299, &r) || r[0] != 299 {
			t.Fatalf("a moved window reads %v", r)
		}
	}
	if got := p.arena.size(); got < live || got > live+chunkBytes {
		t.Fatalf("arena counts %d bytes for %d live", got, live)
	}
	for _, s := range wins {
		s.release(&p.arena)
	}
	if got := p.arena.size(); got != 0 {
		t.Fatalf("arena counts %d bytes with every window freed", got)
	}
}

// checkAuthorScan scans the table for user's posts, limit posts a step,
// and compares the candidates that hold with the model.
func checkAuthorScan(t *testing.T, tr *Posts, model map[uint64]Post, user uint64, limit int) {
	t.Helper()
	got := scanAll(t, func(cur Cursor) *Scan { return tr.PlanScan(user, cur, limit) }, func(id uint64) bool {
		p, ok, err := tr.Get(id)
		if err != nil {
			t.Fatal(err)
		}
		return ok && p.Author == user
	})
	var want []uint64
	for id, p := range model {
		if p.Author == user {
			want = append(want, id)
		}
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("scan of author %d found %v, want %v", user, got, want)
	}
}

// moveReaction moves one reaction of post id from kind from to kind to,
// either of which may be counters.NoKind, as the embedded engine applies
// a switch's effects under its one lock: AddReaction on each side.
func moveReaction(p *Posts, id uint64, from, to counters.Kind) (was, is Post, err error) {
	if was, _, err = p.Get(id); err != nil || from == to {
		return was, was, err
	}
	is = was
	if from != counters.NoKind {
		if _, is, err = p.AddReaction(id, from, -1); err != nil {
			return was, is, err
		}
	}
	if to != counters.NoKind {
		_, is, err = p.AddReaction(id, to, 1)
	}
	return was, is, err
}
