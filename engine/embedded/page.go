package embedded

import (
	"context"
	"fmt"

	"github.com/tally-dev/tally/engine"
)

// Page implements engine.Store: the page's registry entries, counts and
// flags are read in one pass under one read lock, after one validation of
// the ids, into the caller's out.
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
	authors, found := buf.registry(len(posts))
	e.mu.RLock()
	defer e.mu.RUnlock()
	if err := e.st.posts.GetMany(raw, authors, found); err != nil {
		return e.unreadable("post registry", err)
	}
	for i := range out {
		out[i].PostInfo = engine.PostInfo{Exists: found[i], Author: engine.UserID(authors[i])}
	}
	if want.Counts {
		counts := buf.counts(len(posts))
		e.st.counts.GetMany(raw, counts)
		if err := e.st.counts.Err(); err != nil {
			return e.unreadable("post counts", err)
		}
		for i := range out {
			out[i].Counts = counts[i]
		}
	}
	if viewer != 0 && want.Liked {
		flags := buf.flags(len(posts))
		e.st.likes.HasMany(uint64(viewer), raw, flags)
		for i := range out {
			out[i].Liked = flags[i]
		}
	}
	if viewer != 0 && want.Favorited {
		flags := buf.flags(len(posts))
		e.st.favs.HasMany(uint64(viewer), raw, flags)
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
	authors [engine.MaxIDsPerCall]uint64
	found   [engine.MaxIDsPerCall]bool
	cnts    [engine.MaxIDsPerCall]engine.Counts
	flagBuf [engine.MaxIDsPerCall]bool
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

func (b *pageBuf) registry(n int) ([]uint64, []bool) {
	if n > len(b.authors) {
		return make([]uint64, n), make([]bool, n)
	}
	return b.authors[:n], b.found[:n]
}

func (b *pageBuf) counts(n int) []engine.Counts {
	if n > len(b.cnts) {
		return make([]engine.Counts, n)
	}
	return b.cnts[:n]
}

func (b *pageBuf) flags(n int) []bool {
	if n > len(b.flagBuf) {
		return make([]bool, n)
	}
	return b.flagBuf[:n]
}
