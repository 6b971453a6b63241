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
