package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/counters"
)

// Page implements engine.Store in one round trip, or two when the viewer's
// reaction is asked for and may be of a kind other than like. The first
// pipeline reads the page's post records (one HMGET per bucket, every
// kind's count in the record) and the viewer's like and favorite flags
// (one SISMEMBER per post and set): what a page of counts reads. The
// viewer's reaction is the like flag, or else a kind in the post's
// reactors hash, which only a post whose record has reactedBit may have;
// the second pipeline reads the viewer's field of those hashes (one HGET
// per such post the viewer has not liked), so a page of posts with likes
// only costs what a page of counts costs. The record's counts of kinds
// cannot stand in for the bit: an import replaces a post's counts and
// leaves who reacted as it was (TestClockedSingle's seed
// 1795765568445543411, TestImportKeepsReacted). A reaction switched
// between the two reads may show as none (as it could between the flag
// and the hash read of one pipeline, which is not a transaction either).
func (s *Store) Page(ctx context.Context, viewer engine.UserID, ids []engine.PostID, want engine.PageWant, out []engine.PostView) error {
	if err := engine.CheckIDs(ids); err != nil {
		return err
	}
	if len(out) != len(ids) {
		return fmt.Errorf("%w: page of %d ids read into %d views", engine.ErrInvalid, len(ids), len(out))
	}
	clear(out)
	if len(ids) == 0 {
		return nil
	}
	groups, order := s.groupPosts(ids, s.k.post)
	records := make([]*redis.SliceCmd, len(order))
	var liked, favorited []*redis.BoolCmd
	member := strconv.FormatUint(uint64(viewer), 10)
	var likers, favs []string
	if viewer != 0 {
		likers, favs = pageKeys(groups, order, len(ids), want.Liked || want.ViewerReaction, want.Favorited)
	}
	if err := s.read(ctx, func(p redis.Pipeliner) {
		for i, b := range order {
			records[i] = p.HMGet(ctx, b, groups[b].lows...)
		}
		if likers != nil {
			liked = make([]*redis.BoolCmd, len(ids))
			for i, key := range likers {
				liked[i] = p.SIsMember(ctx, key, member)
			}
		}
		if favs != nil {
			favorited = make([]*redis.BoolCmd, len(ids))
			for i, key := range favs {
				favorited[i] = p.SIsMember(ctx, key, member)
			}
		}
	}); err != nil {
		return err
	}
	// mayReact marks the posts whose reactors hash may hold the viewer:
	// those whose record has reactedBit.
	var mayReact []bool
	if viewer != 0 && want.ViewerReaction {
		mayReact = make([]bool, len(ids))
	}
	for i, b := range order {
		for j, v := range records[i].Val() {
			rec, ok := v.(string)
			if exists, _ := recordState(rec); !ok || !exists {
				continue
			}
			view := &out[groups[b].pos[j]]
			author, counts, reactions, err := decodeReactions(rec)
			if err != nil {
				return s.fail(err)
			}
			view.Exists, view.Author = true, engine.UserID(author)
			if want.Counts {
				view.Counts = counts
			}
			if want.Reactions {
				s.reactionCounts(counts.Likes, &reactions, &view.Reactions)
			}
			if mayReact != nil && reacted(rec) {
				mayReact[groups[b].pos[j]] = true
			}
		}
	}
	var others []int
	for i, c := range liked {
		switch {
		case c.Val():
			out[i].Liked = want.Liked
			if want.ViewerReaction {
				out[i].ViewerReaction = "like"
			}
		case mayReact != nil && mayReact[i]:
			others = append(others, i)
		}
	}
	if len(others) > 0 {
		if err := s.viewerKinds(ctx, member, ids, others, out); err != nil {
			return err
		}
	}
	for i, c := range favorited {
		out[i].Favorited = c.Val()
	}
	return nil
}

// pageKeys names the page's per-post likers and favoriters sets (those
// asked for, nil the others) in id order, from the buckets groupPosts
// placed the ids in: the names are cut from one string built once, as the
// page's hot path would otherwise allocate a key per read.
func pageKeys(groups map[string]*bucketed, order []string, n int, likers, favs bool) (likerKeys, favKeys []string) {
	var suffixes []byte
	if likers {
		suffixes = append(suffixes, 'l')
	}
	if favs {
		suffixes = append(suffixes, 'f')
	}
	if len(suffixes) == 0 {
		return nil, nil
	}
	size := 0
	for _, b := range order {
		for _, low := range groups[b].lows {
			size += len(suffixes) * (len(b) + 1 + len(low))
		}
	}
	var all strings.Builder
	all.Grow(size)
	// spans[k*n+i] is where the k-th asked set's key of id i lies in all.
	spans := make([][2]int, len(suffixes)*n)
	for _, b := range order {
		g := groups[b]
		for j, low := range g.lows {
			for k, suffix := range suffixes {
				start := all.Len()
				all.WriteString(b)
				all.WriteByte(suffix)
				all.WriteString(low)
				spans[k*n+g.pos[j]] = [2]int{start, all.Len()}
			}
		}
	}
	names := all.String()
	keys := make([]string, len(spans))
	for i, sp := range spans {
		keys[i] = names[sp[0]:sp[1]]
	}
	if likers {
		likerKeys, keys = keys[:n:n], keys[n:]
	}
	if favs {
		favKeys = keys[:n:n]
	}
	return likerKeys, favKeys
}

// viewerKinds reads the viewer's kind on the posts at positions at of ids
// from their reactors hashes, in one pipeline.
func (s *Store) viewerKinds(ctx context.Context, member string, ids []engine.PostID, at []int, out []engine.PostView) error {
	reacted := make([]*redis.StringCmd, len(at))
	if err := s.read(ctx, func(p redis.Pipeliner) {
		for j, i := range at {
			b, low := s.k.post(uint64(ids[i]))
			reacted[j] = p.HGet(ctx, reactorsKey(b, low), member)
		}
	}); err != nil {
		return err
	}
	for j, c := range reacted {
		if id, err := strconv.ParseUint(c.Val(), 10, 8); err == nil {
			// A kind this replica's table lacks (another replica's new
			// kind) reads as none.
			out[at[j]].ViewerReaction = s.kinds.Name(counters.Kind(id))
		}
	}
	return nil
}
