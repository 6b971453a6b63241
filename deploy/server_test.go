package deploy_test

// A real tally process for the tests: built once from the repository root,
// started on a free port, driven over HTTP and WebSocket, scraped.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
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

	"github.com/coder/websocket"
	"github.com/coder/websocket/wsjson"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

const testSecret = "deploy-test-secret-0123456789"

var httpClient = &http.Client{Timeout: 10 * time.Second}

// buildTally builds the server from the repository root once per run,
// as scripts/image does (static, -trimpath), so that the image test's
// build finds every package compiled.
var buildTally = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "tally-deploy-bin")
	if err != nil {
		return "", err
	}
	binDir = dir
	bin := filepath.Join(dir, "tally")
	cmd := exec.Command("go", "build", "-trimpath", "-o", bin, ".")
	cmd.Dir = ".."
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return bin, nil
})

// binDir holds the binary buildTally built, removed after the tests.
var binDir string

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// server is a running tally process.
type server struct {
	t    *testing.T
	bin  string
	url  string
	cmd  *exec.Cmd
	mu   sync.Mutex
	logs bytes.Buffer
}

var servingRE = regexp.MustCompile(`addr=(http://\S+)`)

// startServer runs tally with args on a free loopback port and waits for
// it to serve. It is stopped with SIGTERM when the test ends.
func startServer(t *testing.T, args ...string) *server {
	t.Helper()
	bin, err := buildTally()
	if err != nil {
		t.Fatal(err)
	}
	s := &server{t: t, bin: bin}
	s.cmd = exec.Command(bin, append([]string{"-addr", "127.0.0.1:0"}, args...)...)
	s.cmd.Env = append(os.Environ(), "TALLY_JWT_SECRET="+testSecret)
	stderr, err := s.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	served := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			s.mu.Lock()
			s.logs.WriteString(sc.Text() + "\n")
			s.mu.Unlock()
			if m := servingRE.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case served <- m[1]:
				default:
				}
			}
		}
	}()
	t.Cleanup(func() {
		s.cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { s.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			s.cmd.Process.Kill()
			<-done
			t.Errorf("tally did not stop within 15s of SIGTERM:\n%s", s.log())
		}
	})
	select {
	case s.url = <-served:
	case <-time.After(60 * time.Second):
		t.Fatalf("tally did not start:\n%s", s.log())
	}
	return s
}

func (s *server) log() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.logs.String()
}

// token signs a token with the server's secret, by the binary's own
// `tally token`.
func (s *server) token(user int, admin bool) string {
	s.t.Helper()
	args := []string{"token", "-user", fmt.Sprint(user)}
	if admin {
		args = append(args, "-admin")
	}
	cmd := exec.Command(s.bin, args...)
	cmd.Env = append(os.Environ(), "TALLY_JWT_SECRET="+testSecret)
	out, err := cmd.Output()
	if err != nil {
		s.t.Fatalf("tally token: %v", err)
	}
	return strings.TrimSpace(string(out))
}

type gqlError struct {
	Message    string         `json:"message"`
	Extensions map[string]any `json:"extensions"`
}

type gqlResponse struct {
	Data   map[string]any `json:"data"`
	Errors []gqlError     `json:"errors"`
}

// query posts a GraphQL request as token (none when empty).
func query(t *testing.T, url, token, query string, vars map[string]any) gqlResponse {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"query": query, "variables": vars})
	req, _ := http.NewRequest("POST", url+"/query", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r gqlResponse
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		t.Fatalf("%s: status %d, undecodable body: %v", query, resp.StatusCode, err)
	}
	return r
}

// mustQuery is query that fails the test on any GraphQL error.
func mustQuery(t *testing.T, url, token, q string, vars map[string]any) map[string]any {
	t.Helper()
	r := query(t, url, token, q, vars)
	if len(r.Errors) > 0 {
		t.Fatalf("%s: %+v", q, r.Errors)
	}
	return r.Data
}

// errorCode returns the code of the response's first error, "" if none.
func errorCode(r gqlResponse) string {
	if len(r.Errors) == 0 {
		return ""
	}
	code, _ := r.Errors[0].Extensions["code"].(string)
	return code
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := httpClient.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// traffic drives every kind of request the dashboard shows: a mutation
// that pushes a subscription event to an open WebSocket, a query, a
// request that never becomes an operation, and the health endpoints.
func traffic(t *testing.T, url string, tokens map[int]string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	post := mustQuery(t, url, tokens[1], `mutation Post { createPost { id } }`, nil)["createPost"].(map[string]any)["id"].(string)

	ws, _, err := websocket.Dial(ctx, strings.Replace(url, "http", "ws", 1)+"/query",
		&websocket.DialOptions{Subprotocols: []string{"graphql-transport-ws"}})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	send := func(v any) {
		if err := wsjson.Write(ctx, ws, v); err != nil {
			t.Fatal(err)
		}
	}
	next := func(want string) map[string]any {
		t.Helper()
		var m map[string]any
		if err := wsjson.Read(ctx, ws, &m); err != nil {
			t.Fatalf("waiting for %s: %v", want, err)
		}
		if m["type"] != want {
			t.Fatalf("got %v, want a %s message", m, want)
		}
		return m
	}
	send(map[string]any{"type": "connection_init", "payload": map[string]any{"Authorization": "Bearer " + tokens[1]}})
	next("connection_ack")
	send(map[string]any{"id": "1", "type": "subscribe", "payload": map[string]any{
		"query": `subscription Badges { unreadChanged { unread { likes } } }`}})
	next("next") // the badges as they are

	mustQuery(t, url, tokens[2], `mutation Like($p: ID!) { likePost(postId: $p) { id } }`, map[string]any{"p": post})
	pushed := next("next")
	if !strings.Contains(fmt.Sprint(pushed["payload"]), "likes:1") {
		t.Fatalf("the like's push: %v", pushed)
	}
	counts := mustQuery(t, url, tokens[2], `query Feed($p: ID!) { post(id: $p) { counts { likes } } }`, map[string]any{"p": post})
	if fmt.Sprint(counts["post"]) != "map[counts:map[likes:1]]" {
		t.Fatalf("Feed: %v", counts)
	}
	if code := errorCode(query(t, url, "", `{ nope }`, nil)); code != "BAD_USER_INPUT" {
		t.Fatalf("an invalid query answered %q, want BAD_USER_INPUT", code)
	}
	ws.Close(websocket.StatusNormalClosure, "")
	for _, path := range []string{"/healthz", "/readyz"} {
		if code, body := get(t, url+path); code != 200 {
			t.Fatalf("%s: %d %s", path, code, body)
		}
	}
}

// scrape reads /metrics into its metric families.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	code, body := get(t, url+"/metrics")
	if code != 200 {
		t.Fatalf("/metrics: %d", code)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("/metrics does not parse: %v", err)
	}
	return families
}

// value is the sum of the family's series whose labels include want.
func value(families map[string]*dto.MetricFamily, name string, want map[string]string) (float64, bool) {
	f, ok := families[name]
	if !ok {
		return 0, false
	}
	var sum float64
	found := false
series:
	for _, m := range f.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if labels[k] != v {
				continue series
			}
		}
		found = true
		switch {
		case m.Counter != nil:
			sum += m.GetCounter().GetValue()
		case m.Gauge != nil:
			sum += m.GetGauge().GetValue()
		case m.Histogram != nil:
			sum += float64(m.GetHistogram().GetSampleCount())
		case m.Untyped != nil:
			sum += m.GetUntyped().GetValue()
		}
	}
	return sum, found
}

// waitFor scrapes until cond holds, for up to 20 s.
func waitFor(t *testing.T, url, what string, cond func(map[string]*dto.MetricFamily) bool) map[string]*dto.MetricFamily {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		families := scrape(t, url)
		if cond(families) {
			return families
		}
		if time.Now().After(deadline) {
			t.Fatalf("/metrics never showed %s", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
