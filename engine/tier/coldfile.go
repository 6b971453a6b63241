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

// coldBase is what every cold window file has, whatever its codec: the
// open file, its name (as snapshots list it), size and the shared block
// cache's id for its blocks. Immutable once open, safe for concurrent use.
type coldBase struct {
	name  string // base name, as snapshots list it
	path  string
	r     io.ReaderAt
	fh    *os.File
	size  int64
	cache *cold.Cache
	id    uint32 // the cache's name for this file's blocks
}

// coldFile is a post table's window in a file: only its block index is
// in memory (16 bytes per block), blocks are read through the shared
// cold.Cache.
type coldFile struct {
	coldBase
	idx sealed.Index
	sh  shape
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

// openFile opens the window file dir/name and hands it to parse, which
// reads and checks what the codec keeps in memory (header, footer,
// index); the file is closed if parse fails.
func openFile(dir, name string, parse func(r io.ReaderAt, size int64) error) (*os.File, error) {
	path := filepath.Join(dir, name)
	fh, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("tier: cold file: %w", err)
	}
	st, err := fh.Stat()
	if err == nil {
		err = parse(fh, st.Size())
	} else {
		err = fmt.Errorf("tier: cold file: %w", err)
	}
	if err != nil {
		fh.Close()
		return nil, err
	}
	return fh, nil
}

// openCold opens the window file dir/name and checks its header, footer
// and index; blocks are checked as they are read.
func openCold(dir, name string, tag [4]byte, sh shape, cache *cold.Cache) (*coldFile, error) {
	var f *coldFile
	fh, err := openFile(dir, name, func(r io.ReaderAt, size int64) (err error) {
		f, err = newColdFile(r, size, name, tag, sh, cache)
		return err
	})
	if err != nil {
		return nil, err
	}
	f.path, f.fh = filepath.Join(dir, name), fh
	return f, nil
}

// readEnds reads and checks the window file's header (under tag and sh)
// and its footer's 56 bytes, which it returns unparsed.
func (f *coldBase) readEnds(tag [4]byte, sh shape) ([footerSize]byte, error) {
	var foot [footerSize]byte
	if f.size < headerSize+footerSize {
		return foot, corruptAt(f.name, 0, "%d bytes is too short for a window", f.size)
	}
	var hdr [headerSize]byte
	if err := f.readAt(hdr[:], 0); err != nil {
		return foot, err
	}
	if err := checkWindowHeader(hdr[:], tag, sh); err != nil {
		return foot, f.named(err)
	}
	return foot, f.readAt(foot[:], f.size-footerSize)
}

func newColdFile(r io.ReaderAt, size int64, name string, tag [4]byte, sh shape, cache *cold.Cache) (*coldFile, error) {
	f := &coldFile{coldBase: coldBase{name: name, r: r, size: size, cache: cache, id: cache.NewFileID()}, sh: sh}
	foot, err := f.readEnds(tag, sh)
	if err != nil {
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

func (f *coldBase) named(err error) error {
	var ce *CorruptError
	if errors.As(err, &ce) {
		ce.File = f.name
	}
	return err
}

// readAt reads len(b) bytes at off; a short read is an error (a truncated
// file is damage, not zeros).
func (f *coldBase) readAt(b []byte, off int64) error {
	n, err := f.r.ReadAt(b, off)
	if n == len(b) {
		return nil
	}
	if err == nil || err == io.EOF {
		return corruptAt(f.name, off, "short read: %d of %d bytes (truncated file?)", n, len(b))
	}
	return fmt.Errorf("tier: read %d bytes of %s at offset %d: %w", len(b), f.name, off, err)
}

func (f *coldBase) close() error {
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
	return f.readChecked(b, off, end, sc, func(blk []byte) error { return checkBlock(first, blk, f.sh) })
}

// readChecked reads block b, bytes [off, end) of the file, into sc (with
// BlockSlack of capacity past it), checks it with check (checksum and
// header: enough to read it safely) and caches it.
func (f *coldBase) readChecked(b int, off, end uint64, sc *scratch, check func(blk []byte) error) ([]byte, error) {
	blk, err := f.readRaw(off, end, &sc.b)
	if err != nil {
		return nil, err
	}
	if err := check(blk); err != nil {
		return nil, corruptAt(f.name, int64(off), "block %d: %v; nothing is read from it", b, err)
	}
	f.cache.Put(f.id, b, blk)
	return blk, nil
}

// readRaw reads bytes [off, end) of the file into *buf, grown to keep
// BlockSlack bytes of capacity past them, unchecked.
func (f *coldBase) readRaw(off, end uint64, buf *[]byte) ([]byte, error) {
	n := int(end - off)
	if cap(*buf) < n+BlockSlack {
		*buf = make([]byte, 0, n+BlockSlack)
	}
	blk := (*buf)[:n]
	return blk, f.readAt(blk, int64(off))
}

// memoryBytes is what the file keeps in memory: its index.
func (f *coldFile) memoryBytes() int { return f.idx.SizeBytes() }

// verify reads and decodes every block.
func (f *coldFile) verify() error {
	var buf []byte
	return verifyBlocks(&f.idx, f.sh, f.name, func(b int) ([]byte, error) {
		_, off, end := f.idx.Block(b)
		return f.readRaw(off, end, &buf)
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

// coldStore is a table's share of Options.Dir: its file names
// (<Prefix>-<window>-<generation>.tier, a new generation for every file
// written), the files jobs are writing, the files replaced and not yet
// closed, and the block cache. A post table and a set have one each.
type coldStore struct {
	dir, prefix string
	cache       *cold.Cache
	nextGen     uint64          // generation of the next cold file
	obsolete    []*coldBase     // replaced, closed by Collect
	pending     map[string]bool // files planned jobs write
}

// openStore prepares Dir (when set): creates it, takes the cache, skips
// the generations found there (a new file never takes the name of one a
// kept snapshot lists) and removes what a crash left of this prefix's
// writes.
func (c *coldStore) openStore(opts Options) error {
	c.dir, c.prefix = opts.Dir, opts.Prefix
	if opts.Dir == "" {
		return nil
	}
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return fmt.Errorf("tier: %w", err)
	}
	c.cache = opts.Cache
	if c.cache == nil {
		n := opts.ColdCacheBytes
		if n == 0 {
			n = DefaultColdCacheBytes
		}
		c.cache = cold.NewCache(max(n, 0))
	}
	ents, err := os.ReadDir(opts.Dir)
	if err != nil {
		return fmt.Errorf("tier: %w", err)
	}
	for _, e := range ents {
		name := e.Name()
		if _, gen, ok := parseFileName(c.prefix, name); ok {
			c.nextGen = max(c.nextGen, gen+1)
		}
		// What a crash left of this tier's writes (cold.Create's
		// temporary files, TestNewCleansOwnTemp checks the name);
		// other stores' files in Dir are theirs.
		if i := strings.Index(name, ".tier.coldtmp-"); i > 0 && strings.HasPrefix(name, c.prefix+"-") {
			if err := os.Remove(filepath.Join(opts.Dir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("tier: %w", err)
			}
		}
	}
	return nil
}

// planFile names the next generation of window num's file and marks it
// pending until a job's Finish (doneFile).
func (c *coldStore) planFile(num int64) string {
	name := fileName(c.prefix, num, c.nextGen)
	c.nextGen++
	if c.pending == nil {
		c.pending = map[string]bool{}
	}
	c.pending[name] = true
	return name
}

func (c *coldStore) doneFile(name string) { delete(c.pending, name) }

// collect closes the replaced files and deletes from Dir every file of
// the prefix that used (the table's files), a pending job or keep do not
// name.
func (c *coldStore) collect(keep, used []string) error {
	for _, f := range c.obsolete {
		f.close()
	}
	c.obsolete = nil
	if c.dir == "" {
		return nil
	}
	names := map[string]bool{}
	for _, n := range keep {
		names[n] = true
	}
	for _, n := range used {
		names[n] = true
	}
	for n := range c.pending {
		names[n] = true
	}
	ents, err := os.ReadDir(c.dir)
	if err != nil {
		return fmt.Errorf("tier: %w", err)
	}
	var errs []error
	for _, e := range ents {
		if _, _, ok := parseFileName(c.prefix, e.Name()); ok && !names[e.Name()] {
			if err := os.Remove(filepath.Join(c.dir, e.Name())); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// cacheBytes is the memory the block cache holds (0 without a cold tier).
func (c *coldStore) cacheBytes() int64 {
	if c.cache == nil {
		return 0
	}
	return int64(c.cache.SizeBytes())
}

// closeObsolete closes the replaced files (Close).
func (c *coldStore) closeObsolete() error {
	var errs []error
	for _, f := range c.obsolete {
		errs = append(errs, f.close())
	}
	c.obsolete = nil
	return errors.Join(errs...)
}

// discardFile closes and deletes a file a job wrote and will not install.
func discardFile(f *coldBase) {
	f.close()
	os.Remove(f.path)
}
