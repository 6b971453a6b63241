package redisstore_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/redisstore"
	"github.com/tally-dev/tally/engine/redisstore/redistest"
	"github.com/tally-dev/tally/engine/snowflake"
)

func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q", name, v)
	}
	return n
}

// perPost draws how many members a post's set gets: a skewed spread, most
// posts with a few, some with hundreds, a few past the intset limit
// (set-max-intset-entries, 512 by default), where Redis switches to a
// hash table.
func perPost(rng *rand.Rand) int {
	switch r := rng.IntN(100); {
	case r < 50:
		return 1 + rng.IntN(5)
	case r < 80:
		return 6 + rng.IntN(45)
	case r < 95:
		return 51 + rng.IntN(250)
	default:
		return 301 + rng.IntN(1700)
	}
}

// TestMemoryPerCommentID measures the counted comment ids of posts (one
// set per post, in its slot) beside their likers (the same layout), both
// loaded through the Store with the same number of members per post:
// MEMORY USAGE (every element sampled) summed over the sets, per member,
// and per member of the posts whose sets stay intsets. Comment ids are
// snowflakes (8 bytes in an intset), likers small user ids (2 or 4).
// A comment id is also kept in its writer's set (who may delete it):
// those sets are measured too, per comment id. Writer i writes the i-th
// comment of every post that has that many, so the first writers write
// on most posts and their sets outgrow an intset.
// TALLY_REDIS_MEMORY_COMMENTS sets the posts (default 40; 2000 for the
// figures in the docs).
func TestMemoryPerCommentID(t *testing.T) {
	posts := envInt(t, "TALLY_REDIS_MEMORY_COMMENTS", 40)
	addr, _ := redistest.StartSingle(t)
	c := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, DisableIdentity: true})
	defer c.Close()
	s := open(t, redisstore.Options{Addrs: []string{addr}, KeyPrefix: "m:", IntentSweepInterval: -1})
	rng := rand.New(rand.NewPCG(3, 4))
	sizes := make([]int, posts)
	for i := range sizes {
		sizes[i] = perPost(rng)
	}
	t0 := time.Now().Add(-time.Hour).UnixMilli()
	// Each kind's posts are made by their own snowflake node, so the two
	// loads never share a post; set is the set's key letter.
	load := func(name string, node uint64, set string, add func(p int, post engine.PostID, i int) error) {
		rows, jobs := importSized(t, s, sizes, t0, node)
		parallel(t, len(jobs), func(j int) error { return add(jobs[j][0], rows[jobs[j][0]].Post, jobs[j][1]) })
		var members, bytes, small, smallBytes int64
		encodings := map[string]int{}
		for p, n := range sizes {
			key := s.PostKey(rows[p].Post) + set + strconv.FormatUint(uint64(rows[p].Post)&(1<<32-1), 10)
			enc := c.ObjectEncoding(bg, key).Val()
			size := c.MemoryUsage(bg, key, 0).Val()
			encodings[enc]++
			members, bytes = members+int64(n), bytes+size
			if enc == "intset" {
				small, smallBytes = small+int64(n), smallBytes+size
			}
			if got := c.SCard(bg, key).Val(); got != int64(n) {
				t.Fatalf("%s: set %s holds %d, want %d", name, key, got, n)
			}
		}
		t.Logf("%-12s %6.1f bytes/member (%d members on %d posts); %5.1f bytes/member in intsets (%d members); encodings %v",
			name, float64(bytes)/float64(members), members, posts, float64(smallBytes)/float64(max(small, 1)), small, encodings)
		if encodings["intset"] == 0 {
			t.Fatalf("%s: no set is an intset", name)
		}
	}
	load("likers", 1, "l", func(_ int, post engine.PostID, i int) error { return s.Like(bg, engine.UserID(1000+i), post) })
	now := time.Now().Add(-time.Hour).UnixMilli()
	load("comment ids", 2, "c", func(p int, post engine.PostID, i int) error {
		id := snowflake.Make(now+int64(p), uint64(i%1024), uint64(i/1024))
		return s.Comment(bg, engine.UserID(1000+i), post, engine.CommentID(id), nil, "")
	})
	var ids, bytes int64
	encodings := map[string]int{}
	for i := range slices.Max(sizes) {
		u := engine.UserID(1000 + i)
		bucket, _ := s.UserField(u)
		key := bucket + "W" + strconv.FormatUint(uint64(u), 10)
		ids += c.SCard(bg, key).Val()
		bytes += c.MemoryUsage(bg, key, 0).Val()
		encodings[c.ObjectEncoding(bg, key).Val()]++
	}
	t.Logf("%-12s %6.1f bytes/comment id in the writers' sets (%d ids, %d writers); encodings %v",
		"writers", float64(bytes)/float64(ids), ids, slices.Max(sizes), encodings)
}

// TestEraseCost times an erasure in a keyspace of TALLY_REDIS_ERASE_POSTS
// posts (default 20,000; the docs' figure uses 1,000,000): the data set
// of TestMemoryPerPost, with a like set of up to 5 likers on every post
// that has likes and a favorite set on a tenth of them, and a user who
// likes TALLY_REDIS_ERASE_LIKES of them (default 1,000; 1,000,000 for the
// docs), loaded straight into the sets and counts. It reports the
// keyspace's keys, a bare SCAN walk over them, the erasure's time, its
// steps (saved progress) and the longest, the redis-server CPU it took,
// and the latency of reads made while it ran beside the same reads
// before it. The reads check that they are exact meanwhile: a post the
// user no longer likes already has its count down by one, a count down
// by one means the like is gone, and neither goes back.
func TestEraseCost(t *testing.T) {
	n := envInt(t, "TALLY_REDIS_ERASE_POSTS", 20_000)
	likes := min(envInt(t, "TALLY_REDIS_ERASE_LIKES", 1000), n)
	addr, _ := redistest.StartSingle(t)
	c := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, DisableIdentity: true})
	defer c.Close()
	s := open(t, redisstore.Options{Addrs: []string{addr}, KeyPrefix: "e:", IntentSweepInterval: -1})
	rows := dataset(n)
	rng := rand.New(rand.NewPCG(5, 6))
	liked := make([]engine.PostID, likes)
	for i, j := range rng.Perm(n)[:likes] {
		rows[j].Counts.Likes++
		liked[i] = rows[j].Post
	}
	for i := 0; i < len(rows); i += 5000 {
		must(t, s.Import(bg, rows[i:min(i+5000, len(rows))]))
	}
	member := strconv.FormatUint(uint64(erased), 10)
	isLiked := map[engine.PostID]bool{}
	for _, p := range liked {
		isLiked[p] = true
	}
	p := c.Pipeline()
	for i, r := range rows {
		bucket := s.PostKey(r.Post)
		low := strconv.FormatUint(uint64(r.Post)&(1<<32-1), 10)
		if isLiked[r.Post] {
			p.SAdd(bg, bucket+"l"+low, member)
		}
		for range min(r.Counts.Likes, 5) {
			p.SAdd(bg, bucket+"l"+low, 1+rng.IntN(1_000_000))
		}
		if r.Counts.Favorites > 0 {
			p.SAdd(bg, bucket+"f"+low, 1+rng.IntN(1_000_000))
		}
		if i%5000 == 0 {
			_, err := p.Exec(bg)
			must(t, err)
		}
	}
	_, err := p.Exec(bg)
	must(t, err)
	keys := c.DBSize(bg).Val()

	start := time.Now()
	var cursor uint64
	walked := 0
	for {
		ks, next, err := c.Scan(bg, cursor, "e:{*", 1000).Result()
		must(t, err)
		walked += len(ks)
		if cursor = next; cursor == 0 {
			break
		}
	}
	scan := time.Since(start)
	cpu := func() float64 {
		info := c.Info(bg, "cpu").Val()
		var sum float64
		for _, f := range []string{"used_cpu_sys:", "used_cpu_user:"} {
			for _, line := range strings.Split(info, "\n") {
				if v, ok := strings.CutPrefix(strings.TrimSpace(line), f); ok {
					x, _ := strconv.ParseFloat(v, 64)
					sum += x
				}
			}
		}
		return sum
	}

	// The reader: a page of the user's liked posts, read as Liked, then
	// Counts, then Liked again, over and over.
	page := liked[:min(len(liked), engine.MaxIDsPerCall)]
	before, err := s.Counts(bg, page)
	must(t, err)
	read := func() (time.Duration, error) {
		t0 := time.Now()
		l1, err := s.Liked(bg, erased, page)
		if err != nil {
			return 0, err
		}
		cs, err := s.Counts(bg, page)
		if err != nil {
			return 0, err
		}
		l2, err := s.Liked(bg, erased, page)
		if err != nil {
			return 0, err
		}
		took := time.Since(t0)
		for i := range page {
			down := cs[i].Likes == before[i].Likes-1
			switch {
			case cs[i].Likes != before[i].Likes && !down:
				return 0, fmt.Errorf("post %d: %d likes, want %d or one less", page[i], cs[i].Likes, before[i].Likes)
			case !l1[i] && !down:
				return 0, fmt.Errorf("post %d: the like was gone before its count (%d) went down", page[i], cs[i].Likes)
			case down && l2[i]:
				return 0, fmt.Errorf("post %d: its count went down, and the like came back", page[i])
			}
		}
		return took, nil
	}
	reads := func(stop <-chan struct{}) ([]time.Duration, error) {
		var out []time.Duration
		for {
			select {
			case <-stop:
				return out, nil
			default:
			}
			took, err := read()
			if err != nil {
				return out, err
			}
			out = append(out, took)
		}
	}
	quiet := make(chan struct{})
	time.AfterFunc(time.Second, func() { close(quiet) })
	idle, err := reads(quiet)
	must(t, err)

	var steps []time.Duration
	last := time.Now()
	s.SetErasureSaved(func() {
		now := time.Now()
		steps = append(steps, now.Sub(last))
		last = now
	})
	stop := make(chan struct{})
	busyc, errc := make(chan []time.Duration, 1), make(chan error, 1)
	go func() {
		out, err := reads(stop)
		busyc <- out
		errc <- err
	}()
	cpu0 := cpu()
	start = time.Now()
	last = start
	must(t, s.EraseUser(bg, erased))
	took := time.Since(start)
	used := cpu() - cpu0
	close(stop)
	busy, err := <-busyc, <-errc
	must(t, err)
	s.SetErasureSaved(nil)

	t.Logf("%d posts, %d keys (%d walked by a bare SCAN in %v); erasing a user with %d likes took %v, %.2f s of redis-server CPU",
		n, keys, walked, scan.Round(time.Millisecond), likes, took.Round(time.Millisecond), used)
	t.Logf("%d steps, longest %v, median %v", len(steps), slices.Max(steps).Round(time.Microsecond), quantile(steps, 0.5).Round(time.Microsecond))
	t.Logf("a read of %d posts (Liked, Counts, Liked): before p50 %v p99 %v max %v (%d reads); during p50 %v p99 %v max %v (%d reads), every one exact",
		len(page), quantile(idle, 0.5), quantile(idle, 0.99), slices.Max(idle), len(idle),
		quantile(busy, 0.5), quantile(busy, 0.99), slices.Max(append(busy, 0)), len(busy))
	after, err := s.Counts(bg, page)
	must(t, err)
	for i := range page {
		if after[i].Likes != before[i].Likes-1 {
			t.Fatalf("post %d: %d likes after the erasure, want %d", page[i], after[i].Likes, before[i].Likes-1)
		}
	}
	for i := 0; i < likes; i += engine.MaxIDsPerCall {
		got, err := s.Liked(bg, erased, liked[i:min(i+engine.MaxIDsPerCall, likes)])
		must(t, err)
		for j, l := range got {
			if l {
				t.Fatalf("post %d is still liked by the erased user", liked[i+j])
			}
		}
	}
}

// quantile is the q-quantile of ds (sorted in place).
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[min(len(ds)-1, int(q*float64(len(ds))))].Round(time.Microsecond)
}

// TestMemoryPerReaction measures, on the posts of TestMemoryPerCommentID's
// sizes, the bytes per reaction of a post's likers set and reactors hash
// together (MEMORY USAGE of both keys, over the post's reactions): with
// likes only, and with six kinds where each user's kind is drawn from a
// deployment's mix (like 82%, love 10%, haha 4%, wow 2%, sad and angry 1%
// each). TALLY_REDIS_MEMORY_COMMENTS sets the posts, as there.
func TestMemoryPerReaction(t *testing.T) {
	posts := envInt(t, "TALLY_REDIS_MEMORY_COMMENTS", 40)
	addr, _ := redistest.StartSingle(t)
	c := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, DisableIdentity: true})
	defer c.Close()
	kinds := []string{"like", "love", "haha", "wow", "sad", "angry"}
	s := open(t, redisstore.Options{Addrs: []string{addr}, KeyPrefix: "m:", IntentSweepInterval: -1, Reactions: kinds})
	rng := rand.New(rand.NewPCG(3, 4))
	sizes := make([]int, posts)
	for i := range sizes {
		sizes[i] = perPost(rng)
	}
	t0 := time.Now().Add(-time.Hour).UnixMilli()
	load := func(name string, node uint64, kindOf func(u int) string) float64 {
		rows, jobs := importSized(t, s, sizes, t0, node)
		parallel(t, len(jobs), func(j int) error {
			i := jobs[j][1]
			return s.ReactToPost(bg, engine.UserID(1000+i), rows[jobs[j][0]].Post, kindOf(i))
		})
		var reactions, bytes int64
		for p, n := range sizes {
			reactions += int64(n)
			for _, key := range []string{s.LikersKey(rows[p].Post), s.ReactorsKey(rows[p].Post)} {
				bytes += c.MemoryUsage(bg, key, 0).Val()
			}
		}
		per := float64(bytes) / float64(reactions)
		t.Logf("%-10s %6.1f bytes/reaction (%d reactions on %d posts)", name, per, reactions, posts)
		return per
	}
	likes := load("likes", 1, func(int) string { return "like" })
	mix := load("six kinds", 2, func(u int) string {
		switch h := (u * 7919) % 100; {
		case h < 82:
			return "like"
		case h < 92:
			return "love"
		case h < 96:
			return "haha"
		case h < 98:
			return "wow"
		case h < 99:
			return "sad"
		}
		return "angry"
	})
	if likes <= 0 || mix <= 0 {
		t.Fatal("no memory measured")
	}
}

// importSized imports one post per entry of sizes, made by snowflake node
// at a second apart from t0, and returns the rows and the (post index,
// member index) jobs that fill post p with sizes[p] members.
func importSized(t testing.TB, s *redisstore.Store, sizes []int, t0 int64, node uint64) ([]engine.ImportRow, [][2]int) {
	rows := make([]engine.ImportRow, len(sizes))
	for i := range rows {
		rows[i] = engine.ImportRow{Post: engine.PostID(snowflake.Make(t0+int64(i)*1000, node, 0)), Author: 1}
	}
	must(t, s.Import(bg, rows))
	var jobs [][2]int
	for p, n := range sizes {
		for i := range n {
			jobs = append(jobs, [2]int{p, i})
		}
	}
	return rows, jobs
}
