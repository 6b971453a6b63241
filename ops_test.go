package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tally-dev/tally/engine/embedded"
	"github.com/tally-dev/tally/web/transport"
)

// tally -h lists the subcommands and the serve flags; each subcommand's -h
// its own flags, log flags included.
func TestHelpListsSubcommandsAndFlags(t *testing.T) {
	code, _, errs := runCLI(t, "-h")
	if code != 0 {
		t.Fatalf("tally -h exit %d", code)
	}
	for _, c := range commands {
		if !strings.Contains(errs, "tally "+c.name) && c.name != "serve" {
			t.Errorf("tally -h lacks %q:\n%s", c.name, errs)
		}
	}
	for _, f := range []string{"-addr", "-pprof", "-version", "-log-format", "-log-level"} {
		if !strings.Contains(errs, f) {
			t.Errorf("tally -h lacks flag %s", f)
		}
	}
	code, out, _ := runCLI(t, "help")
	if code != 0 || !strings.Contains(out, "tally import") || !strings.Contains(out, "tally version") {
		t.Fatalf("tally help: %d\n%s", code, out)
	}
	for cmd, flags := range map[string][]string{
		"import":    {"-batch", "-data", "-log-format"},
		"token":     {"-user", "-admin", "-log-format"},
		"demo-seed": {"-data", "-log-level"},
		"backup":    {"-out"},
		"restore":   {"-in"},
		"repair":    {"-data"},
	} {
		code, _, errs := runCLI(t, cmd, "-h")
		if code != 0 || !strings.Contains(errs, "Usage: tally "+cmd) {
			t.Errorf("tally %s -h: %d\n%s", cmd, code, errs)
		}
		for _, f := range flags {
			if !strings.Contains(errs, f) {
				t.Errorf("tally %s -h lacks %s:\n%s", cmd, f, errs)
			}
		}
	}
	if code, _, errs := runCLI(t, "token", "-user", "1", "-log-format", "xml"); code != 2 || !strings.Contains(errs, "text or json") {
		t.Fatalf("bad -log-format: %d %s", code, errs)
	}
	if code, _, errs := runCLI(t, "-log-level", "loud", "-addr", "127.0.0.1:0", "-data", t.TempDir()); code != 2 || !strings.Contains(errs, "-log-level") {
		t.Fatalf("bad -log-level: %d %s", code, errs)
	}
	t.Setenv("TALLY_JWT_SECRET", "ops-test-secret-0123456789")
	if code, _, errs := runCLI(t, "-pprof", "256.0.0.1:1", "-addr", "127.0.0.1:0", "-data", t.TempDir()); code != 1 || !strings.Contains(errs, "-pprof") {
		t.Fatalf("unlistenable -pprof: %d %s", code, errs)
	}
}

// -version and tally version print the version, the commit and the Go
// version; a built binary knows its commit, and so does its /metrics.
func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"-version"}, {"version"}} {
		code, out, _ := runCLI(t, args...)
		if code != 0 || !strings.HasPrefix(out, "tally ") || !strings.Contains(out, "commit ") || !strings.Contains(out, "go1.") {
			t.Fatalf("%v: %d %q", args, code, out)
		}
	}
	if testing.Short() {
		return
	}
	// Without VCS stamping, -ldflags -X sets them, and the running
	// server's /metrics says which build runs.
	bin := filepath.Join(t.TempDir(), "tally")
	if out, err := exec.Command("go", "build", "-buildvcs=false", "-ldflags", "-X main.ldVersion=v9.8.7 -X main.ldCommit=abc123", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, _ := exec.Command(bin, "version").Output()
	if !strings.Contains(string(out), "tally v9.8.7\ncommit abc123") {
		t.Fatalf("ldflags version: %s", out)
	}
	p := startBinary(t, bin, t.TempDir())
	body := metricsText(t, p.url)
	if !regexp.MustCompile(`tally_build_info\{commit="abc123",goversion="go1\.[^"]*",version="v9\.8\.7"\} 1`).MatchString(body) {
		t.Fatalf("tally_build_info does not name the build:\n%s", grepLines(body, "tally_build_info"))
	}

	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git: builds carry no commit")
	}
	if fi, err := os.Stat(filepath.Join(repoRoot, ".git")); err != nil || !fi.IsDir() {
		t.Skip("go stamps VCS data only where .git is a directory, not in a git worktree")
	}
	// -buildvcs=true: this machine's GOFLAGS may turn stamping off.
	if out, err := exec.Command("go", "build", "-buildvcs=true", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "-version").Output()
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`commit [0-9a-f]{40}`).Match(out) {
		t.Fatalf("built binary does not know its commit: %s", out)
	}
}

// jsonLines parses every line of s as a JSON object.
func jsonLines(t *testing.T, s string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(s), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line is not JSON: %q", line)
		}
		out = append(out, m)
	}
	return out
}

func findLine(lines []map[string]any, msg string) map[string]any {
	for _, l := range lines {
		if l["msg"] == msg {
			return l
		}
	}
	return nil
}

// -log-format json: every line the server writes is JSON (dev tokens and
// the access log included), and so is every line of a subcommand.
func TestJSONLogs(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	bin, err := buildTally()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cmd := exec.Command(bin, "-addr", "127.0.0.1:0", "-data", filepath.Join(dir, "data"), "-log-format", "json", "-log-level", "debug")
	cmd.Env = append(os.Environ(), "TALLY_JWT_SECRET=") // dev mode: tokens are logged too
	pipe, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	var mu sync.Mutex
	var logBuf bytes.Buffer
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			mu.Lock()
			logBuf.WriteString(sc.Text() + "\n")
			mu.Unlock()
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil && m["msg"] == "tally serving" {
				addr <- m["addr"].(string)
			}
		}
	}()
	var url string
	select {
	case url = <-addr:
	case <-time.After(60 * time.Second):
		t.Fatalf("no JSON 'tally serving' line:\n%s", logBuf.String())
	}
	resp, err := http.Post(url+"/query", "application/json", strings.NewReader(`{"query":"query Probe { __typename }"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	cmd.Process.Signal(syscall.SIGTERM)
	cmd.Wait()
	mu.Lock()
	lines := jsonLines(t, logBuf.String())
	mu.Unlock()
	if l := findLine(lines, "dev tokens"); l == nil || !strings.HasPrefix(fmt.Sprint(l["admin_authorization"]), "Bearer ") {
		t.Errorf("no dev tokens line in JSON: %v", l)
	}
	if l := findLine(lines, "http request"); l == nil || l["op_name"] != "Probe" || l["status"] != float64(200) || l["path"] != "/query" {
		t.Errorf("access log line: %v", l)
	}
	if findLine(lines, "stopped") == nil {
		t.Errorf("no 'stopped' line")
	}

	// A subcommand logs in the same format, its failure included.
	csv := filepath.Join(dir, "counts.csv")
	os.WriteFile(csv, []byte("post_id,likes\n1589000000000000001,3\nbad,1\n"), 0o644)
	code, out, errs := runCLI(t, "import", "-log-format", "json", "-data", filepath.Join(dir, "import"), csv)
	if code != 1 || !strings.Contains(out, "imported 1 rows") {
		t.Fatalf("import: %d %s %s", code, out, errs)
	}
	lines = jsonLines(t, errs)
	if l := findLine(lines, "import: row rejected"); l == nil || l["level"] != "WARN" || !strings.Contains(fmt.Sprint(l["err"]), "counts.csv:3") {
		t.Errorf("rejected row line: %v\n%s", l, errs)
	}
	if l := findLine(lines, "tally import failed"); l == nil || l["level"] != "ERROR" {
		t.Errorf("failure line: %v\n%s", l, errs)
	}
}

// At debug level each request gets an access log line with the method,
// path, operation, status, duration and user; at info level none.
func TestAccessLogAtDebug(t *testing.T) {
	var buf syncBuffer
	old := slog.Default()
	t.Cleanup(func() { slog.SetDefault(old) })
	s := newTestServer(t)
	q := `{"query":"query Viewer { viewer { id } }"}`

	slog.SetDefault(slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo})))
	s.post(t, "Bearer "+s.token(t, 7, false), q)
	if strings.Contains(buf.String(), "http request") {
		t.Fatalf("access log at info level: %s", buf.String())
	}

	slog.SetDefault(slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	s.post(t, "Bearer "+s.token(t, 7, false), q)
	s.post(t, "", `{"query": 1}`)
	var ok, bad map[string]any
	for _, l := range jsonLines(t, buf.String()) {
		if l["msg"] != "http request" {
			continue
		}
		if l["user"] == "7" {
			ok = l
		} else {
			bad = l
		}
	}
	if ok == nil || ok["method"] != "POST" || ok["path"] != "/query" || ok["status"] != float64(200) ||
		ok["op_type"] != "query" || ok["op_name"] != "Viewer" || ok["duration"] == nil {
		t.Fatalf("access line %v\nlog:\n%s", ok, buf.String())
	}
	if bad == nil || bad["status"] != float64(400) || bad["user"] != "" {
		t.Fatalf("access line for a bad request: %v", bad)
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
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

// -pprof serves the profiles on its own address only; without it there is
// no profiling endpoint at all.
func TestPprofOnItsOwnAddress(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	p := startTally(t, t.TempDir(), "-pprof", "127.0.0.1:0")
	var pprofURL string
	deadline := time.Now().Add(10 * time.Second)
	re := regexp.MustCompile(`pprof=(http://\S+)`)
	for pprofURL == "" {
		if m := re.FindStringSubmatch(p.log()); m != nil {
			pprofURL = m[1]
		} else if time.Now().After(deadline) {
			t.Fatalf("no pprof line:\n%s", p.log())
		}
		time.Sleep(10 * time.Millisecond)
	}
	get := func(url string) (int, string) {
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get(pprofURL + "cmdline"); code != 200 || !strings.Contains(body, "-pprof") {
		t.Fatalf("pprof cmdline: %d %q", code, body)
	}
	if code, body := get(pprofURL + "goroutine?debug=1"); code != 200 || !strings.Contains(body, "goroutine profile") {
		t.Fatalf("pprof goroutines: %d %.200s", code, body)
	}
	if _, body := get(p.url + "/debug/pprof/cmdline"); strings.Contains(body, "-pprof") {
		t.Fatal("the API address serves pprof")
	}
	if _, body := get(p.url + "/debug/pprof/goroutine?debug=1"); strings.Contains(body, "goroutine profile") {
		t.Fatal("the API address serves pprof")
	}
	p2 := startTally(t, t.TempDir())
	time.Sleep(100 * time.Millisecond)
	if strings.Contains(p2.log(), "pprof") {
		t.Fatalf("pprof is on without -pprof:\n%s", p2.log())
	}
}
