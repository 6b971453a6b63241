package registry

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"math/bits"
	"slices"

	"github.com/tally-dev/tally/engine/bitpack"
)

// BlockPosts is how many posts a sealed block holds: enough that the
// per-block header and index entry cost well under a byte per post, few
// enough that a lookup's binary search stays within a few cache lines.
const BlockPosts = 128

// run is a sealed window: its posts sorted by id, in blocks of BlockPosts,
// immutable once built (so a compaction can read it without a lock while
// readers use it too). A block is
//
//	n-1 (1 byte) · kw (1 byte) · aw (1 byte) · uvarint vary · uvarint minAuthor · uvarint top
//	n records of kw + aw bits: key, then author - minAuthor
//
// where vary is the set of id bits that differ within the block, a post's
// key is Pext(id, vary) - Pext(first, vary) (so the first post's key is 0;
// the first id is in the index) and top is the last post's key. A lookup
// guesses the record from top by interpolation and walks a few records to
// it: a post's key and author sit side by side, so a lookup touches the
// block's header and usually one more cache line. Keys are fixed width
// rather than Elias–Fano coded as engine/sealed does, for that direct
// access; EF would save about 5 bits of the ~60 a post takes here.
type run struct {
	data   []byte   // blocks back to back; bitpack.Slack bytes of capacity past the end
	firsts []uint64 // first id of each block
	offs   []uint64 // where each block starts in data; a block ends where the next starts
	n      int
}

func sortSlots(s []slot) {
	slices.SortFunc(s, func(a, b slot) int { return cmp.Compare(a.key, b.key) })
}

// builder packs posts, added in id order without repeats, into a run one
// block at a time, so building a window needs a block of buffer, not a
// copy of the window.
type builder struct {
	r   *run
	blk [BlockPosts]Row
	nb  int
	w   bitpack.Writer
	// sink, when set, takes each block as it is packed (a cold file being
	// written): the run then keeps only its count, and memory stays at one
	// block whatever the window's size.
	sink *coldWriter
}

func newBuilder() *builder { return &builder{r: &run{}} }

func (b *builder) add(id, author uint64) {
	b.blk[b.nb] = Row{id, author}
	b.nb++
	if b.nb == BlockPosts {
		b.flushBlock()
	}
}

func (b *builder) flushBlock() {
	if b.nb == 0 {
		return
	}
	r := b.r
	r.n += b.nb
	if b.sink != nil {
		b.w.Buf = appendBlock(&b.w, b.blk[:b.nb])
		b.sink.add(b.blk[0].ID, b.w.Buf)
		b.w.Buf = b.w.Buf[:0]
		b.nb = 0
		return
	}
	r.firsts = append(r.firsts, b.blk[0].ID)
	r.offs = append(r.offs, uint64(len(b.w.Buf)))
	b.w.Buf = appendBlock(&b.w, b.blk[:b.nb])
	b.nb = 0
}

// finish returns the run, its slices trimmed to size.
func (b *builder) finish() *run {
	b.flushBlock()
	r := b.r
	r.data = append(make([]byte, 0, len(b.w.Buf)+bitpack.Slack), b.w.Buf...)
	r.firsts = slices.Clone(r.firsts)
	r.offs = slices.Clone(r.offs)
	return r
}

func appendBlock(w *bitpack.Writer, blk []Row) []byte {
	first := blk[0].ID
	var vary uint64
	minA, maxA := blk[0].Author, blk[0].Author
	for _, p := range blk {
		vary |= p.ID ^ first
		minA, maxA = min(minA, p.Author), max(maxA, p.Author)
	}
	sq0 := bitpack.Pext(first, vary)
	top := bitpack.Pext(blk[len(blk)-1].ID, vary) - sq0
	kw, aw := bits.Len64(top), bits.Len64(maxA-minA)
	w.Buf = append(w.Buf, byte(len(blk)-1), byte(kw), byte(aw))
	w.Buf = binary.AppendUvarint(w.Buf, vary)
	w.Buf = binary.AppendUvarint(w.Buf, minA)
	w.Buf = binary.AppendUvarint(w.Buf, top)
	for _, p := range blk {
		w.Put(bitpack.Pext(p.ID, vary)-sq0, kw)
		w.Put(p.Author-minA, aw)
	}
	return w.Flush()
}

// block returns the bytes of block i.
func (r *run) block(i int) []byte {
	end := len(r.data)
	if i+1 < len(r.offs) {
		end = int(r.offs[i+1])
	}
	return r.data[r.offs[i]:end]
}

// blockOf returns the index of the block that would hold id, or -1.
func (r *run) blockOf(id uint64) int { return bitpack.LastAtMost(r.firsts, id) }

// get returns id's author.
func (r *run) get(id uint64) (uint64, bool) {
	i := r.blockOf(id)
	if i < 0 {
		return 0, false
	}
	var k blockView
	k.parse(r.firsts[i], r.block(i))
	return k.get(id)
}

// blockView is a parsed block header.
type blockView struct {
	area          []byte
	first, vary   uint64
	sq0, minA     uint64
	top           uint64 // key of the last post
	n, kw, aw, rw int
}

// parse reads a block's header. b must have passed checkHeader (every
// block in memory did, when it was built or loaded, and every cold block
// does before it is used or cached).
func (k *blockView) parse(first uint64, b []byte) {
	k.n, k.kw, k.aw = int(b[0])+1, int(b[1]), int(b[2])
	k.rw = k.kw + k.aw
	p := 3
	var q int
	k.vary, q = binary.Uvarint(b[p:])
	p += q
	k.minA, q = binary.Uvarint(b[p:])
	p += q
	k.top, q = binary.Uvarint(b[p:])
	k.area = b[p+q:]
	k.first = first
	k.sq0 = bitpack.Pext(first, k.vary)
}

func (k *blockView) key(i int) uint64 { return bitpack.Get(k.area, i*k.rw, k.kw) }

func (k *blockView) author(i int) uint64 {
	return k.minA + bitpack.Get(k.area, i*k.rw+k.kw, k.aw)
}

func (k *blockView) id(i int) uint64 {
	return k.first&^k.vary | bitpack.Pdep(k.sq0+k.key(i), k.vary)
}

func (k *blockView) get(id uint64) (uint64, bool) {
	x, i, ok := k.guess(id)
	if !ok {
		return 0, false
	}
	return k.find(x, i)
}

// guess returns id's key and the record where its search starts, or false
// when id cannot be in the block. Ids are spread evenly enough over a
// block that interpolation lands a few records from the answer, in the
// same cache line, where a binary search would touch a line per step.
func (k *blockView) guess(id uint64) (x uint64, i int, ok bool) {
	if (id^k.first)&^k.vary != 0 {
		return 0, 0, false
	}
	x = bitpack.Pext(id, k.vary) - k.sq0
	if x > k.top {
		return 0, 0, false
	}
	if k.top > 0 {
		hi, lo := bits.Mul64(x, uint64(k.n-1))
		q, _ := bits.Div64(hi, lo, k.top)
		i = int(q)
	}
	return x, i, true
}

// find walks from record i to key x.
func (k *blockView) find(x uint64, i int) (uint64, bool) {
	last := k.n - 1
	for i > 0 && k.key(i) > x {
		i--
	}
	for i < last && k.key(i) < x {
		i++
	}
	if k.key(i) != x {
		return 0, false
	}
	return k.author(i), true
}

// touch loads the byte holding record i so that the CPU fetches its line
// while the caller goes on to other posts.
// The byte may be in the slack past a block of zero-width records.
func (k *blockView) touch(i int) byte {
	o := i * k.rw >> 3
	return k.area[o : o+1][0]
}

// each calls fn for every post of r in id order until fn returns false.
func (r *run) each(fn func(id, author uint64) bool) bool {
	var k blockView
	for i, first := range r.firsts {
		k.parse(first, r.block(i))
		for j := range k.n {
			if !fn(k.id(j), k.author(j)) {
				return false
			}
		}
	}
	return true
}

func (r *run) memoryBytes() int {
	return cap(r.data) + 8*cap(r.firsts) + 8*cap(r.offs)
}

// checkHeader checks what every lookup in block b relies on to stay in
// bounds: the header parses, n <= BlockPosts, widths <= 64, and the
// records' bits exactly fill the rest of the block (the writer pads to a
// byte). With the block's Slack bytes of capacity this makes any read a
// lookup does fall inside the block's memory, whatever the values are.
func checkHeader(b []byte) error {
	if len(b) < 6 {
		return fmt.Errorf("block of %d bytes is shorter than a header", len(b))
	}
	n, kw, aw := int(b[0])+1, int(b[1]), int(b[2])
	if n > BlockPosts || kw > 64 || aw > 64 {
		return fmt.Errorf("block header n=%d kw=%d aw=%d out of range", n, kw, aw)
	}
	p := 3
	for range 3 {
		_, q := binary.Uvarint(b[p:])
		if q <= 0 {
			return fmt.Errorf("bad uvarint in block header at byte %d", p)
		}
		p += q
	}
	if want := (n*(kw+aw) + 7) / 8; len(b)-p != want {
		return fmt.Errorf("block of %d records of %d bits has %d bytes of records, want %d", n, kw+aw, len(b)-p, want)
	}
	return nil
}

// checkBlock checks block b (first id first) completely: its header, then
// every record: keys start at 0, strictly increase and end at top; every
// id decodes back to its key (the key fits the varying bits) and lies in
// [lo, last] and after prev (the last id of the block before, or
// lo-1: pass ok=false for none); authors do not overflow. It returns the
// block's post count and last id. A block that passes answers Get and
// Range consistently: the ids Range gives are the ones Get finds.
func checkBlock(first uint64, b []byte, lo, last, prev uint64, hasPrev bool) (n int, lastID uint64, err error) {
	if err := checkHeader(b); err != nil {
		return 0, 0, err
	}
	if first < lo || first > last || (hasPrev && first <= prev) {
		return 0, 0, fmt.Errorf("block first id %d outside (%d, %d]", first, prev, last)
	}
	var k blockView
	k.parse(first, b)
	width := bits.OnesCount64(k.vary)
	var prevKey uint64
	for i := range k.n {
		x := k.key(i)
		switch {
		case i == 0 && x != 0:
			return 0, 0, fmt.Errorf("block's first key is %d, not 0", x)
		case i > 0 && x <= prevKey:
			return 0, 0, fmt.Errorf("block's key %d after %d", x, prevKey)
		}
		prevKey = x
		sq := k.sq0 + x
		if sq < x || (width < 64 && sq>>uint(width) != 0) {
			return 0, 0, fmt.Errorf("block's key %d overflows its %d varying bits", x, width)
		}
		id := k.id(i)
		if id < first || id > last {
			return 0, 0, fmt.Errorf("block's id %d outside [%d, %d]", id, first, last)
		}
		if a := bitpack.Get(k.area, i*k.rw+k.kw, k.aw); k.minA+a < a {
			return 0, 0, fmt.Errorf("block's author overflows")
		}
		lastID = id
	}
	if prevKey != k.top {
		return 0, 0, fmt.Errorf("block's last key %d, header says %d", prevKey, k.top)
	}
	return k.n, lastID, nil
}
