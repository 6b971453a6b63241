package tier

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/tally-dev/tally/engine/cold"
	"github.com/tally-dev/tally/engine/sealed"
)

// coldFile is a window in a file: only its block index is in memory
// (16 bytes per block), blocks are read through the shared cold.Cache.
// Immutable once open, safe for concurrent use.
type coldFile struct {
	name  string // base name, as snapshots list it
	path  string
	r     io.ReaderAt
	fh    *os.File
	size  int64
	idx   sealed.Index
	sh    shape
	cache *cold.Cache
	id    uint32 // the cache's name for this file's blocks
}

// fileName is the name of generation gen of window num's file.
func fileName(prefix string, num int64, gen uint64) string {
	return fmt.Sprintf("%s-%d-%d.tier", prefix, num, gen)
}

// parseFileName returns the window and generation of a name fileName made.
func parseFileName(prefix, name string) (num int64, gen uint64, ok bool) {
	rest, ok := strings.CutPrefix(name, prefix+"-")
	if !ok {
		return 0, 0, false
	}
	rest, ok = strings.CutSuffix(rest, ".tier")
	if !ok {
		return 0, 0, false
	}
	i := strings.LastIndexByte(rest, '-')
	if i <= 0 {
		return 0, 0, false
	}
	num, err1 := strconv.ParseInt(rest[:i], 10, 64)
	gen, err2 := strconv.ParseUint(rest[i+1:], 10, 64)
	return num, gen, err1 == nil && err2 == nil
}

// openCold opens the window file dir/name and checks its header, footer
// and index; blocks are checked as they are read.
func openCold(dir, name string, tag [4]byte, sh shape, cache *cold.Cache) (*coldFile, error) {
	path := filepath.Join(dir, name)
	fh, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("tier: cold file: %w", err)
	}
	st, err := fh.Stat()
	if err != nil {
		fh.Close()
		return nil, fmt.Errorf("tier: cold file: %w", err)
	}
	f, err := newColdFile(fh, st.Size(), name, tag, sh, cache)
	if err != nil {
		fh.Close()
		return nil, err
	}
	f.path, f.fh = path, fh
	return f, nil
}

func newColdFile(r io.ReaderAt, size int64, name string, tag [4]byte, sh shape, cache *cold.Cache) (*coldFile, error) {
	f := &coldFile{name: name, r: r, size: size, sh: sh, cache: cache, id: cache.NewFileID()}
	if size < headerSize+footerSize {
		return nil, corruptAt(name, 0, "%d bytes is too short for a window", size)
	}
	var hdr [headerSize]byte
	if err := f.readAt(hdr[:], 0); err != nil {
		return nil, err
	}
	if err := checkWindowHeader(hdr[:], tag, sh); err != nil {
		return nil, f.named(err)
	}
	var foot [footerSize]byte
	if err := f.readAt(foot[:], size-footerSize); err != nil {
		return nil, err
	}
	ft, err := parseFooter(foot[:], size)
	if err != nil {
		return nil, f.named(err)
	}
	raw := make([]byte, ft.Blocks*entrySize)
	if err := f.readAt(raw, int64(ft.IndexOffset)); err != nil {
		return nil, err
	}
	if f.idx, err = sealed.NewIndex(ft, raw); err != nil {
		return nil, corruptAt(name, int64(ft.IndexOffset), "%v", err)
	}
	return f, nil
}

func (f *coldFile) named(err error) error {
	var ce *CorruptError
	if errors.As(err, &ce) {
		ce.File = f.name
	}
	return err
}

// readAt reads len(b) bytes at off; a short read is an error (a truncated
// file is damage, not zeros).
func (f *coldFile) readAt(b []byte, off int64) error {
	n, err := f.r.ReadAt(b, off)
	if n == len(b) {
		return nil
	}
	if err == nil || err == io.EOF {
		return corruptAt(f.name, off, "short read: %d of %d bytes (truncated file?)", n, len(b))
	}
	return fmt.Errorf("tier: read %d bytes of %s at offset %d: %w", len(b), f.name, off, err)
}

func (f *coldFile) close() error {
	if f.fh != nil {
		return f.fh.Close()
	}
	return nil
}

type scratch struct{ b []byte }

var scratchPool = sync.Pool{New: func() any { return &scratch{b: make([]byte, 0, 8<<10)} }}

// readBlock reads block b from disk into sc (with BlockSlack of capacity
// past it) and checks it: checksum, then header. The block is then cached.
func (f *coldFile) readBlock(b int, sc *scratch) ([]byte, error) {
	first, off, end := f.idx.Block(b)
	n := int(end - off)
	if cap(sc.b) < n+BlockSlack {
		sc.b = make([]byte, 0, n+BlockSlack)
	}
	blk := sc.b[:n]
	if err := f.readAt(blk, int64(off)); err != nil {
		return nil, err
	}
	if err := checkBlock(first, blk, f.sh); err != nil {
		return nil, corruptAt(f.name, int64(off), "block %d: %v; nothing is read from it", b, err)
	}
	f.cache.Put(f.id, b, blk)
	return blk, nil
}

// memoryBytes is what the file keeps in memory: its index.
func (f *coldFile) memoryBytes() int { return f.idx.SizeBytes() }

// verify reads and decodes every block.
func (f *coldFile) verify() error {
	var sc scratch
	return verifyBlocks(&f.idx, f.sh, f.name, func(b int) ([]byte, error) {
		_, off, end := f.idx.Block(b)
		if cap(sc.b) < int(end-off)+BlockSlack {
			sc.b = make([]byte, 0, int(end-off)+BlockSlack)
		}
		blk := sc.b[:end-off]
		return blk, f.readAt(blk, int64(off))
	})
}

// VerifyFiles reads every block of every cold file the tier uses and
// checks it as Load checks a sealed window (checksum, structure,
// contents, id order, the footer's totals): a scrub that finds damage
// before a read does. It only reads: it may run under the read lock.
func (t *Tier[R]) VerifyFiles() error {
	for _, w := range t.wins {
		if b, ok := w.body.(*coldBody); ok {
			if err := b.f.verify(); err != nil {
				return err
			}
		}
	}
	return nil
}
