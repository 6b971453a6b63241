package e2e

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/tally-dev/tally/engine/redisstore"
	"github.com/tally-dev/tally/engine/redisstore/redistest"
	"github.com/tally-dev/tally/web/auth"
	"github.com/tally-dev/tally/web/transport"
)

// wsCapReplica is a Tally handler on addrs whose per-user socket count is
// shared in Redis, as server.go wires it in Redis mode.
func wsCapReplica(t *testing.T, addrs []string, perUser int) *testServer {
	t.Helper()
	store := openTestRedis(t, addrs, "wscap")
	sc, err := store.(*redisstore.Store).NewSocketCap(perUser, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sc.Close)
	return newTestServerWith(t, store, transport.Config{
		WebSocket: transport.WSConfig{MaxPerUser: perUser},
		SocketCap: transport.SharedSocketCap(sc),
	})
}

// wsInitRefused sends connection_init and expects the per-user cap's 4429.
func wsInitRefused(t *testing.T, s *testServer, token, limit string) {
	t.Helper()
	c := rawWS(t, s)
	wsWrite(t, c, map[string]any{"type": "connection_init", "payload": map[string]any{"Authorization": "Bearer " + token}})
	if code, reason := wsClosed(t, c, 5*time.Second); code != 4429 || !strings.Contains(reason, "Too many open sockets for this user (limit "+limit+")") {
		t.Fatalf("socket over the cap: %d %q", code, reason)
	}
}

// A user's 17th socket is refused with 4429 although the 16 open ones are
// spread over two replicas; closing one on A lets a new one in on B.
func TestHostileWSCapSharedAcrossReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	addr, stop := redistest.StartSingle(t)
	t.Cleanup(stop) // after the replicas' cleanups: their sockets' releases reach Redis
	a, b := wsCapReplica(t, []string{addr}, 16), wsCapReplica(t, []string{addr}, 16)
	alice := a.token(t, 1, false)
	var onA []*websocket.Conn
	for i := range 16 {
		s := a
		if i%2 == 1 {
			s = b
		}
		c := rawWS(t, s)
		wsInit(t, c, alice)
		if s == a {
			onA = append(onA, c)
		}
	}
	wsInitRefused(t, a, alice, "16")
	wsInitRefused(t, b, alice, "16")
	wsInit(t, rawWS(t, b), a.token(t, 2, false)) // another user is not affected

	onA[0].Close(websocket.StatusNormalClosure, "")
	deadline := time.Now().Add(5 * time.Second)
	for {
		c := rawWS(t, b)
		wsWrite(t, c, map[string]any{"type": "connection_init", "payload": map[string]any{"Authorization": "Bearer " + alice}})
		m, err := readMsg(c, 5*time.Second)
		if err == nil && m.Type == "connection_ack" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the place of a socket closed on A was not freed for B: %v %+v", err, m)
		}
		time.Sleep(50 * time.Millisecond)
	}
	wsInitRefused(t, a, alice, "16")
}

// Redis unreachable at connection_init: sockets are still admitted
// (fail-open), counted in /metrics, and the replica's own count still caps
// the user.
func TestHostileWSCapRedisDownFailsOpen(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	n := redistest.StartSingleNode(t)
	a := wsCapReplica(t, []string{n.Addr}, 2)
	n.Kill()
	alice := a.token(t, 1, false)
	wsInit(t, rawWS(t, a), alice)
	wsInit(t, rawWS(t, a), alice)
	wsInitRefused(t, a, alice, "2")
	if m := metricsText(t, a.URL); !strings.Contains(m, "tally_websocket_cap_unshared_total 2") {
		t.Fatalf("/metrics: %q, want the 2 sockets admitted without Redis", grepLines(m, "cap_unshared"))
	}
}

// Two tally processes with -redis share -ws-max-per-user; a replica
// killed with its sockets open (kill -9: nothing released) stops counting
// against the user once -ws-lease has passed.
func TestHostileWSCapReplicaKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	addr, stop := redistest.StartSingle(t)
	t.Cleanup(stop)
	flags := []string{"-redis", addr, "-ws-max-per-user", "2", "-ws-lease", "1500ms"}
	pa, pb := startTally(t, t.TempDir(), flags...), startTally(t, t.TempDir(), flags...)
	keys, _ := auth.NewKeys([]byte(crashSecret))
	tok, _ := keys.Sign(1, false, 0)
	a := &testServer{Server: &httptest.Server{URL: pa.url}}
	b := &testServer{Server: &httptest.Server{URL: pb.url}}
	wsInit(t, rawWS(t, a), tok)
	wsInit(t, rawWS(t, a), tok)
	wsInitRefused(t, b, tok, "2")

	if err := pa.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	// Still counted at once (A never said goodbye), freed within the lease.
	wsInitRefused(t, b, tok, "2")
	deadline := time.Now().Add(1500*time.Millisecond + 3*time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		c, _, err := websocket.Dial(ctx, wsURL(b), &websocket.DialOptions{Subprotocols: []string{"graphql-transport-ws"}})
		cancel()
		var m wsMsg
		if err == nil {
			wsWrite(t, c, map[string]any{"type": "connection_init", "payload": map[string]any{"Authorization": "Bearer " + tok}})
			m, err = readMsg(c, 5*time.Second)
			c.CloseNow()
			if err == nil && m.Type == "connection_ack" {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("a killed replica's socket still counted after its lease: %v %+v\n%s", err, m, pb.log())
		}
		time.Sleep(100 * time.Millisecond)
	}
}
