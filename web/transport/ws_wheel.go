package transport

import (
	"sync"
	"time"
)

// wheel holds every socket's next deadline (init timeout, token expiry,
// ping, the write of a message, the close handshake) in one hashed timing
// wheel: a socket costs one entry, linked through its own fields, however
// many deadlines it has, instead of a runtime timer (and its closure)
// per deadline. One goroutine ticks it while it holds any socket, and
// exits when it holds none.
//
// A deadline fires on the first tick at or after it, never before it:
// deadlines are late by at most one tick.
type wheel struct {
	tick time.Duration

	mu      sync.Mutex
	epoch   time.Time // tick 0
	current int64     // the last tick processed
	slots   [wheelSlots]*wsConn
	entries int
	running bool
}

// wheelTick is the wheel's resolution.
const wheelTick = 50 * time.Millisecond

// wheelSlots is the wheel's size: a deadline more than wheelSlots ticks
// away waits in its slot through whole turns.
const wheelSlots = 1024

// wheelEntry is a socket's place in the wheel, guarded by wheel.mu.
type wheelEntry struct {
	next, prev *wsConn
	due        int64 // tick at which it fires
	slot       int32 // -1: not in the wheel
}

func newWheel(tick time.Duration) *wheel {
	return &wheel{tick: tick, epoch: time.Now()}
}

// tickOf is the first tick at or after t.
func (w *wheel) tickOf(t time.Time) int64 {
	d := t.Sub(w.epoch)
	n := int64(d / w.tick)
	if d%w.tick != 0 {
		n++
	}
	return n
}

// schedule makes at the socket's next deadline (the zero time: none),
// replacing any earlier one.
func (w *wheel) schedule(c *wsConn, at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.unlink(c)
	if at.IsZero() {
		return
	}
	if !w.running {
		// Idle, the wheel did not tick: it starts from now.
		w.current = max(w.current, w.tickOf(time.Now())-1)
		w.running = true
		go w.run()
	}
	due := max(w.tickOf(at), w.current+1)
	e := &c.wheel
	e.due = due
	e.slot = int32(due % wheelSlots)
	head := w.slots[e.slot]
	e.next, e.prev = head, nil
	if head != nil {
		head.wheel.prev = c
	}
	w.slots[e.slot] = c
	w.entries++
}

// remove takes c out of the wheel.
func (w *wheel) remove(c *wsConn) {
	w.mu.Lock()
	w.unlink(c)
	w.mu.Unlock()
}

func (w *wheel) unlink(c *wsConn) {
	e := &c.wheel
	if e.slot < 0 {
		return
	}
	if e.prev != nil {
		e.prev.wheel.next = e.next
	} else {
		w.slots[e.slot] = e.next
	}
	if e.next != nil {
		e.next.wheel.prev = e.prev
	}
	e.next, e.prev, e.slot = nil, nil, -1
	w.entries--
}

// run ticks until the wheel is empty. Due sockets are called outside the
// wheel's lock, so a socket may schedule itself again from onDeadline.
func (w *wheel) run() {
	t := time.NewTicker(w.tick)
	defer t.Stop()
	var due []*wsConn
	for now := range t.C {
		w.mu.Lock()
		target := w.tickOf(now)
		// A tick the runtime delivered late stands for those it skipped;
		// one turn visits every slot.
		w.current = max(w.current, target-wheelSlots)
		for w.current < target {
			w.current++
			slot := w.current % wheelSlots
			for c := w.slots[slot]; c != nil; {
				next := c.wheel.next
				if c.wheel.due <= w.current {
					w.unlink(c)
					due = append(due, c)
				}
				c = next
			}
		}
		if w.entries == 0 && len(due) == 0 {
			w.running = false
			w.mu.Unlock()
			return
		}
		w.mu.Unlock()
		for i, c := range due {
			c.onDeadline(now)
			due[i] = nil
		}
		due = due[:0]
	}
}
