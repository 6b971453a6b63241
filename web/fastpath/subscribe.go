package fastpath

import (
	"context"
	"sync"

	"github.com/99designs/gqlgen/graphql"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/resolvers/model"
	"github.com/tally-dev/tally/web/auth"
)

// Pushes. Every plan-eligible unreadChanged subscription of one viewer
// (a user's tabs and devices) joins that viewer's feed: one run of the
// resolver, so one hub watch and one badge read per change, whatever the
// number of subscriptions, and one encoding per distinct selection per
// change, shared by the subscriptions that selected the same. A feed
// holds only its latest value, so a slow subscriber skips values it had
// no time to send instead of queueing them (badges are state, not
// deltas), and a new subscriber starts from that latest value.

// feeds are the open feeds by viewer.
type feeds struct {
	mu       sync.Mutex
	byViewer map[engine.UserID]*feed
}

// feed is one viewer's badge stream, shared by that viewer's plan-served
// subscriptions.
type feed struct {
	members int                // guarded by feeds.mu
	cancel  context.CancelFunc // ends the resolver run when the last member leaves
	ready   chan struct{}      // closed once the resolver answered, with err
	err     error
	events  <-chan *model.Viewer // the resolver's values, received by whichever member waits
	done    chan struct{}        // closed when events closed
	ending  sync.Once

	mu      sync.Mutex
	last    *pushEvent
	changed chan struct{} // closed and replaced at every event
}

// pushEvent is one value of a feed with its encodings by plan.
type pushEvent struct {
	viewer *model.Viewer
	mu     sync.Mutex
	enc    []encoded
}

type encoded struct {
	plan *plan
	data []byte
}

// join adds a member to viewer's feed, starting the feed (one resolver
// run, detached from any one subscription) if it is the first. The
// resolver runs outside the lock, so viewers join in parallel. It fails
// only when the resolver does; the caller then leaves.
func (s *Schema) join(pr auth.Principal) (*feed, error) {
	s.feeds.mu.Lock()
	f := s.feeds.byViewer[pr.User]
	if f != nil {
		f.members++
		s.feeds.mu.Unlock()
		<-f.ready
		return f, f.err
	}
	ctx, cancel := context.WithCancel(auth.With(context.Background(), pr, nil))
	f = &feed{members: 1, cancel: cancel, ready: make(chan struct{}), done: make(chan struct{}), changed: make(chan struct{})}
	if s.feeds.byViewer == nil {
		s.feeds.byViewer = make(map[engine.UserID]*feed)
	}
	s.feeds.byViewer[pr.User] = f
	s.feeds.mu.Unlock()

	events, err := s.cfg.UnreadChanged(ctx)
	if err != nil {
		f.err = err
		s.feeds.mu.Lock()
		if s.feeds.byViewer[pr.User] == f {
			delete(s.feeds.byViewer, pr.User) // the next subscriber tries afresh
		}
		s.feeds.mu.Unlock()
		close(f.ready)
		return f, err
	}
	f.events = events
	close(f.ready)
	return f, nil
}

// leave removes a member; the last one out ends the feed.
func (s *Schema) leave(viewer engine.UserID, f *feed) {
	s.feeds.mu.Lock()
	defer s.feeds.mu.Unlock()
	f.members--
	if f.members == 0 {
		f.cancel()
		if s.feeds.byViewer[viewer] == f {
			delete(s.feeds.byViewer, viewer)
		}
	}
}

// next waits for a value newer than seen. Members waiting here receive
// the resolver's values themselves and publish them to the others, so a
// feed costs no goroutine of its own.
func (f *feed) next(ctx context.Context, seen *pushEvent) *pushEvent {
	for {
		f.mu.Lock()
		e, changed := f.last, f.changed
		f.mu.Unlock()
		if e != nil && e != seen {
			return e
		}
		select {
		case v, ok := <-f.events:
			if !ok {
				f.ending.Do(func() { close(f.done) })
				return nil
			}
			if v != nil {
				f.mu.Lock()
				f.last = &pushEvent{viewer: v}
				close(f.changed)
				f.changed = make(chan struct{})
				f.mu.Unlock()
			}
		case <-changed:
		case <-f.done:
			return nil
		case <-ctx.Done():
			return nil
		}
	}
}

// encode returns the push of e under p, encoded once per plan.
func (e *pushEvent) encode(ctx context.Context, store engine.Store, p *plan) ([]byte, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, x := range e.enc {
		if x.plan == p {
			return x.data, nil
		}
	}
	v := e.viewer
	u := v.Unread
	if u == nil {
		read, err := store.Unread(ctx, v.UserID)
		if err != nil {
			return nil, err
		}
		u = &read
	}
	root := &p.root[0]
	buf := make([]byte, 0, p.sizeHint.Load()+16)
	buf = append(buf, '{')
	buf = append(buf, root.key...)
	buf = writeViewer(buf, root.obj, nil, v.UserID, u)
	buf = append(buf, '}')
	p.sizeHint.Store(int64(len(buf)))
	e.enc = append(e.enc, encoded{p, buf})
	return buf, nil
}

// subscribe serves an unreadChanged subscription whose selection needs
// nothing but the badges the resolver read, from the viewer's feed: no
// executor run per push. It returns nil when gqlgen must serve the
// subscription (an anonymous or bad token, which gqlgen reports; a
// resolver error, which gqlgen reports by running the resolver itself).
func (s *Schema) subscribe(ctx context.Context, opCtx *graphql.OperationContext, p *plan) graphql.ResponseHandler {
	pr, err := auth.From(ctx)
	if err != nil || pr.User == 0 {
		return nil
	}
	f, err := s.join(pr)
	if err != nil {
		s.leave(pr.User, f)
		return nil
	}
	context.AfterFunc(ctx, func() { s.leave(pr.User, f) })
	s.count(true)
	// Field middleware (the metrics extension times an event from it)
	// sees one resolver call per push, as with gqlgen's executor.
	fc := &graphql.FieldContext{Object: "Subscription", IsResolver: true, IsMethod: true}
	if fields := graphql.CollectFields(opCtx, opCtx.Operation.SelectionSet, []string{"Subscription"}); len(fields) == 1 {
		fc.Field = fields[0]
	}
	var seen *pushEvent
	return func(rctx context.Context) *graphql.Response {
		e := f.next(rctx, seen)
		if e == nil || ctx.Err() != nil {
			return nil
		}
		seen = e
		fctx := graphql.WithFieldContext(rctx, fc)
		opCtx.ResolverMiddleware(fctx, func(context.Context) (any, error) { return e.viewer, nil })
		data, err := e.encode(rctx, s.cfg.Store, p)
		if err != nil {
			graphql.AddError(graphql.WithPathContext(rctx, graphql.NewPathWithField(fc.Field.Alias)), err)
			return &graphql.Response{Data: []byte("null")}
		}
		return &graphql.Response{Data: data}
	}
}
