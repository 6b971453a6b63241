package e2e

import (
	"fmt"
	"testing"
)

const receiptsQ = `query($m: ID!, $n: Int) { message(id: $m) { readReceipts { readCount unreadCount readers(first: $n) { id } unreaders(first: $n) { id } } } }`

func (s *testServer) receipts(t *testing.T, sender uint64, msg string, n int) (read, unread int64, readers, unreaders []string) {
	t.Helper()
	m := s.q(t, sender, receiptsQ, map[string]any{"m": msg, "n": n})
	rr := get(m, "message", "readReceipts")
	for _, u := range get(rr, "readers").([]any) {
		readers = append(readers, str(u, "id"))
	}
	for _, u := range get(rr, "unreaders").([]any) {
		unreaders = append(unreaders, str(u, "id"))
	}
	return num(t, rr, "readCount"), num(t, rr, "unreadCount"), readers, unreaders
}

func (s *testServer) send(t *testing.T, user uint64, group, text string) string {
	t.Helper()
	m := s.q(t, user, `mutation($g: ID!, $t: String!) { sendMessage(groupId: $g, text: $t) { id text sender { id } group { id } } }`, map[string]any{"g": group, "t": text})
	return str(m, "sendMessage", "id")
}

func (s *testServer) readMsgs(t *testing.T, user uint64, ids ...string) {
	t.Helper()
	s.q(t, user, `mutation($ids: [ID!]!) { markMessagesRead(messageIds: $ids) { id } }`, map[string]any{"ids": ids})
}

func TestGroupOf200Receipts(t *testing.T) {
	s := newTestServer(t)
	const owner = 1000
	var batches [][]string
	for b := range 2 {
		var ids []string
		for i := range 100 {
			ids = append(ids, id(uint64(owner+1+b*100+i)))
		}
		batches = append(batches, ids)
	}
	m := s.q(t, owner, `mutation($m: [ID!]!) { createGroup(memberIds: $m) { id memberCount } }`, map[string]any{"m": batches[0]})
	g := str(m, "createGroup", "id")
	// 1 + 100 now; add 99 more to reach 200 members.
	m = s.q(t, owner, `mutation($g: ID!, $u: [ID!]!) { addGroupMembers(groupId: $g, userIds: $u) { memberCount } }`, map[string]any{"g": g, "u": batches[1][:99]})
	if num(t, m, "addGroupMembers", "memberCount") != 200 {
		t.Fatalf("members = %v", m)
	}
	msg := s.send(t, owner, g, "hello 200")
	if u, _ := s.unread(t, owner+5); u.Messages != 1 {
		t.Fatalf("member's message unread = %+v", u)
	}
	if u, _ := s.unread(t, owner); u.Messages != 0 {
		t.Fatalf("sender's own message counted: %+v", u)
	}
	read, unread, readers, unreaders := s.receipts(t, owner, msg, 5)
	if read != 0 || unread != 199 || len(readers) != 0 || len(unreaders) != 5 || unreaders[0] != id(owner+1) {
		t.Fatalf("fresh receipts = %d %d %v %v", read, unread, readers, unreaders)
	}
	for i := range 50 {
		s.readMsgs(t, uint64(owner+1+i*2), msg)
	}
	s.readMsgs(t, owner+1, msg) // twice: counts once
	read, unread, readers, _ = s.receipts(t, owner, msg, 100)
	if read != 50 || unread != 149 || len(readers) != 50 || readers[1] != id(owner+3) {
		t.Fatalf("receipts after 50 reads = %d %d %v", read, unread, readers)
	}
	// Only the sender sees receipts.
	s.wantCode(t, owner+1, "FORBIDDEN", receiptsQ, map[string]any{"m": msg, "n": 1})
	// Non-members can neither read the message nor the group.
	s.wantCode(t, 5, "FORBIDDEN", `query($m: ID!) { message(id: $m) { id } }`, map[string]any{"m": msg})
	s.wantCode(t, 5, "FORBIDDEN", `query($g: ID!) { group(id: $g) { id } }`, map[string]any{"g": g})
	s.wantCode(t, 5, "FORBIDDEN", `mutation($ids: [ID!]!) { markMessagesRead(messageIds: $ids) { id } }`, map[string]any{"ids": []string{msg}})
	s.wantCode(t, 5, "FORBIDDEN", `mutation($g: ID!) { sendMessage(groupId: $g, text: "x") { id } }`, map[string]any{"g": g})
	s.wantCode(t, 5, "FORBIDDEN", `mutation($g: ID!) { addGroupMembers(groupId: $g, userIds: ["6"]) { id } }`, map[string]any{"g": g})
	s.wantCode(t, owner, "NOT_FOUND", `{ group(id: "424242") { id } }`, nil)
	s.wantCode(t, owner, "NOT_FOUND", `{ message(id: "424242") { id } }`, nil)
	s.wantCode(t, owner, "BAD_USER_INPUT", `mutation($g: ID!) { sendMessage(groupId: $g, text: "") { id } }`, map[string]any{"g": g})
}

// Members who joined after a message, or had left before it was sent, are
// not counted; the sender never is; a member who leaves and rejoins keeps
// their mapid, so their earlier standing is unchanged.
func TestReceiptsJoinLeaveRejoin(t *testing.T) {
	s := newTestServer(t)
	const a, b, c, d, e = 1, 2, 3, 4, 5
	m := s.q(t, a, fmt.Sprintf(`mutation { createGroup(memberIds: ["%d", "%d", "%d"]) { id members { id } } }`, b, c, d), nil)
	g := str(m, "createGroup", "id")
	if ms := get(m, "createGroup", "members").([]any); len(ms) != 4 || str(ms[0], "id") != "1" || str(ms[3], "id") != "4" {
		t.Fatalf("members = %v", ms)
	}
	// d leaves before m1 is sent.
	m = s.q(t, d, `mutation($g: ID!) { leaveGroup(groupId: $g) { memberCount } }`, map[string]any{"g": g})
	if num(t, m, "leaveGroup", "memberCount") != 3 {
		t.Fatalf("after leave = %v", m)
	}
	s.wantCode(t, d, "FORBIDDEN", `query($g: ID!) { group(id: $g) { id } }`, map[string]any{"g": g})
	m1 := s.send(t, a, g, "m1")
	if u, _ := s.unread(t, d); u.Messages != 0 {
		t.Fatalf("member who left got message unread: %+v", u)
	}
	// e joins after m1; d rejoins (keeps mapid 4, but had quit when m1 was sent).
	s.q(t, a, fmt.Sprintf(`mutation($g: ID!) { addGroupMembers(groupId: $g, userIds: ["%d", "%d"]) { id } }`, e, d), map[string]any{"g": g})
	read, unread, _, unreaders := s.receipts(t, a, m1, 10)
	if read != 0 || unread != 2 || fmt.Sprint(unreaders) != "[2 3]" {
		t.Fatalf("m1 receipts = %d %d %v, want 0 2 [2 3]", read, unread, unreaders)
	}
	s.readMsgs(t, e, m1)
	s.readMsgs(t, d, m1)
	s.readMsgs(t, a, m1) // the sender reading counts nothing
	if read, unread, _, _ := s.receipts(t, a, m1, 10); read != 0 || unread != 2 {
		t.Fatalf("late joiner / quit-at-send / sender changed m1: %d %d", read, unread)
	}
	// m2 after d rejoined: d counted with the old mapid; c leaves after m2
	// was sent and stays counted.
	m2 := s.send(t, a, g, "m2")
	s.q(t, c, `mutation($g: ID!) { leaveGroup(groupId: $g) { id } }`, map[string]any{"g": g})
	s.readMsgs(t, d, m2)
	read, unread, readers, unreaders := s.receipts(t, a, m2, 10)
	if read != 1 || unread != 3 || fmt.Sprint(readers) != "[4]" || fmt.Sprint(unreaders) != "[2 3 5]" {
		t.Fatalf("m2 receipts = %d %d %v %v, want 1 3 [4] [2 3 5]", read, unread, readers, unreaders)
	}
	// Rejoin reuses the mapid: the group lists d in its original join slot.
	m = s.q(t, a, `query($g: ID!) { group(id: $g) { members { id } } }`, map[string]any{"g": g})
	var ids []string
	for _, u := range get(m, "group", "members").([]any) {
		ids = append(ids, str(u, "id"))
	}
	if fmt.Sprint(ids) != "[1 2 4 5]" {
		t.Fatalf("members in mapid order = %v, want [1 2 4 5]", ids)
	}
}

func TestMessageMentions(t *testing.T) {
	s := newTestServer(t)
	m := s.q(t, 1, `mutation { createGroup(memberIds: ["2", "3"]) { id } }`, nil)
	g := str(m, "createGroup", "id")
	s.q(t, 1, `mutation($g: ID!) { sendMessage(groupId: $g, text: "@2", mentions: ["2", "1"], idempotencyKey: "k") { id } }`, map[string]any{"g": g})
	s.q(t, 1, `mutation($g: ID!) { sendMessage(groupId: $g, text: "@2", mentions: ["2", "1"], idempotencyKey: "k") { id } }`, map[string]any{"g": g})
	if u, _ := s.unread(t, 2); u.Mentions != 1 || u.Messages != 1 {
		t.Fatalf("mentioned member = %+v", u)
	}
	if u, _ := s.unread(t, 3); u.Mentions != 0 || u.Messages != 1 {
		t.Fatalf("other member = %+v", u)
	}
	if u, _ := s.unread(t, 1); u.Mentions != 0 {
		t.Fatalf("sender mentioning self = %+v", u)
	}
}

// TestLeaveGroupAnswers: leaveGroup answers the group as the remaining
// members see it; who may not read the group (never joined, left
// already, unknown group) is refused before anything else is looked at,
// page arguments included; a bad page argument leaves the member in.
func TestLeaveGroupAnswers(t *testing.T) {
	s := newTestServer(t)
	const a, b, c, outsider = 1, 2, 3, 9
	m := s.q(t, a, fmt.Sprintf(`mutation { createGroup(memberIds: ["%d", "%d"]) { id } }`, b, c), nil)
	g := str(m, "createGroup", "id")
	leave := `mutation($g: ID!) { leaveGroup(groupId: $g) { id memberCount members(first: 5) { id } } }`
	leavePaged := `mutation($g: ID!, $f: Int) { leaveGroup(groupId: $g) { id members(first: $f) { id } } }`
	vars := map[string]any{"g": g}

	s.wantCode(t, outsider, "FORBIDDEN", leave, vars)
	s.wantCode(t, outsider, "FORBIDDEN", leavePaged, map[string]any{"g": g, "f": 101})
	s.wantCode(t, a, "NOT_FOUND", leave, map[string]any{"g": "12345"})
	s.wantCode(t, a, "NOT_FOUND", leavePaged, map[string]any{"g": "12345", "f": -1})
	s.wantCode(t, b, "BAD_USER_INPUT", leavePaged, map[string]any{"g": g, "f": 101})
	s.q(t, b, `query($g: ID!) { group(id: $g) { id } }`, vars) // still a member

	m = s.q(t, b, leave, vars)
	if num(t, m, "leaveGroup", "memberCount") != 2 || fmt.Sprint(pagingIDs(m, "leaveGroup", "members")) != "[1 3]" {
		t.Fatalf("b left: %v", m)
	}
	s.wantCode(t, b, "FORBIDDEN", leave, vars)
	s.wantCode(t, b, "FORBIDDEN", `mutation($g: ID!) { leaveGroup(groupId: $g) { id } }`, vars)
	m = s.q(t, a, `query($g: ID!) { group(id: $g) { memberCount } }`, vars)
	if num(t, m, "group", "memberCount") != 2 {
		t.Fatalf("leaving again changed the group: %v", m)
	}
	m = s.q(t, c, leave, vars)
	if num(t, m, "leaveGroup", "memberCount") != 1 || fmt.Sprint(pagingIDs(m, "leaveGroup", "members")) != "[1]" {
		t.Fatalf("c left: %v", m)
	}
}
