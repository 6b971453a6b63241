package sealed

import (
	"bytes"
	"compress/flate"
	"encoding/binary"
	"testing"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/bitpack"
)

// The alternatives below were measured against the format this package
// uses, on the same data, to choose it. They are kept as benchmarks so the
// choice can be re-checked when the generator or the format changes:
//
//	go test ./engine/sealed -run '^$' -bench Encodings
//
// "varint" is the textbook layout: per block, the first id, then per post
// the id delta as a uvarint, a presence byte (bit f set when field f is
// non-zero) and a uvarint per non-zero field. "varint-squeezed" applies
// this package's removal of constant id bits first. "+flate" compresses
// each block with compress/flate at BestCompression (a stand-in for LZ77 +
// entropy coders such as zstd or snappy: both sit on the same principle,
// snappy without the entropy stage).

// varintBlock encodes posts the textbook way.
func varintBlock(dst []byte, ps []post, squeeze bool) []byte {
	var mask uint64
	if squeeze {
		for _, p := range ps {
			mask |= p.id ^ ps[0].id
		}
	}
	key := func(id uint64) uint64 {
		if squeeze {
			return bitpack.Pext(id, mask)
		}
		return id
	}
	dst = binary.LittleEndian.AppendUint64(dst, ps[0].id)
	if squeeze {
		dst = binary.AppendUvarint(dst, mask)
	}
	prev := key(ps[0].id)
	for i, p := range ps {
		if i > 0 {
			k := key(p.id)
			dst = binary.AppendUvarint(dst, k-prev)
			prev = k
		}
		var pres byte
		for f := range numFields {
			if fieldOf(&p.c, f) != 0 {
				pres |= 1 << f
			}
		}
		dst = append(dst, pres)
		for f := range numFields {
			if v := fieldOf(&p.c, f); v != 0 {
				dst = binary.AppendUvarint(dst, v)
			}
		}
	}
	return dst
}

func deflate(b []byte) int {
	var buf bytes.Buffer
	w, _ := flate.NewWriter(&buf, flate.BestCompression)
	w.Write(b)
	w.Close()
	return buf.Len()
}

func BenchmarkEncodings(b *testing.B) {
	d := benchData(b)
	var blocks [][]post
	for _, w := range d.windows {
		if w == nil {
			continue
		}
		var ps []post
		for id, c := range w.All() {
			ps = append(ps, post{id, c})
		}
		for len(ps) > 0 {
			n := min(len(ps), DefaultBlockPosts)
			blocks = append(blocks, ps[:n])
			ps = ps[n:]
		}
	}
	perPost := func(b *testing.B, bytes int) {
		b.ReportMetric(float64(bytes)/float64(len(d.posts)), "B/post")
	}
	b.Run("this-format", func(b *testing.B) {
		var total, packed int
		for b.Loop() {
			total, packed = 0, 0
			for _, w := range d.windows {
				if w != nil {
					total += w.SizeBytes()
					for blk := range w.Index().Blocks() {
						_, off, end := w.Index().Block(blk)
						packed += deflate(w.Bytes()[off:end])
					}
					packed += w.SizeBytes() - int(w.Index().end-HeaderSize)
				}
			}
		}
		perPost(b, total)
		b.ReportMetric(float64(packed)/float64(len(d.posts)), "B/post+flate")
	})
	for _, sq := range []bool{false, true} {
		name := "varint"
		if sq {
			name = "varint-squeezed"
		}
		b.Run(name, func(b *testing.B) {
			var total, packed int
			for b.Loop() {
				total, packed = 0, 0
				var buf []byte
				for _, ps := range blocks {
					buf = varintBlock(buf[:0], ps, sq)
					total += len(buf) + 4 + IndexEntrySize // CRC and index entry, as here
					packed += deflate(buf) + 4 + IndexEntrySize
				}
			}
			perPost(b, total)
			b.ReportMetric(float64(packed)/float64(len(d.posts)), "B/post+flate")
		})
	}
	_ = engine.Counts{}
}
