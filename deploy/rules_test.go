package deploy_test

import (
	"os"
	"os/exec"
	"testing"
)

// needTool returns the path of an optional tool the test runs, or skips
// the test without it, unless requireEnv is set (scripts/test sets it,
// having installed the tool), which turns the skip into a failure so CI
// cannot pass by silently testing nothing.
func needTool(t *testing.T, name, install, requireEnv string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err == nil {
		return path
	}
	if os.Getenv(requireEnv) != "" {
		t.Fatalf("%s is not on PATH (%s); %s is set, so this is a failure", name, install, requireEnv)
	}
	t.Skipf("%s is not on PATH (%s); set %s=1 to make this a failure", name, install, requireEnv)
	return ""
}

// The alert rules are valid Prometheus rules, and their unit tests
// (prometheus/alerts_test.yml) pass: each alert fires when it should,
// with its labels and rendered annotations, and stays quiet otherwise.
func TestAlertRules(t *testing.T) {
	t.Parallel() // promtool mostly waits; the other tests build and run servers meanwhile
	promtool := needTool(t, "promtool", "apt-get install -y --no-install-recommends prometheus", "TALLY_REQUIRE_PROMTOOL")
	for _, args := range [][]string{
		{"check", "rules", "alerts.yml"},
		{"test", "rules", "alerts_test.yml"},
	} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = "prometheus"
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("promtool %v: %v\n%s", args, err, out)
		}
	}
}
