package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/embedded"
	"github.com/tally-dev/tally/web/auth"
	"github.com/tally-dev/tally/web/hub"
	"github.com/tally-dev/tally/web/transport"
)

// testServer is a real Tally HTTP handler on a loopback listener.
type testServer struct {
	*httptest.Server
	store engine.Store
	keys  *auth.Keys
}

func newTestServer(t testing.TB) *testServer {
	t.Helper()
	store, err := embedded.Open(embedded.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return newTestServerWith(t, store, transport.Config{})
}

func newTestServerWith(t testing.TB, store engine.Store, cfg transport.Config) *testServer {
	t.Helper()
	if cfg.Keys == nil {
		keys, err := auth.NewKeys([]byte("test-secret-0123456789"))
		if err != nil {
			t.Fatal(err)
		}
		cfg.Keys = keys
	}
	keys := cfg.Keys
	h := hub.New(store)
	cfg.Store, cfg.Hub = store, h
	srv := httptest.NewServer(transport.NewServerHandler(transport.ServerConfig{Config: cfg}))
	t.Cleanup(func() {
		srv.Close()
		h.Close()
		store.Close()
	})
	return &testServer{Server: srv, store: store, keys: keys}
}

func (s *testServer) token(t testing.TB, user uint64, admin bool) string {
	t.Helper()
	role := ""
	if admin {
		role = auth.RoleAdmin
	}
	return s.roleToken(t, user, role)
}

// roleToken signs a token for user with role ("" for an end user).
func (s *testServer) roleToken(t testing.TB, user uint64, role string) string {
	t.Helper()
	tok, err := s.keys.SignRole(engine.UserID(user), role, 0)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

type gqlError struct {
	Message    string         `json:"message"`
	Path       []any          `json:"path"`
	Extensions map[string]any `json:"extensions"`
}

type gqlResponse struct {
	Data   json.RawMessage `json:"data"`
	Errors []gqlError      `json:"errors"`
	Status int             `json:"-"`
	Header http.Header     `json:"-"`
}

// do posts a GraphQL request as user (0 = anonymous) and returns the raw
// response.
func (s *testServer) do(t *testing.T, user uint64, query string, vars map[string]any) gqlResponse {
	t.Helper()
	tok := ""
	if user != 0 {
		tok = s.token(t, user, false)
	}
	return s.doToken(t, tok, query, vars)
}

func (s *testServer) doToken(t *testing.T, token, query string, vars map[string]any) gqlResponse {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"query": query, "variables": vars})
	header := ""
	if token != "" {
		header = "Bearer " + token
	}
	return s.post(t, header, string(body))
}

// q runs a query that must succeed and decodes data into a generic map.
func (s *testServer) q(t *testing.T, user uint64, query string, vars map[string]any) map[string]any {
	t.Helper()
	r := s.do(t, user, query, vars)
	if len(r.Errors) > 0 {
		t.Fatalf("%s\nerrors: %+v", query, r.Errors)
	}
	var m map[string]any
	if err := json.Unmarshal(r.Data, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// wantCode runs a query that must fail with code.
func (s *testServer) wantCode(t *testing.T, user uint64, code, query string, vars map[string]any) gqlError {
	t.Helper()
	r := s.do(t, user, query, vars)
	return expectCode(t, r, code)
}

func expectCode(t *testing.T, r gqlResponse, code string) gqlError {
	t.Helper()
	if len(r.Errors) == 0 {
		t.Fatalf("want error %s, got data %s", code, r.Data)
	}
	e := r.Errors[0]
	if got, _ := e.Extensions["code"].(string); got != code {
		t.Fatalf("want code %s, got %+v", code, r.Errors)
	}
	for _, bad := range []string{".go:", "goroutine ", "/root/", "runtime."} {
		if strings.Contains(e.Message, bad) {
			t.Fatalf("error leaks internals: %q", e.Message)
		}
	}
	return e
}

// get walks a decoded JSON value by keys and indices: get(m, "viewer", "unread", "likes").
func get(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				return nil
			}
			v = m[k]
		case int:
			a, ok := v.([]any)
			if !ok || k >= len(a) {
				return nil
			}
			v = a[k]
		}
	}
	return v
}

// num reads a JSON number at path as int64 (exact: numbers are decoded as
// json.Number where it matters, see numExact).
func num(t *testing.T, v any, path ...any) int64 {
	t.Helper()
	x := get(v, path...)
	f, ok := x.(float64)
	if !ok {
		t.Fatalf("%v is %T (%v), not a number", path, x, x)
	}
	return int64(f)
}

func str(v any, path ...any) string {
	s, _ := get(v, path...).(string)
	return s
}

func id(n uint64) string { return fmt.Sprint(n) }

const unreadQ = `{ viewer { id redDot unread { mentions comments likes messages system feed total } } }`

type unread struct{ Mentions, Comments, Likes, Messages, System, Feed, Total int64 }

func (s *testServer) unread(t *testing.T, user uint64) (unread, bool) {
	t.Helper()
	m := s.q(t, user, unreadQ, nil)
	u := get(m, "viewer", "unread")
	return unread{
		num(t, u, "mentions"), num(t, u, "comments"), num(t, u, "likes"), num(t, u, "messages"),
		num(t, u, "system"), num(t, u, "feed"), num(t, u, "total"),
	}, get(m, "viewer", "redDot") == true
}

func (s *testServer) createPost(t *testing.T, user uint64) string {
	t.Helper()
	m := s.q(t, user, `mutation { createPost { id } }`, nil)
	return str(m, "createPost", "id")
}

// post sends a raw body with an Authorization header value as given.
func (s *testServer) post(t *testing.T, authHeader, body string) gqlResponse {
	t.Helper()
	return s.postWithHeaders(t, map[string]string{"Authorization": authHeader}, body)
}

// postWithHeaders posts body with headers (empty values left out).
func (s *testServer) postWithHeaders(t *testing.T, headers map[string]string, body string) gqlResponse {
	t.Helper()
	req, _ := http.NewRequest("POST", s.URL+"/query", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for name, v := range headers {
		if v != "" {
			req.Header.Set(name, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out gqlResponse
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("response %d is not JSON: %s", resp.StatusCode, raw)
	}
	out.Status, out.Header = resp.StatusCode, resp.Header
	return out
}
