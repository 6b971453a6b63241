package sealed

import (
	"bytes"
	"iter"
	"math"
	"unsafe"

	"github.com/tally-dev/tally/engine"
)

// Window is an immutable sealed window held in memory: its encoded bytes
// (the same bytes as its file) and nothing else. It is safe for concurrent
// use.
type Window struct {
	data []byte
	idx  Index
}

// Unmarshal checks data as a complete window — header, footer, index and
// every block's checksum and structure — and returns a Window that aliases
// data: the caller must not modify data afterwards. A window that passes
// never returns wrong counts and never panics on lookup.
func Unmarshal(data []byte) (*Window, error) {
	return open(data, true)
}

func open(data []byte, verify bool) (*Window, error) {
	if err := CheckHeader(data); err != nil {
		return nil, err
	}
	size := int64(len(data))
	if size < HeaderSize+FooterSize {
		return nil, corrupt(0, "%d bytes is too short for a sealed window", size)
	}
	f, err := ParseFooter(data[size-FooterSize:], size)
	if err != nil {
		return nil, err
	}
	idx, err := NewIndex(f, data[f.IndexOffset:size-FooterSize])
	if err != nil {
		return nil, err
	}
	w := &Window{data: data, idx: idx}
	w.idx.buildSearch()
	if verify {
		if err := w.verify(); err != nil {
			return nil, err
		}
	}
	return w, nil
}

// verify decodes every block, checking checksums, structure, id order
// across blocks and the footer's totals.
func (w *Window) verify() error {
	var ids [MaxBlockPosts]uint64
	var counts [MaxBlockPosts]engine.Counts
	posts := 0
	var last uint64
	for b := range w.idx.blocks {
		first, off, end := w.idx.Block(b)
		blk := w.data[off:end]
		if err := VerifyBlock(first, blk, ids[:], counts[:]); err != nil {
			return corrupt(int64(off), "block %d: %v", b, err)
		}
		n := int(blk[0]) + 1
		if b > 0 && first <= last {
			return corrupt(int64(off), "block %d starts at id %d, not above the previous block's last id %d", b, first, last)
		}
		last = ids[n-1]
		posts += n
	}
	if posts != w.idx.posts {
		return corrupt(int64(len(w.data)-FooterSize), "footer says %d posts, blocks hold %d", w.idx.posts, posts)
	}
	if w.idx.blocks > 0 && last != w.idx.maxID {
		return corrupt(int64(len(w.data)-FooterSize), "footer says max id %d, last post is %d", w.idx.maxID, last)
	}
	return nil
}

// MarshalBinary returns a copy of the window's bytes: the file format.
func (w *Window) MarshalBinary() ([]byte, error) { return bytes.Clone(w.data), nil }

// Bytes returns the window's bytes without copying; they must not be
// modified.
func (w *Window) Bytes() []byte { return w.data }

// Len returns the number of posts stored (all with non-zero counts).
func (w *Window) Len() int { return w.idx.posts }

// SizeBytes returns the memory the window holds: its encoded bytes, the
// block index included, and the index's in-memory search.
func (w *Window) SizeBytes() int { return len(w.data) + w.idx.searchSize }

// Index returns the window's block index.
func (w *Window) Index() *Index { return &w.idx }

// block parses block b into k. The window's bytes were checked when it
// was built or unmarshalled, so the parse cannot fail, and a block is
// followed by at least its CRC and the footer (BlockSlack): Parse's
// checks are skipped, a call less on every block a page reads.
func (w *Window) block(b int, k *Block) {
	first, off, end := w.idx.Block(b)
	ParseBlockHeader(&k.ids, k.f[:], first, w.data[off:end-4], numFields, false, 63)
}

// Get returns the counts of post id; a post the window does not hold reads
// as zeros.
func (w *Window) Get(id uint64) engine.Counts {
	b := w.idx.Find(id)
	if b < 0 {
		return engine.Counts{}
	}
	var k Block
	w.block(b, &k)
	if i, ok := k.Find(id); ok {
		return k.Counts(i)
	}
	return engine.Counts{}
}

// GetMany stores the counts of ids[i] in out[i] (out must be at least as
// long as ids). ids need not be sorted; each block is parsed once however
// many of the ids it holds. It does not allocate.
func (w *Window) GetMany(ids []uint64, out []engine.Counts) {
	var keys [256]uint64
	for len(ids) > 0 {
		c := min(len(ids), len(keys))
		w.getChunk(ids[:c], out[:c], keys[:])
		ids, out = ids[c:], out[c:]
	}
}

func (w *Window) getChunk(ids []uint64, out []engine.Counts, keys []uint64) {
	clear(out)
	if prefetch && w.idx.keys != nil && len(w.data) <= math.MaxUint32 {
		w.getPhased(ids, out, keys)
		return
	}
	// A window of a few blocks: most likely in the CPU cache as a whole,
	// and a page reads most of its blocks.
	if prefetch {
		use(w.idx.touch())
	}
	keys = w.idx.Group(ids, keys)
	if prefetch {
		w.idx.TouchBlocks(w.data, keys)
	}
	cur := -1
	var k Block
	for _, key := range keys {
		b, i := int(key>>8), int(key&0xff)
		if b != cur {
			w.block(b, &k)
			cur = b
		}
		if p, ok := k.Find(ids[i]); ok {
			out[i] = k.Counts(p)
		}
	}
}

// getPhased is getChunk for a window with the two-level search (many
// blocks): a page's ids then fall in as many blocks, and out of cache
// each block costs several memory misses that depend on each other
// (index, header, high bits, low parts, counts). It reads the blocks in
// passes over all the ids, each pass ending with the loads of the cache
// lines the next needs, so that the misses of different ids overlap
// instead of queueing; and it loads only the lines a lookup reads, about
// 8 of a block's 11 (128 posts), plus 2 of the index.
func (w *Window) getPhased(ids []uint64, out []engine.Counts, keys []uint64) {
	keys = w.idx.Group(ids, keys)
	// The first line of each block, which holds its header (about 22
	// bytes, so it may reach into the next line).
	var ld loads
	prev := -1
	for _, key := range keys {
		b := int(key >> 8)
		if b != prev {
			prev = b
			_, off := w.idx.entry(b)
			ld.add(off, off+31)
		}
	}
	use(ld.load(w.data))
	for len(keys) > 0 {
		keys = w.getBatch(ids, out, keys, &ld)
	}
}

// A batch of a multi-get is at most batchBlocks blocks and batchKeys ids:
// a parsed Block is about 470 bytes, kept on the stack from one pass to
// the next.
const (
	batchBlocks = 16
	batchKeys   = 64
)

// loads collects offsets of a window's bytes whose cache lines a pass of
// a multi-get needs, and then loads them in one tight loop. Reading a
// byte is the only prefetch Go has, and a load that misses holds its
// place in the CPU's reorder buffer until its line arrives: spread
// through the decoding work, the loads would be a few in flight at a
// time; back to back, dozens are.
type loads struct {
	n int
	o [512]uint32
}

// add notes offsets a and b; it ignores them when the list is full.
func (l *loads) add(a, b uint64) {
	if l.n+2 <= len(l.o) {
		l.o[l.n], l.o[l.n+1] = uint32(a), uint32(b)
		l.n += 2
	}
}

// add1 notes offset a; it ignores it when the list is full.
func (l *loads) add1(a uint64) {
	if l.n < len(l.o) {
		l.o[l.n] = uint32(a)
		l.n++
	}
}

// load reads the bytes of data at the offsets noted, and empties the list.
func (l *loads) load(data []byte) byte {
	var x byte
	for _, o := range l.o[:l.n] {
		x ^= data[o]
	}
	l.n = 0
	return x
}

// probe is the state of one id of a batch between passes.
type probe struct {
	lo  uint64
	h   int32
	pos int32 // where its bucket starts; -1 when it is not in the block
}

// getBatch answers the ids of the first blocks of keys (sorted by block)
// and returns the keys left. It reads the blocks in passes over all of
// them, each ending with the loads of the cache lines the next needs, so
// that out of cache the misses of different blocks overlap: parse the
// headers (loaded by getPhased), then load the high bits; find each id's
// bucket in the high bits, then load its low parts; find the posts, then
// load the lines of their counts; read the counts. Loading whole blocks
// instead (11 lines for 128 posts on the datagen set at 100M posts) cost
// more than it saved once they no longer fit the cache: out of cache the
// CPU keeps about 16 misses in flight, so a page's time grows with the
// lines it loads. 64 blocks a batch instead of 16 measured the same.
func (w *Window) getBatch(ids []uint64, out []engine.Counts, keys []uint64, ld *loads) []uint64 {
	var ks [batchBlocks]Block
	var ps [batchKeys]probe
	var base [batchBlocks]int // where each block's bit area starts in w.data
	n := min(len(keys), batchKeys)
	nb := 0
	for j := 0; j < n; j++ {
		b := int(keys[j] >> 8)
		if j > 0 && b == int(keys[j-1]>>8) {
			continue
		}
		if nb == batchBlocks {
			n = j
			break
		}
		k := &ks[nb]
		_, _, end := w.idx.Block(b)
		w.block(b, k)
		base[nb] = int(end) - 4 + BlockSlack - len(k.ids.area)
		k.highLines(base[nb], ld)
		nb++
	}
	use(ld.load(w.data))
	keys, rest := keys[:n], keys[n:]
	slot := -1
	for j, key := range keys {
		if j == 0 || key>>8 != keys[j-1]>>8 {
			slot++
		}
		k := &ks[slot&(batchBlocks-1)]
		p := &ps[j&(batchKeys-1)]
		h, lo, st := k.ids.start(ids[key&0xff])
		p.h, p.lo, p.pos = int32(h), lo, -1
		switch st {
		case atFirst:
			out[key&0xff] = k.Counts(0)
		case search:
			pos := k.ids.bucket(h)
			p.pos = int32(pos)
			k.lowLines(base[slot&(batchBlocks-1)], pos-h, ld)
		}
	}
	use(ld.load(w.data))
	align := int(uintptr(unsafe.Pointer(unsafe.SliceData(w.data))) & 63)
	slot = -1
	for j, key := range keys {
		if j == 0 || key>>8 != keys[j-1]>>8 {
			slot++
		}
		p := &ps[j&(batchKeys-1)]
		if p.pos < 0 {
			continue
		}
		k := &ks[slot&(batchBlocks-1)]
		i, ok := k.ids.scan(int(p.pos), int(p.h), p.lo)
		p.pos = int32(i)
		if !ok {
			p.pos = -1
			continue
		}
		k.fieldLines(base[slot&(batchBlocks-1)], align, i, ld)
	}
	use(ld.load(w.data))
	slot = -1
	for j, key := range keys {
		if j == 0 || key>>8 != keys[j-1]>>8 {
			slot++
		}
		if p := &ps[j&(batchKeys-1)]; p.pos >= 0 {
			out[key&0xff] = ks[slot&(batchBlocks-1)].Counts(int(p.pos))
		}
	}
	return rest
}

// Iter returns an iterator over the window's posts in increasing id order.
func (w *Window) Iter() *Iterator { return &Iterator{w: w, pos: -1} }

// All returns the window's posts in increasing id order.
func (w *Window) All() iter.Seq2[uint64, engine.Counts] {
	return func(yield func(uint64, engine.Counts) bool) {
		it := w.Iter()
		for it.Next() {
			if !yield(it.ID(), it.Counts()) {
				return
			}
		}
	}
}

// Iterator walks a window in id order, one decoded block at a time.
type Iterator struct {
	w      *Window
	block  int // next block to decode
	pos, n int
	ids    [MaxBlockPosts]uint64
	counts [MaxBlockPosts]engine.Counts
}

// Next advances to the next post and reports whether there is one.
func (it *Iterator) Next() bool {
	it.pos++
	for it.pos >= it.n {
		if it.block >= it.w.idx.blocks {
			return false
		}
		var k Block
		it.w.block(it.block, &k)
		it.block++
		// Checked at build or unmarshal time; Decode cannot fail here.
		_ = k.Decode(it.ids[:], it.counts[:])
		it.pos, it.n = 0, k.ids.n
	}
	return true
}

// ID and Counts return the current post.
func (it *Iterator) ID() uint64            { return it.ids[it.pos] }
func (it *Iterator) Counts() engine.Counts { return it.counts[it.pos] }

// Err returns nil: an in-memory window was verified when it was made.
func (it *Iterator) Err() error { return nil }

// prefetch enables the loads ahead of decoding: touch, and the passes of
// getPhased (without it a window's multi-get reads block after block).
// Out of cache (10M posts, 26 MB of windows) touch cut a 50-post page by a
// third; in cache it costs nothing measurable (BenchmarkGetPage/
// prefetch-vs-not switches it off to measure).
var prefetch = true

// TouchBlocks loads one byte of every cache line of the blocks that keys
// (from Group) name, data being the window's bytes, before any is
// decoded. The loads do not depend on each other, so the CPU keeps many
// in flight at once; decoding a block is a chain of dependent loads
// (header, id column, value columns), which out of cache would otherwise
// pay the memory latency several times per block, one block after
// another. engine/tier's sealed windows use it too.
func (x *Index) TouchBlocks(data []byte, keys []uint64) {
	var v byte
	prev := -1
	for _, key := range keys {
		b := int(key >> 8)
		if b == prev {
			continue
		}
		prev = b
		_, off, end := x.Block(b)
		for p := off; p < end; p += 64 {
			v ^= data[p]
		}
	}
	use(v)
}

// touch loads the index's cache lines when it is small enough (a few KiB)
// that this costs less than the binary searches' dependent misses would.
func (x *Index) touch() byte {
	var v byte
	if len(x.raw) > 8<<10 {
		return v
	}
	for p := 0; p < len(x.raw); p += 64 {
		v ^= x.raw[p]
	}
	return v
}

// use consumes the bytes touch loaded, so that the compiler keeps the
// loads; it is not inlined, and a global sink would be a data race
// between concurrent readers.
//
//go:noinline
func use(byte) {}
