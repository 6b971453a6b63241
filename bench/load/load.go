package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"
)

type kind int

const (
	kFeed kind = iota
	kBadge
	kLike
	kReact   // reactToPost: another kind than like, often over the user's like (a switch)
	kUnreact // unreactToPost: one of the user's recent reactions removed
	kComment
	kView
	kBroadcast // not drawn from the mix: sent every -broadcast-every by its own sender
	nKinds
)

var kindNames = [nKinds]string{"feed", "badge", "like", "react", "unreact", "comment", "view", "broadcast"}

// mix is the weights of the kinds each client draws from.
type mix [nKinds]int

func parseMix(s string) (mix, error) {
	var m mix
	total := 0
	for part := range strings.SplitSeq(s, ",") {
		name, w, ok := strings.Cut(strings.TrimSpace(part), "=")
		n, err := strconv.Atoi(w)
		if !ok || err != nil || n < 0 {
			return m, fmt.Errorf("-mix: %q is not kind=weight", part)
		}
		k := -1
		for i, kn := range kindNames[:kBroadcast] {
			if kn == name {
				k = i
			}
		}
		if k < 0 {
			return m, fmt.Errorf("-mix: unknown kind %q (feed, badge, like, react, unreact, comment, view; broadcasts come from -broadcast-every)", name)
		}
		m[k] = n
		total += n
	}
	if total == 0 {
		return m, fmt.Errorf("-mix: all weights are zero")
	}
	return m, nil
}

func (m mix) String() string {
	var parts []string
	for k, w := range m {
		if w > 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", kindNames[k], w))
		}
	}
	return strings.Join(parts, ",")
}

// forLikesOnly is m for a server without reactions: its react and
// unreact draws are likes.
func (m mix) forLikesOnly() mix {
	m[kLike] += m[kReact] + m[kUnreact]
	m[kReact], m[kUnreact] = 0, 0
	return m
}

// feedPage is what a feed draw asks for: the request body up to the ids,
// whether the posts carry counts, and how many reaction kinds each lists
// (0: none asked).
type feedPage struct {
	prefix    []byte
	counts    bool
	reactions int
}

// mixedPage is the mixed phase's feed page on w's server: where it has
// kinds beyond like, a reaction-showing app's page (every kind's count and
// the viewer's kind in place of viewerHasLiked); else counts and flags.
func mixedPage(w *world) feedPage {
	if len(w.kinds) > 1 {
		return feedPage{prefix: feedReactionsPrefix, counts: true, reactions: len(w.kinds)}
	}
	return feedPage{prefix: feedPrefix, counts: true}
}

func (m mix) pick(rng *rand.Rand) kind {
	total := 0
	for _, w := range m {
		total += w
	}
	x := rng.IntN(total)
	for k, w := range m {
		if x < w {
			return kind(k)
		}
		x -= w
	}
	return kFeed
}

type phaseCfg struct {
	name           string
	duration       time.Duration
	clients        int
	mix            mix
	pageMin        int
	pageMax        int
	page           feedPage
	broadcastEvery time.Duration
	seed           uint64
	runID          string
}

// phaseResult is what one phase measured on one target.
type phaseResult struct {
	Target    string
	Phase     string
	Clients   int
	Mix       string
	Pages     string
	Elapsed   time.Duration
	Kinds     [nKinds]*counts
	ServerCPU time.Duration // -1: unknown
	StoreCPU  time.Duration // the part of ServerCPU its store's processes took (redis-server, PostgreSQL); -1: none or unknown
	ToolCPU   time.Duration
	LoadAvg   string // the machine's 1-minute load average at the end
}

func (p *phaseResult) rate(k kind) float64 {
	return float64(p.Kinds[k].ok) / p.Elapsed.Seconds()
}

// loadClient is one closed-loop client: it sends its next request when the
// previous one is answered.
type loadClient struct {
	idx    int
	g      *gql
	w      *world
	cfg    phaseCfg
	rng    *rand.Rand
	perm   []int
	ids    []string
	body   []byte
	buf    bytes.Buffer
	kinds  [nKinds]*counts
	seq    int
	target string
}

func (c *loadClient) samplePosts(n int) []string {
	n = min(n, len(c.perm))
	for i := range n {
		j := i + c.rng.IntN(len(c.perm)-i)
		c.perm[i], c.perm[j] = c.perm[j], c.perm[i]
	}
	c.ids = c.ids[:0]
	for _, p := range c.perm[:n] {
		c.ids = append(c.ids, c.w.posts[p])
	}
	return c.ids
}

// hotPost draws a post with a skew toward a few (a cubic draw: the top 10%
// of posts get about half the writes).
func (c *loadClient) hotPost() int {
	return min(int(float64(len(c.w.posts))*math.Pow(c.rng.Float64(), 3)), len(c.w.posts)-1)
}

func (c *loadClient) timed(k kind, token string, body []byte) (reply, string) {
	start := time.Now()
	r := c.g.post(context.Background(), token, body, &c.buf)
	d := time.Since(start)
	code := classify(r)
	if code == "" {
		c.kinds[k].ok++
		c.kinds[k].lat.record(d)
	} else {
		c.kinds[k].fail(code, errExample(r))
	}
	return r, code
}

// retry resends a write that may be repeated safely until it gets a
// definite answer (at most 4 more tries); the first attempt alone is in
// the latency figures.
func (c *loadClient) retry(token string, body []byte, code string) string {
	for attempt := 0; ambiguous(code) && attempt < 4; attempt++ {
		time.Sleep(time.Duration(50<<attempt) * time.Millisecond)
		code = classify(c.g.post(context.Background(), token, body, &c.buf))
	}
	return code
}

func (c *loadClient) run(deadline time.Time) {
	l := c.w.ledger
	for n := 0; time.Now().Before(deadline); n++ {
		u := c.rng.IntN(len(c.w.users))
		tok := c.w.userTokens[u]
		switch k := c.cfg.mix.pick(c.rng); k {
		case kFeed:
			size := c.cfg.pageMin + c.rng.IntN(c.cfg.pageMax-c.cfg.pageMin+1)
			ids := c.samplePosts(size)
			c.body = appendIDsRequest(c.body, c.cfg.page.prefix, ids)
			r, code := c.timed(kFeed, tok, c.body)
			if code == "" && !c.cfg.page.valid(r.body, ids, n%64 == 0) {
				c.kinds[kFeed].ok--
				c.kinds[kFeed].fail(codeBadResponse, errExample(r))
			}
		case kBadge:
			c.body = append(c.body[:0], badgeBody...)
			r, code := c.timed(kBadge, tok, c.body)
			if code == "" && !bytes.Contains(r.body, []byte(`"redDot":`)) {
				c.kinds[kBadge].ok--
				c.kinds[kBadge].fail(codeBadResponse, errExample(r))
			}
		case kLike, kReact, kUnreact:
			c.reaction(k, u)
		case kComment:
			p := c.hotPost()
			c.seq++
			body := request(commentMut, map[string]any{"p": c.w.posts[p], "k": fmt.Sprintf("load-%s-%s-%d-%d", c.cfg.runID, c.cfg.name, c.idx, c.seq)})
			_, code := c.timed(kComment, tok, body)
			code = c.retry(tok, body, code)
			l.mu.Lock()
			if code == "" {
				l.comments[p]++
			} else if ambiguous(code) {
				l.commentsAmb[p]++
			}
			l.mu.Unlock()
		case kView:
			ids := c.samplePosts(20)
			idx := make([]int, len(ids))
			for i, id := range ids {
				idx[i] = c.w.postIndex[id]
			}
			_, code := c.timed(kView, tok, request(viewsMutation, map[string]any{"ids": ids}))
			// Not retried: a view is not idempotent.
			l.mu.Lock()
			for _, p := range idx {
				if code == "" {
					l.views[p]++
				} else if ambiguous(code) {
					l.viewsAmb[p]++
				}
			}
			l.mu.Unlock()
		}
	}
}

// reaction likes a hot post as user u, reacts to one with another kind
// (half the time one of u's recent reactions, so that it switches kinds)
// or removes one of u's recent reactions, and records the outcome. u's
// lock is held throughout: the ledger sees u's writes in the server's
// order.
func (c *loadClient) reaction(k kind, u int) {
	l := c.w.ledger
	l.userMu[u].Lock()
	defer l.userMu[u].Unlock()
	p := -1
	if k == kUnreact || (k == kReact && c.rng.IntN(2) == 0) {
		p = l.recentPost(u, c.rng)
	}
	if p < 0 {
		p = c.hotPost()
	}
	post := c.w.posts[p]
	var body, want []byte
	kindIdx := -1
	switch k {
	case kLike:
		kindIdx = c.w.kindIndex("like")
		body, want = request(likeMutation, map[string]any{"p": post}), []byte(`"viewerHasLiked":true`)
	case kReact:
		kindIdx = c.w.otherKind(c.rng)
		body = request(reactMutation, map[string]any{"p": post, "k": c.w.kinds[kindIdx]})
		want = []byte(`"viewerReaction":"` + c.w.kinds[kindIdx] + `"`)
	case kUnreact:
		body, want = request(unreactMutation, map[string]any{"p": post}), []byte(`"viewerReaction":null`)
	}
	tok := c.w.userTokens[u]
	r, code := c.timed(k, tok, body)
	if code == "" && !bytes.Contains(r.body, want) {
		c.kinds[k].ok--
		c.kinds[k].fail(codeBadResponse, errExample(r))
		code = codeBadResponse
	}
	code = c.retry(tok, body, code)
	if code == "" || ambiguous(code) {
		l.react(pair{c.w.users[u], postID(post)}, kindIdx, code == "")
		if kindIdx >= 0 {
			l.remember(u, p)
		}
	}
}

var badgeBody = request(badgeQuery, nil)

var pagePrefix = []byte(`{"data":{"posts":[`)

// valid checks a feed page: cheaply always (the response starts as a
// page), fully when deep (every post present, in order, with its counts
// and every reaction kind when asked for).
func (pg feedPage) valid(body []byte, ids []string, deep bool) bool {
	if !bytes.HasPrefix(body, pagePrefix) {
		return false
	}
	if !deep {
		return true
	}
	var resp struct {
		Data struct {
			Posts []*struct {
				ID        string            `json:"id"`
				Counts    json.RawMessage   `json:"counts"`
				Reactions []json.RawMessage `json:"reactions"`
			} `json:"posts"`
		} `json:"data"`
	}
	if json.Unmarshal(body, &resp) != nil || len(resp.Data.Posts) != len(ids) {
		return false
	}
	for i, p := range resp.Data.Posts {
		if p == nil || p.ID != ids[i] || (pg.counts && len(p.Counts) < 10) || len(p.Reactions) != pg.reactions {
			return false
		}
	}
	return true
}

// runPhase runs cfg.clients closed-loop clients for cfg.duration, plus a
// broadcast sender when cfg.broadcastEvery is set, and gathers their
// figures. Requests in flight at the deadline finish (and are counted), so
// that no write is cut off without an answer.
func runPhase(g *gql, w *world, cfg phaseCfg, srv *server, subs *subscribers) *phaseResult {
	res := &phaseResult{Target: srv.name, Phase: cfg.name, Clients: cfg.clients, Mix: cfg.mix.String(),
		Pages: fmt.Sprintf("%d-%d", cfg.pageMin, cfg.pageMax)}
	for k := range res.Kinds {
		res.Kinds[k] = &counts{}
	}
	clients := make([]*loadClient, cfg.clients)
	for i := range clients {
		c := &loadClient{idx: i, g: g, w: w, cfg: cfg, target: srv.name,
			rng:  rand.New(rand.NewPCG(cfg.seed, uint64(i)+1)),
			perm: make([]int, len(w.posts))}
		for p := range c.perm {
			c.perm[p] = p
		}
		for k := range c.kinds {
			c.kinds[k] = &counts{}
		}
		clients[i] = c
	}
	cpu0, tool0, store0 := srv.cpu(), toolCPU(), srv.storeCPU()
	start := time.Now()
	deadline := start.Add(cfg.duration)
	var wg sync.WaitGroup
	for _, c := range clients {
		wg.Go(func() { c.run(deadline) })
	}
	bc := &counts{}
	if cfg.broadcastEvery > 0 && w.adminToken != "" {
		wg.Go(func() {
			var buf bytes.Buffer
			for n := 1; ; n++ {
				next := start.Add(time.Duration(n) * cfg.broadcastEvery)
				if !next.Before(deadline) {
					return
				}
				time.Sleep(time.Until(next))
				subs.publish(g, w, cfg.name, bc, &buf)
			}
		})
	}
	wg.Wait()
	res.Elapsed = time.Since(start)
	cpu1, tool1, store1 := srv.cpu(), toolCPU(), srv.storeCPU()
	res.ServerCPU, res.StoreCPU = -1, -1
	if cpu0 >= 0 && cpu1 >= 0 {
		res.ServerCPU = cpu1 - cpu0
	}
	if store0 >= 0 && store1 >= 0 {
		res.StoreCPU = store1 - store0
	}
	res.ToolCPU = tool1 - tool0
	res.LoadAvg = loadAvg()
	for _, c := range clients {
		for k := range c.kinds {
			res.Kinds[k].merge(c.kinds[k])
		}
	}
	res.Kinds[kBroadcast].merge(bc)
	return res
}
