package embedded

import (
	"context"
	"runtime"
	"time"
)

// A background snapshot shares the machine with the requests it must not
// slow down: the core its encoding runs on, and the disk its writes go
// to, where every durable write waits for the log's fsync. Go has no
// goroutine priorities, so the snapshot writer paces itself, as a
// database's background jobs do (RocksDB's rate limiter for flushes and
// compactions, pebble's compaction pacing):
//
//   - it works in slices of paceSlice, and after a slice in which the log
//     took records (writers are at work, each waiting for an fsync), it
//     sleeps paceRatio times the slice it worked, leaving the core and
//     the disk to them; a slice in which the log took nothing only yields
//     the core (runtime.Gosched), so a snapshot of an idle server runs at
//     full speed;
//   - its file is written back a step at a time as it goes (snapshot.File:
//     sync_file_range on Linux), so no large fsync at the end holds the
//     log's fsyncs behind it.
//
// The bound: a snapshot sleeps at most paceRatio times the time it
// worked (the wall time of its slices), so a paced snapshot takes at most
// 1+paceRatio times its working time, however busy the writers are — it
// always finishes, and the log it lets grow meanwhile is bounded the same
// way.
const (
	paceSlice = 2 * time.Millisecond
	paceRatio = 6
	// paceMaxPause caps one pause, so that a slice that took long (a
	// write held up by the disk) does not keep a snapshot asleep, and
	// Close waiting for it, for six times as long.
	paceMaxPause = 100 * time.Millisecond
)

// pacer paces a snapshot's writing (see above) and counts what it did. A
// nil pacer never yields: recovery has the machine to itself. A pacer
// with no busy func only yields the core every few thousand items, which
// bounds how long a request handler woken meanwhile waits for it in the
// run queue (a goroutine that never blocks keeps its P for a whole 10 ms
// time slice).
type pacer struct {
	n uint32
	// busy returns a figure that moves while writers are at work (the
	// log's last index).
	busy  func() uint64
	sleep func(time.Duration)
	seen  uint64
	slice time.Time // when the current slice of work began
	// worked and slept are the time the snapshot spent working and
	// sleeping for the writers.
	worked, slept time.Duration
}

// newPacer returns a pacer that sleeps (with sleep: time.Sleep) while
// busy moves.
func newPacer(busy func() uint64, sleep func(time.Duration)) *pacer {
	return &pacer{busy: busy, sleep: sleep, seen: busy(), slice: time.Now()}
}

// tick is called after each item written or read.
func (p *pacer) tick() {
	if p == nil {
		return
	}
	p.n++
	switch {
	case p.busy != nil && p.n%64 == 0:
		p.step()
	case p.busy == nil && p.n%4096 == 0:
		runtime.Gosched()
	}
}

// step is called after a larger piece of work (a chunk's bytes), and
// every few items: it ends the slice once it is paceSlice long.
func (p *pacer) step() {
	if p == nil || p.busy == nil {
		return
	}
	now := time.Now()
	worked := now.Sub(p.slice)
	if worked < paceSlice {
		return
	}
	p.worked += worked
	if seen := p.busy(); seen != p.seen {
		p.seen = seen
		p.sleep(min(paceRatio*worked, paceMaxPause))
		after := time.Now()
		p.slept += after.Sub(now)
		now = after
	} else {
		runtime.Gosched()
	}
	p.slice = now
}

// sleepCtx sleeps for d or until ctx is done: a snapshot being cancelled
// (the engine closing) stops pausing at once.
func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
