package follows

import (
	"fmt"
	"slices"
	"unsafe"

	"github.com/tally-dev/tally/engine/bitpack"
)

// pairs is a sorted set of pairs (a, b), each with an int64 value: the
// follow graph in one direction. The pairs are cut into blocks (block.go)
// of at most maxBlock and, but for a lone block, at least minBlock pairs;
// a two-level directory finds them: pages, a sorted slice of each page's
// first pair, and in each page up to pageMax entries, each a block's first
// pair and where its bytes are in the arena (arena.go). The only Go
// pointers are one a page (of up to 128 blocks) and one an arena chunk
// (512 KiB).
//
// A change rewrites the one block it touches: an insert or a remove that
// leaves the block between minBlock and maxBlock pairs splices the
// encoded columns (patch.go), anything else decodes the block, changes it
// and encodes it again. The block is the mutable part, and the cost of a
// change is bounded by maxBlock pairs whatever the length of the list. A
// block over
// maxBlock splits in two; one under minBlock merges with a neighbour (or
// shares its pairs with it, when together they are over maxBlock). A page
// over pageMax splits; pages under a quarter full merge when together
// they fit in half a page, so that the page slice stays small and the
// directory costs a fraction of a byte per pair.
type pairs struct {
	pages []page
	arena arena
	n     int // pairs

	// A writer's scratch.
	e   entries
	enc encoder

	// held is set while a view of p is out (freeze.go); view is set on
	// the view itself, whose parse copies each slot into buf first.
	held *hold
	view bool
	buf  []byte
}

const pageMax = 128

// page is a run of directory entries, es[:n].
type page struct {
	a, b uint64 // the first pair of its first block
	n    int
	es   *[pageMax]dirEntry
	// shared: a view holds es too, so a change copies it first (own).
	shared bool
}

func newPage() page { return page{es: new([pageMax]dirEntry)} }

// dirEntry locates a block. loc packs its slot's word offset (top 48
// bits), the slot's class and n-1, the block's pairs.
type dirEntry struct {
	a, b uint64 // the block's first pair
	loc  uint64
}

func (d *dirEntry) off() int     { return int(d.loc >> 16) }
func (d *dirEntry) class() uint8 { return uint8(d.loc >> 8) }
func (d *dirEntry) n() int       { return int(d.loc&0xff) + 1 }

// pos is a block's place: page pi's entry bi.
type pos struct{ pi, bi int }

func (p *pairs) entry(at pos) *dirEntry { return &p.pages[at.pi].es[at.bi] }

func (p *pairs) next(at pos) (pos, bool) {
	if at.bi+1 < p.pages[at.pi].n {
		return pos{at.pi, at.bi + 1}, true
	}
	return pos{at.pi + 1, 0}, at.pi+1 < len(p.pages)
}

func (p *pairs) prev(at pos) (pos, bool) {
	if at.bi > 0 {
		return pos{at.pi, at.bi - 1}, true
	}
	if at.pi == 0 {
		return at, false
	}
	return pos{at.pi - 1, p.pages[at.pi-1].n - 1}, true
}

// seek returns the block that holds (a, b) if any block does: the last
// whose first pair is at most (a, b), or the first block. The set must
// not be empty.
func (p *pairs) seek(a, b uint64) pos {
	lo, hi := 0, len(p.pages) // the first page above (a, b) is in [lo, hi]
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if less(a, b, p.pages[m].a, p.pages[m].b) {
			hi = m
		} else {
			lo = m + 1
		}
	}
	pi := max(lo-1, 0)
	es := p.pages[pi].es[:p.pages[pi].n]
	lo, hi = 0, len(es)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if less(a, b, es[m].a, es[m].b) {
			hi = m
		} else {
			lo = m + 1
		}
	}
	return pos{pi, max(lo-1, 0)}
}

// parse parses the block d locates into blk. The arena is written only by
// this package's encoder, so a block that does not parse is a bug. A view
// parses a copy of the slot (freeze.go), which its next parse overwrites.
func (p *pairs) parse(d *dirEntry, blk *block) {
	buf := p.arena.bytes(d.off(), d.class())
	if p.view {
		p.buf = append(p.buf[:0], buf...)
		buf = slices.Grow(p.buf, bitpack.Slack)
	}
	if err := blk.parse(buf); err != nil {
		panic(fmt.Sprintf("follows: block at word %d: %v", d.off(), err))
	}
}

// decode appends the pairs of the block at at to e, using sc.
func (p *pairs) decode(at pos, e *entries, sc *columns) {
	d := p.entry(at)
	var blk block
	p.parse(d, &blk)
	blk.decodeAll(d.a, d.b, e, sc)
}

// runStart returns the first block that may hold a's pairs from (a,
// from) on; the blocks after it that do follow by runNext. ok is false
// when p is empty.
func (p *pairs) runStart(a, from uint64) (at pos, ok bool) {
	if len(p.pages) == 0 {
		return pos{}, false
	}
	return p.seek(a, from), true
}

// runNext returns the block after at if a's pairs go on into it.
func (p *pairs) runNext(at pos, a uint64) (pos, bool) {
	nx, ok := p.next(at)
	return nx, ok && p.entry(nx).a == a
}

// appendRun appends the b (and, if values, the v) of a's pairs with b >=
// from to bs and vs, until bs holds max (max < 0: no limit).
func (p *pairs) appendRun(a, from uint64, max int, bs []uint64, vs []int64, values bool) ([]uint64, []int64) {
	for at, ok := p.runStart(a, from); ok && (max < 0 || len(bs) < max); at, ok = p.runNext(at, a) {
		d := p.entry(at)
		var blk block
		p.parse(d, &blk)
		j, start, length := blk.find(d.a, a)
		if j < 0 {
			continue
		}
		k := len(bs)
		bs, vs = blk.run(d.b, j, start, length, bs, vs, values)
		if from > 0 && bs[k] < from { // only in the first block
			skip, _ := slices.BinarySearch(bs[k:], from)
			bs = append(bs[:k], bs[k+skip:]...)
			if values {
				vs = append(vs[:k], vs[k+skip:]...)
			}
		}
	}
	if max >= 0 && len(bs) > max {
		bs = bs[:max]
		if values {
			vs = vs[:max]
		}
	}
	return bs, vs
}

// runLen returns the number of pairs with first component a. A block
// that a's run fills (its first pair and the next block's are a's) counts
// without being read.
func (p *pairs) runLen(a uint64) int {
	total := 0
	if len(p.pages) == 0 {
		return 0
	}
	for at, ok := p.seek(a, 0), true; ok; {
		d := p.entry(at)
		if d.a > a {
			break
		}
		nx, more := p.next(at)
		whole := more && p.entry(nx).a == a
		if whole && d.a == a {
			total += d.n()
		} else {
			var blk block
			p.parse(d, &blk)
			if j, _, length := blk.find(d.a, a); j >= 0 {
				total += length
			}
		}
		at, ok = nx, whole
	}
	return total
}

// has reports whether some pair has first component a.
func (p *pairs) has(a uint64) bool {
	for at, ok := p.runStart(a, 0); ok; at, ok = p.runNext(at, a) {
		d := p.entry(at)
		if d.a == a {
			return true
		}
		if d.a < a {
			var blk block
			if p.parse(d, &blk); blk.has(d.a, a) {
				return true
			}
		}
	}
	return false
}

// contains reports whether (a, b) is in p.
func (p *pairs) contains(a, b uint64) bool {
	if len(p.pages) == 0 {
		return false
	}
	d := p.entry(p.seek(a, b))
	if !less(d.a, d.b, a, b) {
		return d.a == a && d.b == b
	}
	var blk block
	p.parse(d, &blk)
	ra := blk.locateRun(d.a, a)
	return ra.found && blk.locatePair(d.b, ra, b).found
}

// locate decodes the block at into p.e and returns the index of the
// first pair at least (a, b) in it.
func (p *pairs) locate(at pos, a, b uint64) int {
	e := &p.e
	e.n = 0
	p.decode(at, e, &p.enc.cols)
	lo, hi := 0, e.n
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if less(e.a[m], e.b[m], a, b) {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// insert adds (a, b) with value v, reporting false, changing nothing, if
// it is there already.
func (p *pairs) insert(a, b uint64, v int64) bool {
	e := &p.e
	if len(p.pages) == 0 {
		e.a[0], e.b[0], e.v[0], e.n = a, b, v, 1
		p.insertBlock(pos{}, e, 0, 1)
		p.n = 1
		return true
	}
	at := p.seek(a, b)
	switch p.patchInsert(at, a, b, v) {
	case patched:
		p.n++
		return true
	case unchanged:
		return false
	}
	i := p.locate(at, a, b)
	if i < e.n && e.a[i] == a && e.b[i] == b {
		return false
	}
	e.shift(i, 1)
	e.a[i], e.b[i], e.v[i] = a, b, v
	p.n++
	p.rewrite(at, i == e.n-1)
	return true
}

// remove removes (a, b), reporting false if it is not there. more
// reports that a has pairs left; false says only that its neighbours in
// the block were not a's.
func (p *pairs) remove(a, b uint64) (removed, more bool) {
	if len(p.pages) == 0 {
		return false, false
	}
	e := &p.e
	at := p.seek(a, b)
	switch res, more := p.patchRemove(at, a, b); res {
	case patched:
		p.n--
		return true, more
	case unchanged:
		return false, false
	}
	i := p.locate(at, a, b)
	if i == e.n || e.a[i] != a || e.b[i] != b {
		return false, false
	}
	more = i > 0 && e.a[i-1] == a || i+1 < e.n && e.a[i+1] == a
	e.shift(i+1, -1)
	p.n--
	p.rewrite(at, false)
	return true, more
}

// setRun calls fn with the b and v of a's pairs, a block's worth at a
// time, and stores the values fn leaves: in place when they fit the
// block's fields (block.setValues), else by encoding the block again. A
// block whose values do not change is not written.
func (p *pairs) setRun(a uint64, fn func(bs []uint64, vs []int64)) {
	var set [maxBlock]int64
	e := &p.e
	for at, ok := p.runStart(a, 0); ok; at, ok = p.runNext(at, a) {
		d := p.entry(at)
		var blk block
		p.parse(d, &blk)
		j, start, length := blk.find(d.a, a)
		if j < 0 {
			continue
		}
		bs, vs := blk.run(d.b, j, start, length, e.b[:0], e.v[:0], true)
		copy(set[:], vs)
		fn(bs, vs)
		// Not in place while a view is out: the fields' neighbours,
		// up to 8 bytes past the slot, are rewritten too (bitpack.Set).
		if slices.Equal(set[:length], vs) || p.held == nil && blk.setValues(start, vs) {
			continue
		}
		copy(set[:], vs)
		e.n = 0
		blk.decodeAll(d.a, d.b, e, &p.enc.cols)
		copy(e.v[start:start+length], set[:length])
		p.write(at, e, 0, e.n)
	}
}

// takeRun removes up to max of a's pairs, the lowest b first, and
// appends their b to bs.
func (p *pairs) takeRun(a uint64, max int, bs []uint64) []uint64 {
	e := &p.e
	for taken := 0; taken < max && len(p.pages) > 0; {
		at := p.seek(a, 0)
		i := p.locate(at, a, 0)
		if i == e.n { // a's run, if any, starts in the next block
			nx, ok := p.next(at)
			if !ok || p.entry(nx).a != a {
				return bs
			}
			at = nx
			i = p.locate(at, a, 0)
		}
		k := i
		for k < e.n && e.a[k] == a && taken < max {
			k++
			taken++
		}
		if k == i {
			return bs
		}
		bs = append(bs, e.b[i:k]...)
		e.shift(k, i-k)
		p.n -= k - i
		p.rewrite(at, false)
	}
	return bs
}

// removeAll removes the pairs of gone, which is sorted, a block at a time
// (one decode and one rewrite for all of gone's pairs in a block), and
// appends those it does not hold to missing.
func (p *pairs) removeAll(gone, missing []pair) []pair {
	e := &p.e
	for g := 0; g < len(gone); {
		if len(p.pages) == 0 {
			return append(missing, gone[g:]...)
		}
		at := p.seek(gone[g].a, gone[g].b)
		var end pair // the next block's first pair; gone's pairs below it are this block's
		nx, more := p.next(at)
		if more {
			end = pair{p.entry(nx).a, p.entry(nx).b}
		}
		x := p.locate(at, gone[g].a, gone[g].b)
		w := x // e's pairs before w are kept, those from x on not yet seen
		for ; g < len(gone) && (!more || less(gone[g].a, gone[g].b, end.a, end.b)); g++ {
			for x < e.n && less(e.a[x], e.b[x], gone[g].a, gone[g].b) {
				e.a[w], e.b[w], e.v[w] = e.a[x], e.b[x], e.v[x]
				w, x = w+1, x+1
			}
			if x < e.n && e.a[x] == gone[g].a && e.b[x] == gone[g].b {
				x++
			} else {
				missing = append(missing, gone[g])
			}
		}
		if x == w {
			continue // none of them here
		}
		e.shift(x, w-x)
		p.n -= x - w
		p.rewrite(at, false)
	}
	return missing
}

// shift moves e's pairs [i, n) by d places (d < 0: left, over the pairs
// before i), adjusting n.
func (e *entries) shift(i, d int) {
	copy(e.a[i+d:], e.a[i:e.n])
	copy(e.b[i+d:], e.b[i:e.n])
	copy(e.v[i+d:], e.v[i:e.n])
	e.n += d
}

// rewrite stores p.e, the changed pairs of the block at at, splitting,
// merging or dropping the block as its new size asks. atEnd says the
// change added p.e's last pair: a block that grows at its end (a viewer
// with the highest id following, or a bulk of follows in id order) then
// splits unevenly, full and one, so that it leaves full blocks behind.
func (p *pairs) rewrite(at pos, atEnd bool) {
	e := &p.e
	switch {
	case e.n == 0:
		p.dropBlock(at)
	case e.n > maxBlock:
		cut := e.n / 2
		if atEnd {
			cut = maxBlock
		}
		p.write(at, e, 0, cut)
		p.insertBlock(pos{at.pi, at.bi + 1}, e, cut, e.n)
	case e.n < minBlock:
		p.merge(at)
	default:
		p.write(at, e, 0, e.n)
	}
	p.maybeCompact()
}

// merge stores p.e, the pairs of the block at at, too few, together with
// a neighbour's.
func (p *pairs) merge(at pos) {
	e := &p.e
	lo, hi := at, at
	if nx, ok := p.next(at); ok {
		hi = nx
		p.decode(nx, e, &p.enc.cols)
	} else if pv, ok := p.prev(at); ok {
		lo = pv
		k := p.entry(pv).n()
		e.shift(0, k)
		n := e.n
		e.n = 0
		p.decode(pv, e, &p.enc.cols)
		e.n = n
	} else {
		p.write(at, e, 0, e.n) // the only block
		return
	}
	if e.n <= maxBlock {
		p.write(lo, e, 0, e.n)
		p.dropBlock(hi)
		return
	}
	p.write(lo, e, 0, e.n/2)
	p.write(hi, e, e.n/2, e.n)
}

// write encodes e's pairs [lo, hi) as the block at at: in its slot if
// they fit it and it is at most one class above the smallest that holds
// them, else in a new slot of that class. Headroom lets a growing block
// stay put for a few changes; a block that shrank, by a split or a run of
// unfollows, leaves a slot that would waste more.
func (p *pairs) write(at pos, e *entries, lo, hi int) {
	p.store(at, p.enc.encode(e, lo, hi), e.a[lo], e.b[lo], hi-lo)
}

// store puts buf, a block of n pairs from (a, b), at at, in a slot as
// write says.
func (p *pairs) store(at pos, buf []byte, a, b uint64, n int) {
	words := (len(buf) + 7) / 8
	p.own(at.pi)
	d := p.entry(at)
	if c := d.class(); c == 0 || classCap(c) < words || c > classFor(words)+1 || p.shared(d) {
		p.release(d)
		c = classFor(words)
		d.loc = uint64(p.alloc(c))<<16 | uint64(c)<<8
	}
	copy(p.arena.bytes(d.off(), d.class()), buf)
	d.a, d.b = a, b
	d.loc = d.loc&^0xff | uint64(n-1)
	if at.bi == 0 {
		pg := &p.pages[at.pi]
		pg.a, pg.b = d.a, d.b
	}
}

// insertBlock adds a block of e's pairs [lo, hi) at at, moving the
// blocks from at on one place up.
func (p *pairs) insertBlock(at pos, e *entries, lo, hi int) {
	if len(p.pages) == 0 {
		p.pages = append(p.pages, newPage())
	}
	if p.pages[at.pi].n == pageMax {
		p.splitPage(at.pi)
		if half := pageMax / 2; at.bi > half {
			at = pos{at.pi + 1, at.bi - half}
		}
	}
	p.own(at.pi)
	pg := &p.pages[at.pi]
	es := pg.es[:pg.n+1]
	copy(es[at.bi+1:], es[at.bi:])
	es[at.bi] = dirEntry{}
	pg.n++
	p.write(at, e, lo, hi)
}

// appendBlock adds a block of e's pairs [lo, hi), all above p's, at the
// end: a bulk build's, which fills pages rather than splitting them.
func (p *pairs) appendBlock(e *entries, lo, hi int) {
	if len(p.pages) == 0 || p.pages[len(p.pages)-1].n == pageMax {
		p.pages = append(p.pages, newPage())
	}
	pi := len(p.pages) - 1
	p.own(pi)
	at := pos{pi, p.pages[pi].n}
	p.pages[pi].n++
	*p.entry(at) = dirEntry{}
	p.write(at, e, lo, hi)
}

// dropBlock removes the block at at.
func (p *pairs) dropBlock(at pos) {
	p.own(at.pi)
	p.release(p.entry(at))
	pg := &p.pages[at.pi]
	es := pg.es[:pg.n]
	copy(es[at.bi:], es[at.bi+1:])
	pg.n--
	switch {
	case pg.n == 0:
		p.pages = slices.Delete(p.pages, at.pi, at.pi+1)
		return
	case at.bi == 0:
		pg.a, pg.b = es[0].a, es[0].b
	}
	if pg.n >= pageMax/4 {
		return
	}
	// Merge with a neighbour when both fit in half a page.
	switch {
	case at.pi+1 < len(p.pages) && pg.n+p.pages[at.pi+1].n <= pageMax/2:
		p.joinPages(at.pi)
	case at.pi > 0 && pg.n+p.pages[at.pi-1].n <= pageMax/2:
		p.joinPages(at.pi - 1)
	}
}

// joinPages moves page pi+1's entries to the end of page pi's.
func (p *pairs) joinPages(pi int) {
	p.own(pi)
	to, from := &p.pages[pi], p.pages[pi+1]
	copy(to.es[to.n:], from.es[:from.n])
	to.n += from.n
	p.pages = slices.Delete(p.pages, pi+1, pi+2)
}

// splitPage moves the upper half of page pi's entries to a new page after
// it.
func (p *pairs) splitPage(pi int) {
	pg := &p.pages[pi]
	np := newPage()
	const half = pageMax / 2
	np.n = copy(np.es[:], pg.es[half:pg.n])
	np.a, np.b = np.es[0].a, np.es[0].b
	pg.n = half
	p.pages = slices.Insert(p.pages, pi+1, np)
}

// minGarbage keeps small sets from compacting over a few freed slots:
// 64 Ki words, 512 KiB. A variable so that tests can make compaction
// frequent.
var minGarbage = 64 << 10

// maybeCompact compacts once free slots hold more than a sixteenth of
// the arena. A compaction moves the live words only, and the garbage that
// triggered it took at least a sixteenth as many words of writes to make,
// so it costs O(1) amortised per word written, as one pause of O(pairs)
// under the caller's lock (Store.Compact lets a maintenance pass choose
// the moment).
func (p *pairs) maybeCompact() {
	if p.held == nil && p.arena.garbage >= minGarbage && p.arena.garbage*16 > p.arena.used {
		p.compact()
	}
}

// compact copies every block, in key order, into a fresh arena without
// free slots. It does nothing while a view is out (freeze.go).
func (p *pairs) compact() {
	if p.held != nil {
		return
	}
	var ar arena
	for pi := range p.pages {
		pg := &p.pages[pi]
		for i := range pg.es[:pg.n] {
			d := &pg.es[i]
			c := d.class()
			off := ar.alloc(c)
			copy(ar.words(off, c), p.arena.words(d.off(), c))
			d.loc = uint64(off)<<16 | d.loc&0xffff
		}
	}
	p.arena = ar
}

// memoryBytes is what p holds: the arena, the directory, the pages.
func (p *pairs) memoryBytes() int {
	return p.arena.capBytes() + len(p.pages)*int(unsafe.Sizeof([pageMax]dirEntry{})) +
		cap(p.pages)*int(unsafe.Sizeof(page{})) + cap(p.enc.w.Buf) + int(unsafe.Sizeof(*p))
}

// cursor walks p's pairs in order, a decoded block at a time.
type cursor struct {
	p    *pairs
	at   pos
	more bool // at is the next block to decode
	e    entries
	sc   columns
	i    int
}

func (p *pairs) cursor() *cursor {
	return &cursor{p: p, more: p.n > 0}
}

// valid reports whether the cursor is at a pair, c.e's pair c.i.
func (c *cursor) valid() bool {
	if c.i < c.e.n {
		return true
	}
	if !c.more {
		return false
	}
	c.e.n, c.i = 0, 0
	c.p.decode(c.at, &c.e, &c.sc)
	c.at, c.more = c.p.next(c.at)
	return true
}

// builder appends pairs in increasing order to the end of a set, in full
// blocks: how a load and the reverse direction's build make sets.
type builder struct {
	p *pairs
	e entries
}

func (bd *builder) add(a, b uint64, v int64) {
	bd.e.a[bd.e.n], bd.e.b[bd.e.n], bd.e.v[bd.e.n] = a, b, v
	bd.e.n++
	bd.p.n++
	if bd.e.n == maxBlock {
		bd.flush()
	}
}

func (bd *builder) flush() {
	if bd.e.n > 0 {
		bd.p.appendBlock(&bd.e, 0, bd.e.n)
		bd.e.n = 0
	}
}

// check verifies p (see Store.Check).
func (p *pairs) check() error {
	// owner marks each word of each chunk: 1 a block's slot, 2 a free
	// slot; the spare word ends each chunk.
	owner := make([][]uint8, len(p.arena.chunks))
	for i, ch := range p.arena.chunks {
		owner[i] = make([]uint8, len(ch)-1)
	}
	mark := func(off, w int, v uint8) error {
		ci, i := off>>chunkShift, off&(chunkWords-1)
		if ci >= len(owner) || i+w > len(owner[ci]) {
			return fmt.Errorf("slot at %d+%d past its chunk", off, w)
		}
		for ; w > 0; i, w = i+1, w-1 {
			if owner[ci][i] != 0 {
				return fmt.Errorf("word %d in two slots", off)
			}
			owner[ci][i] = v
		}
		return nil
	}
	var e entries
	var enc encoder
	var lastA, lastB uint64
	n := 0
	for pi := range p.pages {
		pg := &p.pages[pi]
		if pg.n == 0 || pg.n > pageMax {
			return fmt.Errorf("page %d holds %d blocks", pi, pg.n)
		}
		es := pg.es[:pg.n]
		if pg.a != es[0].a || pg.b != es[0].b {
			return fmt.Errorf("page %d starts at (%d, %d), its first block at (%d, %d)", pi, pg.a, pg.b, es[0].a, es[0].b)
		}
		for bi := range es {
			d := &es[bi]
			if d.class() == 0 {
				return fmt.Errorf("block %d/%d has no slot", pi, bi)
			}
			if err := mark(d.off(), classCap(d.class()), 1); err != nil {
				return err
			}
			if n > 0 && !less(lastA, lastB, d.a, d.b) {
				return fmt.Errorf("block %d/%d starts at (%d, %d), not above (%d, %d)", pi, bi, d.a, d.b, lastA, lastB)
			}
			var blk block
			p.parse(d, &blk)
			if blk.n != d.n() {
				return fmt.Errorf("block %d/%d holds %d pairs, its entry says %d", pi, bi, blk.n, d.n())
			}
			e.n = 0
			if err := checkBlock(&blk, d.a, d.b, &e, &enc); err != nil {
				return fmt.Errorf("block %d/%d: %w", pi, bi, err)
			}
			lastA, lastB = e.a[e.n-1], e.b[e.n-1]
			n += e.n
		}
	}
	if n != p.n {
		return fmt.Errorf("%d pairs, counted %d", p.n, n)
	}
	if p.held != nil {
		for _, sl := range p.held.released {
			if err := mark(sl.off, classCap(sl.class), 3); err != nil {
				return err
			}
		}
	}
	garbage, used := 0, 0
	for c := range nclass {
		for f := p.arena.free[c]; f != 0; f = *p.arena.word(int(f - 1)) {
			if err := mark(int(f-1), classCap(uint8(c)), 2); err != nil {
				return err
			}
			garbage += classCap(uint8(c))
		}
	}
	for ci, o := range owner {
		used += len(o)
		if i := slices.Index(o, 0); i >= 0 {
			return fmt.Errorf("word %d of chunk %d in no slot", i, ci)
		}
	}
	if garbage != p.arena.garbage || used != p.arena.used {
		return fmt.Errorf("%d words in free slots of %d, counted %d of %d", p.arena.garbage, p.arena.used, garbage, used)
	}
	return nil
}
