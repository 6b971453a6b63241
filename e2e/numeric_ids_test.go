package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/tally-dev/tally/engine/embedded"
	"github.com/tally-dev/tally/web/transport"
)

// TestNumericIDsAbove2Pow53: an id sent as a JSON number (or an Int
// literal) above 2^53 has already been rounded by a JavaScript client, to
// a neighbour that may name another post, so it is refused with
// BAD_USER_INPUT telling the client to send ids as strings; up to 2^53,
// and as a string of any size, ids work. Alike on the compiled fast path
// and on gqlgen's executor.
func TestNumericIDsAbove2Pow53(t *testing.T) {
	for _, gqlgenOnly := range []bool{false, true} {
		t.Run(fmt.Sprint("gqlgenOnly=", gqlgenOnly), func(t *testing.T) {
			store, err := embedded.Open(embedded.Options{})
			if err != nil {
				t.Fatal(err)
			}
			s := newTestServerWith(t, store, transport.Config{DisableFastPath: gqlgenOnly})
			const big = "1234567890123456789" // a snowflake; as a double it is ...6800
			s.q(t, 1, `mutation($id: ID) { createPost(id: $id) { id } }`, map[string]any{"id": big})
			const exact = "9007199254740992" // 2^53
			s.q(t, 1, `mutation($id: ID) { createPost(id: $id) { id } }`, map[string]any{"id": exact})

			page := `query($ids: [ID!]!) { posts(ids: $ids) { id counts { likes } } }`
			one := `query($id: ID!) { post(id: $id) { id } }`
			for round := range 3 { // the fast path compiles on the first
				// As strings, and 2^53 as a number, ids name their posts.
				if m := s.q(t, 2, page, map[string]any{"ids": []any{big, json.Number(exact)}}); str(m, "posts", 0, "id") != big || str(m, "posts", 1, "id") != exact {
					t.Fatalf("round %d: %v", round, m)
				}
				if m := s.q(t, 2, one, map[string]any{"id": json.Number(exact)}); str(m, "post", "id") != exact {
					t.Fatalf("round %d: %v", round, m)
				}
				// What a JavaScript client sends for the snowflake.
				rounded := json.Number("1234567890123456800")
				for name, c := range map[string]struct {
					query string
					vars  map[string]any
				}{
					"post":        {one, map[string]any{"id": rounded}},
					"posts":       {page, map[string]any{"ids": []any{big, rounded}}},
					"2^53+1":      {one, map[string]any{"id": json.Number("9007199254740993")}},
					"exponent":    {one, map[string]any{"id": json.Number("1.2345678901234568e18")}},
					"Int literal": {`{ post(id: 1234567890123456800) { id } }`, nil},
					"likePost":    {`mutation($id: ID!) { likePost(postId: $id) { id } }`, map[string]any{"id": rounded}},
					"recordViews": {`mutation($ids: [ID!]!) { recordViews(postIds: $ids) }`, map[string]any{"ids": []any{rounded}}},
				} {
					e := s.wantCode(t, 2, "BAD_USER_INPUT", c.query, c.vars)
					if !strings.Contains(e.Message, "send ids as strings") {
						t.Fatalf("round %d, %s: %q", round, name, e.Message)
					}
				}
			}
			// Nothing was liked by the refused mutation.
			if m := s.q(t, 2, page, map[string]any{"ids": []any{big}}); num(t, m, "posts", 0, "counts", "likes") != 0 {
				t.Fatalf("a refused like counted: %v", m)
			}
		})
	}
}
