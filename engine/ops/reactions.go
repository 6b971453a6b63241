package ops

import (
	"fmt"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/counters"
)

// Reactions (表态): a user has at most one reaction on a post, of one of
// the deployment's kinds (counters.Kind; like is one of them, always).
// A backend that keeps kinds decides likePost as ReactToPost{Kind:
// counters.Like} and unlikePost as UnreactToPost{Only: counters.Like}, so
// that a like is the reaction like and nothing else: likePost over a
// "love" switches it to like, unlikePost of a "love" changes nothing.

// KindByName returns the id of the kind named name in kinds, the
// deployment's table; a name it does not have is ErrInvalid.
func KindByName(kinds *counters.Kinds, name string) (counters.Kind, error) {
	if id := kinds.ID(name); id != counters.NoKind {
		return id, nil
	}
	return counters.NoKind, fmt.Errorf("%w: unknown reaction kind %q", engine.ErrInvalid, name)
}

// ReactionFacts are what a reaction reads: the post, and the viewer's
// reaction on it (NoKind: none).
type ReactionFacts struct {
	PostFacts
	Was counters.Kind
}

// ReactToPost makes Kind Viewer's one reaction on Post.
type ReactToPost struct {
	Viewer engine.UserID
	Post   engine.PostID
	Kind   counters.Kind
}

// Check validates the call: a kind is an id of the deployment's table
// (KindByName gives one), never NoKind.
func (op *ReactToPost) Check() error {
	if err := checkPostTarget(op.Viewer, op.Post); err != nil {
		return err
	}
	return checkKind(op.Kind)
}

func checkKind(k counters.Kind) error {
	if k == counters.NoKind || k > counters.MaxKinds {
		return fmt.Errorf("%w: reaction kind id %d", engine.ErrInvalid, k)
	}
	return nil
}

// Decide: the same kind again changes nothing. Otherwise the viewer's
// reaction becomes Kind and one count moves from the kind it was (none
// for a first reaction) to Kind, in the same Effects, which a backend
// applies in one step: no reader sees both kinds counted, or neither. A
// first reaction of any kind on someone else's post adds one to the
// author's unread likes; a switch of kind adds nothing, so a user who
// tries every kind bumps the author once.
func (op *ReactToPost) Decide(f ReactionFacts, eff *Effects) error {
	if !f.Exists {
		return errPostNotFound(op.Post)
	}
	if f.Was == op.Kind {
		return nil
	}
	eff.Reacts = append(eff.Reacts, ReactionSet{Post: op.Post, User: op.Viewer, Kind: op.Kind})
	eff.reaction(op.Post, f.Was, -1)
	eff.reaction(op.Post, op.Kind, 1)
	if f.Was == counters.NoKind && f.Author != 0 && f.Author != op.Viewer {
		eff.bump(f.Author, engine.Likes)
		eff.wakeOne(f.Author)
	}
	return nil
}

// UnreactToPost removes Viewer's reaction on Post; with Only set, only a
// reaction of that kind (unlikePost removes a like, not a "love").
type UnreactToPost struct {
	Viewer engine.UserID
	Post   engine.PostID
	Only   counters.Kind
}

// Check validates the call.
func (op *UnreactToPost) Check() error {
	if err := checkPostTarget(op.Viewer, op.Post); err != nil {
		return err
	}
	if op.Only != counters.NoKind {
		return checkKind(op.Only)
	}
	return nil
}

// Decide: no reaction (or one of another kind than Only) changes
// nothing; otherwise the reaction goes and its kind loses one. The
// author's badge stays, as for an unlike.
func (op *UnreactToPost) Decide(f ReactionFacts, eff *Effects) error {
	if !f.Exists {
		return errPostNotFound(op.Post)
	}
	if f.Was == counters.NoKind || (op.Only != counters.NoKind && f.Was != op.Only) {
		return nil
	}
	eff.Reacts = append(eff.Reacts, ReactionSet{Post: op.Post, User: op.Viewer, Kind: counters.NoKind})
	eff.reaction(op.Post, f.Was, -1)
	return nil
}

// reaction adds d to post's count of kind k: like's is the post's likes
// (a CountDelta), another kind's a ReactionDelta; NoKind counts nothing.
func (e *Effects) reaction(post engine.PostID, k counters.Kind, d int64) {
	switch k {
	case counters.NoKind:
	case counters.Like:
		e.count(post, counters.Likes, d)
	default:
		e.ReactionCounts = append(e.ReactionCounts, ReactionDelta{Post: post, Kind: k, Delta: d})
	}
}
