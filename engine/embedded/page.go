package embedded

import (
	"context"
	"fmt"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/counters"
	"github.com/tally-dev/tally/engine/tier"
)

// Page implements engine.Store: the page's posts (existence, author and
// counts: one record a post in the post table) and flags are read under
// one read lock, after one validation of the ids, into the caller's out.
func (e *Engine) Page(ctx context.Context, viewer engine.UserID, posts []engine.PostID, want engine.PageWant, out []engine.PostView) error {
	if err := readCheck(ctx, posts); err != nil {
		return err
	}
	if len(out) != len(posts) {
		return fmt.Errorf("%w: page of %d ids read into %d views", engine.ErrInvalid, len(posts), len(out))
	}
	clear(out)
	var buf pageBuf
	raw := buf.ids(posts)
	recs, found := buf.posts(len(posts))
	if err := e.rlockAs(ctx, uint64(viewer)); err != nil {
		return err
	}
	defer e.mu.RUnlock()
	if err := e.st.posts.GetMany(raw, recs, found); err != nil {
		return e.unreadable("post table", err)
	}
	if len(e.st.erasing) > 0 {
		if err := e.st.maskCounts(raw, recs, found); err != nil {
			return e.unreadable("like set", err)
		}
	}
	for i := range out {
		out[i].PostInfo = engine.PostInfo{Exists: found[i], Author: engine.UserID(recs[i].Author)}
		if want.Counts {
			out[i].Counts = recs[i].Counts
		}
		if want.Reactions {
			for j, id := range e.order[:len(e.display)] {
				out[i].Reactions.Count[j] = recs[i].Count(id)
			}
		}
	}
	if viewer != 0 && (want.Liked || want.ViewerReaction) {
		kinds := buf.kinds(len(posts))
		if err := e.st.likes.KindsOf(uint64(viewer), raw, kinds); err != nil {
			return e.unreadable("like set", err)
		}
		for i, k := range kinds {
			out[i].Liked = want.Liked && k == counters.Like
			if want.ViewerReaction && k != counters.NoKind {
				out[i].ViewerReaction = e.kinds.Name(k)
			}
		}
	}
	if viewer != 0 && want.Favorited {
		flags := buf.flags(len(posts))
		if err := e.st.favs.HasMany(uint64(viewer), raw, flags); err != nil {
			return e.unreadable("favorite set", err)
		}
		for i := range out {
			out[i].Favorited = flags[i]
		}
	}
	return nil
}

// pageBuf holds a page's column buffers on the stack for pages up to
// engine.MaxIDsPerCall, so a page read allocates nothing.
type pageBuf struct {
	raw     [engine.MaxIDsPerCall]uint64
	recs    [engine.MaxIDsPerCall]tier.Post
	found   [engine.MaxIDsPerCall]bool
	flagBuf [engine.MaxIDsPerCall]bool
	kindBuf [engine.MaxIDsPerCall]counters.Kind
}

func (b *pageBuf) kinds(n int) []counters.Kind {
	if n > len(b.kindBuf) {
		return make([]counters.Kind, n)
	}
	return b.kindBuf[:n]
}

func (b *pageBuf) ids(posts []engine.PostID) []uint64 {
	if len(posts) > len(b.raw) {
		return ids(posts)
	}
	for i, p := range posts {
		b.raw[i] = uint64(p)
	}
	return b.raw[:len(posts)]
}

func (b *pageBuf) posts(n int) ([]tier.Post, []bool) {
	if n > len(b.recs) {
		return make([]tier.Post, n), make([]bool, n)
	}
	return b.recs[:n], b.found[:n]
}

func (b *pageBuf) flags(n int) []bool {
	if n > len(b.flagBuf) {
		return make([]bool, n)
	}
	return b.flagBuf[:n]
}
