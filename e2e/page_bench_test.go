package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"syscall"
	"testing"
	"time"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/embedded"
	"github.com/tally-dev/tally/engine/snowflake"
	"github.com/tally-dev/tally/web/hub"
	"github.com/tally-dev/tally/web/tracing"
	"github.com/tally-dev/tally/web/transport"
)

// The feed-page benchmarks: one GraphQL request for a page of 50 posts'
// counts and the viewer's like/favorite flags, over real HTTP on loopback.
// Peers in the same run: the embedded engine, the Redis backend (see
// page_redis_bench_test.go), and the ceiling — a bare net/http handler
// writing the same response pre-built. Compare ratios, not absolute
// figures: the machine is small and noisy.

const pageQuery = `query Page($ids: [ID!]!) { posts(ids: $ids) {
  id counts { likes comments reposts views favorites } viewerHasLiked viewerHasFavorited } }`

const pageSize = 50

// seedPage fills s with pageSize posts with long-tailed counts and a viewer
// (user 1) who liked a third of them, and returns the page's ids.
func seedPage(b testing.TB, s engine.Store) []string {
	b.Helper()
	ctx := b.Context()
	r := rand.New(rand.NewPCG(1, 2))
	var ids []string
	now := time.Now().Add(-time.Hour).UnixMilli()
	for i := range pageSize {
		id, err := s.CreatePost(ctx, engine.UserID(100+i%10), engine.PostID(snowflake.Make(now+int64(i), 1, 0)), "")
		if err != nil {
			b.Fatal(err)
		}
		ids = append(ids, fmt.Sprint(id))
		views := make([]engine.PostID, 0, 1)
		for range r.IntN(5) {
			views = append(views, id)
		}
		if len(views) > 0 {
			s.RecordViews(ctx, views)
		}
		for u := range r.IntN(4) {
			s.Like(ctx, engine.UserID(200+u), id)
		}
		if i%3 == 0 {
			s.Like(ctx, 1, id)
		}
	}
	return ids
}

func benchPage(b *testing.B, url, token string, ids []string) {
	body, _ := json.Marshal(map[string]any{"query": pageQuery, "variables": map[string]any{"ids": ids}})
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	do := func() {
		req, _ := http.NewRequest("POST", url, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || n < 1000 {
			b.Fatalf("status %d, %d bytes", resp.StatusCode, n)
		}
	}
	do()
	b.ResetTimer()
	cpu0 := processCPU()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			do()
		}
	})
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1000, "µs/page")
	// CPU of the whole process (server and client) per page: steadier
	// than wall time on a machine others load too.
	b.ReportMetric(float64((processCPU()-cpu0).Nanoseconds())/float64(b.N)/1000, "cpu-µs/page")
}

// benchStorePage runs the page benchmark through the full Tally handler on
// top of store.
func benchStorePage(b *testing.B, store engine.Store) {
	benchStorePageWith(b, store, transport.Config{})
}

func benchStorePageWith(b *testing.B, store engine.Store, cfg transport.Config) {
	ts := newTestServerWith(b, store, cfg)
	ids := seedPage(b, store)
	benchPage(b, ts.URL+"/query", ts.token(b, 1, false), ids)
}

// BenchmarkFeedPageHTTP: the page over loopback HTTP. embedded is Tally as
// it runs (plans for the page); embedded-gqlgen is every operation through
// gqlgen's executor; handwritten is a net/http + encoding/json handler
// doing the same work without GraphQL (see handwrittenPage); the ceiling
// writes pre-built bytes.
func BenchmarkFeedPageHTTP(b *testing.B) {
	b.Run("embedded", func(b *testing.B) {
		store, err := embedded.Open(embedded.Options{})
		if err != nil {
			b.Fatal(err)
		}
		benchStorePage(b, store)
	})
	b.Run("embedded-gqlgen", func(b *testing.B) {
		store, err := embedded.Open(embedded.Options{})
		if err != nil {
			b.Fatal(err)
		}
		benchStorePageWith(b, store, transport.Config{DisableFastPath: true})
	})
	b.Run("embedded-traced", func(b *testing.B) {
		// Tracing on, as tracing.Setup makes it with the default
		// parent-based sampler: every page (no traceparent) is a sampled
		// root, exported over OTLP/HTTP to a receiver that discards.
		receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/x-protobuf")
		}))
		defer receiver.Close()
		b.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.URL)
		tp, err := tracing.Setup(b.Context(), "bench")
		if err != nil {
			b.Fatal(err)
		}
		defer tp.Shutdown(context.Background())
		store, err := embedded.Open(embedded.Options{})
		if err != nil {
			b.Fatal(err)
		}
		benchStorePageWith(b, store, transport.Config{Tracer: tp})
	})
	b.Run("handwritten", func(b *testing.B) {
		store, _ := embedded.Open(embedded.Options{})
		defer store.Close()
		ids := seedPage(b, store)
		hw := httptest.NewServer(newHandwrittenPage(b, store, ids))
		defer hw.Close()
		benchPage(b, hw.URL, "", ids)
	})
	b.Run("ceiling-prebuilt-json", func(b *testing.B) {
		// The same response bytes, pre-built once through Tally, served by
		// a bare handler: what HTTP on this machine costs by itself.
		store, _ := embedded.Open(embedded.Options{})
		ts := newTestServerWith(b, store, transport.Config{})
		ids := seedPage(b, store)
		body, _ := json.Marshal(map[string]any{"query": pageQuery, "variables": map[string]any{"ids": ids}})
		req, _ := http.NewRequest("POST", ts.URL+"/query", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+ts.token(b, 1, false))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		prebuilt, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		bare := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/json")
			w.Write(prebuilt)
		}))
		defer bare.Close()
		benchPage(b, bare.URL, "", ids)
	})
}

// handwrittenPage is the peer without a GraphQL layer, as the issue's
// reference server: it decodes the same request body with encoding/json,
// looks the posts up in a Go map (filled from the store once, with user
// 1's flags) and encodes the same JSON response with encoding/json.
type handwrittenPage struct {
	posts map[string]*handwrittenPost
}

type handwrittenPost struct {
	ID     string `json:"id"`
	Counts struct {
		Likes     int64 `json:"likes"`
		Comments  int64 `json:"comments"`
		Reposts   int64 `json:"reposts"`
		Views     int64 `json:"views"`
		Favorites int64 `json:"favorites"`
	} `json:"counts"`
	ViewerHasLiked     bool `json:"viewerHasLiked"`
	ViewerHasFavorited bool `json:"viewerHasFavorited"`
}

func newHandwrittenPage(b *testing.B, store engine.Store, ids []string) *handwrittenPage {
	pids := make([]engine.PostID, len(ids))
	for i, s := range ids {
		fmt.Sscan(s, &pids[i])
	}
	views := make([]engine.PostView, len(ids))
	if err := store.Page(b.Context(), 1, pids, engine.PageWant{Counts: true, Liked: true, Favorited: true}, views); err != nil {
		b.Fatal(err)
	}
	h := &handwrittenPage{posts: map[string]*handwrittenPost{}}
	for i, v := range views {
		p := &handwrittenPost{ID: ids[i], ViewerHasLiked: v.Liked, ViewerHasFavorited: v.Favorited}
		p.Counts.Likes, p.Counts.Comments, p.Counts.Reposts = v.Counts.Likes, v.Counts.Comments, v.Counts.Reposts
		p.Counts.Views, p.Counts.Favorites = v.Counts.Views, v.Counts.Favorites
		h.posts[ids[i]] = p
	}
	return h
}

func (h *handwrittenPage) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Query     string `json:"query"`
		Variables struct {
			IDs []string `json:"ids"`
		} `json:"variables"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var resp struct {
		Data struct {
			Posts []*handwrittenPost `json:"posts"`
		} `json:"data"`
	}
	resp.Data.Posts = make([]*handwrittenPost, len(req.Variables.IDs))
	for i, id := range req.Variables.IDs {
		resp.Data.Posts[i] = h.posts[id]
	}
	body, _ := json.Marshal(resp)
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Content-Length", fmt.Sprint(len(body)))
	w.Write(body)
}

// BenchmarkFeedPageHandler is the page without the network: one request
// through each handler's ServeHTTP on the benchmark's goroutines, so the
// figures are the CPU a page costs in each. The three handlers' bodies
// are checked equal first.
func BenchmarkFeedPageHandler(b *testing.B) {
	store, err := embedded.Open(embedded.Options{})
	if err != nil {
		b.Fatal(err)
	}
	ts := newTestServerWith(b, store, transport.Config{})
	ids := seedPage(b, store)
	tok := ts.token(b, 1, false)
	body, _ := json.Marshal(map[string]any{"query": pageQuery, "variables": map[string]any{"ids": ids}})
	handlers := []struct {
		name string
		h    http.Handler
	}{
		{"fastpath", transport.NewHandler(transport.Config{Store: store, Hub: hub.New(store), Keys: ts.keys})},
		{"gqlgen", transport.NewHandler(transport.Config{Store: store, Hub: hub.New(store), Keys: ts.keys, DisableFastPath: true})},
		{"handwritten", newHandwrittenPage(b, store, ids)},
	}
	serve := func(h http.Handler) *httptest.ResponseRecorder {
		req := httptest.NewRequest("POST", "/query", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+tok)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w
	}
	want := serve(handlers[1].h).Body.String()
	for _, h := range handlers {
		if got := serve(h.h).Body.String(); got != want {
			b.Fatalf("%s answers\n%s\ngqlgen answers\n%s", h.name, got, want)
		}
	}
	for _, h := range handlers {
		b.Run(h.name, func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					serve(h.h)
				}
			})
		})
	}
}

// BenchmarkPageResponseWrite: the cost of writing a 50-post page's data
// into the HTTP response body, as the transport does today (json.Marshal
// of a struct holding the data as a json.RawMessage, which encoding/json
// compacts and validates byte by byte) and by appending the bytes
// gqlgen already produced (compact, valid JSON) between a prefix and a
// suffix.
func BenchmarkPageResponseWrite(b *testing.B) {
	store, err := embedded.Open(embedded.Options{})
	if err != nil {
		b.Fatal(err)
	}
	ts := newTestServerWith(b, store, transport.Config{})
	ids := seedPage(b, store)
	body, _ := json.Marshal(map[string]any{"query": pageQuery, "variables": map[string]any{"ids": ids}})
	req, _ := http.NewRequest("POST", ts.URL+"/query", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+ts.token(b, 1, false))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	var page struct{ Data json.RawMessage }
	json.NewDecoder(resp.Body).Decode(&page)
	resp.Body.Close()
	type httpResponse struct {
		Errors     []any           `json:"errors,omitempty"`
		Data       json.RawMessage `json:"data,omitempty"`
		Extensions map[string]any  `json:"extensions,omitempty"`
	}
	b.Run("json.Marshal", func(b *testing.B) {
		for b.Loop() {
			json.Marshal(httpResponse{Data: page.Data})
		}
	})
	b.Run("append", func(b *testing.B) {
		for b.Loop() {
			out := make([]byte, 0, len(page.Data)+10)
			out = append(out, `{"data":`...)
			out = append(out, page.Data...)
			_ = append(out, '}')
		}
	})
}

// processCPU is the user and system CPU time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
