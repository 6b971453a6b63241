// Package redispeers measures what the layouts teams build on Redis cost
// for the same post counts Tally stores, on a real redis-server started by
// the benchmark and the shared data set of bench/datagen, beside Tally's
// post table (engine/tier) on the same data in the same run. It also owns the
// Instagram-style bucket layout (Buckets) that bench/memory loads beside
// Tally through the binary, so both measure one layout.
//
//	TALLY_BENCH_N=10000000 go test ./bench/redispeers -run '^$' -bench . -benchtime 1x -timeout 30m
package redispeers

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/tally-dev/tally/engine"
)

// PostsPerBucket is the size Instagram chose for its buckets ("about
// 1,000"; 500 here): small enough that Redis keeps each bucket hash
// listpack-encoded (hash-max-listpack-entries must be above it, see
// ServerArgs), large enough that a key's ~70 bytes of overhead spread thin.
const PostsPerBucket = 500

// UsersPerBucket groups users' post counts the way Instagram grouped its
// media → user map: user ids are dense (1..Users), so id/1000 fills each
// bucket, as sequential media ids did in Instagram's scheme.
const UsersPerBucket = 1000

// ServerArgs are the redis-server settings the bucket layout needs (and
// engine/redisstore documents for its own buckets): hashes of up to 1,024
// entries of up to 64 bytes stay listpack-encoded.
var ServerArgs = []string{"--hash-max-listpack-entries", "1024", "--hash-max-listpack-value", "64"}

// Buckets is Instagram's technique for hundreds of millions of small
// records on Redis ("Storing hundreds of millions of simple key-value pairs
// in Redis", 2011): instead of a key per post, small hashes of about
// PostsPerBucket posts, so Redis keeps them in its compact listpack
// encoding. The field is the post id, the value the post's record packed as
// decimal text: "likes,comments,reposts,views,favorites" without authors,
// "author,likes,…" with them (one field per post holding both, as Tally
// keeps author and counts in one record: a second field per post would pay
// the field's id twice), trailing zero counts dropped. Snowflake ids are
// sparse in time, so buckets cannot be id/1000 (most would hold one
// post), and their low bits are structured (a sequence below 16 leaves
// bits 4–11 zero: id modulo 20,000 buckets used only half of them, which
// then outgrew the listpack encoding), so a post's bucket is a
// multiplicative hash of its id modulo the bucket count.
//
// An author's post count goes in a user bucket (UserKey): HSET of the
// total, so a load can be retried without counting twice.
type Buckets struct {
	N       uint64 // buckets: max(1, stored posts / PostsPerBucket)
	Authors bool   // values start with the author
}

// NewBuckets sizes the layout for stored posts.
func NewBuckets(stored int, authors bool) Buckets {
	return Buckets{N: uint64(max(1, stored/PostsPerBucket)), Authors: authors}
}

// Key is the hash that holds post id.
func (b Buckets) Key(id uint64) string { return BucketKey((id * 0x9E3779B97F4A7C15 >> 32) % b.N) }

// BucketKey is the name of bucket i (0 ≤ i < N).
func BucketKey(i uint64) string { return "b:" + strconv.FormatUint(i, 10) }

// Field is post id's field in its bucket.
func Field(id uint64) string { return strconv.FormatUint(id, 10) }

// UserKey is the hash that holds user uid's post count (field: uid).
func UserKey(uid engine.UserID) string {
	return "u:" + strconv.FormatUint(uint64(uid)/UsersPerBucket, 10)
}

// Value packs a post's record; author is ignored without Authors.
func (b Buckets) Value(author engine.UserID, c engine.Counts) string {
	v := [5]int64{c.Likes, c.Comments, c.Reposts, c.Views, c.Favorites}
	n := 5
	for n > 0 && v[n-1] == 0 {
		n--
	}
	buf := make([]byte, 0, 48)
	if b.Authors {
		buf = strconv.AppendUint(buf, uint64(author), 10)
	}
	for i := range n {
		if i > 0 || b.Authors {
			buf = append(buf, ',')
		}
		buf = strconv.AppendInt(buf, v[i], 10)
	}
	return string(buf)
}

// Parse unpacks a Value.
func (b Buckets) Parse(s string) (engine.UserID, engine.Counts, error) {
	parts := strings.Split(s, ",")
	var author engine.UserID
	if b.Authors {
		a, err := strconv.ParseUint(parts[0], 10, 64)
		if err != nil || a == 0 {
			return 0, engine.Counts{}, fmt.Errorf("bucket value %q: author %q is not a user id", s, parts[0])
		}
		author, parts = engine.UserID(a), parts[1:]
	} else if s == "" {
		parts = nil
	}
	if len(parts) > 5 {
		return 0, engine.Counts{}, fmt.Errorf("bucket value %q: %d counts, at most 5", s, len(parts))
	}
	var v [5]int64
	for i, p := range parts {
		n, err := strconv.ParseInt(p, 10, 64)
		if err != nil || n < 0 {
			return 0, engine.Counts{}, fmt.Errorf("bucket value %q: count %q", s, p)
		}
		v[i] = n
	}
	if len(parts) > 0 && v[len(parts)-1] == 0 {
		return 0, engine.Counts{}, errors.New("bucket value " + strconv.Quote(s) + ": a trailing zero count is never written")
	}
	return author, engine.Counts{Likes: v[0], Comments: v[1], Reposts: v[2], Views: v[3], Favorites: v[4]}, nil
}

// Set queues the post's record into p.
func (b Buckets) Set(ctx context.Context, p redis.Pipeliner, id uint64, author engine.UserID, c engine.Counts) {
	p.HSet(ctx, b.Key(id), Field(id), b.Value(author, c))
}

// Get queues the read of post id's record into p (redis.Nil: not stored).
func (b Buckets) Get(ctx context.Context, p redis.Pipeliner, id uint64) *redis.StringCmd {
	return p.HGet(ctx, b.Key(id), Field(id))
}
