package e2e

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/embedded"
	"github.com/tally-dev/tally/engine/redisstore"
	"github.com/tally-dev/tally/engine/redisstore/redistest"
	"github.com/tally-dev/tally/web/hub"
	"github.com/tally-dev/tally/web/transport"
)

// BenchmarkReactionPageHandler is the 50-post page of
// BenchmarkFeedPageHandler on a deployment with six reaction kinds, asked
// three ways through ServeHTTP: counts (the five counts and
// viewerHasLiked, the base), reactions (every kind's count and
// viewerReaction instead), and both. The target is the reactions
// page at most 1.3× the counts page; compare the sub-benchmarks' ns/op in
// one run, for the fast path and for gqlgen's executor.
func BenchmarkReactionPageHandler(b *testing.B) {
	store, err := embedded.Open(embedded.Options{Reactions: pageKinds})
	if err != nil {
		b.Fatal(err)
	}
	benchReactionPage(b, store)
}

// BenchmarkReactionPageHandlerRedis is BenchmarkReactionPageHandler on the
// Redis backend (a single redis-server started for the run), where the
// viewer's kind is a read of its own beside the like flag.
func BenchmarkReactionPageHandlerRedis(b *testing.B) {
	addr, _ := redistest.StartSingle(b) // stopped by b.Cleanup, after the store closes
	store, err := redisstore.Open(b.Context(), redisstore.Options{Addrs: []string{addr}, KeyPrefix: "bench", Reactions: pageKinds})
	if err != nil {
		b.Fatal(err)
	}
	benchReactionPage(b, store)
}

var pageKinds = []string{"like", "love", "haha", "wow", "sad", "angry"}

func benchReactionPage(b *testing.B, store engine.Store) {
	ts := newTestServerWith(b, store, transport.Config{})
	ids := seedPage(b, store)
	// Reactions of other kinds on a third of the posts, the viewer's among
	// them on some.
	for i, s := range ids {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			b.Fatal(err)
		}
		p := engine.PostID(n)
		if i%3 == 1 {
			for u := range 3 {
				if err := store.ReactToPost(b.Context(), engine.UserID(300+u), p, []string{"love", "haha", "wow"}[u]); err != nil {
					b.Fatal(err)
				}
			}
		}
		if i%6 == 1 {
			if err := store.ReactToPost(b.Context(), 1, p, "sad"); err != nil {
				b.Fatal(err)
			}
		}
	}
	tok := ts.token(b, 1, false)
	const counts = `id counts { likes comments reposts views favorites } viewerHasLiked`
	const reactions = `id reactions { kind count } viewerReaction`
	queries := []struct{ name, sel string }{
		{"counts", counts},
		{"reactions", reactions},
		{"both", counts + ` reactions { kind count } viewerReaction`},
	}
	handlers := []struct {
		name string
		h    http.Handler
	}{
		{"fastpath", transport.NewHandler(transport.Config{Store: store, Hub: hub.New(store), Keys: ts.keys})},
		{"gqlgen", transport.NewHandler(transport.Config{Store: store, Hub: hub.New(store), Keys: ts.keys, DisableFastPath: true})},
	}
	for _, h := range handlers {
		serves := make([]func() *httptest.ResponseRecorder, len(queries))
		for i, q := range queries {
			body, _ := json.Marshal(map[string]any{"query": `query Page($ids: [ID!]!) { posts(ids: $ids) { ` + q.sel + ` } }`,
				"variables": map[string]any{"ids": ids}})
			serve := func() *httptest.ResponseRecorder {
				req := httptest.NewRequest("POST", "/query", bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Authorization", "Bearer "+tok)
				w := httptest.NewRecorder()
				h.h.ServeHTTP(w, req)
				return w
			}
			serves[i] = serve
			if got := serve().Body.String(); strings.Contains(got, `"errors"`) || !strings.Contains(got, `"posts"`) {
				b.Fatalf("%s/%s answers %s", h.name, q.name, got)
			} else if q.name != "counts" && !strings.Contains(got, `"viewerReaction":"sad"`) {
				b.Fatalf("%s/%s: the viewer's reactions are not read: %s", h.name, q.name, got)
			}
			b.Run(h.name+"/"+q.name, func(b *testing.B) {
				b.ReportAllocs()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						serve()
					}
				})
			})
		}
		// The three pages in turn on one goroutine, so that load from
		// elsewhere on the machine falls on all alike: the ratios to the
		// counts page are the figures to compare with the target.
		b.Run(h.name+"/interleaved", func(b *testing.B) {
			spent := make([]time.Duration, len(serves))
			for b.Loop() {
				for i, serve := range serves {
					start := time.Now()
					serve()
					spent[i] += time.Since(start)
				}
			}
			for i, q := range queries[1:] {
				b.ReportMetric(float64(spent[i+1])/float64(spent[0]), q.name+"/counts")
			}
			b.ReportMetric(float64(spent[0].Nanoseconds())/float64(b.N), "counts-ns/page")
		})
	}
}
