package e2e

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
)

// Bad input gets a clear error with the right code, the server keeps
// serving, and no state changes.
func TestBadInput(t *testing.T) {
	s := newTestServer(t)
	pid := s.createPost(t, 1)
	state := func() string {
		r := s.do(t, 1, `query($p: ID!) { post(id: $p) { counts { likes comments reposts views favorites } } viewer { unread { total } } }`, map[string]any{"p": pid})
		return string(r.Data)
	}
	before := state()

	cases := []struct{ name, body, code string }{
		{"malformed JSON", `{"query": "{ viewer { id } `, "BAD_USER_INPUT"},
		{"not GraphQL", `{"query": "hello"}`, "BAD_USER_INPUT"},
		{"unknown field", `{"query": "{ nope }"}`, "BAD_USER_INPUT"},
		{"wrong variable type", `{"query": "query($p: ID!) { post(id: $p) { id } }", "variables": {"p": {"x": 1}}}`, "BAD_USER_INPUT"},
		{"missing variable", `{"query": "query($p: ID!) { post(id: $p) { id } }"}`, "BAD_USER_INPUT"},
		{"string for int", `{"query": "{ systemNotifications(first: \"ten\") { id } }"}`, "BAD_USER_INPUT"},
		{"negative first", `{"query": "{ systemNotifications(first: -1) { id } }"}`, "BAD_USER_INPUT"},
		{"bad id in list", `{"query": "mutation { recordViews(postIds: [\"1\", \"x\"]) }"}`, "BAD_USER_INPUT"},
		{"too many mentions", fmt.Sprintf(`{"query": "mutation { commentOnPost(postId: \"%s\", mentions: [%s]) { id } }"}`, pid, strings.Repeat(`\"5\",`, 101)+`\"5\"`), "BAD_USER_INPUT"},
		{"huge text", fmt.Sprintf(`{"query": "mutation { sendMessage(groupId: \"1\", text: \"%s\") { id } }"}`, strings.Repeat("x", 5000)), "BAD_USER_INPUT"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			expectCode(t, s.post(t, "Bearer "+s.token(t, 2, false), c.body), c.code)
		})
	}

	// Wide and deep queries are refused by the complexity limit.
	wide := "{ " + strings.Repeat(`a: posts(ids: ["1","2","3","4","5","6","7","8","9","10"]) { counts { likes } author { postCount } } `, 1)
	for i := range 120 {
		wide += fmt.Sprintf(`p%d: posts(ids: ["1","2","3","4","5","6","7","8","9","10"]) { counts { likes views } author { postCount followerCount } } `, i)
	}
	wide += "}"
	expectCode(t, s.do(t, 2, wide, nil), "BAD_USER_INPUT")
	deep := `{ message(id: "1") { group { members { id } } readReceipts { readers(first: 1000) { id postCount followerCount followingCount } unreaders(first: 1000) { id postCount followerCount followingCount } } } }`
	expectCode(t, s.do(t, 2, deep, nil), "BAD_USER_INPUT")

	// Oversized body: refused, not read to the end.
	big := `{"query": "{ viewer { id } }", "x": "` + strings.Repeat("a", 2<<20) + `"}`
	req, _ := http.NewRequest("POST", s.URL+"/query", strings.NewReader(big))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode < 400 || !strings.Contains(string(b), "BAD_USER_INPUT") {
		t.Fatalf("oversized body: %d %s", resp.StatusCode, b)
	}
	// A query with too many tokens.
	many := "{ " + strings.Repeat("__typename ", 20000) + "}"
	expectCode(t, s.do(t, 2, many, nil), "BAD_USER_INPUT")

	if after := state(); after != before {
		t.Fatalf("bad input changed state:\n%s\n%s", before, after)
	}
	// Still serving.
	s.q(t, 1, `{ viewer { id } }`, nil)
}
