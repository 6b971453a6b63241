package snapshot

import (
	"errors"
	"fmt"
	"io"
)

// Writer writes one snapshot to an io.Writer: the header, then sections
// of items, then the directory and footer. Items are encoded straight into
// the writer's chunk buffer, which is reused, so writing allocates nothing
// per item:
//
//	w.Begin(tag)
//	for each item {
//		b := w.Buf()
//		b = append(b, ...) // the item's bytes, at least one
//		w.Item(b)
//	}
//	w.End()
//	...
//	w.Finish()
//
// A section whose body is a format of its own (a table's image) is
// written as a byte stream instead: Begin, then Write (a Writer is an
// io.Writer) as often as needed, then End. The stream is cut into chunks
// of TargetChunkBytes in the same buffer, each counted as one item, so
// that streaming a section holds one chunk's bytes however large the
// section is. A section is items or a stream, never both.
//
// The first error sticks: every later call is a no-op and Finish returns
// it. A Writer is not safe for concurrent use.
type Writer struct {
	w     io.Writer
	index uint64
	idx   []byte // index bytes for chunk checksums (heap, see chunkCRC)
	hdr   []byte // chunk header scratch (heap, see chunkCRC)
	off   int64
	seq   uint32
	buf   []byte
	open  bool
	// stream marks the open section a byte stream (Write).
	stream bool
	cur    SectionInfo
	secs   []SectionInfo
	err    error
}

var errItemTooLarge = errors.New("snapshot: item larger than MaxChunkBytes")

// NewWriter writes the header of a snapshot covering log records up to
// index to w.
func NewWriter(w io.Writer, index uint64) (*Writer, error) {
	ib := indexBytes(index)
	sw := &Writer{w: w, index: index, idx: ib[:], hdr: make([]byte, chunkHeaderSize)}
	if _, err := w.Write(appendHeader(nil, index)); err != nil {
		return nil, err
	}
	sw.off = headerSize
	return sw, nil
}

// Index returns the log index the snapshot covers.
func (w *Writer) Index() uint64 { return w.index }

// Begin starts a section. Tags must be unique within a snapshot.
func (w *Writer) Begin(tag Tag) {
	if w.err != nil {
		return
	}
	if w.open {
		w.err = fmt.Errorf("snapshot: Begin(%s) inside section %s", tag, w.cur.Tag)
		return
	}
	for _, s := range w.secs {
		if s.Tag == tag {
			w.err = fmt.Errorf("snapshot: section %s written twice", tag)
			return
		}
	}
	if tag == dirTag {
		w.err = fmt.Errorf("snapshot: %s is reserved", tag)
		return
	}
	w.open, w.stream = true, false
	w.cur = SectionInfo{Tag: tag, Offset: w.off}
}

var errMixed = errors.New("snapshot: a section is items or a byte stream, not both")

// Write appends p to the open section's byte stream (see Writer). It
// returns the first error met, as every call does.
func (w *Writer) Write(p []byte) (int, error) {
	switch {
	case w.err != nil:
		return 0, w.err
	case !w.open:
		w.err = errors.New("snapshot: Write outside a section")
		return 0, w.err
	case !w.stream && (w.cur.Items > 0 || len(w.buf) > 0):
		w.err = errMixed
		return 0, w.err
	}
	w.stream = true
	if cap(w.buf) < TargetChunkBytes {
		// Sized once: growing by append would overshoot the chunk.
		w.buf = append(make([]byte, 0, TargetChunkBytes), w.buf...)
	}
	n := len(p)
	for len(p) > 0 && w.err == nil {
		take := min(TargetChunkBytes-len(w.buf), len(p))
		w.buf = append(w.buf, p[:take]...)
		p = p[take:]
		if len(w.buf) == TargetChunkBytes {
			w.cur.Items++
			w.flush()
		}
	}
	if w.err != nil {
		return n - len(p), w.err
	}
	return n, nil
}

// Buf returns the chunk buffer to append the next item to.
func (w *Writer) Buf() []byte { return w.buf }

// Item takes back the buffer Buf returned, with one more item appended
// (at least one byte), and writes a chunk once the buffer passes
// TargetChunkBytes.
func (w *Writer) Item(b []byte) {
	if w.err != nil {
		return
	}
	if !w.open {
		w.err = errors.New("snapshot: Item outside a section")
		return
	}
	if w.stream {
		w.err = errMixed
		return
	}
	if len(b) <= len(w.buf) {
		w.err = errors.New("snapshot: empty item")
		return
	}
	if len(b) > MaxChunkBytes {
		w.err = errItemTooLarge
		return
	}
	w.buf = b
	w.cur.Items++
	if len(b) >= TargetChunkBytes {
		w.flush()
	}
}

// Chunk writes payload, holding items whole items already encoded (a chunk
// read from another snapshot, say), as a chunk of its own in the open
// section.
func (w *Writer) Chunk(payload []byte, items uint64) {
	if w.err != nil {
		return
	}
	switch {
	case !w.open:
		w.err = errors.New("snapshot: Chunk outside a section")
	case len(payload) == 0 || items == 0 || items > uint64(len(payload)):
		w.err = fmt.Errorf("snapshot: chunk of %d bytes cannot hold %d items", len(payload), items)
	case len(payload) > MaxChunkBytes:
		w.err = errItemTooLarge
	case w.stream:
		w.err = errMixed
	}
	if w.err != nil {
		return
	}
	w.flush()
	w.cur.Items += items
	w.writeChunk(payload)
}

// Items returns how many items the open section holds so far.
func (w *Writer) Items() uint64 { return w.cur.Items }

func (w *Writer) flush() {
	if len(w.buf) == 0 || w.err != nil {
		return
	}
	w.writeChunk(w.buf)
	w.buf = w.buf[:0]
}

// writeChunk writes payload as the open section's next chunk.
func (w *Writer) writeChunk(payload []byte) {
	putChunkHeader(w.hdr, w.cur.Tag, payload, w.seq, w.idx)
	w.write(w.hdr)
	w.write(payload)
	w.seq++
	w.cur.Chunks++
	w.cur.Bytes += chunkHeaderSize + int64(len(payload))
}

func (w *Writer) write(p []byte) {
	if w.err != nil {
		return
	}
	n, err := w.w.Write(p)
	w.off += int64(n)
	if err == nil && n != len(p) {
		err = io.ErrShortWrite
	}
	w.err = err
}

// End writes out the open section's last chunk.
func (w *Writer) End() {
	if w.err != nil {
		return
	}
	if !w.open {
		w.err = errors.New("snapshot: End outside a section")
		return
	}
	if w.stream && len(w.buf) > 0 {
		w.cur.Items++ // the stream's last chunk
	}
	w.flush()
	w.secs = append(w.secs, w.cur)
	w.open = false
}

// Finish writes the directory and footer and returns the snapshot's size,
// or the first error any call met.
func (w *Writer) Finish() (int64, error) {
	if w.err == nil && w.open {
		w.err = fmt.Errorf("snapshot: section %s not ended", w.cur.Tag)
	}
	if w.err != nil {
		return w.off, w.err
	}
	dirOff := w.off
	dir := appendDirectory(w.buf[:0], w.secs)
	putChunkHeader(w.hdr, dirTag, dir, w.seq, w.idx)
	w.write(w.hdr)
	w.write(dir)
	w.seq++
	w.write(appendFooter(nil, dirOff, w.seq, w.index))
	w.buf = dir[:0]
	return w.off, w.err
}

// Fail ends the snapshot with err, for a section body whose own encoder
// failed: every later call does nothing and Finish returns err.
func (w *Writer) Fail(err error) {
	if w.err == nil {
		w.err = err
	}
}

// Err returns the first error met so far.
func (w *Writer) Err() error { return w.err }
