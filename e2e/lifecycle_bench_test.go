package e2e

import (
	"bytes"
	"encoding/json"
	"net/http/httptest"
	"testing"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/embedded"
	"github.com/tally-dev/tally/resolvers"
	"github.com/tally-dev/tally/web/auth"
	"github.com/tally-dev/tally/web/hub"
	"github.com/tally-dev/tally/web/transport"
)

// BenchmarkCommentHandler is one commentOnPost through the handler's
// ServeHTTP on the embedded engine (in memory): as an end user under
// -content-writes any without a comment id (the write before the
// lifecycle), the same with an id (counted once: the post's comment ids
// are looked up and grow by one), and as a service token under
// -content-writes service with an id (the directive's check on top). Each
// iteration sends a new comment id, so every one is counted.
func BenchmarkCommentHandler(b *testing.B) {
	cases := []struct {
		name   string
		writes resolvers.ContentWrites
		role   string
		withID bool
	}{
		{"user-any-noid", resolvers.ContentWritesAny, "", false},
		{"user-any-id", resolvers.ContentWritesAny, "", true},
		{"service-service-id", resolvers.ContentWritesService, auth.RoleService, true},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			store, err := embedded.Open(embedded.Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer store.Close()
			keys, _ := auth.NewKeys([]byte("test-secret-0123456789"))
			h := transport.NewHandler(transport.Config{Store: store, Hub: hub.New(store), Keys: keys, ContentWrites: c.writes})
			post, err := store.CreatePost(b.Context(), 1, 0, "")
			if err != nil {
				b.Fatal(err)
			}
			tok, _ := keys.SignRole(2, c.role, 0)
			var ids commentIDs
			serve := func() {
				vars := map[string]any{"p": id(uint64(post))}
				if c.withID {
					vars["c"] = ids.next()
				}
				body, _ := json.Marshal(map[string]any{"query": commentQ, "variables": vars})
				req := httptest.NewRequest("POST", "/query", bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Authorization", "Bearer "+tok)
				w := httptest.NewRecorder()
				h.ServeHTTP(w, req)
				if w.Code != 200 || bytes.Contains(w.Body.Bytes(), []byte(`"errors"`)) {
					b.Fatalf("%d %s", w.Code, w.Body)
				}
			}
			b.ReportAllocs()
			sent := 0
			for b.Loop() {
				serve()
				sent++
			}
			b.StopTimer()
			counts, err := store.Counts(b.Context(), []engine.PostID{post})
			if err != nil || counts[0].Comments != int64(sent) {
				b.Fatalf("%d comments after %d sent (%v)", counts[0].Comments, sent, err)
			}
		})
	}
}
