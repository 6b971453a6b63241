package e2e

import (
	"strings"
	"testing"

	"github.com/tally-dev/tally/web/auth"
)

func TestTokenCommand(t *testing.T) {
	t.Setenv("TALLY_JWT_SECRET", "cli-test-secret-0123456789")
	code, out, errs := runCLI(t, "token", "-user", "42", "-admin")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	k, _ := auth.NewKeys([]byte("cli-test-secret-0123456789"))
	p, err := k.Verify(strings.TrimSpace(out))
	if err != nil || p.User != 42 || !p.Admin {
		t.Fatalf("token %q → %+v %v", out, p, err)
	}
	if code, _, _ := runCLI(t, "token", "-user", "abc"); code != 2 {
		t.Fatalf("bad -user exit %d, want 2", code)
	}
	// Env fills flags: TALLY_USER is -user.
	t.Setenv("TALLY_USER", "7")
	code, out, _ = runCLI(t, "token")
	if p, err := k.Verify(strings.TrimSpace(out)); code != 0 || err != nil || p.User != 7 || p.Admin {
		t.Fatalf("token from env: %d %+v %v", code, p, err)
	}
	t.Setenv("TALLY_JWT_SECRET", "short")
	if code, _, errs := runCLI(t, "token", "-user", "1"); code != 1 || !strings.Contains(errs, "at least 16 bytes") {
		t.Fatalf("short secret: %d %s", code, errs)
	}
}

func TestTokenCommandUsesDevServerSecret(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("TALLY_JWT_SECRET", "") // empty is unset, and restored after the test
	if code, _, errs := runCLI(t, "token", "-user", "1", "-data", dir); code != 1 || !strings.Contains(errs, "TALLY_JWT_SECRET") {
		t.Fatalf("no secret anywhere: %d %s", code, errs)
	}
	bin, err := buildTally()
	if err != nil {
		t.Fatal(err)
	}
	srv := startDevBinary(t, bin, dir)
	code, out, errs := runCLI(t, "token", "-user", "9", "-data", dir)
	if code != 0 {
		t.Fatal(errs)
	}
	if d := srv.graphql(t, strings.TrimSpace(out), `{ viewer { id } }`, nil); string(d) != `{"viewer":{"id":"9"}}` {
		t.Fatalf("the dev server took the dev token as %s", d)
	}
}
