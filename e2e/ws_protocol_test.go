package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/coder/websocket/wsjson"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/embedded"
	"github.com/tally-dev/tally/web/auth"
	"github.com/tally-dev/tally/web/transport"
)

func wsURL(s *testServer) string { return "ws" + strings.TrimPrefix(s.URL, "http") + "/query" }

// rawWS opens a socket and does nothing else.
func rawWS(t *testing.T, s *testServer, subprotocols ...string) *websocket.Conn {
	t.Helper()
	if subprotocols == nil {
		subprotocols = []string{"graphql-transport-ws"}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, wsURL(s), &websocket.DialOptions{Subprotocols: subprotocols})
	if err != nil {
		t.Fatal(err)
	}
	c.SetReadLimit(-1)
	t.Cleanup(func() { c.CloseNow() })
	return c
}

func wsWrite(t *testing.T, c *websocket.Conn, v any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var err error
	if s, ok := v.(string); ok {
		err = c.Write(ctx, websocket.MessageText, []byte(s))
	} else {
		err = wsjson.Write(ctx, c, v)
	}
	if err != nil {
		t.Fatal(err)
	}
}

func wsInit(t *testing.T, c *websocket.Conn, token string) {
	t.Helper()
	p := map[string]any{}
	if token != "" {
		p["Authorization"] = "Bearer " + token
	}
	wsWrite(t, c, map[string]any{"type": "connection_init", "payload": p})
	if m := wsRead(t, c, 5*time.Second); m.Type != "connection_ack" {
		t.Fatalf("want connection_ack, got %s %s", m.Type, m.Payload)
	}
}

func wsRead(t *testing.T, c *websocket.Conn, d time.Duration) wsMsg {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var m wsMsg
	if err := wsjson.Read(ctx, c, &m); err != nil {
		t.Fatalf("no message within %v: %v", d, err)
	}
	return m
}

func wsSubscribe(t *testing.T, c *websocket.Conn, id, query string, vars map[string]any) {
	t.Helper()
	wsWrite(t, c, map[string]any{"id": id, "type": "subscribe", "payload": map[string]any{"query": query, "variables": vars}})
}

// wsClosed reads until the socket ends and returns the close code and
// reason (-1 when the server cut it without a close frame).
func wsClosed(t *testing.T, c *websocket.Conn, within time.Duration) (websocket.StatusCode, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	for {
		_, _, err := c.Read(ctx)
		if err == nil {
			continue
		}
		if ctx.Err() != nil {
			t.Fatalf("socket still open after %v", within)
		}
		var ce websocket.CloseError
		if errors.As(err, &ce) {
			return ce.Code, ce.Reason
		}
		return -1, err.Error()
	}
}

const unreadSub = `subscription { unreadChanged { unread { total } } }`

func TestWSProtocolCloseCodes(t *testing.T) {
	s := newTestServer(t)
	good := s.token(t, 1, false)
	recent, _ := s.keys.Sign(1, false, -10*time.Second) // inside the HTTP path's 30 s leeway
	old, _ := s.keys.Sign(1, false, -time.Hour)
	initWith := func(p any) func(*testing.T, *websocket.Conn) {
		return func(t *testing.T, c *websocket.Conn) {
			wsWrite(t, c, map[string]any{"type": "connection_init", "payload": p})
		}
	}
	acked := func(then ...any) func(*testing.T, *websocket.Conn) {
		return func(t *testing.T, c *websocket.Conn) {
			wsInit(t, c, good)
			for _, m := range then {
				wsWrite(t, c, m)
			}
		}
	}
	cases := []struct {
		name   string
		do     func(*testing.T, *websocket.Conn)
		code   websocket.StatusCode
		reason string
	}{
		{"bad token", initWith(map[string]any{"Authorization": "Bearer not-a-token"}), 4403, "Forbidden"},
		{"not a bearer token", initWith(map[string]any{"Authorization": "Basic " + good}), 4403, "Forbidden"},
		{"token expired within leeway", initWith(map[string]any{"Authorization": "Bearer " + recent}), 4403, "Forbidden"},
		{"token expired", initWith(map[string]any{"authorization": "Bearer " + old}), 4403, "Forbidden"},
		{"Authorization not a string", initWith(map[string]any{"Authorization": 42}), 4403, "Forbidden"},
		{"subscribe before init", func(t *testing.T, c *websocket.Conn) {
			wsSubscribe(t, c, "1", unreadSub, nil)
		}, 4401, "Unauthorized"},
		{"second init", acked(map[string]any{"type": "connection_init"}), 4429, "Too many initialisation requests"},
		{"not JSON", func(t *testing.T, c *websocket.Conn) { wsWrite(t, c, "{") }, 4400, "Invalid message"},
		{"no type", func(t *testing.T, c *websocket.Conn) { wsWrite(t, c, `{"id":"1"}`) }, 4400, "Invalid message"},
		{"unknown type", acked(map[string]any{"type": "start", "id": "1"}), 4400, "start"},
		{"server's type from client", acked(map[string]any{"type": "next", "id": "1", "payload": map[string]any{}}), 4400, "next"},
		{"init payload not an object", initWith("token"), 4400, "payload"},
		{"subscribe without id", acked(map[string]any{"type": "subscribe", "payload": map[string]any{"query": "{ __typename }"}}), 4400, "id"},
		{"subscribe with a number id", acked(map[string]any{"type": "subscribe", "id": 1, "payload": map[string]any{"query": "{ __typename }"}}), 4400, "id"},
		{"subscribe without query", acked(map[string]any{"type": "subscribe", "id": "1", "payload": map[string]any{}}), 4400, "query"},
		{"subscribe variables not an object", acked(map[string]any{"type": "subscribe", "id": "1", "payload": map[string]any{"query": "{ __typename }", "variables": []int{1}}}), 4400, "variables"},
		{"complete without id", acked(map[string]any{"type": "complete"}), 4400, "id"},
		{"duplicate id", func(t *testing.T, c *websocket.Conn) {
			wsInit(t, c, good)
			wsSubscribe(t, c, "dup", unreadSub, nil)
			if m := wsRead(t, c, 5*time.Second); m.Type != "next" {
				t.Fatalf("got %s %s", m.Type, m.Payload)
			}
			wsSubscribe(t, c, "dup", unreadSub, nil)
		}, 4409, "Subscriber for dup already exists"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := rawWS(t, s)
			tc.do(t, c)
			code, reason := wsClosed(t, c, 5*time.Second)
			if code != tc.code || !strings.Contains(reason, tc.reason) {
				t.Fatalf("closed with %d %q, want %d with %q", code, reason, tc.code, tc.reason)
			}
		})
	}

	t.Run("message over the size limit", func(t *testing.T) {
		c := rawWS(t, s)
		wsInit(t, c, good)
		wsWrite(t, c, `{"type":"ping","payload":{"x":"`+strings.Repeat("x", 1<<20)+`"}}`)
		if code, reason := wsClosed(t, c, 5*time.Second); code != websocket.StatusMessageTooBig {
			t.Fatalf("closed with %d %q, want 1009", code, reason)
		}
	})
	t.Run("closes are counted in /metrics", func(t *testing.T) {
		resp, err := http.Get(s.URL + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		for _, want := range []string{`tally_websocket_closes_total{code="4403"} 5`, `tally_websocket_closes_total{code="4409"} 1`, "tally_websockets_open "} {
			if !strings.Contains(string(body), want) {
				t.Errorf("/metrics lacks %q", want)
			}
		}
	})
	t.Run("no graphql-transport-ws subprotocol", func(t *testing.T) {
		c := rawWS(t, s, "graphql-ws")
		if code, reason := wsClosed(t, c, 5*time.Second); code != 4406 {
			t.Fatalf("closed with %d %q, want 4406", code, reason)
		}
	})
	t.Run("id reused after complete", func(t *testing.T) {
		c := rawWS(t, s)
		wsInit(t, c, good)
		for range 3 {
			wsSubscribe(t, c, "again", unreadSub, nil)
			if m := wsRead(t, c, 5*time.Second); m.Type != "next" || m.ID != "again" {
				t.Fatalf("got %s %s %s", m.Type, m.ID, m.Payload)
			}
			wsWrite(t, c, map[string]any{"type": "complete", "id": "again"})
		}
		// ping is answered with pong, payload echoed
		wsWrite(t, c, map[string]any{"type": "ping", "payload": map[string]any{"n": 1}})
		if m := wsRead(t, c, 5*time.Second); m.Type != "pong" || string(m.Payload) != `{"n":1}` {
			t.Fatalf("got %s %s", m.Type, m.Payload)
		}
	})
	t.Run("id reused as soon as the server completes it", func(t *testing.T) {
		c := rawWS(t, s)
		wsInit(t, c, good)
		for range 50 {
			wsSubscribe(t, c, "q", `{ __typename }`, nil)
			if m := wsRead(t, c, 5*time.Second); m.Type != "next" {
				t.Fatalf("got %s %s", m.Type, m.Payload)
			}
			if m := wsRead(t, c, 5*time.Second); m.Type != "complete" || m.ID != "q" {
				t.Fatalf("got %s %s", m.Type, m.Payload)
			}
		}
	})
	t.Run("validation error is an error message", func(t *testing.T) {
		c := rawWS(t, s)
		wsInit(t, c, good)
		wsSubscribe(t, c, "v", `subscription { noSuchField }`, nil)
		m := wsRead(t, c, 5*time.Second)
		if m.Type != "error" || m.ID != "v" || !strings.Contains(string(m.Payload), `"BAD_USER_INPUT"`) {
			t.Fatalf("got %s %s %s", m.Type, m.ID, m.Payload)
		}
	})
}

func TestWSInitTimeout(t *testing.T) {
	s := newTestServerWith(t, openStore(t), transport.Config{WebSocket: transport.WSConfig{InitTimeout: 200 * time.Millisecond}})
	c := rawWS(t, s)
	start := time.Now()
	code, reason := wsClosed(t, c, 5*time.Second)
	if code != 4408 || reason != "Connection initialisation timeout" {
		t.Fatalf("closed with %d %q", code, reason)
	}
	if d := time.Since(start); d < 150*time.Millisecond {
		t.Fatalf("closed after %v, before the init timeout", d)
	}
}

func openStore(t testing.TB) *embedded.Engine {
	t.Helper()
	store, err := embedded.Open(embedded.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return store
}

func TestWSTokenExpiryClosesOpenSocket(t *testing.T) {
	s := newTestServer(t)
	tok, _ := s.keys.Sign(1, false, 2*time.Second) // exp is whole seconds: 1–2 s from now
	exp := tokenExp(t, tok)
	c := rawWS(t, s)
	wsInit(t, c, tok)
	wsSubscribe(t, c, "u", unreadSub, nil)
	if m := wsRead(t, c, 5*time.Second); m.Type != "next" {
		t.Fatalf("got %s %s", m.Type, m.Payload)
	}
	code, reason := wsClosed(t, c, 5*time.Second)
	closedAt := time.Now()
	if code != 4403 || !strings.Contains(reason, "expired") {
		t.Fatalf("closed with %d %q", code, reason)
	}
	if closedAt.Before(exp.Add(-50*time.Millisecond)) || closedAt.After(exp.Add(time.Second)) {
		t.Fatalf("closed at %v, token's exp %v", closedAt, exp)
	}
}

func tokenExp(t *testing.T, tok string) time.Time {
	t.Helper()
	parts := strings.Split(tok, ".")
	var c struct{ Exp int64 }
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil || json.Unmarshal(b, &c) != nil || c.Exp == 0 {
		t.Fatalf("token without exp: %v", err)
	}
	return time.Unix(c.Exp, 0)
}

func TestWSSocketCaps(t *testing.T) {
	s := newTestServerWith(t, openStore(t), transport.Config{WebSocket: transport.WSConfig{MaxPerUser: 2, MaxPerAddress: 2}})
	alice := s.token(t, 1, false)
	a1, a2 := rawWS(t, s), rawWS(t, s)
	wsInit(t, a1, alice)
	wsInit(t, a2, alice)
	a3 := rawWS(t, s)
	wsWrite(t, a3, map[string]any{"type": "connection_init", "payload": map[string]any{"Authorization": "Bearer " + alice}})
	if code, reason := wsClosed(t, a3, 5*time.Second); code != 4429 || !strings.Contains(reason, "Too many open sockets for this user (limit 2)") {
		t.Fatalf("third socket of a user: %d %q", code, reason)
	}
	// Another user is not affected.
	wsInit(t, rawWS(t, s), s.token(t, 2, false))

	// A closed socket gives its slot back.
	a1.Close(websocket.StatusNormalClosure, "")
	deadline := time.Now().Add(5 * time.Second)
	for {
		c := rawWS(t, s)
		wsWrite(t, c, map[string]any{"type": "connection_init", "payload": map[string]any{"Authorization": "Bearer " + alice}})
		m, err := readMsg(c, 5*time.Second)
		if err == nil && m.Type == "connection_ack" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the slot of a closed socket was not released: %v %+v", err, m)
		}
		time.Sleep(50 * time.Millisecond)
	}

	// Sockets without a token count per address; the user sockets above
	// do not (they moved to their user's count at init).
	// (The server releases a closed socket's slots just after the client
	// sees the close, so the first dials may race the last closes above.)
	for range 2 {
		dialAnonymous(t, s)
	}
	// One more is accepted and closed with 1013, which clients retry with
	// their backoff (an HTTP refusal of the upgrade they take as final).
	c := rawWS(t, s)
	if code, reason := wsClosed(t, c, 5*time.Second); code != 1013 || !strings.Contains(reason, "Try again later") {
		t.Fatalf("third anonymous socket from one address: %d %q", code, reason)
	}
}

func readMsg(c *websocket.Conn, d time.Duration) (wsMsg, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var m wsMsg
	err := wsjson.Read(ctx, c, &m)
	return m, err
}

func TestWSSubscriptionCap(t *testing.T) {
	s := newTestServerWith(t, openStore(t), transport.Config{WebSocket: transport.WSConfig{MaxSubscriptions: 2}})
	c := rawWS(t, s)
	wsInit(t, c, s.token(t, 1, false))
	for _, id := range []string{"a", "b"} {
		wsSubscribe(t, c, id, unreadSub, nil)
		if m := wsRead(t, c, 5*time.Second); m.Type != "next" || m.ID != id {
			t.Fatalf("got %s %s %s", m.Type, m.ID, m.Payload)
		}
	}
	wsSubscribe(t, c, "c", unreadSub, nil)
	m := wsRead(t, c, 5*time.Second)
	var errs []gqlError
	json.Unmarshal(m.Payload, &errs)
	if m.Type != "error" || m.ID != "c" || len(errs) != 1 || errs[0].Extensions["code"] != "RATE_LIMITED" {
		t.Fatalf("third subscription: %s %s %s", m.Type, m.ID, m.Payload)
	}
	// The socket and its subscriptions live on; completing one frees a place.
	wsWrite(t, c, map[string]any{"type": "complete", "id": "a"})
	wsSubscribe(t, c, "c", unreadSub, nil)
	if m := wsRead(t, c, 5*time.Second); m.Type != "next" || m.ID != "c" {
		t.Fatalf("after a complete: %s %s %s", m.Type, m.ID, m.Payload)
	}
}

// bigQuery answers tens of kilobytes (the schema's types and fields with
// their descriptions).
const bigQuery = `{ __schema { types { name description fields { name description args { name description } } } } }`

func TestWSSlowReaderDropped(t *testing.T) {
	s := newTestServerWith(t, openStore(t), transport.Config{
		ComplexityLimit: 1 << 30,
		WebSocket:       transport.WSConfig{SendQueueBytes: 64 << 10, WriteTimeout: time.Second, MaxSubscriptions: -1},
	})
	settle := func() int {
		runtime.GC()
		time.Sleep(50 * time.Millisecond)
		return runtime.NumGoroutine()
	}
	// One answer of the query first, on a socket that reads it: what the
	// first use fills once (the parsed-query cache, the schema's
	// introspection, pools) is not what a dropped socket holds.
	warm := rawWS(t, s)
	wsInit(t, warm, s.token(t, 2, false))
	wsSubscribe(t, warm, "w", bigQuery, nil)
	if m := wsRead(t, warm, 5*time.Second); m.Type != "next" {
		t.Fatalf("warm-up: %s %s", m.Type, m.Payload)
	}
	warm.Close(websocket.StatusNormalClosure, "")
	before := settle()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	heapBefore := ms.HeapAlloc

	c := rawWS(t, s)
	wsInit(t, c, s.token(t, 1, false))
	const sent = 400
	for i := range sent {
		wsSubscribe(t, c, fmt.Sprint(i), bigQuery, nil)
	}
	// The client reads nothing: the kernel's buffers fill, then the queue,
	// and the server drops the socket and everything it held.
	deadline := time.Now().Add(10 * time.Second)
	for settle() > before+1 {
		if time.Now().After(deadline) {
			t.Fatalf("goroutines %d, %d before the slow reader", runtime.NumGoroutine(), before)
		}
	}
	// What the socket held must be garbage now. The live heap (HeapAlloc
	// after a collection, not HeapInuse, which counts whole spans) is the
	// whole process's, and the server may still be running operations the
	// socket sent before it was dropped (each answers tens of KB, and on a
	// loaded machine they end late: no goroutine count shows them, the
	// sockets being served by an event loop), so the check polls until a
	// deadline; what the dropped socket held would stay past any.
	var grew int64
	for heapDeadline := time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		runtime.GC()
		runtime.ReadMemStats(&ms)
		if grew = int64(ms.HeapAlloc) - int64(heapBefore); grew <= 8<<20 || time.Now().After(heapDeadline) {
			break
		}
	}
	if grew > 8<<20 {
		t.Fatalf("live heap grew by %d bytes after the slow reader was dropped", grew)
	}
	got := 0
	for {
		m, err := readMsg(c, 5*time.Second)
		if err != nil {
			code := websocket.CloseStatus(err)
			t.Logf("slow reader got %d of %d results, then %v (close code %d)", got, sent, err, code)
			if code != -1 && code != 1013 {
				t.Fatalf("closed with %d", code)
			}
			break
		}
		if m.Type == "next" {
			got++
		}
	}
	if got >= sent {
		t.Fatalf("the slow reader got all %d results: it was never dropped", sent)
	}
}

// dialAnonymous opens a socket without a token, retrying while the
// per-address cap refuses it with 1013 (a closed socket's place is given
// back just after its client sees the close).
func dialAnonymous(t *testing.T, s *testServer) *websocket.Conn {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for {
		c := rawWS(t, s)
		wsWrite(t, c, map[string]any{"type": "connection_init", "payload": map[string]any{}})
		m, err := readMsg(c, 5*time.Second)
		if err == nil && m.Type == "connection_ack" {
			return c
		}
		if websocket.CloseStatus(err) != 1013 || time.Now().After(deadline) {
			t.Fatalf("anonymous socket: %v %+v", err, m)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestWSDeadPeerDropped(t *testing.T) {
	s := newTestServerWith(t, openStore(t), transport.Config{WebSocket: transport.WSConfig{PingInterval: 200 * time.Millisecond}})
	// A peer that reads (and so answers pings) stays...
	live := rawWS(t, s)
	wsInit(t, live, s.token(t, 1, false))
	wsSubscribe(t, live, "u", unreadSub, nil)
	wsRead(t, live, 5*time.Second)
	msgs := make(chan wsMsg, 8)
	go func() {
		for {
			var m wsMsg
			if err := wsjson.Read(context.Background(), live, &m); err != nil {
				close(msgs)
				return
			}
			msgs <- m
		}
	}()
	time.Sleep(time.Second) // five ping intervals
	pid := s.createPost(t, 1)
	s.q(t, 2, `mutation($p: ID!) { likePost(postId: $p) { id } }`, map[string]any{"p": pid})
	select {
	case m, ok := <-msgs:
		if !ok || m.Type != "next" {
			t.Fatalf("a peer answering pings: %v %+v", ok, m)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no push to a peer answering pings")
	}

	// ...one that never reads is dropped after a ping goes unanswered.
	dead, err := dialFrames(s.Listener.Addr().String(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer dead.Close()
	dead.send(map[string]any{"type": "connection_init", "payload": map[string]string{"Authorization": "Bearer " + s.token(t, 2, false)}})
	if err := dead.next("connection_ack"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	time.Sleep(time.Second) // read nothing: no pong
	dead.SetReadDeadline(time.Now().Add(5 * time.Second))
	err = dead.next("never")
	if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a peer that answers no ping is still connected after %v (ping interval 200ms)", time.Since(start))
	}
}

func TestWSOrigins(t *testing.T) {
	s := newTestServerWith(t, openStore(t), transport.Config{OriginPatterns: []string{"app.example"}})
	dial := func(origin string) (*websocket.Conn, *http.Response, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return websocket.Dial(ctx, wsURL(s), &websocket.DialOptions{
			Subprotocols: []string{"graphql-transport-ws"},
			HTTPHeader:   http.Header{"Origin": {origin}},
		})
	}
	if _, resp, err := dial("https://evil.example"); err == nil || resp == nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("a foreign origin: %v %+v", err, resp)
	}
	for _, origin := range []string{"https://app.example", s.URL} { // listed, and same origin
		c, _, err := dial(origin)
		if err != nil {
			t.Fatalf("%s: %v", origin, err)
		}
		wsInit(t, c, "")
		c.CloseNow()
	}
}

// The flags reach the transport, and SIGTERM closes open sockets with
// 1001 (Shutdown does not track hijacked connections).
func TestWSFlagsAndShutdown(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	p := startTally(t, t.TempDir(), "-ws-max-per-user", "1", "-ws-max-per-address", "1")
	keys, _ := auth.NewKeys([]byte(crashSecret))
	tok, _ := keys.Sign(1, false, 0)
	s := &testServer{Server: &httptest.Server{URL: p.url}}
	// One socket not yet initialised per address: the next is refused
	// with 1013 (the refused one's place is given back just after its
	// client sees the close).
	waiting := rawWS(t, s)
	if code, reason := wsClosed(t, rawWS(t, s), 5*time.Second); code != 1013 {
		t.Fatalf("second uninitialised socket with -ws-max-per-address 1: %d %q", code, reason)
	}
	waiting.CloseNow()
	var first *websocket.Conn
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		first = rawWS(t, s)
		wsWrite(t, first, map[string]any{"type": "connection_init", "payload": map[string]any{"Authorization": "Bearer " + tok}})
		m, err := readMsg(first, 5*time.Second)
		if err == nil && m.Type == "connection_ack" {
			break
		}
		if websocket.CloseStatus(err) != 1013 || time.Now().After(deadline) {
			t.Fatalf("a socket after the uninitialised one closed: %v %+v", err, m)
		}
	}
	wsSubscribe(t, first, "u", unreadSub, nil)
	wsRead(t, first, 5*time.Second)
	second := rawWS(t, s)
	wsWrite(t, second, map[string]any{"type": "connection_init", "payload": map[string]any{"Authorization": "Bearer " + tok}})
	if code, reason := wsClosed(t, second, 5*time.Second); code != 4429 || !strings.Contains(reason, "limit 1") {
		t.Fatalf("second socket with -ws-max-per-user 1: %d %q", code, reason)
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	if code, reason := wsClosed(t, first, 15*time.Second); code != websocket.StatusGoingAway {
		t.Fatalf("on SIGTERM: %d %q, want 1001\n%s", code, reason, p.log())
	}
	done := make(chan error, 1)
	go func() { done <- p.wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v\n%s", err, p.log())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("no exit 15 s after SIGTERM")
	}
}

// receiptsFault makes the store's Receipts fail with err once set: the
// engine's refusal of an ex-member, or an outage, without waiting for
// either to happen.
type receiptsFault struct {
	engine.Store
	err atomic.Pointer[error]
}

func (f *receiptsFault) Receipts(ctx context.Context, v engine.UserID, id engine.MessageID, limit int) (engine.Receipts, error) {
	if err := f.err.Load(); err != nil {
		return engine.Receipts{}, *err
	}
	return f.Store.Receipts(ctx, v, id, limit)
}

// A subscription whose re-read is refused ends with an error message
// carrying the code; one whose re-read hits an outage carries on.
func TestWSSubscriptionEndsWithTheRefusal(t *testing.T) {
	store := &receiptsFault{Store: openStore(t)}
	s := newTestServerWith(t, store, transport.Config{})
	m := s.q(t, 1, `mutation { createGroup(memberIds: ["2", "3", "4"]) { id } }`, nil)
	msg := s.send(t, 1, str(m, "createGroup", "id"), "hello")
	c := rawWS(t, s)
	wsInit(t, c, s.token(t, 1, false))
	msgs := wsMessages(c)
	next := func(d time.Duration) (wsMsg, bool) {
		select {
		case m, ok := <-msgs:
			return m, ok
		case <-time.After(d):
			return wsMsg{}, false
		}
	}
	const sub = `subscription($m: ID!) { readReceiptsChanged(messageId: $m) { readCount } }`
	wsSubscribe(t, c, "r", sub, map[string]any{"m": msg})
	if m, _ := next(5 * time.Second); m.Type != "next" {
		t.Fatalf("got %s %s", m.Type, m.Payload)
	}

	outage := fmt.Errorf("%w: test outage", engine.ErrUnavailable)
	store.err.Store(&outage)
	s.readMsgs(t, 2, msg)
	if m, ok := next(300 * time.Millisecond); ok {
		t.Fatalf("an outage ended or fed the subscription: %s %s", m.Type, m.Payload)
	}
	store.err.Store(nil)
	s.readMsgs(t, 3, msg)
	if m, _ := next(5 * time.Second); m.Type != "next" || !strings.Contains(string(m.Payload), `"readCount":2`) {
		t.Fatalf("after the outage: %s %s", m.Type, m.Payload)
	}

	refused := fmt.Errorf("%w: only the sender sees read receipts", engine.ErrForbidden)
	store.err.Store(&refused)
	s.readMsgs(t, 4, msg)
	got, _ := next(5 * time.Second)
	var errs []gqlError
	json.Unmarshal(got.Payload, &errs)
	if got.Type != "error" || got.ID != "r" || len(errs) != 1 || errs[0].Extensions["code"] != "FORBIDDEN" ||
		len(errs[0].Path) != 1 || errs[0].Path[0] != "readReceiptsChanged" {
		t.Fatalf("want an error message with FORBIDDEN on readReceiptsChanged, got %s %s %s", got.Type, got.ID, got.Payload)
	}
	// The operation is over: its id is free again.
	store.err.Store(nil)
	wsSubscribe(t, c, "r", sub, map[string]any{"m": msg})
	if m, _ := next(5 * time.Second); m.Type != "next" {
		t.Fatalf("after the error, the id: %s %s", m.Type, m.Payload)
	}
}

// wsMessages reads c in the background (coder/websocket closes a
// connection whose Read context expires, so a test that waits for
// silence reads through a channel).
func wsMessages(c *websocket.Conn) <-chan wsMsg {
	out := make(chan wsMsg, 16)
	go func() {
		defer close(out)
		for {
			var m wsMsg
			if err := wsjson.Read(context.Background(), c, &m); err != nil {
				return
			}
			out <- m
		}
	}()
	return out
}

// Every way a socket ends gives back its goroutines.
func TestWSNoGoroutineLeak(t *testing.T) {
	// (An init timeout short enough for 20 sockets to run into it, long
	// enough for the others' connection_init on a busy machine.)
	s := newTestServerWith(t, openStore(t), transport.Config{WebSocket: transport.WSConfig{InitTimeout: 100 * time.Millisecond, MaxPerUser: -1}})
	tok := s.token(t, 1, false)
	settle := func() int {
		runtime.GC()
		time.Sleep(20 * time.Millisecond)
		return runtime.NumGoroutine()
	}
	// Warm up whatever the server starts once (hub watchers, pools).
	w := rawWS(t, s)
	wsInit(t, w, tok)
	wsSubscribe(t, w, "u", unreadSub, nil)
	wsRead(t, w, 5*time.Second)
	w.Close(websocket.StatusNormalClosure, "")
	before := settle()

	ends := map[string]func(*testing.T, *websocket.Conn){
		"client closes with subscriptions": func(t *testing.T, c *websocket.Conn) {
			wsInit(t, c, tok)
			wsSubscribe(t, c, "a", unreadSub, nil)
			wsSubscribe(t, c, "b", `{ __typename }`, nil)
			wsRead(t, c, 5*time.Second)
			c.Close(websocket.StatusNormalClosure, "")
		},
		"client vanishes with subscriptions": func(t *testing.T, c *websocket.Conn) {
			wsInit(t, c, tok)
			wsSubscribe(t, c, "a", unreadSub, nil)
			wsRead(t, c, 5*time.Second)
			c.CloseNow()
		},
		"bad token": func(t *testing.T, c *websocket.Conn) {
			wsWrite(t, c, map[string]any{"type": "connection_init", "payload": map[string]any{"Authorization": "Bearer x"}})
			wsClosed(t, c, 5*time.Second)
		},
		"duplicate id": func(t *testing.T, c *websocket.Conn) {
			wsInit(t, c, tok)
			wsSubscribe(t, c, "a", unreadSub, nil)
			wsSubscribe(t, c, "a", unreadSub, nil)
			wsClosed(t, c, 5*time.Second)
		},
		"init timeout": func(t *testing.T, c *websocket.Conn) { wsClosed(t, c, 5*time.Second) },
	}
	for name, end := range ends {
		for range 20 {
			end(t, rawWS(t, s))
		}
		deadline := time.Now().Add(5 * time.Second)
		for settle() > before {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d goroutines, %d before", name, runtime.NumGoroutine(), before)
			}
		}
	}
}

// gatedCap holds every connection_init at the per-user count until the
// gate opens: the socket's messages wait behind it.
type gatedCap struct{ gate chan struct{} }

func (g gatedCap) Acquire(ctx context.Context, _ engine.UserID) (func(), bool, error) {
	select {
	case <-g.gate:
	case <-ctx.Done():
	}
	return func() {}, true, nil
}

// Reading does not wait for handling (the event loop reads whatever
// arrives), so a peer that keeps sending while its messages wait to be
// handled is closed with 1008 before the server holds more than a few of
// the largest messages, and what it sent is let go.
func TestWSFloodWhileHandlingIsClosed(t *testing.T) {
	gate := make(chan struct{})
	defer close(gate)
	s := newTestServerWith(t, openStore(t), transport.Config{SocketCap: gatedCap{gate}})
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	heapBefore := ms.HeapInuse
	c := rawWS(t, s)
	wsWrite(t, c, map[string]any{"type": "connection_init", "payload": map[string]any{"Authorization": "Bearer " + s.token(t, 1, false)}})
	big := `{"type":"pong","payload":{"x":"` + strings.Repeat("x", 900<<10) + `"}}`
	sent := 0
	for range 40 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := c.Write(ctx, websocket.MessageText, []byte(big))
		cancel()
		if err != nil {
			break
		}
		sent++
	}
	code, reason := wsClosed(t, c, 5*time.Second)
	if code != 1008 || !strings.Contains(reason, "faster than they are handled") {
		t.Fatalf("after %d messages of 900 KiB sent while the first waits: closed with %d %q", sent, code, reason)
	}
	runtime.GC()
	runtime.ReadMemStats(&ms)
	if grew := int64(ms.HeapInuse) - int64(heapBefore); grew > 16<<20 {
		t.Fatalf("heap grew by %d bytes holding a flood's messages (%d sent)", grew, sent)
	}
	t.Logf("closed with 1008 after %d messages of 900 KiB were sent", sent)
}
