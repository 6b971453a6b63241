package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/redisstore"
	"github.com/tally-dev/tally/engine/redisstore/redistest"
	"github.com/tally-dev/tally/web/transport"
)

// TestFailoverUnderLoad kills a Redis Cluster master (kill -9) while two
// Tally replicas take likes and keyed comments, and holds the outcome to
// docs/redis-durability.md:
//
//   - default flags (1 replica per master, no WAIT), a plain kill: no
//     acknowledged write is lost;
//   - 2 replicas per master and -redis-wait-replicas 1, one replica of
//     the victim cut off and paused before the kill: none is lost;
//   - the control, the same lagging replica with default flags: writes
//     acknowledged while it lagged are lost (what WAIT is for).
//
// In every case clients see UNAVAILABLE (never INTERNAL) for what fails,
// no request outlives its deadline, /readyz stays ready on both replicas,
// and after every failed write is retried (likes as they are, comments
// with their idempotency keys) and every keyed comment is retried once
// more, nothing is counted twice. The figures (outage a client sees,
// latencies) are logged.
func TestFailoverUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("runs three Redis Clusters through a failover")
	}
	cases := []failoverCase{
		{name: "default", replicas: 1},
		{name: "wait", replicas: 2, wait: 1, lag: true},
		{name: "lag-without-wait", replicas: 1, lag: true, loses: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(t)
		})
	}
}

type failoverCase struct {
	name     string
	replicas int  // per master
	wait     int  // redisstore.Options.WaitReplicas
	lag      bool // the victim's replication is cut, one replica paused, before the kill
	loses    bool // acknowledged writes are expected lost
}

const (
	failoverDeadline = time.Second // transport.Config.StoreTimeout, -redis-timeout
	failoverPosts    = 48
	failoverWorkers  = 6
)

// op is one write a client made, and what became of it.
type op struct {
	like       bool
	post       string
	user       uint64
	key        string // a comment's idempotency key
	start, end time.Time
	code       string // "" when acknowledged
}

func (c failoverCase) run(t *testing.T) {
	cluster := redistest.StartClusterWith(t, redistest.ClusterConfig{
		Masters: 3, ReplicasPerMaster: c.replicas, NodeTimeout: time.Second,
	})
	replica := func() *testServer {
		store, err := redisstore.Open(t.Context(), redisstore.Options{
			Addrs: cluster.Addrs(), KeyPrefix: "f", WaitReplicas: c.wait, ReadTimeout: failoverDeadline,
		})
		if err != nil {
			t.Fatal(err)
		}
		l, err := store.NewLimiter(1000, 1000)
		if err != nil {
			t.Fatal(err)
		}
		return newTestServerWith(t, store, transport.Config{
			StoreTimeout: failoverDeadline, RateLimit: 1000, RateBurst: 1000, RateLimiter: transport.SharedRateLimiter(l),
		})
	}
	a, b := replica(), replica()
	b.keys = a.keys
	servers := []*testServer{a, b}

	// Authors, and the commenters below, in user buckets of their own
	// (ids 2^10 apart), so their badges and keys spread over the shards.
	posts := make([]string, failoverPosts)
	for i := range posts {
		posts[i] = a.createPost(t, uint64(i+1)<<10)
	}

	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2 * failoverWorkers}}
	t.Cleanup(client.CloseIdleConnections)
	token := func(user uint64) string {
		tok, _ := a.keys.Sign(engine.UserID(user), false, 0)
		return tok
	}
	send := func(s *testServer, user uint64, query string, vars map[string]any) string {
		body, _ := json.Marshal(map[string]any{"query": query, "variables": vars})
		req, _ := http.NewRequest("POST", s.URL+"/query", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+token(user))
		resp, err := client.Do(req)
		if err != nil {
			return "HTTP: " + err.Error()
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		var r gqlResponse
		if err := json.Unmarshal(raw, &r); err != nil {
			return fmt.Sprintf("HTTP %d: %s", resp.StatusCode, raw)
		}
		if len(r.Errors) == 0 {
			return ""
		}
		code, _ := r.Errors[0].Extensions["code"].(string)
		if code == "UNAVAILABLE" && resp.Header.Get("Retry-After") == "" {
			return "UNAVAILABLE without Retry-After"
		}
		return code
	}
	const like = `mutation($p: ID!) { likePost(postId: $p) { id } }`
	const comment = `mutation($p: ID!, $k: String) { commentOnPost(postId: $p, idempotencyKey: $k) { id } }`
	do := func(o *op, s *testServer) {
		o.start = time.Now()
		if o.like {
			o.code = send(s, o.user, like, map[string]any{"p": o.post})
		} else {
			o.code = send(s, o.user, comment, map[string]any{"p": o.post, "k": o.key})
		}
		o.end = time.Now()
	}

	// /readyz on both replicas, all along.
	stop := make(chan struct{})
	var notReady atomic.Int64
	var notReadyWhy atomic.Value
	var probes sync.WaitGroup
	probes.Add(1)
	go func() {
		defer probes.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			for _, s := range servers {
				resp, err := client.Get(s.URL + "/readyz")
				if err != nil {
					notReady.Add(1)
					notReadyWhy.Store(err.Error())
					continue
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					notReady.Add(1)
					notReadyWhy.Store(fmt.Sprintf("%d %s", resp.StatusCode, body))
				}
			}
		}
	}()

	// The load: likes by users who never liked before, and comments each
	// with a key of its own, spread over the posts (and so the shards).
	var likers atomic.Uint64
	likers.Store(100_000)
	ops := make([][]op, failoverWorkers)
	var load sync.WaitGroup
	for w := range failoverWorkers {
		load.Add(1)
		go func() {
			defer load.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				o := op{post: posts[rng.IntN(len(posts))]}
				if n%2 == 0 {
					o.like, o.user = true, likers.Add(1)
				} else {
					o.user, o.key = uint64(w+1)<<20, fmt.Sprintf("w%d-%d", w, n)
				}
				do(&o, servers[n%2])
				ops[w] = append(ops[w], o)
				if o.code != "" {
					time.Sleep(20 * time.Millisecond) // a client backing off; it retries later
				}
			}
		}()
	}

	time.Sleep(1500 * time.Millisecond)
	victim := cluster.Masters()[0]
	var paused *redistest.Node
	if c.lag {
		// A partition between the victim and its replicas: the links are
		// cut and one replica cannot come back (paused). Another replica,
		// if any, reconnects within about a second.
		paused = cluster.Node(cluster.ReplicasOf(victim)[0])
		paused.Pause()
		defer paused.Resume()
		cluster.CutReplicas(victim)
		time.Sleep(1500 * time.Millisecond)
	}
	killed := time.Now()
	cluster.Kill(victim)
	if paused != nil && c.replicas == 1 {
		paused.Resume() // the only replica: it is the one promoted
	}
	cluster.WaitPromoted(victim, 3, 30*time.Second)
	promoted := time.Now()
	if paused != nil {
		paused.Resume()
	}
	time.Sleep(1500 * time.Millisecond)
	close(stop)
	load.Wait()
	probes.Wait()

	all := slices.Concat(ops...)
	codes := map[string]int{}
	var first, last time.Time
	var slowest time.Duration
	acked := 0
	for _, o := range all {
		slowest = max(slowest, o.end.Sub(o.start))
		if o.code == "" {
			acked++
			continue
		}
		codes[o.code]++
		if first.IsZero() || o.start.Before(first) {
			first = o.start
		}
		if o.end.After(last) {
			last = o.end
		}
	}
	t.Logf("%s: %d writes (%d acknowledged), failures by code %v; victim %s killed, a replica promoted %v later",
		c.name, len(all), acked, codes, victim, promoted.Sub(killed).Round(time.Millisecond))
	if len(codes) > 0 {
		t.Logf("%s: outage a client saw: first failed write %v after the kill, last %v after (%v)",
			c.name, first.Sub(killed).Round(time.Millisecond), last.Sub(killed).Round(time.Millisecond), last.Sub(first).Round(time.Millisecond))
	}
	t.Logf("%s: slowest request %v (deadline %v)", c.name, slowest.Round(time.Millisecond), failoverDeadline)
	for code := range codes {
		if code != "UNAVAILABLE" {
			t.Errorf("clients saw %s (%d times); a failover must be UNAVAILABLE", code, codes[code])
		}
	}
	// The deadline bounds the store's work; the rest of a request (HTTP,
	// JSON, two busy cores shared with other test binaries in CI) gets a
	// margin, still far from a request that waits out the failover.
	if slowest > 2*failoverDeadline {
		t.Errorf("a request took %v, past its %v deadline", slowest, failoverDeadline)
	}
	if n := notReady.Load(); n > 0 {
		t.Errorf("/readyz was not ready %d times during the failover of one shard, last: %v", n, notReadyWhy.Load())
	}

	// Every failed write retried until acknowledged, as a client would:
	// likes as they are, comments with their keys.
	retry := func(which func(op) bool) {
		var next atomic.Int64
		var wg sync.WaitGroup
		for range failoverWorkers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := int(next.Add(1)) - 1; i < len(all); i = int(next.Add(1)) - 1 {
					o := &all[i]
					if !which(*o) {
						continue
					}
					for try := 0; ; try++ {
						do(o, servers[(i+try)%2])
						if o.code == "" {
							break
						}
						if o.code != "UNAVAILABLE" || try == 100 {
							t.Errorf("retry %d of %+v: %s", try, *o, o.code)
							return
						}
						time.Sleep(50 * time.Millisecond)
					}
				}
			}()
		}
		wg.Wait()
	}
	retry(func(o op) bool { return o.code != "" })
	if t.Failed() {
		return
	}
	lostLikes, lostComments := c.check(t, a.store, all, posts)
	t.Logf("%s: after retrying every failed write: %d acknowledged likes and %d acknowledged comments lost",
		c.name, lostLikes, lostComments)
	switch {
	case c.loses && lostLikes+lostComments == 0:
		t.Errorf("no write acknowledged while the replica lagged was lost: this failover did not test what WAIT is for")
	case !c.loses && lostLikes+lostComments > 0:
		t.Errorf("acknowledged writes lost")
	}

	// Every keyed comment once more: none is counted again.
	retry(func(o op) bool { return !o.like })
	l, c2 := c.check(t, a.store, all, posts)
	switch {
	case c.loses:
		// The comments lost went with their records: applied again.
		t.Logf("%s: after retrying every keyed comment: %d comments lost", c.name, c2)
	case l != lostLikes || c2 != lostComments:
		t.Errorf("retrying every keyed comment changed the counts")
	}
}

// check compares each post's counts with the writes made on it (every
// one acknowledged by now): more is a write counted twice (an error),
// fewer is acknowledged writes lost, which it returns.
func (c failoverCase) check(t *testing.T, store engine.Store, all []op, posts []string) (lostLikes, lostComments int64) {
	t.Helper()
	wantLikes, wantComments := map[string]int64{}, map[string]map[string]bool{}
	for _, o := range all {
		if o.like {
			wantLikes[o.post]++
		} else {
			if wantComments[o.post] == nil {
				wantComments[o.post] = map[string]bool{}
			}
			wantComments[o.post][o.key] = true
		}
	}
	ids := make([]engine.PostID, len(posts))
	for i, p := range posts {
		n, _ := strconv.ParseUint(p, 10, 64)
		ids[i] = engine.PostID(n)
	}
	counts, err := store.Counts(t.Context(), ids)
	if err != nil {
		t.Fatalf("counts after the failover: %v", err)
	}
	for i, p := range posts {
		likes, comments := counts[i].Likes, counts[i].Comments
		wl, wc := wantLikes[p], int64(len(wantComments[p]))
		if likes > wl || comments > wc {
			t.Errorf("%s: post %s counts %d likes, %d comments; %d and %d were made: counted twice", c.name, p, likes, comments, wl, wc)
		}
		lostLikes += max(0, wl-likes)
		lostComments += max(0, wc-comments)
	}
	return lostLikes, lostComments
}
