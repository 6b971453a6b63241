package sealed

import (
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"math/bits"
	"slices"
	"unsafe"
)

const (
	magic = "TLYSEALD"
	// formatVersion is bumped on any change to the byte layout; readers
	// refuse versions they do not know rather than guess.
	formatVersion = 1

	// HeaderSize and FooterSize are the fixed sizes of a window's first and
	// last bytes; IndexEntrySize is the size of one block's index entry.
	HeaderSize     = 16
	FooterSize     = 56
	IndexEntrySize = 16
)

// ErrCorrupt is wrapped by every error about bytes that are not a valid
// window (bad magic, checksum, structure).
var ErrCorrupt = errors.New("corrupt sealed window")

// CorruptError says where a window's bytes are damaged. File is empty for
// an in-memory window.
type CorruptError struct {
	File   string
	Offset int64
	Reason string
}

func (e *CorruptError) Error() string {
	where := "in-memory window"
	if e.File != "" {
		where = e.File
	}
	return fmt.Sprintf("sealed: %s corrupt at offset %d: %s", where, e.Offset, e.Reason)
}

// Unwrap makes errors.Is(err, ErrCorrupt) true.
func (e *CorruptError) Unwrap() error { return ErrCorrupt }

func corrupt(off int64, format string, args ...any) error {
	return &CorruptError{Offset: off, Reason: fmt.Sprintf(format, args...)}
}

func appendHeader(dst []byte) []byte {
	dst = append(dst, magic...)
	dst = le.AppendUint32(dst, formatVersion)
	return le.AppendUint32(dst, 0)
}

// CheckHeader validates the first HeaderSize bytes of a window.
func CheckHeader(b []byte) error {
	if len(b) < HeaderSize || string(b[:8]) != magic {
		return corrupt(0, "not a sealed window (bad magic)")
	}
	if v := le.Uint32(b[8:]); v != formatVersion {
		return corrupt(8, "format version %d, this build reads %d", v, formatVersion)
	}
	if le.Uint32(b[12:]) != 0 {
		return corrupt(12, "reserved header bytes are not zero")
	}
	return nil
}

// Footer is the decoded last FooterSize bytes of a window.
type Footer struct {
	IndexOffset uint64 // where the index starts; blocks end here
	Blocks      uint64
	Posts       uint64
	MinID       uint64 // 0 when Posts == 0
	MaxID       uint64
	IndexCRC    uint32
}

// AppendIndexFooter appends a window's tail to dst: index, the blocks'
// entries (the blocks end at indexOffset), then the footer with version
// in its version field (engine/tier's windows have this tail under their
// own version). minID and maxID are the window's first and last ids, 0
// and 0 when it has none.
func AppendIndexFooter(dst, index []byte, indexOffset, posts, minID, maxID uint64, version uint32) []byte {
	f := Footer{
		IndexOffset: indexOffset,
		Blocks:      uint64(len(index) / IndexEntrySize),
		Posts:       posts,
		MinID:       minID,
		MaxID:       maxID,
		IndexCRC:    crc32.Checksum(index, castagnoli),
	}
	return f.AppendTo(append(dst, index...), version)
}

// AppendTo appends the footer to dst with version in its version field.
func (f *Footer) AppendTo(dst []byte, version uint32) []byte {
	start := len(dst)
	dst = le.AppendUint64(dst, f.IndexOffset)
	dst = le.AppendUint64(dst, f.Blocks)
	dst = le.AppendUint64(dst, f.Posts)
	dst = le.AppendUint64(dst, f.MinID)
	dst = le.AppendUint64(dst, f.MaxID)
	dst = le.AppendUint32(dst, f.IndexCRC)
	dst = le.AppendUint32(dst, version)
	dst = le.AppendUint32(dst, 0)
	return le.AppendUint32(dst, crc32.Checksum(dst[start:], castagnoli))
}

// ParseFooter decodes and checks the footer b of a window of size bytes:
// its checksum and that the regions it declares tile the window exactly.
func ParseFooter(b []byte, size int64) (Footer, error) {
	return ParseFooterVersion(b, size, formatVersion)
}

// ParseFooterVersion is ParseFooter for a footer whose version field must
// be version: engine/tier's windows.
func ParseFooterVersion(b []byte, size int64, version uint32) (Footer, error) {
	return ParseFooterOf(b, size, version, IndexEntrySize, MaxBlockPosts)
}

// ParseFooterOf is ParseFooterVersion for a window of this layout whose
// index entries are entrySize bytes and whose blocks hold at most
// perBlock records (engine/tier's like sets: a record is a (post, user)
// pair, Posts counts pairs, MinID and MaxID are posts).
func ParseFooterOf(b []byte, size int64, version uint32, entrySize, perBlock uint64) (Footer, error) {
	var f Footer
	fo := size - FooterSize
	if len(b) != FooterSize || size < HeaderSize+FooterSize {
		return f, corrupt(0, "%d bytes is too short for a sealed window", size)
	}
	if got, want := crc32.Checksum(b[:52], castagnoli), le.Uint32(b[52:]); got != want {
		return f, corrupt(fo, "footer checksum mismatch (computed %08x, stored %08x)", got, want)
	}
	if v := le.Uint32(b[44:]); v != version {
		return f, corrupt(fo+44, "footer format version %d, this build reads %d", v, version)
	}
	if le.Uint32(b[48:]) != 0 {
		return f, corrupt(fo+48, "reserved footer bytes are not zero")
	}
	f = Footer{
		IndexOffset: le.Uint64(b[0:]),
		Blocks:      le.Uint64(b[8:]),
		Posts:       le.Uint64(b[16:]),
		MinID:       le.Uint64(b[24:]),
		MaxID:       le.Uint64(b[32:]),
		IndexCRC:    le.Uint32(b[40:]),
	}
	idxLen := uint64(size) - FooterSize - f.IndexOffset
	switch {
	case f.IndexOffset < HeaderSize || f.IndexOffset > uint64(size)-FooterSize:
		return f, corrupt(fo, "index offset %d outside the window", f.IndexOffset)
	case f.Blocks > idxLen/entrySize || idxLen != f.Blocks*entrySize:
		return f, corrupt(fo, "index of %d bytes for %d blocks", idxLen, f.Blocks)
	case f.Posts < f.Blocks || f.Posts > f.Blocks*perBlock:
		return f, corrupt(fo, "%d records in %d blocks", f.Posts, f.Blocks)
	case f.Blocks == 0 && (f.IndexOffset != HeaderSize || f.MinID != 0 || f.MaxID != 0):
		return f, corrupt(fo, "empty window with blocks or ids")
	case f.MinID > f.MaxID:
		return f, corrupt(fo, "min id %d above max id %d", f.MinID, f.MaxID)
	}
	return f, nil
}

// Index is a window's block index: the first id and the offset of every
// block. It is all a cold window keeps in memory (16 bytes per block).
// Entries stay in their encoded form and are searched in place, so loading
// an index is one read and one checksum, with nothing to build.
//
// An in-memory window's index also has a search structure of its own
// (see buildSearch), built when the window is opened and not part of the
// format; a cold file's index does not.
type Index struct {
	raw    []byte
	blocks int
	posts  int
	minID  uint64
	maxID  uint64
	end    uint64 // end of the last block (= the index offset)

	// The two-level search, nil keys when not built. keys[i] is the first
	// id of block i cut to 32 bits, (first - minID) >> shift, padded with
	// MaxUint32 to a whole number of 16-key segments and aligned so that a
	// segment is one 64-byte cache line; top[s] = keys[16s].
	keys       []uint32
	top        []uint32
	shift      uint8
	searchSize int // bytes allocated for keys and top
}

// NewIndex checks the index bytes raw against footer f and returns the
// index, which aliases raw.
func NewIndex(f Footer, raw []byte) (Index, error) {
	var x Index
	if uint64(len(raw)) != f.Blocks*IndexEntrySize {
		return x, corrupt(int64(f.IndexOffset), "index is %d bytes, footer says %d blocks", len(raw), f.Blocks)
	}
	if got := crc32.Checksum(raw, castagnoli); got != f.IndexCRC {
		return x, corrupt(int64(f.IndexOffset), "index checksum mismatch (computed %08x, stored %08x)", got, f.IndexCRC)
	}
	x = Index{raw: raw, blocks: int(f.Blocks), posts: int(f.Posts), minID: f.MinID, maxID: f.MaxID, end: f.IndexOffset}
	prevOff := uint64(HeaderSize)
	for i := range x.blocks {
		first, off := x.entry(i)
		at := int64(f.IndexOffset) + int64(i)*IndexEntrySize
		switch {
		case i == 0 && (off != HeaderSize || first != f.MinID):
			return x, corrupt(at, "first block at %d with id %d, want %d and %d", off, first, HeaderSize, f.MinID)
		case i > 0 && off <= prevOff+4:
			return x, corrupt(at, "block %d at offset %d, previous at %d", i, off, prevOff)
		case i > 0 && first <= x.firstKey(i-1):
			return x, corrupt(at, "block %d first id %d not above block %d's", i, first, i-1)
		case first > f.MaxID:
			return x, corrupt(at, "block %d first id %d above the max id %d", i, first, f.MaxID)
		}
		prevOff = off
	}
	if x.blocks > 0 && x.end <= prevOff+4 {
		return x, corrupt(int64(f.IndexOffset), "last block ends before it starts")
	}
	return x, nil
}

func (x *Index) entry(i int) (first, off uint64) {
	e := x.raw[i*IndexEntrySize:]
	return le.Uint64(e), le.Uint64(e[8:])
}

func (x *Index) firstKey(i int) uint64 { return le.Uint64(x.raw[i*IndexEntrySize:]) }

// Find returns the block that would hold id, or -1 when id is outside the
// window's id range.
func (x *Index) Find(id uint64) int {
	if x.blocks == 0 || id < x.minID || id > x.maxID {
		return -1
	}
	// Largest i with firstKey(i) <= id; block 0's key is minID <= id. It
	// is branch-free (the ids of a page fall in random blocks, so a
	// branching search mispredicted half its steps): halving steps down to
	// 16 candidates, then a count of the keys <= id among them, whose loads
	// do not wait for each other as a binary search's do.
	raw := x.raw
	base, n := 0, x.blocks
	for n > 16 {
		half := n >> 1
		_, below := bits.Sub64(id, le.Uint64(raw[(base+half)*IndexEntrySize:]), 0)
		base += half & int(below-1)
		n -= half
	}
	c := 0
	for j := base + 1; j < base+n; j++ {
		_, below := bits.Sub64(id, le.Uint64(raw[j*IndexEntrySize:]), 0)
		c += int(below ^ 1)
	}
	return base + c
}

// searchMinBlocks is the fewest blocks for which an in-memory window
// builds its two-level search, and its multi-gets read in passes
// (getPhased). Up to groupKeys blocks Group copies the first ids out of
// the index and searches the copy, and a page's ids fall in a large part
// of the blocks, which are then best loaded whole: at 10M posts (day
// windows of 90 blocks) the passes made a page 10-20% slower, at 100M
// (860 blocks) 15-20% faster.
const searchMinBlocks = groupKeys + 1

// segKeys is the number of keys of a search segment: one cache line.
const segKeys = 16

// buildSearch builds the two-level search of the index: a small top array
// (4 bytes per 16 blocks) that stays in the CPU cache, and the blocks'
// first ids cut to 32 bits, 16 to a cache line (4 bytes per block; about
// 0.03 bytes per post with blocks of 128). A lookup then reads one line
// of keys rather than the several lines of 16-byte entries a binary
// search of the index misses on when the window is out of cache, and the
// lines of the ids of a page can be loaded together (Group).
func (x *Index) buildSearch() {
	if x.blocks < searchMinBlocks {
		return
	}
	span := x.maxID - x.minID
	shift := uint8(max(0, bits.Len64(span)-32))
	segs := (x.blocks + segKeys - 1) / segKeys
	n := segs * segKeys
	buf := make([]uint32, n+segKeys-1)
	a := int(uintptr(unsafe.Pointer(unsafe.SliceData(buf))) & 63) // Go's heap never moves
	skip := (64 - a) & 63 / 4
	keys := buf[skip : skip+n : skip+n]
	for i := range keys {
		keys[i] = math.MaxUint32
	}
	for i := range x.blocks {
		keys[i] = uint32((x.firstKey(i) - x.minID) >> shift)
	}
	top := make([]uint32, segs)
	for s := range top {
		top[s] = keys[s*segKeys]
	}
	x.keys, x.top, x.shift = keys, top, shift
	x.searchSize = 4 * (cap(buf) + cap(top))
}

// seg returns the segment of keys whose block range holds key t: the last
// s with top[s] <= t (top[0] is 0, so there is one).
func (x *Index) seg(t uint32) int {
	top := x.top
	base, n := 0, len(top)
	for n > 1 {
		half := n >> 1
		_, below := bits.Sub32(t, top[base+half], 0)
		base += half & int(below-1)
		n -= half
	}
	return base
}

// inSeg returns the block of id, whose cut key is t, given its segment s:
// the last block whose key is <= t, then, if that key equals t (the cut
// cannot tell the block's first id from id), compared in full.
func (x *Index) inSeg(s int, t uint32, id uint64) int {
	seg := (*[segKeys]uint32)(x.keys[s*segKeys:])
	c := 0
	for _, k := range seg[1:] {
		_, below := bits.Sub32(t, k, 0)
		c += int(below ^ 1)
	}
	b := min(s*segKeys+c, x.blocks-1) // the padding counts when t is MaxUint32
	if x.keys[b] == t {
		b = x.resolve(b, t, id)
	}
	return b
}

// resolve corrects a block found by its cut key t: blocks whose keys equal
// t may start above id. A few steps back at most on real data (first ids
// within 2^shift ids of each other); a crafted window with many falls back
// to the exact search.
func (x *Index) resolve(b int, t uint32, id uint64) int {
	for range 8 {
		if b == 0 || x.keys[b] != t || x.firstKey(b) <= id {
			return b
		}
		b--
	}
	return x.Find(id)
}

// groupKeys is the most blocks whose first ids Group copies out of the
// index before searching it: a day window holds 9 blocks at 1M posts, 90 at
// 10M.
const groupKeys = 128

// findIn is Find over the first ids of the blocks, first[:n], for an id
// within the window's range: as Find, on a copy of the keys that is
// dense (8 bytes a key rather than 16) and needs no bounds checks.
func findIn(first *[groupKeys]uint64, n int, id uint64) int {
	base := 0
	for n > 8 {
		half := n >> 1
		_, below := bits.Sub64(id, first[(base+half)&(groupKeys-1)], 0)
		base += half & int(below-1)
		n -= half
	}
	c := 0
	for j := base + 1; j < base+n; j++ {
		_, below := bits.Sub64(id, first[j&(groupKeys-1)], 0)
		c += int(below ^ 1)
	}
	return base + c
}

// Block returns the first id of block i and the byte range [off, end) it
// occupies in the window, CRC included.
func (x *Index) Block(i int) (first, off, end uint64) {
	first, off = x.entry(i)
	end = x.end
	if i+1 < x.blocks {
		end = le.Uint64(x.raw[(i+1)*IndexEntrySize+8:])
	}
	return first, off, end
}

// Blocks returns the number of blocks.
func (x *Index) Blocks() int { return x.blocks }

// Posts returns the number of posts in the window.
func (x *Index) Posts() int { return x.posts }

// MinID and MaxID return the window's smallest and largest ids (0 and 0
// for an empty window).
func (x *Index) MinID() uint64 { return x.minID }
func (x *Index) MaxID() uint64 { return x.maxID }

// SizeBytes returns the bytes of the index entries.
func (x *Index) SizeBytes() int { return len(x.raw) }

// BlockRun returns the block of keys[s], keys being Group's result, and
// the end of the run of keys that name it: keys[s:end]. A multi-get walks
// Group's result block by block with it.
func BlockRun(keys []uint64, s int) (block, end int) {
	block, end = int(keys[s]>>8), s+1
	for end < len(keys) && int(keys[end]>>8) == block {
		end++
	}
	return block, end
}

// Group fills keys with one entry per id of ids that may be in the window,
// block<<8 | position in ids, sorted by block, and returns the filled part:
// a multi-get then visits each block once, in file order. ids may hold at
// most 256 ids; keys must be at least as long as ids.
func (x *Index) Group(ids []uint64, keys []uint64) []uint64 {
	if len(ids) > 256 {
		panic("sealed: Group takes at most 256 ids")
	}
	if x.keys != nil {
		return x.groupSearch(ids, keys)
	}
	k := 0
	sorted := true
	lo, hi := uint64(math.MaxUint64), uint64(0) // range of the blocks
	var first [groupKeys]uint64
	small := x.blocks <= groupKeys
	if small {
		for j := range x.blocks {
			first[j] = x.firstKey(j)
		}
	}
	for i, id := range ids {
		var b int
		switch {
		case id < x.minID || id > x.maxID || x.blocks == 0:
			continue
		case small:
			b = findIn(&first, x.blocks, id)
		default:
			b = x.Find(id)
		}
		keys[k] = uint64(b)<<8 | uint64(i)
		if k > 0 && keys[k] < keys[k-1] {
			sorted = false
		}
		lo, hi = min(lo, uint64(b)), max(hi, uint64(b))
		k++
	}
	return sortKeys(keys[:k], sorted, lo, hi)
}

func sortKeys(keys []uint64, sorted bool, lo, hi uint64) []uint64 {
	switch {
	case sorted:
	case hi-lo < groupSpan:
		countingSort(keys, lo)
	case hi-lo < groupSpan*groupSpan:
		radixSort(keys, lo)
	default:
		slices.Sort(keys)
	}
	return keys
}

// groupSearch is Group with the two-level search, in passes over all the
// ids so that the cache misses of different ids overlap rather than
// queue: the first finds each id's segment in the top array, then loads
// the segments' lines; the second searches the lines, then loads the
// index entries of the blocks found (which the caller reads next). The
// loads of a pass come in a loop of their own: a load that misses holds
// its place in the CPU's reorder buffer until its line arrives, so loads
// spread through the searches would be only a few in flight at a time.
func (x *Index) groupSearch(ids []uint64, keys []uint64) []uint64 {
	var v uint32
	if prefetch {
		for p := 0; p < len(x.top); p += 16 {
			v ^= x.top[p]
		}
	}
	k := 0
	for i, id := range ids {
		if id < x.minID || id > x.maxID {
			continue
		}
		keys[k] = uint64(x.seg(uint32((id-x.minID)>>x.shift)))<<8 | uint64(i)
		k++
	}
	keys = keys[:k]
	if prefetch {
		for _, key := range keys {
			v ^= x.keys[int(key>>8)*segKeys]
		}
	}
	sorted := true
	lo, hi := uint64(math.MaxUint64), uint64(0)
	for j, key := range keys {
		id := ids[key&0xff]
		b := x.inSeg(int(key>>8), uint32((id-x.minID)>>x.shift), id)
		keys[j] = uint64(b)<<8 | key&0xff
		if j > 0 && keys[j] < keys[j-1] {
			sorted = false
		}
		lo, hi = min(lo, uint64(b)), max(hi, uint64(b))
	}
	if prefetch {
		raw := x.raw
		for _, key := range keys {
			e := int(key>>8) * IndexEntrySize
			v ^= uint32(raw[e]) ^ uint32(raw[min(e+24, len(raw)-1)]) // first id; next block's offset
		}
	}
	use(byte(v))
	return sortKeys(keys, sorted, lo, hi)
}

// groupSpan bounds the range of blocks a chunk's keys are counting-sorted
// over; a wider chunk is sorted by comparisons.
const groupSpan = 256

// radixSort sorts keys (at most 256, blocks in [lo, lo+groupSpan²)) by
// block, stably, in two counting passes of half the bits of the span
// each: the ids of a page spread over hundreds of blocks in a window of a
// 100M-post store, where a comparison sort took a twentieth of a
// multi-get.
func radixSort(keys []uint64, lo uint64) {
	var span uint64
	for _, key := range keys {
		span = max(span, key>>8-lo)
	}
	d := max(1, uint(bits.Len64(span)+1)/2) // <= 8
	mask := 1<<d - 1
	var tmp [256]uint64
	src, dst := keys, tmp[:len(keys)]
	for shift := uint(0); shift <= d; shift += d {
		var start [groupSpan + 1]uint16
		for _, key := range src {
			start[int((key>>8-lo)>>shift)&mask&(groupSpan-1)+1]++
		}
		for b := 1; b <= mask+1; b++ {
			start[b] += start[b-1]
		}
		for _, key := range src {
			b := int((key>>8-lo)>>shift) & mask & (groupSpan - 1)
			dst[start[b]&255] = key
			start[b]++
		}
		src, dst = dst, src
	}
	// Two passes: the result is back in keys.
}

// countingSort sorts keys (at most 256, blocks in [lo, lo+groupSpan)) by
// block, stably: a page's ids fall in a handful of blocks of one window, so
// this is two passes where a comparison sort took a tenth of a multi-get.
// As the keys of one block were added in position order, the result is
// the same as sorting the keys.
func countingSort(keys []uint64, lo uint64) {
	var start [groupSpan + 1]uint16
	var tmp [256]uint64
	src := tmp[:copy(tmp[:], keys)]
	hi := 0
	for _, key := range src {
		b := int(key>>8-lo) & (groupSpan - 1)
		start[b+1]++
		hi = max(hi, b+1)
	}
	for b := 1; b <= hi; b++ {
		start[b] += start[b-1]
	}
	for _, key := range src {
		b := int(key>>8-lo) & (groupSpan - 1)
		keys[start[b]&255] = key
		start[b]++
	}
}
