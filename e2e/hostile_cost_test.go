package e2e

// The hostile-client suite, request level: each case is an attack that
// once went through (issue 11) and must now be refused whole or bounded,
// with nothing applied by a refused request. bench/hostile runs the same
// attacks against a running server for minutes.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/embedded"
	"github.com/tally-dev/tally/web/transport"
)

func newHostileServer(t *testing.T, cfg transport.Config) *testServer {
	t.Helper()
	store, err := embedded.Open(embedded.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return newTestServerWith(t, store, cfg)
}

// aliased repeats field n times under aliases m0, m1, ... in one operation.
func aliased(kind, vars, field string, n int) string {
	var b strings.Builder
	b.WriteString(kind + vars + " {")
	for i := range n {
		fmt.Fprintf(&b, " m%d: %s", i, field)
	}
	b.WriteString(" }")
	return b.String()
}

// rawDo posts a GraphQL request and returns the response with its headers.
func (s *testServer) rawDo(t *testing.T, user uint64, query string, vars map[string]any) (gqlResponse, http.Header) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"query": query, "variables": vars})
	req, _ := http.NewRequest("POST", s.URL+"/query", strings.NewReader(string(body)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/graphql-response+json")
	if user != 0 {
		req.Header.Set("Authorization", "Bearer "+s.token(t, user, false))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out gqlResponse
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("response %d is not JSON: %.300s", resp.StatusCode, raw)
	}
	out.Status = resp.StatusCode
	return out, resp.Header
}

func (s *testServer) postCount(t *testing.T, user uint64) int64 {
	t.Helper()
	return num(t, s.q(t, 0, `query($u: ID!) { user(id: $u) { postCount } }`, map[string]any{"u": id(user)}), "user", "postCount")
}

func TestHostileAliasedCreatePostRefusedWhole(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  transport.Config
	}{
		{"default cap", transport.Config{}},
		// With the cap lifted, the rate limit's burst still caps it.
		{"cap lifted", transport.Config{MaxMutationsPerRequest: -1, RateLimit: 50, RateBurst: 100}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newHostileServer(t, c.cfg)
			r := s.do(t, 7, aliased("mutation", "", "createPost { id }", 1000), nil)
			e := expectCode(t, r, "BAD_USER_INPUT")
			if e.Extensions["reason"] != "TOO_MANY_MUTATIONS" || len(r.Data) != 0 && string(r.Data) != "null" {
				t.Fatalf("refusal: %+v, data %s", r.Errors, r.Data)
			}
			if n := s.postCount(t, 7); n != 0 {
				t.Fatalf("a refused request created %d posts", n)
			}
			if st := s.store.Stats(); st.Posts != 0 {
				t.Fatalf("a refused request left %d posts in the registry", st.Posts)
			}
		})
	}
}

func TestHostileOverBudgetRefusedWholeWithRetryHint(t *testing.T) {
	s := newHostileServer(t, transport.Config{RateLimit: 0.05, RateBurst: 30, MaxMutationsPerRequest: 20})
	if r := s.do(t, 7, aliased("mutation", "", "createPost { id }", 20), nil); len(r.Errors) > 0 {
		t.Fatalf("20 of a budget of 30: %+v", r.Errors)
	}
	// 20 more would overdraw the 10 left: refused whole, nothing applied.
	r, h := s.rawDo(t, 7, aliased("mutation", "", "createPost { id }", 20), nil)
	e := expectCode(t, r, "RATE_LIMITED")
	retry, _ := e.Extensions["retryAfter"].(float64)
	// 10 tokens missing at one every 20 s: 200 s (a slow run has refilled
	// a little).
	if retry < 180 || retry > 201 {
		t.Fatalf("retryAfter %v, want about 200 s (10 tokens at 0.05/s): %+v", e.Extensions["retryAfter"], e)
	}
	if got := h.Get("Retry-After"); got != strconv.Itoa(int(retry)) {
		t.Fatalf("Retry-After header %q, extensions.retryAfter %v", got, retry)
	}
	if r.Status != http.StatusTooManyRequests {
		t.Fatalf("status %d under graphql-response+json, want 429", r.Status)
	}
	if n := s.postCount(t, 7); n != 20 {
		t.Fatalf("postCount %d after a refused request, want the 20 applied before", n)
	}
	// The refusal spent nothing: the 10 left are still there.
	if r := s.do(t, 7, aliased("mutation", "", "createPost { id }", 10), nil); len(r.Errors) > 0 {
		t.Fatalf("10 of the 10 left: %+v", r.Errors)
	}
	expectCode(t, s.do(t, 7, `mutation { createPost { id } }`, nil), "RATE_LIMITED")
	if n := s.postCount(t, 7); n != 30 {
		t.Fatalf("postCount %d, want 30", n)
	}
	// Another user's budget is their own.
	if r := s.do(t, 8, aliased("mutation", "", "createPost { id }", 20), nil); len(r.Errors) > 0 {
		t.Fatalf("another user: %+v", r.Errors)
	}
}

// bigGroup makes a group of user 1 with n-1 other members (through the
// engine: the setup is not the attack).
func bigGroup(t *testing.T, s *testServer, n int) engine.GroupID {
	t.Helper()
	ctx := context.Background()
	g, err := s.store.CreateGroup(ctx, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	for next := 2; next <= n; {
		batch := make([]engine.UserID, 0, engine.MaxIDsPerCall)
		for ; next <= n && len(batch) < cap(batch); next++ {
			batch = append(batch, engine.UserID(1000+next))
		}
		if err := s.store.AddGroupMembers(ctx, 1, g, batch); err != nil {
			t.Fatal(err)
		}
	}
	return g
}

func (s *testServer) memberCount(t *testing.T, g engine.GroupID) int64 {
	t.Helper()
	return num(t, s.q(t, 1, `query($g: ID!) { group(id: $g) { memberCount } }`, map[string]any{"g": id(uint64(g))}), "group", "memberCount")
}

func TestHostileAliasedAddGroupMembersRefused(t *testing.T) {
	ids := make([]string, 100)
	for i := range ids {
		ids[i] = strconv.Itoa(100000 + i)
	}
	for _, c := range []struct {
		name, reason string
		cfg          transport.Config
	}{
		{"default cap", "TOO_MANY_MUTATIONS", transport.Config{}},
		// No cap and no rate limit: the price of 200 × 100 ids is over.
		{"priced", "COMPLEXITY_LIMIT_EXCEEDED", transport.Config{MaxMutationsPerRequest: -1}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newHostileServer(t, c.cfg)
			g := bigGroup(t, s, 2)
			q := aliased("mutation", "($g: ID!, $u: [ID!]!)", "addGroupMembers(groupId: $g, userIds: $u) { id }", 200)
			r := s.do(t, 1, q, map[string]any{"g": id(uint64(g)), "u": ids})
			if e := expectCode(t, r, "BAD_USER_INPUT"); e.Extensions["reason"] != c.reason {
				t.Fatalf("refused as %+v, want reason %s", e, c.reason)
			}
			if n := s.memberCount(t, g); n != 2 {
				t.Fatalf("a refused request left %d members, want 2", n)
			}
		})
	}
}

func TestHostileMessageFloodBounded(t *testing.T) {
	text := strings.Repeat("x", 4096)
	t.Run("900 per request", func(t *testing.T) {
		s := newHostileServer(t, transport.Config{})
		g := bigGroup(t, s, 3)
		q := aliased("mutation", "($g: ID!, $t: String!)", "sendMessage(groupId: $g, text: $t) { id }", 900)
		for range 20 {
			expectCode(t, s.do(t, 1, q, map[string]any{"g": id(uint64(g)), "t": text}), "BAD_USER_INPUT")
		}
		if st := s.store.Stats(); st.Messages != 0 {
			t.Fatalf("20 refused requests stored %d messages", st.Messages)
		}
	})
	t.Run("rate limited", func(t *testing.T) {
		// A budget of 100 that refills at 1 every 10 s: 20 requests of 20
		// get the burst's 5 requests through (a sixth only on a machine
		// slow enough to take 200 s), each whole; the rest are refused
		// whole.
		s := newHostileServer(t, transport.Config{RateLimit: 0.1, RateBurst: 100})
		g := bigGroup(t, s, 3)
		q := aliased("mutation", "($g: ID!, $t: String!)", "sendMessage(groupId: $g, text: $t) { id }", 20)
		applied := 0
		for range 20 {
			r := s.do(t, 1, q, map[string]any{"g": id(uint64(g)), "t": text})
			if len(r.Errors) == 0 {
				applied++
				continue
			}
			expectCode(t, r, "RATE_LIMITED")
		}
		st := s.store.Stats()
		if applied < 5 || applied > 6 || st.Messages != int64(20*applied) {
			t.Fatalf("%d requests applied, %d messages stored: want 5 or 6 whole requests", applied, st.Messages)
		}
	})
}

// introspectionFlood is the 33 KB request of issue 11: 1,400 aliased
// copies of a whole-schema fragment.
func introspectionFlood() string {
	var b strings.Builder
	b.WriteString(`query {`)
	for i := range 1400 {
		fmt.Fprintf(&b, " s%d: __schema { ...F }", i)
	}
	b.WriteString(" } fragment F on __Schema { types { name fields { name type { name } } } }")
	return b.String()
}

func TestHostileIntrospectionAmplificationRefused(t *testing.T) {
	flood := introspectionFlood()
	if len(flood) < 30000 {
		t.Fatalf("the flood is %d bytes", len(flood))
	}
	s := newHostileServer(t, transport.Config{})
	body, _ := json.Marshal(map[string]any{"query": flood})
	req, _ := http.NewRequest("POST", s.URL+"/query", strings.NewReader(string(body)))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var r gqlResponse
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatal(err)
	}
	if e := expectCode(t, r, "BAD_USER_INPUT"); e.Extensions["reason"] != "COMPLEXITY_LIMIT_EXCEEDED" {
		t.Fatalf("refused as %+v", e)
	}
	if len(raw) > 2048 {
		t.Fatalf("the refusal is %d bytes", len(raw))
	}
	// One copy is an ordinary introspection query, and is answered.
	one := s.q(t, 0, `{ __schema { types { name fields { name type { name } } } } }`, nil)
	if len(get(one, "__schema", "types").([]any)) < 10 {
		t.Fatalf("one __schema: %v", one)
	}

	// Turned off, introspection is refused with its own reason;
	// __typename still answers (clients add it everywhere).
	off := newHostileServer(t, transport.Config{DisableIntrospection: true})
	for _, q := range []string{`{ __schema { queryType { name } } }`, `{ __type(name: "Post") { name } }`} {
		if e := off.wantCode(t, 0, "BAD_USER_INPUT", q, nil); e.Extensions["reason"] != "INTROSPECTION_DISABLED" {
			t.Fatalf("%s with introspection off: %+v", q, e)
		}
	}
	if m := off.q(t, 0, `{ __typename }`, nil); m["__typename"] != "Query" {
		t.Fatalf("__typename with introspection off: %v", m)
	}
}

// A client that sends many requests, each under the cost limit, spends a
// budget per second: whole-schema introspections from one anonymous
// address, or one user's, are refused with RATE_LIMITED once it is spent,
// while another client keeps its own.
func TestHostileCostRateBounded(t *testing.T) {
	s := newHostileServer(t, transport.Config{CostRate: 100, CostBurst: 6000})
	const intro = `{ __schema { types { name fields { name args { name } type { name kind } } } } }`
	answered := 0
	var refused gqlResponse
	var header http.Header
	for range 20 {
		r, h := s.rawDo(t, 0, intro, nil)
		if len(r.Errors) > 0 {
			refused, header = r, h
			break
		}
		answered++
	}
	if answered == 0 || answered >= 20 {
		t.Fatalf("%d of 20 whole-schema introspections answered on a budget of 6000 at 100/s", answered)
	}
	e := expectCode(t, refused, "RATE_LIMITED")
	if e.Extensions["reason"] != "COST_RATE" || e.Extensions["retryAfter"] == nil || header.Get("Retry-After") == "" {
		t.Fatalf("refusal %+v, Retry-After %q", e, header.Get("Retry-After"))
	}
	// A signed-in user from the same address has a budget of their own.
	if r := s.do(t, 5, intro, nil); len(r.Errors) > 0 {
		t.Fatalf("user 5 after the anonymous address spent its budget: %+v", r.Errors)
	}
	if body := metricsText(t, s.URL); !strings.Contains(body, `tally_rate_limited_total{limit="cost"} 1`+"\n") {
		t.Errorf("the refusal is not counted:\n%s", grepLines(body, "tally_rate_limited_total"))
	}
}

// A flood of requests refused for their size spends the client's cost
// budget too (each costs the limit), and once it is dry the client's next
// requests are answered 429 before their bodies are read.
func TestHostileRefusedFloodRunsBudgetDry(t *testing.T) {
	s := newHostileServer(t, transport.Config{CostRate: 10, CostBurst: 6000})
	flood := introspectionFlood()
	var gated gqlResponse
	var header http.Header
	// The first two are priced (6,000, then 1,000 left); each costs the
	// limit of 5,000, so the budget is 4,000 in debt and the third is
	// answered before it is parsed.
	for range 3 {
		r, h := s.rawDo(t, 0, flood, nil)
		if len(r.Errors) > 0 && r.Errors[0].Extensions["reason"] == "COST_RATE" {
			gated, header = r, h
			break
		}
		if e := expectCode(t, r, "BAD_USER_INPUT"); e.Extensions["reason"] != "COMPLEXITY_LIMIT_EXCEEDED" {
			t.Fatalf("flood refused as %+v", e)
		}
	}
	if gated.Errors == nil {
		t.Fatal("3 floods of a budget of 6,000 refilling at 10/s were all priced: refusals cost the client too little")
	}
	e := expectCode(t, gated, "RATE_LIMITED")
	if gated.Status != http.StatusTooManyRequests || header.Get("Retry-After") == "" || e.Extensions["retryAfter"] == nil {
		t.Fatalf("a dry client: status %d, Retry-After %q, %+v", gated.Status, header.Get("Retry-After"), e)
	}
	// A signed-in user on the same address is not affected.
	s.q(t, 3, `{ viewer { id } }`, nil)
	// Refused before parsing, still counted.
	if body := metricsText(t, s.URL); !strings.Contains(body, `tally_rate_limited_total{limit="cost"} 1`+"\n") {
		t.Errorf("the refusal is not counted:\n%s", grepLines(body, "tally_rate_limited_total"))
	}
}

// Over a WebSocket a mutation spends the same budget: one that would
// overdraw it is refused whole with RATE_LIMITED and retryAfter, applying
// nothing.
func TestHostileOverBudgetOnWebSocket(t *testing.T) {
	s := newHostileServer(t, transport.Config{RateLimit: 0.05, RateBurst: 10})
	ws, err := s.dialWS(t, s.token(t, 7, false))
	if err != nil {
		t.Fatal(err)
	}
	ws.subscribe("a", aliased("mutation", "", "createPost { id }", 8), nil)
	if m := ws.nextData(10 * time.Second); len(m) != 8 {
		t.Fatalf("8 of 10 over a WebSocket: %v", m)
	}
	ws.subscribe("b", aliased("mutation", "", "createPost { id }", 5), nil)
	var m wsMsg
	for m.Type == "" || m.Type == "complete" {
		if m, err = ws.next(10 * time.Second); err != nil {
			t.Fatal(err)
		}
	}
	var p struct{ Errors []gqlError }
	if m.Type == "next" {
		var next struct{ Errors []gqlError }
		json.Unmarshal(m.Payload, &next)
		p.Errors = next.Errors
	} else {
		json.Unmarshal(m.Payload, &p.Errors)
	}
	if len(p.Errors) == 0 || p.Errors[0].Extensions["code"] != "RATE_LIMITED" || p.Errors[0].Extensions["retryAfter"] == nil {
		t.Fatalf("5 with 2 left, over a WebSocket: %s %s", m.Type, m.Payload)
	}
	if n := s.postCount(t, 7); n != 8 {
		t.Fatalf("postCount %d, want the 8 applied", n)
	}
}
