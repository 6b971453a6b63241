package cold

import (
	"math/bits"
	"sync"
	"sync/atomic"

	"github.com/tally-dev/tally/engine/sealed"
)

// Cache is the cold tier's block cache, shared by every cold file of an
// engine: a fixed budget of bytes, never exceeded, holding recently used
// blocks.
//
// It holds no pointers per entry, so however many blocks it keeps the GC
// sees a few slices: each shard is one byte arena cut into equal segments
// and one open-addressing index of 16-byte slots (key, arena offset,
// reference bit). Blocks are appended to the current segment. When that is
// full, the clock hand moves to the next segment and reclaims it: blocks
// read since the hand last passed (reference bit set) are copied to a spare
// segment with the bit cleared — their second chance — and the others are
// dropped. This is CLOCK with segment-granular sweeps; unlike slot-level
// CLOCK it needs no free lists and wastes no space when blocks differ in
// size, which they do (a few hundred bytes to a few KiB).
//
// Lookups take a shard's read lock and read the block in place; only a
// miss's insert takes the write lock. A Cache is safe for concurrent use.
type Cache struct {
	shards  []cacheShard
	shift   uint // shard = hash >> shift
	maxItem int  // larger blocks are not cached
	nextID  atomic.Uint32
	hits    atomic.Uint64
	misses  atomic.Uint64
}

// entryHeader precedes each block in an arena: key uint64, length uint32,
// 4 bytes unused. Entries start at multiples of 8.
const entryHeader = 16

type slot struct {
	key uint64 // 0 = empty
	loc uint32 // arena offset / 8 of the entry header
	ref uint32 // CLOCK reference bit; atomic, since readers set it under the read lock
}

type cacheShard struct {
	mu      sync.RWMutex
	arena   []byte // nseg*segSize bytes, plus sealed.BlockSlack so blocks read in place have slack
	segSize int
	ring    []int32 // clock order of the segments in use; ring[hand] is being filled
	spare   int32   // the one segment outside the ring, always empty
	hand    int
	fill    int // bytes used in ring[hand]
	slots   []slot
	mask    uint64
	live    int
	limit   int // live may not exceed this (3/4 of the slots)
	evicted uint64
}

// CacheStats are counters since the cache was made.
type CacheStats struct {
	Hits, Misses, Evictions uint64
	Blocks                  int // blocks held now
	BlockBytes              int // bytes of the blocks held now
	SizeBytes               int // memory the cache holds: arenas and indexes
}

// NewCache returns a cache that holds at most capacityBytes of memory,
// arenas and indexes together. A capacity below 64 KiB disables caching:
// every lookup then reads its blocks from disk.
func NewCache(capacityBytes int) *Cache {
	c := &Cache{}
	if capacityBytes < 64<<10 {
		return c
	}
	// One shard per 4 MiB, at most 16, a power of two: enough to spread
	// the locks of two dozen cores, few enough that each shard's segments
	// stay large.
	nshards := 1
	for nshards < 16 && capacityBytes/(nshards*2) >= 4<<20 {
		nshards *= 2
	}
	c.shift = uint(64 - bits.TrailingZeros(uint(nshards)))
	per := capacityBytes / nshards
	// Index slots cost 16 bytes and are sized for entries of 512 bytes on
	// average at 3/4 load: 1/24 of the budget.
	nslots := 1 << bits.Len(uint(per/512*4/3))
	arenaBytes := per - nslots*16 - sealed.BlockSlack
	segSize := max(4<<10, min(1<<20, arenaBytes/16)) &^ 7
	nseg := arenaBytes / segSize
	if nseg < 3 {
		return &Cache{}
	}
	c.maxItem = segSize / 4
	c.shards = make([]cacheShard, nshards)
	for i := range c.shards {
		s := &c.shards[i]
		s.arena = make([]byte, nseg*segSize+sealed.BlockSlack)
		s.segSize = segSize
		s.ring = make([]int32, nseg-1)
		for j := range s.ring {
			s.ring[j] = int32(j)
		}
		s.spare = int32(nseg - 1)
		s.slots = make([]slot, nslots)
		s.mask = uint64(nslots - 1)
		s.limit = nslots * 3 / 4
	}
	return c
}

// fileID returns a fresh id for a file's blocks' keys, never 0.
func (c *Cache) fileID() uint32 {
	for {
		if id := c.nextID.Add(1); id != 0 {
			return id
		}
	}
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
		off := int(sl.loc) * 8
		n := int(le.Uint32(s.arena[off+8:]))
		fn(s.arena[off+entryHeader : off+entryHeader+n])
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
	for s.fill+need > s.segSize || s.live >= s.limit {
		s.advance()
	}
	off := int(s.ring[s.hand])*s.segSize + s.fill
	le.PutUint64(s.arena[off:], key)
	le.PutUint32(s.arena[off+8:], uint32(len(blk)))
	copy(s.arena[off+entryHeader:], blk)
	s.fill += need
	if s.fill+entryHeader <= s.segSize {
		clear(s.arena[off+need : off+need+entryHeader]) // end mark for the sweep
	}
	s.insert(key, h, uint32(off/8))
}

// advance moves the clock hand to the next segment and reclaims it into
// the spare, which becomes the segment being filled.
func (s *cacheShard) advance() {
	s.hand++
	if s.hand == len(s.ring) {
		s.hand = 0
	}
	old := s.ring[s.hand]
	base := int(old) * s.segSize
	dst := int(s.spare) * s.segSize
	fill := 0
	for off := base; off+entryHeader <= base+s.segSize; {
		key := le.Uint64(s.arena[off:])
		if key == 0 {
			break // end of the segment's entries
		}
		n := int(le.Uint32(s.arena[off+8:]))
		size := entryHeader + (n+7)&^7
		h := mix(key)
		if i, ok := s.find(key, h); ok && int(s.slots[i].loc)*8 == off {
			if s.slots[i].ref != 0 {
				s.slots[i].ref = 0
				copy(s.arena[dst+fill:dst+fill+size], s.arena[off:off+size])
				s.slots[i].loc = uint32((dst + fill) / 8)
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
		clear(s.arena[dst+fill : dst+fill+entryHeader])
	}
	clear(s.arena[base : base+entryHeader])
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
		for j := range s.slots {
			if s.slots[j].key != 0 {
				st.BlockBytes += int(le.Uint32(s.arena[int(s.slots[j].loc)*8+8:]))
			}
		}
		st.SizeBytes += len(s.arena) + len(s.slots)*16
		s.mu.RUnlock()
	}
	return st
}
