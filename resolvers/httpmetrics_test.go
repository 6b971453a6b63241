package resolvers

import (
	"fmt"
	"net/http/httptest"
	"testing"
)

// Operation names are client-chosen: at most maxOperationNames distinct
// ones become label values; the rest, anonymous and overlong names are "".
func TestOperationNameLabelsAreBounded(t *testing.T) {
	var n nameLimiter
	n.seen = map[string]bool{}
	for i := range maxOperationNames + 50 {
		name := fmt.Sprintf("Op%d", i)
		got := n.label(name)
		if i < maxOperationNames && got != name {
			t.Fatalf("name %d labelled %q", i, got)
		}
		if i >= maxOperationNames && got != "" {
			t.Fatalf("name %d beyond the cap labelled %q", i, got)
		}
	}
	if got := n.label("Op3"); got != "Op3" {
		t.Fatalf("a known name after the cap: %q", got)
	}
	if n.label("") != "" || n.label(string(make([]byte, 65))) != "" {
		t.Fatal("anonymous or overlong name labelled")
	}
	if len(n.seen) != maxOperationNames {
		t.Fatalf("%d names kept", len(n.seen))
	}
}

func TestResponseMediaNegotiation(t *testing.T) {
	for accept, want := range map[string]string{
		"":                                  mediaJSON,
		"*/*":                               mediaJSON,
		"application/*":                     mediaJSON,
		"text/html":                         mediaJSON,
		"application/json":                  mediaJSON,
		"application/graphql-response+json": mediaGraphQLResponse,
		"application/graphql-response+json, application/json;q=0.9": mediaGraphQLResponse,
		"application/graphql-response+json;q=0.2, application/json": mediaJSON,
		"application/json, application/graphql-response+json":       mediaJSON,
		"application/graphql-response+json;q=0, */*":                mediaJSON,
		"garbage;;;, application/graphql-response+json":             mediaGraphQLResponse,
	} {
		if got := responseMedia(accept); got != want {
			t.Errorf("Accept %q: %s, want %s", accept, got, want)
		}
	}
	for accept, ours := range map[string]bool{
		"text/event-stream":                                    false,
		"multipart/mixed; deferSpec=20220824":                  false,
		"multipart/mixed, application/json;q=0.9":              true,
		"text/event-stream, application/graphql-response+json": true,
		"text/event-stream, */*;q=0":                           false,
		"application/json":                                     true,
		"":                                                     true,
	} {
		r := httptest.NewRequest("GET", "/query", nil)
		r.Header.Set("Accept", accept)
		if got := (httpTransport{}).Supports(r); got != ours {
			t.Errorf("Accept %q: JSON transport takes it %v, want %v", accept, got, ours)
		}
	}
}
