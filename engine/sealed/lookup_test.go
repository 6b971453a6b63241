package sealed

import (
	"math/bits"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/bitpack"
)

func TestSelect64(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	xs := []uint64{1, 1 << 63, ^uint64(0), 0x8000000000000001, 0x00ff00ff00ff00ff}
	for range 2000 {
		x := rng.Uint64()
		xs = append(xs, x, x&rng.Uint64(), x|rng.Uint64(), x&rng.Uint64()&rng.Uint64())
	}
	for _, x := range xs {
		pos := 0
		for r := range bits.OnesCount64(x) {
			for x>>pos&1 == 0 {
				pos++
			}
			if got := bitpack.Select64(x, r); got != pos {
				t.Fatalf("bitpack.Select64(%#x, %d) = %d, want %d", x, r, got, pos)
			}
			pos++
		}
	}
}

// TestManyExceptions reads blocks of every size whose fields have few to
// very many exceptions (more than two words of indices, which value counts
// in a loop), against the posts they were built from.
func TestManyExceptions(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	long := 0
	for _, per := range []int{1, 2, 3, 5, 8, 9, 16, 17, 33, 64, 100, 128, 200, 256} {
		for _, p := range []float64{0.02, 0.1, 0.3, 0.6} {
			var ps []post
			var all []uint64
			id := uint64(1) << 40
			for range 3000 {
				id += 1 + uint64(rng.IntN(1<<uint(rng.IntN(30))))
				all = append(all, id)
				var c engine.Counts
				for f := range numFields {
					v := uint64(rng.IntN(4))
					if rng.Float64() < p {
						v = rng.Uint64() >> uint(1+rng.IntN(50))
					}
					setField(&c, f, v)
				}
				if !c.IsZero() {
					ps = append(ps, post{id, c})
				}
			}
			w := build(t, ps, Options{BlockPosts: per})
			checkWindowN(t, w, all, ps, 20)
			for b := range w.Index().Blocks() {
				var k Block
				w.block(b, &k)
				for f := range numFields {
					if k.f[f].nexc > 2*swar[k.f[f].iw].lanes {
						long++
					}
				}
			}
		}
	}
	if long == 0 {
		t.Fatal("no field had more than two words of exception indices")
	}
}

// TestGroup checks Group against a plain search and sort, for windows of
// one block to thousands (copied keys or Index.Find; counting sort or a
// comparison sort).
func TestGroup(t *testing.T) {
	all, ps := genPosts(50000, 2)
	rng := rand.New(rand.NewPCG(1, 1))
	for _, per := range []int{1, 7, 64, 128, 256} {
		for _, n := range []int{1, 100, 1000, len(ps)} {
			w := build(t, ps[:n], Options{BlockPosts: per})
			x := w.Index()
			naive := func(id uint64) int {
				if id < x.MinID() || id > x.MaxID() {
					return -1
				}
				b := 0
				for b+1 < x.Blocks() && x.firstKey(b+1) <= id {
					b++
				}
				return b
			}
			ids := make([]uint64, 256)
			keys := make([]uint64, 256)
			for range 50 {
				m := rng.IntN(257)
				for j := range m {
					switch rng.IntN(4) {
					case 0:
						ids[j] = rng.Uint64()
					case 1:
						ids[j] = ps[rng.IntN(n)].id
					default:
						ids[j] = all[rng.IntN(len(all))]
					}
				}
				var want []uint64
				for j, id := range ids[:m] {
					if b := naive(id); b >= 0 {
						want = append(want, uint64(b)<<8|uint64(j))
						if got := x.Find(id); got != b {
							t.Fatalf("Find(%d) = %d, want %d", id, got, b)
						}
					} else if got := x.Find(id); got != -1 {
						t.Fatalf("Find(%d) = %d, want -1", id, got)
					}
				}
				slices.Sort(want)
				if got := x.Group(ids[:m], keys); !slices.Equal(got, want) {
					t.Fatalf("per=%d n=%d: Group = %v, want %v", per, n, got, want)
				}
			}
		}
	}
}
