package blockcache

import (
	"bytes"
	"math/rand/v2"
	"runtime"
	"testing"
)

// TestCacheLazy checks that a cache allocates next to nothing until blocks
// arrive, then grows with them, never past its capacity, and that Stats
// and SizeBytes report what is allocated.
func TestCacheLazy(t *testing.T) {
	const capacity = 64 << 20
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	c := NewCache(capacity)
	runtime.ReadMemStats(&after)
	if got := after.TotalAlloc - before.TotalAlloc; got > 64<<10 {
		t.Fatalf("NewCache(%d) allocated %d bytes", capacity, got)
	}
	st := c.Stats()
	if st.SizeBytes > 32<<10 || st.SizeBytes != c.SizeBytes() || st.CapacityBytes > capacity || st.CapacityBytes < capacity*9/10 {
		t.Fatalf("fresh cache: %+v", st)
	}
	blk := make([]byte, 2000)
	rng := rand.New(rand.NewPCG(1, 1))
	last := st.SizeBytes
	key := uint64(1)
	for size := 1 << 20; size <= 4*capacity; size *= 2 {
		for ; int(key)*len(blk) < size; key++ {
			blk[key%2000] = byte(rng.Uint32())
			c.put(key, blk)
		}
		st := c.Stats()
		if st.SizeBytes < last || st.SizeBytes > capacity || st.SizeBytes != c.SizeBytes() {
			t.Fatalf("after %d bytes put: %+v (previously %d)", size, st, last)
		}
		// Memory comes in segments, a sixteenth of a shard's budget: at
		// most the one being filled and the spare are beyond what was put.
		if st.SizeBytes > size*5/4+capacity/8 {
			t.Fatalf("after %d bytes put the cache holds %d", size, st.SizeBytes)
		}
		last = st.SizeBytes
	}
	if last < capacity*3/4 || c.Stats().Evictions == 0 {
		t.Fatalf("a cache put 4x its capacity holds %d of %d bytes", last, capacity)
	}
	// What SizeBytes counts is what the shards hold.
	held := 0
	for i := range c.shards {
		s := &c.shards[i]
		for _, seg := range s.segs {
			held += len(seg)
		}
		held += len(s.slots) * 16
	}
	if held != last {
		t.Fatalf("SizeBytes %d, shards hold %d", last, held)
	}
	if d := NewCache(0); d.SizeBytes() != 0 || d.CapacityBytes() != 0 || d.Stats().SizeBytes != 0 {
		t.Fatal("a disabled cache reports memory")
	}
}

// TestCacheModel drives the cache with random keys and sizes and checks
// that every hit returns exactly the bytes put, that the cache stays
// within its capacity, and that no entry is lost to the backward-shift
// deletions of its index.
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
		file, block := 1+uint32(rng.IntN(3)), rng.IntN(400)
		key := cacheKey(file, block)
		n, ok := sizes[key]
		if !ok {
			n = 1 + rng.IntN(1500)
			sizes[key] = n
		}
		want := content(key, n)
		hit := c.View(file, block, func(b []byte) {
			if !bytes.Equal(b, want) || cap(b)-len(b) < Slack {
				t.Fatalf("step %d: key %x returned wrong bytes or no slack", i, key)
			}
		})
		if !hit {
			c.Put(file, block, want)
		}
	}
	st := c.Stats()
	if st.SizeBytes > 96<<10 || st.Evictions == 0 || st.Hits == 0 || st.Misses == 0 {
		t.Fatalf("stats %+v", st)
	}
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

// TestCacheSecondChance checks CLOCK's promise: a block used between two
// sweeps of the hand survives a scan of blocks used once, which evicts
// everything else.
func TestCacheSecondChance(t *testing.T) {
	c := NewCache(128 << 10)
	blk := make([]byte, 1500)
	hotMisses := 0
	const scan = 2000
	for b := range scan {
		if !c.View(1, 0, func([]byte) {}) {
			hotMisses++
			c.Put(1, 0, blk)
		}
		c.Put(2, b, blk)
	}
	if hotMisses != 1 || c.Stats().Evictions < scan/2 {
		t.Fatalf("the hot block missed %d times over a scan of %d blocks (%+v)", hotMisses, scan, c.Stats())
	}
}

// TestFileIDs: ids are never 0 and never repeat, so blocks of two files
// never share a key.
func TestFileIDs(t *testing.T) {
	c := NewCache(1 << 20)
	seen := map[uint32]bool{}
	for range 1000 {
		id := c.NewFileID()
		if id == 0 || seen[id] {
			t.Fatalf("file id %d repeated or 0", id)
		}
		seen[id] = true
	}
	c.Put(1, 5, []byte("one"))
	if c.View(2, 5, func([]byte) {}) {
		t.Fatal("file 2 sees file 1's block")
	}
}
