package e2e

import (
	"bytes"
	"io"
	"net/http"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tally-dev/tally/engine/embedded"
	"github.com/tally-dev/tally/web/transport"
)

// TestMemoryMetricsExposed: the server's /metrics shows RSS (the process
// collector's process_resident_memory_bytes) beside the live heap and the
// GC's own figures, each with a plausible value.
func TestMemoryMetricsExposed(t *testing.T) {
	srv := newTestServer(t)
	runtime.GC()
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	vals := map[string]float64{}
	for line := range bytes.Lines(body) {
		f := strings.Fields(string(line))
		if len(f) == 2 && !strings.HasPrefix(f[0], "#") {
			v, err := strconv.ParseFloat(f[1], 64)
			if err == nil {
				vals[f[0]] = v
			}
		}
	}
	for _, name := range []string{"process_resident_memory_bytes", "tally_heap_live_bytes", "tally_gc_scan_bytes", "tally_heap_free_kept_bytes", "tally_gc_idle_releases_total", "go_gc_gogc_percent", "go_gc_gomemlimit_bytes"} {
		if _, ok := vals[name]; !ok {
			t.Errorf("/metrics has no %s", name)
		}
	}
	if _, ok := vals["tally_gc_cpu_seconds_total"]; !ok {
		t.Errorf("/metrics has no tally_gc_cpu_seconds_total")
	}
	live, rss := vals["tally_heap_live_bytes"], vals["process_resident_memory_bytes"]
	if live <= 0 || rss <= live {
		t.Errorf("live heap %.0f, RSS %.0f: want 0 < live < RSS", live, rss)
	}
	if s := vals["tally_gc_scan_bytes"]; s <= 0 || s > live+64<<20 {
		t.Errorf("scan bytes %.0f with live heap %.0f", s, live)
	}
}

// After traffic of every kind, /metrics has the operation metrics split
// by type and name, subscription events apart, open sockets and
// subscriptions, the log's fsync and batch figures and snapshots (the
// build's labels are the binary's: TestVersion checks them).
func TestOperationalMetrics(t *testing.T) {
	em := transport.NewEngineMetrics()
	reg := prometheus.NewRegistry()
	em.Register(reg)
	store, err := embedded.Open(embedded.Options{Dir: t.TempDir(), Metrics: em})
	if err != nil {
		t.Fatal(err)
	}
	s := newTestServerWith(t, store, transport.Config{Metrics: reg})

	ws, err := s.dialWS(t, s.token(t, 2, false))
	if err != nil {
		t.Fatal(err)
	}
	ws.subscribe("1", `subscription Badges { unreadChanged { unread { total } } }`, nil)
	ws.nextData(5 * time.Second) // the first event
	pid := s.createPost(t, 3)
	s.post(t, "Bearer "+s.token(t, 2, false), `{"query":"mutation Like($p: ID!) { likePost(postId: $p) { id } }","variables":{"p":"`+pid+`"}}`)
	s.post(t, "Bearer "+s.token(t, 2, false), `{"query":"query Feed($p: ID!) { post(id: $p) { counts { likes } } }","variables":{"p":"`+pid+`"}}`)
	s.post(t, "", `{"query":"{ nope }"}`)
	if err := store.Snapshot(t.Context()); err != nil {
		t.Fatal(err)
	}

	body := metricsText(t, s.URL)
	for _, want := range []string{
		`tally_graphql_responses_total{name="Feed",outcome="ok",type="query"} 1`,
		`tally_graphql_responses_total{name="Like",outcome="ok",type="mutation"} 1`,
		`tally_graphql_responses_total{name="",outcome="error",type=""} 1`,
		`tally_graphql_response_seconds_bucket{name="Feed",type="query",le=`,
		`tally_graphql_subscription_events_total{name="Badges",outcome="ok"}`,
		`tally_graphql_subscription_event_seconds_count{name="Badges"}`,
		`tally_graphql_subscriptions_open{name="Badges"} 1`,
		`tally_websockets_open 1`,
		`tally_wal_fsync_seconds_count`,
		`tally_wal_batch_records_count`,
		`tally_wal_batch_bytes_sum`,
		`tally_snapshot_seconds_count 1`,
		`tally_snapshot_bytes`,
		`tally_http_responses_total{code="200",route="/query"}`,
		"tally_ready 1\n",
		"tally_snapshot_failures_total 0\n",
		"tally_snapshot_timestamp_seconds 1.", // seconds since 1970, printed as 1.7...e+09
		"tally_wal_records_since_snapshot 0\n",
		`tally_rate_limited_total{limit="mutations"} 0` + "\n",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if strings.Contains(body, `tally_graphql_response_seconds_count{name="Badges"`) {
		t.Errorf("subscription events are in the request histogram")
	}
	// Subscription events are counted: the like bumped user 3's badge, not
	// user 2's; user 2 has seen one event so far.
	if !regexp.MustCompile(`tally_graphql_subscription_events_total\{name="Badges",outcome="ok"\} [1-9]`).MatchString(body) {
		t.Errorf("no subscription event counted")
	}
	for _, m := range []string{"tally_wal_fsync_seconds_count", "tally_wal_batch_records_count"} {
		if regexp.MustCompile(m + ` 0\n`).MatchString(body) {
			t.Errorf("%s is 0 after writes", m)
		}
	}

	// Closing the socket ends the subscription and the socket.
	ws.conn.Close(1000, "")
	deadline := time.Now().Add(5 * time.Second)
	for {
		body = metricsText(t, s.URL)
		if strings.Contains(body, `tally_graphql_subscriptions_open{name="Badges"} 0`) && strings.Contains(body, "tally_websockets_open 0") &&
			strings.Contains(body, `tally_http_responses_total{code="101",route="/query"} 1`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("subscription or socket still counted open after close:\n%s", grepLines(body, "_open"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func metricsText(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
