package sealed

import (
	"math/rand/v2"
	"testing"

	"github.com/tally-dev/tally/engine"
)

// TestTwoLevelSearch checks the in-memory window's two-level block search
// and phased multi-get against the plain binary search and Get, on
// windows whose blocks' first ids collide once cut to 32 bits (the exact
// comparison, and the fall-back to the binary search past a few
// collisions), with the phased reads on and off.
func TestTwoLevelSearch(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	cases := []struct {
		name string
		ps   []post
		per  int
	}{}
	counts := func() engine.Counts {
		return engine.Counts{Likes: int64(rng.IntN(3)), Views: 1 + int64(rng.Uint64()>>uint(1+rng.IntN(62))), Favorites: int64(rng.IntN(2))}
	}
	// Dense ids: the span fits 32 bits, the cut keys are exact.
	var dense []post
	for id := uint64(1 << 40); len(dense) < 5000; id += 1 + uint64(rng.IntN(1000)) {
		dense = append(dense, post{id, counts()})
	}
	cases = append(cases, struct {
		name string
		ps   []post
		per  int
	}{"dense", dense, 16})
	// A cluster of consecutive ids far below one outlier: the cut drops
	// the low bits, and dozens of blocks share a cut key.
	for _, cluster := range []int{40, 400, 4000} {
		var ps []post
		base := uint64(1) << 20
		for i := range cluster {
			ps = append(ps, post{base + uint64(i)*uint64(1+rng.IntN(3)), counts()})
		}
		for i := range ps[1:] {
			if ps[i+1].id <= ps[i].id {
				ps[i+1].id = ps[i].id + 1
			}
		}
		// Spread posts, then the outlier.
		id := ps[len(ps)-1].id
		for range 3000 {
			id += 1 + rng.Uint64()>>(14+rng.IntN(8))
			ps = append(ps, post{id, counts()})
		}
		ps = append(ps, post{id + 1<<60, counts()})
		for _, per := range []int{1, 4, 128} {
			cases = append(cases, struct {
				name string
				ps   []post
				per  int
			}{"cluster", ps, per})
		}
	}
	for _, c := range cases {
		w := build(t, c.ps, Options{BlockPosts: c.per})
		data, _ := w.MarshalBinary()
		w2, err := Unmarshal(data)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range []*Window{w, w2} {
			x := w.Index()
			if x.Blocks() >= searchMinBlocks && x.keys == nil {
				t.Fatalf("%s: %d blocks and no search", c.name, x.Blocks())
			}
			if x.Blocks() >= searchMinBlocks && w.SizeBytes() <= len(w.Bytes()) {
				t.Fatalf("%s: SizeBytes %d leaves out the search", c.name, w.SizeBytes())
			}
			// Every block's first id and its neighbours.
			var probes []uint64
			for b := range x.Blocks() {
				f, _, _ := x.Block(b)
				probes = append(probes, f, f-1, f+1)
			}
			for _, p := range c.ps {
				probes = append(probes, p.id, p.id+1)
			}
			for range 2000 {
				probes = append(probes, x.MinID()+rng.Uint64()%(x.MaxID()-x.MinID()+1))
			}
			var keys [256]uint64
			for s := 0; s < len(probes); s += 200 {
				ids := probes[s:min(s+200, len(probes))]
				got := x.Group(ids, keys[:])
				want := x.groupPlain(ids)
				if len(got) != len(want) {
					t.Fatalf("%s: Group found %d ids, binary search %d", c.name, len(got), len(want))
				}
				for j := range got {
					if got[j] != want[j] {
						t.Fatalf("%s: Group key %d = %#x, binary search %#x", c.name, j, got[j], want[j])
					}
				}
			}
			for _, pf := range []bool{true, false} {
				prefetch = pf
				checkWindowN(t, w, probes, c.ps, 50)
			}
			prefetch = true
		}
	}
}

// groupPlain is Group by the binary search alone.
func (x *Index) groupPlain(ids []uint64) []uint64 {
	var keys []uint64
	for i, id := range ids {
		if b := x.Find(id); b >= 0 {
			keys = append(keys, uint64(b)<<8|uint64(i))
		}
	}
	return sortKeys(keys, false, 0, 1<<40)
}

// TestRadixSort checks the two-pass sort of a multi-get's keys against a
// comparison sort, stability included.
func TestRadixSort(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	for range 500 {
		n := rng.IntN(257)
		lo := uint64(rng.IntN(1000))
		span := 1 + rng.IntN(groupSpan*groupSpan)
		keys := make([]uint64, n)
		for i := range keys {
			keys[i] = (lo+uint64(rng.IntN(span)))<<8 | uint64(i)
		}
		want := sortKeys(append([]uint64(nil), keys...), false, 0, 1<<40)
		radixSort(keys, lo)
		for i := range keys {
			if keys[i] != want[i] {
				t.Fatalf("radixSort: key %d = %#x, want %#x", i, keys[i], want[i])
			}
		}
	}
}
