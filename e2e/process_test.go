package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/web/auth"
)

// repoRoot is the module's root, where the tally command's main package
// is.
const repoRoot = ".."

// binDir holds the binary the tests build; TestMain removes it.
var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "tally-e2e")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// buildTally builds the real binary once per test run, when a test first
// needs it.
var buildTally = sync.OnceValues(func() (string, error) {
	bin := filepath.Join(binDir, "tally")
	if out, err := goBuild("-o", bin); err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return bin, nil
})

// goBuild builds the tally command with the flags given.
func goBuild(flags ...string) ([]byte, error) {
	cmd := exec.Command("go", append(append([]string{"build"}, flags...), ".")...)
	cmd.Dir = repoRoot
	return cmd.CombinedOutput()
}

// runCLI runs the binary with args in the test's environment until it
// exits, and returns its exit code and output.
func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	bin, err := buildTally()
	if err != nil {
		t.Fatal(err)
	}
	var o, e bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = &o, &e
	var exit *exec.ExitError
	if err := cmd.Run(); errors.As(err, &exit) {
		code = exit.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, o.String(), e.String()
}

const crashSecret = "crash-test-secret-0123456789"

// proc is a running tally server.
type proc struct {
	cmd    *exec.Cmd
	url    string
	stderr *bytes.Buffer
	mu     *sync.Mutex
	// drained is closed once stderr has been read to its end: Wait closes
	// the pipe, so a Wait before that can lose the last lines.
	drained chan struct{}
}

var servingRE = regexp.MustCompile(`addr=http://(\S+)`)

func startTally(t *testing.T, dataDir string, extra ...string) *proc {
	t.Helper()
	bin, err := buildTally()
	if err != nil {
		t.Fatal(err)
	}
	return startBinary(t, bin, dataDir, extra...)
}

// startBinary is startTally for a binary built otherwise.
func startBinary(t *testing.T, bin, dataDir string, extra ...string) *proc {
	t.Helper()
	args := append([]string{"-addr", "127.0.0.1:0", "-data", dataDir, "-rate-limit", "0"}, extra...)
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "TALLY_JWT_SECRET="+crashSecret)
	pipe, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, stderr: &bytes.Buffer{}, mu: &sync.Mutex{}, drained: make(chan struct{})}
	addr := make(chan string, 1)
	go func() {
		defer close(p.drained)
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.stderr.WriteString(line + "\n")
			p.mu.Unlock()
			if m := servingRE.FindStringSubmatch(line); m != nil {
				select {
				case addr <- m[1]:
				default:
				}
			}
		}
	}()
	select {
	case a := <-addr:
		p.url = "http://" + a
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("tally did not start:\n%s", p.log())
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return p
}

func (p *proc) log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

// wait waits for the process to exit, having read its stderr to the end.
func (p *proc) wait() error {
	<-p.drained
	return p.cmd.Wait()
}

func (p *proc) kill9() {
	p.cmd.Process.Signal(syscall.SIGKILL)
	p.wait()
}

func httpClient() *http.Client { return &http.Client{Timeout: 10 * time.Second} }

// client posts GraphQL to a server as one user.
type crashClient struct {
	http *http.Client
	keys *auth.Keys
}

// call returns nil only for an acknowledged success.
func (c *crashClient) call(url string, user uint64, admin bool, query string, vars map[string]any) (json.RawMessage, error) {
	tok, _ := c.keys.Sign(engine.UserID(user), admin, 0)
	body, _ := json.Marshal(map[string]any{"query": query, "variables": vars})
	req, _ := http.NewRequest("POST", url+"/query", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	var r struct {
		Data   json.RawMessage
		Errors []gqlError
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, fmt.Errorf("bad response %q", raw)
	}
	if len(r.Errors) > 0 {
		return nil, fmt.Errorf("%s: %s", r.Errors[0].Extensions["code"], r.Errors[0].Message)
	}
	return r.Data, nil
}
