package embedded

import (
	"context"
	"fmt"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/counters"
	"github.com/tally-dev/tally/engine/ops"
)

// Reactions: the like set holds each (user, post)'s reaction kind, the
// post table each post's count of every kind (like's is its likes), both
// by the kind ids of the post table's kinds table (tier.Posts.Kinds). The
// deployment's kinds (Options.Reactions) are reconciled with that table
// at Open (setKinds): a change is logged as a kindsRec before any record
// that uses the new ids, so that replay meets the ids it names in the
// table it rebuilds.

// reactRec logs a reaction (likePost is the reaction like); unreactRec
// its removal (unlikePost: of a like only); kindsRec a new kinds table.
type reactRec struct {
	recHeader
	ops.ReactToPost
}

type unreactRec struct {
	recHeader
	ops.UnreactToPost
}

type kindsRec struct {
	recHeader
	kinds counters.Kinds
}

// ReactionKinds implements engine.Store.
func (e *Engine) ReactionKinds() []string { return e.display }

// ReactToPost implements engine.Store.
func (e *Engine) ReactToPost(ctx context.Context, viewer engine.UserID, post engine.PostID, kind string) error {
	if err := engine.CheckViewer(viewer); err != nil {
		return err
	}
	id, err := ops.KindByName(&e.kinds, kind)
	if err != nil {
		return err
	}
	_, err = e.commitChecked(ctx, &reactRec{ReactToPost: ops.ReactToPost{Viewer: viewer, Post: post, Kind: id}})
	return err
}

// UnreactToPost implements engine.Store.
func (e *Engine) UnreactToPost(ctx context.Context, viewer engine.UserID, post engine.PostID) error {
	_, err := e.commitChecked(ctx, &unreactRec{UnreactToPost: ops.UnreactToPost{Viewer: viewer, Post: post}})
	return err
}

func (st *state) decideReact(r *reactRec) error {
	return r.Decide(st.reactionFacts(r.Viewer, r.Post), &st.eff)
}

func (st *state) decideUnreact(r *unreactRec) error {
	return r.Decide(st.reactionFacts(r.Viewer, r.Post), &st.eff)
}

// reactionFacts reads the post and viewer's reaction on it. A cold block
// that cannot be read is kept for the caller (takeReadErr) and reads as
// no reaction.
func (st *state) reactionFacts(viewer engine.UserID, post engine.PostID) ops.ReactionFacts {
	was, err := st.likes.KindOf(uint64(viewer), uint64(post))
	if err != nil && st.readErr == nil {
		st.readErr = err
	}
	return ops.ReactionFacts{PostFacts: st.postFacts(post), Was: was}
}

// applyReact sets a user's reaction kind on a post (NoKind: removes it);
// its counts are the same Effects' CountDelta and ReactionDelta.
func (st *state) applyReact(r ops.ReactionSet) {
	var err error
	if r.Kind == counters.NoKind {
		_, err = st.likes.Unreact(uint64(r.User), uint64(r.Post))
	} else {
		_, err = st.likes.React(uint64(r.User), uint64(r.Post), r.Kind)
	}
	st.noteErr(err)
}

// setKinds reconciles the deployment's kinds (counters.ParseKinds'
// result, in display order) with the state's kinds table: a kind left out
// that still counts reactions is refused (*counters.KindInUseError); a
// change is committed as a kindsRec (logged when the engine has a log).
func (e *Engine) setKinds(kinds []string) error {
	e.mu.RLock()
	cur := e.st.posts.Kinds()
	next, err := cur.Reconcile(kinds, e.st.posts.KindTotals)
	e.mu.RUnlock()
	if err != nil {
		return fmt.Errorf("embedded: -reactions: %w", err)
	}
	e.display, e.kinds = kinds, next
	for i, name := range kinds {
		e.order[i] = next.ID(name)
	}
	if next == cur {
		return nil
	}
	if e.failed.Load() != nil {
		// Read-only: nothing is logged, and the new ids live as long as
		// this process, which writes nothing that names them.
		e.mu.Lock()
		e.st.posts.PutKinds(next)
		e.mu.Unlock()
		return nil
	}
	_, err = e.commit(&kindsRec{kinds: next})
	return err
}

// The records' encodings (record.go has the format): a reaction is the
// viewer, the post and the kind id (one byte, 1 to counters.MaxKinds); an
// unreaction the viewer, the post and the only kind it removes (0: any);
// a kinds table its count, then each kind's id byte and name, ids
// increasing.

func (r *reactRec) appendTo(b []byte) []byte {
	return append(appendID(appendID(b, r.Viewer), r.Post), byte(r.Kind))
}

func (r *reactRec) readFrom(d *decoder) {
	r.Viewer, r.Post = engine.UserID(d.id("viewer")), engine.PostID(d.id("post"))
	r.Kind = counters.Kind(d.kind("kind"))
	if r.Kind == counters.NoKind {
		d.fail("a reaction of no kind")
	}
}

func (r *unreactRec) appendTo(b []byte) []byte {
	return append(appendID(appendID(b, r.Viewer), r.Post), byte(r.Only))
}

func (r *unreactRec) readFrom(d *decoder) {
	r.Viewer, r.Post = engine.UserID(d.id("viewer")), engine.PostID(d.id("post"))
	r.Only = counters.Kind(d.kind("only"))
}

func (r *kindsRec) appendTo(b []byte) []byte {
	ids := r.kinds.IDs()
	b = append(b, byte(len(ids)))
	for _, id := range ids {
		b = appendString(append(b, byte(id)), r.kinds.Name(id))
	}
	return b
}

func (r *kindsRec) readFrom(d *decoder) {
	n := d.kind("kinds")
	last := counters.NoKind
	for range n {
		id := counters.Kind(d.kind("kind id"))
		name := d.str("kind name")
		if d.err != nil {
			return
		}
		if id <= last {
			d.fail("kind ids out of order")
			return
		}
		if err := r.kinds.Put(id, name); err != nil {
			d.fail(err.Error())
			return
		}
		last = id
	}
	if d.err == nil && !r.kinds.Has(counters.Like) {
		d.fail("a kinds table without like")
	}
}
