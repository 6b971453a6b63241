package transport

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/coder/websocket"
	"github.com/golang-jwt/jwt/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"github.com/tally-dev/tally/resolvers"
	"github.com/tally-dev/tally/web/auth"
)

// WSConfig bounds what one WebSocket may hold. Zero fields take the
// defaults in brackets.
type WSConfig struct {
	// InitTimeout is how long a socket may wait before connection_init
	// [10s; also for a negative value]; then it is closed with 4408.
	InitTimeout time.Duration
	// PingInterval is how often the server pings (WebSocket ping frames,
	// which every RFC 6455 client answers); a peer that has not answered
	// within the next interval is dropped [20s; negative: never].
	PingInterval time.Duration
	// WriteTimeout bounds the write of one message [10s; also for a
	// negative value].
	WriteTimeout time.Duration
	// SendQueueBytes bounds the messages waiting to be written to one
	// socket [256 KiB]; a socket whose queue would grow past it is dropped
	// as a slow reader (one message larger than the bound still goes out
	// when the queue is empty).
	SendQueueBytes int
	// MaxPerUser caps the open sockets of one user, and of one remote IP
	// for sockets without a token and sockets not yet initialised [16;
	// negative: no cap]. A user's count is every replica's when
	// Config.SocketCap is shared (Redis mode); an address's is always this
	// process's.
	MaxPerUser int
	// MaxSubscriptions caps the operations active at once on one socket
	// [100; negative: no cap].
	MaxSubscriptions int
	// ReadLimit bounds one incoming message [1 MiB].
	ReadLimit int64
}

// UserCap is MaxPerUser with its default applied (not above 0: no cap).
func (c WSConfig) UserCap() int { return c.withDefaults().MaxPerUser }

func (c WSConfig) withDefaults() WSConfig {
	// A zero or negative timeout or queue would cut every socket at once:
	// it means the default.
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.InitTimeout, 10*time.Second)
	def(&c.WriteTimeout, 10*time.Second)
	if c.PingInterval == 0 {
		c.PingInterval = 20 * time.Second
	}
	if c.SendQueueBytes <= 0 {
		c.SendQueueBytes = 256 << 10
	}
	if c.MaxPerUser == 0 {
		c.MaxPerUser = 16
	}
	if c.MaxSubscriptions == 0 {
		c.MaxSubscriptions = 100
	}
	if c.ReadLimit == 0 {
		c.ReadLimit = 1 << 20
	}
	return c
}

// Close codes of graphql-transport-ws (github.com/enisdenjo/graphql-ws,
// PROTOCOL.md) and of RFC 6455 that Tally uses.
const (
	closeBadRequest          = 4400 // malformed or unexpected message
	closeUnauthorized        = 4401 // subscribe before connection_ack
	closeForbidden           = 4403 // bad or expired token
	closeSubprotocol         = 4406 // the client did not offer graphql-transport-ws
	closeInitTimeout         = 4408 // no connection_init in time
	closeSubscriberExists    = 4409 // an active operation already has this id
	closeTooManyInitRequests = 4429 // a second connection_init; also the per-user socket cap
	closeTryAgainLater       = 1013 // slow reader dropped
	closeGoingAway           = 1001 // server shutting down
)

// closeGrace is how long a close handshake may take before the
// connection is cut: a peer that does not read would hold the goroutine
// doing the handshake for coder/websocket's 5+5 s otherwise.
const closeGrace = 2 * time.Second

// maxQueuedMessages bounds the entries of a send queue, so that a flood
// of tiny messages cannot grow its bookkeeping beyond SendQueueBytes'
// intent.
const maxQueuedMessages = 4096

// wsTransport serves graphql-transport-ws on coder/websocket. It replaces
// gqlgen's transport.Websocket (v0.17.95), of which only the close code of a
// refused connection_init can be chosen (WithWebsocketCloseCode on the
// InitFunc's context): a subscribe before connection_ack and a second
// connection_init close with 1002, a message of an unknown type or that is
// not JSON after init closes with 1000 "terminated" (a normal close, to
// clients), and a duplicate operation id silently replaces the running operation (which
// can then never be completed) instead of closing with 4409; CloseFunc and
// ErrorFunc only observe. Nor can it bound a socket: every write is made
// with no deadline under one mutex, so a client that stops reading holds
// each operation's goroutine, and the result it was writing, forever; and
// it has no notion of a cap per user or per socket. Here each socket has
// one reader (the handler's goroutine), a writer that runs while its queue
// (bounded in bytes, a deadline per message) has something in it, and one
// goroutine per active operation; pings and the init and token-expiry
// deadlines are timers.
type wsTransport struct {
	cfg       WSConfig
	keys      *auth.Keys
	origins   []string
	presenter graphql.ErrorPresenterFunc
	slots     *wsSlots  // per remote IP, and per user without Redis
	userCap   SocketCap // per user: slots, or shared by replicas on Redis
	closes    *prometheus.CounterVec
	unshared  prometheus.Counter // admitted while the shared count could not be asked
}

var _ graphql.Transport = (*wsTransport)(nil)

func (t *wsTransport) Supports(r *http.Request) bool {
	return strings.EqualFold(r.Header.Get("Upgrade"), "websocket")
}

func (t *wsTransport) Do(w http.ResponseWriter, r *http.Request, exec graphql.GraphExecutor) {
	ip := remoteIP(r)
	release, ok := t.slots.acquire("ip " + ip)
	if !ok {
		// Counted before the token is known: sockets still waiting for
		// connection_init and sockets without a token, per remote IP.
		w.Header().Set("Retry-After", "5")
		http.Error(w, "too many open WebSockets from this address", http.StatusTooManyRequests)
		return
	}
	defer func() { release() }()

	// The http.Server's read and write timeouts are for ordinary requests;
	// the hijacked connection would otherwise inherit them and die.
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{})
	_ = rc.SetWriteDeadline(time.Time{})
	hw := &hijackRecorder{ResponseWriter: w}
	conn, err := websocket.Accept(hw, r, &websocket.AcceptOptions{
		Subprotocols:   []string{"graphql-transport-ws"},
		OriginPatterns: t.origins,
	})
	if err != nil {
		return // Accept has answered (403 for a foreign origin, 400 for a bad handshake)
	}
	conn.SetReadLimit(t.cfg.ReadLimit)
	ctx, cancel := context.WithCancel(r.Context())
	c := &wsConn{
		t:       t,
		conn:    conn,
		raw:     hw.conn,
		exec:    exec,
		headers: r.Header,
		ctx:     ctx,
		cancel:  cancel,
		ops:     map[string]context.CancelFunc{},
		done:    make(chan struct{}),
	}
	defer c.finish()
	if conn.Subprotocol() != "graphql-transport-ws" {
		c.closeWith(closeSubprotocol, "Subprotocol not acceptable")
		return
	}
	c.timer = time.AfterFunc(t.cfg.InitTimeout, func() {
		c.closeWith(closeInitTimeout, "Connection initialisation timeout")
	})
	// The server shutting down ends the request's base context: close with
	// 1001. (closeWith ends c.ctx too; then this is a no-op.)
	stop := context.AfterFunc(c.ctx, func() { c.closeWith(closeGoingAway, "Server shutting down") })
	defer stop()
	if t.cfg.PingInterval > 0 {
		c.mu.Lock()
		c.pinger = time.AfterFunc(t.cfg.PingInterval, c.ping)
		c.mu.Unlock()
	}
	c.readLoop(ip, &release)
}

// hijackRecorder keeps the hijacked net.Conn so that a socket can be cut
// at once, whatever coder/websocket is waiting for.
type hijackRecorder struct {
	http.ResponseWriter
	conn net.Conn
}

func (h *hijackRecorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, brw, err := http.NewResponseController(h.ResponseWriter).Hijack()
	h.conn = c
	return c, brw, err
}

func remoteIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// wsConn is one socket.
type wsConn struct {
	t       *wsTransport
	conn    *websocket.Conn
	raw     net.Conn
	exec    graphql.GraphExecutor
	headers http.Header
	ctx     context.Context // ends when the socket closes
	cancel  context.CancelFunc
	// opBase is ctx with the principal of connection_init; operations
	// derive from it. Guarded by mu.
	opBase context.Context

	closeOnce sync.Once
	done      chan struct{} // closed when the close handshake ended

	mu      sync.Mutex
	acked   bool
	timer   *time.Timer // init timeout, then token expiry
	ops     map[string]context.CancelFunc
	queue   [][]byte
	queued  int // bytes queued or being written
	writing bool
	dropped bool
	pinger  *time.Timer
}

type wsIn struct {
	ID      json.RawMessage `json:"id"`
	Type    json.RawMessage `json:"type"`
	Payload json.RawMessage `json:"payload"`
}

func (c *wsConn) readLoop(ip string, release *func()) {
	for {
		// Not c.ctx: its end would make coder/websocket cut the connection
		// before the close handshake; closing the socket ends this read.
		_, data, err := c.conn.Read(context.Background())
		if err != nil {
			return
		}
		start := graphql.Now()
		var m wsIn
		var typ string
		if err := json.Unmarshal(data, &m); err != nil || json.Unmarshal(m.Type, &typ) != nil {
			c.closeWith(closeBadRequest, "Invalid message received")
			return
		}
		if !objectOrAbsent(m.Payload) && typ != "subscribe" {
			c.closeWith(closeBadRequest, `Invalid message received: "payload" must be an object`)
			return
		}
		switch typ {
		case "connection_init":
			if !c.init(m.Payload, ip, release) {
				return
			}
		case "ping":
			c.send(controlMessage("pong", m.Payload))
		case "pong":
		case "subscribe":
			id, ok := messageID(m.ID)
			if !ok {
				c.closeWith(closeBadRequest, `Invalid message received: subscribe needs a non-empty string "id"`)
				return
			}
			params, err := subscribeParams(m.Payload)
			if err != nil {
				c.closeWith(closeBadRequest, "Invalid message received: "+err.Error())
				return
			}
			c.mu.Lock()
			acked := c.acked
			c.mu.Unlock()
			if !acked {
				c.closeWith(closeUnauthorized, "Unauthorized")
				return
			}
			if !c.subscribe(id, params, start) {
				return
			}
		case "complete":
			id, ok := messageID(m.ID)
			if !ok {
				c.closeWith(closeBadRequest, `Invalid message received: complete needs a non-empty string "id"`)
				return
			}
			c.mu.Lock()
			stop := c.ops[id]
			delete(c.ops, id)
			c.mu.Unlock()
			if stop != nil {
				stop()
			}
		default:
			c.closeWith(closeBadRequest, truncateReason("Invalid message received: unexpected type "+strconv.Quote(typ)))
			return
		}
	}
}

// init answers connection_init: 4429 for a second one, 4403 for a bad or
// expired token, 4429 when the user already has MaxPerUser sockets open.
func (c *wsConn) init(payload json.RawMessage, ip string, release *func()) bool {
	c.mu.Lock()
	again := c.acked
	c.mu.Unlock()
	if again {
		c.closeWith(closeTooManyInitRequests, "Too many initialisation requests")
		return false
	}
	var p map[string]any
	if len(payload) > 0 {
		_ = json.Unmarshal(payload, &p) // null stays nil; objectOrAbsent checked the shape
	}
	header, isString := authorizationOf(p)
	if !isString {
		c.closeWith(closeForbidden, "Forbidden: Authorization must be a string")
		return false
	}
	pr, _, err := c.t.keys.FromHeader(header)
	var exp time.Time
	if err == nil && pr.User != 0 {
		exp = tokenExpiry(header)
		if !exp.IsZero() && !time.Now().Before(exp) {
			err = &auth.TokenError{Reason: "token expired"} // within the HTTP path's leeway, but a socket would close at once
		}
	}
	if err != nil {
		// The reason says why (auth.TokenError), cut to a close frame's
		// 123 bytes.
		c.closeWith(closeForbidden, truncateReason("Forbidden: "+err.Error()))
		return false
	}
	if pr.User != 0 {
		// (An error is a shared count that could not be asked; ok says
		// what the cap decided then: see SharedSocketCap.)
		rel, ok, err := c.t.userCap.Acquire(c.ctx, pr.User)
		if err != nil && ok {
			c.t.unshared.Inc()
		}
		if !ok {
			c.closeWith(closeTooManyInitRequests, truncateReason(fmt.Sprintf("Too many open sockets for this user (limit %d)", c.t.cfg.MaxPerUser)))
			return false
		}
		(*release)() // counted per user from now on, not per address
		*release = rel
	}
	c.mu.Lock()
	c.opBase = auth.With(c.ctx, pr, nil)
	c.acked = true
	c.timer.Stop()
	if !exp.IsZero() {
		c.timer = time.AfterFunc(time.Until(exp), func() {
			c.closeWith(closeForbidden, "Forbidden: token expired")
		})
	}
	c.mu.Unlock()
	c.send([]byte(`{"type":"connection_ack"}`))
	return true
}

// subscribe starts an operation; false when the socket was closed for it.
func (c *wsConn) subscribe(id string, params *graphql.RawParams, start time.Time) bool {
	c.mu.Lock()
	ctx, cancel := context.WithCancel(c.opBase)
	if _, exists := c.ops[id]; exists {
		c.mu.Unlock()
		cancel()
		c.closeWith(closeSubscriberExists, truncateReason("Subscriber for "+id+" already exists"))
		return false
	}
	if max := c.t.cfg.MaxSubscriptions; max > 0 && len(c.ops) >= max {
		c.mu.Unlock()
		cancel()
		// One operation refused, the socket and its other operations kept:
		// closing would cost the client every subscription it holds.
		c.send(errorMessage(id, &gqlerror.Error{
			Message:    fmt.Sprintf("too many active operations on this socket (limit %d); complete one first", max),
			Extensions: map[string]any{"code": resolvers.CodeRateLimited},
		}))
		return true
	}
	c.ops[id] = cancel
	c.mu.Unlock()
	go c.run(ctx, cancel, id, params, start)
	return true
}

func (c *wsConn) run(opCtx context.Context, cancel context.CancelFunc, id string, params *graphql.RawParams, start time.Time) {
	defer cancel()
	// free removes the operation from the socket unless the client's
	// complete (or the socket's end) already did; true when it was ours.
	free := func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		if opCtx.Err() != nil {
			return false
		}
		delete(c.ops, id)
		return true
	}
	// last sends the operation's final message after freeing its id, so
	// that a client reusing the id at once is not refused with 4409.
	last := func(msg []byte) {
		if free() {
			c.send(msg)
		}
	}
	ctx := opCtx
	var rc *graphql.OperationContext
	defer func() {
		if r := recover(); r != nil {
			var err error
			if rc != nil {
				err = rc.Recover(ctx, r)
			} else {
				err = resolvers.RecoverPanic(ctx, r)
			}
			last(errorMessage(id, c.t.presenter(ctx, err)))
		}
		free()
	}()
	ctx = graphql.StartOperationTrace(ctx)
	params.ReadTime = graphql.TraceTiming{Start: start, End: graphql.Now()}
	params.Headers = c.headers
	rc, errs := c.exec.CreateOperationContext(ctx, params)
	if errs != nil {
		resp := c.exec.DispatchError(graphql.WithOperationContext(ctx, rc), errs)
		last(errorMessage(id, resp.Errors...))
		return
	}
	ctx = graphql.WithOperationContext(ctx, rc)
	ctx, end := resolvers.WithStreamEnd(ctx)
	responses, ctx := c.exec.DispatchOperation(ctx, rc)
	for {
		resp := responses(ctx)
		if resp == nil {
			break
		}
		b, err := json.Marshal(resp)
		if err != nil {
			panic(err)
		}
		if !c.send(dataMessage("next", id, b)) {
			return
		}
	}
	if errs := end.Errors(); len(errs) > 0 {
		list := make([]*gqlerror.Error, len(errs))
		for i, err := range errs {
			list[i] = c.t.presenter(ctx, err)
		}
		last(errorMessage(id, list...))
		return
	}
	// (Nothing when the client completed it or the socket is closing.)
	last(dataMessage("complete", id, nil))
}

func errorMessage(id string, errs ...*gqlerror.Error) []byte {
	b, err := json.Marshal(errs)
	if err != nil {
		panic(err)
	}
	return dataMessage("error", id, b)
}

// send queues a message for the writer; false when the socket is closing
// or was just dropped because its queue is full.
func (c *wsConn) send(b []byte) bool {
	c.mu.Lock()
	if c.dropped || c.ctx.Err() != nil {
		c.mu.Unlock()
		return false
	}
	if c.queued > 0 && (c.queued+len(b) > c.t.cfg.SendQueueBytes || len(c.queue) >= maxQueuedMessages) {
		c.dropped = true
		c.queue = nil // released now, not when the peer gets round to reading
		c.mu.Unlock()
		slog.Debug("WebSocket dropped: send queue full")
		c.closeWith(closeTryAgainLater, "Try again later: the client is reading too slowly")
		return false
	}
	c.queue = append(c.queue, b)
	c.queued += len(b)
	start := !c.writing
	c.writing = true
	c.mu.Unlock()
	if start {
		go c.drain()
	}
	return true
}

// drain writes the queue until it is empty. It runs only while there is
// something to write, so an idle socket holds one goroutine (its reader),
// not two.
func (c *wsConn) drain() {
	for {
		c.mu.Lock()
		batch := c.queue
		c.queue = nil
		if len(batch) == 0 || c.dropped {
			c.writing = false
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
		for _, b := range batch {
			// Not c.ctx: its end would make coder/websocket cut the
			// connection under a close frame still to be written.
			ctx, cancel := context.WithTimeout(context.Background(), c.t.cfg.WriteTimeout)
			err := c.conn.Write(ctx, websocket.MessageText, b)
			cancel()
			c.mu.Lock()
			c.queued -= len(b)
			c.mu.Unlock()
			if err != nil {
				if c.ctx.Err() == nil {
					slog.Debug("WebSocket dropped: write failed", "err", err)
					c.abort() // the peer could not take one message in WriteTimeout: a close frame would not get through either
				}
				c.mu.Lock()
				c.writing = false
				c.mu.Unlock()
				return
			}
		}
	}
}

// ping checks the peer answers (WebSocket ping frames, answered by every
// RFC 6455 client, browsers included) and schedules the next check. The
// pong is read by readLoop.
func (c *wsConn) ping() {
	// Not c.ctx: its end during the ping's write would make
	// coder/websocket cut the connection under a close handshake. Ping
	// returns when the socket closes anyway.
	ctx, cancel := context.WithTimeout(context.Background(), c.t.cfg.PingInterval)
	defer cancel()
	if err := c.conn.Ping(ctx); err != nil {
		if c.ctx.Err() == nil {
			c.abort() // no pong within an interval: the peer is gone
		}
		return
	}
	c.mu.Lock()
	if c.pinger != nil {
		c.pinger.Reset(c.t.cfg.PingInterval)
	}
	c.mu.Unlock()
}

// closeWith ends the socket with a close frame. It returns at once; the
// handshake runs in the background and is cut after closeGrace.
func (c *wsConn) closeWith(code websocket.StatusCode, reason string) {
	c.closeOnce.Do(func() {
		c.cancel()
		c.t.closes.WithLabelValues(strconv.Itoa(int(code))).Inc()
		go func() {
			defer close(c.done)
			cut := time.AfterFunc(closeGrace, c.cutRaw)
			defer cut.Stop()
			_ = c.conn.Close(code, reason)
		}()
	})
}

// abort ends the socket without a close frame (the peer is gone or not
// reading).
func (c *wsConn) abort() {
	c.closeOnce.Do(func() {
		c.cancel()
		c.t.closes.WithLabelValues("-1").Inc()
		c.cutRaw()
		_ = c.conn.CloseNow()
		close(c.done)
	})
}

func (c *wsConn) cutRaw() {
	if c.raw != nil {
		_ = c.raw.Close()
	}
}

// finish runs when readLoop returns: the socket is over, whoever ended it.
func (c *wsConn) finish() {
	c.closeWith(websocket.StatusNormalClosure, "")
	c.mu.Lock()
	if c.timer != nil {
		c.timer.Stop()
	}
	if c.pinger != nil {
		c.pinger.Stop()
		c.pinger = nil
	}
	for _, stop := range c.ops {
		stop()
	}
	c.ops = nil
	c.queue = nil
	c.mu.Unlock()
	<-c.done
}

// wsSlots counts open sockets per key (a user, or a remote address).
type wsSlots struct {
	max  int
	mu   sync.Mutex
	open map[string]int
}

func newWSSlots(max int) *wsSlots { return &wsSlots{max: max, open: map[string]int{}} }

// acquire takes a slot for key; release gives it back (once).
func (s *wsSlots) acquire(key string) (release func(), ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.max > 0 && s.open[key] >= s.max {
		return func() {}, false
	}
	s.open[key]++
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.open[key]--; s.open[key] <= 0 {
				delete(s.open, key)
			}
		})
	}, true
}

func (s *wsSlots) count(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.open[key]
}

func controlMessage(typ string, payload json.RawMessage) []byte {
	if len(payload) == 0 || string(payload) == "null" {
		return []byte(`{"type":"` + typ + `"}`)
	}
	return dataMessage(typ, "", payload)
}

func dataMessage(typ, id string, payload []byte) []byte {
	var b bytes.Buffer
	b.Grow(len(payload) + len(id) + 40)
	b.WriteString(`{"type":"`)
	b.WriteString(typ)
	b.WriteByte('"')
	if id != "" {
		b.WriteString(`,"id":`)
		idJSON, _ := json.Marshal(id)
		b.Write(idJSON)
	}
	if len(payload) > 0 {
		b.WriteString(`,"payload":`)
		b.Write(payload)
	}
	b.WriteByte('}')
	return b.Bytes()
}

func objectOrAbsent(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || string(raw) == "null" || raw[0] == '{'
}

func messageID(raw json.RawMessage) (string, bool) {
	var id string
	if json.Unmarshal(raw, &id) != nil || id == "" {
		return "", false
	}
	return id, true
}

// subscribeParams reads a subscribe payload as graphql-ws validates it:
// an object with a string query; operationName a string or null;
// variables and extensions objects or null.
func subscribeParams(raw json.RawMessage) (*graphql.RawParams, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '{' {
		return nil, errors.New(`subscribe needs a "payload" object`)
	}
	var shape struct {
		Query         json.RawMessage `json:"query"`
		OperationName json.RawMessage `json:"operationName"`
		Variables     json.RawMessage `json:"variables"`
		Extensions    json.RawMessage `json:"extensions"`
	}
	if err := json.Unmarshal(raw, &shape); err != nil {
		return nil, errors.New("subscribe payload is not valid JSON")
	}
	var q string
	if len(shape.Query) == 0 || shape.Query[0] != '"' || json.Unmarshal(shape.Query, &q) != nil {
		return nil, errors.New(`subscribe payload needs a string "query"`)
	}
	var name *string
	if len(shape.OperationName) > 0 && json.Unmarshal(shape.OperationName, &name) != nil {
		return nil, errors.New(`"operationName" must be a string or null`)
	}
	if !objectOrAbsent(shape.Variables) || !objectOrAbsent(shape.Extensions) {
		return nil, errors.New(`"variables" and "extensions" must be objects or null`)
	}
	var p graphql.RawParams
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber() // Long variables stay exact
	if err := dec.Decode(&p); err != nil {
		return nil, errors.New("subscribe payload is not valid JSON")
	}
	return &p, nil
}

// authorizationOf finds the token the way gqlgen's InitPayload did
// ("Authorization" or "authorization"); ok is false when it is there but
// not a string.
func authorizationOf(p map[string]any) (string, bool) {
	for _, k := range []string{"Authorization", "authorization"} {
		if v, present := p[k]; present && v != nil {
			s, isString := v.(string)
			if !isString {
				return "", false
			}
			if s != "" {
				return s, true
			}
		}
	}
	return "", true
}

// tokenExpiry reads exp from a bearer token that auth.Keys has already
// verified (zero when it has none).
func tokenExpiry(header string) time.Time {
	_, tok, _ := strings.Cut(strings.TrimSpace(header), " ")
	var c jwt.RegisteredClaims
	if _, _, err := jwt.NewParser().ParseUnverified(strings.TrimSpace(tok), &c); err != nil || c.ExpiresAt == nil {
		return time.Time{}
	}
	return c.ExpiresAt.Time
}

func truncateReason(s string) string {
	const max = 123 // RFC 6455: a close frame's reason fits in 123 bytes
	if len(s) <= max {
		return s
	}
	return strings.ToValidUTF8(s[:max], "")
}

func newWSTransport(cfg Config) *wsTransport {
	if cfg.WebSocket.ReadLimit == 0 {
		cfg.WebSocket.ReadLimit = cfg.MaxBodyBytes // one message, one request body
	}
	ws := cfg.WebSocket.withDefaults()
	t := &wsTransport{
		cfg:       ws,
		keys:      cfg.Keys,
		origins:   cfg.OriginPatterns,
		presenter: presentError,
		slots:     newWSSlots(ws.MaxPerUser),
	}
	t.userCap = localSocketCap{t.slots}
	if cfg.SocketCap != nil && ws.MaxPerUser > 0 {
		t.userCap = bothCaps{local: t.userCap, shared: cfg.SocketCap}
	}
	t.closes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tally_websocket_closes_total",
		Help: "WebSockets ended, by the close code the server sent or answered with (-1: cut without a close frame: a slow or dead peer).",
	}, []string{"code"})
	t.unshared = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "tally_websocket_cap_unshared_total",
		Help: "WebSockets admitted on this replica's per-user count alone because the count shared by replicas in Redis could not be asked (fail-open).",
	})
	if cfg.Metrics != nil {
		// (Open sockets are tally_websockets_open, from ObserveHTTP.)
		cfg.Metrics.MustRegister(t.closes, t.unshared)
	}
	return t
}
