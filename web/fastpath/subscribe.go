package fastpath

import (
	"context"
	"runtime"
	"slices"
	"sync"

	"github.com/99designs/gqlgen/graphql"
	"go.opentelemetry.io/otel/trace"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/resolvers/model"
	"github.com/tally-dev/tally/web/auth"
	"github.com/tally-dev/tally/web/tracing"
)

// Pushes. Every plan-eligible unreadChanged subscription of one viewer
// (a user's tabs and devices) joins that viewer's feed: one hub watch and
// one badge read per change, whatever the number of subscriptions, and
// one encoding per distinct selection per change, shared by the
// subscriptions that selected the same. Nothing waits for a change: the
// hub calls the feed back, a few shared readers re-read the badges of the
// feeds called back (one at a time per feed, so a burst of changes costs
// at most one more read), and a feed whose badges changed wakes its
// subscriptions' transports, which push from the reader's goroutine. An
// idle subscription is a few small structs and holds no goroutine.
//
// A feed holds only its latest value, so a subscription whose transport
// has not pushed the previous one yet gets the latest instead (badges are
// state, not deltas), and a new subscriber starts from that latest value.

// Pusher is what a transport offers to serve a subscription by pushes
// (WithPusher) rather than by a goroutine that waits in the response
// handler for each next value.
type Pusher interface {
	// Accept is called before Exec returns when the subscription is
	// served by pushes: the transport then sends push.Next() at once (the
	// first value) and once after every Wake, never two at a time, does
	// not call the response handler Exec returns, and calls push.Stop
	// when the subscription ends. (Stop rather than the end of the
	// operation's context: whatever waits for a context to end holds the
	// whole context, which for a gqlgen operation is all its
	// per-request state.)
	Accept(push *Push)
	// Wake says the next value is ready. It is called from a shared
	// reader's goroutine, at most once per Next that followed the
	// previous Wake (a value that arrives meanwhile replaces the pending
	// one), and must not block for long.
	Wake()
}

// Push is a subscription served by pushes: all it holds between pushes
// is its feed (the viewer's, shared by the viewer's subscriptions) and
// its compiled plan.
type Push struct {
	s    *Schema
	f    *feed
	m    *member
	p    *plan
	stop sync.Once
}

// Stop ends the subscription (once; later calls do nothing).
func (p *Push) Stop() { p.stop.Do(func() { p.s.leave(p.f, p.m) }) }

// Next returns the subscription's latest value, encoded: the data of a
// graphql.Response (encoded once per plan and value, shared by the
// subscriptions that selected the same).
func (p *Push) Next() []byte {
	e := p.f.take(p.m)
	data, err := e.encode(context.Background(), p.s.cfg.Store, p.p)
	if err != nil {
		// Feed values carry the badges they were read with: encode has
		// nothing left to read.
		panic(err)
	}
	return data
}

type pusherKey struct{}

// WithPusher offers p to the subscription executed with ctx.
func WithPusher(ctx context.Context, p Pusher) context.Context {
	return context.WithValue(ctx, pusherKey{}, p)
}

// feeds are the open feeds by viewer, and the queue of feeds to re-read.
type feeds struct {
	mu       sync.Mutex
	byViewer map[engine.UserID]*feed

	qmu     sync.Mutex
	queue   []*feed
	head    int // queue[head:] waits
	readers int
}

// feed is one viewer's badge stream, shared by that viewer's plan-served
// subscriptions.
type feed struct {
	viewer  engine.UserID
	members int           // guarded by feeds.mu
	ready   chan struct{} // closed once the first read answered, with err
	err     error
	stop    func() // ends the hub watch

	queued, again bool // guarded by feeds.qmu: in the queue; read once more after
	// causes are the traced writes (engine.Cause) behind the wake-ups
	// since the last re-read, the latest maxCauses; the re-read's push
	// span links to them. Guarded by feeds.qmu.
	causes []engine.Cause

	mu   sync.Mutex
	last *pushEvent
	subs []*member
}

// member is one subscription of a feed.
type member struct {
	pusher  Pusher
	pending bool // guarded by feed.mu: last is not pushed yet
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

// maxReaders bounds the goroutines re-reading badges at once: enough to
// keep a remote store's round trips overlapped, few enough not to crowd
// the CPUs on the embedded one.
var maxReaders = 8 * runtime.GOMAXPROCS(0)

// join adds a member to viewer's feed, starting the feed (a hub watch and
// the first read) if it is the first. The reads run outside the lock, so
// viewers join in parallel. It fails only when the store does; the
// caller then leaves.
func (s *Schema) join(viewer engine.UserID) (*feed, error) {
	s.feeds.mu.Lock()
	f := s.feeds.byViewer[viewer]
	if f != nil {
		f.members++
		s.feeds.mu.Unlock()
		<-f.ready
		return f, f.err
	}
	f = &feed{viewer: viewer, members: 1, ready: make(chan struct{})}
	if s.feeds.byViewer == nil {
		s.feeds.byViewer = make(map[engine.UserID]*feed)
	}
	s.feeds.byViewer[viewer] = f
	s.feeds.mu.Unlock()

	// Watched before the first read: a change after the read is re-read.
	ctx := context.Background()
	stop, err := s.cfg.Hub.WatchUnreadFunc(ctx, viewer, func(c engine.Cause) { s.reread(f, c) })
	var u engine.Unread
	if err == nil {
		if u, err = s.cfg.Store.Unread(ctx, viewer); err != nil {
			stop()
		}
	}
	if err != nil {
		f.err = err
		s.feeds.mu.Lock()
		if s.feeds.byViewer[viewer] == f {
			delete(s.feeds.byViewer, viewer) // the next subscriber tries afresh
		}
		s.feeds.mu.Unlock()
		close(f.ready)
		return f, err
	}
	f.stop = stop
	f.mu.Lock()
	f.last = &pushEvent{viewer: &model.Viewer{UserID: viewer, Unread: &u}}
	f.mu.Unlock()
	close(f.ready)
	return f, nil
}

// leave removes a member; the last one out ends the feed.
func (s *Schema) leave(f *feed, m *member) {
	if m != nil {
		f.mu.Lock()
		for i, x := range f.subs {
			if x == m {
				f.subs[i] = f.subs[len(f.subs)-1]
				f.subs[len(f.subs)-1] = nil
				f.subs = f.subs[:len(f.subs)-1]
				break
			}
		}
		f.mu.Unlock()
	}
	s.feeds.mu.Lock()
	f.members--
	last := f.members == 0
	if last && s.feeds.byViewer[f.viewer] == f {
		delete(s.feeds.byViewer, f.viewer)
	}
	s.feeds.mu.Unlock()
	if last && f.stop != nil {
		f.stop()
	}
}

// maxCauses bounds the causes a feed keeps between two re-reads: a push
// links to a handful of writes, not to every one of a burst.
const maxCauses = 8

// reread queues f for a re-read of its badges, for a change caused by c.
// The hub calls it with its lock held, on the store's delivery goroutine:
// it only queues.
func (s *Schema) reread(f *feed, c engine.Cause) {
	q := &s.feeds
	q.qmu.Lock()
	if c != (engine.Cause{}) {
		if len(f.causes) == maxCauses {
			f.causes = append(f.causes[:0], f.causes[1:]...)
		}
		f.causes = append(f.causes, c)
	}
	if f.queued {
		f.again = true
		q.qmu.Unlock()
		return
	}
	f.queued = true
	q.queue = append(q.queue, f)
	start := q.readers < maxReaders
	if start {
		q.readers++
	}
	q.qmu.Unlock()
	if start {
		go s.readFeeds()
	}
}

// unreadBatcher is a store that reads many viewers' badges in the round
// trips of one (redisstore.Store): a broadcast's re-reads then cost a
// round trip per batch, not per viewer.
type unreadBatcher interface {
	UnreadMany(ctx context.Context, viewers []engine.UserID, out []engine.Unread) error
}

// readBatch is how many feeds a reader re-reads at once from an
// unreadBatcher.
const readBatch = 64

// readFeeds re-reads queued feeds until the queue is empty.
func (s *Schema) readFeeds() {
	q := &s.feeds
	n := 1
	if _, ok := s.cfg.Store.(unreadBatcher); ok {
		n = readBatch
	}
	batch := make([]*feed, 0, n)
	var causes []engine.Cause
	for {
		q.qmu.Lock()
		take := min(n, len(q.queue)-q.head)
		if take == 0 {
			q.queue, q.head = nil, 0
			q.readers--
			q.qmu.Unlock()
			return
		}
		batch = append(batch[:0], q.queue[q.head:q.head+take]...)
		clear(q.queue[q.head : q.head+take])
		q.head += take
		causes = causes[:0]
		for _, f := range batch {
			for _, c := range f.causes {
				if !slices.Contains(causes, c) {
					causes = append(causes, c)
				}
			}
			f.causes = f.causes[:0]
		}
		q.qmu.Unlock()

		s.refresh(batch, causes)

		q.qmu.Lock()
		for _, f := range batch {
			if f.again {
				f.again = false
				q.queue = append(q.queue, f)
			} else {
				f.queued = false
			}
		}
		q.qmu.Unlock()
	}
}

// refresh re-reads the badges of feeds and, for each whose badges
// changed, wakes the members that have pushed the previous value. The
// re-read is traced as the feeds' push (a root span: the subscriptions
// began long before), linked to the writes that caused it.
func (s *Schema) refresh(feeds []*feed, causes []engine.Cause) {
	viewers := make([]engine.UserID, 0, len(feeds))
	ready := feeds[:0:0]
	for _, f := range feeds {
		<-f.ready
		if f.err == nil {
			viewers = append(viewers, f.viewer)
			ready = append(ready, f)
		}
	}
	read := make([]engine.Unread, len(viewers))
	ctx := context.Background()
	if s.cfg.TracePushes {
		var span trace.Span
		ctx, span = tracing.StartPush(ctx, "unreadChanged", causes)
		defer span.End()
	}
	if b, ok := s.cfg.Store.(unreadBatcher); ok && len(viewers) > 1 {
		if b.UnreadMany(ctx, viewers, read) != nil {
			return // a store hiccup: the next change re-reads
		}
	} else {
		for i, v := range viewers {
			var err error
			if read[i], err = s.cfg.Store.Unread(ctx, v); err != nil {
				read[i] = engine.Unread{}
				ready[i] = nil // likewise, for this one
			}
		}
	}
	for i, f := range ready {
		if f != nil {
			f.publish(read[i])
		}
	}
}

// publish makes u f's latest value if it differs from the last, and wakes
// the members that have pushed the previous one.
func (f *feed) publish(u engine.Unread) {
	var buf [4]*member
	wake := buf[:0]
	f.mu.Lock()
	if *f.last.viewer.Unread == u {
		f.mu.Unlock()
		return // a wake-up that changed nothing visible
	}
	f.last = &pushEvent{viewer: &model.Viewer{UserID: f.viewer, Unread: &u}}
	for _, m := range f.subs {
		if !m.pending {
			m.pending = true
			wake = append(wake, m)
		}
	}
	f.mu.Unlock()
	for _, m := range wake {
		m.pusher.Wake()
	}
}

// take returns f's latest value for m, which has it pushed.
func (f *feed) take(m *member) *pushEvent {
	f.mu.Lock()
	defer f.mu.Unlock()
	m.pending = false
	return f.last
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
	if p.anonymous {
		if sh := p.shared.Load(); sh != nil && sh.unread == *u {
			e.enc = append(e.enc, encoded{p, sh.data})
			return sh.data, nil
		}
	}
	root := &p.root[0]
	buf := make([]byte, 0, p.sizeHint.Load()+16)
	buf = append(buf, '{')
	buf = append(buf, root.key...)
	buf = writeViewer(buf, root.obj, nil, v.UserID, u)
	buf = append(buf, '}')
	p.sizeHint.Store(int64(len(buf)))
	if p.anonymous {
		p.shared.Store(&sharedPush{unread: *u, data: buf})
	}
	e.enc = append(e.enc, encoded{p, buf})
	return buf, nil
}

// subscribe serves an unreadChanged subscription whose selection needs
// nothing but the badges, from the viewer's feed: no executor run per
// push, no goroutine between pushes, and none of the operation's
// per-request state kept (the transport holds a Push). It returns nil when gqlgen must
// serve the subscription: a transport that offers no Pusher, an
// anonymous or bad token (which gqlgen reports), a store error (which
// gqlgen reports by running the resolver itself).
func (s *Schema) subscribe(ctx context.Context, opCtx *graphql.OperationContext, p *plan) graphql.ResponseHandler {
	pusher, _ := ctx.Value(pusherKey{}).(Pusher)
	if pusher == nil || s.cfg.Hub == nil {
		return nil
	}
	pr, err := auth.From(ctx)
	if err != nil || pr.User == 0 {
		return nil
	}
	f, err := s.join(pr.User)
	if err != nil {
		s.leave(f, nil)
		return nil
	}
	m := &member{pusher: pusher, pending: true}
	f.mu.Lock()
	f.subs = append(f.subs, m)
	f.mu.Unlock()
	s.count(true)
	push := &Push{s: s, f: f, m: m, p: p}
	pusher.Accept(push)
	// The transport sends push.Next() instead; the handler answers as
	// gqlgen's executor would, for a caller that asks it anyway (field
	// middleware sees one resolver call per value).
	return func(rctx context.Context) *graphql.Response {
		if ctx.Err() != nil {
			return nil
		}
		e := f.take(m)
		fc := &graphql.FieldContext{Object: "Subscription", IsResolver: true, IsMethod: true}
		if fields := graphql.CollectFields(opCtx, opCtx.Operation.SelectionSet, []string{"Subscription"}); len(fields) == 1 {
			fc.Field = fields[0]
		}
		opCtx.ResolverMiddleware(graphql.WithFieldContext(rctx, fc), func(context.Context) (any, error) { return e.viewer, nil })
		data, err := e.encode(rctx, s.cfg.Store, p)
		if err != nil {
			graphql.AddError(graphql.WithPathContext(rctx, graphql.NewPathWithField(fc.Field.Alias)), err)
			return &graphql.Response{Data: []byte("null")}
		}
		return &graphql.Response{Data: data}
	}
}
