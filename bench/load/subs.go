package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
)

// subscribers holds N open unreadChanged subscriptions, one WebSocket per
// user, and measures how long each broadcast takes to reach each of them.
//
// A subscriber's first message carries its badges (unread.system = s0).
// Subscribers are users the load never touches otherwise, so only this
// tool's broadcasts change their badges: the j-th system notification
// published after every subscription is open makes unread.system = s0 + j.
// A push showing s0 + j therefore delivers broadcasts up to j (a slow
// subscriber may skip to the latest value), and its delivery latency is
// its arrival minus the moment the j-th publish was sent.
type subscribers struct {
	url   string
	conns []*subscriber
	log   broadcastLog

	mu       sync.Mutex
	delivery map[string]*hist // by phase
	late     map[string]int64 // deliveries later than 1 s, by phase
	codes    map[string]int64 // how subscriptions ended or failed to open
	pushes   atomic.Int64
	stray    atomic.Int64 // pushes no broadcast of this tool explains
	closing  atomic.Bool
	openTime time.Duration
	redCount int // subscribers whose red dot was off when opened
}

type subscriber struct {
	conn       *websocket.Conn
	user       uint64
	baseSystem int64
	lastSystem int64
	red        bool
}

// broadcast is one publish: when it was sent, and how many subscribers
// have it.
type broadcast struct {
	phase     string
	red       bool
	t0        time.Time
	delivered atomic.Int64
	maxLat    atomic.Int64
}

type broadcastLog struct {
	mu  sync.RWMutex
	sys []*broadcast // the j-th system notification is sys[j-1]
	red *broadcast
}

func (l *broadcastLog) system(j int64) *broadcast {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if j < 1 || j > int64(len(l.sys)) {
		return nil
	}
	return l.sys[j-1]
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
				} `json:"unread"`
				RedDot bool `json:"redDot"`
			} `json:"unreadChanged"`
		} `json:"data"`
		Errors []gqlError `json:"errors"`
	} `json:"payload"`
}

// openSubscribers opens n subscriptions for users base, base+1, … and
// waits for each one's first message. The server counts sockets that have
// not sent connection_init yet per remote address (16 by default), so a
// few are opened at a time, spread over several loopback source addresses.
func openSubscribers(ctx context.Context, baseURL string, n int, base uint64, tok *tokens, out *report) (*subscribers, error) {
	s := &subscribers{url: "ws" + strings.TrimPrefix(baseURL, "http") + "/query",
		delivery: map[string]*hist{}, late: map[string]int64{}, codes: map[string]int64{}}
	s.conns = make([]*subscriber, n)
	start := time.Now()
	const sources = 4
	clients := make([]*http.Client, sources)
	for i := range clients {
		d := &net.Dialer{Timeout: 10 * time.Second}
		if i > 0 && strings.Contains(baseURL, "://127.") {
			d.LocalAddr = &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(1+i))}
		}
		clients[i] = &http.Client{Transport: &http.Transport{DialContext: d.DialContext}}
	}
	var failed atomic.Int64
	parallel(ctx, n, 8*sources, func(i int) {
		sub, err := s.open(ctx, clients[i%sources], base+uint64(i), tok)
		if err != nil {
			if failed.Add(1) == 1 {
				out.printf("subscriber %d: %v\n", base+uint64(i), err)
			}
			return
		}
		s.conns[i] = sub
	})
	s.openTime = time.Since(start)
	open := s.conns[:0]
	for _, c := range s.conns {
		if c != nil {
			open = append(open, c)
			if !c.red {
				s.redCount++
			}
		}
	}
	s.conns = open
	for _, c := range s.conns {
		go s.read(c)
	}
	if f := failed.Load(); f > 0 {
		return s, fmt.Errorf("%d of %d subscriptions failed to open", f, n)
	}
	return s, nil
}

func (s *subscribers) count(code string) {
	s.mu.Lock()
	s.codes[code]++
	s.mu.Unlock()
}

func (s *subscribers) open(ctx context.Context, hc *http.Client, user uint64, tok *tokens) (*subscriber, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var conn *websocket.Conn
	var err error
	for attempt := 0; ; attempt++ {
		var resp *http.Response
		conn, resp, err = websocket.Dial(ctx, s.url, &websocket.DialOptions{HTTPClient: hc, Subprotocols: []string{"graphql-transport-ws"}})
		if err == nil {
			break
		}
		if resp != nil && resp.StatusCode == http.StatusTooManyRequests && attempt < 50 {
			time.Sleep(100 * time.Millisecond) // the per-address cap on uninitialised sockets
			continue
		}
		s.count("DIAL")
		return nil, err
	}
	conn.SetReadLimit(1 << 20)
	fail := func(what string, err error) (*subscriber, error) {
		code := what
		if c := websocket.CloseStatus(err); c != -1 {
			code = "CLOSE_" + strconv.Itoa(int(c))
		}
		s.count(code)
		conn.CloseNow()
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	init, _ := json.Marshal(map[string]any{"type": "connection_init", "payload": map[string]string{"Authorization": "Bearer " + tok.user(user)}})
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
	sub := &subscriber{conn: conn, user: user,
		baseSystem: m.Payload.Data.UnreadChanged.Unread.System, red: m.Payload.Data.UnreadChanged.RedDot}
	sub.lastSystem = sub.baseSystem
	return sub, nil
}

// read takes every push of one subscription until it ends.
func (s *subscribers) read(c *subscriber) {
	for {
		_, msg, err := c.conn.Read(context.Background())
		if err != nil {
			if !s.closing.Load() {
				code := "READ"
				if st := websocket.CloseStatus(err); st != -1 {
					code = "CLOSE_" + strconv.Itoa(int(st))
				}
				s.count(code)
			}
			return
		}
		now := time.Now()
		var m wsMessage
		if err := json.Unmarshal(msg, &m); err != nil {
			s.count("BAD_MESSAGE")
			continue
		}
		switch m.Type {
		case "next":
		case "error":
			code := "ERROR"
			if len(m.Payload.Errors) > 0 {
				code = "ERROR_" + m.Payload.Errors[0].Extensions.Code
			}
			s.count(code)
			continue
		case "complete":
			s.count("COMPLETE")
			continue
		default:
			continue
		}
		if m.Payload.Data == nil {
			s.count("NEXT_WITHOUT_DATA")
			continue
		}
		s.pushes.Add(1)
		uc := m.Payload.Data.UnreadChanged
		explained := false
		for v := c.lastSystem + 1; v <= uc.Unread.System; v++ {
			if b := s.log.system(v - c.baseSystem); b != nil {
				s.delivered(b, now)
				explained = true
			}
		}
		c.lastSystem = max(c.lastSystem, uc.Unread.System)
		if uc.RedDot && !c.red {
			s.log.mu.RLock()
			b := s.log.red
			s.log.mu.RUnlock()
			if b != nil {
				s.delivered(b, now)
				explained = true
			}
		}
		c.red = uc.RedDot
		if !explained {
			s.stray.Add(1)
		}
	}
}

func (s *subscribers) delivered(b *broadcast, now time.Time) {
	lat := now.Sub(b.t0)
	b.delivered.Add(1)
	for {
		m := b.maxLat.Load()
		if int64(lat) <= m || b.maxLat.CompareAndSwap(m, int64(lat)) {
			break
		}
	}
	s.mu.Lock()
	h := s.delivery[b.phase]
	if h == nil {
		h = &hist{}
		s.delivery[b.phase] = h
	}
	h.record(lat)
	if lat > time.Second {
		s.late[b.phase]++
	}
	s.mu.Unlock()
}

// publish sends one system notification as the admin, recording when it
// was sent before sending it (so a push cannot arrive before its record).
// A refused publish is taken back out of the log; one without a definite
// answer is retried with its idempotency key.
func (s *subscribers) publish(g *gql, w *world, phase string, c *counts, buf *bytes.Buffer) *broadcast {
	b := &broadcast{phase: phase}
	var n int
	if s != nil {
		s.log.mu.Lock()
		s.log.sys = append(s.log.sys, b)
		n = len(s.log.sys)
		s.log.mu.Unlock()
	}
	body := request(publishMut, map[string]any{"t": "load " + phase, "b": fmt.Sprintf("broadcast %d of the load tool", n),
		"k": fmt.Sprintf("load-%s-%s-%d-%d", w.runID, phase, n, time.Now().UnixNano())})
	b.t0 = time.Now()
	r := g.post(context.Background(), w.adminToken, body, buf)
	d := time.Since(b.t0)
	code := classify(r)
	if code == "" {
		c.ok++
		c.lat.record(d)
	} else {
		c.fail(code, errExample(r))
	}
	for attempt := 0; ambiguous(code) && attempt < 4; attempt++ {
		time.Sleep(time.Duration(50<<attempt) * time.Millisecond)
		code = classify(g.post(context.Background(), w.adminToken, body, buf))
	}
	if code != "" {
		if s != nil && !ambiguous(code) {
			s.log.mu.Lock()
			s.log.sys = s.log.sys[:len(s.log.sys)-1]
			s.log.mu.Unlock()
		}
		if ambiguous(code) {
			w.ledger.mu.Lock()
			w.ledger.ambiguousPublish++
			w.ledger.mu.Unlock()
		}
		return nil
	}
	return b
}

// pushRedDot sends pushRedDot as the admin, logged like publish.
func (s *subscribers) pushRedDot(g *gql, w *world, phase string, c *counts) *broadcast {
	b := &broadcast{phase: phase, red: true}
	s.log.mu.Lock()
	s.log.red = b
	s.log.mu.Unlock()
	var buf bytes.Buffer
	b.t0 = time.Now()
	r := g.post(context.Background(), w.adminToken, request(redDotMut, nil), &buf)
	d := time.Since(b.t0)
	if code := classify(r); code != "" {
		c.fail(code, errExample(r))
		return nil
	}
	c.ok++
	c.lat.record(d)
	return b
}

// broadcastResult is the quiet broadcast check: each round is one push to
// every open subscription, with nothing else running.
type broadcastResult struct {
	Subs          int
	Rounds        []roundResult
	Delivery      map[string]*hist
	Late          map[string]int64
	Expected      map[string]int64
	Codes         map[string]int64
	Stray         int64
	AllWithin1s   bool
	CPUPerPush    time.Duration // server CPU of a round over the subscribers it reached (-1: unknown)
	ToolCPUPerMsg time.Duration
}

type roundResult struct {
	Kind      string
	Delivered int64
	Max       time.Duration
	ServerCPU time.Duration
	ToolCPU   time.Duration
	Wall      time.Duration
}

// check runs rounds broadcasts one at a time: a red-dot push first when
// every subscriber's red dot is off, then system notifications. A round
// ends when every subscriber has the push or after 5 s.
func (s *subscribers) check(g *gql, w *world, srv *server, rounds int) *broadcastResult {
	res := &broadcastResult{Subs: len(s.conns), CPUPerPush: -1}
	bc := &counts{}
	var buf bytes.Buffer
	var cpuSum, toolSum time.Duration
	var reached int64
	cpuKnown := true
	for r := range rounds {
		time.Sleep(300 * time.Millisecond) // let the previous round's garbage and timers settle
		cpu0, tool0 := srv.cpu(), toolCPU()
		var b *broadcast
		kindName := "system"
		if r == 0 && s.redCount == len(s.conns) {
			b, kindName = s.pushRedDot(g, w, "quiet", bc), "redDot"
		} else {
			b = s.publish(g, w, "quiet", bc, &buf)
		}
		if b == nil {
			res.Rounds = append(res.Rounds, roundResult{Kind: kindName + " (refused)"})
			continue
		}
		deadline := b.t0.Add(5 * time.Second)
		for b.delivered.Load() < int64(len(s.conns)) && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		wall := time.Since(b.t0)
		cpu1, tool1 := srv.cpu(), toolCPU()
		rr := roundResult{Kind: kindName, Delivered: b.delivered.Load(), Max: time.Duration(b.maxLat.Load()),
			ToolCPU: tool1 - tool0, Wall: wall, ServerCPU: -1}
		if cpu0 >= 0 && cpu1 >= 0 {
			rr.ServerCPU = cpu1 - cpu0
			cpuSum += rr.ServerCPU
		} else {
			cpuKnown = false
		}
		toolSum += rr.ToolCPU
		reached += rr.Delivered
		res.Rounds = append(res.Rounds, rr)
	}
	if reached > 0 {
		if cpuKnown {
			res.CPUPerPush = cpuSum / time.Duration(reached)
		}
		res.ToolCPUPerMsg = toolSum / time.Duration(reached)
	}
	return res
}

// summary gathers the delivery figures of every phase.
func (s *subscribers) summary(res *broadcastResult) {
	s.mu.Lock()
	defer s.mu.Unlock()
	res.Delivery, res.Late, res.Codes, res.Expected = map[string]*hist{}, map[string]int64{}, map[string]int64{}, map[string]int64{}
	for k, v := range s.delivery {
		h := *v
		res.Delivery[k] = &h
	}
	for k, v := range s.late {
		res.Late[k] = v
	}
	for k, v := range s.codes {
		res.Codes[k] = v
	}
	s.log.mu.RLock()
	for _, b := range s.log.sys {
		res.Expected[b.phase] += int64(len(s.conns))
	}
	if s.log.red != nil {
		res.Expected[s.log.red.phase] += int64(len(s.conns))
	}
	s.log.mu.RUnlock()
	res.Stray = s.stray.Load()
	res.AllWithin1s = true
	for phase, want := range res.Expected {
		got := int64(0)
		if h := res.Delivery[phase]; h != nil {
			got = int64(h.n)
		}
		if got < want || res.Late[phase] > 0 {
			res.AllWithin1s = false
		}
	}
}

func (s *subscribers) close() {
	if s == nil {
		return
	}
	s.closing.Store(true)
	var wg sync.WaitGroup
	for i, c := range s.conns {
		wg.Go(func() { c.conn.Close(websocket.StatusNormalClosure, "") })
		if i%256 == 255 {
			wg.Wait()
		}
	}
	wg.Wait()
}

var errNoAdmin = errors.New("broadcasts need an admin token: set -secret (or TALLY_JWT_SECRET) or -admin-token")
