package redisstore

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/tally-dev/tally/engine"
)

// Page implements engine.Store in one round trip: the page's post records
// (one HMGET per bucket) and the viewer's like and favorite flags (one
// SISMEMBER per post and set) go out in one pipeline.
func (s *Store) Page(ctx context.Context, viewer engine.UserID, ids []engine.PostID, want engine.PageWant, out []engine.PostView) error {
	if err := engine.CheckIDs(ids); err != nil {
		return err
	}
	if len(out) != len(ids) {
		return fmt.Errorf("%w: page of %d ids read into %d views", engine.ErrInvalid, len(ids), len(out))
	}
	clear(out)
	asked, want := want, engine.LikesWant(want)
	defer engine.LikesAsReactions(asked, out)
	if len(ids) == 0 {
		return nil
	}
	groups, order := s.groupPosts(ids, s.k.post)
	records := make([]*redis.SliceCmd, len(order))
	var liked, favorited []*redis.BoolCmd
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
		if viewer != 0 && want.Liked {
			liked = flags(p, likersKey)
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
			author, counts, err := decodePost(rec)
			if err != nil {
				return s.fail(err)
			}
			view.Exists, view.Author = true, engine.UserID(author)
			if want.Counts {
				view.Counts = counts
			}
		}
	}
	for i, c := range liked {
		out[i].Liked = c.Val()
	}
	for i, c := range favorited {
		out[i].Favorited = c.Val()
	}
	return nil
}
