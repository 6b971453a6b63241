// Package counters names the five counters of a post (seed 003) and their
// order, the order of engine.Counts, and the reaction kinds a deployment
// adds to them (kinds.go: kind ids, a post's counts of the kinds beyond
// like, the kinds table and how a configuration is reconciled with it).
// The embedded engine's snapshots mark a post's non-zero counters by
// these numbers, so the order is part of the on-disk format: a new
// counter goes at the end.
package counters

import "math"

// Field names one of the five counters of a post.
type Field uint8

// The fields, in the order of engine.Counts.
const (
	Likes Field = iota
	Comments
	Reposts
	Views
	Favorites
	NumFields = 5
)

func (f Field) String() string {
	switch f {
	case Likes:
		return "likes"
	case Comments:
		return "comments"
	case Reposts:
		return "reposts"
	case Views:
		return "views"
	case Favorites:
		return "favorites"
	}
	return "invalid"
}

// Floor and Ceiling bound every stored count. A count never goes below
// zero, whatever the order of concurrent unlikes, deletes and erasures (a
// decrement that would cross zero stops there), and it saturates instead
// of wrapping. This is the one statement of that rule: Go code applies it
// through Add, and the Redis scripts receive Floor and Ceiling as
// arguments rather than carrying their own copy.
const (
	Floor   int64 = 0
	Ceiling int64 = math.MaxInt64
)

// Add returns cur+delta kept within [Floor, Ceiling], for cur within them.
func Add(cur, delta int64) int64 {
	switch {
	case delta > 0 && cur > Ceiling-delta:
		return Ceiling
	case cur+delta < Floor: // cur >= 0, so cur+delta cannot overflow downwards
		return Floor
	}
	return cur + delta
}
