package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tally-dev/tally/engine/embedded"
	"github.com/tally-dev/tally/web/auth"
	"github.com/tally-dev/tally/web/hub"
	"github.com/tally-dev/tally/web/transport"
)

// newTimedServer is newTestServerWith on the server's own http.Server
// settings (transport.NewHTTPServer), so that its timeouts are under test too.
func newTimedServer(t testing.TB, cfg transport.Config, to transport.Timeouts) *testServer {
	t.Helper()
	store, err := embedded.Open(embedded.Options{})
	if err != nil {
		t.Fatal(err)
	}
	keys, err := auth.NewKeys([]byte("test-secret-0123456789"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Keys = keys
	h := hub.New(store)
	cfg.Store, cfg.Hub = store, h
	srv := httptest.NewUnstartedServer(nil)
	srv.Config = transport.NewHTTPServer(transport.NewServerHandler(transport.ServerConfig{Config: cfg}), to)
	srv.Start()
	t.Cleanup(func() {
		srv.Close()
		h.Close()
		store.Close()
	})
	return &testServer{Server: srv, store: store, keys: keys}
}

func TestWSExemptFromHTTPTimeouts(t *testing.T) {
	s := newTimedServer(t, transport.Config{}, transport.Timeouts{ReadHeader: 200 * time.Millisecond, Read: 300 * time.Millisecond, Write: 300 * time.Millisecond, Idle: time.Second})
	c := rawWS(t, s)
	wsInit(t, c, s.token(t, 1, false))
	wsSubscribe(t, c, "u", unreadSub, nil)
	wsRead(t, c, 5*time.Second)
	time.Sleep(800 * time.Millisecond) // past every HTTP timeout
	pid := s.createPost(t, 1)
	s.q(t, 2, `mutation($p: ID!) { likePost(postId: $p) { id } }`, map[string]any{"p": pid})
	if m := wsRead(t, c, 5*time.Second); m.Type != "next" || !strings.Contains(string(m.Payload), `"total":1`) {
		t.Fatalf("after the HTTP timeouts: %s %s", m.Type, m.Payload)
	}
}

func TestHTTPSlowBodyCut(t *testing.T) {
	s := newTimedServer(t, transport.Config{}, transport.Timeouts{ReadHeader: 200 * time.Millisecond, Read: 500 * time.Millisecond, Write: time.Second, Idle: time.Second})
	conn, err := net.Dial("tcp", s.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	start := time.Now()
	fmt.Fprintf(conn, "POST /query HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{")
	stop := make(chan struct{})
	defer close(stop)
	go func() { // one byte every 50 ms: the body would take 50 s
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
				if _, err := conn.Write([]byte(" ")); err != nil {
					return
				}
			}
		}
	}()
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	io.Copy(io.Discard, conn) // until the server closes the connection
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("a body that never ends held its connection %v (read timeout 500ms)", d)
	}
}

func TestHTTPNonReadingClientReleased(t *testing.T) {
	done := make(chan error, 1)
	big := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		chunk := make([]byte, 64<<10)
		for range 4096 { // 256 MiB, far beyond any socket buffer
			if _, err := w.Write(chunk); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	})
	srv := httptest.NewUnstartedServer(nil)
	srv.Config = transport.NewHTTPServer(big, transport.Timeouts{ReadHeader: time.Second, Read: time.Second, Write: 500 * time.Millisecond, Idle: time.Second})
	srv.Start()
	defer srv.Close()
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
	bufio.NewReader(conn).Peek(1) // the response has started; now read nothing more
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("256 MiB written to a client that does not read")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the handler is still writing to a client that does not read")
	}
}
