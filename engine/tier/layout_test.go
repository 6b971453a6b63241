package tier

import (
	"testing"
)

// BenchmarkLayout reports where a sealed window's bytes go, per post, on
// the benchmark data with every window sealed: the id column, block
// headers, CRCs, the index, and each column (author, likes, comments,
// reposts, views, favorites, and the kind columns together).
//
//	go test ./engine/tier -run '^$' -bench Layout -benchtime 1x
func BenchmarkLayout(b *testing.B) {
	d := benchData()
	var tr *Posts
	for b.Loop() {
		tr = loadPosts(b, benchOpts(b, "sealed"), d)
	}
	var ids, hdr, crc, idx, recs, pres float64
	var col [fixedCols + 1]float64 // the fixed columns, then the kind columns
	for _, w := range tr.wins {
		s := w.body.(*sealedWindow)
		idx += float64(s.idx.blocks * postEntrySize)
		for blk := range s.idx.blocks {
			raw := s.block(blk)
			var k postBlock
			if err := k.parse(s.idx.firstID(blk), raw[:len(raw)-4]); err != nil {
				b.Fatal(err)
			}
			n := k.len()
			recs += float64(n)
			ids += float64(k.ids.list.bits()) / 8
			crc += 4
			hdr += float64(len(raw) - 4 - len(k.area) + BlockSlack)
			if k.presence >= 0 {
				pres += float64(n) / 8
			}
			for f := range fixedCols + k.kinds {
				c := n
				if f >= authorCols {
					c = k.counted
				}
				col[min(f, fixedCols)] += float64(k.cols[f].bits(c)) / 8
			}
		}
	}
	b.ReportMetric(ids/recs, "id-B/post")
	b.ReportMetric((hdr+crc+idx)/recs, "header+crc+index-B/post")
	b.ReportMetric(pres/recs, "presence-B/post")
	for f, name := range []string{"author", "likes", "comments", "reposts", "views", "favorites", "kinds"} {
		b.ReportMetric(col[f]/recs, name+"-B/post")
	}
}
