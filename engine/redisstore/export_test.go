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

// ReceiptBytes is the size of a message's receipts record (HSTRLEN).
func (s *Store) ReceiptBytes(g engine.GroupID, m engine.MessageID) int64 {
	return s.rdb.HStrLen(context.Background(), s.k.group(uint64(g)).R, strconv.FormatUint(uint64(m), 10)).Val()
}
