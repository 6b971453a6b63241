package redisstore

import "github.com/redis/go-redis/v9"

// Client is the store's retrying client (the one reads use), for data
// that lives beside the store's own and whose writes may safely repeat,
// such as a cache shared by replicas. Keys written through it should
// start with KeyPrefix() so that deployments sharing a Redis stay apart.
func (s *Store) Client() redis.UniversalClient { return s.rdb }

// KeyPrefix is the prefix of every key the store writes.
func (s *Store) KeyPrefix() string { return s.k.p }

// AddHook adds a go-redis hook (for example command latency metrics) to
// both of the store's clients, reads and writes. Clients made later for
// MOVED redirections on a single-node start are not hooked.
func (s *Store) AddHook(h redis.Hook) {
	s.rdb.AddHook(h)
	if s.wdb != s.rdb {
		s.wdb.AddHook(h)
	}
}
