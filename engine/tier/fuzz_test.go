package tier

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/tally-dev/tally/engine/snowflake"
)

// encodeBlock encodes posts for the seeds and the round trip.
func encodeBlock(ids []uint64, rows []postRow) []byte {
	var e postEncoder
	for i, id := range ids {
		e.add(id, &rows[i])
	}
	return e.encode(nil)
}

func seedBlocks() [][]byte {
	rng := rand.New(rand.NewPCG(1, 2))
	var out [][]byte
	for _, n := range []int{1, 2, 7, 128, 256} {
		ids := make([]uint64, n)
		rows := make([]postRow, n)
		id := snowflake.Make(testEpoch.UnixMilli(), 3, 0)
		kinds := n%2 == 0 // blocks with kind columns, and of likes alone
		for i := range ids {
			id += 1 + rng.Uint64N(1<<uint(rng.IntN(30)))
			ids[i] = id
			for f := range postCols {
				if rng.IntN(3) == 0 && (f < fixedCols || kinds && rng.IntN(4) == 0) {
					rows[i][f] = rng.Uint64() >> uint(rng.IntN(64))
				}
			}
		}
		blk := encodeBlock(ids, rows)
		out = append(out, binary.LittleEndian.AppendUint64(blk, ids[0]))
	}
	return out
}

// FuzzBlock feeds arbitrary bytes to the post block decoder as a cold
// read does (checksum, then header), and also with the checksum
// recomputed so the parser sees arbitrary headers and bit areas: nothing
// panics, a check-only decode agrees with a full one, and a block that
// decodes answers every lookup as its decode says and encodes back to
// the same bytes.
func FuzzBlock(f *testing.F) {
	for _, s := range seedBlocks() {
		f.Add(s, false)
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, in []byte, fixCRC bool) {
		if len(in) < 12 {
			return
		}
		first := binary.LittleEndian.Uint64(in[len(in)-8:])
		blk := append(make([]byte, 0, len(in)+BlockSlack), in[:len(in)-8]...)
		if fixCRC {
			body := blk[:len(blk)-4]
			binary.LittleEndian.PutUint32(blk[len(blk)-4:], postBlockCRC(first, body))
		}
		if checkPostBlock(first, blk) != nil {
			return
		}
		var k postBlock
		if err := k.parse(first, blk[:len(blk)-4]); err != nil {
			t.Fatalf("checkPostBlock passed, parse failed: %v", err)
		}
		var row postRow
		probe := []uint64{first, first + 1, first - 1, first ^ 0xff, ^uint64(0), 0}
		for _, id := range probe {
			if p, ok := k.find(id); ok {
				k.row(p, &row)
			}
		}
		ids := make([]uint64, maxPostsInBlock)
		rows := make([]postRow, maxPostsInBlock)
		derr := k.decode(ids, rows)
		if verr := k.decode(nil, nil); (derr == nil) != (verr == nil) {
			t.Fatalf("decode says %v, a check-only decode %v", derr, verr)
		}
		if derr != nil {
			return
		}
		if k.ids.last(k.area) != ids[k.len()-1] {
			t.Fatalf("last id %d, decoded %d", k.ids.last(k.area), ids[k.len()-1])
		}
		for i := range k.len() {
			p, ok := k.find(ids[i])
			if !ok || p != i {
				t.Fatalf("decoded id %d at %d, find says %d %v", ids[i], i, p, ok)
			}
			k.row(p, &row)
			if row != rows[i] {
				t.Fatalf("post %d: row %v, decode %v", i, row, rows[i])
			}
			if i > 0 && ids[i]-1 > ids[i-1] {
				if _, ok := k.find(ids[i] - 1); ok {
					t.Fatalf("find(%d) found an id the block does not hold", ids[i]-1)
				}
			}
		}
		// A decoded block encodes back to the same posts.
		n := k.len()
		again := encodeBlock(ids[:n], rows[:n])
		again = append(again, make([]byte, BlockSlack)...)[:len(again)]
		var k2 postBlock
		ids2, rows2 := make([]uint64, maxPostsInBlock), make([]postRow, maxPostsInBlock)
		if err := checkPostBlock(first, again); err != nil {
			t.Fatalf("re-encoded block: %v", err)
		}
		_ = k2.parse(first, again[:len(again)-4])
		if err := k2.decode(ids2, rows2); err != nil || k2.len() != n || !slices.Equal(ids2[:n], ids[:n]) || !slices.Equal(rows2[:n], rows[:n]) {
			t.Fatalf("re-encoded block decodes to other posts (%v)", err)
		}
	})
}

// seedImages returns snapshot images of small tables: open windows,
// sealed windows, deltas.
func seedImages(t testing.TB) [][]byte {
	var out [][]byte
	for _, n := range []int{0, 3, 300} {
		opts := testOpts("")
		opts.OpenAge = 2 * time.Second
		tr, err := NewPosts(opts)
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			if err := tr.SetKinds(testKinds[:n%len(testKinds)+1]); err != nil {
				t.Fatal(err)
			}
		}
		rng := rand.New(rand.NewPCG(uint64(n), 1))
		for range n {
			tr.Put(randID(rng, 5), randPost(rng))
		}
		tr.Maintain(testEpoch.Add(4 * time.Second))
		for range n / 10 {
			tr.Put(randID(rng, 5), randPost(rng))
		}
		var buf bytes.Buffer
		if _, err := tr.WriteTo(&buf); err != nil {
			t.Fatal(err)
		}
		out = append(out, buf.Bytes())
	}
	return out
}

// FuzzLoad feeds arbitrary images to Load: it never panics, and an image
// it accepts gives a table that answers consistently and writes an image
// that loads again to the same answers and kinds.
func FuzzLoad(f *testing.F) {
	for _, s := range seedImages(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, img []byte) {
		tr, err := NewPosts(testOpts(""))
		if err != nil {
			t.Fatal(err)
		}
		if tr.Load(bytes.NewReader(img)) != nil {
			return
		}
		var buf bytes.Buffer
		if _, err := tr.WriteTo(&buf); err != nil {
			t.Fatal(err)
		}
		again, _ := NewPosts(testOpts(""))
		if err := again.Load(&buf); err != nil {
			t.Fatalf("an image Load accepted, rewritten, is refused: %v", err)
		}
		if k1, k2 := tr.Kinds(), again.Kinds(); again.Len() != tr.Len() || k1 != k2 {
			t.Fatalf("Len %d then %d, kinds %v then %v", tr.Len(), again.Len(), k1.IDs(), k2.IDs())
		}
		if err := tr.Maintain(testEpoch.Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
	})
}
