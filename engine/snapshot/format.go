package snapshot

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
)

const (
	magic    = "TALLYSNP"
	endMagic = "TALLYEND"
	// Version is the format version this build writes and the only one it
	// reads; it is bumped on any change to the byte layout.
	Version = 1

	headerSize      = 24
	chunkHeaderSize = 16
	footerSize      = 24

	// MaxChunkBytes bounds a chunk's payload, hence the largest item. The
	// reader uses it to reject a damaged length before allocating for it.
	MaxChunkBytes = 64 << 20
	// TargetChunkBytes is the size past which the writer ends a chunk:
	// large enough that framing costs nothing, small enough that a reader
	// holds little and a damaged chunk is pinned to a small range.
	TargetChunkBytes = 256 << 10
	// WritebackBytes is how much a File writes before it has the kernel
	// write that range back (see writeback).
	WritebackBytes = 1 << 20
)

// dirTag marks the directory chunk; it cannot be a section's tag.
var dirTag = Tag{'D', 'I', 'R', 0}

// castagnoli is built with MakeTable(crc32.Castagnoli), which hash/crc32
// recognises and serves with the CPU's CRC32C instruction.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

var le = binary.LittleEndian

// Tag names a section: four bytes, by convention printable ASCII.
type Tag [4]byte

// MakeTag returns the tag spelled by s, which must be four bytes long.
func MakeTag(s string) Tag {
	if len(s) != 4 {
		panic("snapshot: a tag is four bytes: " + s)
	}
	return Tag{s[0], s[1], s[2], s[3]}
}

func (t Tag) String() string { return fmt.Sprintf("%q", string(t[:])) }

// SectionInfo describes one section as the directory records it.
type SectionInfo struct {
	Tag    Tag
	Items  uint64 // items the writer wrote to it
	Offset int64  // offset of its first chunk
	Chunks uint32
	Bytes  int64 // bytes its chunks take, headers included
}

// CorruptError reports a snapshot file that is damaged, truncated or not a
// snapshot of this format at all. Offset is where the first bad part
// starts.
type CorruptError struct {
	File   string
	Offset int64
	Reason string
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("snapshot: %s is corrupt at offset %d: %s", e.File, e.Offset, e.Reason)
}

// VersionError reports a snapshot file of another format version than
// the one this build reads and writes (Version).
type VersionError struct {
	File  string
	Found uint32
}

func (e *VersionError) Error() string {
	return fmt.Sprintf("snapshot: %s is format version %d; this build reads version %d", e.File, e.Found, Version)
}

func appendHeader(dst []byte, index uint64) []byte {
	var h [headerSize]byte
	copy(h[0:8], magic)
	le.PutUint32(h[8:12], Version)
	le.PutUint64(h[12:20], index)
	le.PutUint32(h[20:24], crc32.Checksum(h[:20], castagnoli))
	return append(dst, h[:]...)
}

// checkHeader returns the index and the format version of a sound
// header, or why it is damaged. It does not judge the version.
func checkHeader(h []byte) (index uint64, version uint32, reason string) {
	if len(h) < headerSize {
		return 0, 0, fmt.Sprintf("file is %d bytes, shorter than the %d-byte header", len(h), headerSize)
	}
	if string(h[0:8]) != magic {
		return 0, 0, fmt.Sprintf("bad magic %q, not a tally snapshot", h[0:8])
	}
	version = le.Uint32(h[8:12])
	if crc32.Checksum(h[:20], castagnoli) != le.Uint32(h[20:24]) {
		if version != Version {
			return 0, 0, fmt.Sprintf("header checksum mismatch (format version field reads %d)", version)
		}
		return 0, 0, "header checksum mismatch"
	}
	return le.Uint64(h[12:20]), version, ""
}

// indexBytes is the snapshot's index as the checksums of chunks and footer
// bind it.
func indexBytes(index uint64) [8]byte {
	var b [8]byte
	le.PutUint64(b[:], index)
	return b
}

// chunkCRC checksums a chunk: payload, then header bytes 0..12, then the
// snapshot's index.
func chunkCRC(payload, hdr, idx []byte) uint32 {
	c := crc32.Checksum(payload, castagnoli)
	c = crc32.Update(c, castagnoli, hdr[:12])
	return crc32.Update(c, castagnoli, idx)
}

func putChunkHeader(hdr []byte, tag Tag, payload []byte, seq uint32, idx []byte) {
	copy(hdr[0:4], tag[:])
	le.PutUint32(hdr[4:8], uint32(len(payload)))
	le.PutUint32(hdr[8:12], seq)
	le.PutUint32(hdr[12:16], chunkCRC(payload, hdr, idx))
}

func appendFooter(dst []byte, dirOffset int64, chunks uint32, index uint64) []byte {
	var f [footerSize]byte
	le.PutUint64(f[0:8], uint64(dirOffset))
	le.PutUint32(f[8:12], chunks)
	copy(f[12:20], endMagic)
	idx := indexBytes(index)
	c := crc32.Checksum(f[:20], castagnoli)
	le.PutUint32(f[20:24], crc32.Update(c, castagnoli, idx[:]))
	return append(dst, f[:]...)
}

// checkFooter returns the directory offset and chunk count of a valid
// footer, or why it is not one.
func checkFooter(f []byte, index uint64) (dirOffset int64, chunks uint32, reason string) {
	if string(f[12:20]) != endMagic {
		return 0, 0, "no footer at the end of the file (truncated or not completely written?)"
	}
	idx := indexBytes(index)
	c := crc32.Update(crc32.Checksum(f[:20], castagnoli), castagnoli, idx[:])
	if c != le.Uint32(f[20:24]) {
		return 0, 0, "footer checksum mismatch"
	}
	off := le.Uint64(f[0:8])
	if off > 1<<62 {
		return 0, 0, "footer directory offset out of range"
	}
	return int64(off), le.Uint32(f[8:12]), ""
}

func appendDirectory(dst []byte, secs []SectionInfo) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(secs)))
	for _, s := range secs {
		dst = append(dst, s.Tag[:]...)
		dst = binary.AppendUvarint(dst, s.Items)
		dst = binary.AppendUvarint(dst, uint64(s.Offset))
		dst = binary.AppendUvarint(dst, uint64(s.Chunks))
		dst = binary.AppendUvarint(dst, uint64(s.Bytes))
	}
	return dst
}

// parseDirectory decodes a directory payload and checks that its sections
// tile the file from the header to dirOffset with consecutive chunk
// numbers, and that the directory is chunk number chunks-1.
func parseDirectory(p []byte, dirOffset int64, chunks uint32) ([]SectionInfo, string) {
	uv := func() (uint64, bool) {
		v, n := binary.Uvarint(p)
		// An overlong encoding is not something the writer makes.
		if n <= 0 || (n > 1 && p[n-1] == 0) {
			return 0, false
		}
		p = p[n:]
		return v, true
	}
	n, ok := uv()
	// Each entry takes at least 8 bytes; a count beyond that is garbage,
	// and checking first keeps it from allocating.
	if !ok || n > uint64(len(p)/8) {
		return nil, "bad section count"
	}
	secs := make([]SectionInfo, 0, n)
	off := int64(headerSize)
	var seq uint64
	for i := range n {
		if len(p) < 4 {
			return nil, fmt.Sprintf("section %d: entry cut short", i)
		}
		var s SectionInfo
		copy(s.Tag[:], p[:4])
		p = p[4:]
		items, ok1 := uv()
		offset, ok2 := uv()
		nchunks, ok3 := uv()
		nbytes, ok4 := uv()
		if !ok1 || !ok2 || !ok3 || !ok4 {
			return nil, fmt.Sprintf("section %d: bad entry", i)
		}
		switch {
		case s.Tag == dirTag:
			return nil, fmt.Sprintf("section %d has the directory's tag", i)
		case offset != uint64(off):
			return nil, fmt.Sprintf("section %s starts at %d, expected %d", s.Tag, offset, off)
		case nchunks > uint64(chunks) || nbytes > uint64(dirOffset-off):
			return nil, fmt.Sprintf("section %s runs past the directory", s.Tag)
		case nbytes < nchunks*chunkHeaderSize || (nchunks == 0) != (nbytes == 0) ||
			items < nchunks || items > nbytes-nchunks*chunkHeaderSize:
			return nil, fmt.Sprintf("section %s: %d items in %d chunks of %d bytes is inconsistent", s.Tag, items, nchunks, nbytes)
		}
		for _, prev := range secs {
			if prev.Tag == s.Tag {
				return nil, fmt.Sprintf("section %s appears twice", s.Tag)
			}
		}
		s.Items, s.Offset, s.Chunks, s.Bytes = items, int64(offset), uint32(nchunks), int64(nbytes)
		secs = append(secs, s)
		off += s.Bytes
		seq += nchunks
	}
	if len(p) != 0 {
		return nil, fmt.Sprintf("%d trailing bytes", len(p))
	}
	if off != dirOffset {
		return nil, fmt.Sprintf("sections end at %d but the directory starts at %d", off, dirOffset)
	}
	if seq+1 != uint64(chunks) {
		return nil, fmt.Sprintf("sections hold %d chunks but the footer counts %d besides the directory", seq, uint64(chunks)-1)
	}
	return secs, ""
}
