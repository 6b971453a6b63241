package registry

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/tally-dev/tally/engine/bitpack"
	"github.com/tally-dev/tally/engine/cold"
)

// A cold file is one sealed window on disk (format version 1). Fixed-size
// integers are little-endian.
//
//	file   = header block* index footer
//	header = "TLYREGCW" | version uint32 (1) | CRC32C of the 12 bytes before uint32
//	block  = the block's bytes (run's format, see run) | CRC32C of them uint32
//	index  = per block: first id uint64 | file offset of the block uint64
//	footer = window number uint64 | first id of the window uint64 |
//	         last id of the window uint64 | posts uint64 | blocks uint64 |
//	         index offset uint64 | CRC32C(index) uint32 |
//	         CRC32C of the 52 footer bytes before it uint32
//
// The blocks are exactly those of the in-memory run, so cooling a window
// copies bytes and the serialized registry (persist.go) writes a cold
// window back as a sealed run without re-encoding it. Open reads the
// header, footer and index (three reads) and checks them: offsets
// increasing from the header to the index, first ids increasing within
// the window; only the index stays in memory (16 bytes a block, 0.125 a
// post). A block is read with one pread (a page's adjacent blocks with
// one), and its checksum and header are checked before it is used or
// cached (checkHeader: every read a lookup does stays in the block), so
// a damaged block is an error wrapping ErrCorrupt, never a wrong author.
// Sequential reads (Range, compaction, snapshots) bypass the cache and
// check every record (checkBlock).
//
// A file is never rewritten: a compaction writes the next generation
// (rg-<window>-<generation>.win, via cold.Create: temporary file, fsync,
// rename) and the old one is deleted once nothing reads it (refs).
const (
	coldMagic     = "TLYREGCW"
	coldVersion   = 1
	coldHeader    = 16
	coldFooter    = 56
	coldIndexEnt  = 16
	coldMinBlock  = 6 + 4 // smallest block (checkHeader) and its CRC
	coldReadChunk = 1 << 20
	// maxRun bounds one pread of adjacent blocks in a multi-get.
	maxRun = 128 << 10
)

var (
	castagnoli = crc32.MakeTable(crc32.Castagnoli)
	le         = binary.LittleEndian
)

// The cache hands blocks over with slack past their end; lookups read
// with bitpack.Get, which needs bitpack.Slack of it. (A compile error here
// means cold's slack shrank below bitpack's.)
const _ = uint(cold.ViewSlack - bitpack.Slack)

// coldFile is an open cold file: its block index in memory, its blocks on
// disk. Reads may run concurrently (pread and the cache are safe for
// that). refs counts the registry's hold (1 while a window uses it) plus
// running jobs and snapshots reading it: the file is closed, and deleted
// if superseded, when the last lets go.
type coldFile struct {
	f        *os.File
	path     string
	cache    *cold.Cache
	id       uint32 // the file's key space in the cache
	lo, last uint64
	firsts   []uint64 // first id of each block
	offs     []uint64 // file offset of each block, then of the index
	n        int
	size     int64

	refs     atomic.Int32
	obsolete atomic.Bool // delete at the last release
}

// coldName is the name of generation gen of window num's file.
func coldName(num int64, gen uint64) string { return fmt.Sprintf("rg-%d-%d.win", num, gen) }

// isColdName reports whether name is one the registry makes, a file or
// cold.Create's temporary file for one.
func isColdName(name string) bool {
	rest, ok := strings.CutPrefix(name, "rg-")
	if !ok {
		return false
	}
	if i := strings.Index(rest, ".win"); i > 0 {
		num, gen, ok := strings.Cut(rest[:i], "-")
		if !ok {
			return false
		}
		_, e1 := strconv.ParseInt(num, 10, 64)
		_, e2 := strconv.ParseUint(gen, 10, 64)
		return e1 == nil && e2 == nil && (rest[i:] == ".win" || strings.HasPrefix(rest[i:], ".win.coldtmp-"))
	}
	return false
}

// clearDir deletes the registry's files from dir: they are derived data,
// rebuilt from the serialized registry.
func clearDir(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("registry: %w", err)
	}
	for _, e := range ents {
		if e.Type().IsRegular() && isColdName(e.Name()) {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("registry: %w", err)
			}
		}
	}
	return nil
}

// coldWriter writes a cold file's blocks as a builder packs them, then
// its index and footer.
type coldWriter struct {
	w      io.Writer
	off    uint64
	firsts []uint64
	offs   []uint64
	err    error
	b      []byte
}

func newColdWriter(w io.Writer) *coldWriter {
	cw := &coldWriter{w: w}
	h := append([]byte(coldMagic), 0, 0, 0, 0)
	le.PutUint32(h[8:], coldVersion)
	cw.write(le.AppendUint32(h, crc32.Checksum(h, castagnoli)))
	return cw
}

func (cw *coldWriter) write(b []byte) {
	if cw.err == nil {
		_, cw.err = cw.w.Write(b)
		cw.off += uint64(len(b))
	}
}

func (cw *coldWriter) add(first uint64, blk []byte) {
	cw.firsts = append(cw.firsts, first)
	cw.offs = append(cw.offs, cw.off)
	cw.write(blk)
	cw.write(le.AppendUint32(cw.b[:0], crc32.Checksum(blk, castagnoli)))
}

func (cw *coldWriter) finish(num int64, lo, last uint64, posts int) error {
	idxOff := cw.off
	idx := make([]byte, 0, len(cw.firsts)*coldIndexEnt)
	for i, f := range cw.firsts {
		idx = le.AppendUint64(le.AppendUint64(idx, f), cw.offs[i])
	}
	cw.write(idx)
	var f []byte
	for _, v := range []uint64{uint64(num), lo, last, uint64(posts), uint64(len(cw.firsts)), idxOff} {
		f = le.AppendUint64(f, v)
	}
	f = le.AppendUint32(f, crc32.Checksum(idx, castagnoli))
	cw.write(le.AppendUint32(f, crc32.Checksum(f, castagnoli)))
	return cw.err
}

// writeCold writes the posts fill adds (in id order) to a new cold file
// at path and opens it.
func writeCold(path string, cache *cold.Cache, num int64, lo, last uint64, fill func(b *builder)) (*coldFile, error) {
	err := cold.Create(path, func(out io.Writer) error {
		cw := newColdWriter(out)
		b := newBuilder()
		b.sink = cw
		fill(b)
		b.flushBlock()
		return cw.finish(num, lo, last, b.r.n)
	})
	if err != nil {
		return nil, err
	}
	return openCold(path, cache, num, lo, last)
}

// copyCold writes run r as window num's cold file at path, block bytes
// as they are, and opens it.
func copyCold(path string, cache *cold.Cache, num int64, lo, last uint64, r *run) (*coldFile, error) {
	err := cold.Create(path, func(out io.Writer) error {
		cw := newColdWriter(out)
		for i, first := range r.firsts {
			cw.add(first, r.block(i))
		}
		return cw.finish(num, lo, last, r.n)
	})
	if err != nil {
		return nil, err
	}
	return openCold(path, cache, num, lo, last)
}

// openCold opens window num's file at path and checks its header, footer
// and index.
func openCold(path string, cache *cold.Cache, num int64, lo, last uint64) (cf *coldFile, err error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("registry: %w", err)
	}
	defer func() {
		if err != nil {
			fh.Close()
		}
	}()
	st, err := fh.Stat()
	if err != nil {
		return nil, fmt.Errorf("registry: %w", err)
	}
	cf = &coldFile{f: fh, path: path, cache: cache, id: cache.NewFileID(), lo: lo, last: last, size: st.Size()}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: cold file %s: %s", ErrCorrupt, path, fmt.Sprintf(format, args...))
	}
	if cf.size < coldHeader+coldFooter {
		return nil, bad("%d bytes", cf.size)
	}
	var h [coldHeader]byte
	if err := cf.readAt(h[:], 0); err != nil {
		return nil, err
	}
	if string(h[:8]) != coldMagic || le.Uint32(h[8:]) != coldVersion || crc32.Checksum(h[:12], castagnoli) != le.Uint32(h[12:]) {
		return nil, bad("bad header")
	}
	var f [coldFooter]byte
	if err := cf.readAt(f[:], cf.size-coldFooter); err != nil {
		return nil, err
	}
	if crc32.Checksum(f[:52], castagnoli) != le.Uint32(f[52:]) {
		return nil, bad("footer checksum mismatch")
	}
	fnum, flo, flast, posts, blocks, idxOff := le.Uint64(f[0:]), le.Uint64(f[8:]), le.Uint64(f[16:]), le.Uint64(f[24:]), le.Uint64(f[32:]), le.Uint64(f[40:])
	switch {
	case int64(fnum) != num || flo != lo || flast != last:
		return nil, bad("holds window %d [%d, %d], want %d [%d, %d]", int64(fnum), flo, flast, num, lo, last)
	case blocks == 0 || blocks > uint64(cf.size)/coldMinBlock || posts < blocks || posts > blocks*BlockPosts:
		return nil, bad("%d posts in %d blocks", posts, blocks)
	case idxOff < coldHeader || idxOff+blocks*coldIndexEnt+coldFooter != uint64(cf.size):
		return nil, bad("index at %d of %d blocks in %d bytes", idxOff, blocks, cf.size)
	}
	idx := make([]byte, blocks*coldIndexEnt)
	if err := cf.readAt(idx, int64(idxOff)); err != nil {
		return nil, err
	}
	if crc32.Checksum(idx, castagnoli) != le.Uint32(f[48:]) {
		return nil, bad("index checksum mismatch")
	}
	cf.firsts = make([]uint64, blocks)
	cf.offs = make([]uint64, blocks+1)
	for i := range cf.firsts {
		first, off := le.Uint64(idx[16*i:]), le.Uint64(idx[16*i+8:])
		prevEnd := uint64(coldHeader)
		if i > 0 {
			prevEnd = cf.offs[i-1] + coldMinBlock
		}
		switch {
		case first < lo || first > last || (i > 0 && first <= cf.firsts[i-1]):
			return nil, bad("block %d's first id %d out of order or outside the window", i, first)
		case (i == 0 && off != coldHeader) || off < prevEnd:
			return nil, bad("block %d at offset %d", i, off)
		}
		cf.firsts[i], cf.offs[i] = first, off
	}
	if idxOff < cf.offs[blocks-1]+coldMinBlock {
		return nil, bad("last block runs into the index")
	}
	cf.offs[blocks] = idxOff
	cf.n = int(posts)
	cf.refs.Store(1)
	return cf, nil
}

func (cf *coldFile) readAt(b []byte, off int64) error {
	n, err := cf.f.ReadAt(b, off)
	if n == len(b) {
		return nil
	}
	if err == nil || err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return fmt.Errorf("registry: read %d bytes of %s at offset %d: %w", len(b), cf.path, off, err)
}

func (cf *coldFile) acquire() { cf.refs.Add(1) }

// release lets go of one hold; the last closes the file and, if it was
// superseded, deletes it.
func (cf *coldFile) release() {
	if cf.refs.Add(-1) == 0 {
		cf.f.Close()
		if cf.obsolete.Load() {
			os.Remove(cf.path)
		}
	}
}

func (cf *coldFile) memoryBytes() int {
	return 8*cap(cf.firsts) + 8*cap(cf.offs) + len(cf.path) + 112
}

// blockBytes returns block b's bytes within buf, which holds the file
// from offset base, after checking its checksum and header.
func (cf *coldFile) blockBytes(buf []byte, base uint64, b int) ([]byte, error) {
	start, end := cf.offs[b]-base, cf.offs[b+1]-base-4
	blk := buf[start:end]
	if crc32.Checksum(blk, castagnoli) != le.Uint32(buf[end:]) {
		return nil, fmt.Errorf("%w: cold file %s: block %d at offset %d fails its checksum", ErrCorrupt, cf.path, b, cf.offs[b])
	}
	if err := checkHeader(blk); err != nil {
		return nil, fmt.Errorf("%w: cold file %s: block %d at offset %d: %v", ErrCorrupt, cf.path, b, cf.offs[b], err)
	}
	return blk, nil
}

// scratch is a pread buffer with bitpack.Slack spare capacity, pooled so
// that a cache miss allocates nothing in the steady state.
type scratch struct{ b []byte }

var scratchPool = sync.Pool{New: func() any { return &scratch{b: make([]byte, 0, 8<<10)} }}

func (s *scratch) get(n int) []byte {
	if cap(s.b) < n+bitpack.Slack {
		s.b = make([]byte, 0, n+bitpack.Slack)
	}
	return s.b[:n]
}

// get returns id's author from its block: the cached copy, or one pread.
func (cf *coldFile) get(id uint64) (uint64, bool, error) {
	b := bitpack.LastAtMost(cf.firsts, id)
	if b < 0 {
		return 0, false, nil
	}
	var a uint64
	var ok bool
	if cf.cache.View(cf.id, b, func(blk []byte) {
		var k blockView
		k.parse(cf.firsts[b], blk)
		a, ok = k.get(id)
	}) {
		return a, ok, nil
	}
	sc := scratchPool.Get().(*scratch)
	defer scratchPool.Put(sc)
	buf := sc.get(int(cf.offs[b+1] - cf.offs[b]))
	if err := cf.readAt(buf, int64(cf.offs[b])); err != nil {
		return 0, false, err
	}
	blk, err := cf.blockBytes(buf, cf.offs[b], b)
	if err != nil {
		return 0, false, err
	}
	cf.cache.Put(cf.id, b, blk)
	var k blockView
	k.parse(cf.firsts[b], blk)
	a, ok = k.get(id)
	return a, ok, nil
}

// blocks calls fn with every block in order, read sequentially in large
// preads that bypass the cache, each checked completely (checkBlock).
func (cf *coldFile) blocks(fn func(first uint64, blk []byte) bool) (bool, error) {
	var buf []byte
	var prev uint64
	posts := 0
	for b := 0; b < len(cf.firsts); {
		e := b + 1
		for e < len(cf.firsts) && cf.offs[e+1]-cf.offs[b] <= coldReadChunk {
			e++
		}
		n := int(cf.offs[e] - cf.offs[b])
		if cap(buf) < n+bitpack.Slack {
			buf = make([]byte, 0, n+bitpack.Slack)
		}
		buf = buf[:n]
		if err := cf.readAt(buf, int64(cf.offs[b])); err != nil {
			return false, err
		}
		base := cf.offs[b]
		for ; b < e; b++ {
			blk, err := cf.blockBytes(buf, base, b)
			if err != nil {
				return false, err
			}
			k, lastID, err := checkBlock(cf.firsts[b], blk, cf.lo, cf.last, prev, b > 0)
			if err != nil {
				return false, fmt.Errorf("%w: cold file %s: block %d: %v", ErrCorrupt, cf.path, b, err)
			}
			posts += k
			prev = lastID
			if !fn(cf.firsts[b], blk) {
				return false, nil
			}
		}
	}
	if posts != cf.n {
		return false, fmt.Errorf("%w: cold file %s holds %d posts, its footer says %d", ErrCorrupt, cf.path, posts, cf.n)
	}
	return true, nil
}

// each calls fn for every post in id order (see blocks).
func (cf *coldFile) each(fn func(id, author uint64) bool) (bool, error) {
	var k blockView
	return cf.blocks(func(first uint64, blk []byte) bool {
		k.parse(first, blk)
		for j := range k.n {
			if !fn(k.id(j), k.author(j)) {
				return false
			}
		}
		return true
	})
}

// coldPage collects the cold lookups of one GetMany chunk: (file, block,
// post) triples, answered a block at a time.
type coldPage struct {
	n int
	p [pageChunk]coldPend
}

type coldPend struct {
	f   *coldFile
	blk int32
	j   int32 // index of the post in the chunk
}

func (c *coldPage) add(f *coldFile, b, j int) {
	c.p[c.n] = coldPend{f, int32(b), int32(j)}
	c.n++
}

func (p *coldPend) before(q *coldPend) bool {
	return p.f.id < q.f.id || (p.f.id == q.f.id && p.blk < q.blk)
}

// answer looks the posts pend up in block blk (checked).
func answer(first uint64, blk []byte, pend []coldPend, ids, authors []uint64, found []bool) {
	var k blockView
	k.parse(first, blk)
	for _, p := range pend {
		authors[p.j], found[p.j] = k.get(ids[p.j])
	}
}

// read answers the collected posts: it sorts them by file and block
// (insertion sort: a page's worth, no allocation), serves each block the
// cache holds in place, then reads the missing ones in file order, one
// pread per run of adjacent blocks of a file (up to maxRun bytes), checks
// and caches them.
func (c *coldPage) read(ids, authors []uint64, found []bool) error {
	p := c.p[:c.n]
	for i := 1; i < len(p); i++ {
		for j := i; j > 0 && p[j].before(&p[j-1]); j-- {
			p[j], p[j-1] = p[j-1], p[j]
		}
	}
	type group struct{ s, e int }
	var miss [pageChunk]group
	nm := 0
	for s := 0; s < len(p); {
		e := s + 1
		for e < len(p) && p[e].f == p[s].f && p[e].blk == p[s].blk {
			e++
		}
		f, b := p[s].f, int(p[s].blk)
		if !f.cache.View(f.id, b, func(blk []byte) { answer(f.firsts[b], blk, p[s:e], ids, authors, found) }) {
			miss[nm] = group{s, e}
			nm++
		}
		s = e
	}
	if nm == 0 {
		return nil
	}
	sc := scratchPool.Get().(*scratch)
	defer scratchPool.Put(sc)
	for m := 0; m < nm; {
		f, b0 := p[miss[m].s].f, int(p[miss[m].s].blk)
		r, bEnd := m+1, b0
		for r < nm {
			q := &p[miss[r].s]
			if q.f != f || int(q.blk) != bEnd+1 || f.offs[q.blk+1]-f.offs[b0] > maxRun {
				break
			}
			bEnd++
			r++
		}
		base := f.offs[b0]
		buf := sc.get(int(f.offs[bEnd+1] - base))
		if err := f.readAt(buf, int64(base)); err != nil {
			return err
		}
		for ; m < r; m++ {
			g := miss[m]
			b := int(p[g.s].blk)
			blk, err := f.blockBytes(buf, base, b)
			if err != nil {
				return err
			}
			f.cache.Put(f.id, b, blk)
			answer(f.firsts[b], blk, p[g.s:g.e], ids, authors, found)
		}
	}
	return nil
}

// removeQuiet deletes a file a failed job may have left; a file that is
// not there is what we want.
func removeQuiet(path string) { os.Remove(path) }
