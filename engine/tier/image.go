package tier

import (
	"errors"
	"fmt"
	"hash/crc32"
	"io"
)

// The window image: the bytes of a sealed window, the same in memory, in
// a snapshot and in a cold file, for either record shape. All integers
// little-endian.
//
//	image   = header block* index footer
//	header  = "TLYTIERW" | tag [4] | version uint32 (4)                        (16 bytes)
//	block   = the shape's block | CRC32C(first key ‖ block) uint32
//	index   = (first key | block offset uint64)*        one per block, in key order
//	footer  = index offset uint64 | blocks uint64 | records uint64 |
//	          min id uint64 | max id uint64 | CRC32C(index) uint32 |
//	          version uint32 (4) | 0 uint32 | CRC32C of the 52 bytes before it uint32  (56 bytes)
//
// The tag names the table ("POST", "LIKE", "FAVS"): a table refuses an
// image of another. A block's first key is its first record's, kept in
// the index rather than the block: a post id (8 bytes) in a post table, a
// post id and a user (16 bytes) in a set, whose hot posts' likers span
// blocks, so that a block is found by its first pair. The ids of the
// footer are posts' in both. Block i occupies [offset_i, offset_i+1),
// the last one ending at the index. Every block's CRC covers its first
// key, so a block read at the wrong index entry fails it as damage does.
const (
	imageMagic   = "TLYTIERW"
	imageVersion = 5
	headerSize   = 16
	footerSize   = 56
)

// imageFormat is what the images of a table's shape have in common with
// the core's framing.
type imageFormat struct {
	tag       [4]byte
	entrySize int // bytes of an index entry: its first key and the offset
	perBlock  int // the most records a block holds
}

// ErrCorrupt is wrapped by every error about bytes that are not what a
// table wrote: a window image, a cold block, a snapshot image.
var ErrCorrupt = errors.New("tier: corrupt data")

// CorruptError says where bytes are damaged. File is empty for an
// in-memory window or a snapshot.
type CorruptError struct {
	File   string
	Offset int64
	Reason string
}

func (e *CorruptError) Error() string {
	where := "in-memory window"
	if e.File != "" {
		where = e.File
	}
	return fmt.Sprintf("tier: %s corrupt at offset %d: %s", where, e.Offset, e.Reason)
}

// Unwrap makes errors.Is(err, ErrCorrupt) true.
func (e *CorruptError) Unwrap() error { return ErrCorrupt }

func corruptAt(file string, off int64, format string, args ...any) error {
	return &CorruptError{File: file, Offset: off, Reason: fmt.Sprintf(format, args...)}
}

func appendImageHeader(dst []byte, tag [4]byte) []byte {
	dst = append(dst, imageMagic...)
	dst = append(dst, tag[:]...)
	return le.AppendUint32(dst, imageVersion)
}

func checkImageHeader(b []byte, tag [4]byte) error {
	switch {
	case len(b) < headerSize || string(b[:8]) != imageMagic:
		return corruptAt("", 0, "not a tier window (bad magic)")
	case [4]byte(b[8:12]) != tag:
		return corruptAt("", 8, "a window of %q, this table's are %q", b[8:12], tag[:])
	case le.Uint32(b[12:]) != imageVersion:
		return corruptAt("", 12, "format version %d, this build reads %d", le.Uint32(b[12:]), imageVersion)
	}
	return nil
}

// footer is the decoded last footerSize bytes of an image.
type footer struct {
	indexOffset  uint64 // where the index starts; blocks end here
	blocks       uint64
	records      uint64
	minID, maxID uint64 // the first and last post id; 0 and 0 when empty
	indexCRC     uint32
}

func (f *footer) appendTo(dst []byte) []byte {
	start := len(dst)
	dst = le.AppendUint64(dst, f.indexOffset)
	dst = le.AppendUint64(dst, f.blocks)
	dst = le.AppendUint64(dst, f.records)
	dst = le.AppendUint64(dst, f.minID)
	dst = le.AppendUint64(dst, f.maxID)
	dst = le.AppendUint32(dst, f.indexCRC)
	dst = le.AppendUint32(dst, imageVersion)
	dst = le.AppendUint32(dst, 0)
	return le.AppendUint32(dst, crc32.Checksum(dst[start:], castagnoli))
}

// parseFooter decodes and checks the footer b of an image of size bytes:
// its checksum, and that the regions it declares tile the image exactly.
func parseFooter(b []byte, size int64, format imageFormat) (footer, error) {
	var f footer
	fo := size - footerSize
	if len(b) != footerSize || size < headerSize+footerSize {
		return f, corruptAt("", 0, "%d bytes is too short for a window", size)
	}
	if got, want := crc32.Checksum(b[:52], castagnoli), le.Uint32(b[52:]); got != want {
		return f, corruptAt("", fo, "footer checksum mismatch (computed %08x, stored %08x)", got, want)
	}
	if v := le.Uint32(b[44:]); v != imageVersion {
		return f, corruptAt("", fo+44, "footer format version %d, this build reads %d", v, imageVersion)
	}
	if le.Uint32(b[48:]) != 0 {
		return f, corruptAt("", fo+48, "reserved footer bytes are not zero")
	}
	f = footer{
		indexOffset: le.Uint64(b[0:]),
		blocks:      le.Uint64(b[8:]),
		records:     le.Uint64(b[16:]),
		minID:       le.Uint64(b[24:]),
		maxID:       le.Uint64(b[32:]),
		indexCRC:    le.Uint32(b[40:]),
	}
	entry, perBlock := uint64(format.entrySize), uint64(format.perBlock)
	idxLen := uint64(size) - footerSize - f.indexOffset
	switch {
	case f.indexOffset < headerSize || f.indexOffset > uint64(size)-footerSize:
		return f, corruptAt("", fo, "index offset %d outside the window", f.indexOffset)
	case f.blocks > idxLen/entry || idxLen != f.blocks*entry:
		return f, corruptAt("", fo, "index of %d bytes for %d blocks", idxLen, f.blocks)
	case f.records < f.blocks || f.records > f.blocks*perBlock:
		return f, corruptAt("", fo, "%d records in %d blocks", f.records, f.blocks)
	case f.blocks == 0 && (f.indexOffset != headerSize || f.minID != 0 || f.maxID != 0):
		return f, corruptAt("", fo, "empty window with blocks or ids")
	case f.minID > f.maxID:
		return f, corruptAt("", fo, "min id %d above max id %d", f.minID, f.maxID)
	}
	return f, nil
}

// blockIndex is an image's index: per block, its first key and its
// offset, kept in the encoded form and searched in place, so loading it
// is one read and one checksum. It is all a cold window keeps in memory.
// The shapes search it by their keys (postindex.go, set.go).
type blockIndex struct {
	raw          []byte
	entrySize    int // 16: a post id; 24: a post id and a user
	blocks       int
	records      int
	minID, maxID uint64
	end          uint64 // where the last block ends: the index's offset
}

// newBlockIndex checks the index bytes raw against footer f: its
// checksum, block offsets that increase, first keys that increase within
// the footer's ids. The result aliases raw.
func newBlockIndex(f footer, raw []byte, entrySize int) (blockIndex, error) {
	x := blockIndex{raw: raw, entrySize: entrySize, blocks: int(f.blocks), records: int(f.records), minID: f.minID, maxID: f.maxID, end: f.indexOffset}
	if uint64(len(raw)) != f.blocks*uint64(entrySize) {
		return x, corruptAt("", int64(f.indexOffset), "index is %d bytes, footer says %d blocks", len(raw), f.blocks)
	}
	if got := crc32.Checksum(raw, castagnoli); got != f.indexCRC {
		return x, corruptAt("", int64(f.indexOffset), "index checksum mismatch (computed %08x, stored %08x)", got, f.indexCRC)
	}
	keyWords := entrySize/8 - 1
	var prevOff uint64
	for i := range x.blocks {
		e := raw[i*entrySize : (i+1)*entrySize]
		first, off := le.Uint64(e), le.Uint64(e[entrySize-8:])
		at := int64(f.indexOffset) + int64(i*entrySize)
		switch {
		case i == 0 && (off != headerSize || first != f.minID):
			return x, corruptAt("", at, "first block at %d with id %d, want %d and %d", off, first, headerSize, f.minID)
		case i > 0 && off <= prevOff+4:
			return x, corruptAt("", at, "block %d at offset %d, previous at %d", i, off, prevOff)
		case i > 0 && compareKeys(raw[(i-1)*entrySize:], e, keyWords) >= 0:
			return x, corruptAt("", at, "block %d's first key is not above block %d's", i, i-1)
		case first > f.maxID:
			return x, corruptAt("", at, "block %d's first id %d above the max id %d", i, first, f.maxID)
		}
		prevOff = off
	}
	if x.blocks > 0 && x.end <= prevOff+4 {
		return x, corruptAt("", int64(f.indexOffset), "last block ends before it starts")
	}
	return x, nil
}

// compareKeys compares the keys of words 64-bit words at the starts of a
// and b, word by word.
func compareKeys(a, b []byte, words int) int {
	for i := range words {
		x, y := le.Uint64(a[8*i:]), le.Uint64(b[8*i:])
		if x != y {
			if x < y {
				return -1
			}
			return 1
		}
	}
	return 0
}

// span returns the byte range [off, end) block i occupies, CRC included.
func (x *blockIndex) span(i int) (off, end uint64) {
	e := x.entrySize
	off = le.Uint64(x.raw[(i+1)*e-8:])
	end = x.end
	if i+1 < x.blocks {
		end = le.Uint64(x.raw[(i+2)*e-8:])
	}
	return off, end
}

// firstID returns the post id of block i's first record.
func (x *blockIndex) firstID(i int) uint64 { return le.Uint64(x.raw[i*x.entrySize:]) }

func (x *blockIndex) sizeBytes() int { return len(x.raw) }

// parseImage checks data's header, footer and index as an image of
// format and returns the index, which aliases data.
func parseImage(data []byte, format imageFormat) (blockIndex, error) {
	if err := checkImageHeader(data, format.tag); err != nil {
		return blockIndex{}, err
	}
	size := int64(len(data))
	if size < headerSize+footerSize {
		return blockIndex{}, corruptAt("", 0, "%d bytes is too short for a window", size)
	}
	f, err := parseFooter(data[size-footerSize:], size, format)
	if err != nil {
		return blockIndex{}, err
	}
	return newBlockIndex(f, data[f.indexOffset:size-footerSize], format.entrySize)
}

// sealedWindow is a window image in memory: its bytes, in a region of the
// table's arena, and the index over them. Immutable, safe for concurrent
// use.
type sealedWindow struct {
	data  []byte
	idx   blockIndex
	chunk *chunk // where data was allocated in the arena
	// installed is set, under the table's write lock, once the window is
	// a window's body; the arena moves only installed windows.
	installed bool
}

func (s *sealedWindow) kind() Kind       { return Sealed }
func (s *sealedWindow) records() int     { return s.idx.records }
func (s *sealedWindow) memoryBytes() int { return cap(s.data) }

// block returns block i's bytes with its CRC; the footer follows them
// (BlockSlack).
func (s *sealedWindow) block(i int) []byte {
	off, end := s.idx.span(i)
	return s.data[off:end]
}

// newSealed copies the image raw into a region of t's arena and checks
// it — header, footer, index and (verify) every block — and returns it;
// on failure the region is freed.
func (t *table) newSealed(raw []byte, verify bool) (*sealedWindow, error) {
	data, c := t.arena.alloc(len(raw))
	copy(data, raw)
	idx, err := parseImage(data, t.image)
	s := &sealedWindow{data: data, idx: idx, chunk: c}
	if err == nil && verify {
		err = t.shape.verifyBlocks(s)
	}
	if err != nil {
		t.arena.abandon(c, len(data))
		return nil, err
	}
	t.arena.attach(c, s)
	return s, nil
}

// rebind points the window at data, a copy of its bytes (arena.trim).
func (s *sealedWindow) rebind(data []byte) {
	s.idx.raw = data[s.idx.end : s.idx.end+uint64(len(s.idx.raw))]
	s.data = data
}

// release frees the window's region; it must no longer be a window's
// body (a reader or job still holding it is unaffected).
func (s *sealedWindow) release(a *arena) {
	if s != nil && s.chunk != nil {
		a.free(s.chunk, s)
		s.chunk = nil
	}
}

// imageWriter frames an image for a shape's block encoder, streaming it
// to an io.Writer in pieces of 64 KiB: the header, each block as the
// encoder appends it to buf with its index entry, then the index and the
// footer. Memory stays at a block plus the index. After the first error
// nothing is written.
type imageWriter struct {
	w            io.Writer
	entrySize    int
	buf          []byte
	index        []byte
	off          uint64 // where the next block starts
	records      uint64
	minID, maxID uint64
	err          error
	closed       bool
}

func (iw *imageWriter) start(w io.Writer, format imageFormat) {
	iw.w, iw.entrySize = w, format.entrySize
	iw.buf = appendImageHeader(make([]byte, 0, 64<<10), format.tag)
	iw.off = headerSize
}

// count notes a record of post id, the records coming in key order.
func (iw *imageWriter) count(id uint64) {
	if iw.records == 0 {
		iw.minID = id
	}
	iw.maxID = id
	iw.records++
}

// blockWritten takes the block the encoder appended to buf from start,
// the key words of its index entry already appended to index: it appends
// the block's offset and flushes buf once it holds 64 KiB.
func (iw *imageWriter) blockWritten(start int) {
	iw.index = le.AppendUint64(iw.index, iw.off)
	iw.off += uint64(len(iw.buf) - start)
	if len(iw.buf) >= 64<<10 {
		iw.flush()
	}
}

func (iw *imageWriter) flush() {
	if iw.err == nil && len(iw.buf) > 0 {
		_, iw.err = iw.w.Write(iw.buf)
	}
	iw.buf = iw.buf[:0]
}

// finish writes, once, the block endBlock leaves pending, the index and
// the footer.
func (iw *imageWriter) finish(endBlock func()) error {
	if iw.closed {
		return iw.err
	}
	iw.closed = true
	endBlock()
	f := footer{indexOffset: iw.off, blocks: uint64(len(iw.index) / iw.entrySize), records: iw.records, minID: iw.minID, maxID: iw.maxID, indexCRC: crc32.Checksum(iw.index, castagnoli)}
	iw.buf = f.appendTo(append(iw.buf, iw.index...))
	iw.flush()
	return iw.err
}

var errOrder = errors.New("tier: keys must be added in strictly increasing order")

// bytesBuffer is a minimal growable writer whose storage a bulk load
// reuses from window to window.
type bytesBuffer struct{ b []byte }

func (w *bytesBuffer) Write(p []byte) (int, error) { w.b = append(w.b, p...); return len(p), nil }

func (w *bytesBuffer) reset() { w.b = w.b[:0] }
