package bitpack

import (
	"math/bits"
	"math/rand/v2"
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
