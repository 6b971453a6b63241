package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/coder/websocket"
	"github.com/coder/websocket/wsjson"
)

// TestReadmeFirstQuery follows the README's "A first query" section as a
// new user does, on a plain `go build` of tally in dev mode: every
// ```graphql block of the section, pasted on its own with the admin token
// (`tally token -user 1 -admin -data DIR`), runs without errors; <id>
// stands for the id the first block's createPost returned; a subscription
// block delivers an event once user 2 comments on that post. Then, with
// the server stopped, `tally demo-seed` seeds that same data directory
// (twice: the second changes nothing), and the restarted server serves
// the demo world.
//
// TALLY_README names another file with the same section (for a draft;
// a relative name is from the repository's root).
func TestReadmeFirstQuery(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the tally binary")
	}
	readme := filepath.Join(repoRoot, "README.md")
	if p := os.Getenv("TALLY_README"); p != "" {
		readme = p
		if !filepath.IsAbs(p) {
			readme = filepath.Join(repoRoot, p)
		}
	}
	text, err := os.ReadFile(readme)
	if err != nil {
		t.Fatal(err)
	}
	blocks := readmeBlocks(t, string(text), "## A first query", "graphql")
	if len(blocks) < 2 {
		t.Fatalf("%s's first-query section has %d graphql blocks", readme, len(blocks))
	}
	if !strings.Contains(string(text), "go run . demo-seed") {
		t.Errorf("%s does not show how to seed the demo (go run . demo-seed)", readme)
	}

	bin, err := buildTally()
	if err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(t.TempDir(), "data")
	srv := startDevBinary(t, bin, data)

	admin := strings.TrimSpace(runBinary(t, bin, "token", "-user", "1", "-admin", "-data", data))
	user2 := strings.TrimSpace(runBinary(t, bin, "token", "-user", "2", "-data", data))

	var postID string
	for i, block := range blocks {
		doc := strings.ReplaceAll(block, "<id>", postID)
		ops := regexp.MustCompile(`(?m)^(query|mutation|subscription)\b|^\{`).FindAllString(doc, -1)
		if len(ops) != 1 {
			t.Errorf("block %d holds %d operations; paste-able blocks hold one:\n%s", i+1, len(ops), block)
			continue
		}
		if strings.TrimSpace(ops[0]) == "subscription" {
			readmeSubscription(t, srv, admin, doc, func() {
				srv.graphql(t, user2, `mutation($p: ID!) { commentOnPost(postId: $p) { id } }`, map[string]any{"p": postID})
			})
			continue
		}
		data := srv.graphql(t, admin, doc, nil)
		if i == 0 {
			var created struct{ CreatePost struct{ ID string } }
			if err := json.Unmarshal(data, &created); err != nil || created.CreatePost.ID == "" {
				t.Fatalf("the first block must create a post and return its id; got %s", data)
			}
			postID = created.CreatePost.ID
		}
	}
	if postID == "" {
		t.Fatal("no post was created")
	}

	// The demo, seeded into the directory the blocks above wrote to.
	srv.stop(t)
	out := runBinary(t, bin, "demo-seed", "-data", data)
	if !strings.Contains(out, "seeded") {
		t.Errorf("demo-seed said %q", out)
	}
	if out := runBinary(t, bin, "demo-seed", "-data", data); !strings.Contains(out, "nothing to do") {
		t.Errorf("a second demo-seed said %q, want nothing to do", out)
	}
	srv = startDevBinary(t, bin, data)
	var world struct {
		Seeded bool
		Posts  []any
	}
	resp, err := http.Get(srv.base + "/demo/world")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&world); err != nil || !world.Seeded || len(world.Posts) == 0 {
		t.Errorf("the demo world after demo-seed: seeded=%v, %d posts, %v", world.Seeded, len(world.Posts), err)
	}
	// The README's post is still there, with its like.
	admin = strings.TrimSpace(runBinary(t, bin, "token", "-user", "1", "-admin", "-data", data))
	got := srv.graphql(t, admin, `query($p: ID!) { post(id: $p) { counts { likes } author { id } } }`, map[string]any{"p": postID})
	if !strings.Contains(string(got), `"likes":1`) || !strings.Contains(string(got), `"id":"1"`) {
		t.Errorf("the README's post after seeding: %s", got)
	}
}

// readmeBlocks returns the fenced blocks of language lang in the section
// that starts with the heading line, up to the next "## " heading.
func readmeBlocks(t *testing.T, text, heading, lang string) []string {
	t.Helper()
	section := markdownSection(t, text, heading)
	var blocks []string
	fence := regexp.MustCompile("(?s)```" + regexp.QuoteMeta(lang) + "\n(.*?)```")
	for _, m := range fence.FindAllStringSubmatch(section, -1) {
		blocks = append(blocks, m[1])
	}
	return blocks
}

// markdownSection is the text under heading (a whole line, "## …"), up
// to the next "## " heading.
func markdownSection(t *testing.T, text, heading string) string {
	t.Helper()
	start := strings.Index(text, "\n"+heading+"\n")
	if start < 0 {
		t.Fatalf("no %q section", heading)
	}
	section := text[start+len(heading)+2:]
	if end := strings.Index(section, "\n## "); end >= 0 {
		section = section[:end]
	}
	return section
}

type devBinary struct {
	base string
	cmd  *exec.Cmd
	log  *bytes.Buffer
	done chan struct{}
}

// startDevBinary runs bin in dev mode (no TALLY_JWT_SECRET) on a free
// loopback port until the test ends.
func startDevBinary(t *testing.T, bin, data string) *devBinary {
	t.Helper()
	return startBinaryWith(t, bin, withoutTallyEnv(), "-data", data)
}

// startBinaryWith starts bin with args and env on a free loopback port and
// waits until it is healthy.
func startBinaryWith(t *testing.T, bin string, env []string, args ...string) *devBinary {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	s := &devBinary{base: "http://" + addr, log: &bytes.Buffer{}, done: make(chan struct{})}
	s.cmd = exec.Command(bin, append([]string{"-addr", addr}, args...)...)
	s.cmd.Env = env
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { s.cmd.Wait(); close(s.done) }()
	t.Cleanup(func() { s.stop(t) })
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(s.base + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return s
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("tally did not come up: %v\n%s", err, s.log)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (s *devBinary) stop(t *testing.T) {
	select {
	case <-s.done:
		return
	default:
	}
	s.cmd.Process.Signal(os.Interrupt)
	select {
	case <-s.done:
	case <-time.After(15 * time.Second):
		s.cmd.Process.Kill()
		<-s.done
		t.Errorf("tally did not stop on SIGINT within 15 s\n%s", s.log)
	}
}

// graphql posts one document as the token's user and returns data; any
// error fails the test.
func (s *devBinary) graphql(t *testing.T, token, doc string, vars map[string]any) json.RawMessage {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"query": doc, "variables": vars})
	req, _ := http.NewRequest(http.MethodPost, s.base+"/query", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var res struct {
		Data   json.RawMessage
		Errors []any
	}
	if err := json.NewDecoder(resp.Body).Decode(&res); err != nil || resp.StatusCode != 200 || len(res.Errors) > 0 {
		t.Fatalf("%d %v %v for:\n%s", resp.StatusCode, res.Errors, err, doc)
	}
	return res.Data
}

// readmeSubscription runs a subscription block over graphql-transport-ws
// as the token's user, calling trigger until an event arrives.
func readmeSubscription(t *testing.T, s *devBinary, token, doc string, trigger func()) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conn, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(s.base, "http")+"/query",
		&websocket.DialOptions{Subprotocols: []string{"graphql-transport-ws"}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseNow()
	type msg struct {
		ID      string          `json:"id,omitempty"`
		Type    string          `json:"type"`
		Payload json.RawMessage `json:"payload,omitempty"`
	}
	init, _ := json.Marshal(map[string]string{"Authorization": "Bearer " + token})
	if err := wsjson.Write(ctx, conn, msg{Type: "connection_init", Payload: init}); err != nil {
		t.Fatal(err)
	}
	var m msg
	if err := wsjson.Read(ctx, conn, &m); err != nil || m.Type != "connection_ack" {
		t.Fatalf("connection_init: %v %+v", err, m)
	}
	sub, _ := json.Marshal(map[string]string{"query": doc})
	if err := wsjson.Write(ctx, conn, msg{ID: "1", Type: "subscribe", Payload: sub}); err != nil {
		t.Fatal(err)
	}
	events := make(chan msg, 4)
	go func() {
		defer close(events)
		for {
			var m msg
			if err := wsjson.Read(ctx, conn, &m); err != nil {
				return
			}
			events <- m
		}
	}()
	tick := time.NewTicker(300 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case m, ok := <-events:
			if !ok {
				t.Fatalf("the socket closed before an event arrived for:\n%s", doc)
			}
			if m.Type != "next" || bytes.Contains(m.Payload, []byte(`"errors"`)) {
				t.Fatalf("subscription answered %s %s for:\n%s", m.Type, m.Payload, doc)
			}
			return
		case <-tick.C:
			trigger()
		case <-ctx.Done():
			t.Fatalf("no event within 20 s for:\n%s", doc)
		}
	}
}

func runBinary(t *testing.T, bin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = withoutTallyEnv()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("tally %s: %v\n%s%s", strings.Join(args, " "), err, out.String(), errb.String())
	}
	return out.String()
}

// withoutTallyEnv is the environment minus Tally's settings, so that the
// binary runs in dev mode with its defaults.
func withoutTallyEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TALLY_") {
			env = append(env, kv)
		}
	}
	return env
}

// docsPlanned are pages other branches add; links to them are allowed
// before they exist.
var docsPlanned = map[string]bool{"docs/redis-durability.md": true, "docs/running.md": true}

// TestDocLinks checks that the README links every page of docs/, and
// that every relative link in README.md and docs/*.md points at a file of
// the repository and, with a #fragment, at a heading (or an explicit id)
// of that page, as GitHub renders it.
func TestDocLinks(t *testing.T) {
	root := moduleRoot(t)
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	pages = append([]string{filepath.Join(root, "README.md")}, pages...)
	anchors := map[string]map[string]bool{} // page path → its anchors
	anchorsOf := func(path string) map[string]bool {
		if a, ok := anchors[path]; ok {
			return a
		}
		text, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		a := markdownAnchors(string(text))
		anchors[path] = a
		return a
	}
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	readme, err := os.ReadFile(pages[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, page := range pages[1:] {
		if name := "docs/" + filepath.Base(page); !strings.Contains(string(readme), "]("+name+")") {
			t.Errorf("README.md does not link %s", name)
		}
	}
	for _, page := range pages {
		text, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, page)
		for _, m := range link.FindAllStringSubmatch(withoutCode(string(text)), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, frag, _ := strings.Cut(target, "#")
			path := page
			if file != "" {
				path = filepath.Join(filepath.Dir(page), filepath.FromSlash(file))
			}
			inRepo, err := filepath.Rel(root, path)
			if err != nil || strings.HasPrefix(inRepo, "..") {
				t.Errorf("%s: link %s leaves the repository", rel, target)
				continue
			}
			if _, err := os.Stat(path); err != nil {
				if !docsPlanned[filepath.ToSlash(inRepo)] {
					t.Errorf("%s: link %s: no file %s", rel, target, inRepo)
				}
				continue
			}
			if frag != "" && strings.HasSuffix(path, ".md") && !anchorsOf(path)[frag] {
				t.Errorf("%s: link %s: %s has no heading with anchor #%s", rel, target, inRepo, frag)
			}
		}
	}
}

// moduleRoot is the directory of go.mod above the working directory.
func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the working directory")
		}
		dir = parent
	}
}

// withoutCode blanks fenced code blocks, whose brackets are not links.
func withoutCode(text string) string {
	var out strings.Builder
	fenced := false
	for line := range strings.Lines(text) {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			out.WriteString(line)
		}
	}
	return out.String()
}

// markdownAnchors returns the anchors GitHub gives a page's headings
// (lower case, punctuation dropped, spaces as hyphens, repeats numbered)
// and its explicit id="…" attributes.
func markdownAnchors(text string) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	for line := range strings.Lines(withoutCode(text)) {
		line = strings.TrimRight(line, "\n")
		if !strings.HasPrefix(line, "#") {
			continue
		}
		title := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var slug strings.Builder
		for _, r := range strings.ToLower(title) {
			switch {
			case r == ' ':
				slug.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				slug.WriteRune(r)
			}
		}
		s := slug.String()
		if n := seen[s]; n > 0 {
			anchors[fmt.Sprintf("%s-%d", s, n)] = true
		} else {
			anchors[s] = true
		}
		seen[s]++
	}
	for _, m := range regexp.MustCompile(`id="([^"]+)"`).FindAllStringSubmatch(text, -1) {
		anchors[m[1]] = true
	}
	return anchors
}
