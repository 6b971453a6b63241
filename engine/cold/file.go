package cold

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/sealed"
)

var le = binary.LittleEndian

// maxRun bounds the bytes one read may cover when a multi-get needs
// adjacent blocks: they are fetched with one pread rather than one each.
const maxRun = 128 << 10

// File is a sealed window on disk. Only its block index is in memory;
// lookups read the blocks they need, through the shared Cache. A File is
// safe for concurrent use.
type File struct {
	name    string
	r       io.ReaderAt
	closer  io.Closer
	size    int64
	idx     sealed.Index
	cache   *Cache
	id      uint32
	nreads  atomic.Uint64
	nbytes  atomic.Uint64
	nblocks atomic.Uint64
}

// Open opens the window file at path. It reads the header, the footer
// and the index, and checks their checksums; blocks are checked as they
// are read.
func Open(path string, cache *Cache) (*File, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	st, err := fh.Stat()
	if err != nil {
		fh.Close()
		return nil, err
	}
	f, err := NewFile(fh, st.Size(), path, cache)
	if err != nil {
		fh.Close()
		return nil, err
	}
	f.closer = fh
	return f, nil
}

// NewFile opens a window stored in r (size bytes) under the name used in
// errors. Open uses it with an *os.File; tests pass a ReaderAt that
// counts reads or injects faults. cache may be shared by many files.
func NewFile(r io.ReaderAt, size int64, name string, cache *Cache) (*File, error) {
	if cache == nil {
		cache = NewCache(0)
	}
	f := &File{name: name, r: r, size: size, cache: cache, id: cache.fileID()}
	if size < sealed.HeaderSize+sealed.FooterSize {
		return nil, f.corrupt(0, fmt.Sprintf("%d bytes is too short for a sealed window", size))
	}
	var hdr [sealed.HeaderSize]byte
	if err := f.readAt(hdr[:], 0); err != nil {
		return nil, err
	}
	if err := sealed.CheckHeader(hdr[:]); err != nil {
		return nil, f.wrap(err)
	}
	var foot [sealed.FooterSize]byte
	if err := f.readAt(foot[:], size-sealed.FooterSize); err != nil {
		return nil, err
	}
	ft, err := sealed.ParseFooter(foot[:], size)
	if err != nil {
		return nil, f.wrap(err)
	}
	raw := make([]byte, ft.Blocks*sealed.IndexEntrySize)
	if err := f.readAt(raw, int64(ft.IndexOffset)); err != nil {
		return nil, err
	}
	if f.idx, err = sealed.NewIndex(ft, raw); err != nil {
		return nil, f.wrap(err)
	}
	return f, nil
}

// wrap names the file in a *sealed.CorruptError.
func (f *File) wrap(err error) error {
	var ce *sealed.CorruptError
	if errors.As(err, &ce) {
		ce.File = f.name
	}
	return err
}

func (f *File) corrupt(off int64, reason string) error {
	return &sealed.CorruptError{File: f.name, Offset: off, Reason: reason}
}

func (f *File) readAt(b []byte, off int64) error {
	f.nreads.Add(1)
	f.nbytes.Add(uint64(len(b)))
	n, err := f.r.ReadAt(b, off)
	if n == len(b) {
		return nil
	}
	if err == nil || err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return fmt.Errorf("cold: read %d bytes of %s at offset %d: %w", len(b), f.name, off, err)
}

// Close closes the file. Its blocks stay in the cache until evicted; they
// are never found again, since a reopened file gets a new id.
func (f *File) Close() error {
	if f.closer != nil {
		return f.closer.Close()
	}
	return nil
}

// Name returns the file's name as given to Open or NewFile.
func (f *File) Name() string { return f.name }

// Len returns the number of posts in the file.
func (f *File) Len() int { return f.idx.Posts() }

// Size returns the file's size in bytes.
func (f *File) Size() int64 { return f.size }

// Index returns the file's block index.
func (f *File) Index() *sealed.Index { return &f.idx }

// MemoryBytes returns the memory the open file holds (its index).
func (f *File) MemoryBytes() int { return f.idx.SizeBytes() }

// ReadStats count a file's reads since it was opened.
type ReadStats struct {
	Reads  uint64 // preads issued, header, footer and index included
	Bytes  uint64 // bytes those reads asked for
	Blocks uint64 // blocks fetched for lookups (a read may fetch several)
}

// ReadStats returns the file's read counters.
func (f *File) ReadStats() ReadStats {
	return ReadStats{Reads: f.nreads.Load(), Bytes: f.nbytes.Load(), Blocks: f.nblocks.Load()}
}

// scratch is a read buffer with the slack sealed.ParseBlock needs. Pooled:
// a miss then allocates nothing in the steady state.
type scratch struct{ b []byte }

var scratchPool = sync.Pool{New: func() any { return &scratch{b: make([]byte, 0, 4<<10)} }}

// Get returns the counts of post id; a post the file does not hold reads
// as zeros.
func (f *File) Get(id uint64) (engine.Counts, error) {
	ids := [1]uint64{id}
	var out [1]engine.Counts
	err := f.GetMany(ids[:], out[:])
	return out[0], err
}

// GetMany stores the counts of ids[i] in out[i] (out must be at least as
// long as ids). It visits each distinct block once, in file order: cached
// blocks are read in place, the missing ones are fetched in the same pass
// with one pread per run of adjacent blocks and then cached. A block
// whose checksum fails is an error naming the file and offset; out is
// then incomplete.
func (f *File) GetMany(ids []uint64, out []engine.Counts) error {
	var keys [256]uint64
	for len(ids) > 0 {
		c := min(len(ids), len(keys))
		if err := f.getChunk(ids[:c], out[:c], keys[:]); err != nil {
			return err
		}
		ids, out = ids[c:], out[c:]
	}
	return nil
}

// group is the part of a chunk's keys that falls in one block.
type group struct {
	block      int
	start, end int // range of keys
}

func (f *File) getChunk(ids []uint64, out []engine.Counts, keys []uint64) error {
	clear(out)
	keys = f.idx.Group(ids, keys)
	// Pass 1: serve what the cache holds; note the blocks it lacks.
	var missing [256]group
	nmiss := 0
	for s := 0; s < len(keys); {
		b, e := sealed.BlockRun(keys, s)
		first, _, _ := f.idx.Block(b)
		hit := f.cache.view(cacheKey(f.id, b), func(blk []byte) {
			lookup(first, blk, ids, out, keys[s:e])
		})
		if !hit {
			missing[nmiss] = group{b, s, e}
			nmiss++
		}
		s = e
	}
	if nmiss == 0 {
		return nil
	}
	// Pass 2: fetch the missing blocks in file order, adjacent ones in one
	// read.
	sc := scratchPool.Get().(*scratch)
	defer scratchPool.Put(sc)
	for m := 0; m < nmiss; {
		_, off, end := f.idx.Block(missing[m].block)
		r := m + 1
		for r < nmiss && missing[r].block == missing[r-1].block+1 {
			_, _, e := f.idx.Block(missing[r].block)
			if e-off > maxRun {
				break
			}
			end = e
			r++
		}
		n := int(end - off)
		if cap(sc.b) < n+sealed.BlockSlack {
			sc.b = make([]byte, 0, n+sealed.BlockSlack)
		}
		buf := sc.b[:n]
		if err := f.readAt(buf, int64(off)); err != nil {
			return err
		}
		for ; m < r; m++ {
			g := missing[m]
			first, bo, be := f.idx.Block(g.block)
			blk := buf[bo-off : be-off]
			if err := f.checkBlock(first, blk, int64(bo)); err != nil {
				return err
			}
			f.nblocks.Add(1)
			f.cache.put(cacheKey(f.id, g.block), blk)
			lookup(first, blk, ids, out, keys[g.start:g.end])
		}
	}
	return nil
}

// checkBlock verifies a block read from disk (its bytes with the CRC)
// before anything is read from it or it is cached: the checksum, then the
// header, whose bounds keep every later lookup inside the block.
func (f *File) checkBlock(first uint64, blk []byte, off int64) error {
	if err := sealed.CheckBlock(first, blk); err != nil {
		return f.corrupt(off, err.Error()+"; the file is damaged and no count is read from it")
	}
	return nil
}

// lookup answers the ids of keys (block<<8 | position) from one block,
// blk with its CRC, already checked. A block's bytes are always followed
// by at least its 4-byte CRC and, in the cache's arena and the read
// buffer, by BlockSlack more bytes of capacity.
func lookup(first uint64, blk []byte, ids []uint64, out []engine.Counts, keys []uint64) {
	var k sealed.Block
	if err := k.Parse(first, blk[:len(blk)-4]); err != nil {
		return // checked before it was cached or used; cannot happen
	}
	for _, key := range keys {
		i := int(key & 0xff)
		if p, ok := k.Find(ids[i]); ok {
			out[i] = k.Counts(p)
		}
	}
}
