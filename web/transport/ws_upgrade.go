package transport

import (
	"crypto/sha1"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"path"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/lesismal/nbio"
	"github.com/lesismal/nbio/logging"
	"github.com/lesismal/nbio/nbhttp"
	nbws "github.com/lesismal/nbio/nbhttp/websocket"
)

// Sockets live in an event loop (lesismal/nbio): once upgraded, a
// connection's file descriptor moves from Go's netpoller to nbio's epoll
// pollers, which read every socket from a few goroutines and parse its
// frames; the socket holds no goroutine and no buffer while idle (a
// partial frame is buffered only until it is whole, from nbio's pools).
// Go's own netpoller cannot do this: its readiness is only reachable by a
// goroutine parked in Read (or syscall.RawConn.Read) on that one
// connection, so every idle socket would hold a goroutine and its stack.
// The upgrade handshake itself stays on net/http, then the connection is
// handed over.

// eventLoop is the process's nbio engine, shared by every transport, as
// Go's netpoller is: started on the first WebSocket, never stopped.
var eventLoop = sync.OnceValues(func() (*nbhttp.Engine, error) {
	logging.SetLogger(nbioLogger{})
	e := nbhttp.NewEngine(nbhttp.Config{
		Name:              "tally-ws",
		NPoller:           runtime.GOMAXPROCS(0),
		SupportServerOnly: true,
		// A message's handler runs on a goroutine of its own (nbio runs
		// one socket's messages in order): connection_init may wait for
		// Redis, and an operation's start must not hold a poller.
		ServerExecutor: func(f func()) { go f() },
		// Messages are copied out (decoded) by the handlers, so their
		// buffers go back to nbio's pool as soon as a handler returns.
		ReleaseWebsocketPayload: true,
	})
	e.OnWrittenSize(func(c *nbio.Conn, _ []byte, n int) {
		if ws, ok := c.Session().(*nbws.Conn); ok {
			if sock, ok := ws.Session().(*wsConn); ok {
				sock.wrote(n)
			}
		}
	})
	if err := e.Start(); err != nil {
		return nil, fmt.Errorf("starting the WebSocket event loop: %w", err)
	}
	return e, nil
})

// nbioLogger sends nbio's log lines to slog: its start and stop notices
// at debug level, its errors as warnings.
type nbioLogger struct{}

func (nbioLogger) Debug(format string, v ...any) {}
func (nbioLogger) Info(format string, v ...any) {
	slog.Debug("WebSocket event loop: " + fmt.Sprintf(format, v...))
}
func (nbioLogger) Warn(format string, v ...any) {
	slog.Warn("WebSocket event loop: " + fmt.Sprintf(format, v...))
}
func (nbioLogger) Error(format string, v ...any) {
	slog.Warn("WebSocket event loop: " + fmt.Sprintf(format, v...))
}

// upgrade answers a WebSocket handshake as RFC 6455 asks (and as
// coder/websocket, Tally's earlier transport, did: the same refusals with
// the same statuses, the same Origin rules) and hijacks the connection.
// It offers graphql-transport-ws when the client does; subprotocol is ""
// otherwise (the caller closes with 4406). On an error the response has
// been written.
func upgrade(w http.ResponseWriter, r *http.Request, origins []string) (conn net.Conn, buffered []byte, subprotocol string, err error) {
	status, err := checkHandshake(w, r)
	if err == nil {
		if err = checkOrigin(r, origins); err != nil {
			status = http.StatusForbidden
		}
	}
	if err != nil {
		http.Error(w, err.Error(), status)
		return nil, nil, "", err
	}
	for _, offered := range headerTokens(r.Header, "Sec-WebSocket-Protocol") {
		if strings.EqualFold(offered, "graphql-transport-ws") {
			subprotocol = offered
			break
		}
	}
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		http.Error(w, http.StatusText(http.StatusNotImplemented), http.StatusNotImplemented)
		return nil, nil, "", err
	}
	// What the client sent after its request (frames it did not wait to
	// send) is in net/http's reader.
	if n := brw.Reader.Buffered(); n > 0 {
		buffered, _ = brw.Reader.Peek(n)
		buffered = append([]byte(nil), buffered...)
	}
	var resp strings.Builder
	resp.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ")
	resp.WriteString(acceptKey(strings.TrimSpace(r.Header.Get("Sec-WebSocket-Key"))))
	if subprotocol != "" {
		resp.WriteString("\r\nSec-WebSocket-Protocol: " + subprotocol)
	}
	resp.WriteString("\r\n\r\n")
	// The http.Server's deadlines are for ordinary requests.
	_ = conn.SetReadDeadline(time.Time{})
	_ = conn.SetWriteDeadline(time.Now().Add(handshakeWriteTimeout))
	if _, err := conn.Write([]byte(resp.String())); err != nil {
		conn.Close()
		return nil, nil, "", err
	}
	_ = conn.SetWriteDeadline(time.Time{})
	return conn, buffered, subprotocol, nil
}

// handshakeWriteTimeout bounds the write of the 101 response, which a
// peer that does not read could otherwise hold.
const handshakeWriteTimeout = 10 * time.Second

func checkHandshake(w http.ResponseWriter, r *http.Request) (int, error) {
	if !r.ProtoAtLeast(1, 1) {
		return http.StatusUpgradeRequired, fmt.Errorf("WebSocket protocol violation: handshake request must be at least HTTP/1.1: %q", r.Proto)
	}
	if !headerHasToken(r.Header, "Connection", "upgrade") {
		w.Header().Set("Connection", "Upgrade")
		w.Header().Set("Upgrade", "websocket")
		return http.StatusUpgradeRequired, fmt.Errorf("WebSocket protocol violation: Connection header %q does not contain Upgrade", r.Header.Get("Connection"))
	}
	if !headerHasToken(r.Header, "Upgrade", "websocket") {
		w.Header().Set("Connection", "Upgrade")
		w.Header().Set("Upgrade", "websocket")
		return http.StatusUpgradeRequired, fmt.Errorf("WebSocket protocol violation: Upgrade header %q does not contain websocket", r.Header.Get("Upgrade"))
	}
	if r.Method != http.MethodGet {
		return http.StatusMethodNotAllowed, fmt.Errorf("WebSocket protocol violation: handshake request method is not GET but %q", r.Method)
	}
	if r.Header.Get("Sec-WebSocket-Version") != "13" {
		w.Header().Set("Sec-WebSocket-Version", "13")
		return http.StatusBadRequest, fmt.Errorf("unsupported WebSocket protocol version (only 13 is supported): %q", r.Header.Get("Sec-WebSocket-Version"))
	}
	keys := r.Header.Values("Sec-WebSocket-Key")
	if len(keys) != 1 {
		return http.StatusBadRequest, errors.New("WebSocket protocol violation: want one Sec-WebSocket-Key")
	}
	key := strings.TrimSpace(keys[0])
	if v, err := base64.StdEncoding.DecodeString(key); err != nil || len(v) != 16 {
		return http.StatusBadRequest, fmt.Errorf("WebSocket protocol violation: invalid Sec-WebSocket-Key %q, must be a 16 byte base64 encoded string", key)
	}
	return 0, nil
}

// checkOrigin admits a request without an Origin (not a browser), one
// from the server's own host, and one whose Origin host matches one of
// patterns (path.Match, case-insensitive; a pattern with "://" matches
// scheme://host).
func checkOrigin(r *http.Request, patterns []string) error {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return nil
	}
	u, err := url.Parse(origin)
	if err != nil {
		return fmt.Errorf("failed to parse Origin header %q: %w", origin, err)
	}
	if strings.EqualFold(r.Host, u.Host) {
		return nil
	}
	for _, pattern := range patterns {
		target := u.Host
		if strings.Contains(pattern, "://") {
			target = u.Scheme + "://" + u.Host
		}
		matched, err := path.Match(strings.ToLower(pattern), strings.ToLower(target))
		if err != nil {
			slog.Warn("WebSocket origin pattern", "pattern", pattern, "err", err)
			return errors.New(http.StatusText(http.StatusForbidden))
		}
		if matched {
			return nil
		}
	}
	if u.Host == "" {
		return fmt.Errorf("request Origin %q is not a valid URL with a host", origin)
	}
	return fmt.Errorf("request Origin %q is not authorized for Host %q", u.Host, r.Host)
}

func acceptKey(key string) string {
	h := sha1.Sum([]byte(key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
	return base64.StdEncoding.EncodeToString(h[:])
}

// headerTokens lists the comma-separated tokens of every h[name] line.
func headerTokens(h http.Header, name string) []string {
	var tokens []string
	for _, v := range h.Values(name) {
		for t := range strings.SplitSeq(v, ",") {
			if t = strings.TrimSpace(t); t != "" {
				tokens = append(tokens, t)
			}
		}
	}
	return tokens
}

func headerHasToken(h http.Header, name, token string) bool {
	for _, t := range headerTokens(h, name) {
		if strings.EqualFold(t, token) {
			return true
		}
	}
	return false
}

// attach hands conn over to the event loop as c's socket.
func (c *wsConn) attach(conn net.Conn, up *nbws.Upgrader) error {
	loop, err := eventLoop()
	if err != nil {
		conn.Close()
		return err
	}
	// NBConn duplicates the descriptor into nbio and closes conn.
	nb, err := nbio.NBConn(conn)
	if err != nil {
		conn.Close()
		return err
	}
	ws := nbws.NewServerConn(up, nb, "graphql-transport-ws", false, false)
	ws.Engine = loop
	ws.Execute = func(handle func()) bool {
		c.unhandled.Add(1)
		return nb.Execute(func() {
			handle()
			if c.unhandled.Add(-1) == 0 {
				c.inflow.Store(0)
			}
		})
	}
	ws.SetSession(c)
	c.mu.Lock()
	c.ws, c.nb = ws, nb
	c.mu.Unlock()
	nb.SetSession(ws)
	nb.OnData(func(nb *nbio.Conn, data []byte) {
		c.attached.Load() // (see attached)
		if c.inflow.Add(int64(len(data))) > c.t.floodBytes && c.unhandled.Load() > 0 {
			// Reading does not wait for handling: a peer that sends
			// faster than its messages are handled would grow their
			// queue without end.
			nb.OnData(func(*nbio.Conn, []byte) {})
			c.closeWith(closePolicy, "Policy violation: messages arrive faster than they are handled")
			return
		}
		if err := ws.Parse(data); err != nil {
			if errors.Is(err, nbws.ErrMessageTooLarge) || errors.Is(err, nbws.ErrControlMessageTooBig) {
				// nbio has sent 1009; the rest of the frame is read and
				// dropped while the close handshake runs, so that the peer
				// can finish writing it and read why.
				nb.OnData(func(*nbio.Conn, []byte) {})
				c.closed(closeMessageTooBig)
				return
			}
			_ = nb.CloseWithError(err)
		}
	})
	c.attached.Store(true)
	return loop.AddTransferredConn(nb)
}

// newUpgrader is the nbio side of a transport's sockets: their limits and
// the frames nbio hands them.
func (t *wsTransport) newUpgrader() *nbws.Upgrader {
	up := nbws.NewUpgrader()
	up.KeepaliveTime = 0 // pings are the wheel's
	up.MessageLengthLimit = int(t.cfg.ReadLimit)
	up.OnMessage(func(ws *nbws.Conn, _ nbws.MessageType, data []byte) {
		if c, ok := ws.Session().(*wsConn); ok {
			c.receive(data)
		}
	})
	up.SetPingHandler(func(ws *nbws.Conn, payload string) {
		if c, ok := ws.Session().(*wsConn); ok {
			c.frame(opPong, []byte(payload))
		}
	})
	up.SetPongHandler(func(ws *nbws.Conn, _ string) {
		if c, ok := ws.Session().(*wsConn); ok {
			c.ponged()
		}
	})
	up.SetCloseHandler(func(ws *nbws.Conn, code int, reason string) {
		if c, ok := ws.Session().(*wsConn); ok {
			c.peerClosed(code)
		}
	})
	up.OnClose(func(ws *nbws.Conn, err error) {
		if c, ok := ws.Session().(*wsConn); ok {
			c.finish(err)
		}
	})
	return up
}
