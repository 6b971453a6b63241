package main

import (
	"testing"

	"github.com/tally-dev/tally/engine/redisstore/redistest"
)

// BenchmarkFeedPageHTTPRedis is the feed-page benchmark on the Redis
// backend (a single redis-server started for the run): the peer that shows
// what a network hop per kind costs next to the embedded engine.
func BenchmarkFeedPageHTTPRedis(b *testing.B) {
	addr, stop := redistest.StartSingle(b)
	defer stop()
	benchStorePage(b, openTestRedis(b, []string{addr}, "bench"))
}
