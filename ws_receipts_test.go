package main

import (
	"encoding/json"
	"testing"
	"time"
)

// A sender who left the group gets no more receipts: the subscription
// ends with an error message carrying FORBIDDEN rather than going quiet.
func TestWSReceiptsEndWhenSenderLeaves(t *testing.T) {
	s := newTestServer(t)
	m := s.q(t, 1, `mutation { createGroup(memberIds: ["2", "3"]) { id } }`, nil)
	group := str(m, "createGroup", "id")
	msg := s.send(t, 1, group, "hello")
	c := rawWS(t, s)
	wsInit(t, c, s.token(t, 1, false))
	wsSubscribe(t, c, "r", `subscription($m: ID!) { readReceiptsChanged(messageId: $m) { readCount } }`, map[string]any{"m": msg})
	if m := wsRead(t, c, 5*time.Second); m.Type != "next" {
		t.Fatalf("got %s %s", m.Type, m.Payload)
	}
	s.q(t, 1, `mutation($g: ID!) { leaveGroup(groupId: $g) { id } }`, map[string]any{"g": group})
	s.readMsgs(t, 2, msg)
	for {
		m := wsRead(t, c, 5*time.Second)
		if m.Type == "next" {
			t.Fatalf("an ex-member got receipts: %s", m.Payload)
		}
		var errs []gqlError
		json.Unmarshal(m.Payload, &errs)
		if m.Type != "error" || m.ID != "r" || len(errs) != 1 || errs[0].Extensions["code"] != "FORBIDDEN" {
			t.Fatalf("want an error message with FORBIDDEN, got %s %s %s", m.Type, m.ID, m.Payload)
		}
		return
	}
}
