package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

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
	drained := make(chan struct{})
	go func() {
		defer close(drained)
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
	// Wait closes the pipe once the process exits: read it to its end
	// first, or the last lines ('stopped') may never be read.
	<-drained
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
