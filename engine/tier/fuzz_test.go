package tier

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/tally-dev/tally/engine/sealed"
	"github.com/tally-dev/tally/engine/snowflake"
)

// encodeBlock encodes the records given as (id gaps, column values) for
// the seeds and the round trip.
func encodeBlock(sh shape, ids []uint64, rows []Row) []byte {
	e := blockEncoder{sh: sh}
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
		rows := make([]Row, n)
		id := snowflake.Make(testEpoch.UnixMilli(), 3, 0)
		for i := range ids {
			id += 1 + rng.Uint64N(1<<uint(rng.IntN(30)))
			ids[i] = id
			for f := range 6 {
				if rng.IntN(3) == 0 {
					rows[i][f] = rng.Uint64() >> uint(rng.IntN(64))
				}
			}
		}
		blk := encodeBlock(shape{6, 1}, ids, rows)
		out = append(out, binary.LittleEndian.AppendUint64(blk, ids[0]))
	}
	return out
}

// FuzzBlock feeds arbitrary bytes to the block decoder as a cold read
// does (checksum, then header), and also with the checksum recomputed so
// the parser sees arbitrary headers and bit areas: nothing panics, and a
// block that decodes answers every lookup as its decode says.
func FuzzBlock(f *testing.F) {
	for _, s := range seedBlocks() {
		f.Add(s, uint8(5+MaxCols), false) // six columns, one dense
		f.Add(s, uint8(5+MaxCols), true)
		f.Add(s, uint8(5), true) // six dense columns
	}
	f.Fuzz(func(t *testing.T, in []byte, cols uint8, fixCRC bool) {
		if len(in) < 12 {
			return
		}
		first := binary.LittleEndian.Uint64(in[len(in)-8:])
		blk := append(make([]byte, 0, len(in)+BlockSlack), in[:len(in)-8]...)
		c := int(cols%MaxCols) + 1
		sh := shape{c, int(cols/MaxCols) % (c + 1)}
		if fixCRC {
			body := blk[:len(blk)-4]
			binary.LittleEndian.PutUint32(blk[len(blk)-4:], sealed.BlockCRC(first, body))
		}
		if checkBlock(first, blk, sh) != nil {
			return
		}
		var k Block
		if err := k.Parse(first, blk[:len(blk)-4], sh); err != nil {
			t.Fatalf("checkBlock passed, Parse failed: %v", err)
		}
		var row Row
		probe := []uint64{first, first + 1, first - 1, first ^ 0xff, ^uint64(0), 0}
		for _, id := range probe {
			if p, ok := k.Find(id); ok {
				k.Row(p, &row)
			}
		}
		ids := make([]uint64, MaxBlockRecords)
		rows := make([]Row, MaxBlockRecords)
		derr := k.Decode(ids, rows)
		if verr := k.Verify(); (derr == nil) != (verr == nil) {
			t.Fatalf("Decode says %v, Verify %v", derr, verr)
		}
		if derr != nil {
			return
		}
		if k.lastID() != ids[k.Len()-1] {
			t.Fatalf("lastID %d, decoded %d", k.lastID(), ids[k.Len()-1])
		}
		for i := range k.Len() {
			p, ok := k.Find(ids[i])
			if !ok || p != i {
				t.Fatalf("decoded id %d at %d, Find says %d %v", ids[i], i, p, ok)
			}
			k.Row(p, &row)
			if row != rows[i] {
				t.Fatalf("record %d: Row %v, Decode %v", i, row, rows[i])
			}
			if i > 0 && ids[i]-1 > ids[i-1] {
				if _, ok := k.Find(ids[i] - 1); ok {
					t.Fatalf("Find(%d) found an id the block does not hold", ids[i]-1)
				}
			}
		}
		// A decoded block encodes back to the same rows.
		again := encodeBlock(sh, ids[:k.Len()], rows[:k.Len()])
		again = append(again, make([]byte, BlockSlack)...)[:len(again)]
		var k2 Block
		if err := k2.Parse(first, again[:len(again)-4], sh); err != nil {
			t.Fatalf("re-encoded block: %v", err)
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
// that loads again to the same answers.
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
		if again.Len() != tr.Len() {
			t.Fatalf("Len %d then %d", tr.Len(), again.Len())
		}
		if err := tr.Maintain(testEpoch.Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
	})
}
