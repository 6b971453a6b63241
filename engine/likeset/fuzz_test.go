package likeset

import (
	"math/rand/v2"
	"testing"
)

// FuzzBlock feeds the block parser and decoder arbitrary bytes and first
// pairs: they must never panic or read out of bounds, and a block that
// decodes must answer has exactly as its decoded pairs say. The corpus
// starts from the blocks of blockCases.
func FuzzBlock(f *testing.F) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, ps := range blockCases(r) {
		for _, limit := range []int{3, 64, blockPairs} {
			w := buildPairs(ps, limit)
			for b := range min(w.blocks(), 4) {
				f.Add(w.data[w.offs[b]:w.offs[b+1]], w.firsts[2*b], w.firsts[2*b+1])
			}
		}
	}
	sc := new(scratch)
	f.Fuzz(func(t *testing.T, data []byte, k0, u0 uint64) {
		if len(data) == 0 {
			return
		}
		buf := make([]byte, len(data)+slack)
		copy(buf, data)
		var blk block
		if blk.parse(k0, u0, buf, 0, len(data)) != nil {
			return
		}
		// Lookups on a parsed block stay in bounds whatever it holds.
		probe := func(k, u uint64) bool { return blk.has(k, u) }
		for i := range 64 {
			probe(k0+uint64(i), u0+uint64(i))
			probe(k0, u0-uint64(i))
			probe(k0^1<<uint(i), u0)
		}
		n, err := blk.decode(sc.pairs[:], sc.vals[:])
		if err != nil {
			return
		}
		in := make(map[pk]bool, n)
		for j, q := range sc.pairs[:n] {
			if j > 0 && cmpPK(sc.pairs[j-1], q) >= 0 {
				t.Fatalf("decoded pairs out of order at %d", j)
			}
			in[q] = true
		}
		for _, q := range sc.pairs[:n] {
			if !probe(q.k, q.u) {
				t.Fatalf("decoded %v, has says absent", q)
			}
			for _, x := range []pk{{q.k, q.u + 1}, {q.k, q.u - 1}, {q.k + 1, q.u}, {q.k - 1, q.u}} {
				if probe(x.k, x.u) != in[x] {
					t.Fatalf("has(%v) = %v, decoded set says %v", x, !in[x], in[x])
				}
			}
		}
	})
}
