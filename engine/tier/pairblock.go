package tier

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"math/bits"

	"github.com/tally-dev/tally/engine/bitpack"
	"github.com/tally-dev/tally/engine/counters"
)

// pair is one (post, user) pair of a set with its reaction kind: the
// post by its id in sealed and cold windows, by its offset in its window
// in open tables and deltas. Images keep pairs in (post, user) order, so
// that the likers of one post are together.
type pair struct {
	post, user uint64
	kind       counters.Kind
}

func comparePairs(a, b pair) int {
	if c := cmp.Compare(a.post, b.post); c != 0 {
		return c
	}
	return cmp.Compare(a.user, b.user)
}

// maxBlockPairs bounds the pairs of one block: the decoder's scratch
// arrays are sized by it. blockPairs is how many a block gets when a
// window is written (BenchmarkSetBlockPairs compares sizes): smaller
// blocks pay more index (24 bytes a block) and header, larger ones
// longer scans of the Elias–Fano high bits for no saving.
const (
	maxBlockPairs = 1024
	blockPairs    = 512
)

// # Pair block layout
//
// A block of a set's window holds n pairs of p distinct posts in (post,
// user) order, its first pair in the index. All integers little-endian,
// uvarint encoding/binary's. The block is followed by its CRC32C
// (pairBlockCRC).
//
//	n-1        uvarint
//	p-1        uvarint
//	post top   uint8    post ids vary in mask M = (2^top-1) &^ holes
//	post holes uvarint
//	post lows  uint8    Elias–Fano low bits of the posts
//	post highs uvarint  Elias–Fano high bits of the posts
//	min user   uvarint  the smallest user of the block
//	user top   uint8    users vary from min user in mask U = (2^top-1) &^ holes
//	user holes uvarint
//	user bits  uint8    a user's squeezed value takes this many bits
//	code lows  uint8    Elias–Fano low bits of the pairs' codes
//	code highs uvarint  Elias–Fano high bits of the pairs' codes
//	[kind w    uint8    when the flag is set: the kind column's plan, as a
//	 kind xw   uint8    post block's value column's (postblock.go), over
//	 kind nexc uvarint] the n pairs]
//	area       post lows (p-1) | post highs | code lows (n-1) | code highs |
//	           [kind column], LSB-first, zero-padded to a byte
//
// The flag is post top's high bit (top <= 64). It says that some pair of
// the block has a reaction kind other than like: then the kind column
// holds kind-1 of every pair in block order, at the width its kinds need,
// the few kinds beyond the common one as exceptions — a block of likes
// has no column, and a set of likes or favorites stores no kind at all.
//
// Post j > 0 of the block is pext(post_j, M) - pext(post_0, M) > 0 (pext
// gathers the bits M selects: bits equal in every post of the block,
// such as the never-used high bits of the sequence number, cost
// nothing). Pair j > 0 is code_j - code_0, where a pair's code is i <<
// user bits | (pext(user, U) - pext(min user, U)), i being the index of
// its post in the block (users are squeezed like posts, so that bits
// every user of the block shares cost nothing: a comment id's node and
// sequence bits, where the set holds comment ids as its users): one increasing list for all the block's pairs, so a lookup is
// one Elias–Fano search once the post's index is known, and a block of
// one hot post's likers costs about 2 + log2(gap between likers) bits a
// pair. An Elias–Fano list of m values v_1 < ... < v_m with l low bits
// stores v mod 2^l in the lows and sets bit (v_j >> l) + j - 1 of the
// highs, whose length is that last bit's position plus one.

// pairBlock is a parsed block header: enough to look a pair up with O(1)
// bit reads plus a scan of one Elias–Fano bucket, without decoding the
// block. It holds no memory of its own beyond the slice it was parsed
// from.
type pairBlock struct {
	area         []byte // the bit area, and BlockSlack bytes past it
	firstUser    uint64
	pairs, posts int
	postIDs      squeezedIDs

	minUser   uint64
	userMask  uint64 // the user bits that vary within the block, U
	userBase  uint64 // pext(minUser, U)
	userMax   uint64 // the largest squeezed user: 2^userBits - 1
	userBits  uint
	userHoles bool   // U is not contiguous: pext needs more than a mask
	firstCode uint64 // the first pair's code
	codes     efList // the pairs' codes less the first's
	kinded    bool   // the block has a kind column
	kinds     valueColumn
}

// squeeze returns user's squeezed value in the block, and false for a
// user the block cannot hold (a bit every user shares differs, or it is
// out of range).
func (b *pairBlock) squeeze(user uint64) (uint64, bool) {
	if (user^b.minUser)&^b.userMask != 0 {
		return 0, false
	}
	var s uint64
	if b.userHoles {
		s = bitpack.Pext(user, b.userMask)
	} else {
		s = user & b.userMask // pext of a contiguous low mask
	}
	if s < b.userBase || s-b.userBase > b.userMax {
		return 0, false
	}
	return s - b.userBase, true
}

// unsqueeze is squeeze's inverse.
func (b *pairBlock) unsqueeze(s uint64) uint64 {
	return bitpack.Pdep(s+b.userBase, b.userMask) | b.minUser&^b.userMask
}

// parse reads the header of block body h (its bytes without the CRC,
// cap(h) >= len(h)+BlockSlack) whose first pair is (firstPost,
// firstUser), checking that every region it declares fits the block
// exactly. After a successful parse every lookup stays within h's
// capacity, whatever the regions hold; decode checks the contents.
func (b *pairBlock) parse(firstPost, firstUser uint64, h []byte) error {
	if len(h) == 0 || cap(h)-len(h) < BlockSlack {
		return errBlock
	}
	n1, p := bitpack.Uvarint(h, 0)
	p1, p := bitpack.Uvarint(h, p)
	if p < 0 || n1 >= maxBlockPairs || p1 > n1 || p+2 > len(h) {
		return errBlock
	}
	b.firstUser, b.pairs, b.posts = firstUser, int(n1)+1, int(p1)+1
	b.kinded = h[p]&blockKindsFlag != 0
	top := uint(h[p] &^ blockKindsFlag)
	holes, p := bitpack.Uvarint(h, p+1)
	if p < 0 || p >= len(h) {
		return errBlock
	}
	postLowBits := int(h[p])
	postHighLen, p := bitpack.Uvarint(h, p+1)
	minUser, p := bitpack.Uvarint(h, p)
	if p < 0 || p >= len(h) {
		return errBlock
	}
	userTop := uint(h[p])
	userHoles, p := bitpack.Uvarint(h, p+1)
	if p < 0 || p+2 > len(h) || userTop > 64 {
		return errBlock
	}
	mask := bitpack.LowMask(userTop) &^ userHoles
	if userHoles&^bitpack.LowMask(userTop) != 0 || (userTop > 0 && mask>>(userTop-1) != 1) {
		return errBlock // non-canonical: holes above top, or the top bit a hole
	}
	b.userBits = uint(h[p])
	codeLowBits := int(h[p+1])
	codeHighLen, p := bitpack.Uvarint(h, p+2)
	if p < 0 || b.userBits > uint(bits.OnesCount64(mask)) || b.userBits+uint(bits.Len(uint(b.posts-1))) > 64 {
		return errBlock // a squeezed user or a code would not fit
	}
	var kindExc uint64
	if b.kinded {
		if p+2 > len(h) {
			return errBlock
		}
		b.kinds.w, b.kinds.xw = int(h[p]), int(h[p+1])
		kindExc, p = bitpack.Uvarint(h, p+2)
		if p < 0 || kindExc > uint64(b.pairs) || b.kinds.w+b.kinds.xw > 64 || (kindExc == 0) != (b.kinds.xw == 0) {
			return errBlock
		}
	}
	b.minUser, b.userMask, b.userHoles = minUser, mask, userHoles != 0
	b.userBase = bitpack.Pext(minUser, mask)
	b.userMax = bitpack.LowMask(b.userBits)
	first, ok := b.squeeze(firstUser)
	if !ok {
		return errBlock
	}
	b.firstCode = first
	areaBits := 8 * (len(h) - p)
	off, ok := b.postIDs.set(firstPost, top, holes, b.posts-1, postLowBits, postHighLen, 0, areaBits)
	if ok {
		off, ok = b.codes.set(b.pairs-1, codeLowBits, codeHighLen, off, areaBits)
	}
	if ok && b.kinded {
		c := &b.kinds
		c.nexc = int(kindExc)
		c.iw = positionBits(b.pairs)
		c.imask = bitpack.LowMask(uint(c.iw))
		c.wmask, c.xmask = bitpack.LowMask(uint(c.w)), bitpack.LowMask(uint(c.xw))
		c.vals = off
		c.idx = c.vals + b.pairs*c.w
		c.exc = c.idx + c.nexc*c.iw
		off = c.exc + c.nexc*c.xw
	}
	if !ok || (off+7)/8 != len(h)-p {
		return errBlock
	}
	b.area = h[p : len(h)+BlockSlack]
	return nil
}

// kindOf returns the kind of (post, user), counters.NoKind when the
// block does not hold it.
func (b *pairBlock) kindOf(post, user uint64) counters.Kind {
	s, ok := b.squeeze(user)
	if !ok {
		return counters.NoKind
	}
	i, ok := b.postIDs.find(b.area, post)
	if !ok {
		return counters.NoKind
	}
	code := uint64(i)<<b.userBits | s
	at := 0
	if code < b.firstCode {
		return counters.NoKind
	}
	if code > b.firstCode {
		if at, ok = b.codes.find(b.area, code-b.firstCode); !ok {
			return counters.NoKind
		}
	}
	if !b.kinded {
		return counters.Like
	}
	return counters.Kind(b.kinds.value(b.area, at)) + 1
}

// decode writes the block's pairs to out[:n] and returns n, checking
// everything parse does not: that posts and pairs increase, that each
// post has a pair and each pair a post, that the post mask is canonical,
// and that the kind column is (every kind at most MaxKinds, one of them
// not like, the exceptions canonical). A block that decodes reads back,
// through kindOf, exactly what it decodes to. scratch must hold
// 2*maxBlockPairs values.
func (b *pairBlock) decode(out []pair, scratch []uint64) (int, error) {
	posts := scratch[:b.posts]
	if err := b.postIDs.decode(b.area, posts); err != nil {
		return 0, err
	}
	codes := scratch[b.posts : b.posts+b.pairs-1] // after the posts, which are still needed
	if _, err := b.codes.decode(b.area, b.firstCode, codes); err != nil {
		return 0, err
	}
	out[0] = pair{post: posts[0], user: b.firstUser, kind: counters.Like}
	prev := 0
	lowest, vary := b.firstUser, b.firstUser^b.minUser
	for j, code := range codes {
		i := code >> b.userBits // 0 when userBits is 64
		if i >= uint64(b.posts) || int(i) > prev+1 {
			return 0, errBlock // a pair of no post, or a post with no pair
		}
		prev = int(i)
		s := code & b.userMax
		if b.userBase+s < b.userBase || (b.userBase+s)&^bitpack.LowMask(uint(bits.OnesCount64(b.userMask))) != 0 {
			return 0, errBlock // beyond the varying bits
		}
		u := b.unsqueeze(s)
		lowest, vary = min(lowest, u), vary|(u^b.minUser)
		out[j+1] = pair{post: posts[i], user: u, kind: counters.Like}
	}
	if prev != b.posts-1 {
		return 0, errBlock
	}
	if lowest != b.minUser || vary != b.userMask {
		return 0, errBlock // non-canonical: min user or its mask not the users'
	}
	if b.kinded {
		kinds := scratch[:b.pairs] // the posts and codes are done with
		if err := b.kinds.decode(b.area, kinds); err != nil {
			return 0, err
		}
		var any uint64
		for j, k := range kinds {
			if k >= counters.MaxKinds {
				return 0, errBlock
			}
			any |= k
			out[j].kind = counters.Kind(k) + 1
		}
		if any == 0 {
			return 0, errBlock // a kind column of likes
		}
	}
	return b.pairs, nil
}

// pairEncoder encodes one block from pairs given in (post, user) order.
type pairEncoder struct {
	pending                    [maxBlockPairs]pair
	posts, codes, diffs, kinds [maxBlockPairs]uint64
	n, postCount               int
	minUser, maxUser           uint64 // of the pending pairs
	kinded                     bool   // a pending pair has a kind other than like
	bw                         bitpack.Writer
}

// fits reports whether the pending block may take (post, user) in its
// order: it has room and every code still fits 64 bits.
func (e *pairEncoder) fits(post, user uint64, limit int) bool {
	if e.n == 0 {
		return true
	}
	if e.n >= limit {
		return false
	}
	p := e.postCount
	if post != e.pending[e.n-1].post {
		p++
	}
	return bits.Len64(max(e.maxUser, user)-min(e.minUser, user))+bits.Len(uint(p-1)) <= 64
}

// add appends a pair that fits.
func (e *pairEncoder) add(q pair) {
	if e.n == 0 {
		e.postCount, e.minUser, e.maxUser, e.kinded = 1, q.user, q.user, false
	} else if q.post != e.pending[e.n-1].post {
		e.postCount++
	}
	e.minUser, e.maxUser = min(e.minUser, q.user), max(e.maxUser, q.user)
	e.kinded = e.kinded || q.kind != counters.Like
	e.pending[e.n] = q
	e.n++
}

// encode appends the pending block to dst, returns it with the block's
// first pair, and empties the encoder.
func (e *pairEncoder) encode(dst []byte) ([]byte, pair) {
	ps := e.pending[:e.n]
	first := ps[0]
	posts := e.posts[:0]
	for j, q := range ps {
		if j == 0 || q.post != ps[j-1].post {
			posts = append(posts, q.post)
		}
	}
	idp := planIDs(posts)
	var vary uint64
	for _, q := range ps {
		vary |= q.user ^ e.minUser
	}
	userBase := bitpack.Pext(e.minUser, vary)
	squeeze := func(u uint64) uint64 { return bitpack.Pext(u, vary) - userBase }
	userBits := uint(bits.Len64(squeeze(e.maxUser)))
	top := byte(idp.top)
	if e.kinded {
		top |= blockKindsFlag
	}
	dst = binary.AppendUvarint(dst, uint64(len(ps)-1))
	dst = binary.AppendUvarint(dst, uint64(len(posts)-1))
	dst = append(dst, top)
	dst = binary.AppendUvarint(dst, idp.holes())
	dst = append(dst, byte(idp.lowBits))
	dst = binary.AppendUvarint(dst, uint64(idp.highLen))
	codes := e.codes[:0]
	firstCode := squeeze(first.user)
	i := uint64(0)
	for j := 1; j < len(ps); j++ {
		if ps[j].post != ps[j-1].post {
			i++
		}
		codes = append(codes, (i<<userBits|squeeze(ps[j].user))-firstCode)
	}
	var codeLowBits, codeHighLen int
	if len(codes) > 0 {
		codeLowBits, codeHighLen = efParams(len(codes), codes[len(codes)-1])
	}
	userTop := bits.Len64(vary)
	dst = binary.AppendUvarint(dst, e.minUser)
	dst = append(dst, byte(userTop))
	dst = binary.AppendUvarint(dst, bitpack.LowMask(uint(userTop))&^vary)
	dst = append(dst, byte(userBits), byte(codeLowBits))
	dst = binary.AppendUvarint(dst, uint64(codeHighLen))
	kinds := e.kinds[:0]
	var plan columnPlan
	if e.kinded {
		for _, q := range ps {
			kinds = append(kinds, uint64(q.kind-1))
		}
		plan = planColumn(kinds)
		dst = plan.appendHeader(dst)
	}
	e.bw.Buf = dst
	idp.put(&e.bw, posts, e.diffs[:])
	putEF(&e.bw, codes, codeLowBits)
	if e.kinded {
		plan.put(&e.bw, kinds)
	}
	dst = e.bw.Flush()
	e.bw.Buf = nil
	e.n = 0
	return dst, first
}

// pairBlockCRC is the checksum stored after a pair block's bytes b:
// CRC32C of its first pair (post, user, 8 bytes each, little-endian;
// kept in the index, not the block) and b. The 16 bytes go through the
// table by hand, as in postBlockCRC.
func pairBlockCRC(post, user uint64, b []byte) uint32 {
	crc := ^uint32(0)
	for _, x := range [2]uint64{post, user} {
		for i := range 8 {
			crc = castagnoli[byte(crc)^byte(x>>(8*i))] ^ crc>>8
		}
	}
	return crc32.Update(^crc, castagnoli, b)
}

// checkPairBlock checks a pair block blk — its bytes and CRC, with
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

// A set's searches of a block index, whose entries are a block's first
// pair and its offset (pairEntrySize bytes): a hot post's likers span
// blocks, so a block is found by its first pair, not its first post.
const pairEntrySize = 24

// firstPair returns block i's first pair.
func (x *blockIndex) firstPair(i int) (post, user uint64) {
	e := x.raw[i*pairEntrySize:]
	return le.Uint64(e), le.Uint64(e[8:])
}

// findPair returns the block that would hold (post, user): the last one
// whose first pair is not above it, or -1.
func (x *blockIndex) findPair(post, user uint64) int {
	if x.blocks == 0 || post < x.minID || post > x.maxID {
		return -1
	}
	raw := x.raw
	if p := le.Uint64(raw); post == p && user < le.Uint64(raw[8:]) {
		return -1
	}
	base, n := 0, x.blocks
	for n > 1 {
		half := n >> 1
		e := raw[(base+half)*pairEntrySize:]
		if p := le.Uint64(e); p < post || p == post && le.Uint64(e[8:]) <= user {
			base += half
		}
		n -= half
	}
	return base
}

// findPairFrom is findPair for a pair not below block b's first pair (b
// >= 0): the pairs of a page come in increasing order, and most stay in
// the block of the one before, which one comparison with the next
// block's first pair tells without a search.
func (x *blockIndex) findPairFrom(b int, post, user uint64) int {
	if b+1 == x.blocks {
		return b
	}
	e := x.raw[(b+1)*pairEntrySize:]
	if p := le.Uint64(e); post < p || post == p && user < le.Uint64(e[8:]) {
		return b
	}
	return x.findPair(post, user)
}

// pairWriter encodes a set's window image from pairs (with their kinds)
// given in strictly increasing (post, user) order, streaming blocks to an
// io.Writer.
type pairWriter struct {
	imageWriter
	enc   pairEncoder
	limit int // pairs per block
	last  pair
}

func newPairWriter(w io.Writer, tag [4]byte, limit int) *pairWriter {
	if limit <= 0 || limit > maxBlockPairs {
		limit = blockPairs
	}
	pw := &pairWriter{limit: limit}
	pw.start(w, imageFormat{tag: tag, entrySize: pairEntrySize})
	return pw
}

func (pw *pairWriter) add(q pair) error {
	if pw.err != nil {
		return pw.err
	}
	if pw.records > 0 && comparePairs(q, pw.last) <= 0 {
		pw.err = errOrder
		return pw.err
	}
	pw.last = q
	pw.count(q.post)
	if !pw.enc.fits(q.post, q.user, pw.limit) {
		pw.endBlock()
	}
	pw.enc.add(q)
	return pw.err
}

func (pw *pairWriter) endBlock() {
	if pw.enc.n == 0 {
		return
	}
	start := len(pw.buf)
	var first pair
	pw.buf, first = pw.enc.encode(pw.buf)
	pw.buf = le.AppendUint32(pw.buf, pairBlockCRC(first.post, first.user, pw.buf[start:]))
	pw.index = le.AppendUint64(pw.index, first.post)
	pw.index = le.AppendUint64(pw.index, first.user)
	pw.blockWritten(start)
}

// close writes the rest, the index and the footer.
func (pw *pairWriter) close() error { return pw.finish(pw.endBlock) }
