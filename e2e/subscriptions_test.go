package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/coder/websocket/wsjson"
)

// wsClient speaks graphql-transport-ws.
type wsClient struct {
	t    *testing.T
	conn *websocket.Conn
	ctx  context.Context
}

type wsMsg struct {
	ID      string          `json:"id,omitempty"`
	Type    string          `json:"type"`
	Payload json.RawMessage `json:"payload,omitempty"`
}

func (s *testServer) dialWS(t *testing.T, token string) (*wsClient, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	url := "ws" + strings.TrimPrefix(s.URL, "http") + "/query"
	conn, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{Subprotocols: []string{"graphql-transport-ws"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.CloseNow() })
	c := &wsClient{t: t, conn: conn, ctx: ctx}
	init := map[string]string{}
	if token != "" {
		init["Authorization"] = "Bearer " + token
	}
	payload, _ := json.Marshal(init)
	c.send(wsMsg{Type: "connection_init", Payload: payload})
	var ack wsMsg
	if err := wsjson.Read(ctx, conn, &ack); err != nil {
		return nil, err
	}
	if ack.Type != "connection_ack" {
		return nil, fmt.Errorf("got %s %s", ack.Type, ack.Payload)
	}
	return c, nil
}

func (c *wsClient) send(m wsMsg) {
	c.t.Helper()
	if err := wsjson.Write(c.ctx, c.conn, m); err != nil {
		c.t.Fatal(err)
	}
}

func (c *wsClient) subscribe(id, query string, vars map[string]any) {
	c.t.Helper()
	p, _ := json.Marshal(map[string]any{"query": query, "variables": vars})
	c.send(wsMsg{ID: id, Type: "subscribe", Payload: p})
}

// next waits up to d for the next data message and returns its payload.
func (c *wsClient) next(d time.Duration) (wsMsg, error) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(c.ctx, d)
	defer cancel()
	for {
		var m wsMsg
		if err := wsjson.Read(ctx, c.conn, &m); err != nil {
			return m, err
		}
		switch m.Type {
		case "ping":
			c.send(wsMsg{Type: "pong"})
		case "pong":
		default:
			return m, nil
		}
	}
}

func (c *wsClient) nextData(d time.Duration) map[string]any {
	c.t.Helper()
	m, err := c.next(d)
	if err != nil {
		c.t.Fatalf("no message within %v: %v", d, err)
	}
	if m.Type != "next" {
		c.t.Fatalf("got %s %s", m.Type, m.Payload)
	}
	var p struct {
		Data   map[string]any
		Errors []gqlError
	}
	json.Unmarshal(m.Payload, &p)
	if len(p.Errors) > 0 {
		c.t.Fatalf("errors: %+v", p.Errors)
	}
	return p.Data
}

func TestSubscriptionUnreadChanged(t *testing.T) {
	s := newTestServer(t)
	const alice, bob, carol = 1, 2, 3
	pid := s.createPost(t, alice)
	s.q(t, carol, `mutation { follow(userId: "2") { id } }`, nil)

	c, err := s.dialWS(t, s.token(t, alice, false))
	if err != nil {
		t.Fatal(err)
	}
	c.subscribe("1", `subscription { unreadChanged { id redDot unread { likes mentions system total } } }`, nil)
	first := c.nextData(5 * time.Second)
	if num(t, first, "unreadChanged", "unread", "total") != 0 {
		t.Fatalf("initial = %v", first)
	}

	start := time.Now()
	s.q(t, bob, `mutation($p: ID!) { likePost(postId: $p) { id } }`, map[string]any{"p": pid})
	d := c.nextData(time.Second)
	if num(t, d, "unreadChanged", "unread", "likes") != 1 {
		t.Fatalf("after like = %v", d)
	}
	t.Logf("like → push in %v", time.Since(start))

	s.q(t, bob, `mutation($p: ID!) { commentOnPost(postId: $p, mentions: ["1"]) { id } }`, map[string]any{"p": pid})
	if d := c.nextData(time.Second); num(t, d, "unreadChanged", "unread", "mentions") != 1 {
		t.Fatalf("after mention = %v", d)
	}
	admin := s.token(t, 9, true)
	s.doToken(t, admin, `mutation { pushRedDot }`, nil)
	if d := c.nextData(time.Second); get(d, "unreadChanged", "redDot") != true {
		t.Fatalf("after red dot = %v", d)
	}
	s.doToken(t, admin, `mutation { publishSystemNotification(title: "hello", body: "all") { id } }`, nil)
	if d := c.nextData(time.Second); num(t, d, "unreadChanged", "unread", "system") != 1 {
		t.Fatalf("after broadcast = %v", d)
	}

	// A followee's post reaches a connected follower (carol follows bob).
	cc, err := s.dialWS(t, s.token(t, carol, false))
	if err != nil {
		t.Fatal(err)
	}
	cc.subscribe("f", `subscription { unreadChanged { unread { feed } } }`, nil)
	cc.nextData(5 * time.Second)
	s.createPost(t, bob)
	if d := cc.nextData(time.Second); num(t, d, "unreadChanged", "unread", "feed") != 1 {
		t.Fatalf("follower after post = %v", d)
	}
	// A change that does not concern alice pushes nothing to her.
	s.createPost(t, bob)
	cc.nextData(time.Second)
	if m, err := c.next(300 * time.Millisecond); err == nil {
		t.Fatalf("alice got an unrelated push: %s %s", m.Type, m.Payload)
	}
}

func TestSubscriptionReadReceipts(t *testing.T) {
	s := newTestServer(t)
	m := s.q(t, 1, `mutation { createGroup(memberIds: ["2", "3"]) { id } }`, nil)
	msg := s.send(t, 1, str(m, "createGroup", "id"), "hello")

	// Only the sender may subscribe.
	other, err := s.dialWS(t, s.token(t, 2, false))
	if err != nil {
		t.Fatal(err)
	}
	other.subscribe("x", `subscription($m: ID!) { readReceiptsChanged(messageId: $m) { readCount } }`, map[string]any{"m": msg})
	em, err := other.next(5 * time.Second)
	if err != nil || (em.Type != "error" && em.Type != "next") || !strings.Contains(string(em.Payload), `"FORBIDDEN"`) {
		t.Fatalf("non-sender subscription: %v %s %s", err, em.Type, em.Payload)
	}

	c, err := s.dialWS(t, s.token(t, 1, false))
	if err != nil {
		t.Fatal(err)
	}
	c.subscribe("r", `subscription($m: ID!) { readReceiptsChanged(messageId: $m) { readCount unreadCount readers { id } } }`, map[string]any{"m": msg})
	if d := c.nextData(5 * time.Second); num(t, d, "readReceiptsChanged", "readCount") != 0 || num(t, d, "readReceiptsChanged", "unreadCount") != 2 {
		t.Fatalf("initial receipts = %v", d)
	}
	s.readMsgs(t, 3, msg)
	d := c.nextData(time.Second)
	if num(t, d, "readReceiptsChanged", "readCount") != 1 || str(d, "readReceiptsChanged", "readers", 0, "id") != "3" {
		t.Fatalf("after read = %v", d)
	}
}

func TestWebSocketAuth(t *testing.T) {
	s := newTestServer(t)
	if _, err := s.dialWS(t, "not-a-token"); err == nil {
		t.Fatal("a bad token was accepted on connection_init")
	}
	c, err := s.dialWS(t, "")
	if err != nil {
		t.Fatal(err)
	}
	c.subscribe("1", `subscription { unreadChanged { id } }`, nil)
	m, err := c.next(5 * time.Second)
	if err != nil || !strings.Contains(string(m.Payload), "UNAUTHENTICATED") {
		t.Fatalf("anonymous subscription: %v %s %s", err, m.Type, m.Payload)
	}
}

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
