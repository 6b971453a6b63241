package tier

import (
	"slices"
	"unsafe"

	"github.com/tally-dev/tally/engine/sealed"
)

// get reads the record of id from the segment.
func (s *segment) get(id uint64, row *Row) bool {
	b := s.idx.Find(id)
	if b < 0 {
		return false
	}
	first, blk := s.blockBytes(b)
	var k Block
	_ = k.Parse(first, blk[:len(blk)-4], s.sh) // checked when built or loaded
	p, ok := k.Find(id)
	if ok {
		k.Row(p, row)
	}
	return ok
}

// get reads the record of id from the file, through the cache.
func (f *coldFile) get(id uint64, row *Row) (bool, error) {
	b := f.idx.Find(id)
	if b < 0 {
		return false, nil
	}
	first, _, _ := f.idx.Block(b)
	var found bool
	look := func(blk []byte) {
		var k Block
		if k.Parse(first, blk[:len(blk)-4], f.sh) != nil {
			return // checked before it was cached
		}
		if p, ok := k.Find(id); ok {
			k.Row(p, row)
			found = true
		}
	}
	if f.cache.View(f.id, b, look) {
		return found, nil
	}
	sc := scratchPool.Get().(*scratch)
	defer scratchPool.Put(sc)
	blk, err := f.readBlock(b, sc)
	if err != nil {
		return false, err
	}
	look(blk)
	return found, nil
}

// pageChunk is how many ids a multi-get handles at once (block positions are
// a byte; a page is at most 100 ids).
const pageChunk = 128

// GetMany stores the record of ids[i] in out[i] and whether it exists in
// found[i] (out and found at least as long as ids). It visits each window
// once per 128 ids, each sealed block once, reads each missing cold block
// with one pread, and does not allocate. An error (a cold block that
// cannot be read or fails its checks) leaves out and found incomplete:
// the caller must not serve them.
func (t *Tier[R]) GetMany(ids []uint64, out []R, found []bool) error {
	for len(ids) > 0 {
		c := min(len(ids), pageChunk)
		if err := t.getChunk(ids[:c], out[:c], found[:c]); err != nil {
			return err
		}
		ids, out, found = ids[c:], out[c:], found[c:]
	}
	return nil
}

func (t *Tier[R]) getChunk(ids []uint64, out []R, found []bool) error {
	clear(out)
	clear(found)
	var wk [pageChunk]uint64 // window index << 8 | position in ids
	n := 0
	sorted := true
	lastWin, lo, hi := -1, uint64(1), uint64(0) // the previous id's window and its range
	for i, id := range ids {
		wi := lastWin
		if id < lo || id > hi { // a page's ids mostly share a window: no division then
			if wi = t.find(id); wi < 0 {
				continue
			}
			lastWin, lo, hi = wi, t.wins[wi].lo, t.wins[wi].last
		}
		wk[n] = uint64(wi)<<8 | uint64(i)
		if n > 0 && wk[n] < wk[n-1] {
			sorted = false
		}
		n++
	}
	keys := wk[:n]
	if !sorted {
		slices.Sort(keys)
	}
	var sub [pageChunk]uint64
	var pos [pageChunk]uint8
	var row Row
	for s := 0; s < n; {
		wi := keys[s] >> 8
		w := t.wins[wi]
		m := 0
		e := s
		for ; e < n && keys[e]>>8 == wi; e++ {
			p := int(keys[e] & 0xff)
			key := ids[p] - w.lo + 1
			if (w.delta != nil && w.delta.get(key, &t.layout, &row)) ||
				(w.frozen != nil && w.frozen.get(key, &t.layout, &row)) {
				t.store(&out[p], &row)
				found[p] = true
				continue
			}
			sub[m], pos[m] = ids[p], uint8(p)
			m++
		}
		s = e
		if m == 0 {
			continue
		}
		switch b := w.body.(type) {
		case *openBody:
			for j, id := range sub[:m] {
				if b.t.get(id-w.lo+1, &t.layout, &row) {
					t.store(&out[pos[j]], &row)
					found[pos[j]] = true
				}
			}
		case *sealedBody:
			t.getSealed(b.s, sub[:m], pos[:m], out, found)
		case *coldBody:
			if err := t.getCold(b.f, sub[:m], pos[:m], out, found); err != nil {
				return err
			}
		}
	}
	return nil
}

func (t *Tier[R]) getSealed(s *segment, sub []uint64, pos []uint8, out []R, found []bool) {
	var kb [pageChunk]uint64
	keys := s.idx.Group(sub, kb[:])
	// Every cache line of the blocks first, then the decoding (sealed.Index.
	// TouchBlocks): without it a page took 1.6x (1M posts) and 1.8x (10M)
	// the time; loading only the lines each lookup should need (headers
	// first, then the high bits, the sparse columns and the lines near each
	// id's expected rank) took 1.5x: the second wave of loads waits for the
	// first.
	s.idx.TouchBlocks(s.data, keys)
	cur := -1
	var k Block
	var row Row
	for _, key := range keys {
		b, j := int(key>>8), key&0xff
		if b != cur {
			first, blk := s.blockBytes(b)
			_ = k.Parse(first, blk[:len(blk)-4], s.sh) // checked when built or loaded
			cur = b
		}
		if p, ok := k.Find(sub[j]); ok {
			k.Row(p, &row)
			t.store(&out[pos[j]], &row)
			found[pos[j]] = true
		}
	}
}

func (t *Tier[R]) getCold(f *coldFile, sub []uint64, pos []uint8, out []R, found []bool) error {
	var kb [pageChunk]uint64
	keys := f.idx.Group(sub, kb[:])
	var sc *scratch
	defer func() {
		if sc != nil {
			scratchPool.Put(sc)
		}
	}()
	for s := 0; s < len(keys); {
		b, e := sealed.BlockRun(keys, s)
		first, _, _ := f.idx.Block(b)
		group := keys[s:e]
		look := func(blk []byte) { t.lookupBlock(first, blk, f.sh, group, sub, pos, out, found) }
		if !f.cache.View(f.id, b, look) {
			if sc == nil {
				sc = scratchPool.Get().(*scratch)
			}
			blk, err := f.readBlock(b, sc)
			if err != nil {
				return err
			}
			look(blk)
		}
		s = e
	}
	return nil
}

// lookupBlock answers the ids of keys (block<<8 | index in sub) from one
// checked block, blk with its CRC and BlockSlack bytes of capacity past.
func (t *Tier[R]) lookupBlock(first uint64, blk []byte, sh shape, keys, sub []uint64, pos []uint8, out []R, found []bool) {
	var k Block
	if k.Parse(first, blk[:len(blk)-4], sh) != nil {
		return // checked before it was cached or used
	}
	var row Row
	for _, key := range keys {
		j := key & 0xff
		if p, ok := k.Find(sub[j]); ok {
			k.Row(p, &row)
			t.store(&out[pos[j]], &row)
			found[pos[j]] = true
		}
	}
}

// store writes the record row holds to dst: for a codec whose records
// are plainly their columns (plainRecords), by copying the words, which
// took a fifth of an in-cache page's time through Join.
func (t *Tier[R]) store(dst *R, row *Row) {
	if t.plain {
		copy(unsafe.Slice((*uint64)(unsafe.Pointer(dst)), t.cols), row[:t.cols])
		return
	}
	*dst = t.codec.Join(*row)
}
