package transport

import (
	"encoding/json"
	"testing"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"github.com/tally-dev/tally/resolvers"
)

// TestEncodeResponseMatchesMarshal: the hand-assembled response is what
// json.Marshal of httpResponse writes, for every combination of errors,
// data (including null) and extensions.
func TestEncodeResponseMatchesMarshal(t *testing.T) {
	errs := gqlerror.List{{Message: `bad <id> "x"`, Path: ast.Path{ast.PathName("posts"), ast.PathIndex(2)},
		Extensions: map[string]any{"code": resolvers.CodeBadUserInput}}}
	datas := []json.RawMessage{nil, json.RawMessage(`null`), json.RawMessage(`{"posts":[{"id":"1","counts":{"likes":3}},null]}`)}
	exts := []map[string]any{nil, {"retryAfter": 2}}
	for _, e := range []gqlerror.List{nil, errs} {
		for _, d := range datas {
			for _, x := range exts {
				resp := &graphql.Response{Errors: e, Data: d, Extensions: x}
				got, err := encodeResponse(resp)
				if err != nil {
					t.Fatal(err)
				}
				want, err := json.Marshal(httpResponse{Errors: e, Data: d, Extensions: x})
				if err != nil {
					t.Fatal(err)
				}
				if string(got) != string(want) {
					t.Errorf("encodeResponse = %s\njson.Marshal   = %s", got, want)
				}
			}
		}
	}
	if _, err := encodeResponse(&graphql.Response{Extensions: map[string]any{"bad": make(chan int)}}); err == nil {
		t.Error("an unencodable extension encoded without error")
	}
}
