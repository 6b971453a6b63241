package e2e

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tally-dev/tally/web/auth"
)

// SIGTERM drains and exits 0; what was acknowledged is there on restart.
func TestGracefulShutdown(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	dir := t.TempDir()
	p := startTally(t, dir)
	keys, _ := auth.NewKeys([]byte(crashSecret))
	c := &crashClient{http: httpClient(), keys: keys}
	d, err := c.call(p.url, 3, false, `mutation { createPost { id } }`, nil)
	if err != nil {
		t.Fatal(err)
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- p.wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v\n%s", err, p.log())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("no exit 15 s after SIGTERM")
	}
	if !strings.Contains(p.log(), "stopped") {
		t.Fatalf("no clean stop in the log:\n%s", p.log())
	}
	p = startTally(t, dir)
	d2, err := c.call(p.url, 3, false, `{ viewer { user { postCount } } }`, nil)
	if err != nil || !strings.Contains(string(d2), `"postCount":1`) {
		t.Fatalf("after restart: %s %v (created %s)", d2, err, d)
	}
}
