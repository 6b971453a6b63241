// Package snowflake reads and makes snowflake-layout ids: a millisecond
// timestamp in the high 41 bits (after a custom epoch), then 10 node bits and
// 12 sequence bits — Twitter's layout and epoch by default. Tally partitions
// and tiers posts by the time an id carries, so it owns how that time is read.
package snowflake

import (
	"sync"
	"time"
)

const (
	// TwitterEpoch is Twitter's snowflake epoch in Unix milliseconds.
	TwitterEpoch int64 = 1288834974657
	NodeBits           = 10
	SeqBits            = 12
	TimeShift          = NodeBits + SeqBits
	MaxNode            = 1<<NodeBits - 1
	maxSeq             = 1<<SeqBits - 1
)

// Time decodes the creation time of id under the Twitter epoch.
func Time(id uint64) time.Time {
	return time.UnixMilli(int64(id>>TimeShift) + TwitterEpoch).UTC()
}

// Millis returns the Unix-millisecond timestamp carried by id.
func Millis(id uint64) int64 { return int64(id>>TimeShift) + TwitterEpoch }

// Make composes an id from its parts.
func Make(unixMilli int64, node, seq uint64) uint64 {
	return uint64(unixMilli-TwitterEpoch)<<TimeShift | (node&MaxNode)<<SeqBits | seq&maxSeq
}

// Valid reports whether id could be a snowflake made at or after the epoch
// and no later than maxSkew past now; it rejects ids such as 1 or 2^64-1 that
// a client might send by mistake.
func Valid(id uint64, now time.Time, maxSkew time.Duration) bool {
	if id>>TimeShift == 0 {
		return false
	}
	return Millis(id) <= now.Add(maxSkew).UnixMilli()
}

// Generator makes unique, increasing ids for one node. The zero value is
// node 0. Safe for concurrent use.
type Generator struct {
	mu   sync.Mutex
	Node uint64
	last int64 // ms of the last id
	seq  uint64
	// Now returns the current time; nil means time.Now.
	Now func() time.Time
}

// Next returns a fresh id, never smaller than or equal to a previous one from
// this generator, even if the wall clock steps back.
func (g *Generator) Next() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := time.Now
	if g.Now != nil {
		now = g.Now
	}
	ms := now().UnixMilli()
	if ms < g.last {
		ms = g.last
	}
	if ms == g.last {
		g.seq++
		if g.seq > maxSeq {
			ms++
			g.seq = 0
		}
	} else {
		g.seq = 0
	}
	g.last = ms
	return Make(ms, g.Node, g.seq)
}

// Observe makes later ids from g greater than id (used after recovery so a
// restarted engine never reissues an id it handed out before a crash).
func (g *Generator) Observe(id uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	ms := Millis(id)
	if ms > g.last || (ms == g.last && id&maxSeq > g.seq) {
		g.last = ms
		g.seq = id & maxSeq
	}
}
