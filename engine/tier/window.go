package tier

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"runtime"

	"github.com/tally-dev/tally/engine/sealed"
)

// The window image: the bytes of a sealed window, the same in memory, in
// a snapshot and in a cold file.
//
//	window  = header block* index footer
//	header  = "TLYTIER1" (8) | codec tag (4) | cols uint8 | version uint8 (1) | dense uint8 | 0 uint8   (16 bytes)
//	index   = (first id uint64 | block offset uint64)*      one per block, in id order
//	footer  = index offset uint64 | blocks uint64 | records uint64 |
//	          min id uint64 | max id uint64 | index CRC32C uint32 |
//	          version uint32 (1) | 0 uint32 | CRC32C of the 52 bytes before it uint32   (56 bytes)
//
// The index and footer have engine/sealed's layout, and the index is
// checked and searched by sealed.Index, the footer by sealed's
// ParseFooterVersion, which takes the header to be sealed.HeaderSize
// bytes, as this one is.
const (
	windowMagic   = "TLYTIER1"
	windowVersion = 1
	headerSize    = sealed.HeaderSize
	footerSize    = sealed.FooterSize
	entrySize     = sealed.IndexEntrySize
)

// ErrCorrupt is wrapped by every error about bytes that are not what a
// tier wrote: a window image, a cold block, a snapshot image.
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

func appendWindowHeader(dst []byte, tag [4]byte, sh shape) []byte {
	dst = append(dst, windowMagic...)
	dst = append(dst, tag[:]...)
	return append(dst, byte(sh.cols), windowVersion, byte(sh.dense), 0)
}

func checkWindowHeader(b []byte, tag [4]byte, sh shape) error {
	switch {
	case len(b) < headerSize || string(b[:8]) != windowMagic:
		return corruptAt("", 0, "not a tier window (bad magic)")
	case [4]byte(b[8:12]) != tag:
		return corruptAt("", 8, "codec %q, this table's is %q", b[8:12], tag[:])
	case int(b[12]) != sh.cols || int(b[14]) != sh.dense:
		return corruptAt("", 12, "%d columns (%d dense), the codec has %d (%d)", b[12], b[14], sh.cols, sh.dense)
	case b[13] != windowVersion:
		return corruptAt("", 13, "format version %d, this build reads %d", b[13], windowVersion)
	case b[15] != 0:
		return corruptAt("", 15, "reserved header byte is not zero")
	}
	return nil
}

// parseFooter decodes and checks the footer b of a window of size bytes
// (sealed's footer, under this format's version), its error a tier one.
func parseFooter(b []byte, size int64) (sealed.Footer, error) {
	return parseFooterOf(b, size, sealed.IndexEntrySize, sealed.MaxBlockPosts)
}

// parseFooterOf is parseFooter for windows whose index entries are
// entrySize bytes and whose blocks hold at most perBlock records (a set
// window's pairs).
func parseFooterOf(b []byte, size int64, entrySize, perBlock uint64) (sealed.Footer, error) {
	f, err := sealed.ParseFooterOf(b, size, windowVersion, entrySize, perBlock)
	if ce := (*sealed.CorruptError)(nil); errors.As(err, &ce) {
		return f, corruptAt("", ce.Offset, "%s", ce.Reason)
	}
	return f, err
}

// imageSink is what a window writer of either table streams through:
// the bytes not yet written, the index being built, the offset of the
// next block, and the first error, after which nothing is written.
type imageSink struct {
	w      io.Writer
	buf    []byte
	index  []byte
	off    uint64
	err    error
	closed bool
}

func (s *imageSink) start(w io.Writer, tag [4]byte, sh shape) {
	s.w = w
	s.buf = appendWindowHeader(make([]byte, 0, 64<<10), tag, sh)
	s.off = headerSize
}

// wrote counts the block appended to buf from start, flushing buf once it
// holds 64 KiB.
func (s *imageSink) wrote(start int) {
	s.off += uint64(len(s.buf) - start)
	if len(s.buf) >= 64<<10 {
		s.flush()
	}
}

func (s *imageSink) flush() {
	if s.err == nil && len(s.buf) > 0 {
		_, s.err = s.w.Write(s.buf)
	}
	s.buf = s.buf[:0]
}

// finish writes, once, what finishBlock leaves pending and the tail that
// tail appends to buf (the index and the footer).
func (s *imageSink) finish(finishBlock func(), tail func(buf []byte) []byte) error {
	if s.closed {
		return s.err
	}
	s.closed = true
	finishBlock()
	s.buf = tail(s.buf)
	s.flush()
	return s.err
}

// windowWriter encodes a window from records given in increasing id order,
// streaming blocks to an io.Writer: memory stays at one block plus 16
// bytes of index per block.
type windowWriter struct {
	imageSink
	enc   blockEncoder
	n     uint64
	minID uint64
	last  uint64
	any   bool
}

func newWindowWriter(w io.Writer, tag [4]byte, sh shape) *windowWriter {
	ww := &windowWriter{}
	ww.enc.sh = sh
	ww.start(w, tag, sh)
	return ww
}

var errOrder = errors.New("tier: ids must be added in strictly increasing order")

func (ww *windowWriter) add(id uint64, r *Row) error {
	if ww.err != nil {
		return ww.err
	}
	if ww.any && id <= ww.last {
		ww.err = errOrder
		return ww.err
	}
	if !ww.any {
		ww.minID, ww.any = id, true
	}
	ww.last = id
	ww.enc.add(id, r)
	ww.n++
	if ww.enc.n == blockRecords {
		ww.finishBlock()
	}
	return ww.err
}

func (ww *windowWriter) finishBlock() {
	if ww.enc.n == 0 {
		return
	}
	ww.index = le.AppendUint64(ww.index, ww.enc.ids[0])
	ww.index = le.AppendUint64(ww.index, ww.off)
	start := len(ww.buf)
	ww.buf = ww.enc.encode(ww.buf)
	ww.wrote(start)
}

// close writes the rest, the index and the footer.
func (ww *windowWriter) close() error {
	return ww.finish(ww.finishBlock, func(buf []byte) []byte {
		var minID, maxID uint64
		if ww.any {
			minID, maxID = ww.minID, ww.last
		}
		return sealed.AppendIndexFooter(buf, ww.index, ww.off, ww.n, minID, maxID, windowVersion)
	})
}

// segment is a sealed window in memory: its encoded bytes and nothing
// else but the parsed index over them. Immutable, safe for concurrent use.
type segment struct {
	data  []byte
	idx   sealed.Index
	sh    shape
	chunk *chunk // where data was allocated in the tier's arena
	// installed is set, under the tier's write lock, once the segment is
	// a window's body; the arena moves only installed segments.
	installed bool
}

// openSegment checks data as a complete window of the codec — header,
// footer, index, and (verify) every block's checksum and contents — and
// returns a segment aliasing data.
func openSegment(data []byte, tag [4]byte, sh shape, verify bool) (*segment, error) {
	if err := checkWindowHeader(data, tag, sh); err != nil {
		return nil, err
	}
	size := int64(len(data))
	if size < headerSize+footerSize {
		return nil, corruptAt("", 0, "%d bytes is too short for a window", size)
	}
	f, err := parseFooter(data[size-footerSize:], size)
	if err != nil {
		return nil, err
	}
	idx, err := sealed.NewIndex(f, data[f.IndexOffset:size-footerSize])
	if err != nil {
		return nil, corruptAt("", int64(f.IndexOffset), "%v", err)
	}
	s := &segment{data: data, idx: idx, sh: sh}
	if verify {
		if err := verifyBlocks(&s.idx, sh, "", func(b int) ([]byte, error) {
			_, off, end := s.idx.Block(b)
			return s.data[off:end], nil
		}); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// verifyBlocks checks every block of a window (checksum, structure,
// contents: Block.Verify), the id order across blocks and the footer's
// totals.
func verifyBlocks(idx *sealed.Index, sh shape, file string, block func(b int) ([]byte, error)) error {
	var last uint64
	n := 0
	for b := range idx.Blocks() {
		first, off, _ := idx.Block(b)
		blk, err := block(b)
		if err != nil {
			return err
		}
		var k Block
		if err := checkBlock(first, blk, sh); err != nil {
			return corruptAt(file, int64(off), "block %d: %v", b, err)
		}
		_ = k.Parse(first, blk[:len(blk)-4], sh)
		if err := k.Verify(); err != nil {
			return corruptAt(file, int64(off), "block %d: %v", b, err)
		}
		if b > 0 && first <= last {
			return corruptAt(file, int64(off), "block %d starts at id %d, not above %d", b, first, last)
		}
		last = k.lastID()
		n += k.Len()
		if b%256 == 255 {
			// A snapshot's background load verifies every block; a few
			// hundred at a time keep a request handler from waiting a
			// whole scheduler slice behind it.
			runtime.Gosched()
		}
	}
	if n != idx.Posts() || (idx.Blocks() > 0 && last != idx.MaxID()) {
		return corruptAt(file, 0, "footer says %d records up to id %d, blocks hold %d up to %d", idx.Posts(), idx.MaxID(), n, last)
	}
	return nil
}

// buildSegment encodes the records each passes to add into an in-memory
// window allocated from a.
func buildSegment(a *arena, tag [4]byte, sh shape, each func(add func(id uint64, r *Row) error) error) (*segment, error) {
	var buf bytes.Buffer
	ww := newWindowWriter(&buf, tag, sh)
	if err := each(ww.add); err != nil {
		return nil, err
	}
	if err := ww.close(); err != nil {
		return nil, err
	}
	return newSegment(a, buf.Bytes(), tag, sh, false)
}

// newSegment copies raw into a region of a and opens it (openSegment); on
// failure the region is freed.
func newSegment(a *arena, raw []byte, tag [4]byte, sh shape, verify bool) (*segment, error) {
	data, c := a.alloc(len(raw))
	copy(data, raw)
	s, err := openSegment(data, tag, sh, verify)
	if err != nil {
		a.abandon(c, data)
		return nil, err
	}
	s.chunk = c
	a.attach(c, s)
	return s, nil
}

func (s *segment) regionBytes() []byte { return s.data }
func (s *segment) setChunk(c *chunk)   { s.chunk = c }

// rebind points the segment at data, a copy of its bytes (arena.trim).
func (s *segment) rebind(data []byte) {
	size := int64(len(data))
	f, err := parseFooter(data[size-footerSize:], size)
	if err == nil {
		s.idx, err = sealed.NewIndex(f, data[f.IndexOffset:size-footerSize])
	}
	if err != nil {
		panic("tier: a window's bytes changed in the arena: " + err.Error())
	}
	s.data = data
}

// release frees the segment's region; the segment must no longer be
// installed in a window (a reader or job still holding it is unaffected).
func (s *segment) release(a *arena) {
	if s != nil && s.chunk != nil {
		a.free(s.chunk, s)
		s.chunk = nil
	}
}

func (s *segment) blockBytes(b int) (uint64, []byte) {
	first, off, end := s.idx.Block(b)
	return first, s.data[off:end]
}

// sizeBytes is the memory the segment holds: its region of the arena.
func (s *segment) sizeBytes() int { return cap(s.data) }
