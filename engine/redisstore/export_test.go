package redisstore

import (
	"context"
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
