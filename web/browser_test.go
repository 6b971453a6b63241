package web_test

// Browser tests: the real tally binary, seeded with `tally demo-seed`, on a
// loopback port in dev mode (no TALLY_JWT_SECRET), driven by Debian's
// headless Chromium through chromedp. Every page fails its test on a
// console error, an uncaught exception or a request that leaves loopback.
// Screenshots go to $TALLY_TEST_OUT/<test> when set, else to the test's
// artifact directory (kept with `go test -artifacts -outputdir DIR`).
//
// Without /usr/bin/chromium the tests skip, unless TALLY_REQUIRE_BROWSER is
// set. The browser reaches nothing beyond loopback (host-resolver rules
// and a dead proxy), as on a machine with no internet.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
)

const chromium = "/usr/bin/chromium"

// The demo users of the tests (see web/demoseed): Maya (1) owns posts that
// Ana (3) has not liked; Maya and Sam (4) are in the group chat.
const (
	maya = "1"
	ana  = "3"
	sam  = "4"
)

var (
	setupOnce sync.Once
	setupErr  error
	env       struct {
		tmp  string
		root string // repo root
		base string // http://127.0.0.1:PORT, a seeded server
		// bareBase is a server on an unseeded data directory, started with
		// -graphiql-cdn.
		bareBase string
		logPath  string
		browser  context.Context
		stop     []func()
	}
)

func TestMain(m *testing.M) {
	code := m.Run()
	for i := len(env.stop) - 1; i >= 0; i-- {
		env.stop[i]()
	}
	os.Exit(code)
}

// setup builds tally, seeds a data directory, starts the server and the
// browser, once for all the browser tests of the run.
func setup(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(chromium); err != nil {
		if os.Getenv("TALLY_REQUIRE_BROWSER") != "" {
			t.Fatalf("TALLY_REQUIRE_BROWSER is set but %s is missing: apt-get install -y chromium", chromium)
		}
		t.Skipf("%s is missing (apt-get install -y chromium); set TALLY_REQUIRE_BROWSER to make this a failure", chromium)
	}
	setupOnce.Do(func() { setupErr = start() })
	if setupErr != nil {
		t.Fatal(setupErr)
	}
}

func start() error {
	tmp, err := os.MkdirTemp("", "tally-browser-")
	if err != nil {
		return err
	}
	env.tmp = tmp
	env.stop = append(env.stop, func() { os.RemoveAll(tmp) })

	gomod, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil || strings.TrimSpace(string(gomod)) == "" {
		return fmt.Errorf("finding the repo root with go env GOMOD: %v", err)
	}
	env.root = filepath.Dir(strings.TrimSpace(string(gomod)))

	bin := filepath.Join(tmp, "tally")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Dir = env.root
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("go build: %v\n%s", err, out)
	}

	data := filepath.Join(tmp, "data")
	seed := exec.Command(bin, "demo-seed", "-data", data)
	seed.Env = devEnv()
	if out, err := seed.CombinedOutput(); err != nil {
		return fmt.Errorf("tally demo-seed: %v\n%s", err, out)
	}

	env.base, err = startServer(bin, data, filepath.Join(tmp, "server.log"))
	if err != nil {
		return err
	}
	env.logPath = filepath.Join(tmp, "server.log")
	// A second server on a data directory never seeded, loading GraphiQL
	// from the CDN that the blocked network cannot reach.
	env.bareBase, err = startServer(bin, filepath.Join(tmp, "bare"), filepath.Join(tmp, "bare.log"), "-graphiql-cdn")
	if err != nil {
		return err
	}

	var world struct{ Posts, Groups []any }
	if err := fetchJSON(env.base+"/demo/world", &world); err != nil {
		return err
	}
	if len(world.Posts) == 0 || len(world.Groups) == 0 {
		return fmt.Errorf("the demo world is empty after tally demo-seed: it must save the world (demoseed.Summary.Save) " +
			"into the data directory and the server must pass that directory as web.Options.DataDir")
	}

	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chromium),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		// No network beyond loopback, as on a machine with no internet: no
		// name resolves but 127.0.0.1's, and anything else goes to a proxy
		// on a dead port.
		chromedp.Flag("host-resolver-rules", "MAP * ~NOTFOUND, EXCLUDE 127.0.0.1, EXCLUDE localhost"),
		chromedp.ProxyServer("http://127.0.0.1:9"),
		chromedp.Flag("proxy-bypass-list", "127.0.0.1;localhost"),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-default-apps", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-renderer-backgrounding", true),
		chromedp.Flag("disable-background-timer-throttling", true),
		chromedp.Flag("disable-backgrounding-occluded-windows", true),
		chromedp.Flag("metrics-recording-only", true),
		chromedp.Flag("safebrowsing-disable-auto-update", true),
		chromedp.Flag("password-store", "basic"),
		chromedp.UserDataDir(filepath.Join(tmp, "chromium-profile")),
		chromedp.WindowSize(1280, 900),
	)
	browser, cancelBrowser := chromedp.NewContext(alloc)
	env.stop = append(env.stop, cancelAlloc, cancelBrowser)
	if err := chromedp.Do(browser); err != nil {
		return fmt.Errorf("starting %s: %v", chromium, err)
	}
	env.browser = browser
	return nil
}

// startServer starts the built binary in dev mode on a free loopback
// port with data as its data directory, logging to logPath, and waits
// until it is healthy. It returns the server's base URL.
func startServer(bin, data, logPath string, args ...string) (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := l.Addr().String()
	l.Close()
	_, err = startServerAt(addr, bin, data, logPath, args...)
	return "http://" + addr, err
}

// startServerAt is startServer on addr. stop stops the server (at once,
// and again at the end of the run: a no-op then).
func startServerAt(addr, bin, data, logPath string, args ...string) (stop func(), err error) {
	base := "http://" + addr
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	srv := exec.Command(bin, append([]string{"-addr", addr, "-data", data}, args...)...)
	srv.Env = devEnv()
	srv.Stdout, srv.Stderr = logf, logf
	if err := srv.Start(); err != nil {
		return nil, err
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			srv.Process.Signal(os.Interrupt)
			done := make(chan struct{})
			go func() { srv.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				srv.Process.Kill()
				<-done
			}
			logf.Close()
		})
	}
	env.stop = append(env.stop, stop)
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(base + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return stop, nil
			}
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(logPath)
			return stop, fmt.Errorf("tally did not come up on %s: %v\n%s", addr, err, b)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// devEnv is the environment minus Tally's settings: no TALLY_JWT_SECRET,
// so the server runs in dev mode.
func devEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TALLY_") {
			out = append(out, kv)
		}
	}
	return out
}

func serverLog() string {
	b, _ := os.ReadFile(env.logPath)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// outDir is where a test's screenshots go.
func outDir(t *testing.T) string {
	if d := os.Getenv("TALLY_TEST_OUT"); d != "" {
		d = filepath.Join(d, t.Name())
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	return t.ArtifactDir()
}

// page is one browser tab in its own browser context (its own cookies and
// storage), as a separate person's window.
type page struct {
	t    *testing.T
	name string
	ctx  context.Context

	offline bool

	mu       sync.Mutex
	problems []string
	external []string // requests beyond loopback (offline pages only)
}

func openPage(t *testing.T, name, path string) *page {
	t.Helper()
	return openURL(t, name, env.base+path, false)
}

// openURL opens address in a new tab. With offline set, the page is expected
// to try addresses beyond loopback (which the browser cannot reach):
// those requests, and the console errors of their failure, are recorded
// in p.external instead of failing the test.
func openURL(t *testing.T, name, address string, offline bool) *page {
	t.Helper()
	ctx, cancel := chromedp.NewContext(env.browser, chromedp.WithNewBrowserContext())
	p := &page{t: t, name: name, ctx: ctx, offline: offline}
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("%s: opening a tab: %v", name, err)
	}
	// Console errors and uncaught exceptions.
	go func() {
		for m, err := range chromedp.Console(ctx) {
			if err != nil {
				return
			}
			if p.offline && m.Type == chromedp.ConsoleError && strings.Contains(m.Text, "net::ERR_") {
				continue
			}
			if m.Type == chromedp.ConsoleError || m.IsException() {
				p.problem("console %s: %s (%s:%d)", m.Type, m.Text, m.URL, m.Line)
			}
		}
	}()
	// Every request stays on loopback.
	if err := chromedp.Listen(ctx, func(ev any) {
		var raw string
		switch ev := ev.(type) {
		case *network.EventRequestWillBeSent:
			raw = ev.Request.URL
		case *network.EventWebSocketCreated:
			raw = ev.URL
		default:
			return
		}
		u, err := url.Parse(raw)
		if err != nil {
			p.problem("unparsable request URL %q", raw)
			return
		}
		switch u.Scheme {
		case "http", "https", "ws", "wss":
			if h := u.Hostname(); h != "127.0.0.1" && h != "localhost" && h != "::1" {
				if p.offline {
					p.mu.Lock()
					p.external = append(p.external, raw)
					p.mu.Unlock()
					return
				}
				p.problem("request left loopback: %s", raw)
			}
		}
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.checkProblems()
		cancel()
	})
	p.do(chromedp.Navigate(address))
	return p
}

func (p *page) problem(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.problems = append(p.problems, fmt.Sprintf(format, args...))
}

func (p *page) checkProblems() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, pr := range p.problems {
		p.t.Errorf("%s: %s", p.name, pr)
	}
	p.problems = nil
}

func (p *page) do(actions ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		p.t.Fatalf("%s: %v", p.name, err)
	}
}

func eval[T any](p *page, expr string) T {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 10*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		p.t.Fatalf("%s: evaluating %s: %v", p.name, expr, err)
	}
	return v
}

// waitFor waits until the JavaScript expression is truthy.
func (p *page) waitFor(what, expr string) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 20*time.Second)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Poll[any](expr, chromedp.WithPollingInterval(50*time.Millisecond))); err != nil {
		p.checkProblems()
		p.t.Fatalf("%s: waiting for %s: %v\nserver log:\n%s", p.name, what, err, serverLog())
	}
}

func (p *page) click(css string) {
	p.t.Helper()
	p.do(chromedp.Click(chromedp.CSS(css), chromedp.NodeVisible))
}

func (p *page) screenshot(file string) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 20*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		p.t.Fatalf("%s: screenshot: %v", p.name, err)
	}
	path := filepath.Join(outDir(p.t), file)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		p.t.Fatal(err)
	}
	p.t.Logf("screenshot: %s", path)
}

// openDemo signs in to the demo as user and waits until it is live.
func openDemo(t *testing.T, user string) *page {
	t.Helper()
	p := openPage(t, "demo as user "+user, "/demo?user="+user)
	p.waitFor("the demo to be live with a feed", demoLive)
	return p
}

const demoLive = `document.querySelector('[data-testid="live-status"]').dataset.state === 'live'
	&& document.querySelectorAll('[data-testid="post"]').length > 0`

func badge(p *page, kind string) int {
	return atoi(p, eval[string](p, `document.querySelector('[data-testid="badge-`+kind+`"] .count').dataset.count`))
}

func atoi(p *page, s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		p.t.Fatalf("%s: %q is not a count", p.name, s)
	}
	return n
}

// A like in one window moves the author's badge and the post's count in
// another, without a reload; clicking the badge clears it.
func TestDemoLiveLikes(t *testing.T) {
	setup(t)
	a := openDemo(t, maya)

	// Ana signs in the way a person does: on the sign-in screen.
	b := openPage(t, "demo as user "+ana, "/demo")
	b.waitFor("the cast on the sign-in screen", `document.querySelectorAll('[data-testid="sign-in-as"]').length === 8`)
	b.screenshot("demo-sign-in.png")
	b.click(`[data-testid="sign-in-as"][data-user="` + ana + `"]`)
	b.waitFor("Ana's demo to be live with a feed", demoLive)
	if got := eval[string](b, `document.querySelector('[data-testid="me-name"]').textContent`); got != "Ana Souza" {
		t.Fatalf("signed in as %q, want Ana Souza", got)
	}
	eval[any](a, `window.__sameDocument = true`)

	card := eval[string](b, `(() => {
		const li = [...document.querySelectorAll('.post[data-author="`+maya+`"]')]
			.find(li => li.querySelector('[data-testid="like"]').getAttribute('aria-pressed') === 'false');
		return li ? li.dataset.cardId : '';
	})()`)
	if card == "" {
		t.Fatal("Ana's feed has no post by Maya that she has not liked")
	}
	post := eval[string](b, `document.querySelector('.post[data-card-id="`+card+`"]').dataset.postId`)
	countJS := `document.querySelector('.post[data-post-id="` + post + `"] [data-testid="count-likes"]').dataset.count`
	likesBefore := badge(a, "likes")
	countBefore := atoi(a, eval[string](a, countJS))

	b.click(`.post[data-card-id="` + card + `"] [data-testid="like"]`)
	b.waitFor("the like to show as liked in Ana's window",
		`document.querySelector('.post[data-card-id="`+card+`"] [data-testid="like"]').getAttribute('aria-pressed') === 'true'`)
	if got := atoi(b, eval[string](b, countJS)); got != countBefore+1 {
		t.Errorf("Ana's window shows %d likes, want %d", got, countBefore+1)
	}

	a.waitFor("Maya's likes badge and the post's count to go up",
		fmt.Sprintf(`document.querySelector('[data-testid="badge-likes"] .count').dataset.count === '%d' && %s === '%d'`,
			likesBefore+1, countJS, countBefore+1))
	if !eval[bool](a, `window.__sameDocument === true`) {
		t.Error("Maya's window reloaded to show the change")
	}
	a.screenshot("demo-feed-maya.png")
	b.screenshot("demo-feed-ana.png")

	a.click(`[data-testid="badge-likes"]`)
	a.waitFor("Maya's likes badge to clear", `document.querySelector('[data-testid="badge-likes"] .count').dataset.count === '0'`)
}

// A message's receipts go from "0 read" to "1 read" in the sender's window
// when another member opens the chat.
func TestDemoReadReceipts(t *testing.T) {
	setup(t)
	reader := openDemo(t, sam)
	sender := openDemo(t, maya)
	sender.click(`[data-testid="tab-chat"]`)
	sender.waitFor("the chat history", `document.querySelectorAll('[data-testid="message"]').length > 0`)

	text := fmt.Sprintf("Receipt check %d", time.Now().UnixNano())
	sender.do(chromedp.SendKeys(chromedp.CSS(`[data-testid="composer-text"]`), text, chromedp.NodeVisible))
	sender.click(`[data-testid="composer-send"]`)
	mine := `[...document.querySelectorAll('.msg.mine')].find(m => m.textContent.includes('` + text + `'))`
	sender.waitFor(`"0 read · 4 unread" under the new message`,
		`(() => { const m = `+mine+`; const r = m && m.querySelector('[data-testid="receipt"]'); return r && r.textContent === '0 read · 4 unread'; })()`)

	reader.waitFor("Sam's messages badge to count the new message",
		`document.querySelector('[data-testid="badge-messages"] .count').dataset.count !== '0'`)
	reader.click(`[data-testid="tab-chat"]`)
	reader.waitFor("the message in Sam's chat",
		`[...document.querySelectorAll('[data-testid="message"]')].some(m => m.textContent.includes('`+text+`'))`)

	sender.waitFor(`"1 read · 3 unread" under the message`,
		`(() => { const r = `+mine+`.querySelector('[data-testid="receipt"]'); return r.textContent === '1 read · 3 unread'; })()`)
	sender.screenshot("demo-chat-receipts.png")
	sender.do(chromedp.Click(chromedp.JSPath(mine+`.querySelector('[data-testid="receipt"]')`), chromedp.NodeVisible))
	sender.waitFor("the reader list", `!document.querySelector('[data-testid="receipt-popover"]').hidden`)
	names := func(list string) string {
		return eval[string](sender, `[...document.querySelectorAll('[data-testid="`+list+`"] .name')].map(n => n.textContent).join(', ')`)
	}
	if got := names("readers"); got != "Sam Okafor" {
		t.Errorf("readers = %q, want Sam Okafor", got)
	}
	if got := names("unreaders"); got != "Leo Park, Ana Souza, Inès Duarte" {
		t.Errorf("unreaders = %q, want the other three members", got)
	}
	sender.screenshot("demo-chat-readers.png")
	reader.waitFor("Sam's messages badge to clear", `document.querySelector('[data-testid="badge-messages"] .count').dataset.count === '0'`)
}

// GraphiQL loads from the server itself, runs a query with the prefilled
// dev token, and runs a subscription over graphql-transport-ws.
// The browser has no network beyond loopback, as on a machine with no
// internet, and the binary is a plain go build.
func TestGraphiQL(t *testing.T) {
	setup(t)
	p := openPage(t, "GraphiQL", "/")
	p.waitFor("GraphiQL to render", `!!document.querySelector('.graphiql-container .graphiql-execute-button')`)
	if n := eval[int](p, `[...document.scripts].filter(s => s.src && !s.src.startsWith(location.origin + '/assets/')).length`); n != 0 {
		t.Errorf("%d scripts load from outside /assets/", n)
	}
	if got := eval[string](p, `document.querySelector('[data-testid="demo-link"]').getAttribute('href')`); got != "/demo" {
		t.Errorf("GraphiQL's demo link goes to %q", got)
	}
	p.waitFor("the prefilled Authorization header", `document.body.innerText.includes('"Authorization": "Bearer ey')`)

	p.click(`.graphiql-execute-button`)
	p.waitFor("the query result", `(() => { const r = document.querySelector('.result-window'); return r && r.innerText.includes('"unread"') && r.innerText.includes('"total"'); })()`)
	if res := eval[string](p, `document.querySelector('.result-window').innerText`); strings.Contains(res, `"errors"`) {
		t.Errorf("the first query failed:\n%s", res)
	}
	p.screenshot("graphiql-query.png")

	// The schema's descriptions show in the Docs pane: the contract's
	// limits where a developer looks for them.
	p.click(`.graphiql-sidebar button[aria-label="Show Documentation Explorer"]`)
	p.waitFor("the Docs pane", `!!document.querySelector('.graphiql-doc-explorer')`)
	p.do(chromedp.Click(chromedp.JSPath(`[...document.querySelectorAll('.graphiql-doc-explorer a')].find(a => a.textContent === 'Query')`), chromedp.NodeVisible))
	p.waitFor("Query's fields with their descriptions",
		`document.querySelector('.graphiql-doc-explorer').innerText.includes('At most 100 ids')`)
	p.screenshot("graphiql-docs.png")

	// A subscription, signed in by the same header on connection_init.
	eval[any](p, `document.querySelector('.graphiql-query-editor .CodeMirror').CodeMirror.setValue('subscription Badges {\n  unreadChanged { unread { comments total } redDot }\n}\n')`)
	// GraphiQL takes the operation to run from the editor after a debounce;
	// its saved tab state shows when it has.
	p.waitFor("GraphiQL to take in the subscription", `(localStorage.getItem('graphiql:tabState') || '').includes('subscription Badges')`)
	p.click(`.graphiql-execute-button`)
	deadline := time.Now().Add(15 * time.Second)
	for !eval[bool](p, `document.querySelector('.result-window').innerText.includes('"unreadChanged"')`) {
		if time.Now().After(deadline) {
			t.Fatalf("no unreadChanged event in GraphiQL; result pane:\n%s\nserver log:\n%s",
				eval[string](p, `document.querySelector('.result-window').innerText`), serverLog())
		}
		commentOnMayasPost(t) // Leo comments on a post of Maya's, whose token GraphiQL holds
		time.Sleep(500 * time.Millisecond)
	}
	if res := eval[string](p, `document.querySelector('.result-window').innerText`); strings.Contains(res, `"errors"`) {
		t.Errorf("the subscription failed:\n%s", res)
	}
	p.screenshot("graphiql-subscription.png")
}

// With -graphiql-cdn and no internet, GraphiQL's page says what failed and
// how to fix it instead of "Loading GraphiQL…" forever.
func TestGraphiQLCDNUnreachable(t *testing.T) {
	setup(t)
	p := openURL(t, "GraphiQL from the CDN, offline", env.bareBase+"/", true)
	p.waitFor("the load failure message naming the stylesheet too",
		`(() => { const m = document.querySelector('[data-testid="graphiql-load-failed"]'); return m && m.innerText.includes('graphiql.min.css'); })()`)
	msg := eval[string](p, `document.querySelector('[data-testid="graphiql-load-failed"]').innerText`)
	for _, want := range []string{"GraphiQL could not start", "unpkg.com/graphiql@" + "3.8.3/graphiql.min.js", "graphiql.min.css", "without -graphiql-cdn", "/query"} {
		if !strings.Contains(msg, want) {
			t.Errorf("the failure message lacks %q:\n%s", want, msg)
		}
	}
	if eval[bool](p, `!!document.querySelector('[data-testid="graphiql-loading"]')`) {
		t.Error(`"Loading GraphiQL…" is still on the page`)
	}
	p.mu.Lock()
	tried := strings.Join(p.external, "\n")
	p.mu.Unlock()
	if !strings.Contains(tried, "https://unpkg.com/") {
		t.Errorf("the page did not try the CDN; external requests: %q", tried)
	}
	p.screenshot("graphiql-cdn-offline.png")
}

// Before demo-seed, /demo says what the demo is and the command that
// seeds this server's data directory, with no error.
func TestDemoUnseeded(t *testing.T) {
	setup(t)
	p := openURL(t, "demo before seeding", env.bareBase+"/demo", false)
	p.waitFor("the explanation", `!document.querySelector('[data-testid="unseeded"]').hidden`)
	text := eval[string](p, `document.querySelector('[data-testid="unseeded"]').innerText`)
	want := "go run . demo-seed -data " + filepath.Join(env.tmp, "bare")
	for _, w := range []string{"No demo world yet", want, "Stop this server"} {
		if !strings.Contains(text, w) {
			t.Errorf("the explanation lacks %q:\n%s", w, text)
		}
	}
	if !eval[bool](p, `document.getElementById('toast').hidden`) {
		t.Errorf("a toast shows: %s", eval[string](p, `document.getElementById('toast').textContent`))
	}
	p.screenshot("demo-unseeded.png")
	// Signing in still works without a world.
	p.click(`#cast button.primary`)
	p.waitFor("the demo to be live", `document.querySelector('[data-testid="live-status"]').dataset.state === 'live'`)
}

// After a dev server restarts (a new random secret), the demo's token is
// refused: the demo leaves the stale feed for the sign-in screen and says
// why, in the server's words.
func TestDemoTokenRefusedAfterDevRestart(t *testing.T) {
	setup(t)
	bin := filepath.Join(env.tmp, "tally")
	data := filepath.Join(env.tmp, "restarted")
	seedData(t, data)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	stop, err := startServerAt(addr, bin, data, filepath.Join(env.tmp, "restarted-1.log"))
	if err != nil {
		t.Fatal(err)
	}
	// offline: while the server restarts, the socket's reconnects fail
	// with net::ERR_CONNECTION_REFUSED console errors, which are expected.
	p := openURL(t, "demo across a dev restart", "http://"+addr+"/demo?user="+ana, true)
	p.waitFor("the demo to be live with a feed", demoLive)

	stop()
	if _, err := startServerAt(addr, bin, data, filepath.Join(env.tmp, "restarted-2.log")); err != nil {
		t.Fatal(err)
	}
	// The demo reloads the page to sign out: poll across the navigation.
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(p.ctx, 2*time.Second)
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`!!document.getElementById('signin') && !document.getElementById('signin').hidden && document.getElementById('app').hidden && !document.getElementById('signin-hint').hidden`))
		cancel()
		if err == nil && ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the demo did not return to the sign-in screen (last: %v)", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	hint := eval[string](p, `document.getElementById('signin-hint').hidden ? '' : document.getElementById('signin-hint').textContent`)
	for _, want := range []string{"The server refused this token", "from an earlier run", "logged at start"} {
		if !strings.Contains(hint, want) {
			t.Errorf("the sign-in hint %q lacks %q", hint, want)
		}
	}
	if n := eval[int](p, `document.querySelectorAll('[data-testid="post"]').length`); n > 0 && !eval[bool](p, `document.getElementById('app').hidden`) {
		t.Errorf("%d posts of the stale feed still show", n)
	}
	p.screenshot("demo-token-refused.png")
	if len(p.external) > 0 {
		t.Errorf("requests beyond loopback: %v", p.external)
	}
	// Signing in again works with the new server's token.
	p.click(`[data-testid="sign-in-as"][data-user="` + ana + `"]`)
	p.waitFor("the demo to be live again", demoLive)
}

// seedData runs the test run's tally demo-seed on data with args.
func seedData(t *testing.T, data string, args ...string) {
	t.Helper()
	seed := exec.Command(filepath.Join(env.tmp, "tally"), append([]string{"demo-seed", "-data", data}, args...)...)
	seed.Env = devEnv()
	if out, err := seed.CombinedOutput(); err != nil {
		t.Fatalf("tally demo-seed %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// commentOnMayasPost makes Maya's unread change through the public API.
func commentOnMayasPost(t *testing.T) {
	t.Helper()
	var world struct {
		Posts []struct{ ID, Author string }
	}
	getJSON(t, env.base+"/demo/world", &world)
	var post string
	for _, p := range world.Posts {
		if p.Author == maya {
			post = p.ID
		}
	}
	if post == "" {
		t.Fatal("the demo world has no post by Maya")
	}
	var tok struct{ Token string }
	getJSON(t, env.base+"/demo/token?user=2", &tok)
	if errs := graphQL(t, env.base, tok.Token, `mutation($p: ID!) { commentOnPost(postId: $p) { id } }`, map[string]any{"p": post}, nil); len(errs) > 0 {
		t.Fatalf("commentOnPost: %v", errs)
	}
}

func getJSON(t *testing.T, u string, v any) {
	t.Helper()
	if err := fetchJSON(u, v); err != nil {
		t.Fatal(err)
	}
}

func fetchJSON(u string, v any) error {
	resp, err := http.Get(u)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return fmt.Errorf("GET %s: %v", u, err)
	}
	return nil
}

// reactionKinds are the kinds of the reactions test's server, in display
// order.
var reactionKinds = []string{"like", "love", "haha", "wow", "sad", "angry"}

// TestDemoReactions: on a server with six reaction kinds, seeded with
// them, every post's picker offers those kinds; Ana reacts to a post of
// Maya's, switches and removes her reaction, and the counts on her
// screen, in GraphQL and (for the first reaction, which bumps Maya's
// badge) in Maya's window follow. A refused reaction (the server's
// per-user mutation budget spent) shows the server's error and changes
// nothing.
func TestDemoReactions(t *testing.T) {
	setup(t)
	bin := filepath.Join(env.tmp, "tally")
	data := filepath.Join(env.tmp, "reactions")
	kinds := strings.Join(reactionKinds, ",")
	seedData(t, data, "-reactions", kinds)
	// A mutation budget that does not refill within the test, and a
	// burst the demo's own writes (views, marking read) stay under.
	base, err := startServer(bin, data, filepath.Join(env.tmp, "reactions.log"),
		"-reactions", kinds, "-rate-limit", "0.001", "-rate-burst", "40")
	if err != nil {
		t.Fatal(err)
	}
	author := openURL(t, "demo as user "+maya+" (reactions)", base+"/demo?user="+maya, false)
	author.waitFor("Maya's demo to be live with a feed", demoLive)
	reactor := openURL(t, "demo as user "+ana+" (reactions)", base+"/demo?user="+ana, false)
	reactor.waitFor("Ana's demo to be live with a feed", demoLive)

	// Every post offers the server's kinds, in order, as labelled buttons.
	if got := eval[[]string](reactor, `[...new Set([...document.querySelectorAll('.post .reactions')].map(g =>
		[...g.querySelectorAll('.react')].map(b => b.dataset.kind + ':' + b.getAttribute('aria-label') + ':' + b.getAttribute('aria-pressed')).join(' ')
			.replace(/:true/g, ':false')))]`); len(got) != 1 ||
		got[0] != "like:Like:false love:Love:false haha:Haha:false wow:Wow:false sad:Sad:false angry:Angry:false" {
		t.Errorf("the pickers offer %q, want the six kinds, labelled, once", got)
	}
	// The seed reacted with several kinds, and Ana's own pick shows.
	if n := eval[int](reactor, `[...document.querySelectorAll('.post .reactions')].filter(g =>
		[...g.querySelectorAll('.react:not(.like) .n')].filter(n => n.dataset.count !== '0').length >= 3).length`); n == 0 {
		t.Error("no post shows counts of three kinds besides like")
	}
	if !eval[bool](reactor, `!!document.querySelector('.react[data-kind="haha"][aria-pressed="true"]')`) {
		t.Error("Ana's seeded haha does not show as her reaction")
	}

	card := eval[string](reactor, `(() => {
		const li = [...document.querySelectorAll('.post[data-author="`+maya+`"]')]
			.find(li => !li.querySelector('.react[aria-pressed="true"]'));
		return li ? li.dataset.cardId : '';
	})()`)
	if card == "" {
		t.Fatal("Ana's feed has no post by Maya she has not reacted to")
	}
	post := eval[string](reactor, `document.querySelector('.post[data-card-id="`+card+`"]').dataset.postId`)
	onScreen := func(p *page) map[string]int {
		got := map[string]int{}
		for k, v := range eval[map[string]string](p, `Object.fromEntries([...document.querySelector('.post[data-post-id="`+post+`"] .reactions').querySelectorAll('.react')]
			.map(b => [b.dataset.kind, b.querySelector('.n').dataset.count]))`) {
			got[k] = atoi(p, v)
		}
		return got
	}
	before := onScreen(reactor)
	var tok struct{ Token string }
	getJSON(t, base+"/demo/token?user="+ana, &tok)
	// check compares the screen, GraphQL and Ana's pick with before
	// plus one reaction of kind (none: "").
	check := func(step, kind string) {
		t.Helper()
		want := map[string]int{}
		for k, n := range before {
			want[k] = n
		}
		if kind != "" {
			want[kind]++
		}
		pressed := `[...document.querySelectorAll('.post[data-card-id="` + card + `"] .react[aria-pressed="true"]')].map(b => b.dataset.kind).join(',')`
		reactor.waitFor(step+": the picker to show "+strconv.Quote(kind)+" chosen", pressed+` === '`+kind+`'`)
		if got := onScreen(reactor); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: Ana's screen shows %v, want %v", step, got, want)
		}
		var res struct {
			Post struct {
				Counts    struct{ Likes int }
				Reactions []struct {
					Kind  string
					Count int
				}
				ViewerReaction *string
			}
		}
		if errs := graphQL(t, base, tok.Token, `query($id: ID!) { post(id: $id) { counts { likes } reactions { kind count } viewerReaction } }`,
			map[string]any{"id": post}, &res); len(errs) > 0 {
			t.Fatalf("%s: post query: %v", step, errs)
		}
		var kindsGot []string
		for _, r := range res.Post.Reactions {
			kindsGot = append(kindsGot, r.Kind)
			if r.Count != want[r.Kind] {
				t.Errorf("%s: GraphQL says %d %s, want %d", step, r.Count, r.Kind, want[r.Kind])
			}
		}
		if strings.Join(kindsGot, ",") != kinds || res.Post.Counts.Likes != want["like"] {
			t.Errorf("%s: GraphQL reactions %v, likes %d", step, res.Post.Reactions, res.Post.Counts.Likes)
		}
		if got := deref(res.Post.ViewerReaction); got != kind {
			t.Errorf("%s: viewerReaction = %q, want %q", step, got, kind)
		}
	}
	button := func(kind string) string {
		return `.post[data-card-id="` + card + `"] .react[data-kind="` + kind + `"]`
	}
	likesBadge := badge(author, "likes")

	reactor.click(button("love"))
	check("react love", "love")
	// The first reaction bumps Maya's likes badge, which brings her
	// window the post's new counts without a reload.
	author.waitFor("Maya's likes badge and the post's love count to go up",
		fmt.Sprintf(`document.querySelector('[data-testid="badge-likes"] .count').dataset.count === '%d'
			&& document.querySelector('.post[data-post-id="%s"] .react[data-kind="love"] .n').dataset.count === '%d'`,
			likesBadge+1, post, before["love"]+1))
	reactor.screenshot("demo-reactions-love.png")

	reactor.click(button("wow"))
	check("switch to wow", "wow")
	if got := badge(author, "likes"); got != likesBadge+1 {
		t.Errorf("after the switch Maya's likes badge is %d, want %d (a switch bumps nobody)", got, likesBadge+1)
	}
	reactor.screenshot("demo-reactions-wow.png")

	reactor.click(button("wow"))
	check("remove", "")

	// Spend the rest of Ana's mutation budget, then react: the demo shows
	// the server's refusal and the picker stays as it is.
	for i := 0; ; i++ {
		errs := graphQL(t, base, tok.Token, `mutation($id: ID!) { unreactToPost(postId: $id) { id } }`, map[string]any{"id": post}, nil)
		if len(errs) > 0 && errs[0].Extensions.Code == "RATE_LIMITED" {
			break
		}
		if len(errs) > 0 || i == 100 {
			t.Fatalf("spending Ana's budget: %v after %d mutations", errs, i)
		}
	}
	eval[any](reactor, `document.getElementById('toast').hidden = true`)
	reactor.click(button("sad"))
	reactor.waitFor("the refusal in a toast", `!document.getElementById('toast').hidden
		&& document.getElementById('toast').textContent.includes('too many mutations')`)
	reactor.screenshot("demo-reactions-refused.png")
	check("refused sad", "")
}

// On a like-only deployment (the default) the picker is the Like button:
// one kind, like, which is the reaction GraphQL reports.
func TestDemoReactionsLikeOnly(t *testing.T) {
	setup(t)
	p := openDemo(t, sam)
	if got := eval[[]string](p, `[...new Set([...document.querySelectorAll('.post .reactions')].map(g => g.dataset.kinds + '/' + g.querySelectorAll('button').length))]`); len(got) != 1 || got[0] != "like/1" {
		t.Fatalf("like-only pickers: %q, want the like button alone", got)
	}
	card := eval[string](p, `(() => {
		const li = [...document.querySelectorAll('.post')].find(li => li.dataset.author !== '`+sam+`'
			&& li.querySelector('[data-testid="like"]').getAttribute('aria-pressed') === 'false');
		return li ? li.dataset.cardId : '';
	})()`)
	if card == "" {
		t.Fatal("Sam's feed has no post of someone else's he has not liked")
	}
	post := eval[string](p, `document.querySelector('.post[data-card-id="`+card+`"]').dataset.postId`)
	like := `.post[data-card-id="` + card + `"] [data-testid="like"]`
	count := func() int {
		return atoi(p, eval[string](p, `document.querySelector('`+like+` [data-testid="count-likes"]').dataset.count`))
	}
	before := count()
	var tok struct{ Token string }
	getJSON(t, env.base+"/demo/token?user="+sam, &tok)
	viaGraphQL := func() (int, string) {
		var res struct {
			Post struct {
				Reactions []struct {
					Kind  string
					Count int
				}
				ViewerReaction *string
			}
		}
		if errs := graphQL(t, env.base, tok.Token, `query($id: ID!) { post(id: $id) { reactions { kind count } viewerReaction } }`,
			map[string]any{"id": post}, &res); len(errs) > 0 || len(res.Post.Reactions) != 1 || res.Post.Reactions[0].Kind != "like" {
			t.Fatalf("post query: %v %+v", errs, res)
		}
		return res.Post.Reactions[0].Count, deref(res.Post.ViewerReaction)
	}

	p.click(like)
	p.waitFor("the like to show as chosen", `document.querySelector('`+like+`').getAttribute('aria-pressed') === 'true'`)
	if got := count(); got != before+1 {
		t.Errorf("the screen shows %d likes, want %d", got, before+1)
	}
	if n, mine := viaGraphQL(); n != before+1 || mine != "like" {
		t.Errorf("GraphQL: %d likes, viewerReaction %q; want %d, like", n, mine, before+1)
	}
	p.screenshot("demo-reactions-like-only.png")
	p.click(like)
	p.waitFor("the like to go", `document.querySelector('`+like+`').getAttribute('aria-pressed') === 'false'`)
	if n, mine := viaGraphQL(); n != before || mine != "" || count() != before {
		t.Errorf("after removing: GraphQL %d likes, viewerReaction %q, screen %d; want %d, none", n, mine, count(), before)
	}
}

// deref reads a nullable string ("" for null).
func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// gqlError is one GraphQL error of a response.
type gqlError struct {
	Message    string
	Extensions struct{ Code string }
}

// graphQL runs query as the bearer of token on the server at base,
// decoding data into out (when not nil), and returns the errors.
func graphQL(t *testing.T, base, token, query string, vars map[string]any, out any) []gqlError {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"query": query, "variables": vars})
	req, _ := http.NewRequest(http.MethodPost, base+"/query", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var res struct {
		Data   json.RawMessage
		Errors []gqlError
	}
	if err := json.NewDecoder(resp.Body).Decode(&res); err != nil {
		t.Fatalf("%s: %s: %v", query, resp.Status, err)
	}
	if out != nil && len(res.Errors) == 0 {
		if err := json.Unmarshal(res.Data, out); err != nil {
			t.Fatalf("%s: %v", query, err)
		}
	}
	return res.Errors
}
