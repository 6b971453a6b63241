package e2e

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

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
	// -service: the app's backend acting for -user.
	code, out, errs = runCLI(t, "token", "-user", "42", "-service")
	if p, err := k.Verify(strings.TrimSpace(out)); code != 0 || err != nil || p.User != 42 || !p.Service || p.Admin {
		t.Fatalf("token -service: exit %d %q → %+v %v", code, errs, p, err)
	}
	if code, _, errs := runCLI(t, "token", "-user", "42", "-service", "-admin"); code != 2 || !strings.Contains(errs, "one") {
		t.Fatalf("token -service -admin: exit %d %s, want 2 (a token carries one role)", code, errs)
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
	// A token from an earlier run of a dev server (another random
	// secret) is refused saying so, and where the new tokens are.
	earlier, _ := auth.New(auth.Options{Secret: auth.RandomSecret()})
	old, _ := earlier.Sign(9, false, time.Hour)
	req, _ := http.NewRequest(http.MethodPost, srv.base+"/query", strings.NewReader(`{"query":"{ viewer { id } }"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+old)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(body), "UNAUTHENTICATED") || !strings.Contains(string(body), "tokens from an earlier run are invalid") ||
		!strings.Contains(string(body), "logged at start") {
		t.Fatalf("a token from an earlier run got %s", body)
	}
}

// TestTokenCommandIdentityFlags: `tally token` writes the issuer,
// audience and role claim path the server checks.
func TestTokenCommandIdentityFlags(t *testing.T) {
	t.Setenv("TALLY_JWT_SECRET", "cli-test-secret-0123456789")
	t.Setenv("TALLY_JWT_AUDIENCE", "tally-app")
	code, out, errs := runCLI(t, "token", "-user", "5", "-admin", "-jwt-issuer", "https://idp.test", "-jwt-role-claim", "app_metadata.role")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	k, _ := auth.New(auth.Options{Secret: []byte("cli-test-secret-0123456789"), Issuer: "https://idp.test", Audience: "tally-app", RoleClaim: "app_metadata.role"})
	if p, err := k.Verify(strings.TrimSpace(out)); err != nil || p.User != 5 || !p.Admin {
		t.Fatalf("token %q → %+v %v", out, p, err)
	}
	plain, _ := auth.NewKeys([]byte("cli-test-secret-0123456789"))
	if p, err := plain.Verify(strings.TrimSpace(out)); err != nil || p.Admin {
		t.Fatalf("without the role claim path the token reads as %+v %v, want a plain user", p, err)
	}
}
