package fastpath

import (
	"context"
	"errors"
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
	"github.com/tally-dev/tally/resolvers/model"
	"github.com/tally-dev/tally/web/auth"
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

// fakeBadges is an unreadChanged resolver under the test's control.
type fakeBadges struct {
	mu     sync.Mutex
	calls  int
	fail   bool
	out    chan *model.Viewer
	cancel []context.Context
}

func (f *fakeBadges) resolve(ctx context.Context) (<-chan *model.Viewer, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.fail {
		return nil, errors.New("down")
	}
	f.cancel = append(f.cancel, ctx)
	return f.out, nil
}

func TestPushesShareOneFeedPerViewer(t *testing.T) {
	badges := &fakeBadges{out: make(chan *model.Viewer, 4)}
	s := Wrap(schema, Config{UnreadChanged: badges.resolve})
	doc := parse(t, `subscription { unreadChanged { redDot unread { total } } }`)
	sub := func(ctx context.Context, user engine.UserID) graphql.ResponseHandler {
		opCtx := withVars(t, doc, nil)
		opCtx.ResolverMiddleware = func(ctx context.Context, next graphql.Resolver) (any, error) { return next(ctx) }
		ctx = graphql.WithResponseContext(auth.With(ctx, auth.Principal{User: user}, nil), graphql.DefaultErrorPresenter, nil)
		return s.subscribe(ctx, opCtx, s.planFor(opCtx))
	}
	ctx1, end1 := context.WithCancel(t.Context())
	ctx2, end2 := context.WithCancel(t.Context())
	h1, h2 := sub(ctx1, 7), sub(ctx2, 7)
	if h1 == nil || h2 == nil || badges.calls != 1 {
		t.Fatalf("two subscriptions of one viewer: handlers %v %v, resolver runs %d, want 1", h1 != nil, h2 != nil, badges.calls)
	}
	badges.out <- &model.Viewer{UserID: 7, Unread: &engine.Unread{Likes: 2, RedDot: true}}
	r1, r2 := h1(ctx1), h2(ctx2)
	want := `{"unreadChanged":{"redDot":true,"unread":{"total":2}}}`
	if string(r1.Data) != want || &r1.Data[0] != &r2.Data[0] {
		t.Fatalf("pushes %s and %s, want %s encoded once", r1.Data, r2.Data, want)
	}
	// The last subscription out ends the resolver's run.
	end1()
	end2()
	deadline := time.Now().Add(2 * time.Second)
	for badges.cancel[0].Err() == nil && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if badges.cancel[0].Err() == nil {
		t.Fatal("the feed outlived its subscriptions")
	}
	s.feeds.mu.Lock()
	open := len(s.feeds.byViewer)
	s.feeds.mu.Unlock()
	if open != 0 {
		t.Fatalf("%d feeds open after every subscription ended", open)
	}
	// A resolver error leaves the subscription to gqlgen, and the next
	// subscriber tries afresh.
	badges.fail = true
	if h := sub(t.Context(), 8); h != nil {
		t.Fatal("served a subscription whose resolver failed")
	}
	badges.fail = false
	if h := sub(t.Context(), 8); h == nil || badges.calls != 3 {
		t.Fatalf("after a failure: handler %v, resolver runs %d, want 3", h != nil, badges.calls)
	}
}
