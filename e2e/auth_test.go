package e2e

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestAuthRules(t *testing.T) {
	s := newTestServer(t)
	s.wantCode(t, 0, "UNAUTHENTICATED", `{ viewer { id } }`, nil)
	s.wantCode(t, 0, "UNAUTHENTICATED", `mutation { createPost { id } }`, nil)
	for _, bad := range []string{"garbage", "Bearer", "Bearer x.y.z", "Basic abc"} {
		r := s.rawAuth(t, bad, `{ systemNotifications { id } }`)
		expectCode(t, r, "UNAUTHENTICATED")
	}
	// A token signed with another secret, and an expired one.
	other := strings.Split(s.token(t, 5, false), ".")
	other[2] = strings.Repeat("A", len(other[2]))
	expectCode(t, s.doToken(t, strings.Join(other, "."), `{ viewer { id } }`, nil), "UNAUTHENTICATED")
	expired, _ := s.keys.Sign(5, false, -time.Hour)
	expectCode(t, s.doToken(t, expired, `{ viewer { id } }`, nil), "UNAUTHENTICATED")

	m := s.q(t, 7, `{ viewer { id user { id } } }`, nil)
	if str(m, "viewer", "id") != "7" || str(m, "viewer", "user", "id") != "7" {
		t.Fatalf("viewer = %v", m)
	}
	// Admin-only mutations.
	s.wantCode(t, 7, "FORBIDDEN", `mutation { pushRedDot }`, nil)
	s.wantCode(t, 7, "FORBIDDEN", `mutation { publishSystemNotification(title: "t", body: "b") { id } }`, nil)
	admin := s.token(t, 1, true)
	r := s.doToken(t, admin, `mutation { pushRedDot }`, nil)
	if len(r.Errors) > 0 {
		t.Fatal(r.Errors)
	}
	// Anonymous reads of public data are fine.
	s.q(t, 0, `{ systemNotifications { id } }`, nil)
}

func (s *testServer) rawAuth(t *testing.T, header, query string) gqlResponse {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"query": query})
	return s.post(t, header, string(body))
}
