package tier

import (
	"slices"
	"sync"
)

// arena holds the bytes of sealed windows in shared chunks. A window's
// bytes allocated alone are rounded up to the heap's next size class
// (about 6% for windows of 10-30 KiB, a day of a million-post year), and
// a chunk loses the tail its last window did not fit; so once a chunk is
// full, the next call of trim under the tier's write lock copies its live
// windows into one allocation of exactly their size (page-rounded) and
// points them there. A region is never written after it is filled, so a
// reader or job still holding a window's old slice is never disturbed;
// trim skips the chunks of windows a job is reading or writing. Windows
// larger than a quarter chunk get an allocation of their own.
type arena struct {
	mu     sync.Mutex
	cur    *chunk
	closed []*chunk // full chunks not yet trimmed
	bytes  int64    // chunks alive (MemoryBytes counts them)
}

type chunk struct {
	buf  []byte
	off  int
	live int
	segs []*segment // the segments allocated here and not freed
}

const chunkBytes = 256 << 10

// alloc returns a region of n bytes with BlockSlack bytes of capacity past
// it, and its chunk. Safe for concurrent use.
func (a *arena) alloc(n int) ([]byte, *chunk) {
	need := n + BlockSlack
	a.mu.Lock()
	defer a.mu.Unlock()
	if need > chunkBytes/4 {
		c := &chunk{buf: make([]byte, need), off: need, live: need}
		a.bytes += int64(need)
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
	return b, c
}

// attach records that s lives in c, so that trim can move it.
func (a *arena) attach(c *chunk, s *segment) {
	a.mu.Lock()
	c.segs = append(c.segs, s)
	a.mu.Unlock()
}

// free returns s's region.
func (a *arena) free(c *chunk, s *segment) {
	a.mu.Lock()
	defer a.mu.Unlock()
	c.live -= cap(s.data)
	if i := slices.Index(c.segs, s); i >= 0 {
		c.segs = slices.Delete(c.segs, i, i+1)
	}
	if c.live == 0 {
		a.bytes -= int64(len(c.buf))
		if c == a.cur {
			a.cur = nil
		}
		if i := slices.Index(a.closed, c); i >= 0 {
			a.closed = slices.Delete(a.closed, i, i+1)
		}
	}
}

// trim moves the windows of every full chunk into an allocation of
// exactly their size, except chunks holding a segment pinned says a job
// may be reading or writing. The caller holds the tier's write lock, so
// no reader holds a segment's fields meanwhile.
func (a *arena) trim(pinned func(*segment) bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	keep := a.closed[:0]
	for _, c := range a.closed {
		if slices.ContainsFunc(c.segs, pinned) {
			keep = append(keep, c)
			continue
		}
		size := 0
		for _, s := range c.segs {
			size += cap(s.data)
		}
		buf := make([]byte, size)
		off := 0
		for _, s := range c.segs {
			n, m := len(s.data), cap(s.data)
			copy(buf[off:off+m], s.data[:m])
			s.rebind(buf[off : off+n : off+m])
			off += m
		}
		a.bytes += int64(size - len(c.buf))
		c.buf, c.off, c.live = buf, size, size
	}
	clear(a.closed[len(keep):]) // the trimmed chunks now belong to their segments alone
	a.closed = keep
}

func (a *arena) size() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.bytes
}
