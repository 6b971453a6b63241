package snowflake

import (
	"math"
	"math/bits"
)

// Windows partitions ids by the time they carry into windows of Millis
// milliseconds aligned on the Unix epoch (so day windows are UTC days).
// Every store tiered by time (the post table, the like and favorite sets)
// cuts windows the same way, so one window number names the same span of
// posts in all of them. Ids below the epoch's first millisecond fall in the
// window holding the epoch.
type Windows struct {
	Millis int64 // > 0
}

// Of returns the number and the id range [lo, last] of the window holding id.
func (w Windows) Of(id uint64) (num int64, lo, last uint64) {
	num = (int64(id>>TimeShift) + TwitterEpoch) / w.Millis
	return num, w.Start(num), w.Last(num)
}

// Start is the first id of window num (0 for the window holding the epoch).
func (w Windows) Start(num int64) uint64 {
	ms := num*w.Millis - TwitterEpoch
	if ms <= 0 {
		return 0
	}
	return uint64(ms) << TimeShift
}

// Last is the last id of window num.
func (w Windows) Last(num int64) uint64 {
	ms := (num+1)*w.Millis - TwitterEpoch
	if ms >= 1<<(64-TimeShift) {
		return math.MaxUint64
	}
	return uint64(ms)<<TimeShift - 1
}

// End is the Unix millisecond at which window num ends.
func (w Windows) End(num int64) int64 { return (num + 1) * w.Millis }

// KeyBits is how many low bits of an id distinguish it within its window:
// the rest is the window's prefix.
func (w Windows) KeyBits() uint { return uint(TimeShift + bits.Len64(uint64(w.Millis-1))) }
