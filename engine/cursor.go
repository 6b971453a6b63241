package engine

import "time"

// System-notification cursors expire by one rule on every backend, judged
// against the backend's clock (its Options.Now), never against a store's
// own expiry timer, so that a fake clock drives it in tests.
//
// A user is active when they read their badges (Store.Unread). Activity is
// kept per UTC day: a backend records the day of a user's last read, so a
// polling client costs at most one write a day. A user last active on day
// d keeps their cursor until ttl after the end of day d — rounding up, so
// nobody is forgotten before being idle for the full ttl.

// ActivityDay is the granularity of a user's activity stamp.
const ActivityDay = 24 * time.Hour

// ActivityDayStart returns the start of the UTC day holding t. A backend
// refreshes a user's activity stamp when it is older than this.
func ActivityDayStart(t time.Time) time.Time {
	return time.Unix(0, 0).UTC().Add(time.Duration(floorDiv(t.UnixNano(), int64(ActivityDay))) * ActivityDay)
}

// CursorCutoff returns the oldest activity stamp whose cursor still counts
// at now: a cursor last active before it has expired. It is the start of
// the UTC day holding now−ttl.
func CursorCutoff(now time.Time, ttl time.Duration) time.Time {
	return ActivityDayStart(now.Add(-ttl))
}

// CursorExpired reports whether the cursor of a user last active at
// lastSeen has expired at now. A zero lastSeen (never active) has expired.
func CursorExpired(lastSeen, now time.Time, ttl time.Duration) bool {
	return lastSeen.Before(CursorCutoff(now, ttl))
}

// IdemExpired reports whether an idempotency key first used at recorded
// has been forgotten at now (engine.IdempotencyTTL): from then on, the key
// is new again.
func IdemExpired(recorded, now time.Time) bool {
	return !recorded.After(now.Add(-IdempotencyTTL))
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}
