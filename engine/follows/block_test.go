package follows

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/tally-dev/tally/engine/bitpack"
)

// blockOf returns e's pairs as a block's bytes with bitpack.Slack bytes
// of capacity past them, as the arena gives.
func blockOf(enc *encoder, e *entries) []byte {
	b := enc.encode(e, 0, e.n)
	return append(slices.Clip(b), make([]byte, bitpack.Slack)...)[:len(b)]
}

// checkRoundTrip encodes e, checks the block, and reads every run back
// through find and run as List does.
func checkRoundTrip(t testing.TB, e *entries) {
	t.Helper()
	var enc encoder
	buf := blockOf(&enc, e)
	var blk block
	if err := blk.parse(buf); err != nil {
		t.Fatal(err)
	}
	var got entries
	if err := checkBlock(&blk, e.a[0], e.b[0], &got, &enc); err != nil {
		t.Fatal(err)
	}
	if got.n != e.n || !slices.Equal(got.a[:e.n], e.a[:e.n]) || !slices.Equal(got.b[:e.n], e.b[:e.n]) || !slices.Equal(got.v[:e.n], e.v[:e.n]) {
		t.Fatalf("decoded %v %v %v, want %v %v %v", got.a[:got.n], got.b[:got.n], got.v[:got.n], e.a[:e.n], e.b[:e.n], e.v[:e.n])
	}
	for i := 0; i < e.n; {
		j, start, length := blk.find(e.a[0], e.a[i])
		if j < 0 || start != i {
			t.Fatalf("find(%d) = %d, %d, want start %d", e.a[i], j, start, i)
		}
		bs, vs := blk.run(e.b[0], j, start, length, nil, nil, true)
		if !slices.Equal(bs, e.b[i:i+length]) || !slices.Equal(vs, e.v[i:i+length]) {
			t.Fatalf("run %d = %v %v, want %v %v", j, bs, vs, e.b[i:i+length], e.v[i:i+length])
		}
		i += length
		if i < e.n && e.a[i] > e.a[i-1]+1 {
			if j, _, _ := blk.find(e.a[0], e.a[i]-1); j >= 0 {
				t.Fatalf("find(%d) found a run not there", e.a[i]-1)
			}
		}
	}
}

func TestBlockRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	for iter := range 3000 {
		if e := randomBlock(rng, iter); ascending(e) {
			checkRoundTrip(t, e)
		}
	}
}

// randomBlock returns the pairs of a block of random shape: runs of
// every length, ids and values of every width, a rare wide value. They
// may not ascend (a step overflowed).
func randomBlock(rng *rand.Rand, iter int) *entries {
	var e entries
	e.n = 1 + rng.IntN(maxBlock)
	if iter%5 == 0 {
		e.n = maxBlock
	}
	aBits, bBits, vBits := rng.IntN(65), rng.IntN(65), rng.IntN(65)
	runs := 1 + rng.IntN(e.n)
	if iter%7 == 0 {
		runs = e.n // every pair its own run
	}
	a := rng.Uint64() >> rng.IntN(65) >> 1
	var b uint64
	for i := range e.n {
		switch {
		case i == 0:
			b = rng.Uint64() >> 1
		case rng.IntN(e.n) < runs-1 && a < math.MaxUint64-1<<(aBits/2):
			a += 1 + rng.Uint64()>>(64-aBits/2+1)>>1
			b = rng.Uint64() >> (64 - bBits) >> 1
			if bBits == 0 {
				b = 0
			}
		default:
			step := 1 + rng.Uint64()>>(64-bBits/2)>>1
			if bBits < 2 {
				step = 1
			}
			if b > math.MaxUint64-step {
				a++ // no room left in this run
				b = 0
			} else {
				b += step
			}
		}
		e.a[i], e.b[i] = a, b
		e.v[i] = randomValue(rng, vBits)
	}
	return &e
}

func randomValue(rng *rand.Rand, vBits int) int64 {
	v := int64(rng.Uint64() >> (64 - vBits))
	if rng.IntN(10) == 0 {
		v = -v
	}
	if rng.IntN(50) == 0 {
		v = math.MaxInt64 - int64(rng.IntN(2)) // a rare wide one
	}
	return v
}

func ascending(e *entries) bool {
	for i := 1; i < e.n; i++ {
		if !less(e.a[i-1], e.b[i-1], e.a[i], e.b[i]) {
			return false
		}
	}
	return true
}

// TestPatches checks that a rare wide value does not widen the column:
// 255 values under 16 and one of 2^40 take about 4 bits each, not 41.
func TestPatches(t *testing.T) {
	var e entries
	e.n = maxBlock
	for i := range e.n {
		e.a[i], e.b[i], e.v[i] = 1, uint64(i), int64(i%16)
	}
	e.v[100] = 1 << 40
	var enc encoder
	n := len(enc.encode(&e, 0, e.n))
	if n > 200 {
		t.Fatalf("block of %d bytes", n)
	}
	checkRoundTrip(t, &e)
}

// FuzzBlock feeds the block decoder arbitrary bytes: block.parse must
// reject what it cannot read safely, the decoders must not panic on what
// it accepts, and what checkBlock accepts must be pairs that ascend from
// the first and encode and decode back to themselves.
func FuzzBlock(f *testing.F) {
	var enc encoder
	var e entries
	for i := range 40 {
		e.a[i], e.b[i], e.v[i] = uint64(i/7), uint64(i*i), int64(i%5)
	}
	e.n = 40
	f.Add(slices.Clone(enc.encode(&e, 0, e.n)), uint64(0), uint64(0))
	e.v[3] = 1 << 50
	f.Add(slices.Clone(enc.encode(&e, 0, e.n)), uint64(0), uint64(0))
	f.Add([]byte{0xff, 0xff, 0x7f}, uint64(1), uint64(2))
	f.Fuzz(func(t *testing.T, b []byte, a0, b0 uint64) {
		buf := append(slices.Clip(b), make([]byte, bitpack.Slack)...)[:len(b)]
		var blk block
		if blk.parse(buf) != nil {
			return
		}
		var got entries
		var enc encoder
		blk.decodeAll(a0, b0, &got, &enc.cols)
		for i := 0; i < blk.n; i++ {
			if j, start, length := blk.find(a0, got.a[i]); j >= 0 && start+length <= blk.n {
				blk.run(b0, j, start, length, nil, nil, true)
			}
		}
		got.n = 0
		if checkBlock(&blk, a0, b0, &got, &enc) != nil {
			return
		}
		if !ascending(&got) || got.a[0] != a0 || got.b[0] != b0 {
			t.Fatal("checkBlock accepted pairs that do not ascend from the first")
		}
		checkRoundTrip(t, &got)
	})
}

// BenchmarkBlock measures a full block's encode, full decode, and the
// read of one run of 20 pairs (List's path), for a forward-direction
// block of 256 pairs: 13 viewers' runs of 20 followees spread over 10M
// ids, snapshots under 30.
//
//	go test -run '^$' -bench Block ./engine/follows
func BenchmarkBlock(b *testing.B) {
	rng := rand.New(rand.NewPCG(4, 4))
	var e entries
	for e.n < maxBlock {
		v := uint64(e.n / 20)
		ts := make([]uint64, 20)
		for i := range ts {
			ts[i] = rng.Uint64N(10_000_000)
		}
		slices.Sort(ts)
		for _, u := range slices.Compact(ts) {
			if e.n < maxBlock {
				e.a[e.n], e.b[e.n], e.v[e.n] = v, u, int64(rng.IntN(30))
				e.n++
			}
		}
	}
	var enc encoder
	buf := blockOf(&enc, &e)
	var blk block
	if err := blk.parse(buf); err != nil {
		b.Fatal(err)
	}
	b.Run("encode", func(b *testing.B) {
		for b.Loop() {
			enc.encode(&e, 0, e.n)
		}
		b.ReportMetric(float64(len(buf))/float64(e.n), "B/pair")
	})
	b.Run("decodeAll", func(b *testing.B) {
		var got entries
		for b.Loop() {
			got.n = 0
			blk.parse(buf)
			blk.decodeAll(e.a[0], e.b[0], &got, &enc.cols)
		}
	})
	b.Run("run", func(b *testing.B) {
		bs, vs := make([]uint64, 0, 64), make([]int64, 0, 64)
		v := uint64(0)
		for b.Loop() {
			blk.parse(buf)
			j, start, length := blk.find(e.a[0], v)
			bs, vs = blk.run(e.b[0], j, start, length, bs[:0], vs[:0], true)
			v = (v + 1) % uint64(blk.r)
		}
	})
}
