package likeset

import (
	"fmt"
	"unsafe"
)

// sealedWin is the immutable form of a window: its pairs in (k, u) order
// in blocks (see block.go), the blocks back to back in one byte slice with
// slack zero bytes after the last, and a block index in two flat slices.
// Neither holds pointers. It is safe for concurrent reads.
type sealedWin struct {
	data   []byte
	firsts []uint64 // 2 per block: the first pair's key and user
	offs   []uint64 // block b is data[offs[b]:offs[b+1]]
	pairs  int
}

func (w *sealedWin) blocks() int { return len(w.offs) - 1 }

// find returns the block that would hold (k, u): the last one whose first
// pair is not above it, or -1.
func (w *sealedWin) find(k, u uint64) int {
	nb := w.blocks()
	if nb <= 0 || k < w.firsts[0] || (k == w.firsts[0] && u < w.firsts[1]) {
		return -1
	}
	base, n := 0, nb
	for n > 1 {
		half := n >> 1
		m := 2 * (base + half)
		if fk := w.firsts[m]; fk < k || (fk == k && w.firsts[m+1] <= u) {
			base += half
		}
		n -= half
	}
	return base
}

// block parses block b into blk. The window's bytes were built by this
// package (or checked by verify), so the parse cannot fail.
func (w *sealedWin) block(b int, blk *block) {
	_ = blk.parse(w.firsts[2*b], w.firsts[2*b+1], w.data, int(w.offs[b]), int(w.offs[b+1]))
}

func (w *sealedWin) has(k, u uint64) bool {
	b := w.find(k, u)
	if b < 0 {
		return false
	}
	var blk block
	w.block(b, &blk)
	return blk.has(k, u)
}

// each calls fn for every pair in (k, u) order until fn returns false, and
// reports whether it went to the end.
func (w *sealedWin) each(fn func(k, u uint64) bool) bool {
	var sc scratch
	var blk block
	for b := range w.blocks() {
		w.block(b, &blk)
		n, _ := blk.decode(sc.pairs[:], sc.vals[:])
		for _, q := range sc.pairs[:n] {
			if !fn(q.k, q.u) {
				return false
			}
		}
	}
	return true
}

// scratch is the decoder's working memory for one block (24 KiB; callers
// that run often keep one rather than put it on the stack each time).
type scratch struct {
	pairs [maxBlockPairs]pk
	vals  [2 * maxBlockPairs]uint64
}

// verify decodes every block, checking its structure and that pairs
// increase across blocks. Built windows pass by construction; tests and a
// loader of foreign bytes call it.
func (w *sealedWin) verify() error {
	if len(w.offs) == 0 || len(w.firsts) != 2*w.blocks() || w.offs[len(w.offs)-1]+slack != uint64(len(w.data)) {
		return fmt.Errorf("likeset: malformed sealed window index")
	}
	sc := new(scratch)
	var blk block
	var last pk
	n := 0
	for b := range w.blocks() {
		if w.offs[b] >= w.offs[b+1] {
			return fmt.Errorf("likeset: block %d: empty", b)
		}
		if err := blk.parse(w.firsts[2*b], w.firsts[2*b+1], w.data, int(w.offs[b]), int(w.offs[b+1])); err != nil {
			return fmt.Errorf("likeset: block %d: %w", b, err)
		}
		c, err := blk.decode(sc.pairs[:], sc.vals[:])
		if err != nil {
			return fmt.Errorf("likeset: block %d: %w", b, err)
		}
		if b > 0 && cmpPK(sc.pairs[0], last) <= 0 {
			return fmt.Errorf("likeset: block %d: pairs out of order", b)
		}
		last = sc.pairs[c-1]
		n += c
	}
	if n != w.pairs {
		return fmt.Errorf("likeset: window says %d pairs, blocks hold %d", w.pairs, n)
	}
	return nil
}

var sealedWinBytes = int(unsafe.Sizeof(sealedWin{}))

func (w *sealedWin) memoryBytes() int {
	if w == nil {
		return 0
	}
	return sealedWinBytes + cap(w.data) + 8*cap(w.firsts) + 8*cap(w.offs)
}

// builder makes a sealedWin from pairs given in strictly increasing (k, u)
// order. Its memory is the encoded bytes plus one block.
type builder struct {
	enc    blockEncoder
	limit  int
	data   []byte
	firsts []uint64
	offs   []uint64
	pairs  int
	last   pk
}

func newBuilder(limit int) *builder {
	if limit <= 0 || limit > maxBlockPairs {
		limit = blockPairs
	}
	return &builder{limit: limit}
}

func (b *builder) add(k, u uint64) {
	if !b.enc.fits(k, u, b.limit) {
		b.flush()
	}
	b.enc.add(k, u)
	b.pairs++
}

func (b *builder) flush() {
	if b.enc.n == 0 {
		return
	}
	b.offs = append(b.offs, uint64(len(b.data)))
	var first pk
	b.data, first = b.enc.encode(b.data)
	b.firsts = append(b.firsts, first.k, first.u)
}

// finish returns the window, its slices trimmed to their length.
func (b *builder) finish() *sealedWin {
	b.flush()
	b.offs = append(b.offs, uint64(len(b.data)))
	data := make([]byte, len(b.data)+slack)
	copy(data, b.data)
	w := &sealedWin{
		data:   data,
		firsts: append([]uint64(nil), b.firsts...),
		offs:   append([]uint64(nil), b.offs...),
		pairs:  b.pairs,
	}
	b.data, b.firsts, b.offs = nil, nil, nil
	return w
}
