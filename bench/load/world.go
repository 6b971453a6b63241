package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"math/bits"
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

type pair struct{ user, post uint64 }

// ledger is the tool's own account of acknowledged writes, which the
// server's counts must equal at the end. A write that got no definite
// answer is "ambiguous": it may or may not have been applied, so with
// ambiguous writes the check becomes acked ≤ count ≤ acked + ambiguous.
type ledger struct {
	mu sync.Mutex
	// reactions holds each (user, post)'s reaction as the set of states it
	// may be in (reactState). likePost, reactToPost and unreactToPost each
	// set the state whatever it was, so the last acknowledged write
	// decides it, and writes of one user are never in flight together
	// (userMu): the ledger's order is the server's.
	reactions             map[pair]reactState
	userMu                []sync.Mutex
	recent                [][]int       // per user index: posts it reacted to lately, for switches and unreacts
	favs                  map[pair]bool // pair → acknowledged (false: ambiguous so far)
	comments, commentsAmb []int64
	views, viewsAmb       []int64
	follows               map[pair]bool // follower, followee (acknowledged only)
	postsBy               map[uint64]int64
	ambiguousCreate       int
	ambiguousFollow       int
	ambiguousPublish      int // broadcasts without a definite answer: delivery figures may be off by one
}

func newLedger(users int) *ledger {
	return &ledger{reactions: map[pair]reactState{}, favs: map[pair]bool{}, follows: map[pair]bool{},
		postsBy: map[uint64]int64{}, userMu: make([]sync.Mutex, users), recent: make([][]int, users)}
}

// reactState is the set of reaction states a (user, post) may be in: bit
// 0 none, bit k+1 the world's kind k. One bit is a definite state; more
// come from writes without a definite answer.
type reactState uint64

const noReaction reactState = 1

func stateOf(kind int) reactState { return 1 << (kind + 1) }

// definite returns the kind of a state known for sure (-1: none) and
// whether it is.
func (s reactState) definite() (int, bool) {
	if s&(s-1) != 0 {
		return 0, false
	}
	return bits.TrailingZeros64(uint64(s)) - 1, true
}

// react records a write that sets p's reaction to kind (-1: none):
// acknowledged, the state is kind; ambiguous, kind joins the states it
// may be in.
func (l *ledger) react(p pair, kind int, acked bool) {
	l.mu.Lock()
	if acked {
		l.reactions[p] = stateOf(kind)
	} else {
		cur, ok := l.reactions[p]
		if !ok {
			cur = noReaction
		}
		l.reactions[p] = cur | stateOf(kind)
	}
	l.mu.Unlock()
}

// remember adds post to user's recent reactions (the last 8).
func (l *ledger) remember(user, post int) {
	l.mu.Lock()
	r := l.recent[user]
	if len(r) == 8 {
		r = append(r[:0], r[1:]...)
	}
	l.recent[user] = append(r, post)
	l.mu.Unlock()
}

// recentPost is one of user's recent reactions, -1 when it has none.
func (l *ledger) recentPost(user int, rng *rand.Rand) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r := l.recent[user]; len(r) > 0 {
		return r[rng.IntN(len(r))]
	}
	return -1
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
	Reactions []reactionCount `json:"reactions"`
}

type reactionCount struct {
	Kind  string `json:"kind"`
	Count int64  `json:"count"`
}

// readAll reads every post of the world back, 100 per request, with
// every kind's count when the server serves reactions.
func readAll(ctx context.Context, g *gql, w *world) ([]*readback, error) {
	q := readbackQuery
	if w.reacts {
		q = readbackReactionsQuery
	}
	var all []*readback
	for i := 0; i < len(w.posts); i += 100 {
		ids := w.posts[i:min(i+100, len(w.posts))]
		// Reads wait out the rate limit: a page of every kind's counts
		// costs more than the limit allows a client each second.
		r, code := send(ctx, g, w.adminToken, request(q, map[string]any{"ids": ids}), true)
		if code != "" {
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
	// Reactions: the acknowledged reactions standing at the end, per kind
	// (like's are Likes), when the server serves reactions.
	Reactions map[string]int64 `json:"acked_reactions,omitempty"`
	// Viewers: (user, post) pairs whose viewerReaction (viewerHasLiked on
	// a server without reactions) was checked against the ledger.
	Viewers int `json:"viewer_pairs_checked"`
}

// mismatch records one value out of its bounds (at most 20 are kept).
func (ex *exactness) mismatch(s string) {
	if len(ex.Mismatches) < 20 {
		ex.Mismatches = append(ex.Mismatches, s)
	} else {
		ex.Mismatches[19] = "… more"
	}
}

// verify reads every post back and compares likes, every reaction kind's
// count, favorites, comments and views, and each author's postCount,
// followerCount and followingCount, with what the server acknowledged;
// then asks as each user that reacted for its reaction on those posts.
func verify(ctx context.Context, g *gql, w *world) (exactness, []*readback, error) {
	posts, err := readAll(ctx, g, w)
	if err != nil {
		return exactness{}, nil, err
	}
	l := w.ledger
	l.mu.Lock()
	var ex exactness
	// Per post and kind: reactions standing for sure, and those that may.
	type tally struct{ sure, maybe []int64 }
	reacted := map[uint64]*tally{}
	for p, st := range l.reactions {
		t := reacted[p.post]
		if t == nil {
			t = &tally{make([]int64, len(w.kinds)), make([]int64, len(w.kinds))}
			reacted[p.post] = t
		}
		if k, ok := st.definite(); ok {
			if k >= 0 {
				t.sure[k]++
			}
			continue
		}
		ex.Ambiguous++
		for k := range w.kinds {
			if st&stateOf(k) != 0 {
				t.maybe[k]++
			}
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
			s := fmt.Sprintf("%s: server %d, acknowledged %d", what, got, want)
			if amb > 0 {
				s += fmt.Sprintf(" (+ up to %d ambiguous)", amb)
			}
			ex.mismatch(s)
		}
	}
	like := w.kindIndex("like")
	none := &tally{make([]int64, len(w.kinds)), make([]int64, len(w.kinds))}
	if w.reacts {
		ex.Reactions = map[string]int64{}
	}
	authorsSeen := map[string]bool{}
	for i, p := range posts {
		id := postID(p.ID)
		t := reacted[id]
		if t == nil {
			t = none
		}
		check("post "+p.ID+" likes", p.Counts.Likes, t.sure[like], t.maybe[like])
		ex.Likes += t.sure[like]
		if w.reacts {
			if len(p.Reactions) != len(w.kinds) {
				ex.mismatch(fmt.Sprintf("post %s: %d reaction kinds, the server serves %d", p.ID, len(p.Reactions), len(w.kinds)))
			}
			for k, rc := range p.Reactions[:min(len(p.Reactions), len(w.kinds))] {
				if rc.Kind != w.kinds[k] {
					ex.mismatch(fmt.Sprintf("post %s: reaction %d is %q, want %q", p.ID, k, rc.Kind, w.kinds[k]))
					continue
				}
				check("post "+p.ID+" "+rc.Kind, rc.Count, t.sure[k], t.maybe[k])
				ex.Reactions[rc.Kind] += t.sure[k]
			}
		}
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
	for _, n := range favsAmb {
		ex.Ambiguous += n
	}
	for i := range l.commentsAmb {
		ex.Ambiguous += l.commentsAmb[i] + l.viewsAmb[i]
	}
	ex.Ambiguous += int64(l.ambiguousCreate + l.ambiguousFollow)
	byUser := map[uint64]map[string]reactState{}
	for p, st := range l.reactions {
		if byUser[p.user] == nil {
			byUser[p.user] = map[string]reactState{}
		}
		byUser[p.user][strconv.FormatUint(p.post, 10)] = st
	}
	l.mu.Unlock()
	if err := checkViewers(ctx, g, w, byUser, &ex); err != nil {
		return ex, nil, err
	}
	ex.Exact = len(ex.Mismatches) == 0
	return ex, posts, nil
}

// checkViewers asks, as each user in byUser, for its reaction on the
// posts it reacted to (viewerReaction; viewerHasLiked on a server without
// reactions), and checks each against the states the ledger allows.
func checkViewers(ctx context.Context, g *gql, w *world, byUser map[uint64]map[string]reactState, ex *exactness) error {
	index := make(map[uint64]int, len(w.users))
	for i, u := range w.users {
		index[u] = i
	}
	q := viewerLikedQuery
	if w.reacts {
		q = viewerReactionQuery
	}
	users := slices.Sorted(maps.Keys(byUser))
	var mu sync.Mutex
	var firstErr error
	parallel(ctx, len(users), 4, func(i int) {
		u := users[i]
		ids := slices.Sorted(maps.Keys(byUser[u]))
		for start := 0; start < len(ids); start += 100 {
			chunk := ids[start:min(start+100, len(ids))]
			r, code := send(ctx, g, w.userTokens[index[u]], request(q, map[string]any{"ids": chunk}), true)
			var resp struct {
				Data struct {
					Posts []*struct {
						ID             string  `json:"id"`
						ViewerReaction *string `json:"viewerReaction"`
						ViewerHasLiked bool    `json:"viewerHasLiked"`
					} `json:"posts"`
				} `json:"data"`
			}
			if code == "" && (json.Unmarshal(r.body, &resp) != nil || len(resp.Data.Posts) != len(chunk)) {
				code = codeBadResponse
			}
			mu.Lock()
			if code != "" {
				if firstErr == nil {
					firstErr = fmt.Errorf("reading user %d's reactions: %s: %s", u, code, errExample(r))
				}
				mu.Unlock()
				return
			}
			for k, p := range resp.Data.Posts {
				got := -1
				switch {
				case p == nil || p.ID != chunk[k]:
					ex.mismatch(fmt.Sprintf("user %d: post %s missing from its page", u, chunk[k]))
					continue
				case p.ViewerReaction != nil:
					got = w.kindIndex(*p.ViewerReaction)
					if got < 0 {
						ex.mismatch(fmt.Sprintf("user %d post %s: viewerReaction %q is no kind the server serves", u, p.ID, *p.ViewerReaction))
						continue
					}
				case p.ViewerHasLiked && !w.reacts:
					got = w.kindIndex("like")
				}
				ex.Checked++
				ex.Viewers++
				if st := byUser[u][p.ID]; st&stateOf(got) == 0 {
					ex.mismatch(fmt.Sprintf("user %d post %s viewer's reaction: server %s, acknowledged %s", u, p.ID, w.kindName(got), w.stateName(st)))
				}
			}
			mu.Unlock()
		}
	})
	if firstErr == nil {
		firstErr = ctx.Err()
	}
	return firstErr
}

// kindName is kind's name, "none" for -1.
func (w *world) kindName(kind int) string {
	if kind < 0 {
		return "none"
	}
	return w.kinds[kind]
}

// stateName lists the states st allows, "like or none" for an ambiguous like.
func (w *world) stateName(st reactState) string {
	var names []string
	for k := -1; k < len(w.kinds); k++ {
		if st&stateOf(k) != 0 {
			names = append(names, w.kindName(k))
		}
	}
	return strings.Join(names, " or ")
}
