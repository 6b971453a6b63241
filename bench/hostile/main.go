// Command hostile soaks a running tally server with the hostile clients of
// issue 11 while a well-behaved client reads its feed, and reports whether
// the server held: the well-behaved client's p99 under attack against its
// p99 when quiet (target ≤ 2×), the server's RSS growth (bounded by
// -rss-budget) and its goroutines.
//
//	TALLY_JWT_SECRET=s3cret tally -data /tmp/soak &
//	TALLY_JWT_SECRET=s3cret go run ./bench/hostile -url http://127.0.0.1:8080 -pid $! -duration 1m
//
// It only ever talks to a loopback address, runs for a bounded time
// (-quiet, then -duration of attack, then -cooldown) and keeps a bounded
// number of connections open. Each attack is one that once went through:
// requests of 1,000 aliased createPost, 200 aliased addGroupMembers of 100
// ids, 900 aliased 4 KB sendMessage, 1,400 aliased __schema (anonymous,
// 33 KB), 90 aliased members of a 3,000-member group; and at the socket
// level, slowloris bodies, clients that never read a large answer, and
// WebSockets opened and filled with subscriptions beyond their caps.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/web/auth"
)

type config struct {
	base       *url.URL
	keys       *auth.Keys
	pid        int
	quiet      time.Duration
	duration   time.Duration
	cooldown   time.Duration
	attackers  int
	attacks    []string
	conns      int // slowloris and slow-reader connections held at once
	sockets    int
	rssBudget  int64
	victimRate time.Duration
	// attackEvery is each request-level attacker's pause between requests
	// (0: as fast as the server answers).
	attackEvery time.Duration
}

const allAttacks = "createpost,addmembers,messages,introspection,members,slowloris,slowread,sockets"

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "hostile:", err)
		os.Exit(1)
	}
}

func run(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("hostile", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: go run ./bench/hostile [flags]\n\n"+
			"Soaks a running tally server (loopback only) with hostile clients while a\n"+
			"well-behaved client reads its feed; prints its p99 under attack ÷ quiet and\n"+
			"the server's RSS and goroutines. Tokens are signed with TALLY_JWT_SECRET or\n"+
			"with the dev secret a server without it wrote to <data>/dev-jwt-secret.\n\nflags:\n")
		fs.PrintDefaults()
	}
	rawURL := fs.String("url", "http://127.0.0.1:8080", "the server (a loopback address)")
	data := fs.String("data", "./data", "the dev server's data directory (for its dev-jwt-secret) when TALLY_JWT_SECRET is unset")
	pid := fs.Int("pid", 0, "the server's process id: RSS from /proc/<pid>/status (else from /metrics process_resident_memory_bytes)")
	quiet := fs.Duration("quiet", 20*time.Second, "measure the well-behaved client alone this long first")
	duration := fs.Duration("duration", time.Minute, "attack this long (at most 30m)")
	cooldown := fs.Duration("cooldown", 10*time.Second, "keep sampling this long after the attack")
	attackers := fs.Int("attackers", 4, "concurrent request-level attackers (1-64)")
	attacks := fs.String("attacks", allAttacks, "comma-separated attacks to run")
	conns := fs.Int("conns", 200, "slowloris and slow-reader connections held open at once, each (at most 2000)")
	sockets := fs.Int("sockets", 64, "WebSockets the socket attacker tries to hold open (at most 1000)")
	rssBudget := fs.Int64("rss-budget-mb", 256, "RSS growth under attack, in MB, that still counts as bounded")
	victimEvery := fs.Duration("victim-every", 20*time.Millisecond, "the well-behaved client's pause between feed reads (a page costs ~190: at 20 ms it spends ~9,000 of the server's default -cost-rate of 10,000 a second)")
	attackEvery := fs.Duration("attack-every", 0, "each request-level attacker's pause between requests (0: back to back, a flood)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	base, err := url.Parse(*rawURL)
	if err != nil {
		return err
	}
	if err := loopbackOnly(base); err != nil {
		return err
	}
	if *duration <= 0 || *duration > 30*time.Minute || *quiet <= 0 || *quiet > 10*time.Minute {
		return errors.New("-duration must be in (0, 30m] and -quiet in (0, 10m]")
	}
	if *attackers < 1 || *attackers > 64 || *conns < 0 || *conns > 2000 || *sockets < 0 || *sockets > 1000 {
		return errors.New("-attackers 1-64, -conns 0-2000, -sockets 0-1000")
	}
	var list []string
	for _, a := range strings.Split(*attacks, ",") {
		if a = strings.TrimSpace(a); a == "" {
			continue
		}
		if !slices.Contains(strings.Split(allAttacks, ","), a) {
			return fmt.Errorf("unknown attack %q (have %s)", a, allAttacks)
		}
		list = append(list, a)
	}
	keys, err := loadKeys(*data)
	if err != nil {
		return err
	}
	cfg := config{
		base: base, keys: keys, pid: *pid, quiet: *quiet, duration: *duration, cooldown: *cooldown,
		attackers: *attackers, attacks: list, conns: *conns, sockets: *sockets,
		rssBudget: *rssBudget << 20, victimRate: *victimEvery, attackEvery: *attackEvery,
	}
	return soak(cfg, out)
}

func loopbackOnly(u *url.URL) error {
	if u.Scheme != "http" {
		return fmt.Errorf("-url %s: only http:// to a loopback address", u)
	}
	host := u.Hostname()
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("-url %s is not a loopback address: this tool attacks only 127.0.0.1/::1", u)
}

func loadKeys(data string) (*auth.Keys, error) {
	if s := os.Getenv("TALLY_JWT_SECRET"); s != "" {
		return auth.NewKeys([]byte(s))
	}
	b, err := os.ReadFile(filepath.Join(data, "dev-jwt-secret"))
	if err != nil {
		return nil, fmt.Errorf("set TALLY_JWT_SECRET (the server's) or point -data at a dev server's directory: %w", err)
	}
	return auth.NewKeys(b)
}

// User ids of the soak: high, so that they do not mix with a demo's.
const (
	victimUser   = 900001
	attackerUser = 900100 // attacker i is attackerUser+i
)

type client struct {
	cfg  config
	http *http.Client
}

func newClient(cfg config, conns int) *client {
	tr := &http.Transport{MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns, DisableCompression: true}
	return &client{cfg: cfg, http: &http.Client{Transport: tr, Timeout: time.Minute}}
}

func (c *client) token(user uint64) string {
	tok, err := c.cfg.keys.Sign(engine.UserID(user), false, 2*time.Hour)
	if err != nil {
		panic(err)
	}
	return tok
}

type result struct {
	status  int
	code    string // the first error's extensions.code, "" when none
	data    json.RawMessage
	bytes   int
	elapsed time.Duration
}

// do posts one GraphQL request and reads the whole answer.
func (c *client) do(ctx context.Context, user uint64, query string, vars map[string]any) (result, error) {
	body, _ := json.Marshal(map[string]any{"query": query, "variables": vars})
	return c.doBody(ctx, user, body)
}

// doBody posts a JSON request body as it is.
func (c *client) doBody(ctx context.Context, user uint64, body []byte) (result, error) {
	req, err := http.NewRequestWithContext(ctx, "POST", c.cfg.base.String()+"/query", bytes.NewReader(body))
	if err != nil {
		return result{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	if user != 0 {
		req.Header.Set("Authorization", "Bearer "+c.token(user))
	}
	start := time.Now()
	resp, err := c.http.Do(req)
	if err != nil {
		return result{}, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	r := result{status: resp.StatusCode, bytes: len(raw), elapsed: time.Since(start)}
	if err != nil {
		return r, err
	}
	var parsed struct {
		Data   json.RawMessage
		Errors []struct{ Extensions map[string]any }
	}
	if json.Unmarshal(raw, &parsed) == nil {
		r.data = parsed.Data
		if len(parsed.Errors) > 0 {
			r.code, _ = parsed.Errors[0].Extensions["code"].(string)
			if reason, _ := parsed.Errors[0].Extensions["reason"].(string); reason != "" {
				r.code += "/" + reason
			}
		}
	}
	return r, nil
}

func (c *client) must(ctx context.Context, user uint64, query string, vars map[string]any) (json.RawMessage, error) {
	r, err := c.do(ctx, user, query, vars)
	if err != nil {
		return nil, err
	}
	if r.code != "" {
		return nil, fmt.Errorf("setup %.60s…: %s", query, r.code)
	}
	return r.data, nil
}

func aliased(kind, vars, field string, n int) string {
	var b strings.Builder
	b.WriteString(kind + vars + " {")
	for i := range n {
		fmt.Fprintf(&b, " m%d: %s", i, field)
	}
	b.WriteString(" }")
	return b.String()
}

// world is what the soak sets up through the API before it starts.
type world struct {
	feed     []string // the victim's post ids
	bigGroup string   // a group of ~3,000 members, attacker 0's
}

func setup(ctx context.Context, c *client) (world, error) {
	var w world
	raw, err := c.must(ctx, victimUser, aliased("mutation", "", "createPost { id }", 20), nil)
	if err != nil {
		return w, err
	}
	var posts map[string]struct{ ID string }
	if err := json.Unmarshal(raw, &posts); err != nil {
		return w, err
	}
	for _, p := range posts {
		w.feed = append(w.feed, p.ID)
	}
	raw, err = c.must(ctx, attackerUser, `mutation { createGroup(memberIds: []) { id } }`, nil)
	if err != nil {
		return w, err
	}
	var g struct{ CreateGroup struct{ ID string } }
	if err := json.Unmarshal(raw, &g); err != nil {
		return w, err
	}
	w.bigGroup = g.CreateGroup.ID
	// 3,000 members in requests of 10 × 100 ids, paced under the default
	// rate limit (this is setup, not the attack).
	for batch := 0; batch < 3; batch++ {
		field := "addGroupMembers(groupId: $g, userIds: $u) { id }"
		var q strings.Builder
		q.WriteString("mutation($g: ID!")
		vars := map[string]any{"g": w.bigGroup}
		for i := range 10 {
			fmt.Fprintf(&q, ", $u%d: [ID!]!", i)
			ids := make([]string, 100)
			for k := range ids {
				ids[k] = strconv.Itoa(1_000_000 + batch*1000 + i*100 + k)
			}
			vars["u"+strconv.Itoa(i)] = ids
		}
		q.WriteString(") {")
		for i := range 10 {
			fmt.Fprintf(&q, " a%d: %s", i, strings.ReplaceAll(field, "$u", "$u"+strconv.Itoa(i)))
		}
		q.WriteString(" }")
		for {
			r, err := c.do(ctx, attackerUser, q.String(), vars)
			if err != nil {
				return w, err
			}
			if strings.HasPrefix(r.code, "RATE_LIMITED") {
				time.Sleep(time.Second)
				continue
			}
			if r.code != "" {
				return w, fmt.Errorf("setup: adding members: %s", r.code)
			}
			break
		}
	}
	return w, nil
}

// latencies is the well-behaved client's record.
type latencies struct {
	mu     sync.Mutex
	d      []time.Duration
	errors map[string]int // by code ("transport" for no answer)
}

func (l *latencies) add(d time.Duration, failure string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if failure != "" {
		if l.errors == nil {
			l.errors = map[string]int{}
		}
		l.errors[failure]++
		return
	}
	l.d = append(l.d, d)
}

func (l *latencies) take() (ds []time.Duration, errs map[string]int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	ds, errs = l.d, l.errors
	l.d, l.errors = nil, nil
	return ds, errs
}

func errorSummary(errs map[string]int) string {
	if len(errs) == 0 {
		return "errors 0"
	}
	var parts []string
	for code, n := range errs {
		parts = append(parts, fmt.Sprintf("%s×%d", code, n))
	}
	sort.Strings(parts)
	return "errors " + strings.Join(parts, " ")
}

func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

// victim reads its feed page and badges until ctx ends.
func victim(ctx context.Context, c *client, w world, rec *latencies) {
	const q = `query Feed($ids: [ID!]!) { viewer { unread { total } redDot } posts(ids: $ids) { id counts { likes comments reposts views favorites } viewerHasLiked } }`
	vars := map[string]any{"ids": w.feed}
	for ctx.Err() == nil {
		r, err := c.do(ctx, victimUser, q, vars)
		if ctx.Err() != nil {
			return
		}
		failure := r.code
		if err != nil {
			failure = "transport"
		}
		rec.add(r.elapsed, failure)
		time.Sleep(c.cfg.victimRate)
	}
}

// sample is one reading of the server's resources.
type sample struct {
	at         time.Time
	rss        int64
	goroutines int64
}

func readSample(c *client) sample {
	s := sample{at: time.Now(), rss: -1, goroutines: -1}
	if c.cfg.pid > 0 {
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", c.cfg.pid)); err == nil {
			for _, line := range strings.Split(string(b), "\n") {
				if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
					kb, _ := strconv.ParseInt(f[1], 10, 64)
					s.rss = kb << 10
				}
			}
		}
	}
	resp, err := c.http.Get(c.cfg.base.String() + "/metrics")
	if err != nil {
		return s
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		var name string
		var v float64
		if _, err := fmt.Sscanf(line, "%s %g", &name, &v); err != nil {
			continue
		}
		switch name {
		case "process_resident_memory_bytes":
			if s.rss < 0 {
				s.rss = int64(v)
			}
		case "go_goroutines":
			s.goroutines = int64(v)
		}
	}
	return s
}

// attackStats counts one attack's outcomes.
type attackStats struct {
	mu       sync.Mutex
	requests int
	outcomes map[string]int
	maxBytes int
	maxTime  time.Duration
}

func (a *attackStats) note(outcome string, bytes int, d time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.requests++
	if a.outcomes == nil {
		a.outcomes = map[string]int{}
	}
	a.outcomes[outcome]++
	a.maxBytes = max(a.maxBytes, bytes)
	a.maxTime = max(a.maxTime, d)
}

type attacker struct {
	c      *client
	w      world
	bodies map[string]attackBody
	stats  map[string]*attackStats
}

// attackBody is one request-level attack: its body, built once, and who
// sends it (0: anonymous; -1: the attacker running it).
type attackBody struct {
	user int64
	body []byte
}

func buildAttacks(w world) map[string]attackBody {
	body := func(query string, vars map[string]any) []byte {
		b, _ := json.Marshal(map[string]any{"query": query, "variables": vars})
		return b
	}
	ids := make([]string, 100)
	for i := range ids {
		ids[i] = strconv.Itoa(2_000_000 + i)
	}
	var intro strings.Builder
	intro.WriteString("query {")
	for i := range 1400 {
		fmt.Fprintf(&intro, " s%d: __schema { ...F }", i)
	}
	intro.WriteString(" } fragment F on __Schema { types { name fields { name type { name } } } }")
	return map[string]attackBody{
		"createpost": {-1, body(aliased("mutation", "", "createPost { id }", 1000), nil)},
		"addmembers": {attackerUser, body(aliased("mutation", "($g: ID!, $u: [ID!]!)", "addGroupMembers(groupId: $g, userIds: $u) { id }", 200),
			map[string]any{"g": w.bigGroup, "u": ids})},
		"messages": {attackerUser, body(aliased("mutation", "($g: ID!, $t: String!)", "sendMessage(groupId: $g, text: $t) { id }", 900),
			map[string]any{"g": w.bigGroup, "t": strings.Repeat("x", 4096)})},
		"introspection": {0, body(intro.String(), nil)},
		"members":       {attackerUser, body(aliased("query", "($g: ID!)", "group(id: $g) { members { id } }", 90), map[string]any{"g": w.bigGroup})},
	}
}

// requestAttack runs one request-level attack once, as attacker user u.
func (a *attacker) requestAttack(ctx context.Context, name string, u uint64) {
	ab, ok := a.bodies[name]
	if !ok {
		return
	}
	user := uint64(ab.user)
	if ab.user < 0 {
		user = u
	}
	r, err := a.c.doBody(ctx, user, ab.body)
	if ctx.Err() != nil {
		return
	}
	outcome := r.code
	switch {
	case err != nil:
		outcome = "transport error"
	case outcome == "":
		outcome = "ANSWERED"
	}
	a.stats[name].note(outcome, r.bytes, r.elapsed)
}

// slowloris holds up to n connections that send a request's headers and
// then its body one byte every 2 s; each ends when the server cuts it.
func (a *attacker) slowloris(ctx context.Context, n int, st *attackStats) {
	a.holdConns(ctx, n, st, func(conn net.Conn, start time.Time) {
		fmt.Fprintf(conn, "POST /query HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{", a.c.cfg.base.Host)
		defer func() {
			if ctx.Err() != nil {
				st.note("held to the end", 0, time.Since(start))
			}
		}()
		for ctx.Err() == nil {
			if _, err := conn.Write([]byte(" ")); err != nil {
				st.note("cut by server", 0, time.Since(start))
				return
			}
			conn.SetReadDeadline(time.Now().Add(2 * time.Second))
			if _, err := conn.Read(make([]byte, 1)); err == nil || !isTimeout(err) {
				st.note("cut by server", 0, time.Since(start))
				return
			}
		}
	})
}

// slowRead holds up to n connections that ask for the whole schema's
// introspection and never read the answer.
func (a *attacker) slowRead(ctx context.Context, n int, st *attackStats) {
	raw, _ := os.ReadFile("web/transport/testdata/introspection-query.graphql")
	q := string(raw)
	if q == "" {
		q = `{ __schema { types { name description fields { name description args { name description type { name } } type { name kind ofType { name kind } } } } } }`
	}
	body, _ := json.Marshal(map[string]any{"query": q})
	a.holdConns(ctx, n, st, func(conn net.Conn, start time.Time) {
		if tc, ok := conn.(*net.TCPConn); ok {
			tc.SetReadBuffer(4096) // a small window: the server's writes stall
		}
		// Pipelined: many answers queued behind a reader that does not read.
		for range 20 {
			fmt.Fprintf(conn, "POST /query HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", a.c.cfg.base.Host, len(body), body)
		}
		select {
		case <-ctx.Done():
		case <-time.After(90 * time.Second):
		}
		st.note("held", 0, time.Since(start))
	})
}

// holdConns keeps up to n TCP connections to the server open at once,
// each dialled afresh when the last one ends, and runs hold on each until
// it returns or ctx ends.
func (a *attacker) holdConns(ctx context.Context, n int, st *attackStats, hold func(conn net.Conn, start time.Time)) {
	sem := make(chan struct{}, n)
	for ctx.Err() == nil {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		go func() {
			defer func() { <-sem }()
			start := time.Now()
			conn, err := net.DialTimeout("tcp", a.c.cfg.base.Host, 5*time.Second)
			if err != nil {
				st.note("dial error", 0, 0)
				time.Sleep(time.Second)
				return
			}
			defer conn.Close()
			hold(conn, start)
		}()
	}
}

// sockets keeps opening WebSockets as one user, each with more
// subscriptions than a socket may hold, and holds them a few seconds.
func (a *attacker) sockets(ctx context.Context, n int, st *attackStats) {
	wsURL := "ws://" + a.c.cfg.base.Host + "/query"
	tok := a.c.token(attackerUser + 50)
	sem := make(chan struct{}, n)
	for ctx.Err() == nil {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		go func() {
			defer func() { <-sem }()
			dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			conn, _, err := websocket.Dial(dctx, wsURL, &websocket.DialOptions{Subprotocols: []string{"graphql-transport-ws"}})
			cancel()
			if err != nil {
				st.note("refused at dial", 0, 0)
				time.Sleep(500 * time.Millisecond)
				return
			}
			defer conn.CloseNow()
			conn.SetReadLimit(1 << 20)
			init, _ := json.Marshal(map[string]any{"type": "connection_init", "payload": map[string]any{"Authorization": "Bearer " + tok}})
			if conn.Write(ctx, websocket.MessageText, init) != nil {
				return
			}
			for i := range 150 {
				sub, _ := json.Marshal(map[string]any{"id": strconv.Itoa(i), "type": "subscribe",
					"payload": map[string]any{"query": "subscription { unreadChanged { unread { total } } }"}})
				if conn.Write(ctx, websocket.MessageText, sub) != nil {
					break
				}
			}
			// Read what the server says until it closes us or we let go.
			hold, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			refused := 0
			for {
				_, msg, err := conn.Read(hold)
				if err != nil {
					switch code := websocket.CloseStatus(err); {
					case code != -1:
						st.note(fmt.Sprintf("closed %d", code), 0, 0)
					case refused > 0:
						st.note("held, later subscriptions refused", 0, 0)
					default:
						st.note("held", 0, 0)
					}
					return
				}
				if bytes.Contains(msg, []byte(`"RATE_LIMITED"`)) {
					refused++
				}
			}
		}()
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func soak(cfg config, out io.Writer) error {
	ctx := context.Background()
	setupClient := newClient(cfg, 4)
	fmt.Fprintf(out, "hostile: soaking %s: quiet %s, attack %s (%s), cooldown %s\n", cfg.base, cfg.quiet, cfg.duration, strings.Join(cfg.attacks, ","), cfg.cooldown)
	w, err := setup(ctx, setupClient)
	if err != nil {
		return fmt.Errorf("setup: %w", err)
	}
	fmt.Fprintf(out, "setup: %d feed posts, a group of 3,000 members (%s)\n", len(w.feed), w.bigGroup)

	// The well-behaved client has a connection pool of its own.
	victimClient := newClient(cfg, 2)
	rec := &latencies{}
	vctx, stopVictim := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { victim(vctx, victimClient, w, rec) })

	var mu sync.Mutex
	var samples []sample
	phase := "quiet"
	phases := map[string][]sample{}
	sctx, stopSampling := context.WithCancel(ctx)
	sampler := newClient(cfg, 1)
	wg.Go(func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			s := readSample(sampler)
			mu.Lock()
			samples = append(samples, s)
			phases[phase] = append(phases[phase], s)
			mu.Unlock()
			select {
			case <-sctx.Done():
				return
			case <-t.C:
			}
		}
	})

	time.Sleep(cfg.quiet)
	quietLat, quietErrs := rec.take()

	mu.Lock()
	phase = "attack"
	mu.Unlock()
	actx, stopAttack := context.WithTimeout(ctx, cfg.duration)
	a := &attacker{c: newClient(cfg, cfg.attackers*2), w: w, bodies: buildAttacks(w), stats: map[string]*attackStats{}}
	for _, name := range cfg.attacks {
		a.stats[name] = &attackStats{}
	}
	var requestLevel []string
	var awg sync.WaitGroup
	for _, name := range cfg.attacks {
		switch name {
		case "slowloris":
			awg.Go(func() { a.slowloris(actx, cfg.conns, a.stats[name]) })
		case "slowread":
			awg.Go(func() { a.slowRead(actx, cfg.conns, a.stats[name]) })
		case "sockets":
			awg.Go(func() { a.sockets(actx, cfg.sockets, a.stats[name]) })
		default:
			requestLevel = append(requestLevel, name)
		}
	}
	if len(requestLevel) > 0 {
		for i := range cfg.attackers {
			awg.Go(func() {
				for k := i; actx.Err() == nil; k++ {
					a.requestAttack(actx, requestLevel[k%len(requestLevel)], attackerUser+1+uint64(i))
					if cfg.attackEvery > 0 {
						select {
						case <-actx.Done():
						case <-time.After(cfg.attackEvery):
						}
					}
				}
			})
		}
	}
	<-actx.Done()
	stopAttack()
	attackLat, attackErrs := rec.take()
	mu.Lock()
	phase = "cooldown"
	mu.Unlock()
	awg.Wait()
	time.Sleep(cfg.cooldown)
	stopVictim()
	stopSampling()
	wg.Wait()
	coolLat, _ := rec.take()

	// The report.
	fmt.Fprintf(out, "\nattacks (%d request-level attackers):\n", cfg.attackers)
	names := slices.Clone(cfg.attacks)
	sort.Strings(names)
	for _, name := range names {
		st := a.stats[name]
		var parts []string
		for o, n := range st.outcomes {
			parts = append(parts, fmt.Sprintf("%s×%d", o, n))
		}
		sort.Strings(parts)
		fmt.Fprintf(out, "  %-14s %6d: %s; largest answer %d B, longest %s\n", name, st.requests, strings.Join(parts, " "), st.maxBytes, st.maxTime.Round(time.Millisecond))
	}
	qp99, ap99 := quantile(quietLat, 0.99), quantile(attackLat, 0.99)
	fmt.Fprintf(out, "\nwell-behaved client (feed page of %d posts + badges):\n", len(w.feed))
	fmt.Fprintf(out, "  quiet:    %6d reads, p50 %s, p99 %s, %s\n", len(quietLat), ms(quantile(quietLat, 0.5)), ms(qp99), errorSummary(quietErrs))
	fmt.Fprintf(out, "  attack:   %6d reads, p50 %s, p99 %s, %s\n", len(attackLat), ms(quantile(attackLat, 0.5)), ms(ap99), errorSummary(attackErrs))
	fmt.Fprintf(out, "  cooldown: %6d reads, p99 %s\n", len(coolLat), ms(quantile(coolLat, 0.99)))
	ratio := 0.0
	if qp99 > 0 {
		ratio = float64(ap99) / float64(qp99)
	}
	verdict := "within"
	if ratio > 2 || len(attackErrs) > 0 {
		verdict = "NOT within"
	}
	fmt.Fprintf(out, "  p99 under attack ÷ quiet = %.2f× (%s the 2× target)\n", ratio, verdict)

	peak := func(ss []sample, f func(sample) int64) int64 {
		m := int64(-1)
		for _, s := range ss {
			m = max(m, f(s))
		}
		return m
	}
	rss := func(s sample) int64 { return s.rss }
	gor := func(s sample) int64 { return s.goroutines }
	mu.Lock()
	defer mu.Unlock()
	qRSS, aRSS, cRSS := peak(phases["quiet"], rss), peak(phases["attack"], rss), peak(phases["cooldown"], rss)
	src := "/metrics process_resident_memory_bytes"
	if cfg.pid > 0 {
		src = fmt.Sprintf("/proc/%d/status", cfg.pid)
	}
	fmt.Fprintf(out, "\nserver (%d samples, RSS from %s):\n", len(samples), src)
	fmt.Fprintf(out, "  RSS peak: quiet %s, attack %s, cooldown %s\n", mb(qRSS), mb(aRSS), mb(cRSS))
	fmt.Fprintf(out, "  goroutines peak: quiet %d, attack %d, cooldown %d (last %d)\n",
		peak(phases["quiet"], gor), peak(phases["attack"], gor), peak(phases["cooldown"], gor), samples[len(samples)-1].goroutines)
	if qRSS > 0 && aRSS > 0 {
		growth := aRSS - qRSS
		bounded := "bounded"
		if growth > cfg.rssBudget {
			bounded = "NOT bounded"
		}
		fmt.Fprintf(out, "  RSS growth under attack: %s (%s: budget %s)\n", mb(growth), bounded, mb(cfg.rssBudget))
	} else {
		fmt.Fprintln(out, "  RSS not available (give -pid, or serve /metrics)")
	}
	return nil
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/1e6) }

func mb(b int64) string {
	if b < 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.1f MB", float64(b)/(1<<20))
}
