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
	cur   SectionInfo
	secs  []SectionInfo
	err   error
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
	w.open = true
	w.cur = SectionInfo{Tag: tag, Offset: w.off}
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
	}
	if w.err != nil {
		return
	}
	w.flush()
	w.buf = append(w.buf, payload...)
	w.cur.Items += items
	w.flush()
}

// Items returns how many items the open section holds so far.
func (w *Writer) Items() uint64 { return w.cur.Items }

func (w *Writer) flush() {
	if len(w.buf) == 0 || w.err != nil {
		return
	}
	putChunkHeader(w.hdr, w.cur.Tag, w.buf, w.seq, w.idx)
	w.write(w.hdr)
	w.write(w.buf)
	w.seq++
	w.cur.Chunks++
	w.cur.Bytes += chunkHeaderSize + int64(len(w.buf))
	w.buf = w.buf[:0]
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
