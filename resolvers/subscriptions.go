package resolvers

import (
	"context"
	"errors"
	"sync"

	"github.com/99designs/gqlgen/graphql"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/resolvers/model"
	"github.com/tally-dev/tally/web/auth"
	"github.com/tally-dev/tally/web/tracing"
)

// UnreadChanged sends the viewer's state at once, then again whenever the
// hub says it may have changed and a re-read shows that it did. The value
// sent carries the badges that re-read found, so an event costs one read;
// its other fields are resolved afresh, with new loaders, for every event.
func (r *subscriptionResolver) UnreadChanged(ctx context.Context) (<-chan *model.Viewer, error) {
	viewer := viewerOf(ctx)
	signal, err := r.Hub.WatchUnread(ctx, viewer)
	if err != nil {
		return nil, err
	}
	last, err := r.Store.Unread(ctx, viewer)
	if err != nil {
		return nil, err
	}
	out := make(chan *model.Viewer, 1)
	first := last
	out <- &model.Viewer{UserID: viewer, Unread: &first}
	go func() {
		defer close(out)
		for {
			select {
			case <-ctx.Done():
				return
			case <-signal:
			}
			pctx, span := tracing.StartPush(ctx, "unreadChanged", r.Hub.TakeCauses(signal))
			now, err := r.Store.Unread(pctx, viewer)
			span.End()
			if err != nil && streamOver(ctx, err) {
				return
			}
			if err != nil || now == last {
				continue // a wake-up that changed nothing visible, or a store hiccup: the next event re-reads
			}
			last = now
			select {
			case out <- &model.Viewer{UserID: viewer, Unread: &now}:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}

// ReadReceiptsChanged is for the message's sender only: the first read
// enforces that (FORBIDDEN otherwise) before anything is sent.
func (r *subscriptionResolver) ReadReceiptsChanged(ctx context.Context, messageID string) (<-chan *model.ReadReceipts, error) {
	id, err := parseID[engine.MessageID]("messageId", messageID)
	if err != nil {
		return nil, err
	}
	res := (*Resolver)(r)
	signal := r.Hub.WatchReceipts(ctx, id)
	first, err := res.receipts(ctx, id)
	if err != nil {
		return nil, err
	}
	out := make(chan *model.ReadReceipts, 1)
	out <- first
	go func() {
		defer close(out)
		last := first.R
		for {
			select {
			case <-ctx.Done():
				return
			case <-signal:
			}
			pctx, span := tracing.StartPush(ctx, "readReceiptsChanged", r.Hub.TakeCauses(signal))
			rr, err := res.receipts(pctx, id)
			span.End()
			if err != nil && streamOver(ctx, err) {
				return // e.g. the sender left the group: FORBIDDEN, in an error message
			}
			if err != nil || (rr.R.ReadCount == last.ReadCount && rr.R.UnreadCount == last.UnreadCount) {
				continue
			}
			last = rr.R
			select {
			case out <- rr:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}

// streamOver reports whether a re-read's error ends the subscription: a
// refusal (FORBIDDEN, NOT_FOUND, BAD_USER_INPUT, UNAUTHENTICATED) will not
// go away by itself, so the stream ends with it in an `error` message
// rather than going quiet. A store hiccup does not: the next wake-up
// re-reads.
func streamOver(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return true // the client completed it or the socket closed
	}
	var ce *codeError
	final := errors.Is(err, engine.ErrForbidden) || errors.Is(err, engine.ErrNotFound) ||
		errors.Is(err, engine.ErrInvalid) || errors.Is(err, auth.ErrBadToken) ||
		(errors.As(err, &ce) && ce.code != CodeInternal && ce.code != CodeRateLimited)
	if final {
		endStream(ctx, err)
	}
	return final
}

// StreamEnd carries the errors a subscription resolver ends its stream
// with, so that the transport reports them in an `error` message instead
// of a plain `complete`.
type StreamEnd struct {
	mu   sync.Mutex
	errs []error
}

type streamEndKey struct{}

// WithStreamEnd returns a context for one subscription's resolver, and
// the record in which the resolver leaves why its stream ended.
func WithStreamEnd(ctx context.Context) (context.Context, *StreamEnd) {
	e := &StreamEnd{}
	return context.WithValue(ctx, streamEndKey{}, e), e
}

// Errors returns what the resolver ended the stream with (none when it
// ended because the client completed it or the socket closed).
func (e *StreamEnd) Errors() []error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.errs
}

// endStream records why a subscription's stream is ending; the resolver
// then closes its channel. ctx is the resolver's (it carries the field's
// path). Outside a transport's WithStreamEnd it does nothing.
func endStream(ctx context.Context, err error) {
	e, _ := ctx.Value(streamEndKey{}).(*StreamEnd)
	if e == nil {
		return
	}
	e.mu.Lock()
	e.errs = append(e.errs, graphql.ErrorOnPath(ctx, err))
	e.mu.Unlock()
}
