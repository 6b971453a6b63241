package redisstore

import (
	"context"

	"github.com/tally-dev/tally/engine"
)

// Reactions: this backend keeps likes only for now (the deployment's
// kinds are ["like"]), so a reaction is a like.

// ReactionKinds implements engine.Store.
func (s *Store) ReactionKinds() []string { return []string{"like"} }

// ReactToPost implements engine.Store.
func (s *Store) ReactToPost(ctx context.Context, viewer engine.UserID, post engine.PostID, kind string) error {
	return engine.ReactAsLike(ctx, s.Like, viewer, post, kind)
}

// UnreactToPost implements engine.Store.
func (s *Store) UnreactToPost(ctx context.Context, viewer engine.UserID, post engine.PostID) error {
	return s.Unlike(ctx, viewer, post)
}
