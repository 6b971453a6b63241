package transport

import (
	"context"
	"encoding/binary"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/lesismal/nbio"
	nbws "github.com/lesismal/nbio/nbhttp/websocket"
)

// wsConn is one socket. While idle it is this struct, its operations and
// its place in the wheel: no goroutine, no buffer.
//
// Writes never block: a message is framed into a pooled buffer and handed
// to nbio, which writes what the kernel takes and keeps the rest until
// the socket is writable again. While nbio holds part of a message (in
// flight), further messages wait in the socket's queue, bounded by
// SendQueueBytes, and go out together, in one write, once the kernel has
// taken the one in flight; each write has WriteTimeout to be taken.
type wsConn struct {
	t  *wsTransport
	ws *nbws.Conn // parses what the peer sends
	nb *nbio.Conn // takes what is written

	// written counts the bytes the kernel took (nbio reports them);
	// handed, those given to nbio. inFlight is set while nbio holds bytes
	// of the last write: whoever clears it (the writer finding them taken
	// at once, or nbio's report that they were) sends the queue.
	written, handed atomic.Int64
	inFlight        atomic.Bool
	// attached is set once the socket is handed to the event loop. nbio's
	// pollers reach the socket through epoll, which the race detector
	// does not see as synchronisation: code they call loads attached
	// before anything else, which orders it after the socket's setup.
	attached atomic.Bool
	// unhandled counts the messages (and control frames) parsed and not
	// yet handled; inflow, the bytes read since there were none. nbio
	// reads whatever arrives, so this, not TCP's window, bounds what a
	// peer that sends faster than the server handles can make it hold.
	unhandled atomic.Int32
	inflow    atomic.Int64

	// base is what the socket's operations see of its upgrade request
	// (limitInfo); the socket cancels its operations itself rather than
	// through a context of its own, which would cost every socket and
	// operation a cancellation channel and a map of children.
	base context.Context

	mu     sync.Mutex
	state  wsState
	acked  bool
	code   int // the close code sent or answered with (0: none yet)
	queue  [][]byte
	queued int // bytes in queue
	// Deadlines, Unix nanoseconds (0: none): the write in flight's, the
	// init timeout's before connection_ack and the token's expiry after,
	// the next ping's, the close handshake's.
	writeBy, authBy, pingAt, closeBy int64
	pongDue                          bool // a ping is out and unanswered
	// opBase is ctx with the principal of connection_init; operations
	// derive from it.
	opBase  context.Context
	ops     []*wsOp
	release func() // the socket's place in its address's or its user's count
	exec    graphql.GraphExecutor
	headers http.Header
	done    func() // ends the socket in tally_websockets_open

	deadline   wheelEntry
	prev, next *wsConn // in wsTransport's list of open sockets
}

type wsState uint8

const (
	wsOpen    wsState = iota
	wsRefused         // accepted only to be closed: what the peer sends is ignored
	wsClosing         // a close frame is handed over; waiting for the peer's
	wsClosed          // the connection is gone
)

// WebSocket opcodes (RFC 6455).
const (
	opText  = 0x1
	opClose = 0x8
	opPing  = 0x9
	opPong  = 0xa
)

// maxFrameHeader is a server frame's longest header (no mask).
const maxFrameHeader = 10

func appendFrame(buf []byte, op byte, payload []byte) []byte {
	buf = append(buf, 0x80|op)
	switch n := len(payload); {
	case n < 126:
		buf = append(buf, byte(n))
	case n <= 0xffff:
		buf = append(buf, 126, byte(n>>8), byte(n))
	default:
		buf = append(buf, 127)
		buf = binary.BigEndian.AppendUint64(buf, uint64(n))
	}
	return append(buf, payload...)
}

// framePool holds write buffers: a socket holds one only while it writes.
var framePool = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// maxPooledFrame bounds the buffers kept in framePool: pushes are small,
// and a large message's buffer is not worth keeping.
const maxPooledFrame = 4 << 10

// send queues a graphql-transport-ws message; false when the socket is
// closing or was just dropped because its queue is full.
func (c *wsConn) send(msg []byte) bool { return c.frame(opText, msg) }

func (c *wsConn) frame(op byte, payload []byte) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state != wsOpen {
		return false
	}
	if c.inFlight.Load() || len(c.queue) > 0 {
		pending := c.handed.Load() - c.written.Load() + int64(c.queued)
		if pending > 0 && (pending+int64(len(payload)) > int64(c.t.cfg.SendQueueBytes) || len(c.queue) >= maxQueuedMessages) {
			c.dropSlowLocked()
			return false
		}
		c.queue = append(c.queue, appendFrame(make([]byte, 0, len(payload)+maxFrameHeader), op, payload))
		c.queued += len(payload) + maxFrameHeader
		return true
	}
	buf := framePool.Get().(*[]byte)
	*buf = appendFrame((*buf)[:0], op, payload)
	c.writeLocked(*buf)
	if cap(*buf) <= maxPooledFrame {
		framePool.Put(buf)
	}
	return true
}

// writeLocked hands b to nbio (which copies what the kernel does not take
// at once). Called with c.mu held and nothing in flight.
func (c *wsConn) writeLocked(b []byte) {
	handed := c.handed.Add(int64(len(b)))
	if _, err := c.nb.Write(b); err != nil {
		return // nbio closed the connection; finish follows
	}
	if c.written.Load() >= handed {
		return // the kernel took it all
	}
	c.inFlight.Store(true)
	// nbio may have reported the rest taken between the two loads.
	if c.written.Load() >= handed && c.inFlight.CompareAndSwap(true, false) {
		return
	}
	c.writeBy = time.Now().Add(c.t.cfg.WriteTimeout).UnixNano()
	c.rescheduleLocked()
}

// wrote is nbio's report that the kernel took n more bytes. It runs
// under nbio's lock of the connection, so it takes no lock of its own.
func (c *wsConn) wrote(n int) {
	c.attached.Load()
	if c.written.Add(int64(n)) >= c.handed.Load() && c.inFlight.CompareAndSwap(true, false) {
		go c.flush()
	}
}

// flush writes the queue, in one write, once nothing is in flight.
func (c *wsConn) flush() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.writeBy = 0
	if c.state == wsClosed || c.inFlight.Load() || len(c.queue) == 0 {
		c.rescheduleLocked()
		return
	}
	buf := make([]byte, 0, c.queued)
	for _, f := range c.queue {
		buf = append(buf, f...)
	}
	c.queue, c.queued = nil, 0
	c.writeLocked(buf)
	c.rescheduleLocked()
}

// dropSlowLocked closes a socket whose queue would outgrow SendQueueBytes:
// what it held is released at once, and a close frame follows whatever
// nbio holds.
func (c *wsConn) dropSlowLocked() {
	slog.Debug("WebSocket dropped: send queue full")
	c.queue, c.queued = nil, 0
	c.closeLocked(closeTryAgainLater, "Try again later: the client is reading too slowly")
}

// closeWith ends the socket with a close frame: messages already queued
// go first, the peer's close frame ends the connection, and closeGrace
// after the frame is handed over it is cut anyway.
func (c *wsConn) closeWith(code int, reason string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closeLocked(code, reason)
}

func (c *wsConn) closeLocked(code int, reason string) {
	if c.state != wsOpen && c.state != wsRefused {
		return
	}
	payload := binary.BigEndian.AppendUint16(make([]byte, 0, 2+len(reason)), uint16(code))
	payload = append(payload, reason...)
	if c.inFlight.Load() || len(c.queue) > 0 {
		c.queue = append(c.queue, appendFrame(nil, opClose, payload))
		c.queued += len(payload) + maxFrameHeader
	} else {
		c.writeLocked(appendFrame(make([]byte, 0, len(payload)+maxFrameHeader), opClose, payload))
	}
	c.closingLocked(code)
}

// closed records a close frame nbio sent itself.
func (c *wsConn) closed(code int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state == wsOpen {
		c.closingLocked(code)
	}
}

// closingLocked starts the close handshake's grace, once the close frame
// is handed over.
func (c *wsConn) closingLocked(code int) {
	c.state, c.code = wsClosing, code
	c.closeBy = time.Now().Add(closeGrace).UnixNano()
	c.rescheduleLocked()
	c.endOpsLocked()
	c.t.closes.WithLabelValues(strconv.Itoa(code)).Inc()
}

// peerClosed answers the peer's close frame (nbio then closes the
// connection): with the peer's code when the peer began the handshake,
// which ends here when the server began it.
func (c *wsConn) peerClosed(code int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state != wsOpen {
		return
	}
	echo := []byte{}
	if code != 1005 { // 1005: the peer's frame had no code
		echo = binary.BigEndian.AppendUint16(nil, uint16(code))
	}
	c.queue, c.queued = nil, 0
	if !c.inFlight.Load() {
		c.writeLocked(appendFrame(nil, opClose, echo))
	}
	c.state, c.code = wsClosing, closeNormal
	c.endOpsLocked()
	c.t.closes.WithLabelValues(strconv.Itoa(closeNormal)).Inc()
}

func (c *wsConn) ponged() {
	c.mu.Lock()
	c.pongDue = false
	c.mu.Unlock()
}

// onDeadline runs from the wheel when the socket's earliest deadline is
// due.
func (c *wsConn) onDeadline(now time.Time) {
	n := now.UnixNano()
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.state == wsClosed:
		return
	case c.closeBy != 0 && n >= c.closeBy:
		_ = c.nb.Close() // the peer did not answer the close frame
		return
	case c.writeBy != 0 && n >= c.writeBy && c.inFlight.Load():
		// The peer could not take one write in WriteTimeout: a close
		// frame would not get through either.
		slog.Debug("WebSocket dropped: write timed out")
		if c.state == wsOpen {
			c.state, c.code = wsClosing, -1
			c.t.closes.WithLabelValues("-1").Inc()
		}
		c.endOpsLocked()
		_ = c.nb.Close()
		return
	}
	if c.state != wsOpen {
		c.rescheduleLocked()
		return
	}
	if c.authBy != 0 && n >= c.authBy {
		if c.acked {
			c.closeLocked(closeForbidden, "Forbidden: token expired")
		} else {
			c.closeLocked(closeInitTimeout, "Connection initialisation timeout")
		}
		return
	}
	if c.pingAt != 0 && n >= c.pingAt {
		if c.pongDue {
			// No pong within an interval: the peer is gone.
			c.state, c.code = wsClosing, -1
			c.t.closes.WithLabelValues("-1").Inc()
			c.endOpsLocked()
			_ = c.nb.Close()
			return
		}
		c.pongDue = true
		c.pingAt = n + int64(c.t.cfg.PingInterval)
		if !c.inFlight.Load() && len(c.queue) == 0 {
			c.writeLocked(appendFrame(nil, opPing, nil))
		} else {
			c.queue = append(c.queue, appendFrame(nil, opPing, nil))
			c.queued += maxFrameHeader
		}
	}
	c.rescheduleLocked()
}

// rescheduleLocked puts the socket's earliest deadline in the wheel.
func (c *wsConn) rescheduleLocked() {
	var at int64
	for _, d := range []int64{c.closeBy, c.writeBy, c.authBy, c.pingAt} {
		if d != 0 && (at == 0 || d < at) {
			at = d
		}
	}
	if c.state == wsClosed {
		at = 0
	}
	if at == 0 {
		c.t.wheel.schedule(&c.deadline, time.Time{})
		return
	}
	c.t.wheel.schedule(&c.deadline, time.Unix(0, at))
}

// endOpsLocked ends the socket's operations (they stay listed until the
// socket is finished, so that their ids are not reused meanwhile).
func (c *wsConn) endOpsLocked() {
	for _, op := range c.ops {
		op.end()
	}
}

// finish runs once the connection is gone, whoever ended it: the socket's
// operations end and its places in the caps are given back.
func (c *wsConn) finish(err error) {
	c.mu.Lock()
	if c.state == wsClosed {
		c.mu.Unlock()
		return
	}
	if c.state == wsOpen || c.state == wsRefused {
		// The peer went away, or nbio refused what it sent.
		code := closeNormal
		var ce *nbws.CloseError
		switch {
		case errors.Is(err, nbws.ErrMessageTooLarge):
			code = closeMessageTooBig
		case errors.As(err, &ce):
			code = closeNormal
		}
		c.code = code
		c.t.closes.WithLabelValues(strconv.Itoa(code)).Inc()
	}
	c.state = wsClosed
	c.queue, c.queued = nil, 0
	ops := c.ops
	c.ops = nil
	release := c.release
	c.release = nil
	c.mu.Unlock()
	c.t.wheel.remove(&c.deadline)
	c.t.forget(c)
	for _, op := range ops {
		op.end()
	}
	if release != nil {
		release()
	}
	if c.done != nil {
		c.done()
	}
}
