package embedded

import (
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"time"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/counters"
	"github.com/tally-dev/tally/engine/likeset"
	"github.com/tally-dev/tally/engine/postcounts"
	"github.com/tally-dev/tally/engine/registry"
	"github.com/tally-dev/tally/engine/snapshot"
)

// MaxImportBatch is the most rows one Import call takes (one log record).
const MaxImportBatch = 10000

// CreatePost implements engine.Store.
func (e *Engine) CreatePost(ctx context.Context, viewer engine.UserID, id engine.PostID, idemKey string) (engine.PostID, error) {
	if err := checkMutation(ctx, viewer, idemKey); err != nil {
		return 0, err
	}
	if id != 0 {
		if err := engine.CheckPostID(id, e.now()); err != nil {
			return 0, err
		}
	}
	o := &op{kind: opCreatePost, viewer: uint64(viewer), a: uint64(id)}
	res, err := e.commit(o.withIdem(uint64(viewer), idemKey, engine.IdemCreatePost, engine.IdemArgs{Post: id}))
	return engine.PostID(res), err
}

// Posts implements engine.Store.
func (e *Engine) Posts(ctx context.Context, posts []engine.PostID) ([]engine.PostInfo, error) {
	if err := readCheck(ctx, posts); err != nil {
		return nil, err
	}
	out := make([]engine.PostInfo, len(posts))
	authors := make([]uint64, len(posts))
	found := make([]bool, len(posts))
	e.mu.RLock()
	err := e.st.posts.GetMany(ids(posts), authors, found)
	e.mu.RUnlock()
	if err != nil {
		return nil, e.unreadable("post registry", err)
	}
	for i := range out {
		out[i] = engine.PostInfo{Exists: found[i], Author: engine.UserID(authors[i])}
	}
	return out, nil
}

// Counts implements engine.Store.
func (e *Engine) Counts(ctx context.Context, posts []engine.PostID) ([]engine.Counts, error) {
	if err := readCheck(ctx, posts); err != nil {
		return nil, err
	}
	out := make([]engine.Counts, len(posts))
	raw := ids(posts)
	e.mu.RLock()
	e.st.counts.GetMany(raw, out)
	err := e.st.counts.Err()
	e.mu.RUnlock()
	if err != nil {
		return nil, e.unreadable("post counts", err)
	}
	return out, nil
}

// Liked implements engine.Store.
func (e *Engine) Liked(ctx context.Context, viewer engine.UserID, ids []engine.PostID) ([]bool, error) {
	return e.inSet(ctx, false, viewer, ids)
}

// Favorited implements engine.Store.
func (e *Engine) Favorited(ctx context.Context, viewer engine.UserID, ids []engine.PostID) ([]bool, error) {
	return e.inSet(ctx, true, viewer, ids)
}

func (e *Engine) inSet(ctx context.Context, favs bool, viewer engine.UserID, posts []engine.PostID) ([]bool, error) {
	if err := readCheck(ctx, posts); err != nil {
		return nil, err
	}
	out := make([]bool, len(posts))
	e.mu.RLock()
	set := e.st.likes
	if favs {
		set = e.st.favs
	}
	set.HasMany(uint64(viewer), ids(posts), out)
	e.mu.RUnlock()
	return out, nil
}

func (e *Engine) likeOp(ctx context.Context, kind opKind, viewer engine.UserID, post engine.PostID) error {
	if err := checkMutation(ctx, viewer, ""); err != nil {
		return err
	}
	_, err := e.commit(&op{kind: kind, viewer: uint64(viewer), a: uint64(post)})
	return err
}

// Like implements engine.Store.
func (e *Engine) Like(ctx context.Context, viewer engine.UserID, post engine.PostID) error {
	return e.likeOp(ctx, opLike, viewer, post)
}

// Unlike implements engine.Store.
func (e *Engine) Unlike(ctx context.Context, viewer engine.UserID, post engine.PostID) error {
	return e.likeOp(ctx, opUnlike, viewer, post)
}

// Favorite implements engine.Store.
func (e *Engine) Favorite(ctx context.Context, viewer engine.UserID, post engine.PostID) error {
	return e.likeOp(ctx, opFavorite, viewer, post)
}

// Unfavorite implements engine.Store.
func (e *Engine) Unfavorite(ctx context.Context, viewer engine.UserID, post engine.PostID) error {
	return e.likeOp(ctx, opUnfavorite, viewer, post)
}

// Comment implements engine.Store.
func (e *Engine) Comment(ctx context.Context, viewer engine.UserID, post engine.PostID, mentions []engine.UserID, idemKey string) error {
	_, err := e.postWithMentions(ctx, opComment, viewer, post, mentions, idemKey)
	return err
}

// Repost implements engine.Store.
func (e *Engine) Repost(ctx context.Context, viewer engine.UserID, post engine.PostID, mentions []engine.UserID, idemKey string) (engine.PostID, error) {
	id, err := e.postWithMentions(ctx, opRepost, viewer, post, mentions, idemKey)
	return engine.PostID(id), err
}

func (e *Engine) postWithMentions(ctx context.Context, kind opKind, viewer engine.UserID, post engine.PostID, mentions []engine.UserID, idemKey string) (uint64, error) {
	if err := checkMutation(ctx, viewer, idemKey); err != nil {
		return 0, err
	}
	m, err := engine.NormalizeMentions(viewer, mentions)
	if err != nil {
		return 0, err
	}
	ik := engine.IdemComment
	if kind == opRepost {
		ik = engine.IdemRepost
	}
	o := &op{kind: kind, viewer: uint64(viewer), a: uint64(post), list: ids(m)}
	return e.commit(o.withIdem(uint64(viewer), idemKey, ik, engine.IdemArgs{Post: post, Mentions: m}))
}

// RecordViews implements engine.Store.
func (e *Engine) RecordViews(ctx context.Context, posts []engine.PostID) error {
	if err := readCheck(ctx, posts); err != nil {
		return err
	}
	if len(posts) == 0 {
		return nil
	}
	_, err := e.commit(&op{kind: opViews, list: ids(posts)})
	return err
}

// Import implements engine.Importer: at most MaxImportBatch rows per call,
// one log record.
func (e *Engine) Import(ctx context.Context, rows []engine.ImportRow) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if len(rows) > MaxImportBatch {
		return fmt.Errorf("%w: at most %d rows per import batch", engine.ErrInvalid, MaxImportBatch)
	}
	list := make([]uint64, 0, len(rows)*importStride)
	for _, r := range rows {
		c := r.Counts
		if r.Post == 0 {
			return fmt.Errorf("%w: post id 0", engine.ErrInvalid)
		}
		if min(c.Likes, c.Comments, c.Reposts, c.Views, c.Favorites) < 0 {
			return fmt.Errorf("%w: post %d has a negative count", engine.ErrInvalid, r.Post)
		}
		list = append(list, uint64(r.Post), uint64(r.Author), uint64(c.Likes), uint64(c.Comments),
			uint64(c.Reposts), uint64(c.Views), uint64(c.Favorites))
	}
	if len(list) == 0 {
		return nil
	}
	_, err := e.commit(&op{kind: opImport, list: list})
	return err
}

func errPostNotFound(id uint64) error {
	return fmt.Errorf("%w: post %d", engine.ErrNotFound, id)
}

// prepareCreatePost picks the new post's id, or refuses a client's id
// that is taken.
func (e *Engine) prepareCreatePost(o *op, exists func(uint64) bool) error {
	if o.a == 0 {
		o.a = e.newID(exists)
	} else if exists(o.a) {
		return fmt.Errorf("%w: post %d already exists", engine.ErrInvalid, o.a)
	}
	return nil
}

// prepareLike handles like, unlike, favorite and unfavorite: done when
// the set already says what the op would make it say.
func (e *Engine) prepareLike(o *op, exists func(uint64) bool) (done bool, err error) {
	if !exists(o.a) {
		return false, errPostNotFound(o.a)
	}
	set := e.st.likes
	if o.kind == opFavorite || o.kind == opUnfavorite {
		set = e.st.favs
	}
	present := set.Has(o.viewer, o.a)
	adding := o.kind == opLike || o.kind == opFavorite
	return present == adding, nil
}

func prepareComment(o *op, exists func(uint64) bool) error {
	if !exists(o.a) {
		return errPostNotFound(o.a)
	}
	return nil
}

func (e *Engine) prepareRepost(o *op, exists func(uint64) bool) error {
	if !exists(o.a) {
		return errPostNotFound(o.a)
	}
	o.b = e.newID(exists)
	return nil
}

// prepareViews drops the posts that do not exist; done if none is left.
func prepareViews(o *op, exists func(uint64) bool) (done bool) {
	o.list = slices.DeleteFunc(o.list, func(p uint64) bool { return !exists(p) })
	return len(o.list) == 0
}

// author returns post's author (0: none or unknown). A cold registry
// block that cannot be read is noted in st.err and reads as no author.
func (st *state) author(post uint64) uint64 {
	a, _, err := st.posts.Get(post)
	st.noteErr(err)
	return a
}

func (st *state) addPost(post, author uint64, out *[]engine.Event) {
	_, err := st.posts.Put(post, author)
	st.noteErr(err)
	st.profile(author).posts++
	if out != nil {
		*out = append(*out, engine.Event{Kind: engine.AuthorPosted, Author: engine.UserID(author)})
	}
}

// setLike adds (viewer, post) to set; the like's count and the author's
// badge move only if it was not there, so one record carries the whole
// de-duplicated effect.
func (st *state) setLike(set *likeset.Set, f counters.Field, o *op, out *[]engine.Event) {
	if !set.Add(o.viewer, o.a) {
		return
	}
	st.counts.Add(o.a, f, 1)
	if f != counters.Likes {
		return
	}
	if a := st.author(o.a); a != 0 && a != o.viewer {
		st.bump(a, nLikes)
		emitUnread(out, []engine.UserID{engine.UserID(a)})
	}
}

func (st *state) clearLike(set *likeset.Set, f counters.Field, o *op) {
	if set.Remove(o.viewer, o.a) {
		st.counts.Add(o.a, f, -1)
	}
}

func (st *state) applyComment(o *op, out *[]engine.Event) {
	st.counts.Add(o.a, counters.Comments, 1)
	var bumped []engine.UserID
	if a := st.author(o.a); a != 0 && a != o.viewer {
		st.bump(a, nComments)
		bumped = append(bumped, engine.UserID(a))
	}
	emitUnread(out, st.mention(o.list, bumped, out != nil))
}

func (st *state) applyRepost(o *op, out *[]engine.Event) {
	st.counts.Add(o.a, counters.Reposts, 1)
	st.addPost(o.b, o.viewer, out)
	emitUnread(out, st.mention(o.list, nil, out != nil))
}

func (st *state) applyViews(o *op) {
	for _, p := range o.list {
		st.counts.Add(p, counters.Views, 1)
	}
}

// mention bumps the unread mentions of users (already normalised) and,
// when collecting events, returns bumped with them appended.
func (st *state) mention(users []uint64, bumped []engine.UserID, collect bool) []engine.UserID {
	for _, u := range users {
		st.bump(u, nMentions)
		if collect {
			bumped = append(bumped, engine.UserID(u))
		}
	}
	return bumped
}

// importRows registers the posts of an import record and replaces their
// counts (engine.Importer): the counts in one postcounts.Import and the
// authors in one registry.Import, so that old windows of both are built
// straight into sealed form. at (the record's time) is the clock that
// tells old windows from open ones: it changes the layout, never a value.
func (st *state) importRows(list []uint64, at int64) {
	var reg []registry.Row
	pending := map[uint64]uint64{} // this record's registrations, by post
	st.counts.Import(func(yield func(uint64, engine.Counts) bool) {
		for row := range slices.Chunk(list, importStride) {
			post, author := row[0], row[1]
			c := engine.Counts{Likes: int64(row[2]), Comments: int64(row[3]), Reposts: int64(row[4]),
				Views: int64(row[5]), Favorites: int64(row[6])}
			old, exists := pending[post]
			if !exists {
				var err error
				if old, exists, err = st.posts.Get(post); err != nil {
					st.noteErr(err)
					continue
				}
			}
			switch {
			case !exists && author == 0 && c.IsZero():
				continue
			case !exists || (old == 0 && author != 0):
				pending[post] = author
				reg = append(reg, registry.Row{ID: post, Author: author})
				if author != 0 {
					st.profile(author).posts++
				}
			}
			if !yield(post, c) {
				return
			}
		}
	})
	st.noteErr(st.posts.Import(reg, time.Unix(0, at)))
}

// countsTagWritten, writeCounts, registryTagWritten and writeRegistry are
// how writeImage writes the post counts and the registry; a test swaps in
// the previous per-post sections to check that snapshots written before
// PCNT and PREG still load.
var (
	countsTagWritten   = tagPCounts
	writeCounts        = writePostCounts
	registryTagWritten = tagRegistry
	writeRegistry      = writeRegistryImage
)

// writeRegistryImage writes the PREG section: the registry's own image.
func writeRegistryImage(w *snapshot.Writer, e *enc, st *state) {
	cw := &chunkWriter{w: w, p: e.p}
	if _, err := st.posts.WriteTo(cw); err != nil && w.Err() == nil {
		cw.fail(err)
	}
	cw.close()
}

// writePostCounts writes the PCNT section: postcounts' own compact image
// (sealed windows as they are in memory, open tables as varints), a few
// bytes a post where one item per post took about 12, and a load that
// installs sealed windows instead of re-sealing them.
func writePostCounts(w *snapshot.Writer, e *enc, st *state) {
	cw := &chunkWriter{w: w, p: e.p}
	if _, err := st.counts.Snapshot().SelfContained().WriteTo(cw); err != nil && w.Err() == nil {
		cw.fail(err)
	}
	cw.close()
}

func writeSet(e *enc, t *likeset.Set) {
	t.Range(func(user, post uint64) bool {
		e.start()
		e.u(user)
		e.fixed(post)
		e.end()
		return true
	})
}

// readRegistry loads the PREG section: the registry's image.
func readRegistry(sr *snapshot.SectionReader, pc *pacer, st *state, co postcounts.Options) error {
	cr := &chunkReader{sr: sr, p: pc}
	return cr.load(func(r io.Reader) error { return st.posts.Load(r, loadTime(co)) }, registry.ErrCorrupt)
}

// readPostCounts loads the PCNT section: postcounts' image, streamed from
// the section's chunks.
func readPostCounts(sr *snapshot.SectionReader, pc *pacer, st *state) error {
	cr := &chunkReader{sr: sr, p: pc}
	return cr.load(func(r io.Reader) error { return st.counts.Load(r, "") }, postcounts.ErrCorrupt)
}

// readSet loads a LIKE or FAVS section into t in batches (likeset.Load
// builds old windows sealed rather than through open tables).
func readSet(sr *snapshot.SectionReader, pc *pacer, t *likeset.Set, co postcounts.Options) error {
	now := loadTime(co)
	batch := make([][2]uint64, 0, 1<<16)
	var lerr error
	flush := func() {
		if lerr == nil && len(batch) > 0 {
			lerr = t.Load(func(yield func(uint64, uint64) bool) {
				for _, p := range batch {
					if !yield(p[0], p[1]) {
						return
					}
				}
			}, now)
		}
		batch = batch[:0]
	}
	err := eachItem(sr, pc, func(d *dec) {
		u := d.u("user")
		p := d.fixed("post")
		if d.err == "" {
			batch = append(batch, [2]uint64{u, p})
			if len(batch) == cap(batch) {
				flush()
			}
		}
	})
	if err != nil {
		return err
	}
	flush()
	if lerr != nil {
		return sr.Corrupt(lerr.Error())
	}
	return checkLen(sr, t.Len())
}

func readPosts(sr *snapshot.SectionReader, pc *pacer, st *state, co postcounts.Options) error {
	now := loadTime(co)
	// Posts come in id order (Registry.Range), so the loader builds old
	// windows straight into sealed blocks.
	ld := st.posts.NewLoader(now)
	err := eachItem(sr, pc, func(d *dec) {
		p := d.fixed("post")
		a := d.u("author")
		if d.err == "" {
			ld.Add(p, a)
		}
	})
	ld.Close()
	if err != nil {
		return err
	}
	return checkLen(sr, st.posts.Len())
}

// countRow is one post's counts on their way from a snapshot into the
// post-count store, which takes them in batches (postcounts.Import) so old
// windows are built sealed rather than grown in open tables.
type countRow struct {
	id uint64
	c  engine.Counts
}

func readCounts(sr *snapshot.SectionReader, pc *pacer, st *state) error {
	batch := make([]countRow, 0, 1<<16)
	var ierr error
	flush := func() {
		if ierr == nil && len(batch) > 0 {
			ierr = st.counts.Import(func(yield func(uint64, engine.Counts) bool) {
				for _, r := range batch {
					if !yield(r.id, r.c) {
						return
					}
				}
			})
		}
		batch = batch[:0]
	}
	err := eachItem(sr, pc, func(d *dec) {
		p := d.fixed("post")
		mask := d.byte1("field mask")
		if d.err != "" {
			return
		}
		if mask == 0 || mask >= 1<<counters.NumFields {
			d.fail(fmt.Sprintf("bad field mask %#x", mask))
			return
		}
		var f [counters.NumFields]int64
		for i := range f {
			if mask&(1<<i) == 0 {
				continue
			}
			x := d.u("count")
			if d.err == "" && (x == 0 || x > math.MaxInt64) {
				d.fail("count out of range")
			}
			f[i] = int64(x)
		}
		if d.err == "" {
			batch = append(batch, countRow{p, engine.Counts{Likes: f[0], Comments: f[1], Reposts: f[2], Views: f[3], Favorites: f[4]}})
			if len(batch) == cap(batch) {
				flush()
			}
		}
	})
	if err != nil {
		return err
	}
	flush()
	if ierr != nil {
		return sr.Corrupt(ierr.Error())
	}
	return checkLen(sr, st.counts.Len())
}
