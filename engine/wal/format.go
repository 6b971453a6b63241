package wal

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"strconv"
)

const (
	segmentMagic = "TALLYWAL"
	// formatVersion is bumped on any change to the byte layout; a reader
	// refuses versions it does not know rather than guess.
	formatVersion = 1

	headerSize       = 24
	recordHeaderSize = 16

	// MaxRecordBytes is the largest payload Append accepts. The decoder uses
	// it to reject a damaged length field before allocating for it.
	MaxRecordBytes = 64 << 20

	segmentPrefix = "wal-"
	segmentSuffix = ".log"
	tmpSuffix     = ".tmp"
)

// castagnoli is built with MakeTable(crc32.Castagnoli), which hash/crc32
// recognises and serves with the CPU's CRC32C instruction.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

var le = binary.LittleEndian

func segmentName(first uint64) string {
	return fmt.Sprintf("%s%016x%s", segmentPrefix, first, segmentSuffix)
}

// parseSegmentName accepts exactly the names segmentName produces, so that
// stray files (editor backups, wal-1.log typed by hand) are never mistaken
// for part of the log.
func parseSegmentName(name string) (uint64, bool) {
	const n = len(segmentPrefix) + 16 + len(segmentSuffix)
	if len(name) != n || name[:len(segmentPrefix)] != segmentPrefix || name[n-len(segmentSuffix):] != segmentSuffix {
		return 0, false
	}
	hex := name[len(segmentPrefix) : len(segmentPrefix)+16]
	for i := 0; i < len(hex); i++ {
		if c := hex[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return 0, false
		}
	}
	v, err := strconv.ParseUint(hex, 16, 64)
	return v, err == nil
}

func appendSegmentHeader(dst []byte, first uint64) []byte {
	var h [headerSize]byte
	copy(h[0:8], segmentMagic)
	le.PutUint32(h[8:12], formatVersion)
	le.PutUint64(h[12:20], first)
	le.PutUint32(h[20:24], crc32.Checksum(h[:20], castagnoli))
	return append(dst, h[:]...)
}

// checkSegmentHeader returns nil if h is a valid header for a segment
// named after first, or the damage at offset 0 that says why not; a sound
// header of another format version is marked as such (otherVersion).
func checkSegmentHeader(h []byte, first uint64) *damage {
	bad := func(format string, args ...any) *damage { return &damage{reason: fmt.Sprintf(format, args...)} }
	if len(h) < headerSize {
		return bad("file is %d bytes, shorter than the %d-byte segment header", len(h), headerSize)
	}
	if string(h[0:8]) != segmentMagic {
		return bad("bad magic %q, not a tally log segment", h[0:8])
	}
	v := le.Uint32(h[8:12])
	if crc32.Checksum(h[:20], castagnoli) != le.Uint32(h[20:24]) {
		if v != formatVersion {
			return bad("segment header checksum mismatch (format version field reads %d)", v)
		}
		return bad("segment header checksum mismatch")
	}
	if v != formatVersion {
		d := bad("format version %d (this build reads version %d)", v, formatVersion)
		d.otherVersion, d.version = true, v
		return d
	}
	if got := le.Uint64(h[12:20]); got != first {
		return bad("header says first index %d but the file name says %d", got, first)
	}
	return nil
}

// recordCRC finishes a record checksum: payloadCRC is CRC32C(payload), hdr
// the 16-byte record header whose length and index fields are filled in.
// hdr must already live on the heap (the batch buffer, the scanner):
// hash/crc32 makes its argument escape, and a stack array passed here
// would cost an allocation per record.
func recordCRC(payloadCRC uint32, hdr []byte) uint32 {
	c := crc32.Update(payloadCRC, castagnoli, hdr[0:4])
	return crc32.Update(c, castagnoli, hdr[8:16])
}

// appendRecord encodes one record onto dst. payloadCRC must be
// crc32.Checksum(payload, castagnoli).
func appendRecord(dst []byte, index uint64, payload []byte, payloadCRC uint32) []byte {
	start := len(dst)
	var h [recordHeaderSize]byte
	le.PutUint32(h[0:4], uint32(len(payload)))
	le.PutUint64(h[8:16], index)
	dst = append(dst, h[:]...)
	hdr := dst[start : start+recordHeaderSize]
	le.PutUint32(hdr[4:8], recordCRC(payloadCRC, hdr))
	return append(dst, payload...)
}

// damage describes the first bad spot of a segment.
type damage struct {
	offset int64
	reason string
	// canBeTorn is true when the bad spot looks like a write cut short (short
	// header or payload, checksum mismatch) rather than a record that
	// verifies but does not belong (wrong index) or a bad segment header.
	canBeTorn bool
	// validAfter is set by scanSegment, for the last segment only, when a
	// record that verifies follows the bad spot: then it is not a torn tail.
	validAfter bool
	// otherVersion: the segment header is sound but of format version
	// version, not this build's: the log is refused, not repaired.
	otherVersion bool
	version      uint32
}

// segScan is the outcome of scanning one segment.
type segScan struct {
	end     int64  // offset just past the last valid record
	last    uint64 // index of the last valid record; first-1 if none
	records int64
	bad     *damage
}

// scanner holds the buffers reused across segments and records so that
// opening or replaying a long log does not allocate per record.
type scanner struct {
	br  *bufio.Reader
	buf []byte
	hdr [recordHeaderSize]byte
}

func newScanner() *scanner {
	return &scanner{br: bufio.NewReaderSize(nil, 256<<10)}
}

// scanSegment verifies a segment named after first, from its header to its
// end or until stop(index) says so, calling visit for each valid record.
// It stops at the first bad spot and describes it in the result; only read
// errors and errors from visit are returned as errors. When isLast, a bad
// spot that can be torn is checked for valid records after it.
//
// The payload passed to visit is only valid until visit returns.
func (sc *scanner) scanSegment(r io.ReaderAt, size int64, first uint64, isLast bool,
	visit func(index uint64, off int64, payload []byte) (stop bool, err error)) (segScan, error) {
	res := segScan{last: first - 1}
	var h [headerSize]byte
	n, err := r.ReadAt(h[:min(size, headerSize)], 0)
	if err != nil && err != io.EOF {
		return res, err
	}
	if bad := checkSegmentHeader(h[:n], first); bad != nil {
		res.bad = bad
		return res, nil
	}
	off := int64(headerSize)
	res.end = off
	sc.br.Reset(io.NewSectionReader(r, off, size-off))
	for off < size {
		left := size - off
		if left < recordHeaderSize {
			res.bad = &damage{offset: off, canBeTorn: true,
				reason: fmt.Sprintf("truncated record header (%d of %d bytes)", left, recordHeaderSize)}
			break
		}
		if _, err := io.ReadFull(sc.br, sc.hdr[:]); err != nil {
			return res, fmt.Errorf("read at offset %d: %w", off, err)
		}
		length := le.Uint32(sc.hdr[0:4])
		if length > MaxRecordBytes {
			res.bad = &damage{offset: off, canBeTorn: true,
				reason: fmt.Sprintf("record length %d exceeds the %d-byte limit", length, MaxRecordBytes)}
			break
		}
		if int64(length) > left-recordHeaderSize {
			res.bad = &damage{offset: off, canBeTorn: true,
				reason: fmt.Sprintf("record length %d runs past the end of the file (%d bytes left)", length, left-recordHeaderSize)}
			break
		}
		if cap(sc.buf) < int(length) {
			sc.buf = make([]byte, length)
		}
		payload := sc.buf[:length]
		if _, err := io.ReadFull(sc.br, payload); err != nil {
			return res, fmt.Errorf("read at offset %d: %w", off+recordHeaderSize, err)
		}
		if recordCRC(crc32.Checksum(payload, castagnoli), sc.hdr[:]) != le.Uint32(sc.hdr[4:8]) {
			res.bad = &damage{offset: off, canBeTorn: true, reason: "record checksum mismatch"}
			break
		}
		if idx := le.Uint64(sc.hdr[8:16]); idx != res.last+1 {
			res.bad = &damage{offset: off,
				reason: fmt.Sprintf("record has index %d, expected %d", idx, res.last+1)}
			break
		}
		res.last++
		res.records++
		recOff := off
		off += recordHeaderSize + int64(length)
		res.end = off
		if visit != nil {
			stop, err := visit(res.last, recOff, payload)
			if err != nil || stop {
				return res, err
			}
		}
	}
	if res.bad != nil && res.bad.canBeTorn && isLast {
		found, err := validRecordAfter(r, res.bad.offset, size, res.last)
		if err != nil {
			return res, err
		}
		res.bad.validAfter = found
	}
	return res, nil
}

// validRecordAfter reports whether any record that verifies starts after
// the bad spot at off, with an index that could follow lastGood. It is what
// separates a torn tail (nothing valid after the cut) from damage in the
// middle of the log. Only the failure path runs it, so it reads the rest of
// the file at once.
func validRecordAfter(r io.ReaderAt, off, size int64, lastGood uint64) (bool, error) {
	if size-off <= recordHeaderSize {
		return false, nil
	}
	rest := make([]byte, size-off)
	if _, err := r.ReadAt(rest, off); err != nil && err != io.EOF {
		return false, fmt.Errorf("read at offset %d: %w", off, err)
	}
	for p := 1; p+recordHeaderSize <= len(rest); p++ {
		length := le.Uint32(rest[p:])
		if length > MaxRecordBytes || int64(length) > int64(len(rest)-p-recordHeaderSize) {
			continue
		}
		// Every record between lastGood and this one takes at least a
		// header's worth of the p bytes skipped, which bounds the index and
		// keeps the costly checksum for plausible candidates.
		idx := le.Uint64(rest[p+8:])
		if idx <= lastGood || idx-lastGood > uint64(p/recordHeaderSize)+1 {
			continue
		}
		h := rest[p : p+recordHeaderSize]
		payload := rest[p+recordHeaderSize : p+recordHeaderSize+int(length)]
		if recordCRC(crc32.Checksum(payload, castagnoli), h) == le.Uint32(h[4:8]) {
			return true, nil
		}
	}
	return false, nil
}
