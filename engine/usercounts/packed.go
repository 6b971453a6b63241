package usercounts

import (
	"math"
	"math/bits"
	"unsafe"
)

// A block of the packed part is one 64-byte cache line, aligned: a
// lookup's search inside it then costs one memory access (a hash table's
// hit costs about one too, its control byte and slot being loaded in
// parallel), where blocks of 64 users at any bit offset spanned two to
// eight lines and a lookup waited on each line in turn (slower than the
// hash table for sparse 64-bit ids; BenchmarkGet compares them). A line holds
// its first id (word 0), a header, the first user's count, then a record
// per other user: id minus the first id, at the line's id width, and
// count, at its count width. The builder fills each line with as many
// users as fit, up to maxBlockLen.
const (
	lineWords   = 8
	lineBits    = 64 * lineWords
	maxBlockLen = 64
	// Header: id width (0..64, 7 bits), count width (0..63, 6 bits) and
	// length - 1 (6 bits).
	hdrBits    = 19
	idWMask    = 127
	cntWShift  = 7
	cntWMask   = 63
	lenShift   = 13
	lenMask    = maxBlockLen - 1
	firstCount = 64 + hdrBits // bit offset of the first user's count
)

// searchCount is the most records the search of a line compares at once.
// Each compare extracts a bit field, so past a handful they cost more than
// the halving steps they replace, even though those wait on each other
// (8 against 16: BenchmarkGetPaired, and badge polls in engine/embedded's
// BenchmarkEnginePage).
const searchCount = 8

// packed is the folded part of a Table: users in increasing id order in
// lines (see lineWords); line b holds the users from firsts[b] up to
// firsts[b+1]. A packed is never modified once built: a fold job reads
// it with no lock while readers share it.
type packed struct {
	firsts []uint64 // each line's first id
	lines  []uint64 // lineWords words a line, the first line 64-byte aligned
	alloc  int      // words allocated for lines (alignment included)
	n      int      // users
	radix  []uint32 // see buildRadix
	shift  uint8
}

var emptyPacked = &packed{}

// lowMask returns a word with the low w <= 64 bits set: a field's mask,
// kept with its width rather than computed per read.
func lowMask(w uint) uint64 {
	if w >= 64 {
		return ^uint64(0)
	}
	return 1<<w - 1
}

// field returns the bits [o, o+w) of line (mask is lowMask(w)), the two
// words it may span both read within the line, so that a lookup touches
// no other line.
func field(line *[lineWords]uint64, o uint, mask uint64) uint64 {
	i, s := o>>6, o&63
	lo := line[i&(lineWords-1)] >> s
	// << 1 << (63-s) is << (64-s) with 0 for s = 0, and no shift by 64.
	hi := line[(i+1)&(lineWords-1)] << 1 << ((63 - s) & 63)
	return (lo | hi) & mask
}

// put sets bits [o, o+w) of line to v (< 2^w), which were 0.
func put(line *[lineWords]uint64, o uint, v uint64, w uint) {
	i, s := o>>6, o&63
	line[i] |= v << s
	if s+w > 64 {
		line[i+1] |= v >> (64 - s)
	}
}

func (p *packed) line(b int) *[lineWords]uint64 {
	return (*[lineWords]uint64)(p.lines[b*lineWords : b*lineWords+lineWords])
}

// header returns a line's id width, count width and length.
func header(line *[lineWords]uint64) (idW, cntW uint, l int) {
	h := line[1]
	return uint(h & idWMask), uint(h >> cntWShift & cntWMask), int(h>>lenShift&lenMask) + 1
}

// get returns u's count and whether u is in p.
func (p *packed) get(u uint64) (int64, bool) {
	b, first := p.block(u)
	return p.search(u, b, first)
}

// search returns u's count and whether u is in line b (whose first id is
// first), the line block found for u; b < 0: in none.
func (p *packed) search(u uint64, b int, first uint64) (int64, bool) {
	if b < 0 {
		return 0, false
	}
	line := p.line(b)
	x := u - first
	idW, cntW, l := header(line)
	cntMask := lowMask(cntW)
	if x == 0 {
		return int64(field(line, firstCount, cntMask)), true
	}
	if idW < 64 && x>>idW != 0 {
		return 0, false // past the line's last id
	}
	// Records 1..l-1 start after the first count, rw bits each: the last
	// whose id is <= u, found branch-free (lookups fall at random places,
	// where a branching search mispredicts about half its steps, as in
	// engine/tier's block index search).
	rw := idW + cntW
	off := firstCount + cntW
	idMask := lowMask(idW)
	// Halving steps wait on each other; the count that ends the search
	// makes independent compares, which the CPU runs side by side.
	base, n := uint(0), uint(l-1)
	for n > searchCount {
		half := n >> 1
		_, below := bits.Sub64(x, field(line, off+(base+half)*rw, idMask), 0)
		base += half & uint(below-1)
		n -= half
	}
	c := uint(0)
	for j := base + 1; j < base+n; j++ {
		_, below := bits.Sub64(x, field(line, off+j*rw, idMask), 0)
		c += uint(below ^ 1)
	}
	base += c
	if n == 0 || field(line, off+base*rw, idMask) != x {
		return 0, false
	}
	return int64(field(line, off+base*rw+idW, cntMask)), true
}

// block returns the line that would hold u and its first id, or -1 when
// u is below every id. The radix array narrows it to the lines that start in u's slice of
// the id range: with about one slice a line, that is one line (whose
// first id is its first word: nothing else to load) or two (adjacent,
// their first words both loaded, side by side, before either is
// compared: a miss on each in turn cost two memory latencies). A slice with more, where ids
// crowd, is searched in firsts, branch-free.
func (p *packed) block(u uint64) (int, uint64) {
	if len(p.firsts) == 0 || u < p.firsts[0] {
		return -1, 0
	}
	k := (u - p.firsts[0]) >> p.shift
	lo, hi := len(p.firsts)-1, len(p.firsts)-1
	if k < uint64(len(p.radix)-1) {
		lo, hi = int(p.radix[k]), int(p.radix[k+1])
	}
	switch hi - lo {
	case 0:
		return lo, p.lines[lo*lineWords]
	case 1:
		f0, f1 := p.lines[lo*lineWords], p.lines[hi*lineWords]
		_, below := bits.Sub64(u, f1, 0)
		return lo + int(below^1), f1 ^ (f0^f1)&-below
	}
	f := p.firsts[lo : hi+1]
	base, n := 0, len(f)
	for n > 4 {
		half := n >> 1
		_, below := bits.Sub64(u, f[base+half], 0)
		base += half & int(below-1)
		n -= half
	}
	c := 0
	for _, first := range f[base+1 : base+n] {
		_, below := bits.Sub64(u, first, 0)
		c += int(below ^ 1)
	}
	return lo + base + c, f[base+c]
}

// buildRadix fills radix and shift: radix[k] is the last line whose
// first id is <= firsts[0] + k<<shift, with one to two slices of the id
// range a line (4 to 8 bytes a line): fewer sent a third of the lookups
// of sparse ids to the search of firsts.
func (p *packed) buildRadix() {
	nb := len(p.firsts)
	if nb == 0 {
		return
	}
	span := p.firsts[nb-1] - p.firsts[0]
	p.shift = uint8(max(0, bits.Len64(span/uint64(nb))-1))
	last := span >> p.shift
	p.radix = make([]uint32, last+2)
	b := 0
	for k := range p.radix {
		start := p.firsts[0] + uint64(k)<<p.shift
		if uint64(k) > last {
			start = math.MaxUint64 // past the last slice (and no overflow)
		}
		for b+1 < nb && p.firsts[b+1] <= start {
			b++
		}
		p.radix[k] = uint32(b)
	}
}

// maxID returns the largest id in p; p must not be empty.
func (p *packed) maxID() uint64 {
	b := len(p.firsts) - 1
	line := p.line(b)
	idW, cntW, l := header(line)
	if l == 1 {
		return p.firsts[b]
	}
	return p.firsts[b] + field(line, firstCount+cntW+uint(l-2)*(idW+cntW), lowMask(idW))
}

// memoryBytes is the size of p's backing arrays.
func (p *packed) memoryBytes() int64 {
	return int64(cap(p.firsts)*8 + p.alloc*8 + cap(p.radix)*4)
}

// packedIter walks a packed in id order, a line at a time.
type packedIter struct {
	p    *packed
	b    int // next line to decode
	ids  [maxBlockLen]uint64
	vals [maxBlockLen]int64
	i, l int // position in and length of the decoded line
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
	b := it.b
	line := it.p.line(b)
	idW, cntW, l := header(line)
	idMask, cntMask := lowMask(idW), lowMask(cntW)
	first := it.p.firsts[b]
	it.ids[0], it.vals[0] = first, int64(field(line, firstCount, cntMask))
	off := firstCount + cntW
	for j := 1; j < l; j++ {
		it.ids[j] = first + field(line, off, idMask)
		it.vals[j] = int64(field(line, off+idW, cntMask))
		off += idW + cntW
	}
	it.b, it.i, it.l = b+1, 0, l
}

// builder packs entries given in strictly increasing id order.
type builder struct {
	firsts []uint64
	lines  []uint64
	ids    [maxBlockLen]uint64
	vals   [maxBlockLen]uint64
	k, n   int
	// idW and cntW are the widths of the line being filled (ids[:k]).
	idW, cntW int
}

// newBuilder sizes the output for about n entries at about perLine users
// a line, so that the build rarely regrows its slices.
func newBuilder(n int, perLine float64) *builder {
	lines := int(float64(n)/perLine) + 1
	return &builder{
		firsts: make([]uint64, 0, lines),
		lines:  make([]uint64, 0, lines*lineWords),
	}
}

func (bd *builder) add(id uint64, v int64) {
	if k := bd.k; k > 0 {
		idW := bits.Len64(id - bd.ids[0]) // ids ascend: the line's widest
		cntW := max(bd.cntW, bits.Len64(uint64(v)))
		if k == maxBlockLen || firstCount+cntW+k*(idW+cntW) > lineBits {
			bd.flushLine()
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

func (bd *builder) flushLine() {
	k, idW, cntW := bd.k, uint(bd.idW), uint(bd.cntW)
	if k == 0 {
		return
	}
	first := bd.ids[0]
	bd.firsts = append(bd.firsts, first)
	var line [lineWords]uint64
	line[0] = first
	line[1] = uint64(idW) | uint64(cntW)<<cntWShift | uint64(k-1)<<lenShift
	put(&line, firstCount, bd.vals[0], cntW)
	off := firstCount + cntW
	for j := 1; j < k; j++ {
		put(&line, off, bd.ids[j]-first, idW)
		put(&line, off+idW, bd.vals[j], cntW)
		off += idW + cntW
	}
	bd.lines = append(bd.lines, line[:]...)
	bd.n += k
	bd.k = 0
}

// finish returns the packed entries in slices sized to what they hold
// (MemoryBytes counts capacity), the lines copied to 64-byte alignment.
func (bd *builder) finish() *packed {
	bd.flushLine()
	if bd.n == 0 {
		return emptyPacked
	}
	// Go's heap never moves objects: an offset found now stays right.
	alloc := len(bd.lines) + lineWords - 1
	buf := make([]uint64, alloc)
	skip := int(-uintptr(unsafe.Pointer(unsafe.SliceData(buf))) & 63 / 8)
	lines := buf[skip : skip+len(bd.lines) : skip+len(bd.lines)]
	copy(lines, bd.lines)
	firsts := bd.firsts
	if cap(firsts)-len(firsts) > len(firsts)/16 {
		firsts = append([]uint64(nil), firsts...)
	}
	p := &packed{firsts: firsts, lines: lines, alloc: alloc, n: bd.n}
	p.buildRadix()
	return p
}
