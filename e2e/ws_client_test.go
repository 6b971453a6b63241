package e2e

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tally-dev/tally/web/auth"
	"github.com/tally-dev/tally/web/clients"
	"github.com/tally-dev/tally/web/hub"
	"github.com/tally-dev/tally/web/transport"
)

type closeEvent struct {
	Code   int    `json:"code"`
	Reason string `json:"reason"`
}

// TestGraphQLWSClientOnBadToken runs the reference graphql-ws client with
// a bad token. Before Tally's own transport the socket closed with 1000
// "terminated", which the client treats as a normal close and retries at
// once: 540–1,060 sockets a second, and the app never heard why. With
// 4403 the client waits (randomised exponential backoff), gives up after
// its retryAttempts, and the code and reason reach the app's closed
// listener at once and its subscription's error handler when it gives up.
func TestGraphQLWSClientOnBadToken(t *testing.T) {
	clients.Require(t)
	store := openStore(t)
	keys, _ := auth.NewKeys([]byte("test-secret-0123456789"))
	h := hub.New(store)
	var upgrades atomic.Int64
	inner := transport.NewServerHandler(transport.ServerConfig{Config: transport.Config{Store: store, Hub: h, Keys: keys}})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "" {
			upgrades.Add(1)
		}
		inner.ServeHTTP(w, r)
	}))
	t.Cleanup(func() { srv.Close(); h.Close(); store.Close() })
	good, _ := keys.Sign(1, false, time.Hour)
	other, _ := auth.NewKeys([]byte("another-secret-0123456789"))
	bad, _ := other.Sign(1, false, time.Hour)

	out := clients.Run(t, "ws-badtoken.mjs", 60*time.Second,
		"TALLY_WS_URL=ws"+strings.TrimPrefix(srv.URL, "http")+"/query",
		"TALLY_BAD_TOKEN="+bad, "TALLY_GOOD_TOKEN="+good, "TALLY_WATCH_MS=2000")
	var res struct {
		Defaults struct {
			Attempts   int          `json:"attempts"`
			Closes     []closeEvent `json:"closes"`
			SinkErrors int          `json:"sinkErrors"`
		} `json:"defaults"`
		Exhausted struct {
			Attempts  int          `json:"attempts"`
			Closes    []closeEvent `json:"closes"`
			SinkError *closeEvent  `json:"sinkError"`
		} `json:"exhausted"`
		Good struct {
			Next map[string]any `json:"next"`
		} `json:"good"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	t.Logf("default settings, 2 s: %d attempts (%d upgrades seen by the server in all), closes %+v; no wait between retries: %d attempts, error handler got %+v",
		res.Defaults.Attempts, upgrades.Load(), res.Defaults.Closes, res.Exhausted.Attempts, res.Exhausted.SinkError)

	d := res.Defaults
	if d.Attempts < 1 || d.Attempts > 2 {
		t.Fatalf("with default retry settings the client connected %d times in 2 s, want 1 or 2 (its first backoff is 1.3–4 s)", d.Attempts)
	}
	if len(d.Closes) == 0 || d.Closes[0].Code != 4403 || !strings.Contains(d.Closes[0].Reason, "Forbidden") {
		t.Fatalf("the app's closed listener got %+v, want 4403 Forbidden", d.Closes)
	}
	e := res.Exhausted
	if e.Attempts != 6 {
		t.Fatalf("the client connected %d times before giving up, want 1 + its 5 retries", e.Attempts)
	}
	if e.SinkError == nil || e.SinkError.Code != 4403 || !strings.Contains(e.SinkError.Reason, "signature does not match") {
		t.Fatalf("the subscription's error handler got %+v, want the 4403 close event", e.SinkError)
	}
	if get(res.Good.Next, "data", "unreadChanged", "unread", "total") == nil {
		t.Fatalf("with a good token the subscription got %v", res.Good.Next)
	}
	// The server saw no more sockets than the client says it opened.
	if n := upgrades.Load(); n > int64(d.Attempts+e.Attempts+1) {
		t.Fatalf("the server saw %d upgrades, the client reports %d", n, d.Attempts+e.Attempts+1)
	}
}

// TestGraphQLWSCrowdBehindOneAddress: 200 reference graphql-ws clients
// behind one address (an office, a carrier's NAT, a reconnect storm after
// a restart) subscribe at once against a per-address cap of 16 sockets
// not yet initialised. Refused with HTTP 429 to the upgrade, graphql-ws
// took the failed upgrade as final (its retry logic retries close events
// only): most of the crowd stayed out. Accepted and closed with 1013, the
// refused retry with the client's own backoff and every one subscribes.
func TestGraphQLWSCrowdBehindOneAddress(t *testing.T) {
	clients.Require(t)
	const crowd = 200
	s := newTestServerWith(t, openStore(t), transport.Config{WebSocket: transport.WSConfig{MaxPerAddress: 16}})
	tokens := make([]string, crowd)
	for i := range tokens {
		tokens[i] = s.token(t, uint64(1000+i), false)
	}
	out := clients.Run(t, "ws-crowd.mjs", 90*time.Second,
		"TALLY_WS_URL="+wsURL(s), "TALLY_TOKENS="+strings.Join(tokens, ","), "TALLY_WITHIN_MS=45000")
	var res struct {
		Subscribed, Failed, Attempts int
		Closes                       map[string]int
		LastMs                       int64
		Errors                       []closeEvent
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	t.Logf("%d of %d subscribed, the last after %d ms; %d connection attempts, closes seen by the clients %v",
		res.Subscribed, crowd, res.LastMs, res.Attempts, res.Closes)
	if res.Subscribed != crowd || res.Failed != 0 {
		t.Fatalf("%d of %d clients subscribed, %d failed (%+v)", res.Subscribed, crowd, res.Failed, res.Errors)
	}
	// The cap did refuse some: the crowd got in by retrying.
	if res.Closes["1013"] == 0 || res.Attempts <= crowd {
		t.Fatalf("the cap refused no one (closes %v, %d attempts): the test tests nothing", res.Closes, res.Attempts)
	}
}
