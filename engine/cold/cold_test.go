package cold

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/tally-dev/tally/bench/datagen"
	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/sealed"
)

// writeWindow stores window w at path atomically (Create). The engine streams
// its windows with CreateWindow instead; the tests write one they built.
func writeWindow(path string, w *sealed.Window) error {
	return Create(path, func(out io.Writer) error {
		_, err := out.Write(w.Bytes())
		return err
	})
}

// testSet is a data set, its window and the expected counts.
type testSet struct {
	all  []uint64 // every id, zero posts included
	want map[uint64]engine.Counts
	win  *sealed.Window
}

func newSet(t testing.TB, n int, seed uint64, opts sealed.Options) *testSet {
	t.Helper()
	s := &testSet{want: map[uint64]engine.Counts{}}
	datagen.Each(datagen.Config{N: n, Seed: seed}, func(id uint64, c engine.Counts) {
		s.all = append(s.all, id)
		if !c.IsZero() {
			s.want[id] = c
		}
	})
	var err error
	s.win, err = sealed.Build(func(yield func(uint64, engine.Counts) bool) {
		for _, id := range s.all {
			if !yield(id, s.want[id]) {
				return
			}
		}
	}, opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// countingReader counts reads and can be told to fail.
type countingReader struct {
	r     io.ReaderAt
	reads atomic.Int64
	bytes atomic.Int64
	fail  atomic.Bool
}

func (c *countingReader) ReadAt(p []byte, off int64) (int, error) {
	if c.fail.Load() {
		return 0, errors.New("injected I/O error")
	}
	c.reads.Add(1)
	c.bytes.Add(int64(len(p)))
	return c.r.ReadAt(p, off)
}

func (c *countingReader) reset() { c.reads.Store(0); c.bytes.Store(0) }

func openMem(t testing.TB, data []byte, cache *Cache) (*File, *countingReader) {
	t.Helper()
	cr := &countingReader{r: bytes.NewReader(data)}
	f, err := NewFile(cr, int64(len(data)), "mem.win", cache)
	if err != nil {
		t.Fatal(err)
	}
	return f, cr
}

func TestRoundTrip(t *testing.T) {
	s := newSet(t, 60000, 1, sealed.Options{})
	path := filepath.Join(t.TempDir(), "w1.win")
	if err := writeWindow(path, s.win); err != nil {
		t.Fatal(err)
	}
	f, err := Open(path, NewCache(1<<20))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Len() != s.win.Len() || f.MemoryBytes() != s.win.Index().SizeBytes() {
		t.Fatalf("Len %d MemoryBytes %d, want %d and %d", f.Len(), f.MemoryBytes(), s.win.Len(), s.win.Index().SizeBytes())
	}
	for _, id := range s.all {
		for _, q := range []uint64{id, id + 1} {
			got, err := f.Get(q)
			if err != nil || got != s.want[q] {
				t.Fatalf("Get(%d) = %+v, %v; want %+v", q, got, err, s.want[q])
			}
		}
	}
	checkGetMany(t, f, s, 300)
	it := f.Iter()
	n := 0
	for id, c := range s.win.All() {
		if !it.Next() || it.ID() != id || it.Counts() != c {
			t.Fatalf("Iter post %d differs from the window's %d %+v", n, id, c)
		}
		n++
	}
	if it.Next() || it.Err() != nil {
		t.Fatalf("Iter ran past the end or failed: %v", it.Err())
	}
	if err := f.Verify(); err != nil {
		t.Fatal(err)
	}
	disk, _ := os.ReadFile(path)
	mem, _ := s.win.MarshalBinary()
	if !bytes.Equal(disk, mem) {
		t.Fatal("file bytes differ from MarshalBinary")
	}
}

// checkGetMany runs multi-gets of random ids, sorted and not.
func checkGetMany(t *testing.T, f *File, s *testSet, rounds int) {
	t.Helper()
	rng := rand.New(rand.NewPCG(7, uint64(rounds)))
	ids := make([]uint64, 600)
	out := make([]engine.Counts, 600)
	for r := range rounds {
		n := rng.IntN(len(ids))
		for j := range n {
			ids[j] = s.all[rng.IntN(len(s.all))] + uint64(rng.IntN(2))
		}
		if r%2 == 0 {
			slicesSort(ids[:n])
		}
		if err := f.GetMany(ids[:n], out); err != nil {
			t.Fatal(err)
		}
		for j := range n {
			if out[j] != s.want[ids[j]] {
				t.Fatalf("GetMany: %d = %+v, want %+v", ids[j], out[j], s.want[ids[j]])
			}
		}
	}
}

func slicesSort(s []uint64) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

// idsInBlocks returns up to per ids (stored posts) from each given block.
func idsInBlocks(f *File, s *testSet, per int, blocks ...int) []uint64 {
	var ids []uint64
	for _, b := range blocks {
		first, _, _ := f.Index().Block(b)
		var next uint64 = math.MaxUint64
		if b+1 < f.Index().Blocks() {
			next, _, _ = f.Index().Block(b + 1)
		}
		k := 0
		for _, id := range s.all {
			if id >= first && id < next && k < per {
				ids = append(ids, id)
				k++
			}
		}
	}
	return ids
}

func TestOneReadPerBlock(t *testing.T) {
	s := newSet(t, 40000, 2, sealed.Options{})
	data, _ := s.win.MarshalBinary()
	f, cr := openMem(t, data, NewCache(1<<20))
	if f.Index().Blocks() < 30 {
		t.Fatalf("only %d blocks", f.Index().Blocks())
	}
	blockBytes := func(bs ...int) int64 {
		var n int64
		for _, b := range bs {
			_, off, end := f.Index().Block(b)
			n += int64(end - off)
		}
		return n
	}
	out := make([]engine.Counts, 200)
	get := func(ids []uint64) {
		t.Helper()
		// Shuffle: the order of the ids must not matter.
		rand.New(rand.NewPCG(1, 1)).Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
		if err := f.GetMany(ids, out); err != nil {
			t.Fatal(err)
		}
		for i, id := range ids {
			if out[i] != s.want[id] {
				t.Fatalf("%d = %+v, want %+v", id, out[i], s.want[id])
			}
		}
	}
	cr.reset()
	get(idsInBlocks(f, s, 5, 1, 5, 9))
	if r, b := cr.reads.Load(), cr.bytes.Load(); r != 3 || b != blockBytes(1, 5, 9) {
		t.Fatalf("3 distinct blocks: %d reads of %d bytes, want 3 of %d", r, b, blockBytes(1, 5, 9))
	}
	cr.reset()
	get(idsInBlocks(f, s, 5, 1, 5, 9))
	if r := cr.reads.Load(); r != 0 {
		t.Fatalf("cached blocks read again: %d reads", r)
	}
	cr.reset()
	get(idsInBlocks(f, s, 3, 20, 21, 22, 9, 27))
	if r, b := cr.reads.Load(), cr.bytes.Load(); r != 2 || b != blockBytes(20, 21, 22, 27) {
		t.Fatalf("blocks 20-22 and 27 (9 cached): %d reads of %d bytes, want 2 of %d", r, b, blockBytes(20, 21, 22, 27))
	}
	// Without a cache every multi-get reads its blocks, once each.
	f2, cr2 := openMem(t, data, NewCache(0))
	for range 2 {
		cr2.reset()
		ids := idsInBlocks(f2, s, 4, 3, 11)
		if err := f2.GetMany(ids, out); err != nil {
			t.Fatal(err)
		}
		if r := cr2.reads.Load(); r != 2 {
			t.Fatalf("no cache: %d reads, want 2", r)
		}
	}
	// Ids outside the window cost nothing.
	cr.reset()
	if _, err := f.Get(s.win.Index().MaxID() + 1); err != nil || cr.reads.Load() != 0 {
		t.Fatalf("id past the window: %d reads, %v", cr.reads.Load(), err)
	}
}

func TestCacheBounded(t *testing.T) {
	s := newSet(t, 200000, 3, sealed.Options{})
	data, _ := s.win.MarshalBinary()
	const capacity = 128 << 10
	cache := NewCache(capacity)
	f, _ := openMem(t, data, cache)
	if len(data) < 3*capacity {
		t.Fatalf("file of %d bytes does not overflow a %d-byte cache", len(data), capacity)
	}
	checkGetMany(t, f, s, 400)
	st := cache.Stats()
	if st.SizeBytes > capacity || st.BlockBytes > st.SizeBytes || st.Evictions == 0 || st.Blocks == 0 {
		t.Fatalf("stats %+v for capacity %d", st, capacity)
	}
	if st.Hits == 0 || st.Misses == 0 {
		t.Fatalf("stats %+v: want both hits and misses", st)
	}
}

// TestCacheSecondChance checks CLOCK's promise: a block used between two
// sweeps of the hand survives a scan that evicts everything else.
func TestCacheSecondChance(t *testing.T) {
	s := newSet(t, 300000, 4, sealed.Options{})
	data, _ := s.win.MarshalBinary()
	cache := NewCache(128 << 10)
	f, cr := openMem(t, data, cache)
	hot := idsInBlocks(f, s, 1, 0)
	out := make([]engine.Counts, 1)
	hotReads := 0
	for b := 1; b < f.Index().Blocks(); b++ {
		cr.reset()
		if err := f.GetMany(hot, out); err != nil {
			t.Fatal(err)
		}
		hotReads += int(cr.reads.Load())
		if err := f.GetMany(idsInBlocks(f, s, 1, b), out); err != nil {
			t.Fatal(err)
		}
	}
	if hotReads != 1 || cache.Stats().Evictions < uint64(f.Index().Blocks()/2) {
		t.Fatalf("hot block read %d times over a scan of %d blocks (evictions %d)", hotReads, f.Index().Blocks(), cache.Stats().Evictions)
	}
}

// TestCacheModel drives the cache directly with random keys and sizes and
// checks every hit returns exactly the bytes put.
func TestCacheModel(t *testing.T) {
	c := NewCache(96 << 10)
	rng := rand.New(rand.NewPCG(5, 6))
	content := func(key uint64, n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(key*31 + uint64(i)*7)
		}
		return b
	}
	sizes := map[uint64]int{}
	for i := range 200000 {
		key := cacheKey(1+uint32(rng.IntN(3)), rng.IntN(400))
		n, ok := sizes[key]
		if !ok {
			n = 1 + rng.IntN(1500)
			sizes[key] = n
		}
		want := content(key, n)
		hit := c.view(key, func(b []byte) {
			if !bytes.Equal(b, want) {
				t.Fatalf("step %d: key %x returned wrong bytes", i, key)
			}
		})
		if !hit {
			c.put(key, want)
		}
	}
	st := c.Stats()
	if st.SizeBytes > 96<<10 || st.Evictions == 0 || st.Hits == 0 {
		t.Fatalf("stats %+v", st)
	}
	// Every live slot is reachable from its home (no lost entries after
	// backward-shift deletions).
	for i := range c.shards {
		sh := &c.shards[i]
		live := 0
		for j := range sh.slots {
			if k := sh.slots[j].key; k != 0 {
				live++
				if p, ok := sh.find(k, mix(k)); !ok || p != j {
					t.Fatalf("slot %d (key %x) unreachable", j, k)
				}
			}
		}
		if live != sh.live {
			t.Fatalf("shard %d: %d live slots, counter says %d", i, live, sh.live)
		}
	}
}

func TestCorruptBlock(t *testing.T) {
	s := newSet(t, 20000, 5, sealed.Options{})
	data, _ := s.win.MarshalBinary()
	path := filepath.Join(t.TempDir(), "bad.win")
	_, off, end := s.win.Index().Block(3)
	data[off+(end-off)/2] ^= 0x04
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := Open(path, NewCache(1<<20))
	if err != nil {
		t.Fatalf("Open checks no block, yet failed: %v", err)
	}
	defer f.Close()
	bad := idsInBlocks(f, s, 3, 3)
	good := idsInBlocks(f, s, 3, 4)
	out := make([]engine.Counts, 6)
	for range 2 { // the bad block must not have been cached
		err = f.GetMany(append(append([]uint64{}, good...), bad...), out)
		var ce *sealed.CorruptError
		if !errors.As(err, &ce) || !errors.Is(err, sealed.ErrCorrupt) || ce.File != path || ce.Offset != int64(off) ||
			!strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), fmt.Sprint(off)) {
			t.Fatalf("got %v, want a corrupt-block error naming %s at %d", err, path, off)
		}
	}
	if _, err := f.Get(bad[0]); err == nil {
		t.Fatal("Get in the damaged block succeeded")
	}
	for _, id := range good {
		if c, err := f.Get(id); err != nil || c != s.want[id] {
			t.Fatalf("Get(%d) in a sound block = %+v, %v", id, c, err)
		}
	}
	if err := f.Verify(); !errors.Is(err, sealed.ErrCorrupt) {
		t.Fatalf("Verify = %v, want corruption", err)
	}
}

func TestCorruptMetadata(t *testing.T) {
	s := newSet(t, 5000, 6, sealed.Options{})
	data, _ := s.win.MarshalBinary()
	dir := t.TempDir()
	fo := len(data) - sealed.FooterSize
	for _, at := range []int{0, 9, 13, fo - 3, fo, fo + 20, fo + 45, len(data) - 1} {
		bad := bytes.Clone(data)
		bad[at] ^= 0x20
		path := filepath.Join(dir, fmt.Sprintf("m%d.win", at))
		os.WriteFile(path, bad, 0o644)
		_, err := Open(path, nil)
		var ce *sealed.CorruptError
		if !errors.As(err, &ce) || ce.File != path {
			t.Errorf("byte %d damaged: Open = %v, want a CorruptError naming the file", at, err)
		}
	}
	for _, n := range []int{0, 10, sealed.HeaderSize + sealed.FooterSize - 1, len(data) - 1} {
		if _, err := NewFile(bytes.NewReader(data[:n]), int64(n), "short", nil); err == nil {
			t.Errorf("truncated to %d bytes: opened", n)
		}
	}
}

func TestReadError(t *testing.T) {
	s := newSet(t, 5000, 7, sealed.Options{})
	data, _ := s.win.MarshalBinary()
	f, cr := openMem(t, data, nil)
	cr.fail.Store(true)
	id := s.win.Index().MinID()
	if _, err := f.Get(id); err == nil || !strings.Contains(err.Error(), "injected") || !strings.Contains(err.Error(), "mem.win") {
		t.Fatalf("Get with a failing disk = %v", err)
	}
	cr.fail.Store(false)
	if c, err := f.Get(id); err != nil || c != s.want[id] {
		t.Fatalf("Get after the disk recovered = %+v, %v", c, err)
	}
}

func TestConcurrent(t *testing.T) {
	s := newSet(t, 100000, 8, sealed.Options{})
	data, _ := s.win.MarshalBinary()
	f, _ := openMem(t, data, NewCache(256<<10))
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 9))
			ids := make([]uint64, 50)
			out := make([]engine.Counts, 50)
			for range 300 {
				for j := range ids {
					ids[j] = s.all[rng.IntN(len(s.all))]
				}
				if err := f.GetMany(ids, out); err != nil {
					t.Error(err)
					return
				}
				for j, id := range ids {
					if out[j] != s.want[id] {
						t.Errorf("%d = %+v, want %+v", id, out[j], s.want[id])
						return
					}
				}
			}
		})
	}
	wg.Wait()
}

func TestCleanTemp(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "a.win"+tmpMarker+"123"), []byte("x"), 0o644)
	os.WriteFile(filepath.Join(dir, "wal-0000000000000001.log.tmp"), []byte("x"), 0o644)
	os.WriteFile(filepath.Join(dir, "a.win"), []byte("x"), 0o644)
	n, err := CleanTemp(dir)
	if err != nil || n != 1 {
		t.Fatalf("CleanTemp = %d, %v", n, err)
	}
	left, _ := os.ReadDir(dir)
	if len(left) != 2 {
		t.Fatalf("%d files left, want the 2 that are not ours", len(left))
	}
}

func TestCreateFailureLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "x.win")
	err := Create(path, func(w io.Writer) error { return errors.New("boom") })
	if err == nil {
		t.Fatal("Create swallowed the write error")
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Fatalf("failed Create left %d files", len(left))
	}
}

// FuzzOpen fuzzes the file decoder: header, footer, index, and the blocks
// lookups and Verify read. Whatever opens must answer without panicking,
// and where Verify passes, lookups must agree with iteration.
func FuzzOpen(f *testing.F) {
	s := newSet(f, 800, 10, sealed.Options{BlockPosts: 64})
	data, _ := s.win.MarshalBinary()
	f.Add(data, uint64(0))
	small, _ := sealed.Build(func(yield func(uint64, engine.Counts) bool) {
		yield(3, engine.Counts{Likes: 1})
		yield(1<<40, engine.Counts{Views: 1 << 50})
	}, sealed.Options{})
	sd, _ := small.MarshalBinary()
	f.Add(sd, uint64(3))
	f.Add(sd[:len(sd)-2], uint64(3))
	f.Fuzz(func(t *testing.T, data []byte, probe uint64) {
		file, err := NewFile(bytes.NewReader(data), int64(len(data)), "fuzz", NewCache(64<<10))
		if err != nil {
			return
		}
		out := make([]engine.Counts, 3)
		x := file.Index()
		_ = file.GetMany([]uint64{probe, x.MinID(), x.MaxID()}, out)
		if file.Verify() != nil {
			return
		}
		it := file.Iter()
		for it.Next() {
			c, err := file.Get(it.ID())
			if err != nil || c != it.Counts() {
				t.Fatalf("Get(%d) = %+v, %v; Iter says %+v", it.ID(), c, err, it.Counts())
			}
		}
	})
}

func TestNoAllocs(t *testing.T) {
	s := newSet(t, 20000, 14, sealed.Options{})
	data, _ := s.win.MarshalBinary()
	ids := s.all[100:150]
	out := make([]engine.Counts, 50)
	hit, _ := openMem(t, data, NewCache(1<<20))
	miss, _ := openMem(t, data, NewCache(0))
	hit.GetMany(ids, out)
	miss.GetMany(ids, out) // fills the scratch pool
	if n := testing.AllocsPerRun(100, func() { hit.GetMany(ids, out) }); n != 0 {
		t.Errorf("GetMany from the cache: %v allocations", n)
	}
	if n := testing.AllocsPerRun(100, func() { miss.GetMany(ids, out) }); n > 0.1 {
		t.Errorf("GetMany from disk: %v allocations", n)
	}
}
