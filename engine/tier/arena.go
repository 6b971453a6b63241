package tier

import (
	"slices"
	"sync"
)

// arena holds the bytes of sealed windows. A window's bytes allocated
// alone would be rounded up by the heap (to a size class, several percent
// for windows of tens of KiB; to a page for larger ones), so windows are
// written into chunks, and once a chunk is
// full the next trim, under the table's write lock, copies the live
// windows of full chunks into allocations of exactly their size, up to
// packBytes each, and points the windows there. A chunk whose windows
// are mostly gone (replaced by compaction, moved to files) is packed
// again the same way, so holes never hold more than half of a packed
// chunk. A region is never written after it is filled, so a reader or a
// job still holding a window's old slice is never disturbed; trim leaves
// alone the chunks holding windows a job is reading or writing.
type arena struct {
	mu     sync.Mutex
	cur    *chunk
	closed []*chunk // chunks to pack: full, or packed and half empty
	bytes  int64    // chunks alive (MemoryBytes counts them)
}

type chunk struct {
	buf     []byte
	off     int
	live    int
	pending int // regions handed out and not yet attached: trim leaves the chunk alone
	packed  bool
	wins    []*sealedWindow // the windows allocated here and not freed
}

const (
	chunkBytes = 128 << 10
	packBytes  = 4 << 20
)

// alloc returns a region of n bytes with BlockSlack bytes of capacity past
// it, and its chunk; the caller fills it and then attaches its window
// (or abandons the region). Safe for concurrent use.
func (a *arena) alloc(n int) ([]byte, *chunk) {
	need := n + BlockSlack
	a.mu.Lock()
	defer a.mu.Unlock()
	if need > chunkBytes/2 {
		c := &chunk{buf: make([]byte, need), off: need, live: need, pending: 1}
		a.bytes += int64(need)
		a.closed = append(a.closed, c)
		return c.buf[:n:need], c
	}
	if a.cur == nil || a.cur.off+need > len(a.cur.buf) {
		if a.cur != nil { // live > 0: free drops an empty current chunk
			a.closed = append(a.closed, a.cur)
		}
		a.cur = &chunk{buf: make([]byte, chunkBytes)}
		a.bytes += chunkBytes
	}
	c := a.cur
	b := c.buf[c.off : c.off+n : c.off+need]
	c.off += need
	c.live += need
	c.pending++
	return b, c
}

// attach records that s lives in c, so that trim can move it.
func (a *arena) attach(c *chunk, s *sealedWindow) {
	a.mu.Lock()
	c.wins = append(c.wins, s)
	c.pending--
	a.mu.Unlock()
}

// abandon returns a region of n bytes alloc handed out that never became
// a window.
func (a *arena) abandon(c *chunk, n int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	c.pending--
	a.freeBytes(c, n+BlockSlack)
}

// free returns s's region.
func (a *arena) free(c *chunk, s *sealedWindow) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if i := slices.Index(c.wins, s); i >= 0 {
		c.wins = slices.Delete(c.wins, i, i+1)
	}
	a.freeBytes(c, cap(s.data))
}

// freeBytes counts n bytes of c free, under a.mu.
func (a *arena) freeBytes(c *chunk, n int) {
	c.live -= n
	switch {
	case c.live == 0:
		a.bytes -= int64(len(c.buf))
		if c == a.cur {
			a.cur = nil
		}
		if i := slices.Index(a.closed, c); i >= 0 {
			a.closed = slices.Delete(a.closed, i, i+1)
		}
	case c.packed && c.live < len(c.buf)/2:
		c.packed = false // pack it again
		a.closed = append(a.closed, c)
	}
}

// trim packs the chunks waiting for it, except those holding a window
// pinned says a job may be reading or writing. The caller holds the
// table's write lock, so no reader holds a window's fields meanwhile.
func (a *arena) trim(pinned func(*sealedWindow) bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	var keep, batch []*chunk
	size := 0
	pack := func() {
		if len(batch) == 0 {
			return
		}
		buf := make([]byte, size)
		p := &chunk{buf: buf, off: size, live: size, packed: true}
		off := 0
		for _, c := range batch {
			for _, s := range c.wins {
				n, m := len(s.data), cap(s.data)
				copy(buf[off:off+m], s.data[:m])
				s.rebind(buf[off : off+n : off+m])
				s.chunk = p
				off += m
			}
			p.wins = append(p.wins, c.wins...)
			a.bytes -= int64(len(c.buf))
		}
		a.bytes += int64(size)
		batch, size = batch[:0], 0
	}
	for _, c := range a.closed {
		if c.pending > 0 || slices.ContainsFunc(c.wins, pinned) {
			keep = append(keep, c)
			continue
		}
		if size+c.live > packBytes {
			pack()
		}
		batch = append(batch, c)
		size += c.live
	}
	pack()
	clear(a.closed)
	a.closed = append(a.closed[:0], keep...)
}

func (a *arena) size() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.bytes
}
