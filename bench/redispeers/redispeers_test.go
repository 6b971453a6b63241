package redispeers

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tally-dev/tally/bench/benchutil"
	"github.com/tally-dev/tally/bench/datagen"
	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/redisstore/redistest"
	"github.com/tally-dev/tally/engine/tier"
)

// layout writes one post's non-zero counts into a pipeline.
type layout struct {
	name  string
	write func(p redis.Pipeliner, id uint64, c engine.Counts, buckets uint64)
}

var fields = [5]string{"l", "c", "r", "v", "f"}

func values(c engine.Counts) [5]int64 {
	return [5]int64{c.Likes, c.Comments, c.Reposts, c.Views, c.Favorites}
}

var layouts = []layout{
	{"key-per-counter", func(p redis.Pipeliner, id uint64, c engine.Counts, _ uint64) {
		for i, v := range values(c) {
			if v != 0 {
				p.Set(context.Background(), "c:"+strconv.FormatUint(id, 10)+":"+fields[i], v, 0)
			}
		}
	}},
	{"hash-per-post", func(p redis.Pipeliner, id uint64, c engine.Counts, _ uint64) {
		args := make([]any, 0, 10)
		for i, v := range values(c) {
			if v != 0 {
				args = append(args, fields[i], v)
			}
		}
		p.HSet(context.Background(), "p:"+strconv.FormatUint(id, 10), args...)
	}},
	// Instagram's technique (Buckets): small hashes of ~500 posts so Redis
	// keeps them listpack-encoded, counts only here.
	{"instagram-buckets", func(p redis.Pipeliner, id uint64, c engine.Counts, buckets uint64) {
		Buckets{N: buckets}.Set(context.Background(), p, id, 0, c)
	}},
}

func usedMemory(b *testing.B, c *redis.Client) int64 {
	info, err := c.Info(context.Background(), "memory").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	b.Fatal("no used_memory in INFO")
	return 0
}

// BenchmarkRedisMemory loads the data set in each layout and reports
// bytes per non-zero post and per post overall (zero posts stored in none).
func BenchmarkRedisMemory(b *testing.B) {
	if !redistest.Available() {
		b.Skip("redis-server not installed")
	}
	n := benchutil.N()
	node := redistest.StartSingleNode(b, "--appendonly", "no", "--save", "")
	c := redis.NewClient(&redis.Options{Addr: node.Addr})
	defer c.Close()
	cfg := datagen.Config{N: n, Seed: 1}
	var nonZero int
	datagen.Each(cfg, func(_ uint64, cnt engine.Counts) {
		if !cnt.IsZero() {
			nonZero++
		}
	})
	buckets := NewBuckets(nonZero, false).N
	for _, l := range layouts {
		b.Run(l.name, func(b *testing.B) {
			ctx := context.Background()
			for b.Loop() {
				c.FlushAll(ctx)
				base := usedMemory(b, c)
				p := c.Pipeline()
				queued := 0
				datagen.Each(cfg, func(id uint64, cnt engine.Counts) {
					if cnt.IsZero() {
						return
					}
					l.write(p, id, cnt, buckets)
					if queued++; queued == 10000 {
						if _, err := p.Exec(ctx); err != nil {
							b.Fatal(err)
						}
						queued = 0
					}
				})
				if _, err := p.Exec(ctx); err != nil {
					b.Fatal(err)
				}
				used := usedMemory(b, c) - base
				b.ReportMetric(float64(used)/float64(nonZero), "B/stored-post")
				b.ReportMetric(float64(used)/float64(n), "B/post")
			}
		})
	}
	fmt.Fprintf(os.Stderr, "redispeers: N=%d, %d non-zero posts, %d instagram buckets\n", n, nonZero, buckets)
}

// BenchmarkPage reads the counts of a 50-post feed page (a random sample of
// the data set, zero posts included) from each store, in one run: Tally's
// post table (engine/tier) in process, every window open and every window
// sealed, and Redis with one pipelined HMGET/HGET round trip per page over
// loopback.
func BenchmarkPage(b *testing.B) {
	if !redistest.Available() {
		b.Skip("redis-server not installed")
	}
	const pageSize = 50
	n := benchutil.N()
	cfg := datagen.Config{N: n, Seed: 1}
	node := redistest.StartSingleNode(b, "--appendonly", "no", "--save", "")
	c := redis.NewClient(&redis.Options{Addr: node.Addr})
	defer c.Close()
	ctx := context.Background()

	var all []uint64
	var nonZero int
	datagen.Each(cfg, func(id uint64, cnt engine.Counts) {
		all = append(all, id)
		if !cnt.IsZero() {
			nonZero++
		}
	})
	buckets := NewBuckets(nonZero, false).N
	open := loadPosts(b, cfg, 10*365*24*time.Hour)
	sealed := loadPosts(b, cfg, -1)
	p := c.Pipeline()
	queued := 0
	datagen.Each(cfg, func(id uint64, cnt engine.Counts) {
		if cnt.IsZero() {
			return
		}
		layouts[1].write(p, id, cnt, buckets)
		layouts[2].write(p, id, cnt, buckets)
		if queued++; queued == 5000 {
			p.Exec(ctx)
			queued = 0
		}
	})
	if _, err := p.Exec(ctx); err != nil {
		b.Fatal(err)
	}

	pages := make([][]uint64, 1024)
	r := uint64(12345)
	for i := range pages {
		pages[i] = make([]uint64, pageSize)
		for j := range pageSize {
			r = r*6364136223846793005 + 1442695040888963407
			pages[i][j] = all[(r>>33)%uint64(len(all))]
		}
	}
	out := make([]tier.Post, pageSize)
	found := make([]bool, pageSize)
	// run reads a page per iteration, cycling through the sample.
	run := func(name string, read func(page []uint64) error) {
		b.Run(name, func(b *testing.B) {
			i := 0
			for b.Loop() {
				if err := read(pages[i%len(pages)]); err != nil {
					b.Fatal(err)
				}
				i++
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1000, "µs/page")
		})
	}
	// pipelined sends one Redis read per post of a page in one round trip.
	pipelined := func(queue func(p redis.Pipeliner, id uint64)) func([]uint64) error {
		return func(page []uint64) error {
			p := c.Pipeline()
			for _, id := range page {
				queue(p, id)
			}
			if _, err := p.Exec(ctx); err != nil && err != redis.Nil {
				return err
			}
			return nil
		}
	}
	run("tally-open-table", func(page []uint64) error { return open.GetMany(page, out, found) })
	run("tally-sealed", func(page []uint64) error { return sealed.GetMany(page, out, found) })
	run("redis-hash-per-post-pipelined-hmget", pipelined(func(p redis.Pipeliner, id uint64) {
		p.HMGet(ctx, "p:"+strconv.FormatUint(id, 10), fields[:]...)
	}))
	run("redis-instagram-buckets-pipelined-hget", pipelined(func(p redis.Pipeliner, id uint64) {
		Buckets{N: buckets}.Get(ctx, p, id)
	}))
}

// loadPosts loads the data set's non-zero counts into a post table whose
// windows stay open for openAge (negative: every window sealed), the
// clock at the end of the data set.
func loadPosts(b *testing.B, cfg datagen.Config, openAge time.Duration) *tier.Posts {
	t, err := tier.NewPosts(tier.Options{OpenAge: openAge})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { t.Close() })
	err = t.Import(func(yield func(uint64, tier.Post) bool) {
		datagen.Each(cfg, func(id uint64, cnt engine.Counts) {
			if !cnt.IsZero() {
				yield(id, tier.Post{Counts: cnt})
			}
		})
	}, datagen.DefaultEnd)
	if err == nil {
		err = t.Maintain(datagen.DefaultEnd)
	}
	if err != nil {
		b.Fatal(err)
	}
	return t
}
