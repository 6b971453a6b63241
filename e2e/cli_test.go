package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

func TestUnknownCommandAndHelp(t *testing.T) {
	if code, _, _ := runCLI(t, "frobnicate"); code != 2 {
		t.Fatalf("unknown command exit %d", code)
	}
	if code, out, _ := runCLI(t, "help"); code != 0 || !strings.Contains(out, "tally import") {
		t.Fatalf("help: %d %s", code, out)
	}
	if code, _, _ := runCLI(t, "-fsync", "sometimes", "-addr", "127.0.0.1:0", "-data", t.TempDir()); code != 2 {
		t.Fatalf("bad -fsync exit %d, want 2", code)
	}
	if code, _, errs := runCLI(t, "-content-writes", "users", "-addr", "127.0.0.1:0", "-data", t.TempDir()); code != 2 || !strings.Contains(errs, "-content-writes must be any or service") {
		t.Fatalf("bad -content-writes: exit %d %q, want 2", code, errs)
	}
}

// TestCommandsRefuseBadMemoryFlags: serve and import say what is wrong
// with a memory flag, from the command line or the environment, and exit
// 2 before opening anything.
func TestCommandsRefuseBadMemoryFlags(t *testing.T) {
	dir := t.TempDir()
	csv := filepath.Join(dir, "posts.csv")
	cases := []struct {
		env  string // TALLY_MEMORY_LIMIT
		args []string
		want string
	}{
		{"", []string{"serve", "-memory-limit", "10MiB"}, "-memory-limit 10MiB is below 64MiB"},
		{"", []string{"serve", "-memory-limit", "plenty"}, `invalid value "plenty" for flag -memory-limit: "plenty" is not a size in bytes`},
		{"", []string{"serve", "-memory-budget", "1073741824", "-memory-limit", "1GiB"}, "below three times -memory-budget (1GiB"},
		{"", []string{"serve", "-gc-pacing", "eager"}, "-gc-pacing must be scan or heap"},
		{"lots", []string{"serve"}, `TALLY_MEMORY_LIMIT="lots"`},
		{"", []string{"import", "-gc-min-headroom", "1KiB", csv}, "-gc-min-headroom 1KiB is below 4MiB"},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			if c.env != "" {
				t.Setenv("TALLY_MEMORY_LIMIT", c.env)
			}
			args := append([]string{c.args[0], "-data", filepath.Join(dir, "data"), "-addr", "127.0.0.1:0"}, c.args[1:]...)
			if c.args[0] == "import" {
				args = append([]string{"import", "-data", filepath.Join(dir, "data")}, c.args[1:]...)
			}
			code, _, errs := runCLI(t, args...)
			if code != 2 || !strings.Contains(errs, c.want) {
				t.Errorf("exit %d, stderr %q; want 2 and %q", code, errs, c.want)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(dir, "data")); err == nil {
		t.Errorf("a refused command made its data directory")
	}
}

// tally -h lists the subcommands and the serve flags; each subcommand's -h
// its own flags, log flags included.
func TestHelpListsSubcommandsAndFlags(t *testing.T) {
	code, _, errs := runCLI(t, "-h")
	if code != 0 {
		t.Fatalf("tally -h exit %d", code)
	}
	for _, name := range []string{"token", "import", "demo-seed", "backup", "restore", "repair", "check", "version", "help"} {
		if !strings.Contains(errs, "tally "+name) {
			t.Errorf("tally -h lacks %q:\n%s", name, errs)
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
		"check":     {"-data", "-redis", "-redis-prefix", "-repair"},
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
	if out, err := goBuild("-buildvcs=false", "-ldflags", "-X main.ldVersion=v9.8.7 -X main.ldCommit=abc123", "-o", bin); err != nil {
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
	if out, err := goBuild("-buildvcs=true", "-o", bin); err != nil {
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
