// Package authtest runs a local identity provider for tests: it signs
// tokens with its private keys and serves the public ones as a JSON Web
// Key Set over HTTP on a loopback port, and can rotate its keys or go
// down. The key set is encoded by github.com/MicahParks/jwkset, the
// library that web/auth decodes it with.
package authtest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/MicahParks/jwkset"
	"github.com/golang-jwt/jwt/v5"
)

// IDP is a local identity provider.
type IDP struct {
	// URL serves the key set (-jwks).
	URL     string
	fetches atomic.Int64

	mu   sync.Mutex
	keys map[string]Key // by kid: the set served
	down bool
}

// Key is one signing key of the provider.
type Key struct {
	Method jwt.SigningMethod
	Priv   crypto.Signer
}

// NewIDP starts a provider serving an empty set; t's cleanup stops it.
func NewIDP(t testing.TB) *IDP {
	p := &IDP{keys: map[string]Key{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.fetches.Add(1)
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.down {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		store := jwkset.NewMemoryStorage()
		for kid, k := range p.keys {
			jwk, err := jwkset.NewJWKFromKey(k.Priv.Public(), jwkset.JWKOptions{Metadata: jwkset.JWKMetadataOptions{
				KID: kid, ALG: jwkset.ALG(k.Method.Alg()), USE: jwkset.UseSig}})
			if err == nil {
				err = store.KeyWrite(r.Context(), jwk)
			}
			if err != nil {
				t.Error(err)
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
		}
		raw, err := store.JSONPublic(r.Context())
		if err != nil {
			t.Error(err)
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(raw)
	}))
	t.Cleanup(srv.Close)
	p.URL = srv.URL
	return p
}

// NewKey makes a key for method (RS256, ES256 or EdDSA), not yet served.
func NewKey(t testing.TB, method jwt.SigningMethod) Key {
	t.Helper()
	var priv crypto.Signer
	var err error
	switch method.Alg() {
	case "RS256", "RS384", "RS512":
		priv, err = rsa.GenerateKey(rand.Reader, 2048)
	case "ES256":
		priv, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	case "EdDSA":
		_, priv, err = ed25519.GenerateKey(rand.Reader)
	default:
		t.Fatalf("authtest: no key for %s", method.Alg())
	}
	if err != nil {
		t.Fatal(err)
	}
	return Key{method, priv}
}

// AddKey makes a key for method and serves it under kid.
func (p *IDP) AddKey(t testing.TB, kid string, method jwt.SigningMethod) Key {
	k := NewKey(t, method)
	p.mu.Lock()
	p.keys[kid] = k
	p.mu.Unlock()
	return k
}

// SetKeys replaces the set served (a rotation).
func (p *IDP) SetKeys(keys map[string]Key) {
	p.mu.Lock()
	p.keys = keys
	p.mu.Unlock()
}

// SetDown makes the provider answer 503 (down) or the set (up).
func (p *IDP) SetDown(down bool) {
	p.mu.Lock()
	p.down = down
	p.mu.Unlock()
}

// Fetches counts the requests for the set so far.
func (p *IDP) Fetches() int64 { return p.fetches.Load() }

// Sign makes a token with claims, naming kid in its header (none when
// empty).
func (k Key) Sign(t testing.TB, kid string, claims jwt.MapClaims) string {
	t.Helper()
	tok := jwt.NewWithClaims(k.Method, claims)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(k.Priv)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
