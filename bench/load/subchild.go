package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/tally-dev/tally/bench/benchutil"
)

// Subscriber processes. A process may hold at most RLIMIT_NOFILE open
// sockets (a hard limit an unprivileged tool cannot raise), so the tool
// spreads its subscriptions over child processes: itself again, with
// -subs-child as the first argument. A child opens its share of the
// subscriptions, from its own loopback source addresses, and tells the
// parent on stdout, one line per event:
//
//	o I SYSTEM LIKES RED      subscription I is open; the badges of its first message
//	f I CODE                  subscription I failed to open (DIAL, INIT, CLOSE_4429, …)
//	r                         every subscription of the child has been tried
//	p I SYSTEM LIKES RED T    a push to subscription I, received at T
//	e I CODE                  subscription I got an error or complete, or ended
//
// RED is 1 or 0; T is CLOCK_MONOTONIC in nanoseconds (benchutil.Monotonic),
// which every process of the machine shares, so the parent subtracts from
// it the moment it sent the mutation. A child closes its sockets and exits
// when its stdin reaches its end (the parent is done, or died).

// childArgs are what a subscriber process is told on its command line;
// the secret (or the one token) comes in its environment.
type childArgs struct {
	urls     []string // …/query of each server; subscription I dials urls[I % len]
	first    int      // index of the child's first subscription
	count    int
	userBase uint64 // subscription I is user userBase + I
	sources  []string
}

func (a childArgs) flags() []string {
	return []string{"-subs-child", "-urls", strings.Join(a.urls, ","), "-first", strconv.Itoa(a.first),
		"-count", strconv.Itoa(a.count), "-user-base", strconv.FormatUint(a.userBase, 10), "-sources", strings.Join(a.sources, ",")}
}

func parseChildArgs(args []string) (childArgs, error) {
	var a childArgs
	fs := flag.NewFlagSet("load -subs-child", flag.ContinueOnError)
	urls := fs.String("urls", "", "comma-separated ws:// URLs of the servers")
	fs.IntVar(&a.first, "first", 0, "index of the first subscription")
	fs.IntVar(&a.count, "count", 0, "subscriptions to open")
	fs.Uint64Var(&a.userBase, "user-base", 0, "user of subscription 0")
	sources := fs.String("sources", "", "comma-separated local addresses to dial from (empty: the kernel's choice)")
	if err := fs.Parse(args); err != nil {
		return a, err
	}
	a.urls = strings.Split(*urls, ",")
	if *urls == "" || a.count < 1 || a.first < 0 || a.userBase == 0 {
		return a, fmt.Errorf("-subs-child needs -urls, -count and -user-base")
	}
	if *sources != "" {
		a.sources = strings.Split(*sources, ",")
	}
	return a, nil
}

// Environment of a subscriber process.
const (
	envSecret = "TALLY_JWT_SECRET"
	envToken  = "TALLY_LOAD_TOKEN" // without a secret: every subscription's token
)

// lineWriter serialises the child's lines onto stdout. It flushes every
// few milliseconds rather than per line: a broadcast makes a line per
// subscription at once, and the receipt time is in the line, so a later
// flush delays only the parent's counting, not the figures.
type lineWriter struct {
	mu sync.Mutex
	w  *bufio.Writer
}

func (l *lineWriter) line(fields ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, f := range fields {
		if i > 0 {
			l.w.WriteByte(' ')
		}
		fmt.Fprint(l.w, f)
	}
	l.w.WriteByte('\n')
}

func (l *lineWriter) flush() {
	l.mu.Lock()
	l.w.Flush()
	l.mu.Unlock()
}

func flag01(b bool) int {
	if b {
		return 1
	}
	return 0
}

// runSubsChild is the subscriber process.
func runSubsChild(args []string) error {
	a, err := parseChildArgs(args)
	if err != nil {
		return err
	}
	if _, err := raiseOpenFiles(a.count + 64); err != nil {
		return err
	}
	tok := &tokens{cache: map[uint64]string{}}
	if err := tok.setup(os.Getenv(envSecret), os.Getenv(envToken)); err != nil {
		return err
	}
	out := &lineWriter{w: bufio.NewWriterSize(os.Stdout, 1<<16)}
	stopFlush := make(chan struct{})
	flushed := make(chan struct{})
	go func() {
		defer close(flushed)
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				out.flush()
			case <-stopFlush:
				out.flush()
				return
			}
		}
	}()

	clients := []*http.Client{{}}
	if len(a.sources) > 0 {
		clients = clients[:0]
		for _, src := range a.sources {
			d := &net.Dialer{Timeout: 10 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
			clients = append(clients, &http.Client{Transport: &http.Transport{DialContext: d.DialContext}})
		}
	}
	ctx := context.Background()
	conns := make([]*websocket.Conn, a.count)
	var closing atomic.Bool
	var readers sync.WaitGroup
	// The server caps the sockets per address that have not sent
	// connection_init yet (tally: -ws-max-per-address; 16 in builds
	// before that flag), so each source address has 8 opening at a time.
	parallel(ctx, a.count, 8*len(clients), func(k int) {
		i := a.first + k
		conn, first, code, err := openSubscription(ctx, clients[k%len(clients)], a.urls[i%len(a.urls)], tok.user(a.userBase+uint64(i)))
		if err != nil {
			out.line("f", i, code)
			fmt.Fprintf(os.Stderr, "subscriber %d: %v\n", a.userBase+uint64(i), err)
			return
		}
		conns[k] = conn
		out.line("o", i, first.system, first.likes, flag01(first.red))
		readers.Go(func() { readSubscription(conn, i, out, &closing) })
	})
	out.line("r")
	out.flush()

	io.Copy(io.Discard, os.Stdin)
	closing.Store(true)
	var wg sync.WaitGroup
	for k, c := range conns {
		if c == nil {
			continue
		}
		wg.Go(func() { c.Close(websocket.StatusNormalClosure, "") })
		if k%256 == 255 {
			wg.Wait()
		}
	}
	wg.Wait()
	readers.Wait()
	close(stopFlush)
	<-flushed
	return nil
}

// badges is what the tool follows of an unreadChanged push.
type badges struct {
	system, likes int64
	red           bool
}

var subscribeMsg = func() []byte {
	b, _ := json.Marshal(map[string]any{"id": "1", "type": "subscribe", "payload": map[string]any{"query": subscription}})
	return b
}()

type wsMessage struct {
	Type    string `json:"type"`
	ID      string `json:"id"`
	Payload struct {
		Data *struct {
			UnreadChanged struct {
				Unread struct {
					System int64 `json:"system"`
					Likes  int64 `json:"likes"`
				} `json:"unread"`
				RedDot bool `json:"redDot"`
			} `json:"unreadChanged"`
		} `json:"data"`
		Errors []gqlError `json:"errors"`
	} `json:"payload"`
}

// scanPush reads the badges of a push without encoding/json, whose
// reflection was the larger part of a subscriber process's CPU per push:
// the subscriber processes share the machine's cores with the server
// they measure, so what they spend delays the pushes. It accepts only the
// bytes the server sends for subscription "1" (a "next" whose unread
// object holds integers only, then redDot) and reports false for
// anything else, which json.Unmarshal then reads.
func scanPush(msg []byte) (badges, bool) {
	const head = `{"type":"next","id":"1","payload":{"data":{"unreadChanged":{"unread":{`
	rest, ok := bytes.CutPrefix(msg, []byte(head))
	if !ok {
		return badges{}, false
	}
	var b badges
	var sawSystem, sawLikes bool
	for {
		if len(rest) == 0 || rest[0] != '"' {
			return badges{}, false
		}
		end := bytes.IndexByte(rest[1:], '"')
		if end < 0 || len(rest) < end+3 || rest[end+2] != ':' {
			return badges{}, false
		}
		name := rest[1 : end+1]
		if !graphQLName(name) {
			return badges{}, false // escapes and the like: encoding/json's to read
		}
		rest = rest[end+3:]
		n, size, ok := scanInt(rest)
		if !ok {
			return badges{}, false
		}
		switch string(name) {
		case "system":
			b.system, sawSystem = n, true
		case "likes":
			b.likes, sawLikes = n, true
		}
		rest = rest[size:]
		if len(rest) > 0 && rest[0] == '}' {
			rest = rest[1:]
			break
		}
		if len(rest) == 0 || rest[0] != ',' {
			return badges{}, false
		}
		rest = rest[1:]
	}
	switch {
	case !sawSystem || !sawLikes:
		return badges{}, false
	case string(rest) == `,"redDot":true}}}}`:
		b.red = true
	case string(rest) != `,"redDot":false}}}}`:
		return badges{}, false
	}
	return b, true
}

// graphQLName reports whether name is a GraphQL name, /[_A-Za-z][_0-9A-Za-z]*/
// (a JSON string that needs no unescaping).
func graphQLName(name []byte) bool {
	for i, c := range name {
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return len(name) > 0
}

// scanInt reads a JSON integer at the start of b: its value and length.
func scanInt(b []byte) (int64, int, bool) {
	size := 0
	if size < len(b) && b[size] == '-' {
		size++
	}
	digits := size
	for size < len(b) && b[size] >= '0' && b[size] <= '9' {
		size++
	}
	if size == digits || b[digits] == '0' && size > digits+1 {
		return 0, 0, false // no digits, or a leading zero JSON refuses
	}
	n, err := strconv.ParseInt(string(b[:size]), 10, 64)
	return n, size, err == nil
}

func (m *wsMessage) badges() badges {
	uc := m.Payload.Data.UnreadChanged
	return badges{system: uc.Unread.System, likes: uc.Unread.Likes, red: uc.RedDot}
}

// closeCode names how a socket ended: CLOSE_<code> for a close frame,
// else what.
func closeCode(what string, err error) string {
	if c := websocket.CloseStatus(err); c != -1 {
		return "CLOSE_" + strconv.Itoa(int(c))
	}
	return what
}

// openSubscription dials url as graphql-transport-ws, sends
// connection_init with token and subscribes to unreadChanged, and returns
// the socket with the badges of the first message; on failure, a code
// for the report and the error.
func openSubscription(ctx context.Context, hc *http.Client, url, token string) (*websocket.Conn, badges, string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for attempt := 0; ; attempt++ {
		conn, first, code, again, err := tryOpen(ctx, hc, url, token)
		if !again || attempt >= 50 {
			return conn, first, code, err
		}
		// The per-address cap on uninitialised sockets: tally closes the
		// socket with 1013 (builds before that answered the upgrade 429).
		time.Sleep(100 * time.Millisecond)
	}
}

// tryOpen is one attempt of openSubscription; again reports a refusal by
// the per-address cap.
func tryOpen(ctx context.Context, hc *http.Client, url, token string) (_ *websocket.Conn, _ badges, code string, again bool, _ error) {
	conn, resp, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPClient: hc, Subprotocols: []string{"graphql-transport-ws"}})
	if err != nil {
		return nil, badges{}, "DIAL", resp != nil && resp.StatusCode == http.StatusTooManyRequests, err
	}
	conn.SetReadLimit(1 << 20)
	fail := func(what string, err error) (*websocket.Conn, badges, string, bool, error) {
		conn.CloseNow()
		return nil, badges{}, closeCode(what, err), websocket.CloseStatus(err) == websocket.StatusTryAgainLater, fmt.Errorf("%s: %w", what, err)
	}
	init, _ := json.Marshal(map[string]any{"type": "connection_init", "payload": map[string]string{"Authorization": "Bearer " + token}})
	if err := conn.Write(ctx, websocket.MessageText, init); err != nil {
		return fail("INIT", err)
	}
	_, msg, err := conn.Read(ctx)
	if err != nil {
		return fail("INIT", err)
	}
	if !bytes.Contains(msg, []byte(`"connection_ack"`)) {
		return fail("INIT", fmt.Errorf("expected connection_ack, got %.200s", msg))
	}
	if err := conn.Write(ctx, websocket.MessageText, subscribeMsg); err != nil {
		return fail("SUBSCRIBE", err)
	}
	_, msg, err = conn.Read(ctx)
	if err != nil {
		return fail("SUBSCRIBE", err)
	}
	var m wsMessage
	if json.Unmarshal(msg, &m) != nil || m.Type != "next" || m.Payload.Data == nil {
		code := "SUBSCRIBE"
		if len(m.Payload.Errors) > 0 {
			code = m.Payload.Errors[0].Extensions.Code
		}
		return fail(code, fmt.Errorf("first message: %.200s", msg))
	}
	return conn, m.badges(), "", false, nil
}

// readSubscription reports every push of subscription i until it ends.
func readSubscription(conn *websocket.Conn, i int, out *lineWriter, closing *atomic.Bool) {
	for {
		_, msg, err := conn.Read(context.Background())
		if err != nil {
			if !closing.Load() {
				out.line("e", i, closeCode("READ", err))
			}
			return
		}
		at := benchutil.Monotonic()
		if b, ok := scanPush(msg); ok {
			out.line("p", i, b.system, b.likes, flag01(b.red), int64(at))
			continue
		}
		var m wsMessage
		if err := json.Unmarshal(msg, &m); err != nil {
			out.line("e", i, "BAD_MESSAGE")
			continue
		}
		switch m.Type {
		case "next":
			if m.Payload.Data == nil {
				out.line("e", i, "NEXT_WITHOUT_DATA")
				continue
			}
			b := m.badges()
			out.line("p", i, b.system, b.likes, flag01(b.red), int64(at))
		case "error":
			code := "ERROR"
			if len(m.Payload.Errors) > 0 {
				code = "ERROR_" + m.Payload.Errors[0].Extensions.Code
			}
			out.line("e", i, code)
		case "complete":
			out.line("e", i, "COMPLETE")
		}
	}
}
