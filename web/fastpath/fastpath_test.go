package fastpath

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/validator"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/embedded"
	"github.com/tally-dev/tally/graph"
	"github.com/tally-dev/tally/web/auth"
	"github.com/tally-dev/tally/web/hub"
)

// The byte-for-byte agreement with gqlgen is proven end to end in the
// root package (fastpath_diff_test.go, fastpath_sub_test.go); these tests
// cover what only shows here: which operations compile, the bounds, and
// that a failed read hands the operation back.

var schema = graph.NewExecutableSchema(graph.Config{})

func opContext(t *testing.T, query string, vars map[string]any) *graphql.OperationContext {
	t.Helper()
	return withVars(t, parse(t, query), vars)
}

// parse parses and validates query, as gqlgen's query cache keeps it: the
// same document for every request that sends the same text.
func parse(t *testing.T, query string) *ast.QueryDocument {
	t.Helper()
	doc, errs := gqlparser.LoadQueryWithRules(schema.Schema(), query, nil)
	if errs != nil {
		t.Fatalf("%s: %v", query, errs)
	}
	return doc
}

func withVars(t *testing.T, doc *ast.QueryDocument, vars map[string]any) *graphql.OperationContext {
	t.Helper()
	op := doc.Operations.ForName("")
	v, err := validator.VariableValues(schema.Schema(), op, vars)
	if err != nil {
		t.Fatal(err)
	}
	return &graphql.OperationContext{Doc: doc, Operation: op, Variables: v}
}

func TestWhatCompiles(t *testing.T) {
	s := Wrap(schema, Config{})
	cases := []struct {
		query string
		plan  bool
	}{
		{`{ posts(ids: ["1"]) { id createdAt author { id postCount } counts { id likes } viewerHasLiked viewerHasFavorited } }`, true},
		{`{ __typename a: post(id: "1") { ...F } viewer { id user { followerCount } unread { total } redDot } user(id: "2") { followingCount } } fragment F on Post { id }`, true},
		{`query($x: Boolean!) { post(id: "1") { id @skip(if: $x) ... on Post @include(if: $x) { counts { views } } } }`, true},
		{`subscription { unreadChanged { id redDot unread { total } user { id } } }`, true},
		// Not plain data, or not a plan's to answer.
		{`mutation { likePost(postId: "1") { id } }`, false},
		{`{ posts(ids: ["1"]) { id } systemNotifications { id } }`, false},
		{`{ __schema { queryType { name } } }`, false},
		{`{ __type(name: "Post") { name } }`, false},
		{`{ group(id: "1") { id } }`, false},
		{`subscription { unreadChanged { user { postCount } } }`, false},
		{`subscription { readReceiptsChanged(messageId: "1") { readCount } }`, false},
	}
	for _, c := range cases {
		opCtx := opContext(t, c.query, map[string]any{"x": true})
		if got := s.planFor(opCtx) != nil; got != c.plan {
			t.Errorf("%s: plan = %v, want %v", c.query, got, c.plan)
		}
	}
}

func TestVariantsFollowSkipAndInclude(t *testing.T) {
	s := Wrap(schema, Config{})
	q := parse(t, `query($a: Boolean!, $b: Boolean!) { post(id: "1") { id @skip(if: $a) counts @include(if: $b) { likes } } }`)
	seen := map[*plan]bool{}
	for _, a := range []bool{false, true} {
		for _, b := range []bool{false, true} {
			p := s.planFor(withVars(t, q, map[string]any{"a": a, "b": b}))
			if p == nil || seen[p] {
				t.Fatalf("a=%v b=%v: plan %p (seen before: %v)", a, b, p, seen[p])
			}
			seen[p] = true
			var fields []string
			for _, f := range p.root[0].obj {
				fields = append(fields, string(f.key))
			}
			want := map[[2]bool]string{
				{false, false}: `"id":`,
				{true, false}:  ``,
				{false, true}:  `"id": ,"counts":`,
				{true, true}:   `"counts":`,
			}[[2]bool{a, b}]
			if got := strings.Join(fields, " "); got != want {
				t.Errorf("a=%v b=%v: fields %q, want %q", a, b, got, want)
			}
		}
	}
	// The same values find the same plan.
	if p := s.planFor(withVars(t, q, map[string]any{"a": true, "b": true})); !seen[p] {
		t.Fatal("a repeated variant compiled again")
	}
}

func TestBounds(t *testing.T) {
	s := Wrap(schema, Config{CacheSize: 3})
	for i := range 10 {
		s.planFor(opContext(t, fmt.Sprintf(`{ post(id: "%d") { id } }`, i+1), nil))
		if n := len(s.cache.ops); n > 3 {
			t.Fatalf("cache holds %d operations, bound 3", n)
		}
	}
	// More @skip combinations than maxVariants: past the bound, gqlgen.
	var decl, sel []string
	for i := range 6 {
		decl = append(decl, fmt.Sprintf("$c%d: Boolean!", i))
		sel = append(sel, fmt.Sprintf("f%d: id @skip(if: $c%d)", i, i))
	}
	q := parse(t, "query("+strings.Join(decl, ", ")+`) { post(id: "1") { `+strings.Join(sel, " ")+" } }")
	plans := 0
	for m := range 1 << 6 {
		vars := map[string]any{}
		for i := range 6 {
			vars[fmt.Sprintf("c%d", i)] = m&(1<<i) != 0
		}
		if s.planFor(withVars(t, q, vars)) != nil {
			plans++
		}
	}
	if plans != maxVariants {
		t.Fatalf("%d variants compiled, want the bound %d", plans, maxVariants)
	}
}

// failingStore fails the reads a plan makes.
type failingStore struct {
	engine.Store
	page, users, unread bool
}

var errDown = fmt.Errorf("%w: test", engine.ErrUnavailable)

func (f failingStore) Page(ctx context.Context, v engine.UserID, ids []engine.PostID, w engine.PageWant, out []engine.PostView) error {
	if f.page {
		return errDown
	}
	return f.Store.Page(ctx, v, ids, w, out)
}

func (f failingStore) UserCounts(ctx context.Context, ids []engine.UserID) ([]engine.UserCounts, error) {
	if f.users {
		return nil, errDown
	}
	return f.Store.UserCounts(ctx, ids)
}

func (f failingStore) Unread(ctx context.Context, v engine.UserID) (engine.Unread, error) {
	if f.unread {
		return engine.Unread{}, errDown
	}
	return f.Store.Unread(ctx, v)
}

func TestFailedReadsGoToGqlgen(t *testing.T) {
	store, err := embedded.Open(embedded.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	id, err := store.CreatePost(t.Context(), 5, 0, "")
	if err != nil {
		t.Fatal(err)
	}
	q := fmt.Sprintf(`{ posts(ids: ["%d"]) { author { postCount } } viewer { unread { total } } }`, id)
	p := Wrap(schema, Config{}).planFor(opContext(t, q, nil))
	if p == nil {
		t.Fatal("no plan")
	}
	if data, ok := p.run(t.Context(), store, nil, 7); !ok || !strings.Contains(string(data), `"postCount":1`) {
		t.Fatalf("healthy store: %s, %v", data, ok)
	}
	for _, f := range []failingStore{{page: true}, {users: true}, {unread: true}} {
		f.Store = store
		if data, ok := p.run(t.Context(), f, nil, 7); ok {
			t.Errorf("%+v: served %s", f, data)
		}
	}
	// An anonymous viewer is UNAUTHENTICATED on viewer: gqlgen's to say.
	if _, ok := p.run(t.Context(), store, nil, 0); ok {
		t.Error("anonymous viewer served")
	}
}

func TestArgumentsGqlgenWouldRefuse(t *testing.T) {
	store, err := embedded.Open(embedded.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	s := Wrap(schema, Config{})
	many := make([]any, engine.MaxIDsPerCall+1)
	for i := range many {
		many[i] = "1"
	}
	for _, c := range []struct {
		q    string
		vars map[string]any
	}{
		{`query($ids: [ID!]!) { posts(ids: $ids) { id } }`, map[string]any{"ids": many}},
		{`query($ids: [ID!]!) { posts(ids: $ids) { id } }`, map[string]any{"ids": []any{"1", "0"}}},
		{`{ post(id: "-1") { id } }`, nil},
		{`{ post(id: "18446744073709551616") { id } }`, nil},
		{`{ user(id: "x") { id } }`, nil},
	} {
		opCtx := opContext(t, c.q, c.vars)
		p := s.planFor(opCtx)
		if p == nil {
			t.Fatalf("%s: no plan", c.q)
		}
		if data, ok := p.run(t.Context(), store, opCtx.Variables, 1); ok {
			t.Errorf("%s %v: served %s", c.q, c.vars, data)
		}
	}
}

// countingStore counts badge reads and fails them while told to.
type countingStore struct {
	engine.Store
	mu    sync.Mutex
	reads int
	fail  bool
}

func (c *countingStore) Unread(ctx context.Context, v engine.UserID) (engine.Unread, error) {
	c.mu.Lock()
	c.reads++
	fail := c.fail
	c.mu.Unlock()
	if fail {
		return engine.Unread{}, errDown
	}
	return c.Store.Unread(ctx, v)
}

func (c *countingStore) set(fail bool) (reads int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.fail = fail
	return c.reads
}

// pushCounter is a transport's Pusher: it counts what the fast path tells
// it and pushes nothing by itself.
type pushCounter struct {
	push  *Push
	wakes chan struct{}
}

func (p *pushCounter) Accept(push *Push) { p.push = push }

// stopWith stops p's push when ctx ends, as a transport does.
func (p *pushCounter) stopWith(ctx context.Context) {
	if p.push != nil {
		context.AfterFunc(ctx, p.push.Stop)
	}
}
func (p *pushCounter) Wake() { p.wakes <- struct{}{} }

func (p *pushCounter) woken(t *testing.T) {
	t.Helper()
	select {
	case <-p.wakes:
	case <-time.After(5 * time.Second):
		t.Fatal("no wake-up")
	}
}

func TestPushesShareOneFeedPerViewer(t *testing.T) {
	base, err := embedded.Open(embedded.Options{})
	if err != nil {
		t.Fatal(err)
	}
	store := &countingStore{Store: base}
	h := hub.New(base)
	t.Cleanup(func() { h.Close(); base.Close() })
	s := Wrap(schema, Config{Store: store, Hub: h})
	doc := parse(t, `subscription { unreadChanged { redDot unread { total } } }`)
	// sub subscribes as user; next is the transport's next push (nil when
	// the subscription was left to gqlgen).
	sub := func(ctx context.Context, user engine.UserID) (next func() string, p *pushCounter) {
		opCtx := withVars(t, doc, nil)
		opCtx.ResolverMiddleware = func(ctx context.Context, next graphql.Resolver) (any, error) { return next(ctx) }
		p = &pushCounter{wakes: make(chan struct{}, 4)}
		ctx = graphql.WithResponseContext(auth.With(WithPusher(ctx, p), auth.Principal{User: user}, nil), graphql.DefaultErrorPresenter, nil)
		h := s.subscribe(ctx, opCtx, s.planFor(opCtx))
		p.stopWith(ctx)
		if (h == nil) != (p.push == nil) {
			t.Fatalf("handler %v, push %v", h != nil, p.push != nil)
		}
		if h == nil {
			return nil, p
		}
		return func() string { return string(p.push.Next()) }, p
	}
	// Without a Pusher, gqlgen serves it.
	opCtx := withVars(t, doc, nil)
	if h := s.subscribe(auth.With(t.Context(), auth.Principal{User: 7}, nil), opCtx, s.planFor(opCtx)); h != nil {
		t.Fatal("served by pushes without a Pusher")
	}

	ctx1, end1 := context.WithCancel(t.Context())
	ctx2, end2 := context.WithCancel(t.Context())
	next1, p1 := sub(ctx1, 7)
	next2, p2 := sub(ctx2, 7)
	if next1 == nil || next2 == nil || store.set(false) != 1 {
		t.Fatalf("two subscriptions of one viewer: pushed %v %v, badge reads %d, want 1", next1 != nil, next2 != nil, store.set(false))
	}
	// The first value is there at once, encoded once for both.
	want := `{"unreadChanged":{"redDot":false,"unread":{"total":0}}}`
	if a, b := p1.push.Next(), p2.push.Next(); string(a) != want || &a[0] != &b[0] {
		t.Fatalf("first pushes %s and %s, want %s encoded once", a, b, want)
	}
	if watchers, _ := h.Watchers(); watchers != 1 {
		t.Fatalf("%d hub watchers for one viewer's feed", watchers)
	}
	// A change wakes each subscription once, after one read.
	if err := base.PushRedDot(t.Context()); err != nil {
		t.Fatal(err)
	}
	p1.woken(t)
	p2.woken(t)
	if reads := store.set(false); reads != 2 {
		t.Fatalf("%d badge reads after one change, want 2", reads)
	}
	// A second change before the first is pushed does not wake again;
	// the next push is the latest value.
	if _, err := base.PublishNotification(t.Context(), "t", "b", ""); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for store.set(false) < 3 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	if len(p1.wakes) != 0 || len(p2.wakes) != 0 {
		t.Fatal("woken again before the previous value was pushed")
	}
	want = `{"unreadChanged":{"redDot":true,"unread":{"total":1}}}`
	if got := next1(); got != want {
		t.Fatalf("push %s, want %s", got, want)
	}
	// Pushed, it is woken by the next change; the other, with a value
	// still to push, is not, and pushes the latest.
	if err := base.ClickRedDot(t.Context(), 7); err != nil {
		t.Fatal(err)
	}
	p1.woken(t)
	time.Sleep(50 * time.Millisecond)
	if len(p2.wakes) != 0 {
		t.Fatal("a subscription with a value still to push was woken")
	}
	want = `{"unreadChanged":{"redDot":false,"unread":{"total":1}}}`
	if got := next2(); got != want {
		t.Fatalf("push %s, want the latest %s", got, want)
	}

	// The last subscription out ends the feed and its watch.
	end1()
	end2()
	deadline = time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		s.feeds.mu.Lock()
		open := len(s.feeds.byViewer)
		s.feeds.mu.Unlock()
		if watchers, _ := h.Watchers(); open == 0 && watchers == 0 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	s.feeds.mu.Lock()
	open := len(s.feeds.byViewer)
	s.feeds.mu.Unlock()
	if watchers, _ := h.Watchers(); open != 0 || watchers != 0 {
		t.Fatalf("%d feeds and %d hub watchers after every subscription ended", open, watchers)
	}
	// A store error leaves the subscription to gqlgen, and the next
	// subscriber tries afresh.
	store.set(true)
	if next, _ := sub(t.Context(), 8); next != nil {
		t.Fatal("served a subscription whose first read failed")
	}
	store.set(false)
	if next, _ := sub(t.Context(), 8); next == nil {
		t.Fatal("after a failure, the next subscriber was not served")
	}
}

// batchingStore reads badges in batches, as redisstore does, and counts
// the batches.
type batchingStore struct {
	engine.Store
	mu      sync.Mutex
	batches int
	largest int
}

func (b *batchingStore) UnreadMany(ctx context.Context, viewers []engine.UserID, out []engine.Unread) error {
	b.mu.Lock()
	b.batches++
	b.largest = max(b.largest, len(viewers))
	b.mu.Unlock()
	for i, v := range viewers {
		u, err := b.Store.Unread(ctx, v)
		if err != nil {
			return err
		}
		out[i] = u
	}
	return nil
}

// A broadcast's re-reads come in batches from a store that batches, and
// every feed still gets its own value.
func TestBroadcastReReadsInBatches(t *testing.T) {
	base, err := embedded.Open(embedded.Options{})
	if err != nil {
		t.Fatal(err)
	}
	store := &batchingStore{Store: base}
	h := hub.New(base)
	t.Cleanup(func() { h.Close(); base.Close() })
	s := Wrap(schema, Config{Store: store, Hub: h})
	doc := parse(t, `subscription { unreadChanged { id redDot } }`)
	const viewers = 500
	pushers := make([]*pushCounter, viewers)
	for i := range pushers {
		opCtx := withVars(t, doc, nil)
		p := &pushCounter{wakes: make(chan struct{}, 4)}
		ctx := auth.With(WithPusher(t.Context(), p), auth.Principal{User: engine.UserID(100 + i)}, nil)
		if s.subscribe(ctx, opCtx, s.planFor(opCtx)) == nil {
			t.Fatal("not served by pushes")
		}
		p.stopWith(t.Context())
		p.push.Next()
		pushers[i] = p
	}
	if err := base.PushRedDot(t.Context()); err != nil {
		t.Fatal(err)
	}
	for i, p := range pushers {
		p.woken(t)
		if got, want := string(p.push.Next()), fmt.Sprintf(`{"unreadChanged":{"id":"%d","redDot":true}}`, 100+i); got != want {
			t.Fatalf("push %s, want %s", got, want)
		}
	}
	store.mu.Lock()
	defer store.mu.Unlock()
	if store.batches == 0 || store.batches > viewers/4 || store.largest < 8 {
		t.Fatalf("%d viewers re-read in %d batches (the largest %d)", viewers, store.batches, store.largest)
	}
	t.Logf("%d viewers re-read in %d batches (the largest %d)", viewers, store.batches, store.largest)
}

// Viewers with the same badges share one encoding when the selection
// shows nothing of the viewer; with the viewer's id, each has its own.
func TestBroadcastSharesEncodings(t *testing.T) {
	base, err := embedded.Open(embedded.Options{})
	if err != nil {
		t.Fatal(err)
	}
	h := hub.New(base)
	t.Cleanup(func() { h.Close(); base.Close() })
	s := Wrap(schema, Config{Store: base, Hub: h})
	for query, shared := range map[string]bool{
		`subscription { unreadChanged { redDot unread { system total } } }`: true,
		`subscription { unreadChanged { id redDot } }`:                      false,
		`subscription { unreadChanged { user { id } redDot } }`:             false,
	} {
		doc := parse(t, query)
		var first []byte
		for i := range 3 {
			opCtx := withVars(t, doc, nil)
			p := &pushCounter{wakes: make(chan struct{}, 4)}
			ctx, end := context.WithCancel(t.Context())
			defer end()
			ctx = auth.With(WithPusher(ctx, p), auth.Principal{User: engine.UserID(200 + i)}, nil)
			if s.subscribe(ctx, opCtx, s.planFor(opCtx)) == nil {
				t.Fatalf("%s: not served by pushes", query)
			}
			p.stopWith(ctx)
			data := p.push.Next()
			if first == nil {
				first = data
			} else if same := &first[0] == &data[0]; same != shared {
				t.Fatalf("%s: viewer %d's push %s shares the first's encoding: %v", query, i, data, same)
			}
		}
	}
}
