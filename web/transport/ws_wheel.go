package transport

import (
	"sync"
	"time"
)

// wheel holds every socket's next deadline (init timeout, token expiry,
// ping, the write in flight, the close handshake) in one hashed timing
// wheel: a socket costs one entry, linked through its own fields, however
// many deadlines it has, instead of a runtime timer (and its closure) per
// deadline. One goroutine ticks it while it holds any entry, and exits
// when it holds none.
//
// A deadline fires on the first tick at or after it, never before it:
// deadlines are late by at most one tick.
type wheel struct {
	tick time.Duration

	mu      sync.Mutex
	epoch   time.Time // tick 0
	current int64     // the last tick processed
	slots   [wheelSlots]*wheelEntry
	entries int
	running bool
}

// wheelTick is the sockets' wheel's resolution.
const wheelTick = 50 * time.Millisecond

// wheelSlots is the wheel's size: a deadline more than wheelSlots ticks
// away waits in its slot through whole turns.
const wheelSlots = 1024

// wheelEntry is an owner's place in the wheel, guarded by wheel.mu.
type wheelEntry struct {
	owner      deadliner
	next, prev *wheelEntry
	due        int64 // tick at which it fires
	slot       int32 // -1: not in the wheel
}

// deadliner is what a wheel calls when its deadline is due, outside the
// wheel's lock (it may schedule itself again).
type deadliner interface{ onDeadline(now time.Time) }

func (e *wheelEntry) init(owner deadliner) {
	e.owner, e.slot = owner, -1
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

// ticked is the last tick at or before t: what is due by t.
func (w *wheel) ticked(t time.Time) int64 { return int64(t.Sub(w.epoch) / w.tick) }

// schedule makes at e's next deadline (the zero time: none), replacing
// any earlier one.
func (w *wheel) schedule(e *wheelEntry, at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.unlink(e)
	if at.IsZero() {
		return
	}
	if !w.running {
		// Idle, the wheel did not tick: it starts from now.
		w.current = max(w.current, w.ticked(time.Now()))
		w.running = true
		go w.run()
	}
	e.due = max(w.tickOf(at), w.current+1)
	e.slot = int32(e.due % wheelSlots)
	head := w.slots[e.slot]
	e.next, e.prev = head, nil
	if head != nil {
		head.prev = e
	}
	w.slots[e.slot] = e
	w.entries++
}

// remove takes e out of the wheel.
func (w *wheel) remove(e *wheelEntry) {
	w.mu.Lock()
	w.unlink(e)
	w.mu.Unlock()
}

func (w *wheel) unlink(e *wheelEntry) {
	if e.slot < 0 {
		return
	}
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		w.slots[e.slot] = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	}
	e.next, e.prev, e.slot = nil, nil, -1
	w.entries--
}

// run ticks until the wheel is empty.
func (w *wheel) run() {
	t := time.NewTicker(w.tick)
	defer t.Stop()
	var due []deadliner
	for now := range t.C {
		w.mu.Lock()
		target := w.ticked(now)
		// A tick the runtime delivered late stands for those it skipped;
		// one turn visits every slot.
		w.current = max(w.current, target-wheelSlots)
		for w.current < target {
			w.current++
			for e := w.slots[w.current%wheelSlots]; e != nil; {
				next := e.next
				if e.due <= w.current {
					w.unlink(e)
					due = append(due, e.owner)
				}
				e = next
			}
		}
		if w.entries == 0 && len(due) == 0 {
			w.running = false
			w.mu.Unlock()
			return
		}
		w.mu.Unlock()
		for i, d := range due {
			d.onDeadline(now)
			due[i] = nil
		}
		due = due[:0]
	}
}
