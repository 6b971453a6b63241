package tier

import (
	"math/rand/v2"
	"testing"

	"github.com/tally-dev/tally/engine/counters"
)

// TestPairBlockKinds encodes blocks of 1 to 1024 pairs whose kinds are
// likes alone or a mix with few to most beyond like (exceptions whose
// positions take up to 10 bits, and more than a word of them), and reads
// every pair back through kindOf and decode; a block of likes has no
// kind column, and is the size of the same pairs' block without kinds.
func TestPairBlockKinds(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	sc := new(pairScratch)
	for _, n := range []int{1, 2, 3, 63, 64, 65, 511, 512, 1000, 1023, 1024} {
		for _, rate := range []float64{0, 0.01, 0.1, 0.5, 0.95} {
			var e pairEncoder
			post, user := uint64(1)<<40, uint64(0)
			for range n {
				if rng.IntN(4) == 0 {
					post += 1 + rng.Uint64N(1000)
				}
				user += 1 + rng.Uint64N(1<<uint(rng.IntN(20)))
				kind := counters.Like
				if rng.Float64() < rate {
					kind = counters.Kind(2 + rng.IntN(counters.MaxKinds-1))
				}
				e.add(pair{post, user, kind})
			}
			in := e.pending
			blk, first := e.encode(nil)
			blk = append(blk, make([]byte, BlockSlack)...)[:len(blk)]
			var k pairBlock
			if err := k.parse(first.post, first.user, blk); err != nil {
				t.Fatalf("n %d rate %v: parse: %v", n, rate, err)
			}
			anyKind := false
			for _, q := range in[:n] {
				anyKind = anyKind || q.kind != counters.Like
				if got := k.kindOf(q.post, q.user); got != q.kind {
					t.Fatalf("n %d rate %v: kindOf %v = %d", n, rate, q, got)
				}
				if got := k.kindOf(q.post, q.user+1); got != counters.NoKind && (q.user+1 != nextUser(in[:n], q)) {
					t.Fatalf("n %d rate %v: kindOf of an absent pair = %d", n, rate, got)
				}
			}
			if k.kinded != anyKind {
				t.Fatalf("n %d rate %v: kinded %v, a kind beyond like %v", n, rate, k.kinded, anyKind)
			}
			c, err := k.decode(sc.pairs[:], sc.vals[:])
			if err != nil || c != n {
				t.Fatalf("n %d rate %v: decode %d %v", n, rate, c, err)
			}
			for j, q := range sc.pairs[:n] {
				if q != in[j] {
					t.Fatalf("n %d rate %v: decoded %v, encoded %v", n, rate, q, in[j])
				}
			}
			if !anyKind {
				continue
			}
			// The same pairs as likes: no column, fewer bytes.
			for j := range n {
				e.add(pair{in[j].post, in[j].user, counters.Like})
			}
			plain, _ := e.encode(nil)
			if len(plain) >= len(blk) {
				t.Fatalf("n %d rate %v: %d bytes with kinds, %d without", n, rate, len(blk), len(plain))
			}
		}
	}
}

// nextUser returns the user of the pair after q in ps when it is of q's
// post, or 0.
func nextUser(ps []pair, q pair) uint64 {
	for j := range ps {
		if ps[j] == q && j+1 < len(ps) && ps[j+1].post == q.post {
			return ps[j+1].user
		}
	}
	return 0
}
