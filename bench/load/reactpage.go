package main

import (
	"time"
)

// The reactions page against the counts page (issue: a 50-post page with
// reactions { kind count } viewerReaction costs at most 1.3× the page with
// counts and viewerHasLiked). Server CPU is the process's, so the two
// pages cannot share a moment: they take turns in short slices, the
// order flipping every round, so that what else the machine does falls on
// both alike.

// reactSlice is one turn of a page in the comparison.
const reactSlice = 500 * time.Millisecond

// reactionTarget is the bound on the reactions page's cost.
const reactionTarget = 1.3

var (
	flagsPage     = feedPage{prefix: feedPrefix, counts: true}
	countsPage    = feedPage{prefix: countsPagePrefix, counts: true}
	reactionsPage = func(kinds int) feedPage { return feedPage{prefix: reactionsPagePrefix, reactions: kinds} }
)

// reactionPageResult is the comparison on one tally.
type reactionPageResult struct {
	target            string
	kinds             []string
	size, rounds      int
	postsWithOther    int // posts with a reaction of a kind other than like standing
	counts, reactions *phaseResult
}

// compareReactionPage runs the two pages of cfg.comparePage posts on t,
// -react-compare in all, after a warmup of both.
func compareReactionPage(g *gql, w *world, t *server, cfg config) *reactionPageResult {
	res := &reactionPageResult{target: t.name, kinds: w.kinds, size: cfg.comparePage,
		rounds: max(1, int(cfg.reactCompare/(2*reactSlice)))}
	like := w.kindIndex("like")
	w.ledger.mu.Lock()
	other := map[uint64]bool{}
	for p, st := range w.ledger.reactions {
		if k, ok := st.definite(); ok && k >= 0 && k != like {
			other[p.post] = true
		}
	}
	w.ledger.mu.Unlock()
	res.postsWithOther = len(other)
	m := mix{}
	m[kFeed] = 1
	phase := func(name string, page feedPage, d time.Duration, seed uint64) *phaseResult {
		return runPhase(g, w, phaseCfg{name: name, duration: d, clients: cfg.clients, mix: m,
			pageMin: cfg.comparePage, pageMax: cfg.comparePage, page: page, seed: seed}, t, nil)
	}
	if cfg.warmup > 0 {
		phase("warmup", countsPage, cfg.warmup/2, cfg.seed+3)
		phase("warmup", reactionsPage(len(w.kinds)), cfg.warmup/2, cfg.seed+4)
	}
	for i := range res.rounds {
		seed := cfg.seed + 5 + uint64(i)
		turns := []func(){
			func() { res.counts = mergePhase(res.counts, phase("counts-page", countsPage, reactSlice, seed)) },
			func() {
				res.reactions = mergePhase(res.reactions, phase("reactions-page", reactionsPage(len(w.kinds)), reactSlice, seed))
			},
		}
		if i%2 == 1 {
			turns[0], turns[1] = turns[1], turns[0]
		}
		for _, turn := range turns {
			turn()
		}
	}
	return res
}

// mergePhase adds next's figures to acc (nil: none yet); a CPU unknown
// in either is unknown in the sum.
func mergePhase(acc, next *phaseResult) *phaseResult {
	if acc == nil {
		return next
	}
	acc.Elapsed += next.Elapsed
	if acc.ServerCPU < 0 || next.ServerCPU < 0 {
		acc.ServerCPU = -1
	} else {
		acc.ServerCPU += next.ServerCPU
	}
	if acc.StoreCPU < 0 || next.StoreCPU < 0 {
		acc.StoreCPU = -1
	} else {
		acc.StoreCPU += next.StoreCPU
	}
	acc.ToolCPU += next.ToolCPU
	acc.LoadAvg = next.LoadAvg
	for k := range acc.Kinds {
		acc.Kinds[k].merge(next.Kinds[k])
	}
	return acc
}

// jsonReactionPage is the comparison in -json.
type jsonReactionPage struct {
	Kinds          []string `json:"kinds"`
	PagePosts      int      `json:"page_posts"`
	Slices         int      `json:"slices_each"`
	PostsWithOther int      `json:"posts_with_other_kinds"`
	CountsPages    uint64   `json:"counts_pages"`
	ReactionPages  uint64   `json:"reactions_pages"`
	CountsRate     float64  `json:"counts_pages_per_second"`
	ReactionsRate  float64  `json:"reactions_pages_per_second"`
	CountsCPUus    float64  `json:"counts_cpu_per_page_us"`    // -1: unknown
	ReactionsCPUus float64  `json:"reactions_cpu_per_page_us"` // -1: unknown
	// CPURatio is the reactions page's server CPU per page over the
	// counts page's (-1: unknown): the target is at most 1.3.
	CPURatio float64 `json:"cpu_per_page_ratio"`
	// TimeRatio is the counts page's pages per second over the reactions
	// page's: with closed-loop clients, the reactions page's cost in time.
	TimeRatio    float64 `json:"time_per_page_ratio"`
	WithinTarget bool    `json:"cpu_within_target"`
}

func cpuPerPage(p *phaseResult) time.Duration {
	if p.ServerCPU < 0 || p.Kinds[kFeed].ok == 0 {
		return -1
	}
	return p.ServerCPU / time.Duration(p.Kinds[kFeed].ok)
}

func (r *report) reactionPage(res *reactionPageResult) {
	r.printf("\n== reactions page on %s (%d kinds; %d posts have a reaction of a kind other than like): %d posts, `reactions { kind count } viewerReaction` against `counts { … } viewerHasLiked`, %d clients, %d turns of %s each, alternating\n",
		res.target, len(res.kinds), res.postsWithOther, res.size, res.counts.Clients, res.rounds, reactSlice)
	r.phase(res.counts)
	r.phase(res.reactions)
	jr := jsonReactionPage{Kinds: res.kinds, PagePosts: res.size, Slices: res.rounds, PostsWithOther: res.postsWithOther,
		CountsPages: res.counts.Kinds[kFeed].ok, ReactionPages: res.reactions.Kinds[kFeed].ok,
		CountsRate: res.counts.rate(kFeed), ReactionsRate: res.reactions.rate(kFeed), CountsCPUus: -1, ReactionsCPUus: -1, CPURatio: -1}
	if jr.ReactionsRate > 0 {
		jr.TimeRatio = jr.CountsRate / jr.ReactionsRate
	}
	cc, rc := cpuPerPage(res.counts), cpuPerPage(res.reactions)
	if cc > 0 && rc >= 0 {
		jr.CountsCPUus, jr.ReactionsCPUus = us(cc), us(rc)
		jr.CPURatio = float64(rc) / float64(cc)
		jr.WithinTarget = jr.CPURatio <= reactionTarget
	}
	r.printf("  pages/s: counts %.1f, reactions %.1f (the reactions page takes %.2f× the time); server CPU per page: counts %s, reactions %s",
		jr.CountsRate, jr.ReactionsRate, jr.TimeRatio, dur(cc), dur(rc))
	if jr.CPURatio >= 0 {
		r.printf(": the reactions page costs %.2f× (target at most %.1f×: %s)", jr.CPURatio, reactionTarget, map[bool]string{true: "met", false: "NOT met"}[jr.WithinTarget])
	}
	r.printf("\n")
	if r.json.ReactionPage == nil {
		r.json.ReactionPage = map[string]jsonReactionPage{}
	}
	r.json.ReactionPage[res.target] = jr
}
