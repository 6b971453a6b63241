package tier

import "slices"

// getSealed reads the row of id from a sealed window.
func getSealed(s *sealedWindow, id uint64, r *postRow) bool {
	b := s.idx.findID(id)
	if b < 0 {
		return false
	}
	blk := s.block(b)
	var k postBlock
	_ = k.parse(s.idx.firstID(b), blk[:len(blk)-4]) // checked when built or loaded
	i, ok := k.find(id)
	if ok {
		k.row(i, r)
	}
	return ok
}

// getCold reads the row of id from a cold window, through the cache.
func getCold(f *coldWindow, id uint64, r *postRow) (bool, error) {
	b := f.idx.findID(id)
	if b < 0 {
		return false, nil
	}
	first := f.idx.firstID(b)
	found := false
	var sc *scratch
	err := f.view(b, &sc, func(blk []byte) error { return checkPostBlock(first, blk) }, func(blk []byte) {
		var k postBlock
		if k.parse(first, blk[:len(blk)-4]) != nil {
			return // checked before it was cached
		}
		if i, ok := k.find(id); ok {
			k.row(i, r)
			found = true
		}
	})
	if sc != nil {
		scratchPool.Put(sc)
	}
	return found, err
}

// pageChunk is how many ids a multi-get handles at once (block positions
// are a byte; a page is at most 100 ids).
const pageChunk = 128

// GetMany stores the record of ids[i] in out[i] and whether it exists in
// found[i] (out and found at least as long as ids). It visits each window
// once per 128 ids, each sealed block once, reads each missing cold block
// with one pread, and does not allocate. An error (a cold block that
// cannot be read or fails its checks) leaves out and found incomplete:
// the caller must not serve them.
func (p *Posts) GetMany(ids []uint64, out []Post, found []bool) error {
	for len(ids) > 0 {
		c := min(len(ids), pageChunk)
		if err := p.getChunk(ids[:c], out[:c], found[:c]); err != nil {
			return err
		}
		ids, out, found = ids[c:], out[c:], found[c:]
	}
	return nil
}

func (p *Posts) getChunk(ids []uint64, out []Post, found []bool) error {
	clear(out)
	clear(found)
	var wk [pageChunk]uint64 // window index << 8 | position in ids
	n := 0
	sorted := true
	lastWin, lo, hi := -1, uint64(1), uint64(0) // the previous id's window and its range
	for i, id := range ids {
		wi := lastWin
		if id < lo || id > hi { // a page's ids mostly share a window
			if wi = p.find(id); wi < 0 {
				continue
			}
			lastWin, lo, hi = wi, p.wins[wi].lo, p.wins[wi].last
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
	var r postRow
	for s := 0; s < n; {
		wi := keys[s] >> 8
		w := p.wins[wi]
		delta, frozen := asRows(w.delta), asRows(w.frozen())
		m := 0
		e := s
		for ; e < n && keys[e]>>8 == wi; e++ {
			i := int(keys[e] & 0xff)
			key := ids[i] - w.lo + 1
			if (delta != nil && delta.get(key, &p.layout, &r)) || (frozen != nil && frozen.get(key, &p.layout, &r)) {
				if !r.dead() {
					r.toPost(&out[i])
					found[i] = true
				}
				continue
			}
			sub[m], pos[m] = ids[i], uint8(i)
			m++
		}
		s = e
		if m == 0 {
			continue
		}
		switch b := w.body.(type) {
		case *rowTable:
			for j, id := range sub[:m] {
				if b.get(id-w.lo+1, &p.layout, &r) {
					r.toPost(&out[pos[j]])
					found[pos[j]] = true
				}
			}
		case *sealedWindow:
			getManySealed(b, sub[:m], pos[:m], out, found)
		case *coldWindow:
			if err := getManyCold(b, sub[:m], pos[:m], out, found); err != nil {
				return err
			}
		}
	}
	return nil
}

// getManySealed answers the ids sub (at positions pos of out and found)
// from a sealed window.
func getManySealed(s *sealedWindow, sub []uint64, pos []uint8, out []Post, found []bool) {
	var kb [pageChunk]uint64
	keys := s.idx.group(sub, kb[:])
	// Every cache line of the blocks first, then the decoding: loading
	// only the lines each lookup should need, wave after wave, is slower,
	// since the second wave of loads waits for the first.
	s.idx.touchBlocks(s.data, keys)
	cur := -1
	var k postBlock
	var r postRow
	for _, key := range keys {
		b, j := int(key>>8), key&0xff
		if b != cur {
			blk := s.block(b)
			_ = k.parse(s.idx.firstID(b), blk[:len(blk)-4]) // checked when built or loaded
			cur = b
		}
		if i, ok := k.find(sub[j]); ok {
			k.row(i, &r)
			r.toPost(&out[pos[j]])
			found[pos[j]] = true
		}
	}
}

// getManyCold answers the ids sub (at positions pos of out and found)
// from a cold window, each block from the cache or one pread.
func getManyCold(f *coldWindow, sub []uint64, pos []uint8, out []Post, found []bool) error {
	var kb [pageChunk]uint64
	keys := f.idx.group(sub, kb[:])
	var sc *scratch
	defer func() {
		if sc != nil {
			scratchPool.Put(sc)
		}
	}()
	for s := 0; s < len(keys); {
		b, e := blockRun(keys, s)
		first := f.idx.firstID(b)
		group := keys[s:e]
		err := f.view(b, &sc, func(blk []byte) error { return checkPostBlock(first, blk) }, func(blk []byte) {
			var k postBlock
			if k.parse(first, blk[:len(blk)-4]) != nil {
				return // checked before it was cached or used
			}
			var r postRow
			for _, key := range group {
				j := key & 0xff
				if i, ok := k.find(sub[j]); ok {
					k.row(i, &r)
					r.toPost(&out[pos[j]])
					found[pos[j]] = true
				}
			}
		})
		if err != nil {
			return err
		}
		s = e
	}
	return nil
}
