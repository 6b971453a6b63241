package engine

import (
	"fmt"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/tally-dev/tally/engine/snowflake"
)

// The helpers below are the backend-agnostic halves of the product rules:
// every backend calls them so that input is judged the same way everywhere.

// NormalizeMentions returns the users a comment, repost or message by actor
// mentions: each at most once, never the actor, never id 0, in first-seen
// order. More than MaxMentions ids is ErrInvalid.
func NormalizeMentions(actor UserID, mentions []UserID) ([]UserID, error) {
	if len(mentions) > MaxMentions {
		return nil, fmt.Errorf("%w: at most %d mentions", ErrInvalid, MaxMentions)
	}
	out := make([]UserID, 0, len(mentions))
	for _, u := range mentions {
		if u == 0 || u == actor || slices.Contains(out, u) {
			continue
		}
		out = append(out, u)
	}
	return out, nil
}

// NormalizeUsers checks a member list: no id 0, at most MaxIDsPerCall ids,
// duplicates dropped, order kept.
func NormalizeUsers(users []UserID) ([]UserID, error) {
	if len(users) > MaxIDsPerCall {
		return nil, fmt.Errorf("%w: at most %d users per call", ErrInvalid, MaxIDsPerCall)
	}
	out := make([]UserID, 0, len(users))
	for _, u := range users {
		if u == 0 {
			return nil, fmt.Errorf("%w: user id 0", ErrInvalid)
		}
		if !slices.Contains(out, u) {
			out = append(out, u)
		}
	}
	return out, nil
}

// CheckIdemKey validates an idempotency key ("" means none).
func CheckIdemKey(key string) error {
	if len(key) > MaxIdemKeyBytes {
		return fmt.Errorf("%w: idempotencyKey longer than %d bytes", ErrInvalid, MaxIdemKeyBytes)
	}
	return nil
}

// CheckText validates a message text.
func CheckText(text string) error {
	switch {
	case text == "":
		return fmt.Errorf("%w: text is empty", ErrInvalid)
	case len(text) > MaxTextBytes:
		return fmt.Errorf("%w: text longer than %d bytes", ErrInvalid, MaxTextBytes)
	case !utf8.ValidString(text):
		return fmt.Errorf("%w: text is not valid UTF-8", ErrInvalid)
	}
	return nil
}

// CheckNotification validates a system notification.
func CheckNotification(title, body string) error {
	switch {
	case title == "":
		return fmt.Errorf("%w: title is empty", ErrInvalid)
	case len(title) > MaxTitleBytes:
		return fmt.Errorf("%w: title longer than %d bytes", ErrInvalid, MaxTitleBytes)
	case len(body) > MaxTextBytes:
		return fmt.Errorf("%w: body longer than %d bytes", ErrInvalid, MaxTextBytes)
	case !utf8.ValidString(title) || !utf8.ValidString(body):
		return fmt.Errorf("%w: title or body is not valid UTF-8", ErrInvalid)
	}
	return nil
}

// CheckIDs validates a list of ids passed in one call.
func CheckIDs[T ~uint64](ids []T) error {
	if len(ids) > MaxIDsPerCall {
		return fmt.Errorf("%w: at most %d ids per call", ErrInvalid, MaxIDsPerCall)
	}
	for _, id := range ids {
		if id == 0 {
			return fmt.Errorf("%w: id 0", ErrInvalid)
		}
	}
	return nil
}

// ClampPage bounds a page size to [0, MaxPageSize]; negative is ErrInvalid.
func ClampPage(first int) (int, error) {
	if first < 0 {
		return 0, fmt.Errorf("%w: first must not be negative", ErrInvalid)
	}
	return min(first, MaxPageSize), nil
}

// CheckPage validates the size of a page of a list that can grow (group
// members, readers, unreaders): 0..MaxPageSize, anything else ErrInvalid,
// so that a request's cost is bounded by what it asks for.
func CheckPage(first int) error {
	if first < 0 || first > MaxPageSize {
		return fmt.Errorf("%w: first must be between 0 and %d", ErrInvalid, MaxPageSize)
	}
	return nil
}

// FeedUnread is Σ over followees of (current post count − snapshot), where a
// followee whose count is below the snapshot (an import replaced it)
// contributes 0 rather than a negative number.
func FeedUnread(current, snapshot []int64) int64 {
	var n int64
	for i := range current {
		if d := current[i] - snapshot[i]; d > 0 {
			n += d
		}
	}
	return n
}

// MaxClockSkew is how far in the future a client-supplied snowflake id may
// point: client clocks drift, but an id from next year is a bug.
const MaxClockSkew = 5 * time.Minute

// CheckPostID validates a client-supplied post id against now: it must be a
// snowflake made after the epoch and at most MaxClockSkew ahead of now.
func CheckPostID(id PostID, now time.Time) error {
	if !snowflake.Valid(uint64(id), now, MaxClockSkew) {
		return fmt.Errorf("%w: post id %d is not a snowflake id of a plausible time", ErrInvalid, uint64(id))
	}
	return nil
}

// CheckViewer rejects the user id 0, which no signed-in user has.
func CheckViewer(viewer UserID) error {
	if viewer == 0 {
		return fmt.Errorf("%w: user id 0", ErrInvalid)
	}
	return nil
}

// CheckCommentID validates an app-supplied comment id against now, as
// CheckPostID does a post id: a snowflake of a plausible time.
func CheckCommentID(id CommentID, now time.Time) error {
	if !snowflake.Valid(uint64(id), now, MaxClockSkew) {
		return fmt.Errorf("%w: comment id %d is not a snowflake id of a plausible time", ErrInvalid, uint64(id))
	}
	return nil
}
