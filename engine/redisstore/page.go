package redisstore

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/counters"
)

// Page implements engine.Store in one round trip: the page's post records
// (one HMGET per bucket, every kind's count in the record) and the
// viewer's like and favorite flags (one SISMEMBER per post and set) and
// reaction (the like flag, and one HGET of the reactors hash per post) go
// out in one pipeline.
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
	var reacted []*redis.StringCmd
	member := strconv.FormatUint(uint64(viewer), 10)
	flags := func(p redis.Pipeliner, set func(b, low string) string) []*redis.BoolCmd {
		cmds := make([]*redis.BoolCmd, len(ids))
		for i, id := range ids {
			b, low := s.k.post(uint64(id))
			cmds[i] = p.SIsMember(ctx, set(b, low), member)
		}
		return cmds
	}
	if err := s.read(ctx, func(p redis.Pipeliner) {
		for i, b := range order {
			records[i] = p.HMGet(ctx, b, groups[b].lows...)
		}
		if viewer != 0 && (want.Liked || want.ViewerReaction) {
			liked = flags(p, likersKey)
		}
		if viewer != 0 && want.ViewerReaction {
			reacted = make([]*redis.StringCmd, len(ids))
			for i, id := range ids {
				b, low := s.k.post(uint64(id))
				reacted[i] = p.HGet(ctx, reactorsKey(b, low), member)
			}
		}
		if viewer != 0 && want.Favorited {
			favorited = flags(p, favsKey)
		}
	}); err != nil {
		return err
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
		}
	}
	for i, c := range liked {
		if c.Val() {
			out[i].Liked = want.Liked
			if want.ViewerReaction {
				out[i].ViewerReaction = "like"
			}
		}
	}
	for i, c := range reacted {
		if id, err := strconv.ParseUint(c.Val(), 10, 8); err == nil && out[i].ViewerReaction == "" {
			// A kind this replica's table lacks (another replica's new
			// kind) reads as none.
			out[i].ViewerReaction = s.kinds.Name(counters.Kind(id))
		}
	}
	for i, c := range favorited {
		out[i].Favorited = c.Val()
	}
	return nil
}
