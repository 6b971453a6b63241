package e2e

import (
	"strings"
	"testing"

	"github.com/tally-dev/tally/engine/embedded"
	"github.com/tally-dev/tally/web/transport"
)

func TestRateLimitedMutations(t *testing.T) {
	store, err := embedded.Open(embedded.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s := newTestServerWith(t, store, transport.Config{RateLimit: 0.001, RateBurst: 3})
	for range 3 {
		s.createPost(t, 1)
	}
	e := s.wantCode(t, 1, "RATE_LIMITED", `mutation { createPost { id } }`, nil)
	if !strings.Contains(e.Message, "slow down") {
		t.Fatalf("message %q", e.Message)
	}
	// Other users and reads are not limited.
	s.createPost(t, 2)
	s.q(t, 1, `{ viewer { id } }`, nil)
	// The refusal is counted for alerts; the cost budget's series is there
	// at 0 before its first refusal.
	body := metricsText(t, s.URL)
	for _, want := range []string{`tally_rate_limited_total{limit="mutations"} 1` + "\n", `tally_rate_limited_total{limit="cost"} 0` + "\n"} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s:\n%s", strings.TrimSpace(want), grepLines(body, "tally_rate_limited_total"))
		}
	}
}
