package sealed

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"iter"

	"github.com/tally-dev/tally/engine"
)

// DefaultBlockPosts is the number of posts per block when Options leave it
// zero. On the datagen set (BenchmarkBlockSize) blocks of 128 posts cost
// 6.42 bytes per post, 64 cost 6.58 and 256 cost 6.39, with page reads
// equal within noise; 128 is kept because a cold miss then reads half the
// bytes of 256 (a block is about 760 bytes).
const DefaultBlockPosts = 128

// Options tune how a window is encoded. The zero value is the default.
type Options struct {
	// BlockPosts is the number of posts per block, 1..MaxBlockPosts; 0
	// means DefaultBlockPosts.
	BlockPosts int
}

func (o Options) blockPosts() int {
	if o.BlockPosts <= 0 {
		return DefaultBlockPosts
	}
	return min(o.BlockPosts, MaxBlockPosts)
}

// ErrOrder is returned by Writer.Add for an id not above the previous one.
var ErrOrder = errors.New("sealed: ids must be added in strictly increasing order")

// Writer encodes a window from posts given in increasing id order,
// streaming blocks to an io.Writer: memory stays at one block plus 16
// bytes of index per block, so a compaction can write a window larger
// than memory.
type Writer struct {
	w      io.Writer
	per    int
	enc    blockEncoder
	buf    []byte // encoded bytes not yet written
	index  []byte
	off    uint64 // bytes written or buffered so far
	posts  uint64
	minID  uint64
	last   uint64
	any    bool
	err    error
	closed bool
}

// flushBytes is how much encoded data the Writer buffers before one write.
const flushBytes = 64 << 10

// NewWriter returns a Writer encoding to w.
func NewWriter(w io.Writer, opts Options) *Writer {
	wr := &Writer{w: w, per: opts.blockPosts()}
	wr.buf = appendHeader(wr.buf)
	wr.off = HeaderSize
	return wr
}

// Add appends a post. Posts whose counts are all zero are skipped (zeros
// are never stored); negative counts and ids not above the previous id
// are errors.
func (w *Writer) Add(id uint64, c engine.Counts) error {
	if w.err != nil {
		return w.err
	}
	if w.closed {
		return errors.New("sealed: Add after Close")
	}
	if c.Likes < 0 || c.Comments < 0 || c.Reposts < 0 || c.Views < 0 || c.Favorites < 0 {
		return fmt.Errorf("sealed: post %d has negative counts %+v", id, c)
	}
	if w.any && id <= w.last {
		return fmt.Errorf("%w: %d after %d", ErrOrder, id, w.last)
	}
	if c.IsZero() {
		return nil
	}
	if !w.any {
		w.minID = id
	}
	w.any = true
	w.last = id
	w.enc.add(id, &c)
	w.posts++
	if w.enc.n == w.per {
		return w.finishBlock()
	}
	return nil
}

func (w *Writer) finishBlock() error {
	if w.enc.n == 0 {
		return nil
	}
	first := w.enc.ids[0]
	start := len(w.buf)
	w.buf = w.enc.encode(w.buf)
	w.index = le.AppendUint64(w.index, first)
	w.index = le.AppendUint64(w.index, w.off)
	w.off += uint64(len(w.buf) - start)
	if len(w.buf) >= flushBytes {
		return w.flush()
	}
	return nil
}

func (w *Writer) flush() error {
	if _, err := w.w.Write(w.buf); err != nil {
		w.err = fmt.Errorf("sealed: write: %w", err)
		return w.err
	}
	w.buf = w.buf[:0]
	return nil
}

// Close writes the last block, the index and the footer. It does not close
// the underlying writer.
func (w *Writer) Close() error {
	if w.err != nil {
		return w.err
	}
	if w.closed {
		return nil
	}
	w.closed = true
	if err := w.finishBlock(); err != nil {
		return err
	}
	var minID, maxID uint64
	if w.any {
		minID, maxID = w.minID, w.last
	}
	w.buf = AppendIndexFooter(w.buf, w.index, w.off, w.posts, minID, maxID, formatVersion)
	return w.flush()
}

// Posts returns the number of posts added so far (zeros excluded).
func (w *Writer) Posts() int { return int(w.posts) }

// Build encodes the posts of seq, which must come in increasing id order,
// into an in-memory window.
func Build(seq iter.Seq2[uint64, engine.Counts], opts Options) (*Window, error) {
	var buf bytes.Buffer
	w := NewWriter(&buf, opts)
	for id, c := range seq {
		if err := w.Add(id, c); err != nil {
			return nil, err
		}
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	// The bytes are ours and were just encoded: parse the framing, skip the
	// per-block verification Unmarshal does for foreign bytes.
	return open(bytes.Clone(buf.Bytes()), false)
}
