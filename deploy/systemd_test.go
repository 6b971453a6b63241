package deploy_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The systemd unit is one systemd accepts, its hardening keeps
// `systemd-analyze security` at an exposure of 2.0 or less ("OK"), and the
// server starts with the flags of its ExecStart.
func TestSystemdUnit(t *testing.T) {
	analyze := needTool(t, "systemd-analyze", "apt-get install -y systemd", "TALLY_REQUIRE_SYSTEMD")
	bin, err := buildTally()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("tally.service")
	if err != nil {
		t.Fatal(err)
	}
	// verify wants ExecStart's binary to exist.
	unit := strings.ReplaceAll(string(b), "/usr/local/bin/tally", bin)
	path := filepath.Join(t.TempDir(), "tally.service")
	if err := os.WriteFile(path, []byte(unit), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"verify", path},
		{"security", "--offline=yes", "--threshold=20", path},
	} {
		if out, err := exec.Command(analyze, args...).CombinedOutput(); err != nil {
			t.Errorf("systemd-analyze %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}

	var execStart []string
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "ExecStart="); ok {
			execStart = strings.Fields(rest)
		}
	}
	if len(execStart) < 1 || execStart[0] != "/usr/local/bin/tally" {
		t.Fatalf("ExecStart %q does not run /usr/local/bin/tally", execStart)
	}
	args := strings.Fields(strings.ReplaceAll(strings.Join(execStart[1:], " "), "/var/lib/tally", t.TempDir()))
	s := startServer(t, args...)
	if code, body := get(t, s.url+"/readyz"); code != 200 {
		t.Fatalf("/readyz of the unit's command line: %d %s", code, body)
	}
}
