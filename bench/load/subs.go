package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tally-dev/tally/bench/benchutil"
)

// subscribers holds N open unreadChanged subscriptions, one WebSocket and
// one user each, in subscriber processes (subchild.go), and measures how
// long each broadcast and each like takes to reach its subscribers.
//
// A subscriber's first message carries its badges (unread.system = s0).
// Subscribers are users the load never touches otherwise, so only this
// tool changes their badges: the j-th system notification published
// after every subscription is open makes unread.system = s0 + j. A push
// showing s0 + j therefore delivers broadcasts up to j (a slow subscriber
// may skip to the latest value), and its delivery latency is its arrival
// minus the moment the j-th publish was sent. The red dot turns on once,
// with the first pushRedDot. The first -sub-likes subscribers own a post,
// which the like round likes once each: the owner's unread.likes goes up
// by one, and that push's arrival minus the moment the like was sent is
// the like's latency. Every time is CLOCK_MONOTONIC, which the
// subscriber processes share with this one.
type subscribers struct {
	procs []*subProc
	conns []*subscriber // by index; nil: did not open
	open  int
	log   broadcastLog

	mu       sync.Mutex
	delivery map[string]*hist // by phase
	late     map[string]int64 // deliveries later than 1 s, by phase
	codes    map[string]int64 // how subscriptions ended or failed to open
	pushes   atomic.Int64
	stray    atomic.Int64 // pushes no broadcast or like of this tool explains
	redOff   atomic.Int64 // subscribers whose red dot was off when opened
	closing  atomic.Bool
	openTime time.Duration
}

// subProc is one subscriber process.
type subProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	ready chan struct{} // it has tried every subscription of its share
	done  chan struct{} // its stdout is read to the end and it has exited
}

// subscriber is the parent's account of one subscription; only the
// goroutine following its process touches it once it is open.
type subscriber struct {
	idx        int
	baseSystem int64
	lastSystem int64
	lastLikes  int64
	red        bool
}

// broadcast is one publish or like: when it was sent, how many
// subscribers it should reach and how many it has.
type broadcast struct {
	phase     string
	expect    int64
	t0        time.Duration // benchutil.Monotonic when sent
	delivered atomic.Int64
	maxLat    atomic.Int64
}

type broadcastLog struct {
	mu    sync.RWMutex
	sys   []*broadcast // the j-th system notification is sys[j-1]
	red   *broadcast
	likes map[int]*broadcast // the like on subscription i's post
}

func (l *broadcastLog) system(j int64) *broadcast {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if j < 1 || j > int64(len(l.sys)) {
		return nil
	}
	return l.sys[j-1]
}

func (l *broadcastLog) redDot() *broadcast {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.red
}

func (l *broadcastLog) like(i int) *broadcast {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.likes[i]
}

// subsSetup says where and as whom the subscriptions are opened.
type subsSetup struct {
	bases      []string // servers; subscription I goes to bases[I % len]
	n          int
	userBase   uint64 // subscription I is user userBase + I
	perProcess int
	secret     string
	token      string // without a secret
}

// openSubscribers starts the subscriber processes, ceil(n / perProcess)
// of them, and waits until each has tried its share. Process k dials from
// 127.0.k.1 to 127.0.k.4 when the servers are on loopback: the server
// caps sockets not yet initialised per remote address, and the kernel's
// ports are per source address.
func openSubscribers(ctx context.Context, setup subsSetup, out *report) (*subscribers, error) {
	s := &subscribers{conns: make([]*subscriber, setup.n), log: broadcastLog{likes: map[int]*broadcast{}},
		delivery: map[string]*hist{}, late: map[string]int64{}, codes: map[string]int64{}}
	urls := make([]string, len(setup.bases))
	loopback := true
	for i, b := range setup.bases {
		urls[i] = "ws" + strings.TrimPrefix(b, "http") + "/query"
		loopback = loopback && strings.Contains(b, "://127.")
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	start := time.Now()
	for k, first := 0, 0; first < setup.n; k, first = k+1, first+setup.perProcess {
		a := childArgs{urls: urls, first: first, count: min(setup.perProcess, setup.n-first), userBase: setup.userBase}
		if loopback {
			for j := range 4 {
				a.sources = append(a.sources, fmt.Sprintf("127.0.%d.%d", k, j+1))
			}
		}
		p, err := s.startProc(ctx, self, a, setup)
		if err != nil {
			s.close()
			return nil, err
		}
		s.procs = append(s.procs, p)
	}
	for _, p := range s.procs {
		select {
		case <-p.ready:
		case <-p.done:
		case <-ctx.Done():
			s.close()
			return nil, ctx.Err()
		}
	}
	s.openTime = time.Since(start)
	for _, c := range s.conns {
		if c != nil {
			s.open++
		}
	}
	if f := setup.n - s.open; f > 0 {
		out.printf("subscriber processes: %d of %d subscriptions failed to open (their stderr above says why)\n", f, setup.n)
		return s, fmt.Errorf("%d of %d subscriptions failed to open", f, setup.n)
	}
	return s, nil
}

func (s *subscribers) startProc(ctx context.Context, self string, a childArgs, setup subsSetup) (*subProc, error) {
	cmd := exec.Command(self, a.flags()...)
	cmd.Env = append(os.Environ(), envSecret+"="+setup.secret, envToken+"="+setup.token)
	cmd.Stderr = os.Stderr
	// A subscriber process must not outlive the tool, whatever ends it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting a subscriber process: %w", err)
	}
	p := &subProc{cmd: cmd, stdin: stdin, ready: make(chan struct{}), done: make(chan struct{})}
	go func() {
		s.follow(p, stdout)
		cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// follow reads a subscriber process's lines until its stdout ends.
func (s *subscribers) follow(p *subProc, stdout io.Reader) {
	sc := bufio.NewScanner(stdout)
	bad := func(line string) {
		s.count("BAD_LINE")
		fmt.Fprintf(os.Stderr, "load: a subscriber process wrote %q\n", line)
	}
	for sc.Scan() {
		line := sc.Text()
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if f[0] == "r" {
			close(p.ready)
			continue
		}
		if len(f) < 3 {
			bad(line)
			continue
		}
		i, err := strconv.Atoi(f[1])
		if err != nil || i < 0 || i >= len(s.conns) {
			bad(line)
			continue
		}
		switch f[0] {
		case "f":
			s.count(f[2])
		case "e":
			if !s.closing.Load() {
				s.count(f[2])
			}
		case "o", "p":
			v, ok := parseInts(f[2:])
			if !ok || (f[0] == "o" && len(v) != 3) || (f[0] == "p" && len(v) != 4) {
				bad(line)
				continue
			}
			b := badges{system: v[0], likes: v[1], red: v[2] == 1}
			if f[0] == "o" {
				s.conns[i] = &subscriber{idx: i, baseSystem: b.system, lastSystem: b.system, lastLikes: b.likes, red: b.red}
				if !b.red {
					s.redOff.Add(1)
				}
				continue
			}
			if c := s.conns[i]; c != nil {
				s.receive(c, b, time.Duration(v[3]))
			} else {
				bad(line)
			}
		default:
			bad(line)
		}
	}
}

func parseInts(f []string) ([]int64, bool) {
	v := make([]int64, len(f))
	for i, s := range f {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return nil, false
		}
		v[i] = n
	}
	return v, true
}

func (s *subscribers) count(code string) {
	s.mu.Lock()
	s.codes[code]++
	s.mu.Unlock()
}

// receive accounts one push to c, which arrived at at.
func (s *subscribers) receive(c *subscriber, b badges, at time.Duration) {
	s.pushes.Add(1)
	explained := false
	for v := c.lastSystem + 1; v <= b.system; v++ {
		if bc := s.log.system(v - c.baseSystem); bc != nil {
			s.delivered(bc, at)
			explained = true
		}
	}
	c.lastSystem = max(c.lastSystem, b.system)
	if b.red && !c.red {
		if bc := s.log.redDot(); bc != nil {
			s.delivered(bc, at)
			explained = true
		}
	}
	c.red = b.red
	if b.likes > c.lastLikes {
		if bc := s.log.like(c.idx); bc != nil && bc.delivered.Load() == 0 {
			s.delivered(bc, at)
			explained = true
		}
		c.lastLikes = b.likes
	}
	if !explained {
		s.stray.Add(1)
	}
}

func (s *subscribers) delivered(b *broadcast, at time.Duration) {
	lat := at - b.t0
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
		b.expect = int64(s.open)
		s.log.mu.Lock()
		s.log.sys = append(s.log.sys, b)
		n = len(s.log.sys)
		s.log.mu.Unlock()
	}
	body := request(publishMut, map[string]any{"t": "load " + phase, "b": fmt.Sprintf("broadcast %d of the load tool", n),
		"k": fmt.Sprintf("load-%s-%s-%d-%d", w.runID, phase, n, time.Now().UnixNano())})
	start := time.Now()
	b.t0 = benchutil.Monotonic()
	r := g.post(context.Background(), w.adminToken, body, buf)
	d := time.Since(start)
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
func (s *subscribers) pushRedDot(g *gql, w *world, c *counts) *broadcast {
	b := &broadcast{phase: "redDot", expect: int64(s.open)}
	s.log.mu.Lock()
	s.log.red = b
	s.log.mu.Unlock()
	var buf bytes.Buffer
	start := time.Now()
	b.t0 = benchutil.Monotonic()
	r := g.post(context.Background(), w.adminToken, request(redDotMut, nil), &buf)
	d := time.Since(start)
	if code := classify(r); code != "" {
		c.fail(code, errExample(r))
		s.log.mu.Lock()
		s.log.red = nil
		s.log.mu.Unlock()
		return nil
	}
	c.ok++
	c.lat.record(d)
	return b
}

// ownPosts has each of the first n subscription users create a post (the
// one the like round likes), before their subscriptions open.
func ownPosts(ctx context.Context, g *gql, w *world, n int, userBase uint64, tok *tokens) ([]string, error) {
	s := &seeder{g: g, w: w, runID: w.runID}
	posts := make([]string, n)
	var mu sync.Mutex
	var firstErr error
	parallel(ctx, n, 16, func(i int) {
		body := request(createPostMut, map[string]any{"k": fmt.Sprintf("load-%s-subpost-%d", w.runID, i)})
		r, code := s.do(ctx, tok.user(userBase+uint64(i)), body, true)
		id := ""
		if code == "" {
			id = postOf(r.body)
		}
		mu.Lock()
		defer mu.Unlock()
		if id == "" && firstErr == nil {
			firstErr = fmt.Errorf("a subscriber's post: %s: %s", code, errExample(r))
		}
		posts[i] = id
	})
	return posts, firstErr
}

// likeRound likes the post of each subscription that owns one (posts[i]
// is subscription i's), one like at a time, each by another user of the
// world, and waits until every owner has its push or 5 s have passed.
func (s *subscribers) likeRound(g *gql, w *world, servers []*server, posts []string) roundResult {
	var buf bytes.Buffer
	var sent []*broadcast
	cpu0, tool0 := s.cpu(servers)
	start := time.Now()
	for i, p := range posts {
		if s.conns[i] == nil {
			continue
		}
		b := &broadcast{phase: "like", expect: 1}
		s.log.mu.Lock()
		s.log.likes[i] = b
		s.log.mu.Unlock()
		b.t0 = benchutil.Monotonic()
		r := g.post(context.Background(), w.userTokens[i%len(w.userTokens)], request(likeMutation, map[string]any{"p": p}), &buf)
		if code := classify(r); code != "" || !bytes.Contains(r.body, []byte(`"viewerHasLiked":true`)) {
			s.count("LIKE_" + code)
			s.log.mu.Lock()
			delete(s.log.likes, i)
			s.log.mu.Unlock()
			continue
		}
		sent = append(sent, b)
	}
	deadline := time.Now().Add(5 * time.Second)
	rr := roundResult{Kind: "like", ServerCPU: -1}
	for {
		rr.Delivered = 0
		for _, b := range sent {
			rr.Delivered += b.delivered.Load()
		}
		if rr.Delivered >= int64(len(sent)) || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	for _, b := range sent {
		rr.Max = max(rr.Max, time.Duration(b.maxLat.Load()))
	}
	rr.Wall = time.Since(start)
	cpu1, tool1 := s.cpu(servers)
	rr.ToolCPU = tool1 - tool0
	if cpu0 >= 0 && cpu1 >= 0 {
		rr.ServerCPU = cpu1 - cpu0
	}
	return rr
}

// cpu is the servers' CPU so far (-1: unknown) and the tool's, its
// subscriber processes included.
func (s *subscribers) cpu(servers []*server) (srv, tool time.Duration) {
	srv = 0
	for _, t := range servers {
		c := t.cpu()
		if c < 0 || srv < 0 {
			srv = -1
			continue
		}
		srv += c
	}
	if len(servers) == 0 {
		srv = -1
	}
	tool = toolCPU()
	for _, p := range s.procs {
		tool += max(benchutil.ProcCPU(p.cmd.Process.Pid), 0)
	}
	return srv, tool
}

// broadcastResult is the quiet check: each round is one push to every
// open subscription, with nothing else running, then the like round.
type broadcastResult struct {
	Subs          int
	Rounds        []roundResult
	Delivery      map[string]*hist
	Late          map[string]int64
	Expected      map[string]int64
	Codes         map[string]int64
	Stray         int64
	AllWithin1s   bool
	CPUPerPush    time.Duration // server CPU of the broadcast rounds over the pushes they delivered (-1: unknown)
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
// ends when every subscriber has the push or after 5 s. Then the like
// round, when subscribers own posts.
func (s *subscribers) check(g *gql, w *world, servers []*server, rounds int, posts []string) *broadcastResult {
	res := &broadcastResult{Subs: s.open, CPUPerPush: -1}
	bc := &counts{}
	var buf bytes.Buffer
	var cpuSum, toolSum time.Duration
	var reached int64
	cpuKnown := true
	for r := range rounds {
		time.Sleep(300 * time.Millisecond) // let the previous round's garbage and timers settle
		cpu0, tool0 := s.cpu(servers)
		var b *broadcast
		kindName := "system"
		if r == 0 && s.redOff.Load() == int64(s.open) {
			b, kindName = s.pushRedDot(g, w, bc), "redDot"
		} else {
			b = s.publish(g, w, "system", bc, &buf)
		}
		if b == nil {
			res.Rounds = append(res.Rounds, roundResult{Kind: kindName + " (refused)"})
			continue
		}
		deadline := time.Now().Add(5 * time.Second)
		for b.delivered.Load() < b.expect && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		wall := benchutil.Monotonic() - b.t0
		cpu1, tool1 := s.cpu(servers)
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
	if len(posts) > 0 {
		time.Sleep(300 * time.Millisecond)
		rr := s.likeRound(g, w, servers, posts)
		res.Rounds = append(res.Rounds, rr)
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
		res.Expected[b.phase] += b.expect
	}
	if s.log.red != nil {
		res.Expected[s.log.red.phase] += s.log.red.expect
	}
	for _, b := range s.log.likes {
		res.Expected[b.phase] += b.expect
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

// close ends the subscriber processes: their stdin closes, they close
// their sockets and exit; one that has not after 30 s is killed, by its
// pid.
func (s *subscribers) close() {
	if s == nil {
		return
	}
	s.closing.Store(true)
	for _, p := range s.procs {
		p.stdin.Close()
	}
	for _, p := range s.procs {
		select {
		case <-p.done:
		case <-time.After(30 * time.Second):
			p.cmd.Process.Kill()
			<-p.done
		}
	}
}

var errNoAdmin = errors.New("broadcasts need an admin token: set -secret (or TALLY_JWT_SECRET) or -admin-token")
