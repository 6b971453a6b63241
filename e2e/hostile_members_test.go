package e2e

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/tally-dev/tally/web/transport"
)

// A 3,000-member group answered 5.5 MB to 90 aliases of its members
// (issue 11). Members are paged and priced by their page: 90 default
// pages are at most 4,500 members, 90 pages of 100 are over the limit,
// and paging through the whole group reads each member once.
func TestHostileBigGroupMembersBounded(t *testing.T) {
	s := newHostileServer(t, transport.Config{})
	g := bigGroup(t, s, 3000)
	vars := map[string]any{"g": id(uint64(g))}
	r := s.do(t, 1, aliased("query", "($g: ID!)", "group(id: $g) { members { id } }", 90), vars)
	if len(r.Errors) > 0 {
		t.Fatalf("90 default pages: %+v", r.Errors)
	}
	if ids := strings.Count(string(r.Data), `"id"`); ids != 90*50 {
		t.Fatalf("90 aliased default pages of a 3,000-member group answered %d ids (%d bytes), want 4,500", ids, len(r.Data))
	}
	big := s.do(t, 1, aliased("query", "($g: ID!)", "group(id: $g) { members(first: 100) { id } }", 90), vars)
	if e := expectCode(t, big, "BAD_USER_INPUT"); e.Extensions["reason"] != "COMPLEXITY_LIMIT_EXCEEDED" {
		t.Fatalf("90 pages of 100: %+v", e)
	}

	seen := map[string]bool{}
	after := any(nil)
	for pages := 0; ; pages++ {
		if pages > 30 {
			t.Fatalf("more than 30 pages of 100 for 3,000 members")
		}
		m := s.q(t, 1, `query($g: ID!, $a: ID) { group(id: $g) { members(first: 100, after: $a) { id } } }`, map[string]any{"g": id(uint64(g)), "a": after})
		var page []struct{ ID string }
		b, _ := json.Marshal(get(m, "group", "members"))
		if err := json.Unmarshal(b, &page); err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		for _, u := range page {
			if seen[u.ID] {
				t.Fatalf("member %s listed twice", u.ID)
			}
			seen[u.ID] = true
		}
		after = page[len(page)-1].ID
	}
	if len(seen) != 3000 {
		t.Fatalf("paging read %d members, want 3,000", len(seen))
	}
}
