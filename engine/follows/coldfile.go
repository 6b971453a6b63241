package follows

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"slices"
	"sort"
	"unsafe"

	"github.com/tally-dev/tally/engine/bitpack"
)

// A cold file holds the reverse direction's pairs (cold.go says when) as
// blocks in the block format (block.go), one record each, after a header:
//
//	header  "TALLYFRV" | version (uint32 LE) | 0 (uint32)
//	record  crc (uint32 LE, CRC-32C of the rest) | length of the block
//	        (uint32 LE) | a (uint64 LE) | b (uint64 LE) | n-1 (uint8) |
//	        the block's bytes
//
// The process that writes a file is the only one that reads it (a start
// rebuilds it from the forward lists), so the file has no index: the
// writer keeps the directory, each block's first pair, count, offset and
// length, in memory. A merge writes the records in key order; a scrub
// (cold.go) appends rewritten records at the end and the directory then
// points there, the superseded records' bytes being punched out (zeros),
// so the records are in key order only through the directory. A record
// repeats its first pair and count so that it is checked against the
// directory entry that found it as well as by its checksum: a damaged
// record is an error naming the file, never wrong pairs.
const (
	coldMagic   = "TALLYFRV"
	coldVersion = 1
	coldHeader  = 16
	recHeader   = 4 + 4 + 8 + 8 + 1
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// errCold wraps what a cold file's reader finds wrong.
var errCold = errors.New("follows: damaged cold file")

// coldEntry locates a record: its block's first pair, and loc, the
// record's byte offset (top 42 bits), its length in bytes (14 bits) and
// the block's n-1 (8 bits). The length is in the entry because records
// are not in file order (a scrub appends), so the next entry's offset
// does not end a record; a read is still one pread.
type coldEntry struct {
	a, b uint64
	loc  uint64
}

const (
	locOffBits  = 42
	locSizeBits = 14
	// maxColdFile is the largest file the directory can address; a
	// record of the widest block (every field 64 bits) is well under
	// maxColdRecord (TestColdRecordLimits).
	maxColdFile   = 1 << locOffBits
	maxColdRecord = 1<<locSizeBits - 1
)

func (d *coldEntry) off() int64 { return int64(d.loc >> (64 - locOffBits)) }
func (d *coldEntry) size() int  { return int(d.loc>>8) & maxColdRecord }
func (d *coldEntry) n() int     { return int(d.loc&0xff) + 1 }

// coldLoc packs a record's place for a coldEntry, failing for a file or
// a record past what the entry can say.
func coldLoc(path string, off int64, size, n int) (uint64, error) {
	if off+int64(size) > maxColdFile || size > maxColdRecord {
		return 0, fmt.Errorf("follows: %s: a record of %d bytes at byte %d is past the cold file's limits (%d-byte records, %d-byte files)",
			path, size, off, maxColdRecord, int64(maxColdFile))
	}
	return uint64(off)<<(64-locOffBits) | uint64(size)<<8 | uint64(n-1), nil
}

// coldFile is a written cold file, open for reading. Its reads may run
// concurrently (ReadAt).
type coldFile struct {
	f    *os.File
	path string
	dir  []coldEntry
	n    int   // pairs
	size int64 // bytes
	// dead is the bytes of records a scrub superseded (punched out, or
	// waiting for Collect to punch them): a merge is due when they pass
	// a quarter of the file (cold.go, plan).
	dead int64
}

// coldScratch is a reader's buffers: a record, and a block decoded.
type coldScratch struct {
	buf  []byte
	e    entries
	cols columns
}

// seek returns the index of the last record whose first pair is at most
// (a, b), or 0.
func (cf *coldFile) seek(a, b uint64) int {
	i := sort.Search(len(cf.dir), func(i int) bool { return less(a, b, cf.dir[i].a, cf.dir[i].b) })
	return max(i-1, 0)
}

// read reads record i and parses its block into blk, whose bytes are
// sc's until the next read.
func (cf *coldFile) read(i int, sc *coldScratch, blk *block) error {
	d := &cf.dir[i]
	size := d.size()
	if cap(sc.buf) < size+bitpack.Slack {
		sc.buf = make([]byte, size+bitpack.Slack)
	}
	sc.buf = sc.buf[:size]
	if _, err := cf.f.ReadAt(sc.buf, d.off()); err != nil {
		return fmt.Errorf("follows: %s: record %d: %w", cf.path, i, err)
	}
	if err := decodeRecord(sc.buf, d, blk); err != nil {
		return fmt.Errorf("%s: record %d at byte %d: %w", cf.path, i, d.off(), err)
	}
	return nil
}

// decode reads record i and decodes its pairs into sc.e.
func (cf *coldFile) decode(i int, sc *coldScratch) error {
	var blk block
	if err := cf.read(i, sc, &blk); err != nil {
		return err
	}
	d := &cf.dir[i]
	sc.e.n = 0
	blk.decodeAll(d.a, d.b, &sc.e, &sc.cols)
	return nil
}

// decodeRecord checks rec, a record with bitpack.Slack bytes of capacity
// past it, against its checksum and the directory entry d that located
// it, and parses its block into blk.
func decodeRecord(rec []byte, d *coldEntry, blk *block) error {
	if len(rec) < recHeader {
		return fmt.Errorf("%w: a record of %d bytes", errCold, len(rec))
	}
	if sum := crcOf(rec[4:]); sum != binary.LittleEndian.Uint32(rec) {
		return fmt.Errorf("%w: checksum %08x, want %08x", errCold, sum, binary.LittleEndian.Uint32(rec))
	}
	length := int(binary.LittleEndian.Uint32(rec[4:]))
	a, b, n := binary.LittleEndian.Uint64(rec[8:]), binary.LittleEndian.Uint64(rec[16:]), int(rec[24])+1
	if length != len(rec)-recHeader || a != d.a || b != d.b || n != d.n() {
		return fmt.Errorf("%w: record of %d pairs from (%d, %d) in %d bytes, the directory says %d from (%d, %d) in %d",
			errCold, n, a, b, length, d.n(), d.a, d.b, len(rec)-recHeader)
	}
	body := rec[recHeader:]
	if cap(body) < len(body)+bitpack.Slack {
		body = append(make([]byte, 0, len(body)+bitpack.Slack), body...)
	}
	if err := blk.parse(body); err != nil {
		return err
	}
	if blk.n != n {
		return fmt.Errorf("%w: a block of %d pairs in a record of %d", errCold, blk.n, n)
	}
	return nil
}

// coldWriter writes a cold file from pairs in increasing order, in full
// blocks: a load's merge and a merge job stream their output through it.
// Its first error sticks and is returned by finish.
type coldWriter struct {
	f    *os.File
	path string
	w    *bufio.Writer
	off  int64
	dir  []coldEntry
	n    int
	e    entries
	enc  encoder
	rec  []byte
	err  error
}

func createCold(path string) (*coldWriter, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("follows: %w", err)
	}
	cw := &coldWriter{f: f, path: path, w: bufio.NewWriterSize(f, 1<<16)}
	var h [coldHeader]byte
	copy(h[:], coldMagic)
	binary.LittleEndian.PutUint32(h[8:], coldVersion)
	cw.put(h[:])
	return cw, nil
}

func (cw *coldWriter) put(p []byte) {
	if cw.err != nil {
		return
	}
	if _, err := cw.w.Write(p); err != nil {
		cw.err = fmt.Errorf("follows: %s: %w", cw.path, err)
	}
	cw.off += int64(len(p))
}

func (cw *coldWriter) add(a, b uint64, v int64) {
	cw.e.a[cw.e.n], cw.e.b[cw.e.n], cw.e.v[cw.e.n] = a, b, v
	cw.e.n++
	if cw.e.n == maxBlock {
		cw.flush()
	}
}

func (cw *coldWriter) flush() {
	e := &cw.e
	if e.n == 0 || cw.err != nil {
		e.n = 0
		return
	}
	cw.rec = appendRecord(cw.rec[:0], &cw.enc, e)
	loc, err := coldLoc(cw.path, cw.off, len(cw.rec), e.n)
	if err != nil {
		cw.err = err
		return
	}
	cw.dir = append(cw.dir, coldEntry{a: e.a[0], b: e.b[0], loc: loc})
	cw.n += e.n
	cw.put(cw.rec)
	e.n = 0
}

// appendRecord appends e's pairs as a record to rec: a merge's and a
// scrub's, which write the same records.
func appendRecord(rec []byte, enc *encoder, e *entries) []byte {
	buf := enc.encode(e, 0, e.n)
	k := len(rec)
	rec = append(rec, make([]byte, recHeader)...)
	put32(rec[k+4:], uint32(len(buf)))
	binary.LittleEndian.PutUint64(rec[k+8:], e.a[0])
	binary.LittleEndian.PutUint64(rec[k+16:], e.b[0])
	rec[k+24] = uint8(e.n - 1)
	rec = append(rec, buf...)
	put32(rec[k:], crcOf(rec[k+4:]))
	return rec
}

// finish writes what is buffered and returns the file, open for reading,
// after checking its header. On error the file is removed.
func (cw *coldWriter) finish() (*coldFile, error) {
	cw.flush()
	if cw.err == nil {
		if err := cw.w.Flush(); err != nil {
			cw.err = fmt.Errorf("follows: %s: %w", cw.path, err)
		}
	}
	cf := &coldFile{f: cw.f, path: cw.path, dir: slices.Clone(cw.dir), n: cw.n, size: cw.off}
	if cw.err == nil {
		cw.err = cf.checkHeader()
	}
	if cw.err != nil {
		cf.remove()
		return nil, cw.err
	}
	return cf, nil
}

// abort removes a file that will not be finished.
func (cw *coldWriter) abort() {
	(&coldFile{f: cw.f, path: cw.path}).remove()
}

func (cf *coldFile) checkHeader() error {
	var h [coldHeader]byte
	if _, err := cf.f.ReadAt(h[:], 0); err != nil {
		return fmt.Errorf("follows: %s: %w", cf.path, err)
	}
	if string(h[:8]) != coldMagic {
		return fmt.Errorf("%w: %s is not a cold file of the follow graph", errCold, cf.path)
	}
	if v := binary.LittleEndian.Uint32(h[8:]); v != coldVersion {
		return fmt.Errorf("%w: %s has format version %d; this build reads %d", errCold, cf.path, v, coldVersion)
	}
	return nil
}

// checkLayout verifies that the records the directory locates lie after
// the header and within the file, none over another, and that with the
// dead bytes they account for the whole file.
func (cf *coldFile) checkLayout() error {
	recs := make([]coldEntry, len(cf.dir))
	copy(recs, cf.dir)
	slices.SortFunc(recs, func(x, y coldEntry) int { return int(x.off() - y.off()) })
	end, live := int64(coldHeader), int64(coldHeader)
	for _, d := range recs {
		if d.off() < end {
			return fmt.Errorf("%s: a record at byte %d overlaps the one before, which ends at %d", cf.path, d.off(), end)
		}
		end = d.off() + int64(d.size())
		live += int64(d.size())
	}
	if end > cf.size || live+cf.dead != cf.size {
		return fmt.Errorf("%s: records up to byte %d, %d bytes of them and %d dead, in a file of %d", cf.path, end, live, cf.dead, cf.size)
	}
	return nil
}

// punchHole is punchHoleOS; a variable so that a test takes the path of
// a file system that cannot punch.
var punchHole = punchHoleOS

// coldWriteAt writes a scrub's records and zeros; a variable so that a
// test fails a write part of the way through.
var coldWriteAt = (*os.File).WriteAt

// destroy makes the n bytes at off read as zeros: a hole punched where
// the file system can, else zeros written over them. Nothing syncs them:
// a crash leaves a file that no start reads (the engine clears the cold
// directory at Open).
func (cf *coldFile) destroy(off, n int64) error {
	if punchHole(cf.f, off, n) == nil {
		return nil
	}
	zeros := make([]byte, min(n, 1<<16))
	for n > 0 {
		k := min(n, int64(len(zeros)))
		if _, err := coldWriteAt(cf.f, zeros[:k], off); err != nil {
			return fmt.Errorf("follows: %s: zeroing superseded records: %w", cf.path, err)
		}
		off, n = off+k, n-k
	}
	return nil
}

// remove closes and deletes the file.
func (cf *coldFile) remove() error {
	return errors.Join(cf.f.Close(), os.Remove(cf.path))
}

func (cf *coldFile) memoryBytes() int {
	return cap(cf.dir)*int(unsafe.Sizeof(coldEntry{})) + int(unsafe.Sizeof(*cf)) + len(cf.path)
}

func put32(b []byte, x uint32) { binary.LittleEndian.PutUint32(b, x) }

func crcOf(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }
