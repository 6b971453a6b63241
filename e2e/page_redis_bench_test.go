package e2e

import (
	"testing"

	"github.com/tally-dev/tally/engine/redisstore/redistest"
)

// BenchmarkFeedPageHTTPRedis is the feed-page benchmark on the Redis
// backend (a single redis-server started for the run): the peer that shows
// what a network hop per kind costs next to the embedded engine.
func BenchmarkFeedPageHTTPRedis(b *testing.B) {
	addr, _ := redistest.StartSingle(b) // stopped by b.Cleanup, after the store closes
	benchStorePage(b, openTestRedis(b, []string{addr}, "bench"))
}
