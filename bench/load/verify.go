package main

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
)

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
