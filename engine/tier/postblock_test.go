package tier

import (
	"bytes"
	"hash/crc32"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// postImage writes the posts ids (increasing) with rows as a window image
// and returns it and its index.
func postImage(t testing.TB, ids []uint64, rows []postRow) ([]byte, blockIndex) {
	t.Helper()
	var buf bytes.Buffer
	pw := newPostWriter(&buf)
	for i, id := range ids {
		if err := pw.add(id, &rows[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := pw.close(); err != nil {
		t.Fatal(err)
	}
	data := append(buf.Bytes(), make([]byte, BlockSlack)...)[:buf.Len()]
	idx, err := parseImage(data, imageFormat{tag: postTag, entrySize: postEntrySize, perBlock: maxPostsInBlock})
	if err != nil {
		t.Fatal(err)
	}
	return data, idx
}

// TestManyExceptions reads blocks of every size whose columns have few to
// very many exceptions (more than two words of positions, which a value
// read counts in a loop), against the posts they were built from, and
// absent ids between them.
func TestManyExceptions(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	long := 0
	for _, n := range []int{1, 2, 3, 5, 8, 9, 16, 17, 33, 64, 100, 128, 200, 256} {
		for _, p := range []float64{0.02, 0.1, 0.3, 0.6} {
			ids := make([]uint64, n)
			rows := make([]postRow, n)
			id := uint64(1) << 40
			for i := range n {
				id += 2 + uint64(rng.IntN(1<<uint(rng.IntN(30))))
				ids[i] = id
				for f := range postCols {
					v := uint64(rng.IntN(4))
					if rng.Float64() < p {
						v = rng.Uint64() >> uint(rng.IntN(64))
					}
					rows[i][f] = v
				}
			}
			blk := append(encodeBlock(ids, rows), make([]byte, BlockSlack)...)
			blk = blk[:len(blk)-BlockSlack]
			if err := checkPostBlock(ids[0], blk); err != nil {
				t.Fatal(err)
			}
			var k postBlock
			_ = k.parse(ids[0], blk[:len(blk)-4])
			for f := range postCols {
				if k.cols[f].nexc > 2*swar[k.cols[f].iw].lanes {
					long++
				}
			}
			var r postRow
			for i, id := range ids {
				j, ok := k.find(id)
				if !ok || j != i {
					t.Fatalf("n=%d: find(%d) = %d %v, want %d", n, id, j, ok, i)
				}
				if k.row(j, &r); r != rows[i] {
					t.Fatalf("n=%d: post %d reads %v, want %v", n, i, r, rows[i])
				}
				if _, ok := k.find(id + 1); ok {
					t.Fatalf("n=%d: found %d, which the block does not hold", n, id+1)
				}
			}
		}
	}
	if long == 0 {
		t.Fatal("no column had more than two words of exception positions")
	}
}

// TestGroup checks findID and group against a plain search and sort, for
// windows of one block to a few hundred (first ids copied out of the
// index or searched in it; a counting, radix or comparison sort).
func TestGroup(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	var all []uint64
	id := uint64(1) << 40
	for range 100000 {
		id += 1 + rng.Uint64N(1<<20)
		all = append(all, id)
	}
	for _, n := range []int{1, 100, 1000, 40000, len(all)} {
		ids := all[:n:n]
		rows := make([]postRow, n)
		for i := range rows {
			rows[i][0] = uint64(i + 1)
		}
		_, x := postImage(t, ids, rows)
		naive := func(id uint64) int {
			if id < x.minID || id > x.maxID {
				return -1
			}
			b := 0
			for b+1 < x.blocks && x.firstID(b+1) <= id {
				b++
			}
			return b
		}
		probe := make([]uint64, 256)
		keys := make([]uint64, 256)
		for range 50 {
			m := rng.IntN(257)
			for j := range m {
				switch rng.IntN(4) {
				case 0:
					probe[j] = rng.Uint64()
				case 1:
					probe[j] = ids[rng.IntN(n)]
				default:
					probe[j] = all[rng.IntN(len(all))]
				}
			}
			var want []uint64
			for j, id := range probe[:m] {
				b := naive(id)
				if got := x.findID(id); got != b {
					t.Fatalf("n=%d: findID(%d) = %d, want %d", n, id, got, b)
				}
				if b >= 0 {
					want = append(want, uint64(b)<<8|uint64(j))
				}
			}
			slices.Sort(want)
			if got := x.group(probe[:m], keys); !slices.Equal(got, want) {
				t.Fatalf("n=%d: group = %v, want %v", n, got, want)
			}
		}
	}
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
		want := slices.Clone(keys)
		slices.Sort(want)
		radixSort(keys, lo)
		if !slices.Equal(keys, want) {
			t.Fatalf("radixSort: %v, want %v", keys, want)
		}
	}
}

// TestPostBlockCRC: the hand-rolled checksum is CRC32C of the first id's
// 8 bytes and the block.
func TestPostBlockCRC(t *testing.T) {
	for _, first := range []uint64{0, 1, 0x0123456789abcdef, math.MaxUint64} {
		body := []byte("some block bytes")
		want := crc32.Checksum(append(le.AppendUint64(nil, first), body...), castagnoli)
		if got := postBlockCRC(first, body); got != want {
			t.Fatalf("postBlockCRC(%x) = %08x, want %08x", first, got, want)
		}
	}
}
