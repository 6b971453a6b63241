package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// world is what the tool created on one server: users with tokens, posts,
// and the ledger of every write the server acknowledged.
type world struct {
	runID      string
	admin      uint64
	adminToken string
	users      []uint64 // load users; users[:authors] write posts
	userTokens []string
	authors    int
	posts      []string
	postIndex  map[string]int
	ledger     *ledger
	// kinds are the reaction kinds the server serves, in its order (asked
	// once: Post.reactions lists every kind); like is always one, and a
	// server without reactions is ["like"] with reacts false.
	kinds  []string
	reacts bool
}

// otherKind draws a reaction kind other than like, the earlier kinds of
// the server's display order more often (the j-th other kind with weight
// 1/j, as apps' pickers put the popular ones first); like when it has no
// other.
func (w *world) otherKind(rng *rand.Rand) int {
	like := w.kindIndex("like")
	var others []int
	for i := range w.kinds {
		if i != like {
			others = append(others, i)
		}
	}
	if len(others) == 0 {
		return like
	}
	total := 0.0
	for j := range others {
		total += 1 / float64(j+1)
	}
	x := rng.Float64() * total
	for j, k := range others {
		x -= 1 / float64(j+1)
		if x < 0 {
			return k
		}
	}
	return others[len(others)-1]
}

// kindIndex is the index of name in w.kinds, -1 when absent.
func (w *world) kindIndex(name string) int {
	for i, k := range w.kinds {
		if k == name {
			return i
		}
	}
	return -1
}

func postID(s string) uint64 {
	v, _ := strconv.ParseUint(s, 10, 64)
	return v
}

// seeder runs the seeding operations with a few workers, retrying what a
// retry cannot double (idempotent operations or ones with an idempotency
// key) on transport errors and rate limits.
type seeder struct {
	g     *gql
	w     *world
	runID string
}

// do sends body as token until it gets a definite answer (send).
func (s *seeder) do(ctx context.Context, token string, body []byte, retry bool) (reply, string) {
	return send(ctx, s.g, token, body, retry)
}

// send sends body as token until it gets a definite answer, waiting out
// rate limits; retry says whether a retry could apply the operation
// twice (then it is not retried after an ambiguous failure).
func send(ctx context.Context, g *gql, token string, body []byte, retry bool) (reply, string) {
	var buf bytes.Buffer
	for attempt := 0; ; attempt++ {
		r := g.post(ctx, token, body, &buf)
		code := classify(r)
		r.body = bytes.Clone(r.body)
		switch {
		case code == "":
			return r, ""
		case code == "RATE_LIMITED" && attempt < 200:
			time.Sleep(100 * time.Millisecond)
		case ambiguous(code) && retry && attempt < 5:
			time.Sleep(time.Duration(50<<attempt) * time.Millisecond)
		default:
			return r, code
		}
		if ctx.Err() != nil {
			return r, codeTransport
		}
	}
}

func parallel(ctx context.Context, n, workers int, f func(i int)) {
	var wg sync.WaitGroup
	next := make(chan int)
	for range workers {
		wg.Go(func() {
			for i := range next {
				f(i)
			}
		})
	}
	for i := range n {
		if ctx.Err() != nil {
			break
		}
		next <- i
	}
	close(next)
	wg.Wait()
}

// seed creates the world through the API, every choice drawn from seed.
// Authors' shares and the posts' popularity are skewed (a quadratic draw
// puts ~7% of the posts on the top author of 200, and likes on a few hot
// posts).
func seed(ctx context.Context, g *gql, w *world, cfg config, out *report) error {
	start := time.Now()
	rng := rand.New(rand.NewPCG(cfg.seed, 0x5eed))
	s := &seeder{g: g, w: w, runID: w.runID}
	l := w.ledger
	skew := func(n int) int { u := rng.Float64(); return min(int(float64(n)*u*u), n-1) }
	hot := func(n int) int { return min(int(float64(n)*math.Pow(rng.Float64(), 3)), n-1) }

	// Posts.
	postAuthor := make([]int, cfg.posts)
	for i := range postAuthor {
		postAuthor[i] = skew(w.authors)
	}
	w.posts = make([]string, cfg.posts)
	var errMu sync.Mutex
	var firstErr error
	fail := func(what string, r reply, code string) {
		errMu.Lock()
		if firstErr == nil {
			firstErr = fmt.Errorf("seeding (%s): %s: %s", what, code, errExample(r))
		}
		errMu.Unlock()
	}
	parallel(ctx, cfg.posts, 16, func(i int) {
		u := postAuthor[i]
		body := request(createPostMut, map[string]any{"k": fmt.Sprintf("load-%s-post-%d", s.runID, i)})
		r, code := s.do(ctx, w.userTokens[u], body, true)
		if code != "" {
			if ambiguous(code) {
				l.mu.Lock()
				l.ambiguousCreate++
				l.mu.Unlock()
			}
			fail("createPost", r, code)
			return
		}
		l.mu.Lock()
		w.posts[i] = postOf(r.body)
		l.postsBy[w.users[u]]++
		l.mu.Unlock()
	})
	if firstErr != nil {
		return firstErr
	}
	w.postIndex = make(map[string]int, len(w.posts))
	for i, id := range w.posts {
		w.postIndex[id] = i
	}
	l.sized(len(w.posts))
	if err := probeKinds(ctx, g, w); err != nil {
		return err
	}
	if w.reacts {
		out.printf("reactions: the server serves %s (from Post.reactions)\n", strings.Join(w.kinds, ","))
	} else {
		out.printf("reactions: the server serves none (Post.reactions refused): likes only, the mix's react and unreact draws are likes\n")
	}

	// Follows: every user follows up to 5 authors.
	type follow struct{ from, to int }
	var follows []follow
	for u := range w.users {
		seen := map[int]bool{}
		for range 5 {
			a := skew(w.authors)
			if a == u || seen[a] {
				continue
			}
			seen[a] = true
			follows = append(follows, follow{u, a})
		}
	}
	parallel(ctx, len(follows), 16, func(i int) {
		f := follows[i]
		r, code := s.do(ctx, w.userTokens[f.from], request(followMut, map[string]any{"u": strconv.FormatUint(w.users[f.to], 10)}), true)
		if code != "" {
			if ambiguous(code) {
				l.mu.Lock()
				l.ambiguousFollow++
				l.mu.Unlock()
			}
			fail("follow", r, code)
			return
		}
		l.mu.Lock()
		l.follows[pair{w.users[f.from], w.users[f.to]}] = true
		l.mu.Unlock()
	})

	// Likes (duplicates included on purpose: they must count once),
	// reactions of the other kinds (some over a like: a switch),
	// favorites, comments and views.
	type write struct {
		kind     string
		user     int
		post     int
		reaction int // with "react": the kind's index in w.kinds
	}
	var writes []write
	for range cfg.posts * 3 {
		writes = append(writes, write{kind: "like", user: rng.IntN(len(w.users)), post: hot(cfg.posts)})
	}
	reacts := 0
	if len(w.kinds) > 1 {
		reacts = cfg.posts / 2
	}
	for range reacts {
		writes = append(writes, write{kind: "react", user: rng.IntN(len(w.users)), post: hot(cfg.posts), reaction: w.otherKind(rng)})
	}
	for range cfg.posts {
		writes = append(writes, write{kind: "fav", user: rng.IntN(len(w.users)), post: hot(cfg.posts)})
	}
	for range cfg.posts / 2 {
		writes = append(writes, write{kind: "comment", user: rng.IntN(len(w.users)), post: hot(cfg.posts)})
	}
	parallel(ctx, len(writes), 16, func(i int) {
		wr := writes[i]
		p := pair{w.users[wr.user], postID(w.posts[wr.post])}
		switch wr.kind {
		case "like", "react":
			kind, body := w.kindIndex("like"), request(likeMutation, map[string]any{"p": w.posts[wr.post]})
			if wr.kind == "react" {
				kind, body = wr.reaction, request(reactMutation, map[string]any{"p": w.posts[wr.post], "k": w.kinds[wr.reaction]})
			}
			l.userMu[wr.user].Lock()
			r, code := s.do(ctx, w.userTokens[wr.user], body, true)
			if code == "" || ambiguous(code) {
				l.react(p, kind, code == "")
				l.remember(wr.user, wr.post)
			}
			l.userMu[wr.user].Unlock()
			if code != "" && !ambiguous(code) {
				fail(wr.kind, r, code)
			}
		case "fav":
			r, code := s.do(ctx, w.userTokens[wr.user], request(favMutation, map[string]any{"p": w.posts[wr.post]}), true)
			if code == "" {
				l.setPair(l.favs, p, true)
			} else if ambiguous(code) {
				l.setPair(l.favs, p, false)
			} else {
				fail(wr.kind, r, code)
			}
		case "comment":
			body := request(commentMut, map[string]any{"p": w.posts[wr.post], "k": fmt.Sprintf("load-%s-c-%d", s.runID, i)})
			r, code := s.do(ctx, w.userTokens[wr.user], body, true)
			l.mu.Lock()
			if code == "" {
				l.comments[wr.post]++
			} else if ambiguous(code) {
				l.commentsAmb[wr.post]++
			}
			l.mu.Unlock()
			if code != "" && !ambiguous(code) {
				fail("comment", r, code)
			}
		}
	})
	var batches [][]int
	for range max(cfg.posts*5/100, 1) {
		b := map[int]bool{}
		for range 100 {
			b[hot(cfg.posts)] = true
		}
		idx := make([]int, 0, len(b))
		for i := range b {
			idx = append(idx, i)
		}
		sort.Ints(idx)
		batches = append(batches, idx)
	}
	parallel(ctx, len(batches), 4, func(i int) {
		ids := make([]string, len(batches[i]))
		for k, p := range batches[i] {
			ids[k] = w.posts[p]
		}
		r, code := s.do(ctx, w.userTokens[i%len(w.users)], request(viewsMutation, map[string]any{"ids": ids}), false)
		l.mu.Lock()
		for _, p := range batches[i] {
			if code == "" {
				l.views[p]++
			} else if ambiguous(code) {
				l.viewsAmb[p]++
			}
		}
		l.mu.Unlock()
		if code != "" && !ambiguous(code) {
			fail("recordViews", r, code)
		}
	})
	if firstErr != nil {
		return firstErr
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	out.printf("seeded %d users (%d authors), %d posts, %d follows, %d likes, %d reactions of other kinds, %d favorites, %d comments, %d view batches in %.1fs\n",
		len(w.users), w.authors, len(w.posts), len(follows), cfg.posts*3, reacts, cfg.posts, cfg.posts/2, len(batches), time.Since(start).Seconds())
	return nil
}

// postOf is the id of the post a createPost answer created ("" if none).
func postOf(body []byte) string {
	var resp struct {
		Data struct{ CreatePost struct{ ID string } } `json:"data"`
	}
	json.Unmarshal(body, &resp)
	return resp.Data.CreatePost.ID
}

// probeKinds asks the server which reaction kinds it serves, once:
// Post.reactions lists every kind of its -reactions in display order. A
// server that refuses the field (no reactions) serves likes alone.
func probeKinds(ctx context.Context, g *gql, w *world) error {
	r, code := send(ctx, g, w.adminToken, request(kindsQuery, map[string]any{"ids": w.posts[:1]}), true)
	w.kinds, w.reacts = []string{"like"}, false
	switch {
	case ambiguous(code):
		return fmt.Errorf("asking for the reaction kinds: %s: %s", code, errExample(r))
	case code != "":
		return nil
	}
	var resp struct {
		Data struct {
			Posts []struct {
				Reactions []struct{ Kind string } `json:"reactions"`
			} `json:"posts"`
		} `json:"data"`
	}
	if err := json.Unmarshal(r.body, &resp); err != nil || len(resp.Data.Posts) != 1 {
		return fmt.Errorf("asking for the reaction kinds: %v: %s", err, errExample(r))
	}
	var kinds []string
	for _, k := range resp.Data.Posts[0].Reactions {
		kinds = append(kinds, k.Kind)
	}
	if !slices.Contains(kinds, "like") || len(kinds) > 63 {
		return fmt.Errorf("the server's reaction kinds %q: want like among them, at most 63", kinds)
	}
	w.kinds, w.reacts = kinds, true
	return nil
}
