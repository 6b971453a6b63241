package usercounts

import (
	"math"
	"math/bits"

	"github.com/tally-dev/tally/engine/bitpack"
)

// A block holds up to maxBlockLen users, and fewer when their records
// would pass maxBlockBits: a lookup's search then touches one or two
// cache lines of a block whatever its ids' spread (dense ids: ~60 users
// of ~17 bits; sparse 64-bit ids: ~18 of ~56), and minBlockLen bounds the
// index's 16 bytes a block to 2 bytes a user in the worst case.
const (
	maxBlockLen  = 64
	minBlockLen  = 8
	maxBlockBits = 1024
)

// A block's meta word: the bit offset of its data in packed.data, its
// length - 1 (6 bits), then 7 bits of id width and 7 of count width
// (widths go up to 64 and 63).
const (
	widthBits = 7
	widthMask = 1<<widthBits - 1
	lenShift  = 2 * widthBits
	lenMask   = maxBlockLen - 1
	offShift  = lenShift + 6
)

// packed is the folded part of a Table: users in increasing id order,
// cut into blocks (see maxBlockBits). Block b
// starts at idx[b].first; its data, at the bit offset in idx[b].meta, is
// the first user's count, then for each other user a record of its id as
// id-first (the block's id width) and its count (the block's count
// width). A record keeps a user's count next to its id, so a hit reads
// the count from the line its search ended on. A packed is never
// modified once built: a fold job reads it with no lock while readers
// share it.
type packed struct {
	idx   []blockIdx
	data  []byte // cap(data) >= len(data)+bitpack.Slack
	n     int    // users
	radix []uint32
	shift uint8 // see buildRadix
}

// blockIdx is a block's index entry: its first id and its meta word, side
// by side so that finding the block loads both.
type blockIdx struct {
	first uint64
	meta  uint64 // bit offset << offShift | (length-1) << lenShift | id width << widthBits | count width
}

var emptyPacked = &packed{data: make([]byte, 0, bitpack.Slack)}

// lenOf returns how many users the block of meta word m holds.
func lenOf(m uint64) int { return int(m>>lenShift&lenMask) + 1 }

// get returns u's count and whether u is in p.
func (p *packed) get(u uint64) (int64, bool) {
	b := p.block(u)
	if b < 0 {
		return 0, false
	}
	e := p.idx[b]
	x := u - e.first
	off, idW, cntW := int(e.meta>>offShift), uint(e.meta>>widthBits&widthMask), uint(e.meta&widthMask)
	cntMask := bitpack.LowMask(cntW)
	if x == 0 {
		return int64(bitpack.Bits(p.data, off, cntW, cntMask)), true
	}
	if idW < 64 && x>>idW != 0 {
		return 0, false // past the block's last id
	}
	// Records 1..l-1 start at off+cntW, rw bits each: the last whose id
	// is <= u, found branch-free (lookups fall in random blocks at random
	// places: a branching search mispredicted about half its steps, as
	// engine/sealed's index search found).
	rw := int(idW + cntW)
	off += int(cntW)
	idMask := bitpack.LowMask(idW)
	base, n := 0, lenOf(e.meta)-1
	for n > 1 {
		half := n >> 1
		_, below := bits.Sub64(x, bitpack.Bits(p.data, off+(base+half)*rw, idW, idMask), 0)
		base += half & int(below-1)
		n -= half
	}
	if n == 0 || bitpack.Bits(p.data, off+base*rw, idW, idMask) != x {
		return 0, false
	}
	return int64(bitpack.Bits(p.data, off+base*rw+int(idW), cntW, cntMask)), true
}

// block returns the block that would hold u, or -1 when u is below every
// id. The radix array narrows the search to the blocks that start in u's
// slice of the id range (about one when ids spread evenly); a branch-free
// search of their first ids does the rest.
func (p *packed) block(u uint64) int {
	if len(p.idx) == 0 || u < p.idx[0].first {
		return -1
	}
	k := (u - p.idx[0].first) >> p.shift
	lo, hi := len(p.idx)-1, len(p.idx)-1
	if k < uint64(len(p.radix)-1) {
		lo, hi = int(p.radix[k]), int(p.radix[k+1])
	}
	f := p.idx[lo : hi+1]
	base, n := 0, len(f)
	for n > 4 {
		half := n >> 1
		_, below := bits.Sub64(u, f[base+half].first, 0)
		base += half & int(below-1)
		n -= half
	}
	c := 0
	for _, e := range f[base+1 : base+n] {
		_, below := bits.Sub64(u, e.first, 0)
		c += int(below ^ 1)
	}
	return lo + base + c
}

// buildRadix fills radix and shift: radix[k] is the last block whose
// first id is <= firsts[0] + k<<shift, with about one slice of the id
// range per block (4 bytes a block).
func (p *packed) buildRadix() {
	nb := len(p.idx)
	if nb == 0 {
		return
	}
	span := p.idx[nb-1].first - p.idx[0].first
	p.shift = uint8(bits.Len64(span / uint64(nb)))
	slices := int(span>>p.shift) + 1
	p.radix = make([]uint32, slices+1)
	b := 0
	for k := range p.radix {
		start := p.idx[0].first + uint64(k)<<p.shift
		if k > 0 && uint64(k) > span>>p.shift {
			start = math.MaxUint64 // past the last slice (and no overflow)
		}
		for b+1 < nb && p.idx[b+1].first <= start {
			b++
		}
		p.radix[k] = uint32(b)
	}
}

// maxID returns the largest id in p; p must not be empty.
func (p *packed) maxID() uint64 {
	e := p.idx[len(p.idx)-1]
	l := lenOf(e.meta)
	if l == 1 {
		return e.first
	}
	off, idW, cntW := int(e.meta>>offShift), uint(e.meta>>widthBits&widthMask), uint(e.meta&widthMask)
	return e.first + bitpack.Bits(p.data, off+int(cntW)+(l-2)*int(idW+cntW), idW, bitpack.LowMask(idW))
}

// memoryBytes is the size of p's backing arrays.
func (p *packed) memoryBytes() int64 {
	return int64(cap(p.idx)*16 + cap(p.data) + cap(p.radix)*4)
}

// packedIter walks a packed in id order, a block at a time.
type packedIter struct {
	p    *packed
	b    int // next block to decode
	ids  [maxBlockLen]uint64
	vals [maxBlockLen]int64
	i, l int // position in and length of the decoded block
}

func (it *packedIter) init(p *packed) { *it = packedIter{p: p} }

// peek returns the current entry, ok false at the end.
func (it *packedIter) peek() (uint64, int64, bool) {
	if it.i == it.l {
		if it.b == len(it.p.idx) {
			return 0, 0, false
		}
		it.decode()
	}
	return it.ids[it.i], it.vals[it.i], true
}

func (it *packedIter) next() { it.i++ }

func (it *packedIter) decode() {
	p, b := it.p, it.b
	e := p.idx[b]
	off, idW, cntW := int(e.meta>>offShift), uint(e.meta>>widthBits&widthMask), uint(e.meta&widthMask)
	l := lenOf(e.meta)
	idMask, cntMask := bitpack.LowMask(idW), bitpack.LowMask(cntW)
	it.ids[0], it.vals[0] = e.first, int64(bitpack.Bits(p.data, off, cntW, cntMask))
	off += int(cntW)
	for j := 1; j < l; j++ {
		it.ids[j] = e.first + bitpack.Bits(p.data, off, idW, idMask)
		it.vals[j] = int64(bitpack.Bits(p.data, off+int(idW), cntW, cntMask))
		off += int(idW + cntW)
	}
	it.b, it.i, it.l = b+1, 0, l
}

// builder packs entries given in strictly increasing id order.
type builder struct {
	idx    []blockIdx
	w      bitpack.Writer
	bitOff int
	ids    [maxBlockLen]uint64
	vals   [maxBlockLen]uint64
	k, n   int
	// idW and cntW are the widths of the block being filled (ids[:k]).
	idW, cntW int
}

// newBuilder sizes the output for about n entries of about bytesPer
// data bytes each and blocks of about perBlock users, so that the build
// rarely regrows its slices.
func newBuilder(n int, bytesPer, perBlock float64) *builder {
	return &builder{
		idx: make([]blockIdx, 0, int(float64(n)/perBlock)+1),
		w:   bitpack.Writer{Buf: make([]byte, 0, int(float64(n)*bytesPer)+64)},
	}
}

func (bd *builder) add(id uint64, v int64) {
	if k := bd.k; k > 0 {
		idW := bits.Len64(id - bd.ids[0]) // ids ascend: the block's widest
		cntW := max(bd.cntW, bits.Len64(uint64(v)))
		if k == maxBlockLen || k >= minBlockLen && cntW+k*(idW+cntW) > maxBlockBits {
			bd.flushBlock()
		} else {
			bd.idW, bd.cntW = idW, cntW
		}
	}
	if bd.k == 0 {
		bd.idW, bd.cntW = 0, bits.Len64(uint64(v))
	}
	bd.ids[bd.k], bd.vals[bd.k] = id, uint64(v)
	bd.k++
}

func (bd *builder) flushBlock() {
	k, idW, cntW := bd.k, bd.idW, bd.cntW
	if k == 0 {
		return
	}
	first := bd.ids[0]
	bd.idx = append(bd.idx, blockIdx{first, uint64(bd.bitOff)<<offShift | uint64(k-1)<<lenShift | uint64(idW)<<widthBits | uint64(cntW)})
	bd.w.Put(bd.vals[0], cntW)
	for j := 1; j < k; j++ {
		bd.w.Put(bd.ids[j]-first, idW)
		bd.w.Put(bd.vals[j], cntW)
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
	idx := bd.idx
	if cap(idx)-len(idx) > len(idx)/16 {
		idx = append([]blockIdx(nil), idx...)
	}
	p := &packed{idx: idx, data: data, n: bd.n}
	p.buildRadix()
	return p
}
