package web

import (
	"crypto/sha512"
	"encoding/base64"
	"encoding/json"
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
		"/":                        200,
		"/demo":                    200,
		"/demo/":                   200,
		"/demo/world":              200,
		"/assets/demo.js":          200,
		"/assets/demo.css":         200,
		"/assets/favicon.svg":      200,
		"/assets/graphiql.js":      200,
		"/assets/vendor/README.md": 200,
		"/demo/token?user=1":       404, // no dev secret
		"/demo/nope":               404,
		"/nope":                    404,
		"/assets/":                 404,
		"/assets/vendor/":          404,
		"/assets/missing.js":       404,
		"/index.html":              404,
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
	g := graphiqlAssets(full)
	if !g.Local || g.JS != "/assets/vendor/graphiql.min.js" || g.React != "/assets/vendor/react.production.min.js" {
		t.Errorf("with every vendor file: %+v", g)
	}
	delete(full, "graphiql.min.css")
	g = graphiqlAssets(full)
	if g.Local || !strings.HasPrefix(g.CSS, "https://") || !strings.HasPrefix(g.JS, "https://") || g.JSSRI == "" {
		t.Errorf("with a vendor file missing: %+v", g)
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

// The CDN fallback's integrity hashes are those of the files
// scripts/web-assets installs (checked when web/vendor holds them).
func TestVendorIntegrity(t *testing.T) {
	checked := 0
	for _, f := range graphiqlCDN {
		b, err := os.ReadFile(filepath.Join("vendor", f.name))
		if err != nil {
			continue
		}
		sum := sha512.Sum384(b)
		if got := "sha384-" + base64.StdEncoding.EncodeToString(sum[:]); got != f.integrity {
			t.Errorf("vendor/%s is %s; web.go expects %s", f.name, got, f.integrity)
		}
		checked++
	}
	if checked == 0 {
		t.Skip("web/vendor is empty: run scripts/web-assets")
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

// A data directory that was never seeded gives an empty world.
func TestWorldUnseeded(t *testing.T) {
	h := Handler(Options{GraphQLPath: "/query", DataDir: t.TempDir()})
	var w demoseed.Summary
	if err := json.Unmarshal(get(t, h, "/demo/world").Body.Bytes(), &w); err != nil {
		t.Fatal(err)
	}
	if len(w.Posts)+len(w.Groups)+len(w.Messages) != 0 {
		t.Errorf("unseeded world = %+v", w)
	}
	if got := post(t, h, "/demo/world/messages", `{"id":"1","group":"2"}`).Code; got != http.StatusNotFound {
		t.Errorf("message to an unknown group = %d, want 404", got)
	}
	if strings.Contains(get(t, h, "/").Body.String(), "posts(ids") {
		t.Error("GraphiQL's first query names posts of an empty world")
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
