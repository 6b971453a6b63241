package main

import (
	"math"
	"math/bits"
	"time"
)

// hist is a log-linear latency histogram in nanoseconds (HDR-like): below
// 2^subBits every value has its own bucket, above it each power of two is
// cut into 2^subBits linear buckets, so a recorded value is off by at most
// 1/2^subBits (1.6%). It is a fixed array, so a client records without
// allocating or locking, and per-client histograms merge exactly.
type hist struct {
	counts   [histBuckets]uint64
	n        uint64
	min, max uint64
}

const (
	subBits     = 6
	subCount    = 1 << subBits
	histBuckets = subCount + (64-subBits)*subCount
)

func histIndex(v uint64) int {
	if v < subCount {
		return int(v)
	}
	e := bits.Len64(v) - subBits - 1 // v>>e is in [subCount, 2*subCount)
	return subCount + e*subCount + int(v>>uint(e)) - subCount
}

// histValue is the middle of bucket i's range.
func histValue(i int) uint64 {
	if i < subCount {
		return uint64(i)
	}
	e := (i - subCount) / subCount
	m := uint64(i-subCount)%subCount + subCount
	lo := m << uint(e)
	return lo + (uint64(1)<<uint(e))/2
}

func (h *hist) record(d time.Duration) {
	v := uint64(max(d, 0))
	h.counts[histIndex(v)]++
	if h.n == 0 || v < h.min {
		h.min = v
	}
	if v > h.max {
		h.max = v
	}
	h.n++
}

func (h *hist) merge(o *hist) {
	if o.n == 0 {
		return
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	if h.n == 0 || o.min < h.min {
		h.min = o.min
	}
	h.max = max(h.max, o.max)
	h.n += o.n
}

// quantile returns the value at rank ceil(q·n), clamped to the exact
// minimum and maximum seen.
func (h *hist) quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	rank = min(max(rank, 1), h.n)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return time.Duration(min(max(histValue(i), h.min), h.max))
		}
	}
	return time.Duration(h.max)
}
