package web

import (
	"bytes"
	"compress/gzip"
	"crypto/sha512"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/tally-dev/tally/web/demoseed"
)

func devToken(user uint64, admin bool) (string, error) {
	return "tok-" + strconv.FormatUint(user, 10) + "-" + strconv.FormatBool(admin), nil
}

func get(t *testing.T, h http.Handler, path string) *httptest.ResponseRecorder {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec
}

func post(t *testing.T, h http.Handler, path, body string) *httptest.ResponseRecorder {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, path, strings.NewReader(body)))
	return rec
}

func TestRoutes(t *testing.T) {
	h := Handler(Options{GraphQLPath: "/query"})
	for path, want := range map[string]int{
		"/":                              200,
		"/demo":                          200,
		"/demo/":                         200,
		"/demo/world":                    200,
		"/assets/demo.js":                200,
		"/assets/demo.css":               200,
		"/assets/favicon.svg":            200,
		"/assets/graphiql.js":            200,
		"/assets/vendor/README.md":       200,
		"/assets/vendor/graphiql.min.js": 200,
		"/assets/graphiql-guard.js":      200,
		"/demo/token?user=1":             404, // no dev secret
		"/demo/nope":                     404,
		"/nope":                          404,
		"/assets/":                       404,
		"/assets/vendor/":                404,
		"/assets/missing.js":             404,
		"/index.html":                    404,
	} {
		if got := get(t, h, path).Code; got != want {
			t.Errorf("GET %s = %d, want %d", path, got, want)
		}
	}
	if rec := get(t, h, "/assets/demo.js"); !strings.Contains(rec.Header().Get("Content-Type"), "javascript") {
		t.Errorf("demo.js served as %q", rec.Header().Get("Content-Type"))
	}
	if got := post(t, h, "/", "").Code; got != http.StatusMethodNotAllowed {
		t.Errorf("POST / = %d, want 405", got)
	}
}

func TestGraphiQLHeaders(t *testing.T) {
	body := get(t, Handler(Options{GraphQLPath: "/query", DevToken: devToken}), "/").Body.String()
	if !strings.Contains(body, `Bearer tok-1-true`) {
		t.Errorf("dev GraphiQL page lacks the admin token for user 1:\n%s", body)
	}
	if !strings.Contains(body, `\"graphqlPath\":\"/query\"`) && !strings.Contains(body, `"graphqlPath":"/query"`) {
		t.Errorf("GraphiQL page lacks the GraphQL path:\n%s", body)
	}
	body = get(t, Handler(Options{GraphQLPath: "/query"}), "/").Body.String()
	if strings.Contains(body, "tok-") || !strings.Contains(body, "tally token -user N") {
		t.Errorf("GraphiQL page without a dev secret should ask for a token:\n%s", body)
	}
}

func TestGraphiQLAssets(t *testing.T) {
	full := fstest.MapFS{}
	for _, f := range graphiqlCDN {
		full[f.name] = &fstest.MapFile{Data: []byte("x")}
	}
	g := graphiqlAssets(full, false)
	if !g.Local || g.JS != "/assets/vendor/graphiql.min.js" || g.React != "/assets/vendor/react.production.min.js" {
		t.Errorf("with every vendor file: %+v", g)
	}
	g = graphiqlAssets(full, true)
	if g.Local || !strings.HasPrefix(g.JS, "https://unpkg.com/graphiql@") || g.JSSRI == "" {
		t.Errorf("asked for the CDN: %+v", g)
	}
	delete(full, "graphiql.min.css")
	g = graphiqlAssets(full, false)
	if g.Local || !strings.HasPrefix(g.CSS, "https://") || !strings.HasPrefix(g.JS, "https://") || g.JSSRI == "" {
		t.Errorf("with a vendor file missing: %+v", g)
	}
}

// GraphiQL's page loads its scripts from the binary by default, from the
// CDN (with integrity hashes) only when asked, and always comes with the
// guard that reports scripts that did not load.
func TestGraphiQLPageSources(t *testing.T) {
	local := get(t, Handler(Options{GraphQLPath: "/query"}), "/").Body.String()
	for _, want := range []string{`src="/assets/vendor/graphiql.min.js"`, `href="/assets/vendor/graphiql.min.css"`,
		`src="/assets/vendor/react.production.min.js"`, `src="/assets/graphiql-guard.js"`, `onerror="tallyAssetFailed(this.src)"`} {
		if !strings.Contains(local, want) {
			t.Errorf("default GraphiQL page lacks %s:\n%s", want, local)
		}
	}
	if strings.Contains(local, "unpkg.com") {
		t.Errorf("default GraphiQL page names the CDN:\n%s", local)
	}
	cdn := get(t, Handler(Options{GraphQLPath: "/query", GraphiQLCDN: true}), "/").Body.String()
	if !strings.Contains(cdn, `src="https://unpkg.com/graphiql@`+graphiqlVersion+`/graphiql.min.js" integrity="sha384-`) ||
		!strings.Contains(cdn, `cdn\":true`) && !strings.Contains(cdn, `"cdn":true`) {
		t.Errorf("CDN GraphiQL page:\n%s", cdn)
	}
}

// The committed vendor copy is complete: a plain go build serves GraphiQL
// with no internet.
func TestVendorComplete(t *testing.T) {
	for _, name := range []string{"graphiql.min.js", "graphiql.min.css", "react.production.min.js", "react-dom.production.min.js",
		"LICENSE.graphiql", "LICENSE.react", "LICENSE.react-dom", "THIRD-PARTY-LICENSES", "VERSIONS", "README.md"} {
		b, err := vendorFS.ReadFile("vendor/" + name)
		if err != nil || len(b) == 0 {
			t.Errorf("web/vendor/%s is missing from the build (%v): run scripts/web-assets and commit web/vendor", name, err)
		}
	}
	versions, _ := vendorFS.ReadFile("vendor/VERSIONS")
	for _, want := range []string{"graphiql " + graphiqlVersion, "react " + reactVersion, "react-dom " + reactVersion} {
		if !strings.Contains(string(versions), want+"\n") {
			t.Errorf("web/vendor/VERSIONS lacks %q:\n%s", want, versions)
		}
	}
}

// Vendor files go out gzipped to clients that take it, with an ETag that
// turns a reload into a 304.
func TestVendorFilesServing(t *testing.T) {
	h := Handler(Options{GraphQLPath: "/query"})
	raw, _ := vendorFS.ReadFile("vendor/graphiql.min.js")

	req := httptest.NewRequest(http.MethodGet, "/assets/vendor/graphiql.min.js", nil)
	req.Header.Set("Accept-Encoding", "gzip, deflate, br")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != 200 || rec.Header().Get("Content-Encoding") != "gzip" || !strings.Contains(rec.Header().Get("Content-Type"), "javascript") {
		t.Fatalf("gzip request: %d %v", rec.Code, rec.Header())
	}
	zr, err := gzip.NewReader(rec.Body)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(zr)
	if err != nil || !bytes.Equal(got, raw) {
		t.Fatalf("gunzipped body differs from web/vendor/graphiql.min.js (%d vs %d bytes, %v)", len(got), len(raw), err)
	}
	etag := rec.Header().Get("ETag")
	if etag == "" {
		t.Fatal("no ETag")
	}

	req = httptest.NewRequest(http.MethodGet, "/assets/vendor/graphiql.min.js", nil)
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Header().Get("Content-Encoding") != "" || !bytes.Equal(rec.Body.Bytes(), raw) {
		t.Errorf("plain request: encoding %q, %d bytes", rec.Header().Get("Content-Encoding"), rec.Body.Len())
	}

	req = httptest.NewRequest(http.MethodGet, "/assets/vendor/graphiql.min.js", nil)
	req.Header.Set("If-None-Match", etag)
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusNotModified || rec.Body.Len() != 0 {
		t.Errorf("revalidation = %d with %d bytes, want 304", rec.Code, rec.Body.Len())
	}
	for _, path := range []string{"/assets/vendor/nope.js", "/assets/vendor/a/b", "/assets/vendor/"} {
		if got := get(t, h, path).Code; got != 404 {
			t.Errorf("GET %s = %d, want 404", path, got)
		}
	}
}

// The CDN fallback and scripts/web-assets must load the same versions.
func TestPinnedVersionsAgree(t *testing.T) {
	b, err := os.ReadFile("assets-src/package.json")
	if err != nil {
		t.Fatal(err)
	}
	var pkg struct{ Dependencies map[string]string }
	if err := json.Unmarshal(b, &pkg); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"graphiql": graphiqlVersion, "react": reactVersion, "react-dom": reactVersion} {
		if got := pkg.Dependencies[name]; got != want {
			t.Errorf("assets-src/package.json pins %s %q, web.go %q", name, got, want)
		}
	}
}

// The CDN option's integrity hashes are those of the committed files, so
// both serve the same build.
func TestVendorIntegrity(t *testing.T) {
	for _, f := range graphiqlCDN {
		b, err := vendorFS.ReadFile("vendor/" + f.name)
		if err != nil {
			t.Errorf("web/vendor/%s: %v", f.name, err)
			continue
		}
		sum := sha512.Sum384(b)
		if got := "sha384-" + base64.StdEncoding.EncodeToString(sum[:]); got != f.integrity {
			t.Errorf("vendor/%s is %s; web.go expects %s", f.name, got, f.integrity)
		}
	}
}

func TestDevTokenEndpoint(t *testing.T) {
	h := Handler(Options{GraphQLPath: "/query", DevToken: devToken})
	rec := get(t, h, "/demo/token?user=7")
	var got map[string]string
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil || rec.Code != 200 {
		t.Fatalf("GET /demo/token?user=7 = %d %s", rec.Code, rec.Body)
	}
	if got["token"] != "tok-7-false" {
		t.Errorf("token = %q, want a non-admin token for user 7", got["token"])
	}
	for _, q := range []string{"", "user=0", "user=-1", "user=abc", "user=18446744073709551616", "user=1e3"} {
		if rec := get(t, h, "/demo/token?"+q); rec.Code != http.StatusBadRequest {
			t.Errorf("GET /demo/token?%s = %d, want 400", q, rec.Code)
		}
	}
}

func TestWorld(t *testing.T) {
	dir := t.TempDir()
	seeded := demoseed.Summary{
		Users:  demoseed.Cast,
		Posts:  []demoseed.Post{{ID: 1 << 40, Author: 1, Text: "hello"}},
		Groups: []demoseed.Group{{ID: 77, Name: "G", Members: []demoseed.ID{1, 2}}},
	}
	if err := seeded.Save(dir); err != nil {
		t.Fatal(err)
	}
	h := Handler(Options{GraphQLPath: "/query", DevToken: devToken, DataDir: dir})

	if !strings.Contains(get(t, h, "/").Body.String(), `\"1099511627776\"\n  ])`) {
		t.Error("GraphiQL's first query does not use a seeded post id")
	}

	for body, want := range map[string]int{
		`{"id":"500","group":"77"}`:           204,
		`{"id":"500","group":"77"}` + " ":     204, // a repeat changes nothing
		`{"id":"501","group":"78"}`:           404, // not a group of the world
		`{"id":"0","group":"77"}`:             400,
		`{"id":12,"group":"77"}`:              400, // ids are strings
		`{"id":"1","group":"77","x":1}`:       400,
		`not json`:                            400,
		`{"id":"` + strings.Repeat("9", 2000): 400,
	} {
		if got := post(t, h, "/demo/world/messages", body).Code; got != want {
			t.Errorf("POST messages %s = %d, want %d", body, got, want)
		}
	}
	for body, want := range map[string]int{
		`{"id":"600","repostOf":"1099511627776"}`: 204,
		`{"id":"601","repostOf":"42"}`:            404,
		`{"id":"602"}`:                            400,
	} {
		if got := post(t, h, "/demo/world/posts", body).Code; got != want {
			t.Errorf("POST posts %s = %d, want %d", body, got, want)
		}
	}

	var w struct {
		Dev         bool
		GraphQLPath string
		demoseed.Summary
	}
	if err := json.Unmarshal(get(t, h, "/demo/world").Body.Bytes(), &w); err != nil {
		t.Fatal(err)
	}
	if !w.Dev || w.GraphQLPath != "/query" || len(w.Users) != 8 {
		t.Errorf("world header: dev=%v path=%q users=%d", w.Dev, w.GraphQLPath, len(w.Users))
	}
	if len(w.Messages) != 1 || w.Messages[0] != (demoseed.Message{ID: 500, Group: 77}) {
		t.Errorf("messages = %+v, want the one registered", w.Messages)
	}
	if len(w.Posts) != 2 || w.Posts[1] != (demoseed.Post{ID: 600, RepostOf: 1 << 40}) {
		t.Errorf("posts = %+v, want the seeded post and the repost", w.Posts)
	}

	// What the demo added survives a restart.
	saved, err := demoseed.Load(dir)
	if err != nil || len(saved.Messages) != 1 || len(saved.Posts) != 2 {
		t.Errorf("saved world = %+v, %v", saved, err)
	}
}

// A data directory that was never seeded gives an empty world whose lists
// are [] (not null), says it is not seeded and, in dev mode, how to seed it.
func TestWorldUnseeded(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "my data")
	h := Handler(Options{GraphQLPath: "/query", DataDir: dir, DevToken: devToken})
	body := get(t, h, "/demo/world").Body.String()
	for _, list := range []string{"users", "posts", "groups", "messages", "notifications"} {
		if !strings.Contains(body, `"`+list+`":[]`) {
			t.Errorf("unseeded world's %s is not []: %s", list, body)
		}
	}
	var w struct {
		Seeded      bool
		SeedCommand string
	}
	if err := json.Unmarshal([]byte(body), &w); err != nil {
		t.Fatal(err)
	}
	if want := "tally demo-seed -data '" + dir + "'"; w.Seeded || w.SeedCommand != want {
		t.Errorf("seeded=%v seedCommand=%q, want false and %q", w.Seeded, w.SeedCommand, want)
	}
	// A deployment with reaction kinds besides like seeds with them.
	kinds := Handler(Options{GraphQLPath: "/query", DataDir: dir, DevToken: devToken, Reactions: []string{"like", "love", "wow"}})
	if err := json.Unmarshal(get(t, kinds, "/demo/world").Body.Bytes(), &w); err != nil {
		t.Fatal(err)
	}
	if want := "tally demo-seed -data '" + dir + "' -reactions like,love,wow"; w.SeedCommand != want {
		t.Errorf("seedCommand with reaction kinds = %q, want %q", w.SeedCommand, want)
	}
	if got := post(t, h, "/demo/world/messages", `{"id":"1","group":"2"}`).Code; got != http.StatusNotFound {
		t.Errorf("message to an unknown group = %d, want 404", got)
	}
	if strings.Contains(get(t, h, "/").Body.String(), "posts(ids") {
		t.Error("GraphiQL's first query names posts of an empty world")
	}
	// Without a dev secret the page still explains, without naming paths.
	body = get(t, Handler(Options{GraphQLPath: "/query", DataDir: dir}), "/demo/world").Body.String()
	if strings.Contains(body, "seedCommand") || strings.Contains(body, dir) || !strings.Contains(body, `"seeded":false`) {
		t.Errorf("production world names its data directory: %s", body)
	}
}

// The demo's unauthenticated write endpoints exist in dev mode only: on a
// server with a fixed secret they are 404 and the saved world is
// untouched.
func TestDemoWritesDevOnly(t *testing.T) {
	for _, dev := range []bool{true, false} {
		dir := t.TempDir()
		seeded := demoseed.Summary{
			Users:  demoseed.Cast,
			Posts:  []demoseed.Post{{ID: 1 << 40, Author: 1, Text: "hello"}},
			Groups: []demoseed.Group{{ID: 77, Name: "G", Members: []demoseed.ID{1, 2}}},
		}
		if err := seeded.Save(dir); err != nil {
			t.Fatal(err)
		}
		opts := Options{GraphQLPath: "/query", DataDir: dir}
		want := http.StatusNotFound
		if dev {
			opts.DevToken = devToken
			want = http.StatusNoContent
		}
		h := Handler(opts)
		if got := post(t, h, "/demo/world/messages", `{"id":"500","group":"77"}`).Code; got != want {
			t.Errorf("dev=%v: POST /demo/world/messages = %d, want %d", dev, got, want)
		}
		if got := post(t, h, "/demo/world/posts", `{"id":"600","repostOf":"1099511627776"}`).Code; got != want {
			t.Errorf("dev=%v: POST /demo/world/posts = %d, want %d", dev, got, want)
		}
		saved, err := demoseed.Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		if n := len(saved.Messages) + len(saved.Posts); dev && n != 3 || !dev && n != 1 {
			t.Errorf("dev=%v: saved world has %d messages and %d posts", dev, len(saved.Messages), len(saved.Posts))
		}
		if got := get(t, h, "/demo/world").Code; got != 200 {
			t.Errorf("dev=%v: GET /demo/world = %d", dev, got)
		}
	}
}

func TestWorldCaps(t *testing.T) {
	world := openWorld("")
	world.sum.Groups = []demoseed.Group{{ID: 9}}
	hd := &handler{world: world}
	for i := 1; i <= maxWorldMessages+10; i++ {
		rec := httptest.NewRecorder()
		hd.addMessage(rec, httptest.NewRequest(http.MethodPost, "/demo/world/messages",
			strings.NewReader(`{"id":"`+strconv.Itoa(i)+`","group":"9"}`)))
		if rec.Code != 204 {
			t.Fatalf("message %d: %d %s", i, rec.Code, rec.Body)
		}
	}
	if n := len(world.sum.Messages); n != maxWorldMessages || world.sum.Messages[0].ID != 11 {
		t.Errorf("after %d messages the world keeps %d starting at %d; want the newest %d",
			maxWorldMessages+10, n, world.sum.Messages[0].ID, maxWorldMessages)
	}
}
