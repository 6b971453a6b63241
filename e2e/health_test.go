package e2e

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

func TestHealthAndMetrics(t *testing.T) {
	s := newTestServer(t)
	s.createPost(t, 1)
	s.do(t, 0, `{ nope }`, nil)
	for path, want := range map[string][]string{
		"/healthz": {"ok"},
		"/readyz":  {"ready"},
		"/metrics": {
			`tally_graphql_responses_total{name="",outcome="ok",type="mutation"} 1`,
			`tally_graphql_response_seconds_bucket{name="",type="mutation"`,
			"tally_engine_posts 1",
			"tally_subscriptions 0",
			"go_goroutines",
		},
	} {
		resp, err := http.Get(s.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d", path, resp.StatusCode)
		}
		for _, w := range want {
			if !strings.Contains(string(b), w) {
				t.Errorf("%s lacks %q", path, w)
			}
		}
	}
	// GET queries work; GET mutations do not.
	resp, err := http.Get(s.URL + `/query?query={systemNotifications{id}}`)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), `"systemNotifications":[]`) {
		t.Fatalf("GET query: %s", b)
	}
}
