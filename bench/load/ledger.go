package main

import (
	"math/bits"
	"math/rand/v2"
	"sync"
)

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
