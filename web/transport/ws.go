package transport

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"weak"

	"github.com/99designs/gqlgen/graphql"
	nbws "github.com/lesismal/nbio/nbhttp/websocket"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"github.com/tally-dev/tally/resolvers"
	"github.com/tally-dev/tally/web/auth"
	"github.com/tally-dev/tally/web/fastpath"
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
	// MaxPerUser caps the open sockets of one user [16; negative: no
	// cap]. A user's count is every replica's when Config.SocketCap is
	// shared (Redis mode).
	MaxPerUser int
	// MaxPerAddress caps, per remote IP, the sockets not yet initialised
	// and those initialised without a token, in this process [256;
	// negative: no cap]. It is sized for many clients behind one address
	// (an office, a carrier's NAT, a proxy): a socket counts only until
	// its connection_init names a user. One over the cap is accepted and
	// closed with 1013, which the standard clients retry with backoff.
	MaxPerAddress int
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
	if c.MaxPerAddress == 0 {
		c.MaxPerAddress = 256
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
	closeNormal              = 1000 // the peer closed
	closeGoingAway           = 1001 // server shutting down
	closePolicy              = 1008 // messages arrive faster than they are handled
	closeMessageTooBig       = 1009 // a message over ReadLimit
	closeTryAgainLater       = 1013 // slow reader dropped; the per-address cap
)

// closeGrace is how long a close handshake may take before the
// connection is cut: a peer that does not read must not hold the socket.
const closeGrace = 2 * time.Second

// maxQueuedMessages bounds the entries of a send queue, so that a flood
// of tiny messages cannot grow its bookkeeping beyond SendQueueBytes'
// intent.
const maxQueuedMessages = 4096

// wsTransport serves graphql-transport-ws. It replaces gqlgen's
// transport.Websocket (v0.17.95), of which only the close code of a
// refused connection_init can be chosen (WithWebsocketCloseCode on the
// InitFunc's context): a subscribe before connection_ack and a second
// connection_init close with 1002, a message of an unknown type or that is
// not JSON after init closes with 1000 "terminated" (a normal close, to
// clients), and a duplicate operation id silently replaces the running
// operation (which can then never be completed) instead of closing with
// 4409; CloseFunc and ErrorFunc only observe. Nor can it bound a socket:
// every write is made with no deadline under one mutex, so a client that
// stops reading holds each operation's goroutine, and the result it was
// writing, forever; and it has no notion of a cap per user or per socket.
//
// Here a socket is read by the event loop (ws_upgrade.go) and holds no
// goroutine while idle (ws_socket.go); its deadlines are in the
// transport's wheel (ws_wheel.go). A message is handled on a goroutine
// that lives as long as the handling; an operation runs on a goroutine of
// its own until its first response, and after that only while it waits
// for the next one, except a subscription a compiled plan serves
// (fastpath.Pusher), which is pushed to by whoever has its next value and
// holds no goroutine between pushes.
type wsTransport struct {
	cfg       WSConfig
	keys      *auth.Keys
	origins   []string
	presenter graphql.ErrorPresenterFunc
	addrSlots *wsSlots  // sockets per remote IP not yet initialised or without a token
	slots     *wsSlots  // per user without Redis
	userCap   SocketCap // per user: slots, or shared by replicas on Redis
	closes    *prometheus.CounterVec
	unshared  prometheus.Counter // admitted while the shared count could not be asked
	up        *nbws.Upgrader
	wheel     *wheel
	metrics   *metrics // nil without Config.Metrics
	// floodBytes bounds what one socket may send while some of its
	// messages wait to be handled.
	floodBytes int64

	mu        sync.Mutex
	open      *wsConn // list of open sockets, for shutdown
	shutdowns map[*http.Server]bool
}

var _ graphql.Transport = (*wsTransport)(nil)

func (t *wsTransport) Supports(r *http.Request) bool {
	return strings.EqualFold(r.Header.Get("Upgrade"), "websocket")
}

func (t *wsTransport) Do(w http.ResponseWriter, r *http.Request, exec graphql.GraphExecutor) {
	ip := remoteIP(r)
	// Counted before the token is known: sockets still waiting for
	// connection_init and sockets without a token, per remote IP. One
	// over the cap is refused with a close code the standard clients
	// retry with their backoff (a refused upgrade they take as final).
	release, admitted := t.addrSlots.acquire(ip)
	conn, buffered, subprotocol, err := upgrade(w, r, t.origins)
	if err != nil {
		release()
		return // answered: 403 for a foreign origin, 4xx for a bad handshake
	}
	if len(buffered) > 0 {
		// RFC 6455: the client waits for the server's handshake before
		// sending anything more.
		release()
		conn.Close()
		return
	}
	t.watchShutdown(r)
	base := context.WithValue(context.Background(), limitInfoKey{}, limitInfoFrom(r.Context()))
	c := &wsConn{t: t, base: base, exec: exec, headers: operationHeaders(r.Header), done: detachSocket(w)}
	c.deadline.init(c)
	if admitted {
		c.release = release
	}
	if !admitted || subprotocol == "" {
		c.state = wsRefused
	} else {
		// Set before the socket is handed over: its connection_init may
		// be handled at once.
		now := time.Now()
		c.authBy = now.Add(t.cfg.InitTimeout).UnixNano()
		if t.cfg.PingInterval > 0 {
			c.pingAt = now.Add(t.cfg.PingInterval).UnixNano()
		}
	}
	t.remember(c)
	if err := c.attach(conn, t.up); err != nil {
		slog.Warn("WebSocket not handed to the event loop", "err", err)
		c.finish(err)
		return
	}
	switch {
	case !admitted:
		c.closeWith(closeTryAgainLater, "Try again later: too many sockets from this address are not initialised yet")
	case subprotocol == "":
		c.closeWith(closeSubprotocol, "Subprotocol not acceptable")
	default:
		c.mu.Lock()
		if c.state == wsOpen {
			c.rescheduleLocked()
		}
		c.mu.Unlock()
	}
}

// operationHeaders is what operations see of the upgrade request's
// headers (graphql.RawParams.Headers): all but the handshake's own, which
// a socket need not keep for its lifetime.
func operationHeaders(h http.Header) http.Header {
	var out http.Header
	for k, v := range h {
		switch k {
		case "Connection", "Upgrade", "Sec-Websocket-Key", "Sec-Websocket-Version", "Sec-Websocket-Extensions", "Sec-Websocket-Protocol":
			continue
		}
		if out == nil {
			out = make(http.Header, len(h))
		}
		out[k] = v
	}
	return out
}

// watchShutdown closes the transport's sockets with 1001 when the
// request's server shuts down: http.Server.Shutdown does not track
// hijacked connections, and calls what RegisterOnShutdown gave it.
func (t *wsTransport) watchShutdown(r *http.Request) {
	srv, ok := r.Context().Value(http.ServerContextKey).(*http.Server)
	if !ok {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.shutdowns[srv] {
		return
	}
	if t.shutdowns == nil {
		t.shutdowns = map[*http.Server]bool{}
	}
	t.shutdowns[srv] = true
	srv.RegisterOnShutdown(func() { t.closeAll(closeGoingAway, "Server shutting down") })
}

// transports are the process's WebSocket transports, for
// CloseWebSockets; held weakly, so that a handler its owner dropped (as
// tests do) is collected.
var transports struct {
	mu   sync.Mutex
	list []weak.Pointer[wsTransport]
}

func registerTransport(t *wsTransport) {
	transports.mu.Lock()
	defer transports.mu.Unlock()
	transports.list = slices.DeleteFunc(transports.list, func(p weak.Pointer[wsTransport]) bool { return p.Value() == nil })
	transports.list = append(transports.list, weak.Make(t))
}

// CloseWebSockets closes every open WebSocket of the process with 1001
// and waits until each has ended (its peer answered the close frame, or
// the close handshake's grace passed) or ctx ends. http.Server.Shutdown
// neither tracks hijacked connections nor waits for what
// RegisterOnShutdown started: a server calls this after Shutdown, before
// it exits, so that clients see 1001 and reconnect rather than a cut
// connection.
func CloseWebSockets(ctx context.Context) error {
	transports.mu.Lock()
	var all []*wsTransport
	for _, p := range transports.list {
		if t := p.Value(); t != nil {
			all = append(all, t)
		}
	}
	transports.mu.Unlock()
	for _, t := range all {
		t.closeAll(closeGoingAway, "Server shutting down")
	}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		open := false
		for _, t := range all {
			t.mu.Lock()
			open = open || t.open != nil
			t.mu.Unlock()
		}
		if !open {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

func (t *wsTransport) remember(c *wsConn) {
	t.mu.Lock()
	c.next = t.open
	if t.open != nil {
		t.open.prev = c
	}
	t.open = c
	t.mu.Unlock()
}

func (t *wsTransport) forget(c *wsConn) {
	t.mu.Lock()
	if c.prev != nil {
		c.prev.next = c.next
	} else if t.open == c {
		t.open = c.next
	}
	if c.next != nil {
		c.next.prev = c.prev
	}
	c.prev, c.next = nil, nil
	t.mu.Unlock()
}

func (t *wsTransport) closeAll(code int, reason string) {
	t.mu.Lock()
	var all []*wsConn
	for c := t.open; c != nil; c = c.next {
		all = append(all, c)
	}
	t.mu.Unlock()
	for _, c := range all {
		c.closeWith(code, reason)
	}
}

func remoteIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// wsOp is one operation of a socket.
type wsOp struct {
	c      *wsConn
	id     string
	base   context.Context // ends when the client completes it or the socket ends
	cancel context.CancelFunc
	endMu  sync.Mutex
	ends   []func() // called once when it ends (onEnd)
	ended  bool

	// A subscription served by pushes (fastpath.Pusher): all it holds,
	// the operation's per-request state being gone once it started.
	mu     sync.Mutex // one push at a time
	push   *fastpath.Push
	events prometheus.Counter  // tally_graphql_subscription_events_total{name, "ok"}; nil without metrics
	dur    prometheus.Observer // tally_graphql_subscription_event_seconds{name}
}

var _ fastpath.Pusher = (*wsOp)(nil)

// operationEndKey holds, in an operation's context, what calls back when
// the operation ends (an operationEnder): whoever needs to know waits for
// it there instead of on the context's end (context.AfterFunc), which
// would hold the context and, through it, all the operation's
// per-request state, that a pushed subscription lets go once started.
type operationEndKey struct{}

type operationEnder interface{ onEnd(func()) }

// whenOperationEnds calls f once ctx's operation ends; stop unregisters
// it (false when f was called or is being called).
func whenOperationEnds(ctx context.Context, f func()) (stop func() bool) {
	if e, ok := ctx.Value(operationEndKey{}).(operationEnder); ok {
		e.onEnd(f)
		return func() bool { return true }
	}
	return context.AfterFunc(ctx, f)
}

// onEnd implements operationEnder.
func (op *wsOp) onEnd(f func()) {
	op.endMu.Lock()
	if !op.ended {
		op.ends = append(op.ends, f)
		f = nil
	}
	op.endMu.Unlock()
	if f != nil {
		f()
	}
}

// end ends the operation: its context, and what waits for it (onEnd),
// called at once. The caller may hold the socket's lock: what waits for
// an operation's end must not take it.
func (op *wsOp) end() {
	op.cancel()
	op.endMu.Lock()
	ends := op.ends
	op.ends, op.ended = nil, true
	op.endMu.Unlock()
	for _, f := range ends {
		f()
	}
}

type wsIn struct {
	ID      json.RawMessage `json:"id"`
	Type    json.RawMessage `json:"type"`
	Payload json.RawMessage `json:"payload"`
}

// receive handles one message of the peer. nbio calls it for one socket's
// messages in order, each on a goroutine of its own.
func (c *wsConn) receive(data []byte) {
	c.mu.Lock()
	open := c.state == wsOpen
	c.mu.Unlock()
	if !open {
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
		c.init(m.Payload)
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
		c.subscribe(id, params, start)
	case "complete":
		id, ok := messageID(m.ID)
		if !ok {
			c.closeWith(closeBadRequest, `Invalid message received: complete needs a non-empty string "id"`)
			return
		}
		c.mu.Lock()
		op := c.takeOpLocked(id)
		c.mu.Unlock()
		if op != nil {
			op.end()
		}
	default:
		c.closeWith(closeBadRequest, truncateReason("Invalid message received: unexpected type "+strconv.Quote(typ)))
	}
}

// takeOpLocked removes the operation id from the socket and returns it
// (nil when there is none).
func (c *wsConn) takeOpLocked(id string) *wsOp {
	for i, op := range c.ops {
		if op.id == id {
			last := len(c.ops) - 1
			c.ops[i] = c.ops[last]
			c.ops[last] = nil
			c.ops = c.ops[:last]
			if len(c.ops) == 0 {
				c.ops = nil
			}
			return op
		}
	}
	return nil
}

// init answers connection_init: 4429 for a second one, 4403 for a bad or
// expired token, 4429 when the user already has MaxPerUser sockets open.
func (c *wsConn) init(payload json.RawMessage) {
	c.mu.Lock()
	again := c.acked
	c.mu.Unlock()
	if again {
		c.closeWith(closeTooManyInitRequests, "Too many initialisation requests")
		return
	}
	var p map[string]any
	if len(payload) > 0 {
		_ = json.Unmarshal(payload, &p) // null stays nil; objectOrAbsent checked the shape
	}
	header, isString := authorizationOf(p)
	if !isString {
		c.closeWith(closeForbidden, "Forbidden: Authorization must be a string")
		return
	}
	pr, _, exp, err := c.t.keys.FromHeaderExpiry(header)
	if err == nil && pr.User != 0 {
		if !exp.IsZero() && !time.Now().Before(exp) {
			err = &auth.TokenError{Reason: "token expired"} // within the HTTP path's leeway, but a socket would close at once
		}
	}
	if err != nil {
		// The reason says why (auth.TokenError), cut to a close frame's
		// 123 bytes.
		c.closeWith(closeForbidden, truncateReason("Forbidden: "+err.Error()))
		return
	}
	if pr.User != 0 {
		// (An error is a shared count that could not be asked; ok says
		// what the cap decided then: see SharedSocketCap.)
		rel, ok, err := c.t.userCap.Acquire(c.base, pr.User)
		if err != nil && ok {
			c.t.unshared.Inc()
		}
		if !ok {
			c.closeWith(closeTooManyInitRequests, truncateReason(fmt.Sprintf("Too many open sockets for this user (limit %d)", c.t.cfg.MaxPerUser)))
			return
		}
		c.mu.Lock()
		previous := c.release // counted per user from now on, not per address
		c.release = rel
		if c.state == wsClosed { // ended while the count was asked
			c.release = nil
			previous = rel
		}
		c.mu.Unlock()
		if previous != nil {
			previous()
		}
	}
	c.mu.Lock()
	c.opBase = auth.With(c.base, pr, nil)
	c.acked = true
	c.authBy = 0
	if !exp.IsZero() {
		c.authBy = exp.UnixNano()
	}
	if c.state == wsOpen {
		c.rescheduleLocked()
	}
	c.mu.Unlock()
	c.send([]byte(`{"type":"connection_ack"}`))
}

// subscribe starts an operation.
func (c *wsConn) subscribe(id string, params *graphql.RawParams, start time.Time) {
	c.mu.Lock()
	for _, op := range c.ops {
		if op.id == id {
			c.mu.Unlock()
			c.closeWith(closeSubscriberExists, truncateReason("Subscriber for "+id+" already exists"))
			return
		}
	}
	if max := c.t.cfg.MaxSubscriptions; max > 0 && len(c.ops) >= max {
		c.mu.Unlock()
		// One operation refused, the socket and its other operations kept:
		// closing would cost the client every subscription it holds.
		c.send(errorMessage(id, &gqlerror.Error{
			Message:    fmt.Sprintf("too many active operations on this socket (limit %d); complete one first", max),
			Extensions: map[string]any{"code": resolvers.CodeRateLimited},
		}))
		return
	}
	if c.state != wsOpen {
		c.mu.Unlock()
		return
	}
	op := &wsOp{c: c, id: id}
	op.base, op.cancel = context.WithCancel(c.opBase)
	c.ops = append(c.ops, op)
	c.mu.Unlock()
	go op.run(params, start)
}

// free removes the operation from the socket unless the client's complete
// (or the socket's end) already did; true when it was ours.
func (op *wsOp) free() bool {
	c := op.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if op.base.Err() != nil {
		return false
	}
	c.takeOpLocked(op.id)
	return true
}

// last sends the operation's final message after freeing its id, so that
// a client reusing the id at once is not refused with 4409.
func (op *wsOp) last(msg []byte) {
	if op.free() {
		op.c.send(msg)
	}
}

func (op *wsOp) run(params *graphql.RawParams, start time.Time) {
	c := op.c
	pushed := false
	defer func() {
		if !pushed {
			op.end()
		}
	}()
	ctx := op.base
	var rc *graphql.OperationContext
	defer func() {
		if r := recover(); r != nil {
			pushed = false
			op.last(errorMessage(op.id, c.t.presenter(ctx, recovered(ctx, rc, r))))
		}
		if !pushed {
			op.free()
		}
	}()
	ctx = graphql.StartOperationTrace(ctx)
	params.ReadTime = graphql.TraceTiming{Start: start, End: graphql.Now()}
	params.Headers = c.headers
	rc, errs := c.exec.CreateOperationContext(ctx, params)
	if errs != nil {
		resp := c.exec.DispatchError(graphql.WithOperationContext(ctx, rc), errs)
		op.last(errorMessage(op.id, resp.Errors...))
		return
	}
	ctx = graphql.WithOperationContext(ctx, rc)
	ctx, end := resolvers.WithStreamEnd(ctx)
	ctx = context.WithValue(fastpath.WithPusher(ctx, op), operationEndKey{}, operationEnder(op))
	responses, ctx := c.exec.DispatchOperation(ctx, rc)
	if op.push != nil {
		// Served by pushes: no goroutine waits for the next value. The
		// first goes through gqlgen's response interceptors, as every
		// operation's first response does (its span ends there); then
		// gqlgen's handler, and the per-request state it holds, is let
		// go, and what its interceptors do for a later push Wake does:
		// the metrics.
		pushed = true
		if m := c.t.metrics; m != nil {
			name := m.names.label(rc.Operation.Name)
			op.events, op.dur = m.events.WithLabelValues(name, "ok"), m.eventDur.WithLabelValues(name)
		}
		op.mu.Lock()
		defer op.mu.Unlock()
		resp := responses(ctx)
		if resp == nil { // (only when it already ended)
			op.push = nil
			op.free()
			op.end()
			return
		}
		if !c.send(dataMessage("next", op.id, wsPayload(resp))) {
			op.push = nil
			op.end()
		}
		return
	}
	for {
		resp := responses(ctx)
		if resp == nil {
			break
		}
		if !c.send(dataMessage("next", op.id, wsPayload(resp))) {
			return
		}
	}
	op.finish(ctx, end)
}

// finish ends an operation whose stream ended: with an error message
// when its resolver ended it with errors, else with complete (nothing
// when the client completed it or the socket is closing).
func (op *wsOp) finish(ctx context.Context, end *resolvers.StreamEnd) {
	if errs := end.Errors(); len(errs) > 0 {
		list := make([]*gqlerror.Error, len(errs))
		for i, err := range errs {
			list[i] = op.c.t.presenter(ctx, err)
		}
		op.last(errorMessage(op.id, list...))
		return
	}
	op.last(dataMessage("complete", op.id, nil))
}

func recovered(ctx context.Context, rc *graphql.OperationContext, r any) error {
	if rc != nil {
		return rc.Recover(ctx, r)
	}
	return resolvers.RecoverPanic(ctx, r)
}

// Accept implements fastpath.Pusher: the subscription is served by
// pushes.
func (op *wsOp) Accept(push *fastpath.Push) {
	op.push = push
	op.onEnd(push.Stop)
}

// Wake implements fastpath.Pusher: the subscription's next value is
// sent from the caller's goroutine (the socket's write does not block).
func (op *wsOp) Wake() {
	op.mu.Lock()
	defer op.mu.Unlock()
	if op.push == nil || op.base.Err() != nil {
		return
	}
	defer func() {
		if r := recover(); r != nil {
			op.push = nil
			op.last(errorMessage(op.id, op.c.t.presenter(op.base, resolvers.RecoverPanic(op.base, r))))
			op.end()
		}
	}()
	start := time.Now()
	data := op.push.Next()
	if op.events != nil {
		op.events.Inc()
		op.dur.Observe(time.Since(start).Seconds())
	}
	if !op.c.send(nextMessage(op.id, data)) {
		op.push = nil
		op.end()
	}
}

// nextMessage is dataMessage("next", id, wsPayload(&graphql.Response{Data:
// data})) in one allocation.
func nextMessage(id string, data []byte) []byte {
	b := make([]byte, 0, len(data)+len(id)+48)
	b = append(b, `{"type":"next","id":`...)
	b = appendJSONString(b, id)
	b = append(b, `,"payload":{"data":`...)
	b = append(b, data...)
	return append(b, "}}"...)
}

func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c >= 0x7f || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// wsPayload is json.Marshal(resp), without reflection for the common
// response that is data alone (gqlgen's and the plans' data are compact
// JSON already, which json.Marshal would re-scan byte by byte).
func wsPayload(resp *graphql.Response) []byte {
	if len(resp.Errors) == 0 && resp.Label == "" && resp.Path == nil && resp.HasNext == nil && len(resp.Extensions) == 0 && len(resp.Data) > 0 && !needsEscape(resp.Data) {
		b := make([]byte, 0, len(resp.Data)+9)
		b = append(b, `{"data":`...)
		b = append(b, resp.Data...)
		return append(b, '}')
	}
	b, err := json.Marshal(resp)
	if err != nil {
		panic(err)
	}
	return b
}

// needsEscape reports whether json.Marshal would write data otherwise
// than as it is: it escapes <, > and & (and U+2028, U+2029) in strings.
func needsEscape(data []byte) bool {
	for _, b := range data {
		switch b {
		case '<', '>', '&', 0xe2:
			return true
		}
	}
	return false
}

func errorMessage(id string, errs ...*gqlerror.Error) []byte {
	b, err := json.Marshal(errs)
	if err != nil {
		panic(err)
	}
	return dataMessage("error", id, b)
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

func truncateReason(s string) string {
	const max = 123 // RFC 6455: a close frame's reason fits in 123 bytes
	if len(s) <= max {
		return s
	}
	return strings.ToValidUTF8(s[:max], "")
}

func newWSTransport(cfg Config, m *metrics) *wsTransport {
	if cfg.WebSocket.ReadLimit == 0 {
		cfg.WebSocket.ReadLimit = cfg.MaxBodyBytes // one message, one request body
	}
	ws := cfg.WebSocket.withDefaults()
	t := &wsTransport{
		cfg:       ws,
		keys:      cfg.Keys,
		origins:   cfg.OriginPatterns,
		presenter: presentError,
		addrSlots: newWSSlots(ws.MaxPerAddress),
		slots:     newWSSlots(ws.MaxPerUser),
		wheel:     newWheel(wheelTick),
		metrics:   m,
		// Four of the largest messages: more than an honest client
		// sends at once (a reconnect's subscribes are a few KiB).
		floodBytes: 4 * max(ws.ReadLimit, 64<<10),
	}
	t.up = t.newUpgrader()
	registerTransport(t)
	// Started with the first transport rather than the first socket, so
	// that its pollers are there from the start (an error is reported by
	// each upgrade).
	_, _ = eventLoop()
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
