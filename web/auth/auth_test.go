package auth

import (
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
}

func TestRejects(t *testing.T) {
	k, _ := NewKeys([]byte("0123456789abcdef"))
	other, _ := NewKeys([]byte("fedcba9876543210"))
	expired, _ := k.Sign(1, false, -time.Minute)
	foreign, _ := other.Sign(1, true, 0)
	sign := func(method jwt.SigningMethod, key any, claims jwt.MapClaims) string {
		s, err := jwt.NewWithClaims(method, claims).SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	secret := []byte("0123456789abcdef")
	cases := map[string]string{
		"expired":          expired,
		"other secret":     foreign,
		"alg none":         sign(jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, jwt.MapClaims{"sub": "1", "role": "admin"}),
		"HS512":            sign(jwt.SigningMethodHS512, secret, jwt.MapClaims{"sub": "1"}),
		"sub missing":      sign(jwt.SigningMethodHS256, secret, jwt.MapClaims{"role": "admin"}),
		"sub not a number": sign(jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": "alice"}),
		"sub zero":         sign(jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": "0"}),
		"sub negative":     sign(jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": "-5"}),
		"sub too big":      sign(jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": "18446744073709551616"}),
		"garbage":          "a.b.c",
		"empty":            "",
	}
	for name, tok := range cases {
		if p, err := k.Verify(tok); err != ErrBadToken {
			t.Errorf("%s: accepted as %+v (%v)", name, p, err)
		}
	}
	// A role other than "admin" is a plain user.
	p, err := k.Verify(sign(jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": "3", "role": "Admin"}))
	if err != nil || p.Admin {
		t.Fatalf("role Admin: %+v %v", p, err)
	}
}

func TestFromHeader(t *testing.T) {
	k, _ := NewKeys([]byte("0123456789abcdef"))
	tok, _ := k.Sign(5, false, 0)
	for h, want := range map[string]bool{"": true, "Bearer " + tok: true, "bearer  " + tok: true, "Basic " + tok: false, tok: false, "Bearer": false} {
		_, present, err := k.FromHeader(h)
		if (err == nil) != want {
			t.Errorf("%q: err %v", h, err)
		}
		if present != (strings.TrimSpace(h) != "") {
			t.Errorf("%q: present %v", h, present)
		}
	}
	if _, err := NewKeys([]byte("short")); err == nil {
		t.Fatal("a 5-byte secret was accepted")
	}
}
