package redisstore

import (
	"context"
	"slices"
	"strconv"

	"github.com/tally-dev/tally/engine"
)

// PostKey exposes a post's bucket key so tests can find the node and slot
// that hold it.
func (s *Store) PostKey(id engine.PostID) string {
	b, _ := s.k.post(uint64(id))
	return b
}

// SweepIntents sweeps the whole keyspace at once (sweepIntents), where
// the Store's periodic sweep goes a step at a time.
func (s *Store) SweepIntents(ctx context.Context) (int, error) {
	return s.sweepIntents(ctx, 0)
}

// ReceiptBytes is the size of a message's receipts record (HSTRLEN).
func (s *Store) ReceiptBytes(g engine.GroupID, m engine.MessageID) int64 {
	return s.rdb.HStrLen(context.Background(), s.k.group(uint64(g)).R, strconv.FormatUint(uint64(m), 10)).Val()
}

// SetCheckPause makes Check call fn before each of its steps.
func (s *Store) SetCheckPause(fn func(step string)) { s.checkPause = fn }

// PostField is a post's record: its bucket key and field.
func (s *Store) PostField(id engine.PostID) (key, field string) { return s.k.post(uint64(id)) }

// LikersKey is the key of a post's likers set.
func (s *Store) LikersKey(id engine.PostID) string { return likersKey(s.k.post(uint64(id))) }

// UserField is a user's record: its bucket key and field.
func (s *Store) UserField(u engine.UserID) (key, field string) { return s.k.user(uint64(u)) }

// FolloweesKey is the key of a user's followee hash.
func (s *Store) FolloweesKey(u engine.UserID) string { return s.k.followees(uint64(u)) }

// WithPostCounts is the post record rec with its counts replaced by c.
func WithPostCounts(rec string, c engine.Counts) string { return rec[:1+int(rec[0])] + encodeCounts(c) }

// WithUserCounts is the user record rec with its post, follower and
// following counts replaced by c's.
func WithUserCounts(rec string, c engine.UserCounts) string {
	u, err := decodeUser(rec)
	if err != nil {
		panic(err)
	}
	u.set(uPosts, c.Posts)
	u.set(uFollowers, c.Followers)
	u.set(uFollowing, c.Following)
	return u.encode()
}

// FavoritesAtLeast makes the favorites check one whose count may exceed
// its set (as comments against their ids), until restore.
func FavoritesAtLeast() (restore func()) {
	saved := postSetChecks
	postSetChecks = slices.Clone(postSetChecks)
	postSetChecks[1].atLeast = true
	return func() { postSetChecks = saved }
}
