package table

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"
)

func u64(k uint64) uint64 { return Mix64(k) }

// check verifies the table's invariants against its own bookkeeping and,
// when model is not nil, its contents against model.
func check[K comparable, V comparable](t testing.TB, tb *Table[K, V], model map[K]V) {
	t.Helper()
	var full, tombs int
	for i, c := range tb.ctrl {
		switch {
		case c >= ctrlFull:
			full++
			k := tb.slots[i].key
			if got := fingerprint(tb.hash(k)); got != c {
				t.Fatalf("slot %d: control byte %#x, want %#x", i, c, got)
			}
			if j := tb.find(k, tb.hash(k)); j != i {
				t.Fatalf("key %v lives in slot %d but find returns %d", k, i, j)
			}
		case c == ctrlDeleted:
			tombs++
		case c != ctrlEmpty:
			t.Fatalf("slot %d: bad control byte %#x", i, c)
		}
	}
	if full != tb.live || full != tb.Len() || full+tombs != tb.used {
		t.Fatalf("bookkeeping: live=%d used=%d, counted full=%d tombstones=%d", tb.live, tb.used, full, tombs)
	}
	if tb.used > tb.limit || tb.limit >= len(tb.ctrl) {
		t.Fatalf("load: used=%d limit=%d cap=%d", tb.used, tb.limit, len(tb.ctrl))
	}
	if model == nil {
		return
	}
	if tb.Len() != len(model) {
		t.Fatalf("Len=%d, model has %d", tb.Len(), len(model))
	}
	for k, want := range model {
		if got, ok := tb.Get(k); !ok || got != want {
			t.Fatalf("Get(%v) = %v, %v; want %v, true", k, got, ok, want)
		}
	}
	seen := 0
	tb.Range(func(k K, v V) bool {
		seen++
		if want, ok := model[k]; !ok || want != v {
			t.Fatalf("Range yielded %v=%v, model has %v, %v", k, v, want, ok)
		}
		return true
	})
	if seen != len(model) {
		t.Fatalf("Range yielded %d entries, want %d", seen, len(model))
	}
}

func TestBasic(t *testing.T) {
	tb := New[uint64, int](u64, 0)
	if _, ok := tb.Get(0); ok {
		t.Fatal("empty table has key 0")
	}
	tb.Put(0, 10) // key 0 is an ordinary key
	tb.Put(1, 11)
	tb.Put(1, 12) // overwrite
	if v, ok := tb.Get(1); !ok || v != 12 {
		t.Fatalf("Get(1) = %d, %v", v, ok)
	}
	if v, ok := tb.Get(0); !ok || v != 10 {
		t.Fatalf("Get(0) = %d, %v", v, ok)
	}
	if tb.Len() != 2 {
		t.Fatalf("Len = %d", tb.Len())
	}
	if !tb.Delete(0) || tb.Delete(0) || tb.Delete(99) {
		t.Fatal("Delete results wrong")
	}
	if _, ok := tb.Get(0); ok {
		t.Fatal("deleted key still present")
	}
	if tb.used != 2 || tb.live != 1 {
		t.Fatalf("delete left used=%d live=%d, want a tombstone", tb.used, tb.live)
	}
	tb.Put(0, 20) // reinsert reuses the tombstone on its path
	if tb.used != 2 || tb.live != 2 {
		t.Fatalf("reinsert: used=%d live=%d, want the tombstone reused", tb.used, tb.live)
	}
	p, ok := tb.Ref(0)
	if !ok || *p != 20 {
		t.Fatal("Ref(0)")
	}
	*p += 5
	if v, _ := tb.Get(0); v != 25 {
		t.Fatalf("Ref update lost: %d", v)
	}
	if _, ok := tb.Ref(7); ok {
		t.Fatal("Ref of absent key")
	}
	q := tb.Upsert(7)
	if *q != 0 {
		t.Fatalf("Upsert of absent key = %d, want zero", *q)
	}
	*q = 70
	if *tb.Upsert(7) != 70 {
		t.Fatal("Upsert of present key lost its value")
	}
	check(t, tb, map[uint64]int{0: 25, 1: 12, 7: 70})
	before := tb.MemoryBytes()
	tb.Reset()
	check(t, tb, map[uint64]int{})
	if tb.MemoryBytes() != before {
		t.Fatal("Reset changed the backing arrays")
	}
}

func TestGrow(t *testing.T) {
	tb := New[uint64, uint64](u64, 0)
	if len(tb.ctrl) != minCap {
		t.Fatalf("initial capacity %d", len(tb.ctrl))
	}
	model := map[uint64]uint64{}
	for i := uint64(0); i < 10000; i++ {
		tb.Put(i, i*3)
		model[i] = i * 3
	}
	check(t, tb, model)
	if c := len(tb.ctrl); c != 16384 {
		t.Fatalf("capacity after 10000 inserts = %d, want 16384", c)
	}
	if want := 16384 * (1 + 16); tb.MemoryBytes() != want {
		t.Fatalf("MemoryBytes = %d, want %d", tb.MemoryBytes(), want)
	}
	// A hint sizes the table so that it never grows.
	h := New[uint64, uint64](u64, 10000)
	c := len(h.ctrl)
	for i := uint64(0); i < 10000; i++ {
		h.Put(i, i)
	}
	if len(h.ctrl) != c {
		t.Fatalf("hinted table grew from %d to %d", c, len(h.ctrl))
	}
}

// TestTombstoneChurn inserts and deletes forever with a bounded live set:
// the table must rehash in place rather than grow, and stay correct.
func TestTombstoneChurn(t *testing.T) {
	tb := New[uint64, uint64](u64, 100)
	c := len(tb.ctrl)
	model := map[uint64]uint64{}
	for i := uint64(0); i < 100000; i++ {
		tb.Put(i, i)
		model[i] = i
		if i >= 80 {
			tb.Delete(i - 80)
			delete(model, i-80)
		}
		if i%9973 == 0 {
			check(t, tb, model)
		}
	}
	check(t, tb, model)
	if len(tb.ctrl) != c {
		t.Fatalf("capacity grew from %d to %d with 80 live keys", c, len(tb.ctrl))
	}
}

// TestForcedCollisions runs with hash functions that send every key (or
// groups of keys) down the same probe sequence.
func TestForcedCollisions(t *testing.T) {
	for _, distinct := range []uint64{1, 3} {
		t.Run(fmt.Sprint(distinct), func(t *testing.T) {
			hash := func(k uint64) uint64 { return Mix64(k%distinct) | 1<<40 }
			tb := New[uint64, uint64](hash, 0)
			model := map[uint64]uint64{}
			for i := uint64(0); i < 300; i++ {
				tb.Put(i, i+1)
				model[i] = i + 1
			}
			check(t, tb, model)
			for i := uint64(0); i < 300; i += 2 {
				tb.Delete(i)
				delete(model, i)
			}
			check(t, tb, model)
			for i := uint64(1000); i < 1300; i++ {
				tb.Put(i, i)
				model[i] = i
			}
			check(t, tb, model)
		})
	}
}

// TestProbeSequence pins down where double hashing puts colliding keys:
// slot h1 + i*h2 for the i-th key, with h1 the low bits and h2 the odd
// high bits.
func TestProbeSequence(t *testing.T) {
	const h1, h2 = 5, 3
	hash := func(uint64) uint64 { return h2<<32 | h1 }
	tb := New[uint64, int](hash, 0) // 8 slots, room for 6
	for k := uint64(0); k < 6; k++ {
		tb.Put(k+100, int(k))
	}
	for k := uint64(0); k < 6; k++ {
		want := (h1 + k*h2) % 8
		if tb.slots[want].key != k+100 || tb.ctrl[want] < ctrlFull {
			t.Fatalf("key %d not in slot %d: ctrl=%v", k+100, want, tb.ctrl)
		}
	}
	// Deleting the third key leaves a tombstone that lookups of the later
	// keys walk over and that the next insert takes.
	tb.Delete(102)
	if tb.ctrl[(h1+2*h2)%8] != ctrlDeleted {
		t.Fatal("no tombstone")
	}
	for k := uint64(103); k < 106; k++ {
		if _, ok := tb.Get(k); !ok {
			t.Fatalf("key %d lost behind a tombstone", k)
		}
	}
	tb.Put(200, 0)
	if tb.slots[(h1+2*h2)%8].key != 200 {
		t.Fatal("insert did not reuse the first tombstone")
	}
	// An even stride would only reach half of the slots; the stride is
	// forced odd, so a table full of colliders is still reachable.
	even := New[uint64, int](func(uint64) uint64 { return 2 << 32 }, 0)
	for k := uint64(0); k < 6; k++ {
		even.Put(k, int(k))
	}
	check(t, even, map[uint64]int{0: 0, 1: 1, 2: 2, 3: 3, 4: 4, 5: 5})
}

func TestRange(t *testing.T) {
	tb := New[uint64, uint64](u64, 0)
	for i := uint64(1); i <= 100; i++ {
		tb.Put(i, i*i)
	}
	var sum uint64
	n := 0
	tb.Range(func(k, v uint64) bool {
		if v != k*k {
			t.Fatalf("Range: %d=%d", k, v)
		}
		sum += k
		n++
		return true
	})
	if n != 100 || sum != 5050 {
		t.Fatalf("Range visited %d keys summing to %d", n, sum)
	}
	n = 0
	tb.Range(func(k, v uint64) bool { n++; return n < 10 })
	if n != 10 {
		t.Fatalf("Range did not stop: %d calls", n)
	}
}

// TestPointerKeys shows the table works for any comparable K, not only
// integers.
func TestPointerKeys(t *testing.T) {
	hash := func(s string) uint64 {
		var h uint64 = 14695981039346656037
		for i := 0; i < len(s); i++ {
			h = (h ^ uint64(s[i])) * 1099511628211
		}
		return Mix64(h)
	}
	tb := New[string, []int](hash, 0)
	model := map[string]int{}
	for i := range 500 {
		k := fmt.Sprint("k", i)
		tb.Put(k, []int{i})
		model[k] = i
	}
	for i := 0; i < 500; i += 3 {
		tb.Delete(fmt.Sprint("k", i))
		delete(model, fmt.Sprint("k", i))
	}
	if tb.Len() != len(model) {
		t.Fatalf("Len %d, want %d", tb.Len(), len(model))
	}
	for k, v := range model {
		got, ok := tb.Get(k)
		if !ok || len(got) != 1 || got[0] != v {
			t.Fatalf("Get(%q) = %v, %v", k, got, ok)
		}
	}
}

func TestNoAllocs(t *testing.T) {
	tb := New[uint64, [5]uint32](u64, 1000)
	for i := uint64(0); i < 500; i++ {
		tb.Put(i, [5]uint32{uint32(i)})
	}
	var k uint64
	allocs := testing.AllocsPerRun(1000, func() {
		k++
		tb.Get(k % 1000)
		if p, ok := tb.Ref(k % 500); ok {
			p[1]++
		}
		tb.Upsert(k%500 + 500)[2]++
		tb.Delete(k%500 + 500)
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per op mix", allocs)
	}
}

func TestMix(t *testing.T) {
	// Avalanche: flipping one input bit flips about half the output bits.
	r := rand.New(rand.NewPCG(1, 2))
	total := 0
	const n = 2000
	for range n {
		x := r.Uint64()
		b := uint(r.IntN(64))
		total += popcount(Mix64(x) ^ Mix64(x^1<<b))
	}
	if avg := float64(total) / n; avg < 30 || avg > 34 {
		t.Fatalf("Mix64 flips %.1f bits on average, want ~32", avg)
	}
	if HashPair(1, 2) == HashPair(2, 1) {
		t.Fatal("HashPair is symmetric")
	}
	seen := map[uint64]bool{}
	for a := uint64(0); a < 100; a++ {
		for b := uint64(0); b < 100; b++ {
			seen[HashPair(a, b)] = true
		}
	}
	if len(seen) != 10000 {
		t.Fatalf("HashPair collided: %d distinct of 10000", len(seen))
	}
}

func popcount(x uint64) int {
	n := 0
	for ; x != 0; x &= x - 1 {
		n++
	}
	return n
}

// runOps interprets data as operations on a table of small keys (so that
// updates, deletes and reinserts of the same key are frequent) and checks
// the table against a Go map after every step and in full at the end.
func runOps(t testing.TB, data []byte, hash func(uint16) uint64) {
	tb := New[uint16, uint32](hash, 0)
	model := map[uint16]uint32{}
	for len(data) >= 3 {
		op, k := data[0], binary.LittleEndian.Uint16(data[1:])%512
		data = data[3:]
		switch op % 6 {
		case 0, 1:
			v := uint32(op) << 8
			tb.Put(k, v)
			model[k] = v
		case 2:
			got := tb.Delete(k)
			_, want := model[k]
			if got != want {
				t.Fatalf("Delete(%d) = %v, want %v", k, got, want)
			}
			delete(model, k)
		case 3:
			*tb.Upsert(k) += 1
			model[k]++
		case 4:
			if p, ok := tb.Ref(k); ok {
				*p ^= 0xff
				model[k] ^= 0xff
			} else if _, in := model[k]; in {
				t.Fatalf("Ref(%d) missed", k)
			}
		case 5:
			got, ok := tb.Get(k)
			want, in := model[k]
			if ok != in || got != want {
				t.Fatalf("Get(%d) = %d, %v; want %d, %v", k, got, ok, want, in)
			}
		}
		if tb.Len() != len(model) {
			t.Fatalf("Len = %d, want %d", tb.Len(), len(model))
		}
	}
	check(t, tb, model)
}

func TestRandomOps(t *testing.T) {
	hashes := map[string]func(uint16) uint64{
		"mixed": func(k uint16) uint64 { return Mix64(uint64(k)) },
		"few":   func(k uint16) uint64 { return Mix64(uint64(k % 7)) },
	}
	r := rand.New(rand.NewPCG(3, 4))
	for name, hash := range hashes {
		t.Run(name, func(t *testing.T) {
			for range 20 {
				data := make([]byte, 3*5000)
				for i := range data {
					data[i] = byte(r.Uint32())
				}
				runOps(t, data, hash)
			}
		})
	}
}

func FuzzOps(f *testing.F) {
	f.Add([]byte{0, 1, 0, 2, 1, 0, 0, 1, 0, 5, 1, 0})
	f.Add([]byte{3, 0, 0, 3, 0, 0, 2, 0, 0, 3, 0, 0, 4, 0, 0, 5, 0, 0})
	seed := make([]byte, 3*300)
	r := rand.New(rand.NewPCG(5, 6))
	for i := range seed {
		seed[i] = byte(r.Uint32())
	}
	f.Add(seed)
	f.Fuzz(func(t *testing.T, data []byte) {
		runOps(t, data, func(k uint16) uint64 { return Mix64(uint64(k)) })
		runOps(t, data, func(k uint16) uint64 { return Mix64(uint64(k & 3)) })
	})
}

const benchN = 1 << 20

func benchKeys() []uint64 {
	r := rand.New(rand.NewPCG(7, 8))
	keys := make([]uint64, benchN)
	for i := range keys {
		keys[i] = r.Uint64()
	}
	return keys
}

func BenchmarkGet(b *testing.B) {
	keys := benchKeys()
	b.Run("table", func(b *testing.B) {
		tb := New[uint64, uint64](Mix64, 0)
		for _, k := range keys {
			tb.Put(k, k)
		}
		b.ResetTimer()
		var sink uint64
		for i := 0; b.Loop(); i++ {
			v, _ := tb.Get(keys[i&(benchN-1)])
			sink += v
		}
		_ = sink
	})
	b.Run("map", func(b *testing.B) {
		m := map[uint64]uint64{}
		for _, k := range keys {
			m[k] = k
		}
		b.ResetTimer()
		var sink uint64
		for i := 0; b.Loop(); i++ {
			sink += m[keys[i&(benchN-1)]]
		}
		_ = sink
	})
}

// BenchmarkPut fills a table with 1M keys from empty (growth included)
// and reports ns per insert.
func BenchmarkPut(b *testing.B) {
	keys := benchKeys()
	b.Run("table", func(b *testing.B) {
		for b.Loop() {
			tb := New[uint64, uint64](Mix64, 0)
			for _, k := range keys {
				tb.Put(k, k)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/benchN, "ns/key")
	})
	b.Run("map", func(b *testing.B) {
		for b.Loop() {
			m := map[uint64]uint64{}
			for _, k := range keys {
				m[k] = k
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/benchN, "ns/key")
	})
}
