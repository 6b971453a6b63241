package tier

import (
	"math"
	"math/bits"
	"slices"
)

// The post table's searches of a block index, whose entries are a post
// id and an offset (postEntrySize bytes).
const postEntrySize = 16

// findID returns the block that would hold id, or -1 when id is outside
// the window's ids. It is branch-free (the ids of a page fall in random
// blocks, so a branching search mispredicts half its steps): halving
// steps down to 16 candidates, then a count of the keys <= id among
// them, whose loads do not wait for each other as a binary search's do.
func (x *blockIndex) findID(id uint64) int {
	if x.blocks == 0 || id < x.minID || id > x.maxID {
		return -1
	}
	// The largest i whose first id is <= id; block 0's is minID <= id.
	raw := x.raw
	base, n := 0, x.blocks
	for n > 16 {
		half := n >> 1
		_, below := bits.Sub64(id, le.Uint64(raw[(base+half)*postEntrySize:]), 0)
		base += half & int(below-1)
		n -= half
	}
	c := 0
	for j := base + 1; j < base+n; j++ {
		_, below := bits.Sub64(id, le.Uint64(raw[j*postEntrySize:]), 0)
		c += int(below ^ 1)
	}
	return base + c
}

// groupKeys is the most blocks whose first ids group copies out of the
// index before searching the copy.
const groupKeys = 128

// findIn is findID over the first ids of the blocks, first[:n], for an id
// within the window's range: on a copy of the keys that is dense (8
// bytes a key rather than 16) and needs no bounds checks.
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

// blockRun returns the block of keys[s], keys being group's result, and
// the end of the run of keys that name it: keys[s:end]. A multi-get
// walks group's result block by block with it.
func blockRun(keys []uint64, s int) (block, end int) {
	block, end = int(keys[s]>>8), s+1
	for end < len(keys) && int(keys[end]>>8) == block {
		end++
	}
	return block, end
}

// group fills keys with one entry per id of ids that may be in the
// window, block<<8 | position in ids, sorted by block, and returns the
// filled part: a multi-get then visits each block once, in file order.
// ids may hold at most 256 ids; keys must be at least as long as ids.
func (x *blockIndex) group(ids []uint64, keys []uint64) []uint64 {
	k := 0
	sorted := true
	lo, hi := uint64(math.MaxUint64), uint64(0) // range of the blocks
	var first [groupKeys]uint64
	small := x.blocks <= groupKeys
	if small {
		for j := range x.blocks {
			first[j] = le.Uint64(x.raw[j*postEntrySize:])
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
			b = x.findID(id)
		}
		keys[k] = uint64(b)<<8 | uint64(i)
		if k > 0 && keys[k] < keys[k-1] {
			sorted = false
		}
		lo, hi = min(lo, uint64(b)), max(hi, uint64(b))
		k++
	}
	keys = keys[:k]
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

// groupSpan bounds the range of blocks a chunk's keys are counting-sorted
// over; a wider chunk is sorted by comparisons.
const groupSpan = 256

// radixSort sorts keys (at most 256, blocks in [lo, lo+groupSpan²)) by
// block, stably, in two counting passes of half the bits of the span
// each: the ids of a page spread over hundreds of blocks in a window of
// a large table, where a comparison sort takes a large share of a
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
// block, stably: a page's ids fall in a handful of blocks of one window,
// so this is two passes where a comparison sort costs several times as
// much. As the keys of one block were added in position order, the
// result is the same as sorting the keys.
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

// touchBlocks loads one byte of every cache line of the blocks that keys
// (from group) name, data being the window's bytes, before any is
// decoded. The loads do not depend on each other, so the CPU keeps many
// in flight at once; decoding a block is a chain of dependent loads
// (header, id column, value columns), which out of cache would otherwise
// pay the memory latency several times per block, one block after
// another.
func (x *blockIndex) touchBlocks(data []byte, keys []uint64) {
	var v byte
	prev := -1
	for _, key := range keys {
		b := int(key >> 8)
		if b == prev {
			continue
		}
		prev = b
		off, end := x.span(b)
		for p := off; p < end; p += 64 {
			v ^= data[p]
		}
	}
	use(v)
}

// use consumes the bytes touchBlocks loaded, so that the compiler keeps
// the loads.
//
//go:noinline
func use(byte) {}
