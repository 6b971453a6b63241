package transport

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/handler/extension"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/embedded"
	"github.com/tally-dev/tally/engine/snowflake"
	"github.com/tally-dev/tally/web/auth"
	"github.com/tally-dev/tally/web/hub"
)

// observed is the operation context one request went on with.
type observedOp struct {
	opCtx *graphql.OperationContext
	errs  gqlerror.List
	fast  bool
}

// contextPair is a handler with the fast path and one without on one store,
// with the operation context of the last request each served.
type contextPair struct {
	fast, gqlgen http.Handler
	keys         *auth.Keys
	known        []string
	last         *observedOp
}

func newContextPair(t *testing.T, cfg Config) *contextPair {
	t.Helper()
	store, err := embedded.Open(embedded.Options{})
	if err != nil {
		t.Fatal(err)
	}
	keys, err := auth.NewKeys([]byte("test-secret-0123456789"))
	if err != nil {
		t.Fatal(err)
	}
	h := hub.New(store)
	t.Cleanup(func() { h.Close(); store.Close() })
	p := &contextPair{keys: keys}
	mk := func(disable bool) http.Handler {
		c := cfg
		c.Store, c.Hub, c.Keys, c.Metrics, c.DisableFastPath = store, h, keys, prometheus.NewRegistry(), disable
		return NewHandler(c)
	}
	p.fast, p.gqlgen = mk(false), mk(true)
	ctx := context.Background()
	now := time.Now().Add(-time.Hour).UnixMilli()
	for i := range 8 {
		id, err := store.CreatePost(ctx, engine.UserID(1+i%3), engine.PostID(snowflake.Make(now+int64(i)*977, 5, uint64(i))), "")
		if err != nil {
			t.Fatal(err)
		}
		store.Like(ctx, 1, id)
		p.known = append(p.known, fmt.Sprint(id))
	}
	observeOperation = func(opCtx *graphql.OperationContext, errs gqlerror.List, fast bool) {
		p.last = &observedOp{opCtx, errs, fast}
	}
	t.Cleanup(func() { observeOperation = nil })
	return p
}

func (p *contextPair) serve(h http.Handler, body map[string]any, authz string) (*httptest.ResponseRecorder, *observedOp) {
	b, _ := json.Marshal(body)
	req := httptest.NewRequest("POST", "/query", bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	if authz != "" {
		req.Header.Set("Authorization", authz)
	}
	w := httptest.NewRecorder()
	p.last = nil
	h.ServeHTTP(w, req)
	return w, p.last
}

// contextDocs are documents plans answer, with generators of their variables.
func contextDocs(p *contextPair, r *rand.Rand) []struct {
	query string
	vars  func() map[string]any
} {
	id := func() any {
		switch r.IntN(6) {
		case 0:
			return "9" + fmt.Sprint(r.Uint64N(1<<40))
		case 1:
			return json.Number(fmt.Sprint(r.Uint64N(1 << 31)))
		}
		return p.known[r.IntN(len(p.known))]
	}
	ids := func(max int) []any {
		l := make([]any, r.IntN(max+1))
		for i := range l {
			l[i] = id()
		}
		return l
	}
	return []struct {
		query string
		vars  func() map[string]any
	}{
		{`query Feed($ids: [ID!]!) { posts(ids: $ids) { id author { id postCount } counts { likes views } viewerHasLiked } }`,
			func() map[string]any { return map[string]any{"ids": ids(60)} }},
		{`query($a: [ID!]!, $b: [ID], $s: Boolean!, $i: Boolean) { x: posts(ids: $a) { id @skip(if: $s) ...F } y: posts(ids: $b) @include(if: $i) { counts { likes } } } fragment F on Post { counts { comments @include(if: $s) } }`,
			func() map[string]any {
				v := map[string]any{"a": ids(20), "s": r.IntN(2) == 0, "i": r.IntN(2) == 0}
				if r.IntN(3) > 0 {
					v["b"] = ids(10)
				}
				if r.IntN(4) == 0 {
					v["extra"] = "ignored"
				}
				return v
			}},
		{`query($id: ID!, $u: ID) { post(id: $id) { id createdAt } user(id: $u) { followerCount } posts(ids: ["` + p.known[0] + `", $id]) { id } }`,
			func() map[string]any {
				return map[string]any{"id": id(), "u": []any{"1", "2", json.Number("3")}[r.IntN(3)]}
			}},
		{`{ viewer { id unread { total } redDot } posts(ids: []) { id } }`, func() map[string]any { return nil }},
	}
}

// TestPlanContextsMatchGqlgen: for requests plans answer, the operation context
// planContexts makes is the one gqlgen's CreateOperationContext makes for the
// same request — the same document (learnt), variables, extensions'
// effects and, for a request other than the one its price was learnt
// from, the same price.
func TestPlanContextsMatchGqlgen(t *testing.T) {
	p := newContextPair(t, Config{})
	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 3))
	docs := contextDocs(p, r)
	fast0 := FastOperationContexts()
	fastN := 0
	for n := range 3000 {
		d := docs[r.IntN(len(docs))]
		authz := ""
		if n%4 != 0 {
			tok, _ := p.keys.Sign(engine.UserID(1+r.IntN(3)), false, 0)
			authz = "Bearer " + tok
		}
		body := map[string]any{"query": d.query}
		if v := d.vars(); v != nil {
			body["variables"] = v
		}
		_, want := p.serve(p.gqlgen, body, authz)
		gotResp, got := p.serve(p.fast, body, authz)
		wantResp, _ := p.serve(p.gqlgen, body, authz)
		if got.opCtx == nil || want.opCtx == nil {
			t.Fatalf("no operation context observed")
		}
		if gotResp.Body.String() != wantResp.Body.String() {
			t.Fatalf("responses differ for %v:\nfast   %s\ngqlgen %s", body, gotResp.Body, wantResp.Body)
		}
		if !got.fast {
			continue
		}
		fastN++
		g, w := got.opCtx, want.opCtx
		if len(got.errs) != 0 || len(want.errs) != 0 {
			t.Fatalf("errors: fast %v, gqlgen %v", got.errs, want.errs)
		}
		if g.RawQuery != w.RawQuery || g.OperationName != w.OperationName ||
			g.Doc == nil || g.Operation == nil || g.Operation.Name != w.Operation.Name ||
			g.DisableIntrospection != w.DisableIntrospection ||
			!reflect.DeepEqual(g.Variables, w.Variables) ||
			!reflect.DeepEqual(g.Extensions, w.Extensions) ||
			!reflect.DeepEqual(g.Headers, w.Headers) {
			t.Fatalf("operation contexts differ for %v:\nfast   %+v\ngqlgen %+v", body, g, w)
		}
		for _, ext := range []string{"ComplexityLimit", "APQ"} {
			if gs, ws := g.Stats.GetExtension(ext), w.Stats.GetExtension(ext); !reflect.DeepEqual(gs, ws) {
				t.Fatalf("%s stats for %v: fast %#v, gqlgen %#v", ext, body, gs, ws)
			}
		}
		for _, fn := range [][2]any{{g.RecoverFunc, w.RecoverFunc}, {g.ResolverMiddleware, w.ResolverMiddleware}, {g.RootResolverMiddleware, w.RootResolverMiddleware}} {
			if reflect.ValueOf(fn[0]).Pointer() != reflect.ValueOf(fn[1]).Pointer() {
				t.Fatal("the executor's functions differ")
			}
		}
		if g.Stats.OperationStart.IsZero() || g.Stats.Validation.End.IsZero() {
			t.Fatalf("timings not set: %+v", g.Stats)
		}
	}
	if fastN < 1000 || FastOperationContexts()-fast0 < uint64(fastN) {
		t.Fatalf("planContexts made %d of 3000 operation contexts", fastN)
	}
	t.Logf("%d of 3000 operation contexts made by planContexts", fastN)
}

// TestPlanContextsKeepLimits: the complexity limit, the cost budget and
// persisted queries hold for requests planContexts serves.
func TestPlanContextsKeepLimits(t *testing.T) {
	p := newContextPair(t, Config{ComplexityLimit: 400, CostRate: 0.001, CostBurst: 400})
	tok, _ := p.keys.Sign(1, false, 0)
	authz := "Bearer " + tok
	q := `query($ids: [ID!]!) { posts(ids: $ids) { id counts { likes views } author { id } } }`
	page := func(n int) map[string]any {
		ids := make([]any, n)
		for i := range ids {
			ids[i] = p.known[i%len(p.known)]
		}
		return map[string]any{"query": q, "variables": map[string]any{"ids": ids}}
	}
	// The first page is gqlgen's (and teaches the price), the next ones
	// planContexts', until the budget of 400 cannot pay for one more.
	_, first := p.serve(p.fast, page(10), authz)
	stats, _ := first.opCtx.Stats.GetExtension("ComplexityLimit").(*extension.ComplexityStats)
	if first.fast || stats == nil || stats.Complexity < 50 {
		t.Fatalf("first page: fast %v, stats %+v", first.fast, stats)
	}
	for i := 1; ; i++ {
		w, o := p.serve(p.fast, page(10), authz)
		if o == nil || !o.fast {
			t.Fatalf("page %d not made by planContexts: %s", i, w.Body)
		}
		if (i+1)*stats.Complexity <= 400 {
			if strings.Contains(w.Body.String(), "errors") {
				t.Fatalf("page %d of price %d within the budget: %s", i, stats.Complexity, w.Body)
			}
			continue
		}
		if !strings.Contains(w.Body.String(), `"RATE_LIMITED"`) || w.Header().Get("Retry-After") == "" {
			t.Fatalf("page %d of price %d over the budget: %s", i, stats.Complexity, w.Body)
		}
		break
	}
	// Over the complexity limit: never learnt, so always gqlgen's refusal
	// (each by a user of its own: a refusal spends the whole budget).
	for u := range 2 {
		w, o := p.serve(p.fast, page(100), "Bearer "+mustSign(t, p.keys, engine.UserID(10+u)))
		if o == nil || o.fast || !strings.Contains(w.Body.String(), "COMPLEXITY_LIMIT_EXCEEDED") {
			t.Fatalf("over the limit: fast %v %s", o.fast, w.Body)
		}
	}
	// A persisted query served by its hash reaches planContexts, with the APQ
	// extension's stats as gqlgen sets them.
	pq := `{ posts(ids: ["` + p.known[1] + `"]) { id } }`
	hash := "8e0fd4d5c1b8e8d2a0e3b1a6f8e7e5c2d8c7e1a1b6f6b5e0c9d4f9e8a7b6c5d4" // wrong on purpose first
	ext := func(h string) map[string]any {
		return map[string]any{"persistedQuery": map[string]any{"version": 1, "sha256Hash": h}}
	}
	if w, _ := p.serve(p.fast, map[string]any{"query": pq, "extensions": ext(hash)}, authz); !strings.Contains(w.Body.String(), "provided APQ hash does not match query") {
		t.Fatalf("bad hash: %s", w.Body)
	}
	hash = sha256Hex(pq)
	p.serve(p.fast, map[string]any{"query": pq, "extensions": ext(hash)}, "Bearer "+mustSign(t, p.keys, 3))
	w, o := p.serve(p.fast, map[string]any{"extensions": ext(hash)}, "Bearer "+mustSign(t, p.keys, 3))
	if !o.fast || !strings.Contains(w.Body.String(), `{"data":{"posts":[{"id":"`+p.known[1]+`"}]}}`) {
		t.Fatalf("persisted query by hash: fast %v %s", o.fast, w.Body)
	}
	if s, _ := o.opCtx.Stats.GetExtension("APQ").(*extension.ApqStats); s == nil || s.Hash != hash || s.SentQuery {
		t.Fatalf("APQ stats: %+v", s)
	}
}

func sha256Hex(s string) string {
	b := sha256.Sum256([]byte(s))
	return hex.EncodeToString(b[:])
}

func mustSign(t *testing.T, k *auth.Keys, user engine.UserID) string {
	tok, err := k.Sign(user, false, 0)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}
