package redisstore

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Traces walks every key of the Store's keyspace on every master and
// reports each place that still holds user's id: a key name with its
// decimal or base-36 form; a value, decoded by type, whose string, hash
// field or value, set, sorted-set or list member holds its decimal form
// or its 8 bytes (big- or little-endian: packed member lists, intsets);
// the user's field in their user bucket; a post record whose author is
// the user; and the serialized value (DUMP) holding any of those forms,
// so that an encoding the decoding missed is caught too.
func (s *Store) Traces(ctx context.Context, user uint64) ([]string, error) {
	dec := []byte(strconv.FormatUint(user, 10))
	b36 := strconv.FormatUint(user, 36)
	be := []byte(uid8(user))
	le := binary.LittleEndian.AppendUint64(nil, user)
	ubucket, ulow := s.k.user(user)
	holds := func(v string) bool {
		b := []byte(v)
		return bytes.Contains(b, dec) || bytes.Contains(b, be) || bytes.Contains(b, le)
	}
	var mu sync.Mutex
	var out []string
	note := func(format string, a ...any) {
		mu.Lock()
		out = append(out, fmt.Sprintf(format, a...))
		mu.Unlock()
	}
	pattern := globEscape(s.k.p) + "*"
	err := eachMaster(ctx, s.cluster, s.single, func(ctx context.Context, c *redis.Client) error {
		var cursor uint64
		for {
			keys, next, err := c.Scan(ctx, cursor, pattern, 1000).Result()
			if err != nil {
				return err
			}
			for _, key := range keys {
				if strings.Contains(key, string(dec)) || strings.Contains(key, b36) {
					note("key name %q", key)
				}
				if d, err := c.Dump(ctx, key).Result(); err == nil && holds(d) {
					note("serialized value of %q", key)
				}
				typ, err := c.Type(ctx, key).Result()
				if err != nil {
					return err
				}
				var elems []string
				switch typ {
				case "string":
					v, err := c.Get(ctx, key).Result()
					if err != nil && err != redis.Nil {
						return err
					}
					elems = []string{v}
				case "hash":
					m, err := c.HGetAll(ctx, key).Result()
					if err != nil {
						return err
					}
					post := strings.HasPrefix(key, s.k.p+"{p") && strings.HasSuffix(key, "}")
					for f, v := range m {
						elems = append(elems, f, v)
						if key == ubucket && f == ulow {
							note("user record %q field %s", key, f)
						}
						if exists, _ := recordState(v); post && exists {
							if a, err := decodeHead(v); err == nil && a == user {
								note("author of post record %q field %s", key, f)
							}
						}
					}
				case "set":
					if elems, err = c.SMembers(ctx, key).Result(); err != nil {
						return err
					}
				case "zset":
					if elems, err = c.ZRange(ctx, key, 0, -1).Result(); err != nil {
						return err
					}
				case "list":
					if elems, err = c.LRange(ctx, key, 0, -1).Result(); err != nil {
						return err
					}
				}
				for _, e := range elems {
					if holds(e) {
						note("%s %q holds %q", typ, key, e)
					}
				}
			}
			if cursor = next; cursor == 0 {
				return nil
			}
		}
	})
	return out, err
}
