package snapshot

import (
	"errors"
	"fmt"
	"io"
	"os"
)

// Reader reads a snapshot. NewReader has verified the header, footer and
// directory; chunks are verified as sections are read. Several
// SectionReaders of one Reader may be used concurrently (each reads with
// ReadAt into its own buffer), so sections can be decoded in parallel.
type Reader struct {
	r     io.ReaderAt
	name  string
	size  int64
	index uint64
	idx   []byte
	secs  []SectionInfo
}

// NewReader checks the snapshot of size bytes in r; name is what errors
// call the file. Damage is reported as a *CorruptError, a snapshot of
// another format version as a *VersionError.
func NewReader(r io.ReaderAt, size int64, name string) (*Reader, error) {
	rd := &Reader{r: r, name: name, size: size}
	h := make([]byte, min(size, headerSize))
	if err := rd.readAt(h, 0); err != nil {
		return nil, err
	}
	index, version, reason := checkHeader(h)
	if reason != "" {
		return nil, rd.corrupt(0, reason)
	}
	if version != Version {
		return nil, &VersionError{File: name, Found: version}
	}
	rd.index = index
	ib := indexBytes(index)
	rd.idx = ib[:]
	if size < headerSize+chunkHeaderSize+footerSize {
		return nil, rd.corrupt(size, fmt.Sprintf("file ends after %d bytes, before the directory and footer (truncated)", size))
	}
	f := make([]byte, footerSize)
	if err := rd.readAt(f, size-footerSize); err != nil {
		return nil, err
	}
	dirOff, chunks, reason := checkFooter(f, index)
	if reason != "" {
		// Name the first bad chunk if there is one: a file cut short is
		// then reported where it was cut, not at its (missing) footer.
		if err := rd.scan(); err != nil {
			return nil, err
		}
		return nil, rd.corrupt(size-footerSize, reason)
	}
	if dirOff < headerSize || dirOff > size-footerSize-chunkHeaderSize {
		return nil, rd.corrupt(size-footerSize, fmt.Sprintf("footer points to a directory at offset %d, outside the file", dirOff))
	}
	dir, err := rd.chunkAt(dirOff, dirTag, chunks-1, nil)
	if err != nil {
		return nil, err
	}
	if end := dirOff + chunkHeaderSize + int64(len(dir)); end != size-footerSize {
		return nil, rd.corrupt(end, fmt.Sprintf("%d unexpected bytes between the directory and the footer", size-footerSize-end))
	}
	secs, reason := parseDirectory(dir, dirOff, chunks)
	if reason != "" {
		return nil, rd.corrupt(dirOff, "directory: "+reason)
	}
	rd.secs = secs
	return rd, nil
}

// Index returns the last log index the snapshot covers.
func (r *Reader) Index() uint64 { return r.index }

// Size returns the file's size in bytes.
func (r *Reader) Size() int64 { return r.size }

// Name returns the name errors give the file.
func (r *Reader) Name() string { return r.name }

// Sections returns the directory, in file order.
func (r *Reader) Sections() []SectionInfo { return r.secs }

// Section returns a reader for the section tagged tag.
func (r *Reader) Section(tag Tag) (*SectionReader, bool) {
	for _, s := range r.secs {
		if s.Tag == tag {
			return &SectionReader{r: r, info: s, next: s.Offset, chunkOff: s.Offset}, true
		}
	}
	return nil, false
}

// Verify reads and checks every chunk of every section, calling
// afterChunk (when not nil) after each: a caller that shares the machine
// with writers paces itself there.
func (r *Reader) Verify(afterChunk func()) error {
	for _, s := range r.secs {
		sr, _ := r.Section(s.Tag)
		for {
			if _, err := sr.Next(); err == io.EOF {
				break
			} else if err != nil {
				return err
			}
			if afterChunk != nil {
				afterChunk()
			}
		}
	}
	return nil
}

// Corrupt returns a *CorruptError at offset off of this file; decoders use
// it to report a chunk that verifies but does not decode.
func (r *Reader) Corrupt(off int64, reason string) *CorruptError { return r.corrupt(off, reason) }

func (r *Reader) corrupt(off int64, reason string) *CorruptError {
	return &CorruptError{File: r.name, Offset: off, Reason: reason}
}

func (r *Reader) readAt(p []byte, off int64) error {
	n, err := r.r.ReadAt(p, off)
	if n == len(p) {
		return nil
	}
	if err == nil || errors.Is(err, io.EOF) {
		return r.corrupt(off+int64(n), "unexpected end of file")
	}
	return fmt.Errorf("snapshot: read %s at offset %d: %w", r.name, off, err)
}

// chunkAt reads and verifies the chunk at off, which must carry tag and
// sequence number seq, into buf (grown if needed) and returns its payload.
func (r *Reader) chunkAt(off int64, tag Tag, seq uint32, buf []byte) ([]byte, error) {
	var hdr [chunkHeaderSize]byte
	if off+chunkHeaderSize > r.size {
		return nil, r.corrupt(off, fmt.Sprintf("chunk header cut short: the file ends at %d (truncated)", r.size))
	}
	h := hdr[:]
	if err := r.readAt(h, off); err != nil {
		return nil, err
	}
	n := le.Uint32(h[4:8])
	if n == 0 {
		return nil, r.corrupt(off, "empty chunk")
	}
	if n > MaxChunkBytes {
		return nil, r.corrupt(off, fmt.Sprintf("chunk length %d exceeds the %d-byte limit", n, MaxChunkBytes))
	}
	if end := off + chunkHeaderSize + int64(n); end > r.size {
		return nil, r.corrupt(off, fmt.Sprintf("chunk of %d bytes runs past the end of the file at %d (truncated)", n, r.size))
	}
	if cap(buf) < int(n) {
		buf = make([]byte, n)
	}
	payload := buf[:n]
	if err := r.readAt(payload, off+chunkHeaderSize); err != nil {
		return nil, err
	}
	if chunkCRC(payload, h, r.idx) != le.Uint32(h[12:16]) {
		return nil, r.corrupt(off, "chunk checksum mismatch")
	}
	if got := Tag(h[0:4]); got != tag {
		return nil, r.corrupt(off, fmt.Sprintf("chunk of section %s where section %s was expected", got, tag))
	}
	if got := le.Uint32(h[8:12]); got != seq {
		return nil, r.corrupt(off, fmt.Sprintf("chunk number %d where number %d was expected", got, seq))
	}
	return payload, nil
}

// scan walks the chunks from the header on and returns a *CorruptError for
// the first one that does not verify, or nil if all of them do.
func (r *Reader) scan() error {
	off := int64(headerSize)
	var seq uint32
	var buf []byte
	var hdr [chunkHeaderSize]byte
	for off+chunkHeaderSize <= r.size {
		if err := r.readAt(hdr[:], off); err != nil {
			return err
		}
		tag := Tag(hdr[0:4])
		p, err := r.chunkAt(off, tag, seq, buf)
		if err != nil {
			return err
		}
		buf = p[:0]
		off += chunkHeaderSize + int64(len(p))
		seq++
		if tag == dirTag {
			return nil
		}
	}
	return r.corrupt(off, fmt.Sprintf("the file ends at %d after %d chunks that verify, without a directory (truncated)", r.size, seq))
}

// SectionReader reads one section chunk by chunk.
type SectionReader struct {
	r        *Reader
	info     SectionInfo
	next     int64  // offset of the next chunk
	read     uint32 // chunks read
	seq      uint32 // sequence number of the next chunk, set on first read
	chunkOff int64
	buf      []byte
}

// Info returns the section's directory entry.
func (s *SectionReader) Info() SectionInfo { return s.info }

// Next returns the next chunk's payload, verified, or io.EOF after the
// last one. The payload is valid until the next call.
func (s *SectionReader) Next() ([]byte, error) {
	if s.read == s.info.Chunks {
		return nil, io.EOF
	}
	if s.read == 0 {
		s.seq = s.firstSeq()
	}
	p, err := s.r.chunkAt(s.next, s.info.Tag, s.seq, s.buf)
	if err != nil {
		return nil, err
	}
	s.buf = p[:0]
	s.chunkOff = s.next
	s.next += chunkHeaderSize + int64(len(p))
	s.read++
	s.seq++
	if end := s.info.Offset + s.info.Bytes; s.next > end || (s.read == s.info.Chunks && s.next != end) {
		return nil, s.r.corrupt(s.chunkOff, fmt.Sprintf("section %s's chunks do not fill its %d bytes", s.info.Tag, s.info.Bytes))
	}
	return p, nil
}

// firstSeq is the sequence number of the section's first chunk: the
// chunks of the sections before it.
func (s *SectionReader) firstSeq() uint32 {
	var n uint32
	for _, o := range s.r.secs {
		if o.Tag == s.info.Tag {
			break
		}
		n += o.Chunks
	}
	return n
}

// ChunkOffset returns the offset of the chunk Next last returned, for
// error reports.
func (s *SectionReader) ChunkOffset() int64 { return s.chunkOff }

// Corrupt reports that the chunk Next last returned does not decode.
func (s *SectionReader) Corrupt(reason string) *CorruptError {
	return s.r.corrupt(s.chunkOff, fmt.Sprintf("section %s: %s", s.info.Tag, reason))
}

// FileReader is a Reader over an open file.
type FileReader struct {
	*Reader
	f *os.File
}

// Open opens and checks the snapshot file at path (see NewReader).
func Open(path string) (*FileReader, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	info, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	if !info.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("snapshot: %s is not a regular file", path)
	}
	r, err := NewReader(f, info.Size(), path)
	if err != nil {
		f.Close()
		return nil, err
	}
	return &FileReader{Reader: r, f: f}, nil
}

// File returns the open file, e.g. to copy it.
func (f *FileReader) File() *os.File { return f.f }

// Close closes the file.
func (f *FileReader) Close() error { return f.f.Close() }
