package tracing

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/tally-dev/tally/engine"
)

// Store decorates an engine.Store with a span per call, a child of the
// caller's span (the operation's), named engine.<Method>, with the number
// of ids it was asked for. A call that fails records its error; an
// ErrNotFound or ErrForbidden, which are answers rather than failures,
// does not mark the span as an error. A write also hands its span's
// context to the engine (engine.WithCause), so that the events it causes
// can name it: see Link.
//
// Methods added to engine.Store later pass through untraced until they
// are added here; Subscribe, Ready, Stats and Close are not traced.
type Store struct {
	engine.Store
	tracer trace.Tracer
}

// WrapStore returns store with its calls traced by tp's tracer.
func WrapStore(store engine.Store, tp trace.TracerProvider) *Store {
	return &Store{Store: store, tracer: tp.Tracer(Name)}
}

func (s *Store) start(ctx context.Context, name string, ids int, write bool) (context.Context, trace.Span) {
	ctx, span := s.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindInternal))
	if ids >= 0 {
		span.SetAttributes(attribute.Int("tally.ids", ids))
	}
	if write {
		ctx = engine.WithCause(ctx, CauseOf(span.SpanContext()))
	}
	return ctx, span
}

func end(span trace.Span, err error) error {
	if err != nil {
		span.RecordError(err)
		if !errors.Is(err, engine.ErrNotFound) && !errors.Is(err, engine.ErrForbidden) && !errors.Is(err, engine.ErrInvalid) {
			span.SetStatus(codes.Error, err.Error())
		}
	}
	span.End()
	return err
}

func (s *Store) CreatePost(ctx context.Context, viewer engine.UserID, id engine.PostID, idemKey string) (engine.PostID, error) {
	ctx, span := s.start(ctx, "engine.CreatePost", -1, true)
	res, err := s.Store.CreatePost(ctx, viewer, id, idemKey)
	return res, end(span, err)
}

func (s *Store) Posts(ctx context.Context, ids []engine.PostID) ([]engine.PostInfo, error) {
	ctx, span := s.start(ctx, "engine.Posts", len(ids), false)
	res, err := s.Store.Posts(ctx, ids)
	return res, end(span, err)
}

func (s *Store) Page(ctx context.Context, viewer engine.UserID, ids []engine.PostID, want engine.PageWant, out []engine.PostView) error {
	ctx, span := s.start(ctx, "engine.Page", len(ids), false)
	return end(span, s.Store.Page(ctx, viewer, ids, want, out))
}

func (s *Store) Counts(ctx context.Context, ids []engine.PostID) ([]engine.Counts, error) {
	ctx, span := s.start(ctx, "engine.Counts", len(ids), false)
	res, err := s.Store.Counts(ctx, ids)
	return res, end(span, err)
}

func (s *Store) Liked(ctx context.Context, viewer engine.UserID, ids []engine.PostID) ([]bool, error) {
	ctx, span := s.start(ctx, "engine.Liked", len(ids), false)
	res, err := s.Store.Liked(ctx, viewer, ids)
	return res, end(span, err)
}

func (s *Store) Favorited(ctx context.Context, viewer engine.UserID, ids []engine.PostID) ([]bool, error) {
	ctx, span := s.start(ctx, "engine.Favorited", len(ids), false)
	res, err := s.Store.Favorited(ctx, viewer, ids)
	return res, end(span, err)
}

func (s *Store) Like(ctx context.Context, viewer engine.UserID, post engine.PostID) error {
	ctx, span := s.start(ctx, "engine.Like", -1, true)
	return end(span, s.Store.Like(ctx, viewer, post))
}

func (s *Store) Unlike(ctx context.Context, viewer engine.UserID, post engine.PostID) error {
	ctx, span := s.start(ctx, "engine.Unlike", -1, true)
	return end(span, s.Store.Unlike(ctx, viewer, post))
}

func (s *Store) ReactToPost(ctx context.Context, viewer engine.UserID, post engine.PostID, kind string) error {
	ctx, span := s.start(ctx, "engine.ReactToPost", -1, true)
	return end(span, s.Store.ReactToPost(ctx, viewer, post, kind))
}

func (s *Store) UnreactToPost(ctx context.Context, viewer engine.UserID, post engine.PostID) error {
	ctx, span := s.start(ctx, "engine.UnreactToPost", -1, true)
	return end(span, s.Store.UnreactToPost(ctx, viewer, post))
}

func (s *Store) Favorite(ctx context.Context, viewer engine.UserID, post engine.PostID) error {
	ctx, span := s.start(ctx, "engine.Favorite", -1, true)
	return end(span, s.Store.Favorite(ctx, viewer, post))
}

func (s *Store) Unfavorite(ctx context.Context, viewer engine.UserID, post engine.PostID) error {
	ctx, span := s.start(ctx, "engine.Unfavorite", -1, true)
	return end(span, s.Store.Unfavorite(ctx, viewer, post))
}

func (s *Store) Comment(ctx context.Context, viewer engine.UserID, post engine.PostID, comment engine.CommentID, mentions []engine.UserID, idemKey string) error {
	ctx, span := s.start(ctx, "engine.Comment", -1, true)
	return end(span, s.Store.Comment(ctx, viewer, post, comment, mentions, idemKey))
}

func (s *Store) DeleteComment(ctx context.Context, actor engine.Actor, post engine.PostID, comment engine.CommentID) error {
	ctx, span := s.start(ctx, "engine.DeleteComment", -1, true)
	return end(span, s.Store.DeleteComment(ctx, actor, post, comment))
}

func (s *Store) DeletePost(ctx context.Context, actor engine.Actor, post engine.PostID) error {
	ctx, span := s.start(ctx, "engine.DeletePost", -1, true)
	return end(span, s.Store.DeletePost(ctx, actor, post))
}

func (s *Store) EraseUser(ctx context.Context, user engine.UserID) error {
	ctx, span := s.start(ctx, "engine.EraseUser", -1, true)
	return end(span, s.Store.EraseUser(ctx, user))
}

func (s *Store) Repost(ctx context.Context, viewer engine.UserID, post engine.PostID, mentions []engine.UserID, idemKey string) (engine.PostID, error) {
	ctx, span := s.start(ctx, "engine.Repost", -1, true)
	res, err := s.Store.Repost(ctx, viewer, post, mentions, idemKey)
	return res, end(span, err)
}

func (s *Store) RecordViews(ctx context.Context, ids []engine.PostID) error {
	ctx, span := s.start(ctx, "engine.RecordViews", len(ids), true)
	return end(span, s.Store.RecordViews(ctx, ids))
}

func (s *Store) UserCounts(ctx context.Context, ids []engine.UserID) ([]engine.UserCounts, error) {
	ctx, span := s.start(ctx, "engine.UserCounts", len(ids), false)
	res, err := s.Store.UserCounts(ctx, ids)
	return res, end(span, err)
}

func (s *Store) Follow(ctx context.Context, viewer, target engine.UserID) error {
	ctx, span := s.start(ctx, "engine.Follow", -1, true)
	return end(span, s.Store.Follow(ctx, viewer, target))
}

func (s *Store) Unfollow(ctx context.Context, viewer, target engine.UserID) error {
	ctx, span := s.start(ctx, "engine.Unfollow", -1, true)
	return end(span, s.Store.Unfollow(ctx, viewer, target))
}

func (s *Store) Unread(ctx context.Context, viewer engine.UserID) (engine.Unread, error) {
	ctx, span := s.start(ctx, "engine.Unread", -1, false)
	res, err := s.Store.Unread(ctx, viewer)
	return res, end(span, err)
}

// UnreadMany is the inner store's UnreadMany (redisstore's: many
// viewers' badges in the round trips of one), in one span; a store
// without one reads viewer by viewer under that span.
func (s *Store) UnreadMany(ctx context.Context, viewers []engine.UserID, out []engine.Unread) error {
	ctx, span := s.start(ctx, "engine.UnreadMany", len(viewers), false)
	if b, ok := s.Store.(interface {
		UnreadMany(context.Context, []engine.UserID, []engine.Unread) error
	}); ok {
		return end(span, b.UnreadMany(ctx, viewers, out))
	}
	for i, v := range viewers {
		u, err := s.Store.Unread(ctx, v)
		if err != nil {
			return end(span, err)
		}
		out[i] = u
	}
	return end(span, nil)
}

func (s *Store) MarkRead(ctx context.Context, viewer engine.UserID, kind engine.UnreadKind) error {
	ctx, span := s.start(ctx, "engine.MarkRead", -1, true)
	return end(span, s.Store.MarkRead(ctx, viewer, kind))
}

func (s *Store) ClickRedDot(ctx context.Context, viewer engine.UserID) error {
	ctx, span := s.start(ctx, "engine.ClickRedDot", -1, true)
	return end(span, s.Store.ClickRedDot(ctx, viewer))
}

func (s *Store) PushRedDot(ctx context.Context) error {
	ctx, span := s.start(ctx, "engine.PushRedDot", -1, true)
	return end(span, s.Store.PushRedDot(ctx))
}

func (s *Store) PublishNotification(ctx context.Context, title, body, idemKey string) (engine.Notification, error) {
	ctx, span := s.start(ctx, "engine.PublishNotification", -1, true)
	res, err := s.Store.PublishNotification(ctx, title, body, idemKey)
	return res, end(span, err)
}

func (s *Store) Notifications(ctx context.Context, first int, after engine.NotificationID) ([]engine.Notification, error) {
	ctx, span := s.start(ctx, "engine.Notifications", -1, false)
	res, err := s.Store.Notifications(ctx, first, after)
	return res, end(span, err)
}

func (s *Store) CreateGroup(ctx context.Context, viewer engine.UserID, members []engine.UserID) (engine.GroupID, error) {
	ctx, span := s.start(ctx, "engine.CreateGroup", len(members), true)
	res, err := s.Store.CreateGroup(ctx, viewer, members)
	return res, end(span, err)
}

func (s *Store) AddGroupMembers(ctx context.Context, viewer engine.UserID, group engine.GroupID, users []engine.UserID) error {
	ctx, span := s.start(ctx, "engine.AddGroupMembers", len(users), true)
	return end(span, s.Store.AddGroupMembers(ctx, viewer, group, users))
}

func (s *Store) LeaveGroup(ctx context.Context, viewer engine.UserID, group engine.GroupID) (engine.Group, error) {
	ctx, span := s.start(ctx, "engine.LeaveGroup", -1, true)
	res, err := s.Store.LeaveGroup(ctx, viewer, group)
	return res, end(span, err)
}

func (s *Store) Group(ctx context.Context, viewer engine.UserID, group engine.GroupID) (engine.Group, error) {
	ctx, span := s.start(ctx, "engine.Group", -1, false)
	res, err := s.Store.Group(ctx, viewer, group)
	return res, end(span, err)
}

func (s *Store) GroupMembers(ctx context.Context, viewer engine.UserID, group engine.GroupID, first int, after engine.UserID) ([]engine.UserID, error) {
	ctx, span := s.start(ctx, "engine.GroupMembers", -1, false)
	res, err := s.Store.GroupMembers(ctx, viewer, group, first, after)
	return res, end(span, err)
}

func (s *Store) SendMessage(ctx context.Context, viewer engine.UserID, group engine.GroupID, text string, mentions []engine.UserID, idemKey string) (engine.Message, error) {
	ctx, span := s.start(ctx, "engine.SendMessage", -1, true)
	res, err := s.Store.SendMessage(ctx, viewer, group, text, mentions, idemKey)
	return res, end(span, err)
}

func (s *Store) Message(ctx context.Context, viewer engine.UserID, id engine.MessageID) (engine.Message, error) {
	ctx, span := s.start(ctx, "engine.Message", -1, false)
	res, err := s.Store.Message(ctx, viewer, id)
	return res, end(span, err)
}

func (s *Store) MarkMessagesRead(ctx context.Context, viewer engine.UserID, ids []engine.MessageID) ([]engine.Message, error) {
	ctx, span := s.start(ctx, "engine.MarkMessagesRead", len(ids), true)
	res, err := s.Store.MarkMessagesRead(ctx, viewer, ids)
	return res, end(span, err)
}

func (s *Store) Receipts(ctx context.Context, viewer engine.UserID, id engine.MessageID, limit int) (engine.Receipts, error) {
	ctx, span := s.start(ctx, "engine.Receipts", -1, false)
	res, err := s.Store.Receipts(ctx, viewer, id, limit)
	return res, end(span, err)
}

func (s *Store) ReceiptMembers(ctx context.Context, viewer engine.UserID, id engine.MessageID, readers bool, first int, after engine.UserID) ([]engine.UserID, error) {
	ctx, span := s.start(ctx, "engine.ReceiptMembers", -1, false)
	res, err := s.Store.ReceiptMembers(ctx, viewer, id, readers, first, after)
	return res, end(span, err)
}

func (s *Store) Followees(ctx context.Context, viewer engine.UserID) ([]engine.UserID, error) {
	ctx, span := s.start(ctx, "engine.Followees", -1, false)
	res, err := s.Store.Followees(ctx, viewer)
	return res, end(span, err)
}
