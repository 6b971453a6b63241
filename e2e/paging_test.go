package e2e

import (
	"fmt"
	"slices"
	"testing"
)

// pagingIDs reads a list of {id} objects at path as decimal ids.
func pagingIDs(v any, path ...any) []string {
	var out []string
	list, _ := get(v, path...).([]any)
	for _, x := range list {
		out = append(out, str(x, "id"))
	}
	return out
}

// TestPagedGroupMembers: Group.members is a page (default 50, at most
// 100) with a user-id cursor; memberCount counts them all; a bad page is
// BAD_USER_INPUT; leaveGroup answers pages without the leaver.
func TestPagedGroupMembers(t *testing.T) {
	s := newTestServer(t)
	const owner = 1
	m := s.q(t, owner, `mutation { createGroup(memberIds: []) { id } }`, nil)
	g := str(m, "createGroup", "id")
	want := []string{id(owner)}
	for b := range 3 {
		var batch []string
		for i := range 100 {
			batch = append(batch, id(uint64(1000+b*100+i)))
		}
		s.q(t, owner, `mutation($g: ID!, $u: [ID!]!) { addGroupMembers(groupId: $g, userIds: $u) { id } }`,
			map[string]any{"g": g, "u": batch})
		want = append(want, batch...)
	}

	q := `query($g: ID!, $f: Int, $a: ID) { group(id: $g) { memberCount members(first: $f, after: $a) { id } } }`
	m = s.q(t, owner, `query($g: ID!) { group(id: $g) { memberCount members { id } } }`, map[string]any{"g": g})
	if n := num(t, m, "group", "memberCount"); n != int64(len(want)) {
		t.Fatalf("memberCount = %d, want %d", n, len(want))
	}
	if got := pagingIDs(m, "group", "members"); !slices.Equal(got, want[:50]) {
		t.Fatalf("default page = %d members, want the first 50", len(got))
	}
	for _, first := range []int{7, 100} {
		var all []string
		vars := map[string]any{"g": g, "f": first}
		for range 100 {
			page := pagingIDs(s.q(t, owner, q, vars), "group", "members")
			if len(page) == 0 {
				break
			}
			all = append(all, page...)
			vars["a"] = page[len(page)-1]
		}
		if !slices.Equal(all, want) {
			t.Fatalf("paging by %d: %d members, want %d in join order", first, len(all), len(want))
		}
	}
	for _, bad := range []map[string]any{
		{"g": g, "f": 101},
		{"g": g, "f": -1},
		{"g": g, "f": 10, "a": "999999"}, // never joined
		{"g": g, "f": 10, "a": "x"},
	} {
		s.wantCode(t, owner, "BAD_USER_INPUT", q, bad)
	}

	// leaveGroup: the pages asked for, as they are without the leaver.
	leaver := want[1]
	var lv uint64
	fmt.Sscan(leaver, &lv)
	m = s.q(t, lv, `mutation($g: ID!) { leaveGroup(groupId: $g) { memberCount a: members(first: 3) { id } b: members(first: 2, after: "1001") { id } } }`,
		map[string]any{"g": g})
	if n := num(t, m, "leaveGroup", "memberCount"); n != int64(len(want)-1) {
		t.Fatalf("memberCount after leaving = %d, want %d", n, len(want)-1)
	}
	if got := pagingIDs(m, "leaveGroup", "a"); !slices.Equal(got, []string{want[0], want[2], want[3]}) {
		t.Fatalf("first page after leaving = %v", got)
	}
	if got := pagingIDs(m, "leaveGroup", "b"); !slices.Equal(got, []string{want[3], want[4]}) {
		t.Fatalf("page after 1001 = %v", got)
	}
	s.wantCode(t, lv, "FORBIDDEN", q, map[string]any{"g": g, "f": 10})
}

// TestPagedReadReceipts: readers/unreaders page from a cursor; a sender
// who left gets FORBIDDEN.
func TestPagedReadReceipts(t *testing.T) {
	s := newTestServer(t)
	const sender = 1
	var others []string
	for i := range 9 {
		others = append(others, id(uint64(2000+i)))
	}
	g := str(s.q(t, sender, `mutation($u: [ID!]!) { createGroup(memberIds: $u) { id } }`, map[string]any{"u": others}), "createGroup", "id")
	msg := str(s.q(t, sender, `mutation($g: ID!) { sendMessage(groupId: $g, text: "hi") { id } }`, map[string]any{"g": g}), "sendMessage", "id")
	var readers, unreaders []string
	for i, u := range others {
		if i%2 == 0 {
			var uid uint64
			fmt.Sscan(u, &uid)
			s.q(t, uid, `mutation($m: ID!) { markMessagesRead(messageIds: [$m]) { id } }`, map[string]any{"m": msg})
			readers = append(readers, u)
		} else {
			unreaders = append(unreaders, u)
		}
	}
	q := `query($m: ID!, $f: Int, $a: ID) { message(id: $m) { readReceipts { readCount unreadCount
		readers(first: $f, after: $a) { id } unreaders(first: $f, after: $a) { id } } } }`
	m := s.q(t, sender, q, map[string]any{"m": msg, "f": 2})
	if got := pagingIDs(m, "message", "readReceipts", "readers"); !slices.Equal(got, readers[:2]) {
		t.Fatalf("readers first page = %v, want %v", got, readers[:2])
	}
	// One cursor for both lists: each continues after that user's place.
	m = s.q(t, sender, q, map[string]any{"m": msg, "f": 2, "a": readers[1]})
	if got := pagingIDs(m, "message", "readReceipts", "readers"); !slices.Equal(got, readers[2:4]) {
		t.Fatalf("readers after %s = %v, want %v", readers[1], got, readers[2:4])
	}
	if got := pagingIDs(m, "message", "readReceipts", "unreaders"); !slices.Equal(got, unreaders[1:3]) {
		t.Fatalf("unreaders after %s = %v, want %v", readers[1], got, unreaders[1:3])
	}
	s.wantCode(t, sender, "BAD_USER_INPUT", q, map[string]any{"m": msg, "f": 101})
	s.wantCode(t, sender, "BAD_USER_INPUT", q, map[string]any{"m": msg, "f": 2, "a": "777"})

	// The sender leaves: their receipts are gone by this path too.
	s.q(t, sender, `mutation($g: ID!) { leaveGroup(groupId: $g) { id } }`, map[string]any{"g": g})
	s.wantCode(t, sender, "FORBIDDEN", q, map[string]any{"m": msg, "f": 2})
}
