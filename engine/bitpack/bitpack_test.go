package bitpack

import (
	"cmp"
	"math/bits"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestWriterGetRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		n := rng.IntN(300)
		widths := make([]int, n)
		vals := make([]uint64, n)
		var w Writer
		for i := range n {
			widths[i] = rng.IntN(65)
			vals[i] = rng.Uint64() & LowMask(uint(widths[i]))
			w.Put(vals[i]|^LowMask(uint(widths[i])), widths[i]) // high garbage must be dropped
		}
		b := w.Flush()
		b = append(b, make([]byte, Slack)...)[:len(b)]
		off := 0
		for i := range n {
			if got := Get(b, off, widths[i]); got != vals[i] {
				t.Fatalf("field %d (w=%d): got %x want %x", i, widths[i], got, vals[i])
			}
			off += widths[i]
		}
	}
}

// TestSet rewrites random fields of a random buffer and checks them and
// every other bit against a bit-by-bit model.
func TestSet(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	b := make([]byte, 64, 64+Slack)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	bit := func(b []byte, i int) byte { return b[i>>3] >> (i & 7) & 1 }
	for range 5000 {
		w := rng.IntN(65)
		off := rng.IntN(8*len(b) - w + 1)
		v := rng.Uint64()
		want := slices.Clone(b)
		for k := range w {
			i := off + k
			want[i>>3] = want[i>>3]&^(1<<(i&7)) | byte(v>>k&1)<<(i&7)
		}
		Set(b, off, w, v)
		for i := range 8 * len(b) {
			if bit(b, i) != bit(want, i) {
				t.Fatalf("Set(off=%d, w=%d): bit %d is %d, want %d", off, w, i, bit(b, i), bit(want, i))
			}
		}
		if got := Get(b, off, w); got != v&LowMask(uint(w)) {
			t.Fatalf("Get after Set(off=%d, w=%d) = %x, want %x", off, w, got, v&LowMask(uint(w)))
		}
	}
}

// TestPutFields checks that a column written with PutFields, between
// fields written with Put, reads back as Put's would.
func TestPutFields(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for range 500 {
		lead, n, width := rng.IntN(70), rng.IntN(100), rng.IntN(65)
		sub := rng.Uint64() >> rng.IntN(65)
		vs := make([]uint64, n)
		for i := range vs {
			vs[i] = sub + rng.Uint64()&LowMask(uint(width)) | rng.Uint64()&^LowMask(uint(width))
		}
		var w Writer
		w.Zeros(lead)
		w.PutFields(vs, sub, width)
		w.Put(5, 3)
		b := w.Flush()
		b = append(b, make([]byte, Slack)...)[:len(b)]
		for i, v := range vs {
			if got, want := Get(b, lead+i*width, width), (v-sub)&LowMask(uint(width)); got != want {
				t.Fatalf("field %d (w=%d): got %x want %x", i, width, got, want)
			}
		}
		if Get(b, lead+n*width, 3) != 5 {
			t.Fatal("the field after the column")
		}
	}
}

// TestSortByKey checks the radix sort against slices.SortStableFunc on
// keys that differ in a few bytes, in all, and in none but one, with
// repeated keys whose order must be kept.
func TestSortByKey(t *testing.T) {
	type kv struct{ k, seq uint64 }
	rng := rand.New(rand.NewPCG(5, 6))
	for _, gen := range []func() uint64{
		func() uint64 { return rng.Uint64N(1 << 20) },
		rng.Uint64,
		func() uint64 { return 0xabcd<<48 | rng.Uint64N(256)<<24 },
		func() uint64 { return rng.Uint64N(5) },
	} {
		for _, n := range []int{0, 1, 63, 64, 1000, 50000} {
			xs := make([]kv, n)
			for i := range xs {
				xs[i] = kv{gen(), uint64(i)}
			}
			want := slices.Clone(xs)
			slices.SortStableFunc(want, func(a, b kv) int { return cmp.Compare(a.k, b.k) })
			SortByKey(xs, func(x kv) uint64 { return x.k }, nil)
			if !slices.Equal(xs, want) {
				t.Fatalf("n=%d: SortByKey differs from slices.SortStableFunc", n)
			}
		}
	}
}

func TestPextPdep(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 10000 {
		x, mask := rng.Uint64(), rng.Uint64()
		p := Pext(x, mask)
		if bits.Len64(p) > bits.OnesCount64(mask) {
			t.Fatalf("Pext(%x,%x)=%x has more bits than the mask", x, mask, p)
		}
		if Pdep(p, mask) != x&mask {
			t.Fatalf("Pdep(Pext(x)) != x&mask for x=%x mask=%x", x, mask)
		}
		// Order is kept for values that agree outside the mask.
		y := x&^mask | rng.Uint64()&mask
		if (x < y) != (Pext(x, mask) < Pext(y, mask)) && x != y {
			t.Fatalf("order not kept: %x %x mask %x", x, y, mask)
		}
	}
}

func TestSelect64(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for range 10000 {
		x := rng.Uint64()
		r := 0
		for i := range 64 {
			if x>>i&1 == 1 {
				if got := Select64(x, r); got != i {
					t.Fatalf("Select64(%x, %d) = %d, want %d", x, r, got, i)
				}
				r++
			}
		}
	}
}

func TestUvarint(t *testing.T) {
	b := []byte{5, 0x80, 0x01, 0xff}
	v, p := Uvarint(b, 0)
	if v != 5 || p != 1 {
		t.Fatalf("one byte: %d %d", v, p)
	}
	if v, p = Uvarint(b, p); v != 128 || p != 3 {
		t.Fatalf("two bytes: %d %d", v, p)
	}
	if _, p = Uvarint(b, p); p != -1 {
		t.Fatalf("a cut varint read as %d", p)
	}
	if _, p = Uvarint(b, -1); p != -1 {
		t.Fatal("a failed read did not stay failed")
	}
}
