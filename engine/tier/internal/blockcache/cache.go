// Package blockcache owns the block cache of the cold tier: a fixed
// budget of bytes, shared by every cold file of the engine's tables,
// holding recently read blocks under a CLOCK policy. It promises that it
// never holds more than its capacity, that a block View hands back is
// exactly the bytes Put cached (with Slack bytes of capacity past them),
// that the GC sees a few slices however many blocks it holds, and that
// it is safe for concurrent use.
package blockcache

import (
	"encoding/binary"
	"math/bits"
	"sync"
	"sync/atomic"
)

var le = binary.LittleEndian

// Slack is how many bytes of capacity a block View passes to fn has past
// its end: enough for one unaligned 8-byte load at any byte of the block,
// which the readers of blocks rely on.
const Slack = 8

// Cache is a block cache: a fixed budget of bytes, never exceeded,
// holding recently used blocks.
//
// It holds no pointers per entry, so however many blocks it keeps the GC
// sees a few slices: each shard is a set of equal byte segments and one
// open-addressing index of 16-byte slots (key, segment and offset,
// reference bit). Blocks are appended to the current segment. When that is
// full, the clock hand moves to the next segment and reclaims it: blocks
// read since the hand last passed (reference bit set) are copied to a spare
// segment with the bit cleared — their second chance — and the others are
// dropped. This is CLOCK with segment-granular sweeps; unlike slot-level
// CLOCK it needs no free lists and wastes no space when blocks differ in
// size, which they do (a few hundred bytes to a few KiB).
//
// Memory is taken as blocks arrive, not up front: a segment is allocated
// when the hand first needs it and the index doubles from a few slots up
// to its share of the budget, so an engine without cold files, or with a
// small working set, pays for what it caches and never more than the
// capacity. Stats and SizeBytes report what is allocated.
//
// Lookups take a shard's read lock and read the block in place; only a
// miss's insert takes the write lock. A Cache is safe for concurrent use.
type Cache struct {
	shards  []cacheShard
	shift   uint // shard = hash >> shift
	maxItem int  // larger blocks are not cached
	bound   int  // the most the shards may allocate (CapacityBytes)
	nextID  atomic.Uint32
	// allocated is the shards' segments and slots, kept apart from the
	// shard locks so that SizeBytes, which memory budgets poll, is one
	// atomic load.
	allocated atomic.Int64
	hits      atomic.Uint64
	misses    atomic.Uint64
}

// entryHeader precedes each block in an arena: key uint64, length uint32,
// 4 bytes unused. Entries start at multiples of 8.
const entryHeader = 16

type slot struct {
	key uint64 // 0 = empty
	loc uint32 // segment<<locShift | offset/8 of the entry header in it
	ref uint32 // CLOCK reference bit; atomic, since readers set it under the read lock
}

// locShift leaves room for offset/8 in a segment of up to 1 MiB.
const locShift = 17

// minSlots is where a shard's index starts: 1 KiB.
const minSlots = 64

type cacheShard struct {
	mu sync.RWMutex
	// segs are segSize bytes each plus Slack, so that blocks read in
	// place have slack; nil until first used.
	segs     [][]byte
	segSize  int
	ring     []int32 // clock order of the segments in use; ring[hand] is being filled
	spare    int32   // the one segment outside the ring, always empty
	hand     int
	fill     int // bytes used in ring[hand]
	slots    []slot
	mask     uint64
	live     int
	limit    int // live may not exceed this (3/4 of the slots)
	maxSlots int // the index doubles up to this many slots
	evicted  uint64
}

// CacheStats are counters since the cache was made.
type CacheStats struct {
	Hits, Misses, Evictions uint64
	Blocks                  int // blocks held now
	BlockBytes              int // bytes of the blocks held now
	SizeBytes               int // memory the cache holds now: segments and indexes
	CapacityBytes           int // what SizeBytes may grow to
}

// NewCache returns a cache that holds at most capacityBytes of memory,
// segments and indexes together, allocated as blocks are cached. A
// capacity below 64 KiB disables caching: every lookup then reads its
// blocks from disk.
func NewCache(capacityBytes int) *Cache {
	c := &Cache{}
	if capacityBytes < 64<<10 {
		return c
	}
	// One shard per MiB, at most 16, a power of two: enough to spread the
	// locks of two dozen cores from a few MiB on (a small cache is the
	// default: a miss is one pread), few enough that each shard's
	// segments stay large beside its blocks.
	nshards := 1
	for nshards < 16 && capacityBytes/(nshards*2) >= 1<<20 {
		nshards *= 2
	}
	c.shift = uint(64 - bits.TrailingZeros(uint(nshards)))
	per := capacityBytes / nshards
	// Index slots cost 16 bytes and are sized for entries of 512 bytes on
	// average at 3/4 load: 1/24 of the budget.
	nslots := 1 << bits.Len(uint(per/512*4/3))
	arenaBytes := per - nslots*16
	segSize := max(4<<10, min(1<<20, arenaBytes/16)) &^ 7
	// A slot's loc addresses at most 1<<(32-locShift) segments: 32 GiB a
	// shard, 512 GiB in all, beyond which the budget is not used.
	nseg := min(arenaBytes/(segSize+Slack), 1<<(32-locShift))
	if nseg < 3 {
		return &Cache{}
	}
	c.maxItem = segSize / 4
	c.bound = nshards * (nseg*(segSize+Slack) + nslots*16)
	c.shards = make([]cacheShard, nshards)
	for i := range c.shards {
		s := &c.shards[i]
		s.segs = make([][]byte, nseg)
		s.segSize = segSize
		s.ring = make([]int32, nseg-1)
		for j := range s.ring {
			s.ring[j] = int32(j)
		}
		s.spare = int32(nseg - 1)
		s.maxSlots = nslots
		s.setSlots(make([]slot, min(minSlots, nslots)))
		c.allocated.Add(int64(len(s.slots) * 16))
	}
	return c
}

func (s *cacheShard) setSlots(slots []slot) {
	s.slots = slots
	s.mask = uint64(len(slots) - 1)
	s.limit = len(slots) * 3 / 4
}

// segment returns segment i, allocating it on first use.
func (c *Cache) segment(s *cacheShard, i int32) []byte {
	if s.segs[i] == nil {
		s.segs[i] = make([]byte, s.segSize+Slack)
		c.allocated.Add(int64(len(s.segs[i])))
	}
	return s.segs[i]
}

// growIndex doubles the shard's index, re-placing every entry.
func (c *Cache) growIndex(s *cacheShard) {
	old := s.slots
	s.setSlots(make([]slot, 2*len(old)))
	for _, sl := range old {
		if sl.key != 0 {
			i, _ := s.find(sl.key, mix(sl.key))
			s.slots[i] = sl
		}
	}
	c.allocated.Add(int64(len(s.slots)-len(old)) * 16)
}

// cacheKey is never 0, the empty slot's key, because file ids start at 1.
func cacheKey(file uint32, block int) uint64 { return uint64(file)<<32 | uint64(uint32(block)) }

func mix(k uint64) uint64 {
	// SplitMix64's finaliser: every input bit reaches every output bit.
	k = (k ^ k>>30) * 0xbf58476d1ce4e5b9
	k = (k ^ k>>27) * 0x94d049bb133111eb
	return k ^ k>>31
}

func (c *Cache) shard(h uint64) *cacheShard {
	if c.shift == 64 {
		return &c.shards[0]
	}
	return &c.shards[h>>c.shift]
}

// view calls fn with the cached block of key, under the shard's read
// lock, and reports whether the block was there. fn must not keep the
// slice.
func (c *Cache) view(key uint64, fn func(blk []byte)) bool {
	if len(c.shards) == 0 {
		c.misses.Add(1)
		return false
	}
	h := mix(key)
	s := c.shard(h)
	s.mu.RLock()
	i, ok := s.find(key, h)
	if ok {
		sl := &s.slots[i]
		if atomic.LoadUint32(&sl.ref) == 0 {
			atomic.StoreUint32(&sl.ref, 1)
		}
		seg, off := s.segs[sl.loc>>locShift], int(sl.loc&(1<<locShift-1))*8
		n := int(le.Uint32(seg[off+8:]))
		fn(seg[off+entryHeader : off+entryHeader+n])
	}
	s.mu.RUnlock()
	if ok {
		c.hits.Add(1)
	} else {
		c.misses.Add(1)
	}
	return ok
}

// put caches blk under key (a copy). Blocks too large for a segment's
// quarter are not cached.
func (c *Cache) put(key uint64, blk []byte) {
	if len(c.shards) == 0 || len(blk) > c.maxItem {
		return
	}
	h := mix(key)
	s := c.shard(h)
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.find(key, h); ok {
		return // another reader got there first
	}
	need := entryHeader + (len(blk)+7)&^7
	for s.live >= s.limit && len(s.slots) < s.maxSlots {
		c.growIndex(s)
	}
	for s.fill+need > s.segSize || s.live >= s.limit {
		c.advance(s)
	}
	cur := s.ring[s.hand]
	seg, off := c.segment(s, cur), s.fill
	le.PutUint64(seg[off:], key)
	le.PutUint32(seg[off+8:], uint32(len(blk)))
	copy(seg[off+entryHeader:], blk)
	s.fill += need
	if s.fill+entryHeader <= s.segSize {
		clear(seg[off+need : off+need+entryHeader]) // end mark for the sweep
	}
	s.insert(key, h, uint32(cur)<<locShift|uint32(off/8))
}

// advance moves the clock hand to the next segment and reclaims it into
// the spare, which becomes the segment being filled. Until the hand has
// gone round once the next segment was never allocated: there is nothing
// to reclaim, and it becomes the spare still unallocated, so a shard
// allocates one segment per segment's worth of blocks put.
func (c *Cache) advance(s *cacheShard) {
	s.hand++
	if s.hand == len(s.ring) {
		s.hand = 0
	}
	old := s.ring[s.hand]
	src := s.segs[old]
	dst := c.segment(s, s.spare)
	fill := 0
	for off := 0; src != nil && off+entryHeader <= s.segSize; {
		key := le.Uint64(src[off:])
		if key == 0 {
			break // end of the segment's entries
		}
		n := int(le.Uint32(src[off+8:]))
		size := entryHeader + (n+7)&^7
		h := mix(key)
		if i, ok := s.find(key, h); ok && s.slots[i].loc == uint32(old)<<locShift|uint32(off/8) {
			if s.slots[i].ref != 0 {
				s.slots[i].ref = 0
				copy(dst[fill:fill+size], src[off:off+size])
				s.slots[i].loc = uint32(s.spare)<<locShift | uint32(fill/8)
				fill += size
			} else {
				s.remove(i)
				s.evicted++
			}
		}
		off += size
	}
	// Mark the ends: a zero key stops the next sweep of either segment.
	if fill+entryHeader <= s.segSize {
		clear(dst[fill : fill+entryHeader])
	}
	if src != nil {
		clear(src[:entryHeader])
	}
	s.ring[s.hand], s.spare = s.spare, old
	s.fill = fill
}

// find returns the slot of key (hash h) and whether it is there.
func (s *cacheShard) find(key, h uint64) (int, bool) {
	for i := h & s.mask; ; i = (i + 1) & s.mask {
		switch s.slots[i].key {
		case key:
			return int(i), true
		case 0:
			return int(i), false
		}
	}
}

func (s *cacheShard) insert(key, h uint64, loc uint32) {
	i, _ := s.find(key, h)
	s.slots[i] = slot{key: key, loc: loc}
	s.live++
}

// remove deletes slot i by shifting later members of its probe run back,
// so that lookups need no tombstones.
func (s *cacheShard) remove(i int) {
	s.live--
	j := i
	for {
		j = int((uint64(j) + 1) & s.mask)
		k := s.slots[j].key
		if k == 0 {
			break
		}
		home := int(mix(k) & s.mask)
		// Move j back to i unless its home lies cyclically in (i, j].
		if (j > i && (home <= i || home > j)) || (j < i && home <= i && home > j) {
			s.slots[i] = s.slots[j]
			i = j
		}
	}
	s.slots[i] = slot{}
}

// Stats returns the cache's counters.
func (c *Cache) Stats() CacheStats {
	st := CacheStats{Hits: c.hits.Load(), Misses: c.misses.Load()}
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.RLock()
		st.Evictions += s.evicted
		st.Blocks += s.live
		for _, sl := range s.slots {
			if sl.key != 0 {
				seg := s.segs[sl.loc>>locShift]
				st.BlockBytes += int(le.Uint32(seg[int(sl.loc&(1<<locShift-1))*8+8:]))
			}
		}
		s.mu.RUnlock()
	}
	st.SizeBytes = c.SizeBytes()
	st.CapacityBytes = c.bound
	return st
}

// SizeBytes returns the memory the cache holds now, segments and indexes:
// what Stats reports, without taking the shard locks.
func (c *Cache) SizeBytes() int { return int(c.allocated.Load()) }

// CapacityBytes returns the most memory the cache may come to hold; 0
// when caching is disabled.
func (c *Cache) CapacityBytes() int { return c.bound }

// NewFileID returns a fresh id for the blocks of one file: never 0,
// never an id an earlier call returned (until 2^32 calls wrap), so that
// the blocks of different files never share a key.
func (c *Cache) NewFileID() uint32 {
	for {
		if id := c.nextID.Add(1); id != 0 {
			return id
		}
	}
}

// View calls fn with the cached copy of block number block of file, under
// the shard's read lock, and reports whether it was cached. fn must not
// keep the slice or call the cache; the slice has Slack bytes of capacity
// past its end. A hit or miss counts in Stats.
func (c *Cache) View(file uint32, block int, fn func(blk []byte)) bool {
	return c.view(cacheKey(file, block), fn)
}

// Put caches a copy of blk as block number block of file. The caller
// checks the block before it is cached: View hands it back as it was put.
// Blocks larger than a quarter of a segment are not cached.
func (c *Cache) Put(file uint32, block int, blk []byte) { c.put(cacheKey(file, block), blk) }
