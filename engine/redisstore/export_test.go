package redisstore

import (
	"context"
	"encoding/binary"
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

// SetErasureSaved makes every erasure call fn after each saved step.
func (s *Store) SetErasureSaved(fn func()) { s.erasureSaved = fn }

// SetCheckPause makes Check call fn before each of its steps.
func (s *Store) SetCheckPause(fn func(step string)) { s.checkPause = fn }

// PostField is a post's record: its bucket key and field.
func (s *Store) PostField(id engine.PostID) (key, field string) { return s.k.post(uint64(id)) }

// LikersKey is the key of a post's likers set.
func (s *Store) LikersKey(id engine.PostID) string { return likersKey(s.k.post(uint64(id))) }

// ReactorsKey is the key of a post's reactors hash (kinds other than like).
func (s *Store) ReactorsKey(id engine.PostID) string { return reactorsKey(s.k.post(uint64(id))) }

// ReactedBit is the bit of a post record's first byte that says its
// reactors hash may exist.
const ReactedBit = reactedBit

// UserField is a user's record: its bucket key and field.
func (s *Store) UserField(u engine.UserID) (key, field string) { return s.k.user(uint64(u)) }

// FolloweesKey is the key of a user's followee hash.
func (s *Store) FolloweesKey(u engine.UserID) string { return s.k.followees(uint64(u)) }

// WithPostCounts is the post record rec with its counts replaced by c
// (the comments sent without an id kept).
func WithPostCounts(rec string, c engine.Counts) string {
	var v [pUnidentified]int64
	if err := decodeVarints(rec[headLen(rec):], v[:]); err != nil {
		panic(err)
	}
	out := []int64{c.Views, c.Likes, c.Comments, c.Reposts, c.Favorites, v[pUnidentified-1]}
	for len(out) > 0 && out[len(out)-1] == 0 {
		out = out[:len(out)-1]
	}
	b := []byte(rec[:headLen(rec)])
	for _, x := range out {
		b = binary.AppendUvarint(b, uint64(x))
	}
	return string(b)
}

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
