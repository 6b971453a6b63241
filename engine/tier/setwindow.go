package tier

import (
	"bytes"
	"hash/crc32"
	"io"
	"runtime"
	"unsafe"

	"github.com/tally-dev/tally/engine/cold"
	"github.com/tally-dev/tally/engine/sealed"
)

// The window image of a set: the bytes of a sealed set window, the same
// in memory, in a snapshot and in a cold file. It is the post table's
// framing (header, blocks each with a CRC32C, index, footer; window.go)
// with a set's index entries and block format.
//
//	window  = header block* index footer
//	header  = "TLYTIER1" | set tag [4] | 0 uint8 (no columns) | version uint8 (1) | 0 uint8 | 0 uint8
//	index   = (first post uint64 | first user uint64 | block offset uint64)*   one per block, in pair order
//	footer  = index offset uint64 | blocks uint64 | pairs uint64 | min post uint64 |
//	          max post uint64 | CRC32C(index) uint32 | version uint32 (1) | 0 uint32 |
//	          CRC32C of the 52 bytes before it uint32
//	block   = pair block (setblock.go) | CRC32C(first post ‖ first user ‖ block bytes) uint32
//
// A block holds 1..1024 pairs (512 when written) in (post, user) order;
// the post keys of its blocks are the posts' ids. The index entry is 24
// bytes, not the post table's 16: a hot post's likers span several
// blocks, so a block is found by its first pair, not its first id. The
// footer is the post table's, engine/sealed's layout: written by
// sealed.Footer.AppendTo and checked by sealed.ParseFooterOf, its record
// count the pairs and its min and max ids the posts.

// setShape is a set window's shape in the header: no columns.
var setShape = shape{}

const pairEntrySize = 24

// parseSetFooter decodes and checks the footer b of a set window of size
// bytes: sealed's footer, whose Posts count the window's pairs and whose
// MinID and MaxID are its first and last posts.
func parseSetFooter(b []byte, size int64) (sealed.Footer, error) {
	return parseFooterOf(b, size, pairEntrySize, maxBlockPairs)
}

// pairIndex is a set window's block index, kept in its encoded form and
// searched in place: 24 bytes a block, all a cold set window keeps in
// memory.
type pairIndex struct {
	raw              []byte
	blocks, pairs    int
	minPost, maxPost uint64
	end              uint64 // end of the last block: the index offset
}

// newPairIndex checks the index bytes raw against footer f: its checksum,
// block offsets that increase, first pairs that increase within the
// footer's posts. The result aliases raw.
func newPairIndex(f sealed.Footer, raw []byte) (pairIndex, error) {
	var x pairIndex
	if uint64(len(raw)) != f.Blocks*pairEntrySize {
		return x, corruptAt("", int64(f.IndexOffset), "index is %d bytes, footer says %d blocks", len(raw), f.Blocks)
	}
	if got := crc32.Checksum(raw, castagnoli); got != f.IndexCRC {
		return x, corruptAt("", int64(f.IndexOffset), "index checksum mismatch (computed %08x, stored %08x)", got, f.IndexCRC)
	}
	x = pairIndex{raw: raw, blocks: int(f.Blocks), pairs: int(f.Posts), minPost: f.MinID, maxPost: f.MaxID, end: f.IndexOffset}
	var pp, pu, poff uint64
	for i := range x.blocks {
		post, user, off := x.entry(i)
		at := int64(f.IndexOffset) + int64(i)*pairEntrySize
		switch {
		case i == 0 && (off != headerSize || post != f.MinID):
			return x, corruptAt("", at, "first block at %d with post %d, want %d and %d", off, post, headerSize, f.MinID)
		case i > 0 && off <= poff+4:
			return x, corruptAt("", at, "block %d at offset %d, previous at %d", i, off, poff)
		case i > 0 && (post < pp || post == pp && user <= pu):
			return x, corruptAt("", at, "block %d's first pair not above block %d's", i, i-1)
		case post > f.MaxID:
			return x, corruptAt("", at, "block %d first post %d above the max post %d", i, post, f.MaxID)
		}
		pp, pu, poff = post, user, off
	}
	if x.blocks > 0 && x.end <= poff+4 {
		return x, corruptAt("", int64(f.IndexOffset), "last block ends before it starts")
	}
	return x, nil
}

func (x *pairIndex) entry(i int) (post, user, off uint64) {
	e := x.raw[i*pairEntrySize : i*pairEntrySize+pairEntrySize]
	return le.Uint64(e), le.Uint64(e[8:]), le.Uint64(e[16:])
}

// block returns block i's first pair and the byte range [off, end) it
// occupies in the window, CRC included.
func (x *pairIndex) block(i int) (post, user, off, end uint64) {
	post, user, off = x.entry(i)
	end = x.end
	if i+1 < x.blocks {
		end = le.Uint64(x.raw[(i+1)*pairEntrySize+16:])
	}
	return post, user, off, end
}

// find returns the block that would hold (post, user): the last one whose
// first pair is not above it, or -1.
func (x *pairIndex) find(post, user uint64) int {
	if x.blocks == 0 || post < x.minPost || post > x.maxPost {
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

// findFrom is find for a pair not below block b's first pair (b >= 0):
// the pairs of a page come in increasing order, and most stay in the
// block of the one before, which one comparison with the next block's
// first pair tells without a search.
func (x *pairIndex) findFrom(b int, post, user uint64) int {
	if b+1 == x.blocks {
		return b
	}
	e := x.raw[(b+1)*pairEntrySize:]
	if p := le.Uint64(e); post < p || post == p && user < le.Uint64(e[8:]) {
		return b
	}
	return x.find(post, user)
}

// pairWriter encodes a set window from pairs given in strictly increasing
// (post, user) order, streaming blocks to an io.Writer: memory stays at
// one block plus 24 bytes of index per block.
type pairWriter struct {
	imageSink
	enc   pairEncoder
	limit int // pairs per block
	n     uint64
	minP  uint64
	last  pk
	any   bool
}

func newPairWriter(w io.Writer, tag [4]byte, limit int) *pairWriter {
	if limit <= 0 || limit > maxBlockPairs {
		limit = blockPairs
	}
	pw := &pairWriter{limit: limit}
	pw.start(w, tag, setShape)
	return pw
}

func (pw *pairWriter) add(post, user uint64) error {
	if pw.err != nil {
		return pw.err
	}
	if pw.any && cmpPK(pk{post, user}, pw.last) <= 0 {
		pw.err = errOrder
		return pw.err
	}
	if !pw.any {
		pw.minP, pw.any = post, true
	}
	pw.last = pk{post, user}
	if !pw.enc.fits(post, user, pw.limit) {
		pw.finishBlock()
	}
	pw.enc.add(post, user)
	pw.n++
	return pw.err
}

func (pw *pairWriter) finishBlock() {
	if pw.enc.n == 0 {
		return
	}
	start := len(pw.buf)
	var first pk
	pw.buf, first = pw.enc.encode(pw.buf)
	pw.buf = le.AppendUint32(pw.buf, pairBlockCRC(first.k, first.u, pw.buf[start:]))
	pw.index = le.AppendUint64(pw.index, first.k)
	pw.index = le.AppendUint64(pw.index, first.u)
	pw.index = le.AppendUint64(pw.index, pw.off)
	pw.wrote(start)
}

// close writes the rest, the index and the footer.
func (pw *pairWriter) close() error {
	return pw.finish(pw.finishBlock, func(buf []byte) []byte {
		f := sealed.Footer{IndexOffset: pw.off, Blocks: uint64(len(pw.index) / pairEntrySize), Posts: pw.n, IndexCRC: crc32.Checksum(pw.index, castagnoli)}
		if pw.any {
			f.MinID, f.MaxID = pw.minP, pw.last.k
		}
		return f.AppendTo(append(buf, pw.index...), windowVersion)
	})
}

// parsePairWindow checks a set window image's header and footer and
// parses its index; the index aliases data.
func parsePairWindow(data []byte, tag [4]byte) (pairIndex, error) {
	if err := checkWindowHeader(data, tag, setShape); err != nil {
		return pairIndex{}, err
	}
	size := int64(len(data))
	if size < headerSize+footerSize {
		return pairIndex{}, corruptAt("", 0, "%d bytes is too short for a window", size)
	}
	f, err := parseSetFooter(data[size-footerSize:], size)
	if err != nil {
		return pairIndex{}, err
	}
	return newPairIndex(f, data[f.IndexOffset:size-footerSize])
}

// pairSegment is a sealed set window in memory: its image in the set's
// arena and the index parsed over it. Immutable, safe for concurrent use.
type pairSegment struct {
	data      []byte
	idx       pairIndex
	chunk     *chunk
	installed bool // a window's body: the arena may move it
}

func (s *pairSegment) regionBytes() []byte { return s.data }
func (s *pairSegment) setChunk(c *chunk)   { s.chunk = c }

// rebind points the segment at data, a copy of its bytes (arena.trim).
func (s *pairSegment) rebind(data []byte) {
	idx, err := parsePairWindow(data, [4]byte(data[8:12]))
	if err != nil {
		panic("tier: a set window's bytes changed in the arena: " + err.Error())
	}
	s.data, s.idx = data, idx
}

// newPairSegment copies raw into a region of a and checks it as a set
// window of tag — header, footer, index and (verify) every block — and
// returns it; on failure the region is freed.
func newPairSegment(a *arena, raw []byte, tag [4]byte, verify bool) (*pairSegment, error) {
	data, c := a.alloc(len(raw))
	copy(data, raw)
	idx, err := parsePairWindow(data, tag)
	if err == nil && verify {
		err = verifyPairBlocks(&idx, "", func(b int) ([]byte, error) {
			_, _, off, end := idx.block(b)
			return data[off:end], nil
		})
	}
	if err != nil {
		a.abandon(c, data)
		return nil, err
	}
	s := &pairSegment{data: data, idx: idx, chunk: c}
	a.attach(c, s)
	return s, nil
}

// buildPairSegment encodes the pairs each passes to add into an in-memory
// set window allocated from a.
func buildPairSegment(a *arena, tag [4]byte, limit int, each func(add func(post, user uint64) error) error) (*pairSegment, error) {
	var buf bytes.Buffer
	pw := newPairWriter(&buf, tag, limit)
	if err := each(pw.add); err != nil {
		return nil, err
	}
	if err := pw.close(); err != nil {
		return nil, err
	}
	return newPairSegment(a, buf.Bytes(), tag, false)
}

func (s *pairSegment) release(a *arena) {
	if s != nil && s.chunk != nil {
		a.free(s.chunk, s)
		s.chunk = nil
	}
}

// blockBody returns block b's first pair and its bytes without the CRC
// (followed in data by the CRC and at least the footer: BlockSlack).
func (s *pairSegment) blockBody(b int) (post, user uint64, body []byte) {
	post, user, off, end := s.idx.block(b)
	return post, user, s.data[off : end-4]
}

// has reports whether the segment holds (post, user).
func (s *pairSegment) has(post, user uint64) bool {
	b := s.idx.find(post, user)
	if b < 0 {
		return false
	}
	var k pairBlock
	if k.parse(s.blockBody(b)) != nil {
		return false // checked when built or loaded
	}
	return k.has(post, user)
}

func (s *pairSegment) sizeBytes() int { return cap(s.data) }

// pairCold is a set window in a file: only its index is in memory (24
// bytes a block), blocks are read through the shared block cache.
type pairCold struct {
	coldBase
	idx pairIndex
}

// openPairCold opens the set window file dir/name and checks its header,
// footer and index; blocks are checked as they are read.
func openPairCold(dir, name string, tag [4]byte, cache *cold.Cache) (*pairCold, error) {
	f := &pairCold{coldBase: coldBase{name: name, cache: cache}}
	fh, err := openFile(dir, name, func(r io.ReaderAt, size int64) error {
		f.r, f.size = r, size
		foot, err := f.readEnds(tag, setShape)
		if err != nil {
			return err
		}
		ft, err := parseSetFooter(foot[:], size)
		if err != nil {
			return f.named(err)
		}
		raw := make([]byte, ft.Blocks*pairEntrySize)
		if err := f.readAt(raw, int64(ft.IndexOffset)); err != nil {
			return err
		}
		f.idx, err = newPairIndex(ft, raw)
		return f.named(err)
	})
	if err != nil {
		return nil, err
	}
	f.fh, f.path, f.id = fh, fh.Name(), cache.NewFileID()
	return f, nil
}

// view calls fn with block b — its bytes without the CRC, checked — from
// the cache or, on a miss, read from the file (one pread), checked and
// cached. sc is the read buffer, taken from the pool when nil.
func (f *pairCold) view(b int, sc **scratch, fn func(post, user uint64, body []byte)) error {
	post, user, off, end := f.idx.block(b)
	look := func(blk []byte) { fn(post, user, blk[:len(blk)-4]) }
	if f.cache.View(f.id, b, look) {
		return nil
	}
	if *sc == nil {
		*sc = scratchPool.Get().(*scratch)
	}
	blk, err := f.readChecked(b, off, end, *sc, func(blk []byte) error { return checkPairBlock(post, user, blk) })
	if err != nil {
		return err
	}
	look(blk)
	return nil
}

// has reports whether the file holds (post, user); an unreadable block is
// an error.
func (f *pairCold) has(post, user uint64) (bool, error) {
	b := f.idx.find(post, user)
	if b < 0 {
		return false, nil
	}
	var sc *scratch
	found := false
	err := f.view(b, &sc, func(p, u uint64, body []byte) {
		var k pairBlock
		if k.parse(p, u, body) == nil {
			found = k.has(post, user)
		}
	})
	if sc != nil {
		scratchPool.Put(sc)
	}
	return found, err
}

func (f *pairCold) memoryBytes() int { return len(f.idx.raw) + int(unsafe.Sizeof(*f)) }

// verifyPairBlocks checks every block of a set window (checksum,
// structure, contents), the pair order across blocks and the footer's
// total; block returns block b's bytes with its CRC.
func verifyPairBlocks(idx *pairIndex, file string, block func(b int) ([]byte, error)) error {
	return eachPairBlock(idx, file, block, nil)
}

// eachPairBlock decodes every block of a set window, checking it as
// verifyPairBlocks does, and passes its pairs (post, user) to fn (nil:
// only check) in order.
func eachPairBlock(idx *pairIndex, file string, block func(b int) ([]byte, error), fn func(post, user uint64) error) error {
	sc := new(pairScratch)
	var last pk
	n := 0
	for b := range idx.blocks {
		post, user, off, _ := idx.block(b)
		blk, err := block(b)
		if err != nil {
			return err
		}
		if err := checkPairBlock(post, user, blk); err != nil {
			return corruptAt(file, int64(off), "block %d: %v", b, err)
		}
		var k pairBlock
		_ = k.parse(post, user, blk[:len(blk)-4])
		c, err := k.decode(sc.pairs[:], sc.vals[:])
		if err != nil {
			return corruptAt(file, int64(off), "block %d: %v", b, err)
		}
		if b > 0 && cmpPK(sc.pairs[0], last) <= 0 {
			return corruptAt(file, int64(off), "block %d: pairs out of order", b)
		}
		last = sc.pairs[c-1]
		n += c
		if b%128 == 127 {
			// As verifyBlocks does every 256 blocks of 256 records: a
			// snapshot's background load keeps request handlers from
			// waiting a whole scheduler slice behind it.
			runtime.Gosched()
		}
		if fn != nil {
			for _, q := range sc.pairs[:c] {
				if err := fn(q.k, q.u); err != nil {
					return err
				}
			}
		}
	}
	if n != idx.pairs || (idx.blocks > 0 && last.k != idx.maxPost) {
		return corruptAt(file, 0, "footer says %d pairs up to post %d, blocks hold %d up to %d", idx.pairs, idx.maxPost, n, last.k)
	}
	return nil
}

// pairScratch is the decoder's working memory for one block (24 KiB).
type pairScratch struct {
	pairs [maxBlockPairs]pk
	vals  [2 * maxBlockPairs]uint64
}
