package transport

import (
	"net/http/httptest"
	"testing"
)

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
