package embedded

import (
	"context"

	"github.com/tally-dev/tally/engine"
)

// Reactions: this engine keeps likes only for now (the deployment's
// kinds are ["like"]), so a reaction is a like.

// ReactionKinds implements engine.Store.
func (e *Engine) ReactionKinds() []string { return []string{"like"} }

// ReactToPost implements engine.Store.
func (e *Engine) ReactToPost(ctx context.Context, viewer engine.UserID, post engine.PostID, kind string) error {
	return engine.ReactAsLike(ctx, e.Like, viewer, post, kind)
}

// UnreactToPost implements engine.Store.
func (e *Engine) UnreactToPost(ctx context.Context, viewer engine.UserID, post engine.PostID) error {
	return e.Unlike(ctx, viewer, post)
}
