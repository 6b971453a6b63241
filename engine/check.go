package engine

import "context"

// Checker is a store that can recount its derived counts from what they
// count (`tally check`): a post's likes from its like set, a user's
// followers from the follow edges, an author's post count from the posts
// registered with them, and so on. Each backend keeps a table of these
// checks, one entry per derived count, named by the Check* constants.
//
// Check reports each drift it finds (a count that is not what it counts)
// to opts.Drift and returns the tallies. With opts.Repair it sets each
// drifted count to its recount through the store's own write path (a
// log record; a script that re-checks and sets atomically), so a repair
// is as durable as any write and never overwrites a concurrent one: a
// count that changed between the recount and the repair is left alone
// and reported Unsettled.
type Checker interface {
	Check(ctx context.Context, opts CheckOptions) (CheckResult, error)
}

// The derived counts a check verifies, "<what it belongs to>.<count>".
// A backend checks those it stores; one it derives on every read (the
// embedded engine's following count is its followee list's length) has
// nothing that can drift.
const (
	CheckLikes     = "post.likes"     // ← the post's like set
	CheckFavorites = "post.favorites" // ← the post's favorite set
	CheckComments  = "post.comments"  // ← the post's counted comment ids and those sent without one (where a backend does not count those, the count must be at least the ids)
	// CheckReactions prefixes each reaction kind's check but like's
	// (CheckLikes): "post.reactions.love" ← the post's reactions of love.
	CheckReactions = "post.reactions."
	CheckFollowers = "user.followers" // ← the follow edges to the user
	CheckFollowing = "user.following" // ← the follow edges from the user
	CheckPosts     = "user.posts"     // ← the posts registered with the user as author
	// CheckReacted is the mark a backend keeps on a post that may have
	// reactions of a kind other than like, so that a page reads who
	// reacted only there (Redis: the record's reacted bit), 1 or 0 ←
	// whether the post has such reactions (Redis: its reactors hash).
	CheckReacted = "post.reacted"
)

// CheckOptions say what a check does besides counting.
type CheckOptions struct {
	// Repair sets each drifted count to its recount.
	Repair bool
	// Drift, when set, is called for each drift and each unsettled count,
	// one call at a time, as the check finds them.
	Drift func(Drift)
}

// Drift is one derived count that is not what it counts.
type Drift struct {
	Count     string // which count: one of the Check* names
	ID        uint64 // the post's or user's id
	Stored    int64  // what the store holds
	Recounted int64  // what it counts
	// Repaired: the count now holds Recounted.
	Repaired bool
	// Unsettled: the count changed while it was being checked (a live
	// store), so no drift could be judged or it was not repaired; a
	// later check judges it again.
	Unsettled bool
}

// CheckTally is what a check found for one derived count.
type CheckTally struct {
	Count     string
	Checked   int64 // counts compared with their recount
	Drifts    int64
	Repaired  int64
	Unsettled int64
	// Skipped counts not checked because nothing the store holds derives
	// them: the likes and favorites of posts whose counts were imported
	// (an import brings counts without the sets behind them).
	Skipped int64
}

// CheckResult is a whole check's outcome: a tally per derived count, in
// the order the backend's table lists them, and notes for the operator.
type CheckResult struct {
	Tallies []CheckTally
	Notes   []string
}

// Tally returns the tally of count, creating it (in order of first use).
func (r *CheckResult) Tally(count string) *CheckTally {
	for i := range r.Tallies {
		if r.Tallies[i].Count == count {
			return &r.Tallies[i]
		}
	}
	r.Tallies = append(r.Tallies, CheckTally{Count: count})
	return &r.Tallies[len(r.Tallies)-1]
}

// Totals sums the tallies.
func (r *CheckResult) Totals() CheckTally {
	var t CheckTally
	for _, c := range r.Tallies {
		t.Checked += c.Checked
		t.Drifts += c.Drifts
		t.Repaired += c.Repaired
		t.Unsettled += c.Unsettled
		t.Skipped += c.Skipped
	}
	return t
}

// ImportSpan is the range of post ids that imports have written counts
// for, which a check cannot recount from sets (Skipped). Both ends are
// inclusive; the zero span holds none. Backends keep it beside their
// posts and widen it before an import's rows are written, so it never
// misses one.
type ImportSpan struct{ Lo, Hi uint64 }

// Has reports whether id is in the span.
func (s ImportSpan) Has(id uint64) bool { return s.Hi != 0 && s.Lo <= id && id <= s.Hi }

// Widen returns the span grown to hold id.
func (s ImportSpan) Widen(id uint64) ImportSpan {
	if s.Hi == 0 {
		return ImportSpan{id, id}
	}
	return ImportSpan{min(s.Lo, id), max(s.Hi, id)}
}
