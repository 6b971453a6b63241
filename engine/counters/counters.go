// Package counters names the five counters of a post (seed 003) and their
// order, the order of engine.Counts. The embedded engine's snapshots mark
// a post's non-zero counters by these numbers, so the order is part of the
// on-disk format: a new counter goes at the end.
package counters

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
