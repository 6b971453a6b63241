package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strconv"
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
}

type pair struct{ user, post uint64 }

// ledger is the tool's own account of acknowledged writes, which the
// server's counts must equal at the end. A write that got no definite
// answer is "ambiguous": it may or may not have been applied, so with
// ambiguous writes the check becomes acked ≤ count ≤ acked + ambiguous.
type ledger struct {
	mu                    sync.Mutex
	likes, favs           map[pair]bool // pair → acknowledged (false: ambiguous so far)
	comments, commentsAmb []int64
	views, viewsAmb       []int64
	follows               map[pair]bool // follower, followee (acknowledged only)
	postsBy               map[uint64]int64
	ambiguousCreate       int
	ambiguousFollow       int
	ambiguousPublish      int // broadcasts without a definite answer: delivery figures may be off by one
}

func newLedger() *ledger {
	return &ledger{likes: map[pair]bool{}, favs: map[pair]bool{}, follows: map[pair]bool{},
		postsBy: map[uint64]int64{}}
}

func (l *ledger) sized(posts int) {
	l.comments, l.commentsAmb = make([]int64, posts), make([]int64, posts)
	l.views, l.viewsAmb = make([]int64, posts), make([]int64, posts)
}

// setPair records a like or favorite: acknowledged wins over ambiguous.
func (l *ledger) setPair(m map[pair]bool, p pair, acked bool) {
	l.mu.Lock()
	if acked {
		m[p] = true
	} else if _, ok := m[p]; !ok {
		m[p] = false
	}
	l.mu.Unlock()
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

// do sends body as token until it gets a definite answer; retry says
// whether a retry could apply the operation twice (then it is not retried
// after an ambiguous failure).
func (s *seeder) do(ctx context.Context, token string, body []byte, retry bool) (reply, string) {
	var buf bytes.Buffer
	for attempt := 0; ; attempt++ {
		r := s.g.post(ctx, token, body, &buf)
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
	// favorites, comments and views.
	type write struct {
		kind string
		user int
		post int
	}
	var writes []write
	for range cfg.posts * 3 {
		writes = append(writes, write{"like", rng.IntN(len(w.users)), hot(cfg.posts)})
	}
	for range cfg.posts {
		writes = append(writes, write{"fav", rng.IntN(len(w.users)), hot(cfg.posts)})
	}
	for range cfg.posts / 2 {
		writes = append(writes, write{"comment", rng.IntN(len(w.users)), hot(cfg.posts)})
	}
	parallel(ctx, len(writes), 16, func(i int) {
		wr := writes[i]
		p := pair{w.users[wr.user], postID(w.posts[wr.post])}
		switch wr.kind {
		case "like", "fav":
			q, m := likeMutation, l.likes
			if wr.kind == "fav" {
				q, m = favMutation, l.favs
			}
			r, code := s.do(ctx, w.userTokens[wr.user], request(q, map[string]any{"p": w.posts[wr.post]}), true)
			if code == "" {
				l.setPair(m, p, true)
			} else if ambiguous(code) {
				l.setPair(m, p, false)
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
	out.printf("seeded %d users (%d authors), %d posts, %d follows, %d likes, %d favorites, %d comments, %d view batches in %.1fs\n",
		len(w.users), w.authors, len(w.posts), len(follows), cfg.posts*3, cfg.posts, cfg.posts/2, len(batches), time.Since(start).Seconds())
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

// readback is one post as the server counts it.
type readback struct {
	ID     string `json:"id"`
	Author *struct {
		ID             string `json:"id"`
		PostCount      int64  `json:"postCount"`
		FollowerCount  int64  `json:"followerCount"`
		FollowingCount int64  `json:"followingCount"`
	} `json:"author"`
	Counts struct {
		Likes     int64 `json:"likes"`
		Comments  int64 `json:"comments"`
		Reposts   int64 `json:"reposts"`
		Views     int64 `json:"views"`
		Favorites int64 `json:"favorites"`
	} `json:"counts"`
}

// readAll reads every post of the world back, 100 per request.
func readAll(ctx context.Context, g *gql, w *world) ([]*readback, error) {
	var all []*readback
	var buf bytes.Buffer
	for i := 0; i < len(w.posts); i += 100 {
		ids := w.posts[i:min(i+100, len(w.posts))]
		r := g.post(ctx, w.adminToken, request(readbackQuery, map[string]any{"ids": ids}), &buf)
		if code := classify(r); code != "" {
			return nil, fmt.Errorf("reading the posts back: %s: %s", code, errExample(r))
		}
		var resp struct {
			Data struct {
				Posts []*readback `json:"posts"`
			} `json:"data"`
		}
		if err := json.Unmarshal(r.body, &resp); err != nil || len(resp.Data.Posts) != len(ids) {
			return nil, fmt.Errorf("reading the posts back: %d posts for %d ids (%v)", len(resp.Data.Posts), len(ids), err)
		}
		for k, p := range resp.Data.Posts {
			if p == nil || p.ID != ids[k] {
				return nil, fmt.Errorf("reading the posts back: post %s is missing or out of order", ids[k])
			}
		}
		all = append(all, resp.Data.Posts...)
	}
	return all, nil
}

// exactness is the outcome of comparing the server's counts with the
// ledger.
type exactness struct {
	Checked    int      `json:"checked_values"`
	Mismatches []string `json:"mismatches"`
	Ambiguous  int64    `json:"ambiguous_writes"`
	Exact      bool     `json:"exact"`
	Likes      int64    `json:"acked_likes"`
	Comments   int64    `json:"acked_comments"`
	Views      int64    `json:"acked_views"`
	Favorites  int64    `json:"acked_favorites"`
}

// verify reads every post back and compares likes, favorites, comments
// and views, and each author's postCount, followerCount and
// followingCount, with what the server acknowledged.
func verify(ctx context.Context, g *gql, w *world) (exactness, []*readback, error) {
	posts, err := readAll(ctx, g, w)
	if err != nil {
		return exactness{}, nil, err
	}
	l := w.ledger
	l.mu.Lock()
	defer l.mu.Unlock()
	var ex exactness
	likes, likesAmb := map[uint64]int64{}, map[uint64]int64{}
	for p, acked := range l.likes {
		if acked {
			likes[p.post]++
			ex.Likes++
		} else {
			likesAmb[p.post]++
		}
	}
	favs, favsAmb := map[uint64]int64{}, map[uint64]int64{}
	for p, acked := range l.favs {
		if acked {
			favs[p.post]++
			ex.Favorites++
		} else {
			favsAmb[p.post]++
		}
	}
	followers, following := map[uint64]int64{}, map[uint64]int64{}
	for p := range l.follows {
		following[p.user]++
		followers[p.post]++
	}
	check := func(what string, got, want, amb int64) {
		ex.Checked++
		if got < want || got > want+amb {
			if len(ex.Mismatches) < 20 {
				s := fmt.Sprintf("%s: server %d, acknowledged %d", what, got, want)
				if amb > 0 {
					s += fmt.Sprintf(" (+ up to %d ambiguous)", amb)
				}
				ex.Mismatches = append(ex.Mismatches, s)
			} else {
				ex.Mismatches[19] = "… more"
			}
		}
	}
	authorsSeen := map[string]bool{}
	for i, p := range posts {
		id := postID(p.ID)
		check("post "+p.ID+" likes", p.Counts.Likes, likes[id], likesAmb[id])
		check("post "+p.ID+" favorites", p.Counts.Favorites, favs[id], favsAmb[id])
		check("post "+p.ID+" comments", p.Counts.Comments, l.comments[i], l.commentsAmb[i])
		check("post "+p.ID+" views", p.Counts.Views, l.views[i], l.viewsAmb[i])
		ex.Comments += l.comments[i]
		ex.Views += l.views[i]
		if p.Author == nil {
			check("post "+p.ID+" has an author", 0, 1, 0)
			continue
		}
		if authorsSeen[p.Author.ID] {
			continue
		}
		authorsSeen[p.Author.ID] = true
		a := postID(p.Author.ID)
		check("user "+p.Author.ID+" postCount", p.Author.PostCount, l.postsBy[a], int64(l.ambiguousCreate))
		check("user "+p.Author.ID+" followerCount", p.Author.FollowerCount, followers[a], int64(l.ambiguousFollow))
		check("user "+p.Author.ID+" followingCount", p.Author.FollowingCount, following[a], int64(l.ambiguousFollow))
	}
	for _, n := range likesAmb {
		ex.Ambiguous += n
	}
	for _, n := range favsAmb {
		ex.Ambiguous += n
	}
	for i := range l.commentsAmb {
		ex.Ambiguous += l.commentsAmb[i] + l.viewsAmb[i]
	}
	ex.Ambiguous += int64(l.ambiguousCreate + l.ambiguousFollow)
	ex.Exact = len(ex.Mismatches) == 0
	return ex, posts, nil
}
