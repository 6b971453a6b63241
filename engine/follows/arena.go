package follows

import (
	"math/bits"
	"unsafe"
)

// arena holds a set's blocks in slots of capacity classes, in chunks of
// at most chunkWords words: only the last chunk grows, so the room an
// arena holds for growth is a fraction of one chunk, where one slice grown
// by append would hold up to a quarter of all the blocks' bytes. A slot's
// offset is its chunk's index << chunkShift | its word in the chunk; a
// slot never spans chunks. Every chunk has a spare word past its slots,
// which gives bitpack's Slack to the slot at its end. Free slots are kept
// on a list per class, linked through their first word.
type arena struct {
	chunks  [][]uint64
	views   [][]byte // chunks[i] viewed as bytes
	used    int      // words in slots, free ones included
	garbage int      // words in free slots
	free    [nclass]uint64
}

const (
	chunkShift = 16
	chunkWords = 1 << chunkShift
)

// Capacity classes of the slots, in words: 1..16, then eight a doubling,
// so that a slot wastes at most an eighth of its words.
const nclass = 72

// classCap returns the capacity, in words, of class c.
func classCap(c uint8) int {
	if c <= 16 {
		return int(c)
	}
	k := int(c) - 17
	base := 16 << (k / 8)
	return base + (k%8+1)*(base/8)
}

// classFor returns the smallest class holding n words.
func classFor(n int) uint8 {
	if n <= 16 {
		return uint8(n)
	}
	e := bits.Len(uint(n-1)) - 5 // n in (16<<e, 32<<e]
	base := 16 << e
	q := base / 8
	return uint8(17 + 8*e + (n-base+q-1)/q - 1)
}

// bytes returns the slot at off of class c as bytes, with the chunk's
// bytes after it as capacity (Slack at least).
func (ar *arena) bytes(off int, c uint8) []byte {
	v := ar.views[off>>chunkShift]
	i := off & (chunkWords - 1) * 8
	return v[i : i+classCap(c)*8 : len(v)]
}

func (ar *arena) word(off int) *uint64 {
	return &ar.chunks[off>>chunkShift][off&(chunkWords-1)]
}

// alloc returns the offset of a slot of class c.
func (ar *arena) alloc(c uint8) int {
	w := classCap(c)
	if f := ar.free[c]; f != 0 {
		off := int(f - 1)
		ar.free[c] = *ar.word(off)
		ar.garbage -= w
		return off
	}
	last := len(ar.chunks) - 1
	if last < 0 || len(ar.chunks[last])-1+w > chunkWords {
		// The last chunk's unused end stays unused: less than a slot's
		// worth in a chunk. The first chunk starts small, so that a
		// small set stays small; the next ones are made whole.
		if len(ar.chunks) >= 1<<(48-chunkShift) {
			panic("follows: arena full")
		}
		size := 1024
		if last >= 0 {
			size = chunkWords + 1
		}
		ar.chunks = append(ar.chunks, make([]uint64, 1, max(size, w+1)))
		ar.views = append(ar.views, nil)
		last++
	}
	ch := ar.chunks[last]
	if cap(ch) < len(ch)+w {
		grown := make([]uint64, len(ch), min(chunkWords+1, max(len(ch)+w, 2*cap(ch))))
		copy(grown, ch)
		ch = grown
	}
	off := len(ch) - 1 // the spare word becomes the slot's first
	ch = ch[:len(ch)+w]
	ar.chunks[last] = ch
	ar.views[last] = unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(ch))), 8*len(ch))
	ar.used += w
	return last<<chunkShift | off
}

// release puts the slot at off of class c on its free list.
func (ar *arena) release(off int, c uint8) {
	*ar.word(off) = ar.free[c]
	ar.free[c] = uint64(off) + 1
	ar.garbage += classCap(c)
}

// capBytes is what the arena holds, growth room included.
func (ar *arena) capBytes() int {
	n := cap(ar.chunks)*int(unsafe.Sizeof([]uint64{})) + cap(ar.views)*int(unsafe.Sizeof([]byte{}))
	for _, ch := range ar.chunks {
		n += cap(ch) * 8
	}
	return n
}

// words returns the slot at off of class c.
func (ar *arena) words(off int, c uint8) []uint64 {
	ch := ar.chunks[off>>chunkShift]
	i := off & (chunkWords - 1)
	return ch[i : i+classCap(c)]
}
