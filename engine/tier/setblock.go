package tier

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
	"math/bits"

	"github.com/tally-dev/tally/engine/bitpack"
)

// pk is one pair of a window: the post's key (its id in sealed and cold
// windows, its id minus the window's first id in open tables and deltas)
// and the user. Sealed windows keep pairs in (k, u) order, so
// the likers of one post are together.
type pk struct{ k, u uint64 }

func cmpPK(a, b pk) int {
	if c := cmp.Compare(a.k, b.k); c != 0 {
		return c
	}
	return cmp.Compare(a.u, b.u)
}

// maxBlockPairs bounds the pairs of one block: the decoder's scratch arrays
// are sized by it. blockPairs is how many a block gets;
// BenchmarkSetBlockPairs compares sizes (1M posts, sealed bytes a like
// and a page's time: 128 pairs 2.01 and 3.9-4.1 µs, 256 1.88 and 4.0-4.3,
// 512 1.83 and 4.5-6.5, 1024 1.83 and 6.0-7.0): smaller blocks pay more
// index (24 bytes a block) and header, larger ones longer scans of the
// Elias–Fano highs for no saving. 512 keeps the memory of likeset's
// blocks; 256 would buy faster pages for 3% more.
const (
	maxBlockPairs = 1024
	blockPairs    = 512
)

// # Pair block layout
//
// A block of a set window holds n pairs (k, u) of p distinct posts, in
// (k, u) order, k being the post id. Its first pair (k0, u0) is not in
// the block but in the window's index. All integers are little-endian;
// uvarint is encoding/binary's. The block is followed by its CRC32C
// (pairBlockCRC).
//
//	n-1     uvarint
//	p-1     uvarint
//	ktop    uint8    post keys vary in mask M = (2^ktop-1) &^ kholes
//	kholes  uvarint
//	kl      uint8    Elias–Fano low bits of the post keys
//	khi     uvarint  Elias–Fano high bits of the post keys
//	umin    uvarint  the smallest user of the block
//	ub      uint8    user - umin takes ub bits
//	xl      uint8    Elias–Fano low bits of the pairs
//	xhi     uvarint  Elias–Fano high bits of the pairs
//	area    klows (p-1)×kl | khighs khi | xlows (n-1)×xl | xhighs xhi,
//	        LSB-first, zero-padded to a byte
//
// Post j > 0 of the block is e_j = bitpack.Pext(k_j, M) - bitpack.Pext(k0, M) > 0 (pext
// gathers the bits M selects: bits that are equal in every key of the
// block, such as the never-used high bits of the sequence number, cost
// nothing). Pair j > 0 is d_j = x_j - x_0 with x = i<<ub | (u - umin),
// i being the index of the pair's post in the block: one increasing list
// for all the block's pairs, so a lookup is one Elias–Fano search once
// the post's index is known, and a block of one hot post's likers costs
// about 2 + log2(gap between likers) bits a pair. An Elias–Fano list of
// m values v_1 < ... < v_m with l low bits stores v mod 2^l in the lows
// and sets bit (v_j >> l) + j - 1 of the highs; hiLen is that last bit's
// position plus one.

// pairBlock is a parsed block header: enough to look a pair up with O(1) bit
// reads plus a scan of one Elias–Fano bucket, without decoding the block.
// It holds no memory of its own beyond the slice it was parsed from.
type pairBlock struct {
	area   []byte
	k0, u0 uint64
	n, p   int

	kmask, ksq0 uint64
	kl, khi     int
	klow, khigh int // bit offsets into area

	umin, umax uint64 // umax = umin + 2^ub - 1
	ub         uint
	x0         uint64
	xl, xhi    int
	xlow, xhig int
}

// parse reads the header of block body h (its bytes without the CRC,
// cap(h) >= len(h)+BlockSlack) whose first pair is (k0, u0), checking
// that every region it declares fits the block exactly. After a
// successful parse every lookup stays within h's capacity, whatever the
// regions hold; decode checks the contents.
func (b *pairBlock) parse(k0, u0 uint64, h []byte) error {
	if len(h) == 0 || cap(h)-len(h) < BlockSlack {
		return errBlock
	}
	n1, p := bitpack.Uvarint(h, 0)
	p1, p := bitpack.Uvarint(h, p)
	if p < 0 || n1 >= maxBlockPairs || p1 > n1 || p+2 > len(h) {
		return errBlock
	}
	b.k0, b.u0, b.n, b.p = k0, u0, int(n1)+1, int(p1)+1
	ktop := uint(h[p])
	kholes, p := bitpack.Uvarint(h, p+1)
	if p < 0 || p >= len(h) || ktop > 64 {
		return errBlock
	}
	b.kmask = bitpack.LowMask(ktop) &^ kholes
	if kholes&^bitpack.LowMask(ktop) != 0 || (ktop > 0 && b.kmask>>(ktop-1) != 1) {
		return errBlock // non-canonical: holes above the top, or the top bit a hole
	}
	b.ksq0 = bitpack.Pext(k0, b.kmask)
	b.kl = int(h[p])
	khi, p := bitpack.Uvarint(h, p+1)
	umin, p := bitpack.Uvarint(h, p)
	if p < 0 || p+2 > len(h) {
		return errBlock
	}
	b.ub = uint(h[p])
	b.xl = int(h[p+1])
	xhi, p := bitpack.Uvarint(h, p+2)
	if p < 0 || b.kl > 63 || b.xl > 63 || b.ub > 64 || khi > 8*uint64(len(h)) || xhi > 8*uint64(len(h)) {
		return errBlock
	}
	if b.ub+uint(bits.Len(uint(b.p-1))) > 64 {
		return errBlock // x = i<<ub | (u-umin) would not fit 64 bits
	}
	b.umin = umin
	if u0 < umin || u0-umin > bitpack.LowMask(b.ub) {
		return errBlock
	}
	// umax saturates: a block may span users 5 to 2^64-1 with ub = 64.
	b.umax = umin + bitpack.LowMask(b.ub)
	if b.umax < umin {
		b.umax = math.MaxUint64
	}
	b.x0 = u0 - umin
	b.khi, b.xhi = int(khi), int(xhi)
	if (b.p == 1) != (b.khi == 0) || b.khi < b.p-1 || (b.n == 1) != (b.xhi == 0) || b.xhi < b.n-1 {
		return errBlock
	}
	b.klow = 0
	b.khigh = b.klow + (b.p-1)*b.kl
	b.xlow = b.khigh + b.khi
	b.xhig = b.xlow + (b.n-1)*b.xl
	total := b.xhig + b.xhi
	if (total+7)/8 != len(h)-p {
		return errBlock
	}
	b.area = h[p : len(h)+BlockSlack]
	return nil
}

// efFind returns the position (1-based: 0 is the list's implicit first
// element) of v > 0 in the Elias–Fano list of m values whose lows start
// at bit low and highs at bit hi (hiLen bits), with l low bits.
func (b *pairBlock) efFind(v uint64, m, low, hi, hiLen, l int) (int, bool) {
	h := v >> uint(l)
	lo := v & bitpack.LowMask(uint(l))
	pos := 0
	if h > 0 {
		if h > uint64(hiLen) {
			return 0, false
		}
		pos = b.selectZero(hi, hiLen, int(h))
		if pos < 0 {
			return 0, false
		}
		pos++
	}
	// Values of bucket h are the ones set right after its h-th zero; the
	// value at bit pos is element pos-h.
	for j := pos - int(h); j < m && pos < hiLen && bitpack.Get(b.area, hi+pos, 1) == 1; j, pos = j+1, pos+1 {
		x := bitpack.Get(b.area, low+j*l, l)
		if x == lo {
			return j + 1, true
		}
		if x > lo {
			break
		}
	}
	return 0, false
}

// selectZero returns the position within the hiLen bits at hi of the r-th
// zero bit (r >= 1), or -1 if there are fewer.
func (b *pairBlock) selectZero(hi, hiLen, r int) int {
	for p := 0; p < hiLen; p += 64 {
		w := min(64, hiLen-p)
		z := ^bitpack.Get(b.area, hi+p, w) & bitpack.LowMask(uint(w))
		c := bits.OnesCount64(z)
		if r <= c {
			return p + bitpack.Select64(z, r-1)
		}
		r -= c
	}
	return -1
}

// post returns the index within the block of post key k.
func (b *pairBlock) post(k uint64) (int, bool) {
	if (k^b.k0)&^b.kmask != 0 {
		return 0, false // a bit that is constant in the block differs
	}
	s := bitpack.Pext(k, b.kmask)
	if s < b.ksq0 {
		return 0, false
	}
	if s == b.ksq0 {
		return 0, true
	}
	return b.efFind(s-b.ksq0, b.p-1, b.klow, b.khigh, b.khi, b.kl)
}

// has reports whether the block holds (k, u).
func (b *pairBlock) has(k, u uint64) bool {
	if u < b.umin || u > b.umax {
		return false
	}
	i, ok := b.post(k)
	if !ok {
		return false
	}
	return b.hasAt(i, u)
}

// hasAt reports whether the block holds user u for its i-th post.
func (b *pairBlock) hasAt(i int, u uint64) bool {
	if u < b.umin || u > b.umax {
		return false
	}
	x := uint64(i)<<b.ub | (u - b.umin)
	if x < b.x0 {
		return false
	}
	if x == b.x0 {
		return true
	}
	_, ok := b.efFind(x-b.x0, b.n-1, b.xlow, b.xhig, b.xhi, b.xl)
	return ok
}

// efDecode writes the m values of an Elias–Fano list to out[:m], checking
// that they increase and that the highs are canonical (exactly m set bits,
// the last one at hiLen-1).
func (b *pairBlock) efDecode(out []uint64, m, low, hi, hiLen, l int) error {
	j := 0
	var prev uint64
	for p := 0; p < hiLen; p += 64 {
		w := min(64, hiLen-p)
		word := bitpack.Get(b.area, hi+p, w)
		for word != 0 {
			t := bits.TrailingZeros64(word)
			word &= word - 1
			if j >= m {
				return errBlock
			}
			h := uint64(p + t - j)
			if l > 0 && h>>(64-uint(l)) != 0 {
				return errBlock
			}
			v := h<<uint(l) | bitpack.Get(b.area, low+j*l, l)
			if v <= prev {
				return errBlock // values are > 0 and strictly increasing
			}
			out[j] = v
			prev = v
			j++
		}
	}
	if j != m || (m > 0 && bitpack.Get(b.area, hi+hiLen-1, 1) != 1) {
		return errBlock
	}
	return nil
}

// decode writes the block's pairs to out[:n] and returns n, checking
// everything parse does not: that keys and pairs increase, that each post has a
// pair and each pair a post, and that the key mask is canonical. A block
// that decodes reads back, through has, exactly what it decodes to.
// scratch must hold 2*maxBlockPairs values.
func (b *pairBlock) decode(out []pk, scratch []uint64) (int, error) {
	keys := scratch[:b.p]
	keys[0] = b.k0
	if err := b.efDecode(keys[1:], b.p-1, b.klow, b.khigh, b.khi, b.kl); err != nil {
		return 0, err
	}
	width := uint(bits.OnesCount64(b.kmask))
	var vary uint64
	for j := 1; j < b.p; j++ {
		s := b.ksq0 + keys[j]
		if s < b.ksq0 || (width < 64 && s>>width != 0) {
			return 0, errBlock // the key would not fit the varying bits
		}
		keys[j] = bitpack.Pdep(s, b.kmask) | b.k0&^b.kmask
		if keys[j] <= keys[j-1] {
			return 0, errBlock
		}
		vary |= keys[j] ^ b.k0
	}
	if vary != b.kmask {
		return 0, errBlock // non-canonical: declared varying bits that do not vary
	}
	xs := scratch[b.p : b.p+b.n-1] // after the keys, which are still needed
	if b.n > 1 {
		if err := b.efDecode(xs, b.n-1, b.xlow, b.xhig, b.xhi, b.xl); err != nil {
			return 0, err
		}
	}
	out[0] = pk{k: b.k0, u: b.u0}
	prev := 0
	for j, d := range xs {
		x := b.x0 + d
		if x < b.x0 {
			return 0, errBlock
		}
		i := x >> b.ub // 0 when ub = 64
		if i >= uint64(b.p) || int(i) > prev+1 {
			return 0, errBlock // a pair of no post, or a post with no pair
		}
		prev = int(i)
		u := b.umin + x&bitpack.LowMask(b.ub)
		if u < b.umin {
			return 0, errBlock // the user would pass 2^64-1
		}
		out[j+1] = pk{k: keys[i], u: u}
	}
	if prev != b.p-1 {
		return 0, errBlock
	}
	return b.n, nil
}

// pairEncoder encodes one block from pairs given in (k, u) order.
type pairEncoder struct {
	pairs      [maxBlockPairs]pk
	keys, xs   [maxBlockPairs]uint64
	n, p       int    // pairs, posts
	umin, umax uint64 // of the pending pairs
	bw         bitpack.Writer
}

// fits reports whether the pending block may take pair (k, u) in its
// (k, u) order: it has room and x = i<<ub | (u-umin) still fits 64 bits.
func (e *pairEncoder) fits(k, u uint64, limit int) bool {
	if e.n == 0 {
		return true
	}
	if e.n >= limit {
		return false
	}
	p := e.p
	if k != e.pairs[e.n-1].k {
		p++
	}
	return bits.Len64(max(e.umax, u)-min(e.umin, u))+bits.Len(uint(p-1)) <= 64
}

// add appends a pair that fits.
func (e *pairEncoder) add(k, u uint64) {
	if e.n == 0 {
		e.p, e.umin, e.umax = 1, u, u
	} else if k != e.pairs[e.n-1].k {
		e.p++
	}
	e.umin, e.umax = min(e.umin, u), max(e.umax, u)
	e.pairs[e.n] = pk{k: k, u: u}
	e.n++
}

// efParams returns the low width and high length of an Elias–Fano list of
// m values whose largest is maxV.
func efParams(m int, maxV uint64) (l, hiLen int) {
	if m == 0 {
		return 0, 0
	}
	if q := maxV / uint64(m); q >= 1 {
		l = bits.Len64(q) - 1
	}
	return l, int(maxV>>uint(l)) + m
}

func (e *pairEncoder) efPut(vals []uint64, l int) {
	for _, v := range vals {
		e.bw.Put(v, l)
	}
	var prev uint64
	for _, v := range vals {
		h := v >> uint(l)
		e.bw.Zeros(int(h - prev))
		e.bw.Put(1, 1)
		prev = h
	}
}

// encode appends the pending block to dst, returns it with the block's
// first pair, and empties the encoder.
func (e *pairEncoder) encode(dst []byte) ([]byte, pk) {
	pairs := e.pairs[:e.n]
	first := pairs[0]
	// Post keys.
	keys := e.keys[:0]
	var vary uint64
	umin, umax := e.umin, e.umax
	for j, q := range pairs {
		if j == 0 || q.k != pairs[j-1].k {
			keys = append(keys, q.k)
			vary |= q.k ^ first.k
		}
	}
	p := len(keys)
	ktop := uint(bits.Len64(vary))
	sq0 := bitpack.Pext(first.k, vary)
	for j := 1; j < p; j++ {
		keys[j-1] = bitpack.Pext(keys[j], vary) - sq0
	}
	keys = keys[:p-1]
	var kl, khi int
	if p > 1 {
		kl, khi = efParams(p-1, keys[p-2])
	}
	ub := uint(bits.Len64(umax - umin))
	dst = binary.AppendUvarint(dst, uint64(len(pairs)-1))
	dst = binary.AppendUvarint(dst, uint64(p-1))
	dst = append(dst, byte(ktop))
	dst = binary.AppendUvarint(dst, bitpack.LowMask(ktop)&^vary)
	dst = append(dst, byte(kl))
	dst = binary.AppendUvarint(dst, uint64(khi))
	e.bw.Buf = dst
	xs := e.xs[:0]
	x0 := first.u - umin
	i := uint64(0)
	for j := 1; j < len(pairs); j++ {
		if pairs[j].k != pairs[j-1].k {
			i++
		}
		xs = append(xs, (i<<ub|(pairs[j].u-umin))-x0)
	}
	var xl, xhi int
	if len(xs) > 0 {
		xl, xhi = efParams(len(xs), xs[len(xs)-1])
	}
	e.bw.Buf = binary.AppendUvarint(e.bw.Buf, umin)
	e.bw.Buf = append(e.bw.Buf, byte(ub), byte(xl))
	e.bw.Buf = binary.AppendUvarint(e.bw.Buf, uint64(xhi))
	e.efPut(keys, kl)
	e.efPut(xs, xl)
	dst = e.bw.Flush()
	e.bw.Buf = nil
	e.n = 0
	return dst, first
}

// pairBlockCRC is the checksum stored after a set block's bytes b: CRC32C
// of its first pair (post, user, 8 bytes each, little-endian; kept in the
// index, not the block) and b, so that a block read at the wrong index
// entry fails it as damage does. The 16 bytes go through the table by
// hand, as in sealed.BlockCRC: a local array passed to crc32 escapes.
func pairBlockCRC(post, user uint64, b []byte) uint32 {
	crc := ^uint32(0)
	for _, x := range [2]uint64{post, user} {
		for i := range 8 {
			crc = castagnoli[byte(crc)^byte(x>>(8*i))] ^ crc>>8
		}
	}
	return crc32.Update(^crc, castagnoli, b)
}

// checkPairBlock checks a set block blk — its bytes and CRC, with
// cap(blk) >= len(blk)+BlockSlack-4 — whose first pair is (post, user):
// the checksum, then the header, which is enough to read it safely.
func checkPairBlock(post, user uint64, blk []byte) error {
	if len(blk) < 5 {
		return fmt.Errorf("block of %d bytes: %w", len(blk), errBlock)
	}
	body := blk[:len(blk)-4]
	if got, want := pairBlockCRC(post, user, body), le.Uint32(blk[len(blk)-4:]); got != want {
		return fmt.Errorf("block checksum mismatch (computed %08x, stored %08x)", got, want)
	}
	var k pairBlock
	return k.parse(post, user, body)
}
