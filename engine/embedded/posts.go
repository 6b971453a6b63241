package embedded

import (
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/counters"
	"github.com/tally-dev/tally/engine/ops"
	"github.com/tally-dev/tally/engine/snapshot"
	"github.com/tally-dev/tally/engine/tier"
	"github.com/tally-dev/tally/engine/usercounts"
)

// MaxImportBatch is the most rows one Import call takes (one log record).
const MaxImportBatch = 10000

// An import record holds at most the rows a decoder takes.
var _ [maxImportRows - MaxImportBatch]struct{}

// createPostRec logs a new post; a zero Post in the call is filled in
// with a fresh id before logging.
type createPostRec struct {
	recHeader
	ops.CreatePost
}

// CreatePost implements engine.Store.
func (e *Engine) CreatePost(ctx context.Context, viewer engine.UserID, id engine.PostID, idemKey string) (engine.PostID, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	r := &createPostRec{CreatePost: ops.CreatePost{Viewer: viewer, Post: id, IdemKey: idemKey}}
	if err := r.Check(e.now()); err != nil {
		return 0, err
	}
	r.withIdem(viewer, idemKey, engine.IdemCreatePost, engine.IdemArgs{Post: id})
	res, err := e.commitCtx(ctx, r)
	return engine.PostID(res), err
}

// Posts implements engine.Store.
func (e *Engine) Posts(ctx context.Context, posts []engine.PostID) ([]engine.PostInfo, error) {
	recs, found, err := e.readPosts(ctx, posts)
	if err != nil {
		return nil, err
	}
	out := make([]engine.PostInfo, len(posts))
	for i := range out {
		out[i] = engine.PostInfo{Exists: found[i], Author: engine.UserID(recs[i].Author)}
	}
	return out, nil
}

// Counts implements engine.Store.
func (e *Engine) Counts(ctx context.Context, posts []engine.PostID) ([]engine.Counts, error) {
	recs, _, err := e.readPosts(ctx, posts)
	if err != nil {
		return nil, err
	}
	out := make([]engine.Counts, len(posts))
	for i := range out {
		out[i] = recs[i].Counts
	}
	return out, nil
}

// readPosts reads the records of posts from the post table.
func (e *Engine) readPosts(ctx context.Context, posts []engine.PostID) ([]tier.Post, []bool, error) {
	if err := readCheck(ctx, posts); err != nil {
		return nil, nil, err
	}
	recs := make([]tier.Post, len(posts))
	found := make([]bool, len(posts))
	raw := ids(posts)
	e.mu.RLock()
	err := e.st.posts.GetMany(raw, recs, found)
	if err == nil {
		err = e.st.maskCounts(raw, recs, found)
	}
	e.mu.RUnlock()
	if err != nil {
		return nil, nil, e.unreadable("post table", err)
	}
	return recs, found, nil
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
	if err := e.rlockAs(ctx, uint64(viewer)); err != nil {
		return nil, err
	}
	if favs {
		err := e.st.favs.HasMany(uint64(viewer), ids(posts), out)
		e.mu.RUnlock()
		if err != nil {
			return nil, e.unreadable("favorite set", err)
		}
		return out, nil
	}
	// Liked: a reaction of like, not of another kind.
	kinds := make([]counters.Kind, len(posts))
	err := e.st.likes.KindsOf(uint64(viewer), ids(posts), kinds)
	e.mu.RUnlock()
	if err != nil {
		return nil, e.unreadable("like set", err)
	}
	for i, k := range kinds {
		out[i] = k == counters.Like
	}
	return out, nil
}

// favoriteRec logs a favorite (Undo: an unfavorite); reactions.go has
// the reaction records, likes among them.
type favoriteRec struct {
	recHeader
	ops.Favorite
}

// Like implements engine.Store: the reaction like.
func (e *Engine) Like(ctx context.Context, viewer engine.UserID, post engine.PostID) error {
	_, err := e.commitChecked(ctx, &reactRec{ReactToPost: ops.ReactToPost{Viewer: viewer, Post: post, Kind: counters.Like}})
	return err
}

// Unlike implements engine.Store: it removes a like, not another kind.
func (e *Engine) Unlike(ctx context.Context, viewer engine.UserID, post engine.PostID) error {
	_, err := e.commitChecked(ctx, &unreactRec{UnreactToPost: ops.UnreactToPost{Viewer: viewer, Post: post, Only: counters.Like}})
	return err
}

// Favorite implements engine.Store.
func (e *Engine) Favorite(ctx context.Context, viewer engine.UserID, post engine.PostID) error {
	return e.favorite(ctx, ops.Favorite{Viewer: viewer, Post: post})
}

// Unfavorite implements engine.Store.
func (e *Engine) Unfavorite(ctx context.Context, viewer engine.UserID, post engine.PostID) error {
	return e.favorite(ctx, ops.Favorite{Viewer: viewer, Post: post, Undo: true})
}

func (e *Engine) favorite(ctx context.Context, op ops.Favorite) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := op.Check(); err != nil {
		return err
	}
	_, err := e.commitCtx(ctx, &favoriteRec{Favorite: op})
	return err
}

// commentRec logs a comment; repostRec a repost, with the id of the new
// post it makes.
type commentRec struct {
	recHeader
	ops.Comment
}

type repostRec struct {
	recHeader
	ops.Repost
}

// Comment implements engine.Store.
func (e *Engine) Comment(ctx context.Context, viewer engine.UserID, post engine.PostID, comment engine.CommentID, mentions []engine.UserID, idemKey string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	r := &commentRec{Comment: ops.Comment{Viewer: viewer, Post: post, Comment: comment, Mentions: mentions, IdemKey: idemKey}}
	if err := r.Check(e.now()); err != nil {
		return err
	}
	r.withIdem(viewer, idemKey, engine.IdemComment, engine.IdemArgs{Post: post, Comment: comment, Mentions: r.Mentions})
	_, err := e.commitCtx(ctx, r)
	return err
}

// Repost implements engine.Store.
func (e *Engine) Repost(ctx context.Context, viewer engine.UserID, post engine.PostID, mentions []engine.UserID, idemKey string) (engine.PostID, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	r := &repostRec{Repost: ops.Repost{Viewer: viewer, Post: post, Mentions: mentions, IdemKey: idemKey}}
	if err := r.Check(); err != nil {
		return 0, err
	}
	r.withIdem(viewer, idemKey, engine.IdemRepost, engine.IdemArgs{Post: post, Mentions: r.Mentions})
	id, err := e.commitCtx(ctx, r)
	return engine.PostID(id), err
}

// viewsRec logs views of posts known when it was logged.
type viewsRec struct {
	recHeader
	ops.RecordViews
}

// RecordViews implements engine.Store.
func (e *Engine) RecordViews(ctx context.Context, posts []engine.PostID) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	r := &viewsRec{RecordViews: ops.RecordViews{Posts: posts}}
	if err := r.Check(); err != nil || len(posts) == 0 {
		return err
	}
	_, err := e.commit(r)
	return err
}

// importRec logs one Import batch.
type importRec struct {
	recHeader
	rows []engine.ImportRow
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
	if err := ops.CheckImport(rows, &e.kinds); err != nil {
		return err
	}
	if len(rows) == 0 {
		return nil
	}
	if _, err := e.commit(&importRec{rows: rows}); err != nil {
		return err
	}
	if e.maintains {
		// An import brings new authors far faster than the maintenance
		// interval folds them, and an overlay entry costs ten times a
		// packed one: fold once the overlay holds a quarter of what is
		// packed. (Maintenance's sixteenth would fold an import's
		// authors several times over; a quarter still bounds its memory.)
		e.mu.RLock()
		behind := foldBehind(e.st.posted)
		e.mu.RUnlock()
		if behind {
			e.runTier("authors' post counts", func() tier.Maintainer { return e.st.posted }, false)
		}
	}
	return nil
}

// ImportKinds implements engine.Importer: the kinds table Open
// reconciled.
func (e *Engine) ImportKinds() counters.Kinds { return e.kinds }

// importFoldMin is the fewest waiting users an import's fold takes.
const importFoldMin = 1 << 16

// foldBehind reports whether a per-user count table has fallen behind an
// import: a quarter of its packed users (and at least importFoldMin) wait
// in the overlay.
func foldBehind(t *usercounts.Table) bool {
	overlay, packed := t.Unfolded()
	return overlay >= max(importFoldMin, packed/4)
}

// postFacts reads what the post table knows of post. A cold block that
// cannot be read is kept for the caller (takeReadErr) and reads as absent.
func (st *state) postFacts(post engine.PostID) ops.PostFacts {
	p, ok, err := st.posts.Get(uint64(post))
	if err != nil && st.readErr == nil {
		st.readErr = err
	}
	f := ops.PostFacts{Exists: ok, Author: engine.UserID(st.maskAuthor(p.Author))}
	if !ok && st.deleted.Len() > 0 {
		f.Deleted = st.pairFact(st.deleted, 0, uint64(post))
	}
	return f
}

func (st *state) postExists(post engine.PostID) bool { return st.postFacts(post).Exists }

// postTaken reports whether id is a known post or a deleted one's, for
// the id generator and CreatePost.
func (st *state) postTaken(id uint64) bool {
	f := st.postFacts(engine.PostID(id))
	return f.Exists || f.Deleted
}

// addCount applies one count effect to the post table, keeping counted.
func (st *state) addCount(c ops.CountDelta) {
	var d engine.Counts
	if f := d.Field(c.Field); f != nil {
		*f = c.Delta
	}
	was, is, err := st.posts.AddCounts(uint64(c.Post), d)
	st.noteErr(err)
	st.counted += countedDelta(was, is)
}

// addReaction adds a ReactionDelta to its post's count of its kind.
func (st *state) addReaction(c ops.ReactionDelta) {
	was, is, err := st.posts.AddReaction(uint64(c.Post), c.Kind, c.Delta)
	st.noteErr(err)
	st.counted += countedDelta(was, is)
}

// countedDelta is how a change from was to is changes state.counted.
func countedDelta(was, is tier.Post) int64 {
	switch wz, iz := !was.HasCounts(), !is.HasCounts(); {
	case wz && !iz:
		return 1
	case !wz && iz:
		return -1
	}
	return 0
}

func (st *state) decideCreatePost(r *createPostRec) error {
	return r.Decide(st.postTaken(uint64(r.Post)), &st.eff)
}

func (st *state) decideFavorite(r *favoriteRec) error {
	set := st.flagFact(st.favs, r.Viewer, r.Post)
	return r.Decide(ops.FlagFacts{PostFacts: st.postFacts(r.Post), Set: set}, &st.eff)
}

func (st *state) decideComment(r *commentRec) error {
	f := ops.CommentFacts{PostFacts: st.postFacts(r.Post)}
	if r.Comment.Comment != 0 {
		c, p := uint64(r.Comment.Comment), uint64(r.Post)
		f.Known = st.pairFact(st.comments, c, p) || st.pairFact(st.uncounted, c, p)
	}
	return r.Decide(f, &st.eff)
}

func (st *state) decideRepost(r *repostRec) error {
	return r.Decide(st.postFacts(r.Post), &st.eff)
}

func (st *state) decideViews(r *viewsRec) {
	r.Decide(st.postExists, &st.eff)
}

// applyFlag sets or clears the (viewer, post) flag of a like or favorite
// that its Decide found changes something: the flag is the record's own
// change, its count and badge are its effects.
func (st *state) applyFlag(set *tier.Set, viewer engine.UserID, post engine.PostID, undo bool) {
	var err error
	if undo {
		_, err = set.Remove(uint64(viewer), uint64(post))
	} else {
		_, err = set.Add(uint64(viewer), uint64(post))
	}
	st.noteErr(err)
}

// flagFact reads whether viewer's like (or favorite) of post is set. A
// cold block that cannot be read is kept for the caller (takeReadErr)
// and reads as unset.
func (st *state) flagFact(set *tier.Set, viewer engine.UserID, post engine.PostID) bool {
	has, err := set.Has(uint64(viewer), uint64(post))
	if err != nil && st.readErr == nil {
		st.readErr = err
	}
	return has
}

// importedPost is an import record's row on its way into the post table.
type importedPost struct {
	id  uint64
	was tier.Post // the table's record before the import record
	is  tier.Post
}

// importRows registers the posts of an import record and replaces their
// counts (engine.Importer, the rule of each row ops.DecideImport; a later
// row of the same post sees the earlier one), then writes them into the
// post table in one tier.Import, so that old windows are built or rebuilt
// straight into sealed form. at (the record's time) is the clock that
// tells old windows from open ones: it changes the layout, never a value.
func (st *state) importRows(rows []engine.ImportRow, at int64) {
	st.importUnerase(rows)
	recs := make([]importedPost, 0, len(rows))
	pending := make(map[engine.PostID]int, len(rows)) // index in recs
	for _, row := range rows {
		var cur importedPost
		known := ops.PostFacts{}
		i, seen := pending[row.Post]
		if seen {
			cur = recs[i]
			known = ops.PostFacts{Exists: true, Author: engine.UserID(cur.is.Author)}
		} else {
			p, ok, err := st.posts.Get(uint64(row.Post))
			if err != nil {
				st.noteErr(err)
				continue
			}
			cur = importedPost{id: uint64(row.Post), was: p, is: p}
			// An author being erased is gone already (lifecycle.go).
			cur.is.Author = st.maskAuthor(p.Author)
			known = ops.PostFacts{Exists: ok, Author: engine.UserID(cur.is.Author)}
			if !ok && st.deleted.Len() > 0 {
				known.Deleted = st.pairFact(st.deleted, 0, uint64(row.Post))
			}
		}
		skip, register, authorPosts := ops.DecideImport(row, known)
		if skip {
			continue
		}
		st.imported = st.imported.Widen(uint64(row.Post))
		if register {
			cur.is.Author = uint64(row.Author)
		}
		if authorPosts {
			st.addPosts(uint64(row.Author), 1)
		}
		cur.is.Counts, cur.is.Reactions = row.Counts, row.Reactions
		if seen {
			recs[i] = cur
		} else {
			pending[row.Post] = len(recs)
			recs = append(recs, cur)
		}
	}
	slices.SortFunc(recs, func(a, b importedPost) int { return cmp.Compare(a.id, b.id) })
	err := st.posts.Import(func(yield func(uint64, tier.Post) bool) {
		for _, r := range recs {
			if !yield(r.id, r.is) {
				return
			}
		}
	}, time.Unix(0, at))
	if err != nil {
		st.noteErr(err)
		return
	}
	for _, r := range recs {
		st.counted += countedDelta(r.was, r.is)
	}
}

// writePostTable writes the PTBL section: the number of posts with a
// count (8 bytes, little-endian), then the post table's image (a tier
// View's: sealed windows as they are in memory, cold ones as their files
// hold them, open ones as rows), streamed into chunks.
func writePostTable(w *snapshot.Writer, e *enc, posts io.WriterTo, counted int64) {
	cw := &chunkWriter{w: w, p: e.p}
	cw.Write(binary.LittleEndian.AppendUint64(nil, uint64(counted)))
	if _, err := posts.WriteTo(cw); err != nil && w.Err() == nil {
		cw.fail(err)
	}
	cw.close()
}

// readPostTable loads the PTBL section (written with any window length:
// tier.LoadAnyWindow).
func readPostTable(sr *snapshot.SectionReader, pc *pacer, st *state, tc tables) error {
	cr := &chunkReader{sr: sr, p: pc}
	return cr.load(func(r io.Reader) error {
		var counted [8]byte
		if _, err := io.ReadFull(r, counted[:]); err != nil {
			return fmt.Errorf("%w: the count of posts with counts: %w", tier.ErrCorrupt, err)
		}
		if err := st.posts.LoadAnyWindow(r, tc.loadTime()); err != nil {
			return err
		}
		st.counted = int64(binary.LittleEndian.Uint64(counted[:]))
		if st.counted < 0 || st.counted > int64(st.posts.Len()) {
			return fmt.Errorf("%w: %d posts with counts of %d", tier.ErrCorrupt, st.counted, st.posts.Len())
		}
		return nil
	}, tier.ErrCorrupt)
}

// writeSetImage writes an LKST or FVST section: the set's image
// (engine/tier), streamed into chunks; a load installs its sealed windows
// as they are, where rebuilding them from one item a pair took about six
// times as long.
func writeSetImage(w *snapshot.Writer, e *enc, t io.WriterTo) {
	cw := &chunkWriter{w: w, p: e.p}
	if _, err := t.WriteTo(cw); err != nil && w.Err() == nil {
		cw.fail(err)
	}
	cw.close()
}

// readSet loads an LKST or FVST section into t (written with any window
// length: tier.Set.LoadAnyWindow).
func readSet(sr *snapshot.SectionReader, pc *pacer, t *tier.Set, tc tables) error {
	cr := &chunkReader{sr: sr, p: pc}
	return cr.load(func(r io.Reader) error { return t.LoadAnyWindow(r, tc.loadTime()) }, tier.ErrCorrupt)
}

// The posts' records' encodings (record.go has the format).

func (r *createPostRec) appendTo(b []byte) []byte {
	b = appendID(appendID(b, r.Viewer), r.Post)
	return appendIdem(b, &r.recHeader)
}

func (r *createPostRec) readFrom(d *decoder) {
	r.Viewer, r.Post = engine.UserID(d.id("viewer")), engine.PostID(d.id("post"))
	d.idem(&r.recHeader)
}

func (r *favoriteRec) appendTo(b []byte) []byte { return appendID(appendID(b, r.Viewer), r.Post) }

func (r *favoriteRec) readFrom(d *decoder) {
	r.Viewer, r.Post = engine.UserID(d.id("viewer")), engine.PostID(d.id("post"))
}

// A comment's id is 0 when it has none.
func (r *commentRec) appendTo(b []byte) []byte {
	b = appendID(appendID(appendID(b, r.Viewer), r.Post), r.Comment.Comment)
	b = appendIdem(b, &r.recHeader)
	return appendIDs(b, r.Mentions)
}

func (r *commentRec) readFrom(d *decoder) {
	r.Viewer, r.Post = engine.UserID(d.id("viewer")), engine.PostID(d.id("post"))
	r.Comment.Comment = engine.CommentID(d.uvarint("comment"))
	d.idem(&r.recHeader)
	r.Mentions = readIDs(d, r.Mentions, false, "mention")
}

func (r *repostRec) appendTo(b []byte) []byte {
	b = appendID(appendID(appendID(b, r.Viewer), r.Post), r.NewPost)
	b = appendIdem(b, &r.recHeader)
	return appendIDs(b, r.Mentions)
}

func (r *repostRec) readFrom(d *decoder) {
	r.Viewer, r.Post = engine.UserID(d.id("viewer")), engine.PostID(d.id("post"))
	r.NewPost = engine.PostID(d.id("new post"))
	d.idem(&r.recHeader)
	r.Mentions = readIDs(d, r.Mentions, false, "mention")
}

func (r *viewsRec) appendTo(b []byte) []byte { return appendIDs(b, r.Posts) }

func (r *viewsRec) readFrom(d *decoder) { r.Posts = readIDs(d, r.Posts, true, "post") }

// An import row is its post, its author (0: none), its five counts, then
// its counts of the reaction kinds other than like: a uvarint mask of the
// kind ids with a non-zero count (bit k for kind k, 2 <= k <= MaxKinds)
// and those counts in id order, so that a row of a deployment with likes
// alone carries one byte more.
func (r *importRec) appendTo(b []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(r.rows)))
	for _, row := range r.rows {
		c := &row.Counts
		b = appendID(appendID(b, row.Post), row.Author)
		for _, v := range [...]int64{c.Likes, c.Comments, c.Reposts, c.Views, c.Favorites} {
			b = binary.AppendUvarint(b, uint64(v))
		}
		var mask uint64
		for j, v := range row.Reactions {
			if v != 0 {
				mask |= 1 << (j + 2)
			}
		}
		b = binary.AppendUvarint(b, mask)
		for _, v := range row.Reactions {
			if v != 0 {
				b = binary.AppendUvarint(b, uint64(v))
			}
		}
	}
	return b
}

// importKindBits are the bits an import row's kinds mask may set.
const importKindBits = (1<<(counters.MaxKinds+1) - 1) &^ (1<<(counters.Like+1) - 1)

func (r *importRec) readFrom(d *decoder) {
	n := d.uvarint("row count")
	switch {
	case d.err != nil:
		return
	case n == 0:
		d.fail("no rows")
		return
	case n > maxImportRows || n > uint64(len(d.b)/8):
		d.fail("too many rows")
		return
	}
	for range n {
		row := engine.ImportRow{Post: engine.PostID(d.id("post")), Author: engine.UserID(d.uvarint("author"))}
		c := &row.Counts
		c.Likes, c.Comments, c.Reposts = d.count("likes"), d.count("comments"), d.count("reposts")
		c.Views, c.Favorites = d.count("views"), d.count("favorites")
		mask := d.uvarint("reaction kinds")
		if mask&^importKindBits != 0 {
			d.fail("reaction kinds mask names no kind beyond like")
			return
		}
		for j := range row.Reactions {
			if mask&(1<<(j+2)) != 0 {
				if row.Reactions[j] = d.count("reaction count"); row.Reactions[j] == 0 && d.err == nil {
					d.fail("a zero reaction count")
				}
			}
		}
		if d.err != nil {
			return
		}
		r.rows = append(r.rows, row)
	}
}
