package redisstore_test

import (
	"context"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/redisstore"
	"github.com/tally-dev/tally/engine/redisstore/redistest"
	"github.com/tally-dev/tally/engine/snowflake"
)

// dataset is a skewed, realistic set of posts: ids made at 1,000 posts/s
// by 8 nodes, ~20 posts per author, 40% of posts with no counts at all, and
// for the rest Pareto-tailed views with likes, comments, reposts and
// favorites a falling fraction of them.
func dataset(n int) []engine.ImportRow {
	rng := rand.New(rand.NewPCG(1, 2))
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	rows := make([]engine.ImportRow, n)
	frac := func(x int64, f float64) int64 { return int64(float64(x) * rng.Float64() * f) }
	for i := range rows {
		r := &rows[i]
		r.Post = engine.PostID(snowflake.Make(t0+int64(i), uint64(i%8), uint64(rng.IntN(2))))
		r.Author = engine.UserID(1 + rng.IntN(max(1, n/20)))
		if rng.Float64() < 0.4 {
			continue
		}
		v := int64(math.Min(1e8, math.Floor(math.Pow(1-rng.Float64(), -1.2))))
		r.Counts = engine.Counts{Views: v, Likes: frac(v, 0.2)}
		r.Counts.Comments = frac(r.Counts.Likes, 0.3)
		r.Counts.Reposts = frac(r.Counts.Likes, 0.1)
		r.Counts.Favorites = frac(r.Counts.Likes, 0.1)
	}
	return rows
}

func usedMemory(t testing.TB, c *redis.Client) int64 {
	t.Helper()
	info, err := c.Info(bg, "memory").Result()
	must(t, err)
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	t.Fatal("no used_memory in INFO")
	return 0
}

// TestMemoryPerPost loads the data set in Tally's layout and in two common
// layouts (one key per counter; one hash per post), each on a fresh
// redis-server, and reports INFO memory bytes per post. Every layout
// holds the same information: the author and the non-zero counts.
// TALLY_REDIS_MEMORY_POSTS=1000000 runs the full measurement; by default
// 50,000 posts check that buckets stay listpack-encoded and compact.
func TestMemoryPerPost(t *testing.T) {
	n := 50000
	if v := os.Getenv("TALLY_REDIS_MEMORY_POSTS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n <= 0 {
			t.Fatalf("TALLY_REDIS_MEMORY_POSTS=%q", v)
		}
	}
	rows := dataset(n)
	// prepare runs before the "before" reading (connections, script
	// cache), so only the data set is measured.
	measure := func(name string, prepare func(addr string, c *redis.Client) (load func())) float64 {
		addr, stop := redistest.StartSingle(t)
		defer stop()
		c := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, DisableIdentity: true})
		defer c.Close()
		load := prepare(addr, c)
		before := usedMemory(t, c)
		load()
		per := float64(usedMemory(t, c)-before) / float64(n)
		t.Logf("%-22s %8.1f bytes/post (%d posts)", name, per, n)
		return per
	}
	var bucketEncoding string
	tally := measure("tally buckets", func(addr string, c *redis.Client) func() {
		s := open(t, redisstore.Options{Addrs: []string{addr}, KeyPrefix: "m:"})
		return func() {
			for i := 0; i < len(rows); i += 2000 {
				must(t, (s.Import(bg, rows[i:min(i+2000, len(rows))])))
			}
			_ = s.Stats() // flushes the stats counters now, not later
			bucketEncoding = c.ObjectEncoding(bg, s.PostKey(rows[len(rows)/2].Post)).Val()
		}
	})
	measure("key per counter", func(_ string, c *redis.Client) func() {
		return func() {
			loadPeer(t, c, rows, func(p redis.Pipeliner, r engine.ImportRow) {
				id := strconv.FormatUint(uint64(r.Post), 10)
				p.Set(bg, "a:"+id, uint64(r.Author), 0)
				for i, v := range []int64{r.Counts.Views, r.Counts.Likes, r.Counts.Comments, r.Counts.Reposts, r.Counts.Favorites} {
					if v != 0 {
						p.Set(bg, "c:"+id+":"+strconv.Itoa(i), v, 0)
					}
				}
			})
		}
	})
	measure("hash per post", func(_ string, c *redis.Client) func() {
		return func() {
			loadPeer(t, c, rows, func(p redis.Pipeliner, r engine.ImportRow) {
				args := []any{"a", uint64(r.Author)}
				for i, v := range []int64{r.Counts.Views, r.Counts.Likes, r.Counts.Comments, r.Counts.Reposts, r.Counts.Favorites} {
					if v != 0 {
						args = append(args, "vlcrf"[i:i+1], v)
					}
				}
				p.HSet(bg, "p:"+strconv.FormatUint(uint64(r.Post), 10), args...)
			})
		}
	})
	if bucketEncoding != "listpack" {
		t.Fatalf("post bucket encoding %q, want listpack (check hash-max-listpack-entries/value)", bucketEncoding)
	}
	if tally > 30 {
		t.Fatalf("tally layout costs %.1f bytes/post; the bucket design should stay under 30", tally)
	}
}

func loadPeer(t *testing.T, c *redis.Client, rows []engine.ImportRow, add func(redis.Pipeliner, engine.ImportRow)) {
	for i := 0; i < len(rows); i += 2000 {
		p := c.Pipeline()
		for _, r := range rows[i:min(i+2000, len(rows))] {
			add(p, r)
		}
		_, err := p.Exec(bg)
		must(t, err)
	}
}

// BenchmarkFeedPage reads one feed page the way the GraphQL layer does:
// counts, like flags and favorite flags of 50 posts, each one pipelined
// round trip.
func BenchmarkFeedPage(b *testing.B) {
	b.Run("single", func(b *testing.B) {
		addr, _ := redistest.StartSingle(b)
		benchFeedPage(b, []string{addr})
	})
	b.Run("cluster3", func(b *testing.B) {
		c := redistest.StartCluster(b, 3, 0)
		benchFeedPage(b, c.Addrs())
	})
}

func benchFeedPage(b *testing.B, addrs []string) {
	s := open(b, redisstore.Options{Addrs: addrs, KeyPrefix: prefix()})
	rows := dataset(50)
	now := time.Now().UnixMilli()
	ids := make([]engine.PostID, len(rows))
	for i := range rows {
		// Recent posts, as on a feed.
		rows[i].Post = engine.PostID(snowflake.Make(now-int64(i)*7000, 1, 0))
		ids[i] = rows[i].Post
	}
	must(b, s.Import(bg, rows))
	const viewer = 42
	for i, id := range ids {
		if i%3 == 0 {
			must(b, s.Like(bg, viewer, id))
		}
		if i%7 == 0 {
			must(b, s.Favorite(bg, viewer, id))
		}
	}
	ctx := context.Background()
	b.ResetTimer()
	for b.Loop() {
		if _, err := s.Counts(ctx, ids); err != nil {
			b.Fatal(err)
		}
		if _, err := s.Liked(ctx, viewer, ids); err != nil {
			b.Fatal(err)
		}
		if _, err := s.Favorited(ctx, viewer, ids); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/page")
}

// BenchmarkLikeHotPost: many users liking one post at once (one Lua step
// on the post's slot, one on the author's), all writers in parallel.
func BenchmarkLikeHotPost(b *testing.B) {
	addr, _ := redistest.StartSingle(b)
	s := open(b, redisstore.Options{Addrs: []string{addr}, KeyPrefix: prefix()})
	post, err := s.CreatePost(bg, 1, 0, "")
	must(b, err)
	var next atomic.Int64
	b.SetParallelism(16)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := s.Like(bg, engine.UserID(10+next.Add(1)), post); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	cs, err := s.Counts(bg, []engine.PostID{post})
	must(b, err)
	if cs[0].Likes != next.Load() {
		b.Fatalf("likes %d after %d likes", cs[0].Likes, next.Load())
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "likes/s")
}

// BenchmarkUnread: one viewer's badges, the viewer following 20 authors
// with posts (the record, followee snapshot and broadcast values in one
// round trip, the followees' post counts in a second).
func BenchmarkUnread(b *testing.B) {
	addr, _ := redistest.StartSingle(b)
	s := open(b, redisstore.Options{Addrs: []string{addr}, KeyPrefix: prefix()})
	const viewer = 1
	for a := engine.UserID(2); a < 22; a++ {
		must(b, s.Follow(bg, viewer, a))
		for range int(a % 4) {
			_, err := s.CreatePost(bg, a, 0, "")
			must(b, err)
		}
	}
	must(b, s.Comment(bg, 2, mustPost(b, s, viewer), 0, nil, ""))
	b.ResetTimer()
	for b.Loop() {
		u, err := s.Unread(bg, viewer)
		if err != nil {
			b.Fatal(err)
		}
		if u.Feed == 0 || u.Comments != 1 {
			b.Fatalf("%+v", u)
		}
	}
}

// BenchmarkComment: comments with one mention on someone else's post (the
// count and intent in the post's slot, the badges in the users', the
// intent's deletion).
func BenchmarkComment(b *testing.B) {
	addr, _ := redistest.StartSingle(b)
	s := open(b, redisstore.Options{Addrs: []string{addr}, KeyPrefix: prefix()})
	post := mustPost(b, s, 1)
	b.ResetTimer()
	for b.Loop() {
		must(b, s.Comment(bg, 2, post, 0, []engine.UserID{3}, ""))
	}
}

func mustPost(t testing.TB, s *redisstore.Store, author engine.UserID) engine.PostID {
	t.Helper()
	p, err := s.CreatePost(bg, author, 0, "")
	must(t, err)
	return p
}

// BenchmarkImport imports 10,000-row batches of new posts with authors
// (random among 300k users, 40% with counts), their ids spaced 3 ms apart
// (10M posts a year: tens of rows per bucket) or 300 ms (about one row
// per bucket, where per-bucket work dominates). ns/row is per row.
func BenchmarkImport(b *testing.B) {
	for _, spacing := range []int64{3, 300} {
		b.Run(strconv.FormatInt(spacing, 10)+"ms", func(b *testing.B) {
			addr, _ := redistest.StartSingle(b)
			s := open(b, redisstore.Options{Addrs: []string{addr}, KeyPrefix: prefix(), IntentSweepInterval: -1})
			rng := rand.New(rand.NewPCG(1, 2))
			t0 := time.Now().Add(-300 * 24 * time.Hour).UnixMilli()
			rows := make([]engine.ImportRow, 10_000)
			n := 0
			for b.Loop() {
				for i := range rows {
					n++
					rows[i] = engine.ImportRow{Post: engine.PostID(snowflake.Make(t0+int64(n)*spacing, uint64(rng.IntN(1024)), 0)),
						Author: engine.UserID(1 + rng.IntN(300_000))}
					if rng.IntN(10) < 4 {
						rows[i].Counts.Likes = int64(1 + rng.IntN(100))
					}
				}
				must(b, s.Import(bg, rows))
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/row")
		})
	}
}

// roundTrips counts the commands and pipelines a client sends: one round
// trip each.
type roundTrips struct{ n *atomic.Int64 }

func (h roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}

func (h roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmds)
	}
}

// BenchmarkReactionSwitch compares, interleaved in one run on a single
// node with six kinds, a switch of reaction kind (a user's reaction on a
// post moving to another kind: one script call, no badge) with a like
// (a new user's first reaction: the same script call, then the author's
// badge, finished from the intent the call recorded) and with a first
// reaction of another kind (love: the like's path). Each is 16
// operations in a row, timed on the wall clock; reported are each one's
// µs and round trips per operation and switch/like.
func BenchmarkReactionSwitch(b *testing.B) {
	addr, _ := redistest.StartSingle(b)
	kinds := []string{"like", "love", "haha", "wow", "sad", "angry"}
	s := open(b, redisstore.Options{Addrs: []string{addr}, KeyPrefix: prefix(), Reactions: kinds, IntentSweepInterval: -1})
	var trips atomic.Int64
	s.AddHook(roundTrips{&trips})
	posts := make([]engine.PostID, 64)
	for i := range posts {
		p, err := s.CreatePost(bg, engine.UserID(1+i%4), 0, "")
		must(b, err)
		posts[i] = p
	}
	const switchers = 1024
	for u := range switchers {
		must(b, s.ReactToPost(bg, engine.UserID(100+u), posts[u%len(posts)], "like"))
	}
	var liker atomic.Int64
	liker.Store(1 << 20)
	var t [3]time.Duration
	var rt [3]int64
	ops := [3]func(i int) error{
		func(i int) error { // switch
			u := i % switchers
			return s.ReactToPost(bg, engine.UserID(100+u), posts[u%len(posts)], kinds[1+(i/switchers)%5])
		},
		func(i int) error { // like
			return s.Like(bg, engine.UserID(liker.Add(1)), posts[i%len(posts)])
		},
		func(i int) error { // first love
			return s.ReactToPost(bg, engine.UserID(liker.Add(1)), posts[i%len(posts)], "love")
		},
	}
	i := 0
	for b.Loop() {
		for k, op := range ops {
			t0, r0 := time.Now(), trips.Load()
			for j := range 16 {
				if err := op(i + j); err != nil {
					b.Fatal(err)
				}
			}
			t[k] += time.Since(t0)
			rt[k] += trips.Load() - r0
		}
		i += 16
	}
	for k, name := range []string{"switch", "like", "love"} {
		b.ReportMetric(float64(t[k].Microseconds())/float64(i), name+"-µs/op")
		b.ReportMetric(float64(rt[k])/float64(i), name+"-roundtrips/op")
	}
	b.ReportMetric(float64(t[0])/float64(t[1]), "switch/like")
}
