package auth

import (
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/tally-dev/tally/web/auth/authtest"
)

func openTestProvider(t *testing.T, source string) *Provider {
	t.Helper()
	p, err := OpenProvider(ProviderOptions{Source: source, Timeout: 2 * time.Second, UnknownKeyInterval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func providerKeys(t *testing.T, p *Provider, o Options) *Keys {
	t.Helper()
	o.Secret, o.Provider = []byte("0123456789abcdef"), p
	k, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func wantRefused(t *testing.T, k *Keys, token, reason string) {
	t.Helper()
	p, err := k.Verify(token)
	if !isBadToken(err) {
		t.Fatalf("accepted as %+v (%v), want refused: %s", p, err, reason)
	}
	if !strings.Contains(err.Error(), reason) {
		t.Fatalf("refused with %q, want it to say %q", err, reason)
	}
}

func wantUser(t *testing.T, k *Keys, token string, user uint64, admin bool) {
	t.Helper()
	p, err := k.Verify(token)
	if err != nil || uint64(p.User) != user || p.Admin != admin {
		t.Fatalf("got %+v %v, want user %d admin %v", p, err, user, admin)
	}
}

// TestProviderAlgorithms: RS256, ES256 and EdDSA tokens from the
// provider verify, with the role at a nested claim path and the issuer
// and audience checked; HS256 tokens keep working beside them.
func TestProviderAlgorithms(t *testing.T) {
	idp := authtest.NewIDP(t)
	rs, es, ed := idp.AddKey(t, "rs", jwt.SigningMethodRS256), idp.AddKey(t, "es", jwt.SigningMethodES256), idp.AddKey(t, "ed", jwt.SigningMethodEdDSA)
	k := providerKeys(t, openTestProvider(t, idp.URL), Options{Issuer: "https://idp.example", Audience: "tally", RoleClaim: "app_metadata.role"})
	claims := func(sub string, extra jwt.MapClaims) jwt.MapClaims {
		c := jwt.MapClaims{"sub": sub, "iss": "https://idp.example", "aud": []string{"other", "tally"}, "exp": time.Now().Add(time.Hour).Unix()}
		for n, v := range extra {
			if c[n] = v; v == nil {
				delete(c, n)
			}
		}
		return c
	}
	admin := jwt.MapClaims{"app_metadata": map[string]any{"role": "admin"}}
	wantUser(t, k, rs.Sign(t, "rs", claims("11", admin)), 11, true)
	wantUser(t, k, es.Sign(t, "es", claims("12", nil)), 12, false)
	wantUser(t, k, ed.Sign(t, "ed", claims("13", admin)), 13, true)
	// Without a kid every key of the set is tried.
	wantUser(t, k, es.Sign(t, "", claims("14", nil)), 14, false)
	// Tally's own tokens carry the configured issuer and audience.
	own, _ := k.Sign(15, true, time.Hour)
	wantUser(t, k, own, 15, true)

	wantRefused(t, k, rs.Sign(t, "rs", claims("11", jwt.MapClaims{"iss": "https://evil.example"})), `issuer "https://evil.example" is not the expected "https://idp.example"`)
	wantRefused(t, k, rs.Sign(t, "rs", claims("11", jwt.MapClaims{"aud": "someone-else"})), `does not include the expected "tally"`)
	wantRefused(t, k, rs.Sign(t, "rs", claims("11", jwt.MapClaims{"iss": nil})), "issuer (none)")
	wantRefused(t, k, rs.Sign(t, "rs", claims("11", jwt.MapClaims{"aud": nil})), "audience (none)")
	wantRefused(t, k, rs.Sign(t, "rs", claims("11", jwt.MapClaims{"exp": "tomorrow"})), "a claim of the wrong type")
	wantRefused(t, k, rs.Sign(t, "rs", claims("11", jwt.MapClaims{"exp": time.Now().Add(-time.Hour).Unix()})), "token expired at")
	// A key used under another algorithm than its JWK names.
	wantRefused(t, k, authtest.Key{Method: jwt.SigningMethodES256, Priv: es.Priv}.Sign(t, "rs", claims("11", nil)), "")
	// A token signed with a key the set does not hold, under a known kid.
	stranger := authtest.NewKey(t, jwt.SigningMethodRS256)
	wantRefused(t, k, stranger.Sign(t, "rs", claims("11", nil)), "signature does not match the identity provider's key")
}

// TestProviderAlgConfusion: an HS256 token "signed" with the provider's
// public key (PEM or DER bytes, the classic confusion attack), or with
// alg none, is refused: HS256 only ever meets the server's secret.
func TestProviderAlgConfusion(t *testing.T) {
	idp := authtest.NewIDP(t)
	rs := idp.AddKey(t, "rs", jwt.SigningMethodRS256)
	k := providerKeys(t, openTestProvider(t, idp.URL), Options{})
	der, err := x509.MarshalPKIXPublicKey(rs.Priv.Public())
	if err != nil {
		t.Fatal(err)
	}
	pemBytes := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
	claims := jwt.MapClaims{"sub": "1", "role": "admin"}
	for name, key := range map[string][]byte{"PEM": pemBytes, "DER": der, "PKCS1": x509.MarshalPKCS1PublicKey(rs.Priv.Public().(*rsa.PublicKey))} {
		tok := jwt.NewWithClaims(jwt.SigningMethodHS256, claims)
		tok.Header["kid"] = "rs"
		s, err := tok.SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		t.Run(name, func(t *testing.T) { wantRefused(t, k, s, "signature does not match this server's secret") })
	}
	none := jwt.NewWithClaims(jwt.SigningMethodNone, claims)
	none.Header["kid"] = "rs"
	s, _ := none.SignedString(jwt.UnsafeAllowNoneSignatureType)
	wantRefused(t, k, s, `algorithm "none" is not accepted`)
	// RS384 is not among the provider algorithms.
	s = authtest.Key{Method: jwt.SigningMethodRS384, Priv: rs.Priv}.Sign(t, "rs", claims)
	wantRefused(t, k, s, `algorithm "RS384" is not accepted`)
	// Without a provider, RS256 is refused with a pointer at -jwks.
	hsOnly, _ := NewKeys([]byte("0123456789abcdef"))
	wantRefused(t, hsOnly, rs.Sign(t, "rs", claims), "with an identity provider, -jwks")
}

// TestProviderRotation: a token naming a kid the set does not hold makes
// the set be fetched again (at most once per UnknownKeyInterval), so a
// rotated key works at once; the key rotated out stops working.
func TestProviderRotation(t *testing.T) {
	idp := authtest.NewIDP(t)
	old := idp.AddKey(t, "2026-01", jwt.SigningMethodRS256)
	k := providerKeys(t, openTestProvider(t, idp.URL), Options{})
	wantUser(t, k, old.Sign(t, "2026-01", jwt.MapClaims{"sub": "1"}), 1, false)
	fetches := idp.Fetches()

	next := idp.AddKey(t, "2026-02", jwt.SigningMethodES256)
	idp.SetKeys(map[string]authtest.Key{"2026-02": next})
	time.Sleep(250 * time.Millisecond) // past UnknownKeyInterval since the start
	wantUser(t, k, next.Sign(t, "2026-02", jwt.MapClaims{"sub": "2"}), 2, false)
	if got := idp.Fetches(); got != fetches+1 {
		t.Fatalf("rotation made %d fetches, want 1", got-fetches)
	}
	// The set was replaced: the old key is gone, and its kid is unknown.
	wantRefused(t, k, old.Sign(t, "2026-01", jwt.MapClaims{"sub": "1"}), `key id "2026-01" is not in the identity provider's key set`)
}

// TestProviderUnknownKidFlood: many tokens with made-up kids cost the
// provider at most one fetch per UnknownKeyInterval, and each is refused
// promptly.
func TestProviderUnknownKidFlood(t *testing.T) {
	idp := authtest.NewIDP(t)
	key := idp.AddKey(t, "real", jwt.SigningMethodRS256)
	k := providerKeys(t, openTestProvider(t, idp.URL), Options{})
	start := idp.Fetches()
	began := time.Now()
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			kid := "made-up-" + strings.Repeat("x", i%7) + string(rune('a'+i%26))
			if _, err := k.Verify(key.Sign(t, kid, jwt.MapClaims{"sub": "1"})); !isBadToken(err) {
				t.Errorf("kid %s: %v", kid, err)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(began)
	// One fetch for the burst, and one more per interval elapsed.
	if got, most := idp.Fetches()-start, 1+int64(elapsed/(200*time.Millisecond)); got > most {
		t.Fatalf("200 unknown kids over %v made %d fetches, want at most %d", elapsed, got, most)
	}
	wantUser(t, k, key.Sign(t, "real", jwt.MapClaims{"sub": "3"}), 3, false)
}

// TestProviderDown: a provider down at start does not stop the server;
// its tokens are refused, saying so, until it answers. Once keys are
// fetched, the provider going down keeps them in use.
func TestProviderDown(t *testing.T) {
	idp := authtest.NewIDP(t)
	key := idp.AddKey(t, "k1", jwt.SigningMethodEdDSA)
	idp.SetDown(true)
	p := openTestProvider(t, idp.URL)
	k := providerKeys(t, p, Options{})
	tok := key.Sign(t, "k1", jwt.MapClaims{"sub": "4"})
	wantRefused(t, k, tok, "could not be fetched yet")
	wantRefused(t, k, key.Sign(t, "", jwt.MapClaims{"sub": "4"}), "could not be fetched yet")

	idp.SetDown(false)
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := k.Verify(tok); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("the provider is back, but tokens are still refused: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}

	idp.SetDown(true)
	time.Sleep(250 * time.Millisecond)
	// An unknown kid makes a fetch, which fails: the keys held stay.
	wantRefused(t, k, key.Sign(t, "k2", jwt.MapClaims{"sub": "4"}), "could not be asked again")
	wantUser(t, k, tok, 4, false)
	if p.Keys() != 1 {
		t.Fatalf("the provider holds %d keys after a failed fetch, want 1", p.Keys())
	}
	// And a provider that never answers in time is cut at Timeout.
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
		}
	}))
	defer slow.Close()
	began := time.Now()
	sp, err := OpenProvider(ProviderOptions{Source: slow.URL, Timeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	if d := time.Since(began); d > 3*time.Second {
		t.Fatalf("opening a provider that does not answer took %v with a 300ms timeout", d)
	}
}

// TestProviderFile: -jwks may name a file; one without usable keys is
// refused at start.
func TestProviderFile(t *testing.T) {
	idp := authtest.NewIDP(t)
	key := idp.AddKey(t, "file-key", jwt.SigningMethodES256)
	resp, err := http.Get(idp.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "jwks.json")
	os.WriteFile(path, raw, 0o600)
	k := providerKeys(t, openTestProvider(t, path), Options{})
	wantUser(t, k, key.Sign(t, "file-key", jwt.MapClaims{"sub": "5"}), 5, false)
	wantRefused(t, k, key.Sign(t, "other", jwt.MapClaims{"sub": "5"}), `key id "other" is not in`)

	for name, content := range map[string]string{"empty set": `{"keys":[]}`, "not JSON": `nope`} {
		bad := filepath.Join(dir, "bad.json")
		os.WriteFile(bad, []byte(content), 0o600)
		if _, err := OpenProvider(ProviderOptions{Source: bad}); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := OpenProvider(ProviderOptions{Source: filepath.Join(dir, "missing.json")}); err == nil {
		t.Error("a missing file was accepted")
	}
}
