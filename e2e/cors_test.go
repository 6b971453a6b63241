package e2e

import (
	"net/http"
	"strings"
	"testing"

	"github.com/tally-dev/tally/engine/embedded"
	"github.com/tally-dev/tally/web/transport"
)

func TestCORS(t *testing.T) {
	store, _ := embedded.Open(embedded.Options{})
	s := newTestServerWith(t, store, transport.Config{CORSOrigins: []string{"https://app.example"}})
	pre := func(origin string) *http.Response {
		req, _ := http.NewRequest("OPTIONS", s.URL+"/query", nil)
		req.Header.Set("Origin", origin)
		req.Header.Set("Access-Control-Request-Method", "POST")
		req.Header.Set("Access-Control-Request-Headers", "authorization, content-type")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	if r := pre("https://app.example"); r.StatusCode != 204 || r.Header.Get("Access-Control-Allow-Origin") != "https://app.example" ||
		!strings.Contains(r.Header.Get("Access-Control-Allow-Headers"), "Authorization") {
		t.Fatalf("allowed preflight: %d %v", r.StatusCode, r.Header)
	}
	if r := pre("https://evil.example"); r.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Fatalf("other origin allowed: %v", r.Header)
	}
	req, _ := http.NewRequest("POST", s.URL+"/query", strings.NewReader(`{"query":"{ systemNotifications { id } }"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Origin", "https://app.example")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Access-Control-Allow-Origin") != "https://app.example" {
		t.Fatalf("cross-origin POST: %d %v", resp.StatusCode, resp.Header)
	}
}
