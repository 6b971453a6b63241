package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/embedded"
	"github.com/tally-dev/tally/engine/snowflake"
	"github.com/tally-dev/tally/web/auth"
	"github.com/tally-dev/tally/web/fastpath"
	"github.com/tally-dev/tally/web/hub"
	"github.com/tally-dev/tally/web/transport"
)

// The differential proof of the fast path: generated operations run
// through a handler whose every operation goes to gqlgen's executor and
// through the default handler (plans where eligible) must give
// byte-identical HTTP responses: status, Content-Type and body.
// TestFastPathAgreesWithGqlgen runs for TALLY_DIFF_DURATION (default 2s);
// FuzzFastPathAgrees lets `go test -fuzz` mutate seeds and query text.

// diffPair is the two handlers on one seeded store.
type diffPair struct {
	gqlgen, fast http.Handler
	keys         *auth.Keys
	known        []string // post ids in the store
	authorless   string   // a post imported without its author
	deleted      string   // a repost, liked, then deleted
}

func newDiffPair(t testing.TB) *diffPair {
	return newDiffPairOn(t, func(s engine.Store) engine.Store { return s })
}

// newDiffPairOn seeds a store and serves it to both handlers through wrap.
func newDiffPairOn(t testing.TB, wrap func(engine.Store) engine.Store) *diffPair {
	t.Helper()
	// Reaction kinds beyond like, so that Post.reactions lists several
	// and viewerReaction reads other kinds than like.
	store, err := embedded.Open(embedded.Options{Reactions: []string{"like", "love", "wow_2"}})
	if err != nil {
		t.Fatal(err)
	}
	keys, err := auth.NewKeys([]byte("test-secret-0123456789"))
	if err != nil {
		t.Fatal(err)
	}
	h := hub.New(store)
	t.Cleanup(func() { h.Close(); store.Close() })
	mk := func(disable bool) http.Handler {
		return transport.NewHandler(transport.Config{Store: wrap(store), Hub: h, Keys: keys,
			Metrics: prometheus.NewRegistry(), DisableFastPath: disable})
	}
	d := &diffPair{gqlgen: mk(true), fast: mk(false), keys: keys}
	ctx := context.Background()
	now := time.Now().Add(-time.Hour).UnixMilli()
	for i := range 12 {
		id, err := store.CreatePost(ctx, engine.UserID(1+i%4), engine.PostID(snowflake.Make(now+int64(i)*1013, 3, uint64(i))), "")
		if err != nil {
			t.Fatal(err)
		}
		d.known = append(d.known, fmt.Sprint(id))
		for u := range i % 4 {
			store.Like(ctx, engine.UserID(1+u), id)
		}
		if i%2 == 0 {
			store.ReactToPost(ctx, engine.UserID(4+i%3), id, []string{"love", "wow_2", "love"}[i%3])
		}
		if i%3 == 0 {
			store.Favorite(ctx, 2, id)
			store.Comment(ctx, 3, id, 0, []engine.UserID{1}, "")
		}
		store.RecordViews(ctx, []engine.PostID{id, id})
	}
	store.Follow(ctx, 1, 2)
	store.Follow(ctx, 3, 2)
	store.PushRedDot(ctx)
	orphan := engine.PostID(snowflake.Make(now-5000, 3, 77))
	if err := store.Import(ctx, []engine.ImportRow{{Post: orphan, Counts: engine.Counts{Likes: 7, Views: 1 << 40}}}); err != nil {
		t.Fatal(err)
	}
	d.authorless = fmt.Sprint(orphan)
	d.known = append(d.known, d.authorless)
	// A deleted post reads as unknown (null); the original it reposted
	// and its author's postCount changed with it.
	gone, err := store.Repost(ctx, 2, engine.PostID(snowflake.Make(now, 3, 0)), nil, "")
	if err != nil {
		t.Fatal(err)
	}
	store.Like(ctx, 1, gone)
	if err := store.DeletePost(ctx, engine.Actor{User: 2}, gone); err != nil {
		t.Fatal(err)
	}
	d.deleted = fmt.Sprint(gone)
	return d
}

// request is one generated GraphQL request.
type request struct {
	Query         string         `json:"query"`
	OperationName string         `json:"operationName,omitempty"`
	Variables     map[string]any `json:"variables,omitempty"`
	Extensions    map[string]any `json:"extensions,omitempty"`
	auth          string         // Authorization header value
	get           bool
	raw           bool // POST body by handEncode, not json.Marshal
}

func (d *diffPair) serve(h http.Handler, r request) *httptest.ResponseRecorder {
	var req *http.Request
	if r.get {
		v, _ := json.Marshal(r.Variables)
		q := "query=" + urlEscape(r.Query)
		if r.Variables != nil {
			q += "&variables=" + urlEscape(string(v))
		}
		if r.OperationName != "" {
			q += "&operationName=" + urlEscape(r.OperationName)
		}
		req = httptest.NewRequest("GET", "/query?"+q, nil)
	} else {
		body, _ := json.Marshal(r)
		if r.raw {
			body = handEncode(r)
		}
		req = httptest.NewRequest("POST", "/query", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
	}
	if r.auth != "" {
		req.Header.Set("Authorization", r.auth)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w
}

func urlEscape(s string) string {
	var b strings.Builder
	for _, c := range []byte(s) {
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// compare runs r through both handlers and fails on any difference.
func (d *diffPair) compare(t testing.TB, r request) {
	t.Helper()
	if err := d.differ(r); err != "" {
		t.Fatal(err)
	}
}

// differ runs r through both handlers and describes any difference.
// The fast-path handler answers r three times: the second time it knows
// the document and makes the operation context itself
// (web/transport/plan_context.go) where the first was gqlgen's; the third body
// is written by hand (spacing, escapes, key order) for its decoder.
func (d *diffPair) differ(r request) string {
	a := d.serve(d.gqlgen, r)
	for i, which := range []string{"fast path", "fast path, again", "fast path, body by hand"} {
		if i == 2 {
			if r.get {
				break
			}
			r.raw = true
		}
		b := d.serve(d.fast, r)
		for _, h := range []string{"Content-Type", "Content-Length", "Allow"} {
			if a.Header().Get(h) != b.Header().Get(h) {
				return fmt.Sprintf("header %s: gqlgen %q, %s %q\nquery: %s\nvariables: %v", h, a.Header().Get(h), which, b.Header().Get(h), r.Query, r.Variables)
			}
		}
		if a.Code != b.Code || !bytes.Equal(a.Body.Bytes(), b.Body.Bytes()) && !sameErrorsUnordered(a.Body.Bytes(), b.Body.Bytes()) {
			return fmt.Sprintf("responses differ\nquery: %s\nvariables: %v\nauth: %q\ngqlgen    %d %s\n%s %d %s",
				r.Query, r.Variables, r.auth, a.Code, a.Body.Bytes(), which, b.Code, b.Body.Bytes())
		}
	}
	return ""
}

// sameErrorsUnordered accepts two bodies that differ only in the order of
// two or more errors: gqlgen resolves root fields concurrently, so it
// orders their errors differently from one run to the next by itself.
func sameErrorsUnordered(x, y []byte) bool {
	type body struct {
		Errors []json.RawMessage `json:"errors"`
		Data   json.RawMessage   `json:"data"`
	}
	var bx, by body
	if json.Unmarshal(x, &bx) != nil || json.Unmarshal(y, &by) != nil || len(bx.Errors) < 2 {
		return false
	}
	sortRaw := func(l []json.RawMessage) []string {
		out := make([]string, len(l))
		for i, e := range l {
			out[i] = string(e)
		}
		slices.Sort(out)
		return out
	}
	return bytes.Equal(bx.Data, by.Data) && slices.Equal(sortRaw(bx.Errors), sortRaw(by.Errors))
}

// gen generates random operations over the fast path's data fields and
// some that are not.
type gen struct {
	r     *rand.Rand
	d     *diffPair
	vars  map[string]any
	decls []string
	frags []string
	nvar  int
	nfrag int
	nroot int
}

func (g *gen) pick(n int) int { return g.r.IntN(n) }
func (g *gen) chance(p float64) bool {
	return g.r.Float64() < p
}

// variable declares a variable of typ holding v and returns its name.
func (g *gen) variable(typ string, v any) string {
	g.nvar++
	name := fmt.Sprintf("v%d", g.nvar)
	g.decls = append(g.decls, "$"+name+": "+typ)
	g.vars[name] = v
	return "$" + name
}

func (g *gen) directive() string {
	if !g.chance(0.2) {
		return ""
	}
	name := []string{"skip", "include"}[g.pick(2)]
	val := g.chance(0.5)
	if g.chance(0.5) {
		return fmt.Sprintf(" @%s(if: %v)", name, val)
	}
	return fmt.Sprintf(" @%s(if: %s)", name, g.variable("Boolean!", val))
}

// alias mostly names a field after itself, so that duplicates merge;
// now and then a shared alias makes two different fields collide, which
// validation refuses on both paths.
func (g *gen) alias(name string) string {
	switch {
	case g.chance(0.03):
		return []string{"a", "b"}[g.pick(2)] + ": "
	case g.chance(0.25):
		return []string{"x_", "y", ""}[g.pick(3)] + name + ": "
	}
	return ""
}

func (g *gen) postID() any {
	switch g.pick(12) {
	case 0:
		return "9" + fmt.Sprint(g.r.Uint64N(1<<50)) // unknown
	case 1:
		return []string{"abc", "0", "-1", "", "18446744073709551616", " 5", "1e3", "０"}[g.pick(8)]
	case 2:
		if g.chance(0.1) {
			return json.Number(fmt.Sprint(g.r.Uint64N(1 << 60))) // past Int's 32 bits
		}
		return json.Number(fmt.Sprint(g.r.Uint64N(1 << 31))) // an Int in the variables
	case 3:
		return g.d.authorless
	case 4:
		return g.d.deleted
	}
	return g.d.known[g.pick(len(g.d.known))]
}

func (g *gen) selection(typ string, depth int) string {
	fields := map[string][]string{
		"Post":          {"id", "createdAt", "author", "counts", "viewerHasLiked", "viewerHasFavorited", "reactions", "viewerReaction", "__typename"},
		"ReactionCount": {"kind", "count", "__typename"},
		"User":          {"id", "postCount", "followerCount", "followingCount", "__typename"},
		"PostCounts":    {"id", "likes", "comments", "reposts", "views", "favorites", "__typename"},
		"Viewer":        {"id", "user", "unread", "redDot", "__typename"},
		"Unread":        {"mentions", "comments", "likes", "messages", "system", "feed", "total", "__typename"},
	}[typ]
	child := map[string]string{"author": "User", "counts": "PostCounts", "user": "User", "unread": "Unread", "reactions": "ReactionCount"}
	var parts []string
	for n := 1 + g.pick(4); len(parts) < n; {
		switch g.pick(10) {
		case 0: // an inline fragment, with or without a type condition
			cond := ""
			if g.chance(0.6) {
				cond = " on " + typ
			}
			parts = append(parts, "..."+cond+g.directive()+" { "+g.selection(typ, depth+1)+" }")
		case 1: // a named fragment
			g.nfrag++
			name := fmt.Sprintf("F%d", g.nfrag)
			g.frags = append(g.frags, "fragment "+name+" on "+typ+" { "+g.selection(typ, depth+1)+" }")
			parts = append(parts, "..."+name+g.directive())
		default:
			f := fields[g.pick(len(fields))]
			sel := ""
			if c, ok := child[f]; ok {
				if depth > 3 {
					continue
				}
				sel = " { " + g.selection(c, depth+1) + " }"
			}
			parts = append(parts, g.alias(f)+f+g.directive()+sel)
			if g.chance(0.15) { // the same field again, to be merged
				parts = append(parts, f+sel)
			}
		}
	}
	return strings.Join(parts, " ")
}

// rootAlias gives most root fields an alias of their own: two root fields
// of one name with different arguments collide, which validation refuses.
func (g *gen) rootAlias(name string) string {
	g.nroot++
	if g.chance(0.8) {
		return fmt.Sprintf("%s%d: ", name, g.nroot)
	}
	return g.alias(name)
}

func (g *gen) rootField() string {
	switch g.pick(14) {
	case 0, 1, 2, 3:
		n := 1 + g.pick(8)
		if g.chance(0.05) {
			n = engine.MaxIDsPerCall + 1
		}
		ids := make([]any, n)
		for i := range ids {
			ids[i] = g.postID()
		}
		arg := ""
		if g.chance(0.6) {
			arg = g.variable("[ID!]!", ids)
		} else {
			lit := make([]string, len(ids))
			for i, id := range ids {
				b, _ := json.Marshal(fmt.Sprint(id))
				lit[i] = string(b)
			}
			arg = "[" + strings.Join(lit, ", ") + "]"
			if n == 1 && g.chance(0.3) {
				arg = lit[0] // list input coercion
			}
		}
		return g.rootAlias("posts") + "posts(ids: " + arg + ")" + g.directive() + " { " + g.selection("Post", 0) + " }"
	case 4, 5, 6:
		id := g.postID()
		arg := ""
		if g.chance(0.5) {
			arg = g.variable("ID!", id)
		} else {
			b, _ := json.Marshal(fmt.Sprint(id))
			arg = string(b)
		}
		return g.rootAlias("post") + "post(id: " + arg + ")" + g.directive() + " { " + g.selection("Post", 0) + " }"
	case 7, 8, 9:
		return g.rootAlias("viewer") + "viewer" + g.directive() + " { " + g.selection("Viewer", 0) + " }"
	case 10, 11:
		id := []any{"1", "2", "3", "99", "x", json.Number("4")}[g.pick(6)]
		return g.rootAlias("user") + "user(id: " + g.variable("ID!", id) + ")" + g.directive() + " { " + g.selection("User", 0) + " }"
	case 12:
		return "__typename"
	default: // not plain data: the whole operation goes to gqlgen
		return "systemNotifications(first: 2) { id }"
	}
}

func (g *gen) request() request {
	g.vars, g.decls, g.frags, g.nvar, g.nfrag, g.nroot = map[string]any{}, nil, nil, 0, 0, 0
	var roots []string
	for n := 1 + g.pick(3); len(roots) < n; {
		roots = append(roots, g.rootField())
	}
	var q strings.Builder
	if len(g.decls) > 0 || g.chance(0.3) {
		q.WriteString("query Op")
		if len(g.decls) > 0 {
			q.WriteString("(" + strings.Join(g.decls, ", ") + ")")
		}
		q.WriteString(" ")
	}
	q.WriteString("{ " + strings.Join(roots, " ") + " }")
	for _, f := range g.frags {
		q.WriteString("\n" + f)
	}
	r := request{Query: q.String(), Variables: g.vars, get: g.chance(0.1)}
	switch g.pick(10) {
	case 0, 1: // anonymous
	case 2:
		r.auth = "Bearer not-a-token"
	default:
		tok, _ := g.d.keys.Sign(engine.UserID(1+g.pick(4)), false, 0)
		r.auth = "Bearer " + tok
	}
	return r
}

func TestFastPathAgreesWithGqlgen(t *testing.T) {
	budget := 2 * time.Second
	if s := os.Getenv("TALLY_DIFF_DURATION"); s != "" {
		var err error
		if budget, err = time.ParseDuration(s); err != nil {
			t.Fatalf("TALLY_DIFF_DURATION: %v", err)
		}
	}
	d := newDiffPair(t)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d (two generators: seed and seed+1)", seed)
	plans0, gqlgen0 := fastpath.Served()
	// Two goroutines, so plans are compiled, cached and run concurrently
	// (go test -race checks the sharing).
	var wg sync.WaitGroup
	var count [2]int
	start := time.Now()
	for w := range 2 {
		wg.Go(func() {
			g := &gen{r: rand.New(rand.NewPCG(seed+uint64(w), 7)), d: d}
			for n := 0; n < 100 || time.Since(start) < budget && n < 1_000_000; n++ {
				if err := d.differ(g.request()); err != "" {
					t.Error(err)
					return
				}
				count[w]++
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	n := count[0] + count[1]
	plans, gqlgen := fastpath.Served()
	plans, gqlgen = plans-plans0, gqlgen-gqlgen0
	t.Logf("%d operations: %d answered by plans, %d by gqlgen (fast-path handler)", n, plans, gqlgen)
	// The generator aims most operations at plain data; if plans served
	// few of them the comparison proved nothing about the fast path.
	if plans < uint64(n)/4 {
		t.Fatalf("plans answered only %d of %d operations", plans, n)
	}
}

// TestFastPathCases are hand-written operations the generator reaches
// only by chance.
func TestFastPathCases(t *testing.T) {
	d := newDiffPair(t)
	tok, _ := d.keys.Sign(1, false, 0)
	tok4, _ := d.keys.Sign(4, false, 0) // reacted love to some posts
	expired, _ := d.keys.Sign(1, false, -time.Minute)
	ids := append([]string{"123456789"}, d.known...)
	many := make([]string, engine.MaxIDsPerCall+1)
	for i := range many {
		many[i] = d.known[i%len(d.known)]
	}
	cases := []request{
		{Query: `query($ids: [ID!]!) { posts(ids: $ids) { id createdAt author { id postCount followerCount followingCount } counts { id likes comments reposts views favorites } viewerHasLiked viewerHasFavorited } }`, Variables: map[string]any{"ids": ids}},
		{Query: `query($ids: [ID!]!) { posts(ids: $ids) { id reactions { kind count __typename } viewerReaction counts { likes } viewerHasLiked } }`, Variables: map[string]any{"ids": ids}},
		{Query: `query($ids: [ID!]!) { posts(ids: $ids) { id reactions { kind count } viewerReaction } }`, Variables: map[string]any{"ids": ids}, auth: "Bearer " + tok},
		{Query: `query($ids: [ID!]!) { posts(ids: $ids) { r: reactions { k: kind ...on ReactionCount { count } } v: viewerReaction } }`, Variables: map[string]any{"ids": ids}, auth: "Bearer " + tok4},
		{Query: `{ viewer { id } }`},
		{Query: `{ viewer { id user { id postCount } unread { total mentions } redDot } }`},
		{Query: `{ post(id: "abc") { id } }`},
		{Query: `{ a: post(id: "abc") { id } b: user(id: "x") { id } posts(ids: ["1"]) { id } }`},
		{Query: `query($ids: [ID!]!) { posts(ids: $ids) { id } }`, Variables: map[string]any{"ids": many}},
		{Query: `{ post(id: "` + d.authorless + `") { author { id } counts { views likes } } }`},
		{Query: `{ post(id: "` + d.deleted + `") { id counts { likes } } posts(ids: ["` + d.deleted + `", "` + d.known[0] + `"]) { id counts { reposts } author { postCount } } }`, auth: "Bearer " + tok},
		{Query: `{ posts(ids: "` + d.known[0] + `") { id ... on Post { id counts { likes } } ...P } } fragment P on Post { counts { comments likes } }`},
		{Query: `query($s: Boolean!) { posts(ids: ["` + d.known[1] + `"]) { id @skip(if: $s) counts @include(if: $s) { likes } } }`, Variables: map[string]any{"s": true}},
		{Query: `query($s: Boolean!) { posts(ids: ["` + d.known[1] + `"]) { id @skip(if: $s) counts @include(if: $s) { likes } } }`, Variables: map[string]any{"s": false}},
		{Query: `{ __typename p: post(id: "` + d.known[2] + `") { __typename counts { __typename } author { __typename } } }`},
		{Query: `{ post(id: "` + d.known[2] + `") { id } }`, auth: "Bearer " + expired},
		{Query: `{ __schema { queryType { name } } }`},
		{Query: `mutation { likePost(postId: "1") { id } }`},
		{Query: `{ posts(ids: []) { id } }`},
		// One document, two operations: each is its own plan.
		{Query: `query A { posts(ids: ["` + d.known[3] + `"]) { id } } query B { posts(ids: ["` + d.known[3] + `"]) { counts { likes } } }`, OperationName: "A"},
		{Query: `query A { posts(ids: ["` + d.known[3] + `"]) { id } } query B { posts(ids: ["` + d.known[3] + `"]) { counts { likes } } }`, OperationName: "B"},
		{Query: `query A { posts(ids: ["` + d.known[3] + `"]) { id } } query B { posts(ids: ["` + d.known[3] + `"]) { counts { likes } } }`, OperationName: "C"},
		// Variables' default values.
		{Query: `query($ids: [ID!]! = ["` + d.known[4] + `"], $s: Boolean! = true) { posts(ids: $ids) { id @include(if: $s) } }`},
		{Query: `query($id: ID = "` + d.known[4] + `") { post(id: $id) { id } }`},
	}
	plans0, _ := fastpath.Served()
	for i, r := range cases {
		if r.auth == "" && i%2 == 0 {
			r.auth = "Bearer " + tok
		}
		d.compare(t, r)
		r.auth = ""
		d.compare(t, r)
	}
	if plans, _ := fastpath.Served(); plans-plans0 < 15 {
		t.Fatalf("plans answered %d of the cases", plans-plans0)
	}
	// A page of reactions is plain data: a plan answers it.
	plans0, _ = fastpath.Served()
	d.compare(t, cases[1])
	if plans, _ := fastpath.Served(); plans-plans0 != 3 { // differ asks the fast handler three times
		t.Fatalf("a page of reactions: plans answered %d of 3", plans-plans0)
	}
}

func FuzzFastPathAgrees(f *testing.F) {
	f.Add(uint64(1), "", "")
	f.Add(uint64(2), `query($ids: [ID!]!) { posts(ids: $ids) { id counts { likes } viewerHasLiked } }`, `{"ids": ["1", "2"]}`)
	d := newDiffPair(f)
	f.Fuzz(func(t *testing.T, seed uint64, query, vars string) {
		g := &gen{r: rand.New(rand.NewPCG(seed, 7)), d: d}
		r := g.request()
		if query != "" {
			// Mutated query text over the store's ids: known ids appear as
			// $known0.. variables so the fuzzer need not guess them.
			r.Query, r.Variables = query, map[string]any{}
			if vars != "" && json.Unmarshal([]byte(vars), &r.Variables) != nil {
				return
			}
			for i, id := range d.known {
				if _, ok := r.Variables[fmt.Sprintf("known%d", i)]; !ok {
					r.Variables[fmt.Sprintf("known%d", i)] = id
				}
			}
		}
		d.compare(t, r)
	})
}

// brokenReads fails the reads a page or a badge needs, as a store that
// lost its disk or its Redis would.
type brokenReads struct{ engine.Store }

func (brokenReads) Page(context.Context, engine.UserID, []engine.PostID, engine.PageWant, []engine.PostView) error {
	return fmt.Errorf("%w: test", engine.ErrUnavailable)
}

func (brokenReads) Unread(context.Context, engine.UserID) (engine.Unread, error) {
	return engine.Unread{}, fmt.Errorf("%w: test", engine.ErrUnavailable)
}

func (brokenReads) UserCounts(context.Context, []engine.UserID) ([]engine.UserCounts, error) {
	return nil, fmt.Errorf("%w: test", engine.ErrUnavailable)
}

// TestFastPathStoreFailure: when the store fails, both paths report the
// same UNAVAILABLE errors (plans hand such operations to gqlgen).
func TestFastPathStoreFailure(t *testing.T) {
	d := newDiffPairOn(t, func(s engine.Store) engine.Store { return brokenReads{s} })
	tok, _ := d.keys.Sign(1, false, 0)
	for _, q := range []string{
		`{ posts(ids: ["` + d.known[0] + `"]) { id counts { likes } } }`,
		`{ post(id: "` + d.known[1] + `") { author { postCount } } }`,
		`{ viewer { redDot } }`,
		`{ user(id: "3") { followerCount } posts(ids: []) { id } }`,
	} {
		r := request{Query: q, auth: "Bearer " + tok}
		d.compare(t, r)
		if body := d.serve(d.fast, r).Body.String(); !strings.Contains(body, `"UNAVAILABLE"`) {
			t.Fatalf("%s: %s", q, body)
		}
	}
}

// TestFastPathKeepsGqlgenPipeline: what gqlgen does before and around
// execution still applies to operations plans answer — the complexity
// limit, automatic persisted queries — with the same responses.
func TestFastPathKeepsGqlgenPipeline(t *testing.T) {
	d := newDiffPair(t)
	tok, _ := d.keys.Sign(1, false, 0)
	auth := "Bearer " + tok
	ids := make([]any, engine.MaxIDsPerCall)
	for i := range ids {
		ids[i] = d.known[i%len(d.known)]
	}
	// 1 + 100 × 6 per root field, ten root fields: over 5000.
	var roots []string
	for i := range 10 {
		roots = append(roots, fmt.Sprintf(`p%d: posts(ids: $ids) { id createdAt viewerHasLiked counts { likes views } }`, i))
	}
	big := request{Query: `query($ids: [ID!]!) { ` + strings.Join(roots, " ") + ` }`, Variables: map[string]any{"ids": ids}, auth: auth}
	d.compare(t, big)
	if body := d.serve(d.fast, big).Body.String(); !strings.Contains(body, "COMPLEXITY_LIMIT_EXCEEDED") {
		t.Fatalf("over the complexity limit: %s", body)
	}

	// APQ: the hash alone is unknown, then registered with its query,
	// then served by hash (from a plan on the fast-path handler).
	q := `{ posts(ids: ["` + d.known[5] + `"]) { id counts { likes } } }`
	sum := sha256.Sum256([]byte(q))
	ext := map[string]any{"persistedQuery": map[string]any{"version": 1, "sha256Hash": hex.EncodeToString(sum[:])}}
	byHash := request{Extensions: ext, auth: auth}
	d.compare(t, byHash) // PERSISTED_QUERY_NOT_FOUND on both
	d.compare(t, request{Query: q, Extensions: ext, auth: auth})
	plans0, _ := fastpath.Served()
	d.compare(t, byHash)
	if plans, _ := fastpath.Served(); plans == plans0 {
		t.Fatal("a persisted query was not answered by its plan")
	}
	if body := d.serve(d.fast, byHash).Body.String(); !strings.Contains(body, `"posts":[{"id":"`+d.known[5]+`"`) {
		t.Fatalf("persisted query: %s", body)
	}
}

// TestFastPathMetrics: /metrics tells how many operations plans answered.
func TestFastPathMetrics(t *testing.T) {
	s := newTestServer(t)
	id := s.createPost(t, 1)
	s.q(t, 1, `query($ids: [ID!]!) { posts(ids: $ids) { id counts { likes } } }`, map[string]any{"ids": []string{id}})
	s.q(t, 0, `{ systemNotifications { id } }`, nil)
	resp, err := http.Get(s.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body strings.Builder
	io.Copy(&body, resp.Body)
	for _, want := range []string{
		`tally_graphql_executed_operations_total{executor="plan"} 1`,
		`tally_graphql_executed_operations_total{executor="gqlgen"} 2`, // the mutation and the notifications
	} {
		if !strings.Contains(body.String(), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}
