package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/embedded"
	"github.com/tally-dev/tally/engine/snowflake"
	"github.com/tally-dev/tally/resolvers"
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
func seedPage(b *testing.B, s engine.Store) []string {
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
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			do()
		}
	})
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1000, "µs/page")
}

// benchStorePage runs the page benchmark through the full Tally handler on
// top of store.
func benchStorePage(b *testing.B, store engine.Store) {
	ts := newTestServerWith(b, store, resolvers.Config{})
	ids := seedPage(b, store)
	benchPage(b, ts.URL+"/query", ts.token(b, 1, false), ids)
}

func BenchmarkFeedPageHTTP(b *testing.B) {
	b.Run("embedded", func(b *testing.B) {
		store, err := embedded.Open(embedded.Options{})
		if err != nil {
			b.Fatal(err)
		}
		benchStorePage(b, store)
	})
	b.Run("ceiling-prebuilt-json", func(b *testing.B) {
		// The same response bytes, pre-built once through Tally, served by
		// a bare handler: what HTTP on this machine costs by itself.
		store, _ := embedded.Open(embedded.Options{})
		ts := newTestServerWith(b, store, resolvers.Config{})
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
