package tier

import "sync"

// arena hands out the bytes of sealed windows from shared chunks. A
// window's bytes allocated alone would be rounded up to the heap's next
// size class: windows of 10-30 KiB (a day of a million-post year) lost
// about 6% of their size that way, 0.5 bytes a post on the benchmark set.
// A region is never written after it is filled and never reused, so a
// reader or a running job holding a window's slice is never disturbed; a
// chunk goes back to the Go heap when its last region is freed. Windows
// larger than a quarter chunk get a chunk of their own.
type arena struct {
	mu    sync.Mutex
	cur   *chunk
	bytes int64 // chunks alive (MemoryBytes counts them, holes included)
}

type chunk struct {
	buf  []byte
	off  int
	live int
}

const chunkBytes = 256 << 10

// alloc returns a region of n bytes with BlockSlack bytes of capacity past
// it, and its chunk (for free). Safe for concurrent use.
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
		if a.cur != nil && a.cur.live == 0 {
			a.bytes -= int64(len(a.cur.buf))
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

// free returns the region of n bytes allocated from c.
func (a *arena) free(c *chunk, n int) {
	if c == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	c.live -= n + BlockSlack
	if c.live == 0 && c != a.cur {
		a.bytes -= int64(len(c.buf))
	}
}

func (a *arena) size() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.bytes
}
