// Package web owns what a person sees in a browser: GraphiQL at "/" and the
// demo client at "/demo", with their static assets under "/assets/". The
// demo is plain HTML/CSS/JS of our own (static/); GraphiQL's browser builds
// are committed in web/vendor (scripts/web-assets refreshes them) and
// embedded, so GraphiQL works with no internet; Options.GraphiQLCDN loads
// the same pinned versions from a CDN instead.
//
// The demo plays a small social app on top of Tally. Tally keeps counts,
// badges and receipts but no content or lists, so the demo's side of the
// world (names, post texts, which posts and messages exist) is a
// demoseed.Summary that this package serves at /demo/world and extends as
// demo users repost and chat.
package web

import (
	"bytes"
	"embed"
	"encoding/json"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
)

// Options configure Handler.
type Options struct {
	// GraphQLPath is where the GraphQL endpoint listens, for HTTP and for
	// WebSocket (graphql-transport-ws), e.g. "/query".
	GraphQLPath string
	// DevToken mints a bearer token. It is non-nil only when the server
	// runs with a generated (dev) secret: GraphiQL then comes with an
	// admin token filled in, and the demo signs in with one click.
	DevToken func(user uint64, admin bool) (string, error)
	// DataDir, when set, is where `tally demo-seed` saved the demo world
	// (demoseed.FileName); reposts and messages made in the demo are saved
	// back there. Empty: the demo world starts empty and lives in memory.
	DataDir string
	// Reactions are the deployment's reaction kinds (-reactions). The
	// demo reads them from the posts; the seed command it shows before
	// `tally demo-seed` names them, so that the seeded world has
	// reactions of those kinds. Nil is like alone, the default.
	Reactions []string
	// GraphiQLCDN loads GraphiQL's scripts from unpkg (pinned versions,
	// subresource integrity) instead of the copy built into the binary.
	GraphiQLCDN bool
}

//go:embed static
var staticFS embed.FS

//go:embed vendor
var vendorFS embed.FS

// Handler serves GET / (GraphiQL), /demo and /demo/..., and /assets/...;
// anything else is 404. The demo's write endpoints (POST /demo/world/...)
// exist only in dev mode (DevToken set): they are unauthenticated, and a
// production server's data directory is no place for them to write.
func Handler(opts Options) http.Handler {
	if opts.GraphQLPath == "" {
		opts.GraphQLPath = "/query"
	}
	static, _ := fs.Sub(staticFS, "static")
	vendor, _ := fs.Sub(vendorFS, "vendor")
	h := &handler{opts: opts, world: openWorld(opts.DataDir), gi: graphiqlAssets(vendor, opts.GraphiQLCDN)}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", h.graphiql)
	mux.Handle("GET /demo", page(static, "demo.html"))
	mux.Handle("GET /demo/{$}", page(static, "demo.html"))
	mux.HandleFunc("GET /demo/world", h.worldJSON)
	if opts.DevToken != nil {
		mux.HandleFunc("POST /demo/world/posts", h.addPost)
		mux.HandleFunc("POST /demo/world/messages", h.addMessage)
	}
	mux.HandleFunc("GET /demo/token", h.token)
	mux.Handle("GET /assets/vendor/", assets(vendorFiles(vendor)))
	mux.Handle("GET /assets/", assets(http.StripPrefix("/assets/", http.FileServerFS(static))))
	return mux
}

type handler struct {
	opts  Options
	world *world
	gi    graphiqlFiles
}

// page serves one static HTML file.
func page(static fs.FS, name string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := fs.ReadFile(static, name)
		if err != nil {
			http.Error(w, "page missing from the build", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-cache")
		w.Write(b)
	})
}

// assets serves embedded files; directory listings are not served.
func assets(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/") {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Cache-Control", "no-cache")
		next.ServeHTTP(w, r)
	})
}

// Pinned GraphiQL build; web/assets-src/package.json pins the same
// versions for scripts/web-assets (a test keeps them in step).
const (
	graphiqlVersion = "3.8.3"
	reactVersion    = "18.3.1"
)

// graphiqlFile is one file GraphiQL's page loads: its name in web/vendor,
// its CDN address and the CDN copy's subresource-integrity hash.
type graphiqlFile struct {
	name, cdn, integrity string
}

var graphiqlCDN = []graphiqlFile{
	{"react.production.min.js", "https://unpkg.com/react@" + reactVersion + "/umd/react.production.min.js",
		"sha384-DGyLxAyjq0f9SPpVevD6IgztCFlnMF6oW/XQGmfe+IsZ8TqEiDrcHkMLKI6fiB/Z"},
	{"react-dom.production.min.js", "https://unpkg.com/react-dom@" + reactVersion + "/umd/react-dom.production.min.js",
		"sha384-gTGxhz21lVGYNMcdJOyq01Edg0jhn/c22nsx0kyqP0TxaV5WVdsSH1fSDUf5YJj1"},
	{"graphiql.min.js", "https://unpkg.com/graphiql@" + graphiqlVersion + "/graphiql.min.js",
		"sha384-HbRVEFG0JGJZeAHCJ9Xm2+tpknBQ7QZmNlO/DgZtkZ0aJSypT96YYGRNod99l9Ie"},
	{"graphiql.min.css", "https://unpkg.com/graphiql@" + graphiqlVersion + "/graphiql.min.css",
		"sha384-Mq3vbRBY71jfjQAt/DcjxUIYY33ksal4cgdRt9U/hNPvHBCaT2JfJ/PTRiPKf0aM"},
}

// graphiqlFiles are the addresses the GraphiQL page uses.
type graphiqlFiles struct {
	Local                                bool
	React, ReactDOM, JS, CSS             string
	ReactSRI, ReactDOMSRI, JSSRI, CSSSRI string
}

// graphiqlAssets picks the embedded web/vendor copy unless cdn asks for
// the CDN. A build whose vendor copy is incomplete (a test guards the
// committed one) falls back to the CDN with an error in the log, rather
// than serve a page that cannot start.
func graphiqlAssets(vendor fs.FS, cdn bool) graphiqlFiles {
	local := !cdn
	for _, f := range graphiqlCDN {
		if _, err := fs.Stat(vendor, f.name); err != nil && local {
			slog.Error("web: GraphiQL's build is missing from web/vendor; loading it from the CDN (restore it with scripts/web-assets)", "file", f.name)
			local = false
		}
	}
	url := func(i int) (string, string) {
		if local {
			return "/assets/vendor/" + graphiqlCDN[i].name, graphiqlCDN[i].integrity
		}
		return graphiqlCDN[i].cdn, graphiqlCDN[i].integrity
	}
	var g graphiqlFiles
	g.Local = local
	g.React, g.ReactSRI = url(0)
	g.ReactDOM, g.ReactDOMSRI = url(1)
	g.JS, g.JSSRI = url(2)
	g.CSS, g.CSSSRI = url(3)
	return g
}

var graphiqlPage = template.Must(template.ParseFS(staticFS, "static/graphiql.html"))

// graphiqlConfig is handed to static/graphiql.js.
type graphiqlConfig struct {
	GraphQLPath string `json:"graphqlPath"`
	Headers     string `json:"headers"`
	Query       string `json:"query"`
	// CDN tells the page's failure message where the scripts came from.
	CDN bool `json:"cdn"`
}

func (h *handler) graphiql(w http.ResponseWriter, r *http.Request) {
	cfg := graphiqlConfig{GraphQLPath: h.opts.GraphQLPath, Query: h.firstQuery(), CDN: !h.gi.Local}
	headers := map[string]string{}
	if h.opts.DevToken != nil {
		tok, err := h.opts.DevToken(devAdmin, true)
		if err != nil {
			slog.Error("web: dev token", "err", err)
			http.Error(w, "could not make a dev token", http.StatusInternalServerError)
			return
		}
		headers["Authorization"] = "Bearer " + tok
	} else {
		headers["Authorization"] = "Bearer <paste a token from `tally token -user N`>"
	}
	hb, _ := json.MarshalIndent(headers, "", "  ")
	cfg.Headers = string(hb)
	cb, err := json.Marshal(cfg)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	var buf bytes.Buffer
	err = graphiqlPage.Execute(&buf, struct {
		Files  graphiqlFiles
		Config template.JS
	}{h.gi, template.JS(cb)})
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Write(buf.Bytes())
}

// devAdmin is the user GraphiQL's dev token is for.
const devAdmin = 1

// firstQuery is GraphiQL's starting query: the viewer's badges and, when
// the demo world is seeded, a feed page of its posts.
func (h *handler) firstQuery() string {
	var b strings.Builder
	b.WriteString(`# Welcome to Tally. This query runs as the token in
# the Headers tab below. Press ▶ to run it.
#
# Live badges: open a new tab (+) and run
#   subscription {
#     unreadChanged { unread { total } redDot }
#   }

query FirstLook {
  viewer {
    id
    unread {
      mentions comments likes
      messages system feed total
    }
    redDot
    user { postCount followerCount followingCount }
  }
`)
	if ids := h.world.recentPosts(5); len(ids) > 0 {
		b.WriteString("  posts(ids: [\n")
		for _, id := range ids {
			b.WriteString("    " + strconv.Quote(id.String()) + "\n")
		}
		b.WriteString(`  ]) {
    id
    author { id }
    createdAt
    counts { likes comments reposts views favorites }
    viewerHasLiked
  }
`)
	}
	b.WriteString(`  systemNotifications(first: 5) {
    id title createdAt
  }
}
`)
	return b.String()
}

// token serves GET /demo/token?user=N → {"token": "..."} in dev mode only.
func (h *handler) token(w http.ResponseWriter, r *http.Request) {
	if h.opts.DevToken == nil {
		http.NotFound(w, r)
		return
	}
	user, err := strconv.ParseUint(r.URL.Query().Get("user"), 10, 64)
	if err != nil || user == 0 {
		jsonError(w, "user must be a user id: a positive decimal integer", http.StatusBadRequest)
		return
	}
	tok, err := h.opts.DevToken(user, false)
	if err != nil {
		slog.Error("web: dev token", "err", err)
		jsonError(w, "could not make a token", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, map[string]string{"token": tok, "user": strconv.FormatUint(user, 10)})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

func jsonError(w http.ResponseWriter, msg string, code int) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(map[string]string{"error": msg})
}
