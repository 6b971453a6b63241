package cold

import (
	"fmt"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/sealed"
)

// iterRead is how many bytes of blocks a FileIter reads at once.
const iterRead = 1 << 20

// FileIter reads a file's posts in id order for a compaction or a check:
// blocks are read in large sequential chunks, bypass the cache (a scan
// would flush it) and are verified fully (sealed.VerifyBlock), not just
// their checksums.
type FileIter struct {
	f      *File
	block  int // next block to decode
	buf    []byte
	bufOff uint64 // file offset of buf[0]
	pos, n int
	last   uint64
	err    error
	ids    [sealed.MaxBlockPosts]uint64
	counts [sealed.MaxBlockPosts]engine.Counts
}

// Iter returns an iterator over the file's posts.
func (f *File) Iter() *FileIter { return &FileIter{f: f, pos: -1} }

// Next advances to the next post; it returns false at the end or on an
// error (see Err).
func (it *FileIter) Next() bool {
	it.pos++
	for it.pos >= it.n {
		if it.err != nil || it.block >= it.f.idx.Blocks() {
			return false
		}
		if !it.decode() {
			return false
		}
	}
	return true
}

func (it *FileIter) decode() bool {
	x := &it.f.idx
	first, off, end := x.Block(it.block)
	if off < it.bufOff || end > it.bufOff+uint64(len(it.buf)) {
		_, _, idxEnd := x.Block(x.Blocks() - 1)
		n := max(end-off, min(iterRead, idxEnd-off))
		if uint64(cap(it.buf)) < n+sealed.BlockSlack {
			it.buf = make([]byte, 0, n+sealed.BlockSlack)
		}
		it.buf = it.buf[:n]
		if err := it.f.readAt(it.buf, int64(off)); err != nil {
			it.err = err
			return false
		}
		it.bufOff = off
	}
	blk := it.buf[off-it.bufOff : end-it.bufOff]
	if err := sealed.VerifyBlock(first, blk, it.ids[:], it.counts[:]); err != nil {
		it.err = it.f.corrupt(int64(off), fmt.Sprintf("block %d: %v", it.block, err))
		return false
	}
	n := int(blk[0]) + 1
	if it.block > 0 && first <= it.last {
		it.err = it.f.corrupt(int64(off), fmt.Sprintf("block %d starts at id %d, not above %d", it.block, first, it.last))
		return false
	}
	it.last = it.ids[n-1]
	it.block++
	it.pos, it.n = 0, n
	return true
}

// ID and Counts return the current post.
func (it *FileIter) ID() uint64            { return it.ids[it.pos] }
func (it *FileIter) Counts() engine.Counts { return it.counts[it.pos] }

// Err returns the error that ended the iteration, if any.
func (it *FileIter) Err() error { return it.err }

// Verify reads the whole file and checks every block's checksum and
// contents and the totals of the footer: what a scrub or `tally fsck`
// runs. Lookups check only what they read.
func (f *File) Verify() error {
	it := f.Iter()
	n := 0
	for it.Next() {
		n++
	}
	if err := it.Err(); err != nil {
		return err
	}
	if n != f.idx.Posts() {
		return f.corrupt(f.size-sealed.FooterSize, fmt.Sprintf("footer says %d posts, blocks hold %d", f.idx.Posts(), n))
	}
	if n > 0 && it.last != f.idx.MaxID() {
		return f.corrupt(f.size-sealed.FooterSize, fmt.Sprintf("footer says max id %d, last post is %d", f.idx.MaxID(), it.last))
	}
	return nil
}
