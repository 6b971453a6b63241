package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/tally-dev/tally/engine"
)

// keyspaceFormat is the version of the keyspace's layout — every key's
// name and the encoding of its value, as doc.go lists them — that this
// build reads and writes, kept in the key "P{s}format". Tally has never
// been released, so no keyspace exists that a build must carry forward:
// a keyspace of another version is refused at Open with an
// *engine.FormatError, never converted. Any change to the layout bumps it.
const keyspaceFormat = 4

// checkFormat judges the keyspace's format marker at Open. A marker of
// this build's version is the keyspace it reads; any other is refused. A
// keyspace without one gets it when it holds no key yet; one that holds
// keys but no marker was written before markers (version 0) and is
// refused. Replicas opening an empty keyspace at once race to set the
// marker (SET NX) and each then judges the winner's.
func (s *Store) checkFormat(ctx context.Context) error {
	key := s.k.format()
	for {
		v, err := s.wdb.Get(ctx, key).Result()
		if err == nil {
			found, perr := strconv.ParseUint(v, 10, 64)
			if perr != nil {
				return fmt.Errorf("redisstore: %s holds %q, not a keyspace format version", key, v)
			}
			if found != keyspaceFormat {
				return s.formatError(found)
			}
			return nil
		}
		if !errors.Is(err, redis.Nil) {
			return unavailable(err)
		}
		if s.opts.Existing {
			return fmt.Errorf("redisstore: no Tally keyspace with key prefix %q at %s (no %s)", s.k.p, strings.Join(s.opts.Addrs, ","), key)
		}
		used, err := s.keyspaceUsed(ctx, key)
		if err != nil {
			return unavailable(err)
		}
		if used {
			// Keys beside no marker: an older build's, unless another
			// replica set the marker meanwhile and wrote after it.
			if v, err := s.wdb.Get(ctx, key).Result(); err == nil && v == strconv.Itoa(keyspaceFormat) {
				return nil
			}
			return s.formatError(0)
		}
		set, err := s.wdb.SetNX(ctx, key, keyspaceFormat, 0).Result()
		if err != nil {
			return unavailable(err)
		}
		if set {
			return nil
		}
		// Another replica set it first: judge its marker.
	}
}

// keyspaceUsed reports whether any key of the keyspace (the prefix, then
// a hash tag) but marker exists, on any master. A master holding no key
// at all (DBSIZE) is passed at once; one holding keys is walked with
// SCAN, which costs time in proportion to all its keys, so it runs only
// while a keyspace has no marker, at its first Open.
func (s *Store) keyspaceUsed(ctx context.Context, marker string) (bool, error) {
	var used atomic.Bool
	pattern := globEscape(s.k.p) + "{*"
	err := eachMaster(ctx, s.wcluster, s.wsingle, func(ctx context.Context, c *redis.Client) error {
		if n, err := c.DBSize(ctx).Result(); err != nil || n == 0 {
			return err
		}
		var cursor uint64
		for !used.Load() {
			keys, next, err := c.Scan(ctx, cursor, pattern, 1000).Result()
			if err != nil {
				return err
			}
			for _, k := range keys {
				if k != marker {
					used.Store(true)
				}
			}
			if cursor = next; cursor == 0 {
				break
			}
		}
		return nil
	})
	return used.Load(), err
}

func (s *Store) formatError(found uint64) error {
	return fmt.Errorf("redisstore: %w", &engine.FormatError{
		Store:  fmt.Sprintf("the Redis keyspace of key prefix %q at %s", s.k.p, strings.Join(s.opts.Addrs, ",")),
		Format: "Redis keyspace", Found: found, Want: keyspaceFormat,
		Fresh: "an empty keyspace (a Redis database without Tally's keys, or another key prefix)",
	})
}
