package e2e

import (
	"bytes"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/tally-dev/tally/engine/embedded"
	"github.com/tally-dev/tally/resolvers"
	"github.com/tally-dev/tally/web/auth"
	"github.com/tally-dev/tally/web/auth/authtest"
	"github.com/tally-dev/tally/web/transport"
)

// newProviderServer serves with an identity provider (-jwks idpURL),
// its issuer and audience, and roles at app_metadata.roles.
func newProviderServer(t *testing.T, idpURL string) *testServer {
	t.Helper()
	return newProviderServerWith(t, idpURL, transport.Config{})
}

// newProviderServerWith is newProviderServer with cfg (its Keys are the
// provider's).
func newProviderServerWith(t *testing.T, idpURL string, cfg transport.Config) *testServer {
	t.Helper()
	p, err := auth.OpenProvider(auth.ProviderOptions{Source: idpURL, Timeout: 2 * time.Second, UnknownKeyInterval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	keys, err := auth.New(auth.Options{Secret: []byte("test-secret-0123456789"), Provider: p,
		Issuer: "https://idp.test", Audience: "tally-app", RoleClaim: "app_metadata.roles"})
	if err != nil {
		t.Fatal(err)
	}
	store, err := embedded.Open(embedded.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Keys = keys
	return newTestServerWith(t, store, cfg)
}

// TestIdentityProviderServiceRole: the provider's token whose role claim
// (-jwt-role-claim) holds "service" is the app's backend acting for its
// sub: under -content-writes service it writes content for that user,
// while the same user's own token is FORBIDDEN there and keeps likes.
func TestIdentityProviderServiceRole(t *testing.T) {
	idp := authtest.NewIDP(t)
	key := idp.AddKey(t, "k1", jwt.SigningMethodES256)
	s := newProviderServerWith(t, idp.URL, transport.Config{ContentWrites: resolvers.ContentWritesService})
	app := key.Sign(t, "k1", idpClaims("41", time.Hour, "offline_access", "service"))
	user := key.Sign(t, "k1", idpClaims("41", time.Hour))
	m := s.as(t, app, `mutation { createPost { id author { id } } }`, nil)
	if str(m, "createPost", "author", "id") != "41" {
		t.Fatalf("a service token's post: %v, want user 41's", m)
	}
	s.asCode(t, user, resolvers.CodeForbidden, `mutation { createPost { id } }`, nil)
	s.as(t, user, `mutation($p: ID!) { likePost(postId: $p) { id } }`, map[string]any{"p": str(m, "createPost", "id")})
}

func idpClaims(user string, ttl time.Duration, roles ...any) jwt.MapClaims {
	c := jwt.MapClaims{"sub": user, "iss": "https://idp.test", "aud": "tally-app", "exp": time.Now().Add(ttl).Unix()}
	if roles != nil {
		c["app_metadata"] = map[string]any{"roles": roles}
	}
	return c
}

// TestIdentityProviderHTTPAndWebSocket: tokens the app's identity
// provider signs work over HTTP and on a WebSocket's connection_init,
// through a key rotation and an outage of the provider; tokens for
// another issuer or audience, or HS256 tokens signed with the provider's
// public key, are refused with a reason.
func TestIdentityProviderHTTPAndWebSocket(t *testing.T) {
	idp := authtest.NewIDP(t)
	first := idp.AddKey(t, "k1", jwt.SigningMethodRS256)
	s := newProviderServer(t, idp.URL)

	user := first.Sign(t, "k1", idpClaims("41", time.Hour))
	if m := s.qToken(t, user, `{ viewer { id } }`); str(m, "viewer", "id") != "41" {
		t.Fatalf("viewer = %v", m)
	}
	// The role at app_metadata.roles: a list holding "admin".
	admin := first.Sign(t, "k1", idpClaims("1", time.Hour, "editor", "admin"))
	if r := s.doToken(t, admin, `mutation { pushRedDot }`, nil); len(r.Errors) > 0 {
		t.Fatalf("admin from the provider: %v", r.Errors)
	}
	expectCode(t, s.doToken(t, user, `mutation { pushRedDot }`, nil), "FORBIDDEN")
	// Tally's own HS256 tokens still work beside the provider's.
	if m := s.qToken(t, s.token(t, 42, false), `{ viewer { id } }`); str(m, "viewer", "id") != "42" {
		t.Fatalf("HS256 viewer = %v", m)
	}

	c, err := s.dialWS(t, user)
	if err != nil {
		t.Fatal(err)
	}
	c.subscribe("1", unreadSub, nil)
	if d := c.nextData(5 * time.Second); get(d, "unreadChanged", "unread", "total") == nil {
		t.Fatalf("push = %v", d)
	}

	// Rotation: the provider now signs with a new key under a new kid.
	second := idp.AddKey(t, "k2", jwt.SigningMethodES256)
	idp.SetKeys(map[string]authtest.Key{"k2": second})
	time.Sleep(250 * time.Millisecond) // past the provider's unknown-kid interval
	rotated := second.Sign(t, "k2", idpClaims("43", time.Hour))
	if m := s.qToken(t, rotated, `{ viewer { id } }`); str(m, "viewer", "id") != "43" {
		t.Fatalf("after rotation: %v", m)
	}
	if _, err := s.dialWS(t, rotated); err != nil {
		t.Fatalf("WebSocket after rotation: %v", err)
	}

	// Outage: the keys fetched stay in use; an unknown kid is refused,
	// saying the provider could not be asked.
	idp.SetDown(true)
	time.Sleep(250 * time.Millisecond)
	if m := s.qToken(t, second.Sign(t, "k2", idpClaims("44", time.Hour)), `{ viewer { id } }`); str(m, "viewer", "id") != "44" {
		t.Fatalf("during the outage: %v", m)
	}
	if _, err := s.dialWS(t, second.Sign(t, "k2", idpClaims("45", time.Hour))); err != nil {
		t.Fatalf("WebSocket during the outage: %v", err)
	}
	wantRefusal(t, s, first.Sign(t, "k3", idpClaims("46", time.Hour)), "could not be asked again")
	idp.SetDown(false)

	for name, c := range map[string]struct{ token, reason string }{
		"wrong issuer":   {second.Sign(t, "k2", jwt.MapClaims{"sub": "5", "iss": "https://other.test", "aud": "tally-app"}), `issuer "https://other.test" is not the expected "https://idp.test"`},
		"wrong audience": {second.Sign(t, "k2", jwt.MapClaims{"sub": "5", "iss": "https://idp.test", "aud": "another-app"}), `does not include the expected "tally-app"`},
		"expired":        {second.Sign(t, "k2", idpClaims("5", -time.Hour)), "token expired at"},
		"alg confusion":  {hs256WithPublicKey(t, second), "signature does not match this server's secret"},
	} {
		t.Run(name, func(t *testing.T) { wantRefusal(t, s, c.token, c.reason) })
	}
}

// TestIdentityProviderDownAtStart: a server whose provider is down when
// it starts serves anyway; provider tokens are refused, saying why, over
// HTTP and WebSocket until the provider answers.
func TestIdentityProviderDownAtStart(t *testing.T) {
	idp := authtest.NewIDP(t)
	key := idp.AddKey(t, "k1", jwt.SigningMethodEdDSA)
	idp.SetDown(true)
	s := newProviderServer(t, idp.URL)
	tok := key.Sign(t, "k1", idpClaims("7", time.Hour))
	wantRefusal(t, s, tok, "could not be fetched yet")
	idp.SetDown(false)
	deadline := time.Now().Add(5 * time.Second)
	for {
		r := s.doToken(t, tok, `{ viewer { id } }`, nil)
		if len(r.Errors) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the provider is back but tokens are still refused: %v", r.Errors)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := s.dialWS(t, tok); err != nil {
		t.Fatal(err)
	}
}

// TestIdentityProviderTokenExpiryOnSocket: an open WebSocket initialised
// with a provider token closes with 4403 at the token's exp, as with
// HS256 tokens.
func TestIdentityProviderTokenExpiryOnSocket(t *testing.T) {
	idp := authtest.NewIDP(t)
	key := idp.AddKey(t, "k1", jwt.SigningMethodRS256)
	s := newProviderServer(t, idp.URL)
	tok := key.Sign(t, "k1", idpClaims("8", 2*time.Second))
	c := rawWS(t, s)
	wsInit(t, c, tok)
	wsSubscribe(t, c, "u", unreadSub, nil)
	if m := wsRead(t, c, 5*time.Second); m.Type != "next" {
		t.Fatalf("got %s %s", m.Type, m.Payload)
	}
	if code, reason := wsClosed(t, c, 5*time.Second); code != 4403 || !strings.Contains(reason, "expired") {
		t.Fatalf("closed with %d %q", code, reason)
	}
}

// wantRefusal checks a token is refused with reason over HTTP
// (UNAUTHENTICATED) and on connection_init (4403).
func wantRefusal(t *testing.T, s *testServer, token, reason string) {
	t.Helper()
	e := expectCode(t, s.doToken(t, token, `{ viewer { id } }`, nil), "UNAUTHENTICATED")
	if !strings.Contains(e.Message, reason) {
		t.Fatalf("HTTP: refused with %q, want it to say %q", e.Message, reason)
	}
	c := rawWS(t, s)
	wsWrite(t, c, map[string]any{"type": "connection_init", "payload": map[string]any{"Authorization": "Bearer " + token}})
	code, why := wsClosed(t, c, 5*time.Second)
	if code != 4403 || !strings.Contains(why, "Forbidden") {
		t.Fatalf("WebSocket: closed with %d %q, want 4403", code, why)
	}
	if r := "Forbidden: " + e.Message; len(r) <= 123 && why != r {
		t.Fatalf("WebSocket: reason %q, want the HTTP one, %q", why, r)
	}
}

func hs256WithPublicKey(t *testing.T, k authtest.Key) string {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(k.Priv.Public())
	if err != nil {
		t.Fatal(err)
	}
	tok := jwt.NewWithClaims(jwt.SigningMethodHS256, idpClaims("1", time.Hour, "admin"))
	tok.Header["kid"] = "k2"
	s, err := tok.SignedString(der)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (s *testServer) qToken(t *testing.T, token, query string) map[string]any {
	t.Helper()
	r := s.doToken(t, token, query, nil)
	if len(r.Errors) > 0 {
		t.Fatalf("%s: %+v", query, r.Errors)
	}
	var m map[string]any
	if err := json.Unmarshal(r.Data, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestBinaryIdentityProviderAndTraces runs the built binary as an
// operator would: -jwks at a provider, its issuer, audience and role
// claim, and OTEL_EXPORTER_OTLP_ENDPOINT at a collector. A provider's
// token works, the request's traceparent is the parent of its span at the
// collector (flushed when the server stops), and a bad -jwks file stops
// the server at start with exit code 2.
func TestBinaryIdentityProviderAndTraces(t *testing.T) {
	bin, err := buildTally()
	if err != nil {
		t.Fatal(err)
	}
	idp := authtest.NewIDP(t)
	key := idp.AddKey(t, "k1", jwt.SigningMethodES256)
	collector, url := newOTLPHTTP(t)
	env := append(withoutTallyEnv(), "TALLY_JWT_SECRET=binary-test-secret-0123456789",
		"OTEL_EXPORTER_OTLP_ENDPOINT="+url, "OTEL_TRACES_SAMPLER=parentbased_always_on")
	s := startBinaryWith(t, bin, env, "-data", t.TempDir(), "-fsync", "none", "-jwks", idp.URL,
		"-jwt-issuer", "https://idp.test", "-jwt-audience", "tally-app", "-jwt-role-claim", "app_metadata.roles")
	tok := key.Sign(t, "k1", idpClaims("77", time.Hour, "admin"))
	traceID := fmt.Sprintf("%032x", 0xb1a)
	body, _ := json.Marshal(map[string]any{"query": "query Me { viewer { id unread { total } } }"})
	req, _ := http.NewRequest(http.MethodPost, s.base+"/query", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("traceparent", "00-"+traceID+"-00f067aa0ba902b7-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(raw), `{"viewer":{"id":"77","unread":{"total":0}}}`) {
		t.Fatalf("the provider's token got %s\n%s", raw, s.log)
	}
	if d := s.graphql(t, tok, `mutation { pushRedDot }`, nil); string(d) != `{"pushRedDot":true}` {
		t.Fatalf("admin from app_metadata.roles: %s", d)
	}
	s.stop(t)
	spans := collector.trace(traceID)
	op, unread := spans["query Me"], spans["engine.Unread"]
	if op == nil || hex.EncodeToString(op.ParentSpanId) != "00f067aa0ba902b7" || unread == nil || string(unread.ParentSpanId) != string(op.SpanId) {
		t.Fatalf("spans at the collector for the trace: %v\n%s", spanNames(spans), s.log)
	}
	if !strings.Contains(s.log.String(), "OpenTelemetry traces on") {
		t.Errorf("the server did not log that traces are on:\n%s", s.log)
	}

	bad := filepath.Join(t.TempDir(), "jwks.json")
	os.WriteFile(bad, []byte(`{"keys":[]}`), 0o600)
	code, _, errs := runCLI(t, "-data", t.TempDir(), "-jwks", bad)
	if code != 2 || !strings.Contains(errs, "-jwks") {
		t.Fatalf("a key set without keys: exit %d, %s", code, errs)
	}
}
