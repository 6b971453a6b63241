package auth

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

func TestSignVerify(t *testing.T) {
	k, err := NewKeys([]byte("0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	tok, _ := k.Sign(42, true, time.Hour)
	p, err := k.Verify(tok)
	if err != nil || p.User != 42 || !p.Admin {
		t.Fatalf("%+v %v", p, err)
	}
	tok, _ = k.Sign(7, false, 0)
	if p, err := k.Verify(tok); err != nil || p.User != 7 || p.Admin {
		t.Fatalf("%+v %v", p, err)
	}
	tok, _ = k.SignRole(8, RoleService, time.Hour)
	if p, err := k.Verify(tok); err != nil || p.User != 8 || p.Admin || !p.Service {
		t.Fatalf("service: %+v %v", p, err)
	}
}

func TestRejects(t *testing.T) {
	k, _ := NewKeys([]byte("0123456789abcdef"))
	other, _ := NewKeys([]byte("fedcba9876543210"))
	expired, _ := k.Sign(1, false, -time.Minute)
	foreign, _ := other.Sign(1, true, 0)
	secret := []byte("0123456789abcdef")
	good, _ := k.Sign(1, false, 0)
	cases := map[string]struct{ token, reason string }{
		"expired":           {expired, "token expired at "},
		"other secret":      {foreign, "signature does not match this server's secret (TALLY_JWT_SECRET)"},
		"alg none":          {sign(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, jwt.MapClaims{"sub": "1", "role": "admin"}), `algorithm "none" is not accepted`},
		"HS512":             {sign(t, jwt.SigningMethodHS512, secret, jwt.MapClaims{"sub": "1"}), `algorithm "HS512" is not accepted`},
		"sub missing":       {sign(t, jwt.SigningMethodHS256, secret, jwt.MapClaims{"role": "admin"}), "sub must be the user id"},
		"sub not a number":  {sign(t, jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": "alice"}), `got "alice"`},
		"sub a JSON number": {sign(t, jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": 5}), "sub must be"},
		"sub zero":          {sign(t, jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": "0"}), "sub must be"},
		"sub negative":      {sign(t, jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": "-5"}), "sub must be"},
		"sub too big":       {sign(t, jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": "18446744073709551616"}), "sub must be"},
		"not yet valid":     {sign(t, jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": "1", "nbf": time.Now().Add(time.Hour).Unix()}), "not valid yet"},
		"garbage":           {"a.b.c", "malformed"},
		"two parts":         {good[:strings.LastIndexByte(good, '.')], "this has 2 part(s)"},
		"cut in claims":     {good[:strings.IndexByte(good, '.')+5], "this has 2 part(s)"},
		"cut in signature":  {good[:len(good)-3], "truncated when copied"},
		"empty":             {"", "malformed"},
	}
	for name, c := range cases {
		p, err := k.Verify(c.token)
		if !isBadToken(err) {
			t.Errorf("%s: accepted as %+v (%v)", name, p, err)
			continue
		}
		if !strings.Contains(err.Error(), c.reason) {
			t.Errorf("%s: reason %q, want it to say %q", name, err, c.reason)
		}
	}
	// A role other than "admin" is a plain user.
	p, err := k.Verify(sign(t, jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": "3", "role": "Admin"}))
	if err != nil || p.Admin {
		t.Fatalf("role Admin: %+v %v", p, err)
	}
}

// TestDevRunReason: in dev mode a token signed with another secret is
// said to be most likely from an earlier run.
func TestDevRunReason(t *testing.T) {
	earlier, _ := New(Options{Secret: RandomSecret(), Dev: true})
	now, _ := New(Options{Secret: RandomSecret(), Dev: true})
	tok, _ := earlier.Sign(2, false, time.Hour)
	_, err := now.Verify(tok)
	if !isBadToken(err) || !strings.Contains(err.Error(), "tokens from an earlier run are invalid") || !strings.Contains(err.Error(), "logged at start") {
		t.Fatalf("got %v", err)
	}
}

func TestFromHeader(t *testing.T) {
	k, _ := NewKeys([]byte("0123456789abcdef"))
	tok, _ := k.Sign(5, false, 0)
	for h, want := range map[string]string{
		"": "", "Bearer " + tok: "", "bearer  " + tok: "",
		"Basic " + tok: `must be "Bearer <token>"`,
		tok:            `the token without "Bearer "`,
		"Bearer":       `must be "Bearer <token>"`,
		"Bearer   ":    `must be "Bearer <token>"`,
	} {
		_, present, err := k.FromHeader(h)
		if (err == nil) != (want == "") || err != nil && !strings.Contains(err.Error(), want) {
			t.Errorf("%q: err %v, want %q", h, err, want)
		}
		if present != (strings.TrimSpace(h) != "") {
			t.Errorf("%q: present %v", h, present)
		}
	}
	if _, err := NewKeys([]byte("short")); err == nil {
		t.Fatal("a 5-byte secret was accepted")
	}
}

// TestRoleClaim: the role is read at -jwt-role-claim's path, from a
// string or an array, and Sign writes it where Verify reads it.
// TestFromHeaderExpiry: the exp a verified header carries, read by the
// verification's own parse; none for a token without exp or a refusal.
func TestFromHeaderExpiry(t *testing.T) {
	k, _ := NewKeys([]byte("0123456789abcdef"))
	tok, _ := k.Sign(3, false, time.Hour)
	p, present, exp, err := k.FromHeaderExpiry("Bearer " + tok)
	if err != nil || !present || p.User != 3 {
		t.Fatalf("%+v %v %v", p, present, err)
	}
	if d := time.Until(exp); d < 59*time.Minute || d > time.Hour+time.Second {
		t.Fatalf("exp in %v", d)
	}
	forever, _ := k.Sign(3, false, 0)
	if _, _, exp, err := k.FromHeaderExpiry("Bearer " + forever); err != nil || !exp.IsZero() {
		t.Fatalf("a token without exp: exp %v, %v", exp, err)
	}
	expired, _ := k.Sign(3, false, -time.Hour)
	for _, h := range []string{"Bearer garbage", "Bearer " + expired, "Basic x"} {
		if _, present, exp, err := k.FromHeaderExpiry(h); err == nil || !present || !exp.IsZero() {
			t.Fatalf("%q: present %v, exp %v, err %v", h, present, exp, err)
		}
	}
	if _, present, exp, err := k.FromHeaderExpiry(""); err != nil || present || !exp.IsZero() {
		t.Fatalf("no header: present %v, exp %v, err %v", present, exp, err)
	}
}

func TestRoleClaim(t *testing.T) {
	secret := []byte("0123456789abcdef")
	for _, c := range []struct {
		path           string
		claims         jwt.MapClaims
		admin, service bool
	}{
		{"role", jwt.MapClaims{"role": "admin"}, true, false},
		{"role", jwt.MapClaims{"role": "service"}, false, true},
		{"role", jwt.MapClaims{"role": "authenticated"}, false, false},
		{"role", jwt.MapClaims{"role": 1}, false, false},
		{"app_metadata.role", jwt.MapClaims{"app_metadata": map[string]any{"role": "admin"}}, true, false},
		{"app_metadata.role", jwt.MapClaims{"role": "admin"}, false, false},
		{"app_metadata.role", jwt.MapClaims{"app_metadata": "admin"}, false, false},
		{"realm_access.roles", jwt.MapClaims{"realm_access": map[string]any{"roles": []any{"offline_access", "service"}}}, false, true},
		{"realm_access.roles", jwt.MapClaims{"realm_access": map[string]any{"roles": []any{"service", "admin"}}}, true, false},
		{"realm_access.roles", jwt.MapClaims{"realm_access": map[string]any{"roles": []any{}}}, false, false},
		{"https://app.example.com/roles", jwt.MapClaims{"https://app.example.com/roles": []any{"admin"}}, true, false},
	} {
		k, err := New(Options{Secret: secret, RoleClaim: c.path})
		if err != nil {
			t.Fatal(err)
		}
		c.claims["sub"] = "9"
		p, err := k.Verify(sign(t, jwt.SigningMethodHS256, secret, c.claims))
		if err != nil || p.Admin != c.admin || p.Service != c.service {
			t.Errorf("%s %v: %+v %v", c.path, c.claims, p, err)
		}
		for _, role := range []string{RoleAdmin, RoleService} {
			tok, _ := k.SignRole(9, role, time.Hour)
			if p, err := k.Verify(tok); err != nil || p.Admin != (role == RoleAdmin) || p.Service != (role == RoleService) {
				t.Errorf("%s: signed %s, verified %+v %v", c.path, role, p, err)
			}
		}
	}
	for _, bad := range []string{".", "a..b", "role."} {
		if _, err := New(Options{Secret: secret, RoleClaim: bad}); err == nil {
			t.Errorf("role claim %q accepted", bad)
		}
	}
}

func isBadToken(err error) bool {
	_, ok := err.(*TokenError)
	return ok && errors.Is(err, ErrBadToken) && strings.TrimSpace(err.Error()) != ""
}

func sign(t *testing.T, method jwt.SigningMethod, key any, claims jwt.MapClaims) string {
	t.Helper()
	s, err := jwt.NewWithClaims(method, claims).SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
