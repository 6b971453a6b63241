package cold

import (
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
