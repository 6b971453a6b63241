package usercounts

import (
	"math/bits"

	"github.com/tally-dev/tally/engine/bitpack"
)

// blockShift sets the users per block (blockLen). 64 keeps the search
// inside a block at 6 steps and the index at 16 bytes per 64 users
// (0.25 bytes a user); see the package doc for what 128 measured.
const (
	blockShift = 6
	blockLen   = 1 << blockShift
)

// A block's meta word: the bit offset of its data in packed.data, then
// 7 bits of id width and 7 bits of count width (widths go up to 64 and 63).
const (
	widthBits = 7
	widthMask = 1<<widthBits - 1
	offShift  = 2 * widthBits
)

// packed is the folded part of a Table: users in increasing id order,
// cut into blocks of blockLen (the last block may be shorter). Block b
// starts at firsts[b]; its data, at meta[b]'s bit offset, is the other
// users' ids as id-firsts[b] in the block's id width, then every user's
// count in the block's count width. A packed is never modified once
// built: a fold job reads it with no lock while readers share it.
type packed struct {
	firsts []uint64 // first id of each block: the binary-searched index
	meta   []uint64 // bit offset << offShift | id width << widthBits | count width
	data   []byte   // cap(data) >= len(data)+bitpack.Slack
	n      int      // users
}

var emptyPacked = &packed{data: make([]byte, 0, bitpack.Slack)}

// blockLenOf returns how many users block b holds.
func (p *packed) blockLenOf(b int) int { return min(blockLen, p.n-b<<blockShift) }

// get returns u's count and whether u is in p.
func (p *packed) get(u uint64) (int64, bool) {
	b := bitpack.LastAtMost(p.firsts, u)
	if b < 0 {
		return 0, false
	}
	x := u - p.firsts[b]
	m := p.meta[b]
	off, idW, cntW := int(m>>offShift), uint(m>>widthBits&widthMask), uint(m&widthMask)
	l := p.blockLenOf(b)
	i := 0
	if x != 0 {
		if idW < 64 && x>>idW != 0 {
			return 0, false // past the block's last id
		}
		// Ids 1..l-1 are stored as deltas d[0..l-2], d[j] at off+j*idW:
		// find the last delta <= x (a search without an early exit, so
		// its branches follow the data rather than mispredict on a hit).
		mask := bitpack.LowMask(idW)
		base, n := 0, l-1
		for n > 1 {
			half := n >> 1
			if bitpack.Bits(p.data, off+(base+half)*int(idW), idW, mask) <= x {
				base += half
			}
			n -= half
		}
		if n == 0 || bitpack.Bits(p.data, off+base*int(idW), idW, mask) != x {
			return 0, false
		}
		i = base + 1
	}
	c := bitpack.Bits(p.data, off+(l-1)*int(idW)+i*int(cntW), cntW, bitpack.LowMask(cntW))
	return int64(c), true
}

// maxID returns the largest id in p; p must not be empty.
func (p *packed) maxID() uint64 {
	b := len(p.firsts) - 1
	l := p.blockLenOf(b)
	if l == 1 {
		return p.firsts[b]
	}
	m := p.meta[b]
	idW := uint(m >> widthBits & widthMask)
	return p.firsts[b] + bitpack.Bits(p.data, int(m>>offShift)+(l-2)*int(idW), idW, bitpack.LowMask(idW))
}

// memoryBytes is the size of p's backing arrays.
func (p *packed) memoryBytes() int64 {
	return int64(cap(p.firsts)*8 + cap(p.meta)*8 + cap(p.data))
}

// packedIter walks a packed in id order, a block at a time.
type packedIter struct {
	p    *packed
	b    int // next block to decode
	ids  [blockLen]uint64
	vals [blockLen]int64
	i, l int // position in and length of the decoded block
}

func (it *packedIter) init(p *packed) { *it = packedIter{p: p} }

// peek returns the current entry, ok false at the end.
func (it *packedIter) peek() (uint64, int64, bool) {
	if it.i == it.l {
		if it.b == len(it.p.firsts) {
			return 0, 0, false
		}
		it.decode()
	}
	return it.ids[it.i], it.vals[it.i], true
}

func (it *packedIter) next() { it.i++ }

func (it *packedIter) decode() {
	p, b := it.p, it.b
	m := p.meta[b]
	off, idW, cntW := int(m>>offShift), uint(m>>widthBits&widthMask), uint(m&widthMask)
	l := p.blockLenOf(b)
	first := p.firsts[b]
	it.ids[0] = first
	idMask, cntMask := bitpack.LowMask(idW), bitpack.LowMask(cntW)
	for j := 1; j < l; j++ {
		it.ids[j] = first + bitpack.Bits(p.data, off+(j-1)*int(idW), idW, idMask)
	}
	off += (l - 1) * int(idW)
	for j := range l {
		it.vals[j] = int64(bitpack.Bits(p.data, off+j*int(cntW), cntW, cntMask))
	}
	it.b, it.i, it.l = b+1, 0, l
}

// builder packs entries given in strictly increasing id order.
type builder struct {
	firsts, meta []uint64
	w            bitpack.Writer
	bitOff       int
	ids          [blockLen]uint64
	vals         [blockLen]uint64
	k, n         int
}

// newBuilder sizes the output for about n entries of about bytesPer
// data bytes each, so that the build rarely regrows its slices.
func newBuilder(n int, bytesPer float64) *builder {
	blocks := n/blockLen + 1
	return &builder{
		firsts: make([]uint64, 0, blocks),
		meta:   make([]uint64, 0, blocks),
		w:      bitpack.Writer{Buf: make([]byte, 0, int(float64(n)*bytesPer)+64)},
	}
}

func (bd *builder) add(id uint64, v int64) {
	bd.ids[bd.k], bd.vals[bd.k] = id, uint64(v)
	bd.k++
	if bd.k == blockLen {
		bd.flushBlock()
	}
}

func (bd *builder) flushBlock() {
	k := bd.k
	if k == 0 {
		return
	}
	first := bd.ids[0]
	idW := bits.Len64(bd.ids[k-1] - first)
	var all uint64
	for _, v := range bd.vals[:k] {
		all |= v
	}
	cntW := bits.Len64(all)
	bd.firsts = append(bd.firsts, first)
	bd.meta = append(bd.meta, uint64(bd.bitOff)<<offShift|uint64(idW)<<widthBits|uint64(cntW))
	for _, id := range bd.ids[1:k] {
		bd.w.Put(id-first, idW)
	}
	for _, v := range bd.vals[:k] {
		bd.w.Put(v, cntW)
	}
	bd.bitOff += (k-1)*idW + k*cntW
	bd.n += k
	bd.k = 0
}

// finish returns the packed entries, its slices trimmed to what they hold
// (MemoryBytes counts capacity) plus the Slack that Get needs.
func (bd *builder) finish() *packed {
	bd.flushBlock()
	if bd.n == 0 {
		return emptyPacked
	}
	data := bd.w.Flush()
	need := len(data) + bitpack.Slack
	if cap(data) < need || cap(data) > need+need/16 {
		d := make([]byte, len(data), need)
		copy(d, data)
		data = d
	}
	clear(data[len(data):need]) // Get reads the slack; keep it defined
	return &packed{firsts: trim(bd.firsts), meta: trim(bd.meta), data: data, n: bd.n}
}

func trim(s []uint64) []uint64 {
	if cap(s)-len(s) <= len(s)/16 {
		return s
	}
	return append([]uint64(nil), s...)
}
