package tier

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"unsafe"
)

// coldWindow is a window image in a file: only its index is in memory,
// blocks are read through the block cache that tables share. Immutable
// once open, safe for concurrent use.
type coldWindow struct {
	name  string      // base name in Dir, as snapshots list it
	r     io.ReaderAt // the open file
	size  int64
	cache *Cache
	id    uint32 // the cache's name for this file's blocks
	idx   blockIndex
}

func (f *coldWindow) kind() Kind       { return Cold }
func (f *coldWindow) records() int     { return f.idx.records }
func (f *coldWindow) memoryBytes() int { return f.idx.sizeBytes() + coldWindowBytes }

var coldWindowBytes = int(unsafe.Sizeof(coldWindow{}))

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

// openCold opens the window file name in t's Dir and checks its header,
// footer and index (three reads); blocks are checked as they are read.
func (t *table) openCold(name string) (*coldWindow, error) {
	path := filepath.Join(t.dir, name)
	fh, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("tier: cold file: %w", err)
	}
	f := &coldWindow{name: name, r: fh, cache: t.cache}
	st, err := fh.Stat()
	if err != nil {
		fh.Close()
		return nil, fmt.Errorf("tier: cold file: %w", err)
	}
	f.size = st.Size()
	if err := f.readIndex(t.image); err != nil {
		fh.Close()
		return nil, err
	}
	f.id = t.cache.NewFileID()
	return f, nil
}

// readIndex reads and checks the file's header, footer and index.
func (f *coldWindow) readIndex(format imageFormat) error {
	if f.size < headerSize+footerSize {
		return corruptAt(f.name, 0, "%d bytes is too short for a window", f.size)
	}
	var hdr [headerSize]byte
	if err := f.readAt(hdr[:], 0); err != nil {
		return err
	}
	if err := checkImageHeader(hdr[:], format.tag); err != nil {
		return f.named(err)
	}
	var foot [footerSize]byte
	if err := f.readAt(foot[:], f.size-footerSize); err != nil {
		return err
	}
	ft, err := parseFooter(foot[:], f.size, format)
	if err != nil {
		return f.named(err)
	}
	raw := make([]byte, ft.blocks*uint64(format.entrySize))
	if err := f.readAt(raw, int64(ft.indexOffset)); err != nil {
		return err
	}
	f.idx, err = newBlockIndex(ft, raw, format.entrySize)
	return f.named(err)
}

// named puts the file's name in a *CorruptError.
func (f *coldWindow) named(err error) error {
	var ce *CorruptError
	if errors.As(err, &ce) {
		ce.File = f.name
	}
	return err
}

// readAt reads len(b) bytes at off; a short read is an error (a truncated
// file is damage, not zeros).
func (f *coldWindow) readAt(b []byte, off int64) error {
	n, err := f.r.ReadAt(b, off)
	if n == len(b) {
		return nil
	}
	if err == nil || err == io.EOF {
		return corruptAt(f.name, off, "short read: %d of %d bytes (truncated file?)", n, len(b))
	}
	return fmt.Errorf("tier: read %d bytes of %s at offset %d: %w", len(b), f.name, off, err)
}

func (f *coldWindow) close() error {
	if c, ok := f.r.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

// scratch is a block read buffer, pooled so that a page read from files
// does not allocate.
type scratch struct{ b []byte }

var scratchPool = sync.Pool{New: func() any { return &scratch{b: make([]byte, 0, 8<<10)} }}

// view calls fn with block b — its bytes with the CRC, checked by check
// (its checksum and header: enough to read it safely) — from the cache
// or, on a miss, read from the file with one pread into *sc (taken from
// the pool when nil), checked and cached. fn must not keep the slice.
func (f *coldWindow) view(b int, sc **scratch, check func(blk []byte) error, fn func(blk []byte)) error {
	if f.cache.View(f.id, b, fn) {
		return nil
	}
	if *sc == nil {
		*sc = scratchPool.Get().(*scratch)
	}
	off, end := f.idx.span(b)
	blk, err := f.readRaw(off, end, &(*sc).b)
	if err != nil {
		return err
	}
	if err := check(blk); err != nil {
		return corruptAt(f.name, int64(off), "block %d: %v; nothing is read from it", b, err)
	}
	f.cache.Put(f.id, b, blk)
	fn(blk)
	return nil
}

// readRaw reads bytes [off, end) of the file into *buf, grown to keep
// BlockSlack bytes of capacity past them, unchecked.
func (f *coldWindow) readRaw(off, end uint64, buf *[]byte) ([]byte, error) {
	n := int(end - off)
	if cap(*buf) < n+BlockSlack {
		*buf = make([]byte, 0, n+BlockSlack)
	}
	blk := (*buf)[:n]
	return blk, f.readAt(blk, int64(off))
}

// coldStore is a table's share of Options.Dir: its file names
// (<Prefix>-<window>-<generation>.tier, a new generation for every file
// written), the files jobs are writing, the files replaced and not yet
// closed, and the block cache.
type coldStore struct {
	dir, prefix string
	cache       *Cache
	nextGen     uint64          // generation of the next cold file
	obsolete    []*coldWindow   // replaced, closed by Collect
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
		c.cache = NewCache(max(n, 0))
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
		// What a crash left of this table's writes (createFile's
		// temporary files); other tables' files in Dir are theirs.
		if _, _, ok := parseFileName(c.prefix, tempBase(name)); ok {
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

// tempMarker is in the name of every file createFile has not finished,
// after the name it will have: no finished file has it.
const tempMarker = ".tmp-"

// tempBase returns the name a temporary file of createFile's was to
// have, or "" when name is not one.
func tempBase(name string) string {
	base, _, ok := strings.Cut(name, tempMarker)
	if !ok {
		return ""
	}
	return base
}

// createFile writes a file at path with the bytes write produces, so that
// path holds either nothing or the complete new bytes: the bytes go to a
// temporary file in the same directory, which is renamed to path. With
// sync (a table whose files are not Derived) the file is fsynced before
// the rename and the directory after it, so that this holds whatever
// happens (kill -9, power loss). A crash leaves at most a temporary file,
// which the next table of the prefix removes (openStore).
func createFile(path string, sync bool, write func(io.Writer) error) (err error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	tmp, err := os.CreateTemp(dir, base+tempMarker+"*")
	if err != nil {
		return fmt.Errorf("tier: create %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	bw := bufio.NewWriterSize(tmp, 64<<10)
	if err := write(bw); err != nil {
		return fmt.Errorf("tier: write %s: %w", tmp.Name(), err)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("tier: write %s: %w", tmp.Name(), err)
	}
	if sync {
		if err := tmp.Sync(); err != nil {
			return fmt.Errorf("tier: fsync %s: %w", tmp.Name(), err)
		}
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("tier: close %s: %w", tmp.Name(), err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("tier: rename %s: %w", tmp.Name(), err)
	}
	if !sync {
		return nil
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("tier: open directory %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("tier: fsync directory %s: %w", dir, err)
	}
	return nil
}

// discard closes and deletes a file of dir a job wrote and will not
// install.
func (f *coldWindow) discard(dir string) {
	f.close()
	os.Remove(filepath.Join(dir, f.name))
}
