// Package clients runs the ecosystem's own GraphQL clients (graphql-ws,
// graphql-http's audit, Apollo Client, urql), installed from the npm
// registry into this folder by scripts/test, against a Tally server in
// tests. The Node scripts live in this folder too (Node resolves an ES
// module's imports from the script's own folder, not from NODE_PATH); the
// Go tests that start the server and judge the output live with the code
// they test.
package clients

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"
)

// Dir is this folder, where package.json and node_modules live.
func Dir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(file)
}

// Require skips t when Node or the installed clients are missing, or fails
// it when TALLY_REQUIRE_NODE is set (scripts/test sets it, having installed
// them), so that CI never passes by skipping.
func Require(t testing.TB) {
	t.Helper()
	_, nodeErr := exec.LookPath("node")
	_, modErr := os.Stat(filepath.Join(Dir(), "node_modules", "graphql"))
	if nodeErr == nil && modErr == nil {
		return
	}
	msg := "node or web/clients/node_modules missing (run ./scripts/test, or npm ci in web/clients)"
	if os.Getenv("TALLY_REQUIRE_NODE") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// Run runs the Node script named (a file in this folder) with env added to
// the environment, within timeout. It returns stdout; a non-zero exit fails
// t with stdout and stderr.
func Run(t testing.TB, script string, timeout time.Duration, env ...string) string {
	t.Helper()
	Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", filepath.Join(Dir(), script))
	cmd.Dir = Dir()
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("node %s: %v\nstdout:\n%s\nstderr:\n%s", script, err, stdout.String(), stderr.String())
	}
	return stdout.String()
}
