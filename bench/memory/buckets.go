package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tally-dev/tally/bench/redispeers"
	"github.com/tally-dev/tally/engine"
)

// measureBuckets measures the Instagram-style bucket layout
// (redispeers.Buckets) on the same data: a redis-server of its own, loaded
// from the same CSV file tally imported, checked against the data set,
// then its used_memory and RSS.
func measureBuckets(ctx context.Context, cfg config, ds *data, out io.Writer) (result, error) {
	r := result{Authors: ds.authors, Posts: cfg.posts, Label: labelBuckets, NonZeroPosts: int64(ds.counted)}
	rs, err := startRedis(ctx, filepath.Join(cfg.work, "buckets-"+setName(ds.authors)))
	if err != nil {
		return r, err
	}
	defer rs.stop()
	stored := ds.counted
	if ds.authors {
		stored = cfg.posts
	}
	b := redispeers.NewBuckets(stored, ds.authors)
	fmt.Fprintf(out, "loading %s into Redis %s as %d Instagram-style buckets\n", filepath.Base(ds.csv), rs.addr, b.N)
	start := time.Now()
	ld, err := loadBuckets(ctx, rs.client, b, ds.csv, cfg.redisWorkers)
	if err != nil {
		return r, fmt.Errorf("loading the buckets: %v", err)
	}
	r.ImportSeconds = time.Since(start).Seconds()
	fmt.Fprintf(out, "loaded %d posts and %d authors' post counts in %.1f s (%d pipelines retried)\n", ld.posts, len(ld.perUser), r.ImportSeconds, ld.retried)
	r.KnownPosts, r.CountedPosts = int64(ld.posts), int64(ld.counted)
	if err := checkBuckets(ctx, rs.client, b, ds, ld, stored); err != nil {
		return r, fmt.Errorf("the buckets: %v", err)
	}
	r.Verified = len(ds.sample)
	if r.Redis, err = rs.memory(ctx); err != nil {
		return r, err
	}
	return r, nil
}

// loaded is what loadBuckets wrote.
type loaded struct {
	posts, counted int
	perUser        map[engine.UserID]int32
	retried        int
}

// redisBatch is the rows of one pipeline.
const redisBatch = 1000

// loadBuckets writes every row of the CSV file into b through workers
// concurrent pipelines of redisBatch HSETs, then each author's post
// count. Every write is an HSET of a whole value, so a pipeline that failed
// (a timeout on a busy machine) is sent again as it was: at most 5 times.
func loadBuckets(ctx context.Context, c *redis.Client, b redispeers.Buckets, csvPath string, workers int) (loaded, error) {
	ld := loaded{perUser: map[engine.UserID]int32{}}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	type kv struct{ key, field, value string }
	batches := make(chan []kv, workers)
	var wg sync.WaitGroup
	var mu sync.Mutex
	for range max(workers, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for batch := range batches {
				retried, err := execRetrying(ctx, c, func(p redis.Pipeliner) {
					for _, e := range batch {
						p.HSet(ctx, e.key, e.field, e.value)
					}
				})
				mu.Lock()
				ld.retried += retried
				mu.Unlock()
				if err != nil {
					cancel(err)
					return
				}
			}
		}()
	}
	send := func(batch []kv) bool {
		select {
		case batches <- batch:
			return true
		case <-ctx.Done():
			return false
		}
	}
	err := func() error {
		f, err := os.Open(csvPath)
		if err != nil {
			return err
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<16), 1<<20)
		if !sc.Scan() {
			return fmt.Errorf("%s: no header", csvPath)
		}
		if withAuthors := bytes.HasPrefix(sc.Bytes(), []byte("post_id,author_id,")); withAuthors != b.Authors {
			return fmt.Errorf("%s: header %q; the buckets were sized for authors=%v", csvPath, sc.Text(), b.Authors)
		}
		batch := make([]kv, 0, redisBatch)
		for line := 2; sc.Scan(); line++ {
			id, author, counts, err := parseRow(sc.Bytes(), b.Authors)
			if err != nil {
				return fmt.Errorf("%s:%d: %v", csvPath, line, err)
			}
			ld.posts++
			if counts != (engine.Counts{}) {
				ld.counted++
			}
			if b.Authors {
				ld.perUser[author]++
			}
			batch = append(batch, kv{b.Key(id), redispeers.Field(id), b.Value(author, counts)})
			if len(batch) == redisBatch {
				if !send(batch) {
					return nil
				}
				batch = make([]kv, 0, redisBatch)
			}
		}
		if err := sc.Err(); err != nil {
			return err
		}
		for uid, n := range ld.perUser {
			batch = append(batch, kv{redispeers.UserKey(uid), strconv.FormatUint(uint64(uid), 10), strconv.Itoa(int(n))})
			if len(batch) == redisBatch {
				if !send(batch) {
					return nil
				}
				batch = make([]kv, 0, redisBatch)
			}
		}
		if len(batch) > 0 {
			send(batch)
		}
		return nil
	}()
	close(batches)
	wg.Wait()
	if err != nil {
		return ld, err
	}
	if err := context.Cause(ctx); err != nil {
		return ld, err
	}
	return ld, nil
}

// execRetrying runs a pipeline of idempotent writes, sending it again
// after a failure (1 s, 2 s, 4 s, 8 s apart). It returns how many times it
// sent it again.
func execRetrying(ctx context.Context, c *redis.Client, queue func(redis.Pipeliner)) (int, error) {
	var err error
	for attempt := range 5 {
		if attempt > 0 {
			select {
			case <-time.After(time.Second << (attempt - 1)):
			case <-ctx.Done():
				return attempt - 1, ctx.Err()
			}
		}
		p := c.Pipeline()
		queue(p)
		if _, err = p.Exec(ctx); err == nil {
			return attempt, nil
		}
		if ctx.Err() != nil {
			return attempt, ctx.Err()
		}
	}
	return 4, fmt.Errorf("a pipeline failed 5 times: %v", err)
}

// parseRow reads "post_id[,author_id],likes,comments,reposts,views,favorites".
func parseRow(line []byte, authors bool) (uint64, engine.UserID, engine.Counts, error) {
	want := 6
	if authors {
		want = 7
	}
	var f [7]uint64
	n := 0
	for {
		field, rest, more := bytes.Cut(line, []byte{','})
		if n == want {
			return 0, 0, engine.Counts{}, fmt.Errorf("more than %d fields", want)
		}
		v, err := strconv.ParseUint(string(field), 10, 64)
		if err != nil {
			return 0, 0, engine.Counts{}, fmt.Errorf("field %d: %q is not a non-negative integer", n+1, field)
		}
		f[n] = v
		n++
		if !more {
			break
		}
		line = rest
	}
	if n != want {
		return 0, 0, engine.Counts{}, fmt.Errorf("%d fields, want %d", n, want)
	}
	var author engine.UserID
	c := f[1:]
	if authors {
		author, c = engine.UserID(f[1]), f[2:]
	}
	return f[0], author, engine.Counts{Likes: int64(c[0]), Comments: int64(c[1]), Reposts: int64(c[2]), Views: int64(c[3]), Favorites: int64(c[4])}, nil
}

// checkBuckets proves the load is the data set: every bucket's size adds
// up to the posts stored, every author's post count is there, and each
// sampled post reads back exactly (absent when it has no counts and no
// author), its author's count equal to the data set's. It also checks the
// layout's premise: every post bucket is listpack-encoded.
func checkBuckets(ctx context.Context, c *redis.Client, b redispeers.Buckets, ds *data, ld loaded, stored int) error {
	if ld.posts != stored || ld.counted != ds.counted {
		return fmt.Errorf("the CSV file holds %d posts, %d with counts; the data set has %d and %d", ld.posts, ld.counted, stored, ds.counted)
	}
	total, err := hashSizes(ctx, c, int(b.N), func(i int) string { return redispeers.BucketKey(uint64(i)) })
	if err != nil {
		return err
	}
	if total != int64(stored) {
		return fmt.Errorf("the buckets hold %d posts; %d were loaded", total, stored)
	}
	for lo := 0; lo < int(b.N); lo += redisBatch {
		p := c.Pipeline()
		var cmds []*redis.StringCmd
		for i := lo; i < min(lo+redisBatch, int(b.N)); i++ {
			cmds = append(cmds, p.ObjectEncoding(ctx, redispeers.BucketKey(uint64(i))))
		}
		if _, err := p.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
		for i, cmd := range cmds {
			if enc := cmd.Val(); enc != "listpack" && enc != "ziplist" {
				return fmt.Errorf("bucket %s is %q-encoded, not listpack (hash-max-listpack-entries below its size?)", redispeers.BucketKey(uint64(lo+i)), enc)
			}
		}
	}
	if b.Authors {
		maxUID := engine.UserID(0)
		for uid := range ld.perUser {
			maxUID = max(maxUID, uid)
		}
		users, err := hashSizes(ctx, c, int(maxUID/redispeers.UsersPerBucket)+1, func(i int) string {
			return redispeers.UserKey(engine.UserID(i * redispeers.UsersPerBucket))
		})
		if err != nil {
			return err
		}
		if users != int64(len(ld.perUser)) {
			return fmt.Errorf("the user buckets hold %d authors; %d were loaded", users, len(ld.perUser))
		}
	}
	for lo := 0; lo < len(ds.sample); lo += redisBatch {
		page := ds.sample[lo:min(lo+redisBatch, len(ds.sample))]
		p := c.Pipeline()
		posts := make([]*redis.StringCmd, len(page))
		authors := make([]*redis.StringCmd, len(page))
		for i, s := range page {
			posts[i] = b.Get(ctx, p, s.id)
			if b.Authors {
				authors[i] = p.HGet(ctx, redispeers.UserKey(s.author), strconv.FormatUint(uint64(s.author), 10))
			}
		}
		if _, err := p.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
		for i, s := range page {
			v, err := posts[i].Result()
			if !b.Authors && s.counts == (engine.Counts{}) {
				if err != redis.Nil {
					return fmt.Errorf("post %d has no counts and no author, yet reads %q, %v", s.id, v, err)
				}
				continue
			}
			if err != nil {
				return fmt.Errorf("post %d: %v", s.id, err)
			}
			a, counts, err := b.Parse(v)
			if err != nil {
				return fmt.Errorf("post %d: %v", s.id, err)
			}
			if counts != s.counts || (b.Authors && a != s.author) {
				return fmt.Errorf("post %d reads author %d, %+v; the data set has %d, %+v", s.id, a, counts, s.author, s.counts)
			}
			if b.Authors {
				n, err := authors[i].Int64()
				if err != nil || n != int64(ds.perUser[s.author]) {
					return fmt.Errorf("author %d's post count reads %d (%v); the data set has %d", s.author, n, err, ds.perUser[s.author])
				}
			}
		}
	}
	return nil
}

// hashSizes sums HLEN over n hashes, in pipelines of redisBatch.
func hashSizes(ctx context.Context, c *redis.Client, n int, key func(int) string) (int64, error) {
	var total int64
	for lo := 0; lo < n; lo += redisBatch {
		p := c.Pipeline()
		cmds := make([]*redis.IntCmd, 0, redisBatch)
		for i := lo; i < min(lo+redisBatch, n); i++ {
			cmds = append(cmds, p.HLen(ctx, key(i)))
		}
		if _, err := p.Exec(ctx); err != nil {
			return 0, err
		}
		for _, cmd := range cmds {
			total += cmd.Val()
		}
	}
	return total, nil
}
