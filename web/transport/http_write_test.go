package transport

import (
	"encoding/json"
	"net/http/httptest"
	"testing"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"github.com/tally-dev/tally/resolvers"
)

// TestWriteResponseFromPlanBuffer: a response whose data a plan appended
// to the transport's buffer is written from that buffer, and any other
// response (data of its own, errors, extensions, no data) as
// writeGraphQL writes it; the bytes and headers are the same either way.
func TestWriteResponseFromPlanBuffer(t *testing.T) {
	data := `{"posts":[{"id":"1","counts":{"likes":3}},null]}`
	inBuffer := func() (*[]byte, json.RawMessage) {
		buf := append([]byte(dataPrefix), data...)
		return &buf, json.RawMessage(buf[len(dataPrefix):])
	}
	errs := gqlerror.List{{Message: "x", Extensions: map[string]any{"code": resolvers.CodeInternal}}}
	cases := map[string]func() (*graphql.Response, *[]byte){
		"plan data in the buffer": func() (*graphql.Response, *[]byte) {
			into, d := inBuffer()
			return &graphql.Response{Data: d}, into
		},
		"data of its own": func() (*graphql.Response, *[]byte) {
			into, _ := inBuffer()
			return &graphql.Response{Data: json.RawMessage(data)}, into
		},
		"plan data and an error": func() (*graphql.Response, *[]byte) {
			into, d := inBuffer()
			return &graphql.Response{Data: d, Errors: errs}, into
		},
		"plan data and extensions": func() (*graphql.Response, *[]byte) {
			into, d := inBuffer()
			return &graphql.Response{Data: d, Extensions: map[string]any{"n": 1}}, into
		},
		"a shorter slice of the buffer": func() (*graphql.Response, *[]byte) {
			into, d := inBuffer()
			return &graphql.Response{Data: d[:len(d)-10]}, into
		},
		"errors only": func() (*graphql.Response, *[]byte) {
			into, _ := inBuffer()
			return &graphql.Response{Errors: errs}, into
		},
		"no buffer": func() (*graphql.Response, *[]byte) { return &graphql.Response{Data: json.RawMessage(data)}, nil },
	}
	for name, mk := range cases {
		for _, media := range []string{mediaJSON, mediaGraphQLResponse} {
			resp, into := mk()
			want := httptest.NewRecorder()
			wantResp := *resp
			wantResp.Data = append(json.RawMessage(nil), resp.Data...)
			writeGraphQL(want, media, 0, &wantResp)
			got := httptest.NewRecorder()
			writeResponse(got, media, resp, into)
			if got.Code != want.Code || got.Body.String() != want.Body.String() ||
				got.Header().Get("Content-Type") != want.Header().Get("Content-Type") ||
				got.Header().Get("Content-Length") != want.Header().Get("Content-Length") {
				t.Errorf("%s, %s: wrote %d %q %s, want %d %q %s", name, media, got.Code, got.Header(), got.Body, want.Code, want.Header(), want.Body)
			}
		}
	}
}
