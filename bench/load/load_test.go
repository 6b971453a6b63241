package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tally-dev/tally/bench/benchutil"
	"github.com/tally-dev/tally/bench/pgpeer"
	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/embedded"
	"github.com/tally-dev/tally/engine/redisstore/redistest"
	"github.com/tally-dev/tally/web/auth"
	"github.com/tally-dev/tally/web/hub"
	"github.com/tally-dev/tally/web/transport"
)

// TestSpawnRun builds the tool and runs it the way the README does, for a
// couple of seconds with few clients: a tally it builds and starts, the
// reference, subscriptions and broadcasts, and where they are installed
// two tally replicas on a redis-server (the subscriptions spread over
// both: a broadcast sent to one reaches the other's subscribers through
// Redis) and PostgreSQL under its gqlgen + dataloader + pgx server. The
// output must parse, every kind must have succeeded (likes, reactions of
// other kinds and unreactions among them), the exactness check must pass
// (every reaction kind's count, the viewers' kinds), the reactions page
// must have been compared with the counts page, and the reference and
// PostgreSQL must answer tally's bytes.
func TestSpawnRun(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts tally")
	}
	var peers []string
	withRedis := redistest.Available()
	benchutil.SkipUnless(t, withRedis || os.Getenv("TALLY_REQUIRE_REDIS") == "", "TALLY_REQUIRE_REDIS", "redis-server is not installed")
	if withRedis {
		peers = append(peers, "-redis", "-replicas", "2")
	} else {
		t.Log("redis-server is not installed (apt-get install -y redis-server): the run goes without tally on Redis")
	}
	_, err := pgpeer.Binaries()
	withPostgres := err == nil
	benchutil.SkipUnless(t, withPostgres || os.Getenv("TALLY_REQUIRE_POSTGRES") == "", "TALLY_REQUIRE_POSTGRES", "PostgreSQL is not installed")
	if withPostgres {
		peers = append(peers, "-postgres")
	} else {
		t.Log("PostgreSQL is not installed (apt-get install -y postgresql): the run goes without it")
	}
	dir := t.TempDir()
	tool := filepath.Join(dir, "load")
	build := exec.Command("go", "build", "-o", tool, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	jsonPath := filepath.Join(dir, "result.json")
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, tool, "-spawn", "-repo", "../..", "-duration", "1500ms", "-compare", "1s",
		"-clients", "4", "-users", "300", "-posts", "200", "-warmup", "200ms", "-subs", "20", "-subs-per-process", "8", "-broadcasts", "2",
		"-broadcast-every", "500ms", "-react-compare", "1s", "-mix", "feed=40,badge=20,like=10,react=10,unreact=5,comment=5,view=10", "-json", jsonPath)
	// The feed-only phases of 300 users at full speed can pass a user's
	// cost budget (-cost-rate) on a fast machine; the run's shapes, not
	// the limit, are under test.
	cmd.Args = append(cmd.Args, "-tally-args", "-cost-rate 0")
	cmd.Args = append(cmd.Args, peers...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	t.Logf("output:\n%s", stdout.String())
	if err != nil {
		t.Fatalf("load: %v\n%s", err, stderr.String())
	}

	// The text: every row of a kind table parses, the run says ok.
	text := stdout.String()
	rows := 0
	sc := bufio.NewScanner(strings.NewReader(text))
	inTable := false
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) > 0 && f[0] == "kind" {
			inTable = true
			continue
		}
		if !inTable || len(f) != 8 || !slices.Contains(kindNames[:], f[0]) {
			inTable = false
			continue
		}
		rows++
		for _, n := range f[1:3] {
			if _, err := strconv.ParseUint(n, 10, 64); err != nil {
				t.Errorf("row %q: %q is not a count", sc.Text(), n)
			}
		}
		if _, err := strconv.ParseFloat(f[3], 64); err != nil {
			t.Errorf("row %q: %q is not a rate", sc.Text(), f[3])
		}
		for _, d := range f[4:] {
			if _, err := time.ParseDuration(strings.ReplaceAll(d, "µs", "us")); err != nil {
				t.Errorf("row %q: %q is not a duration", sc.Text(), d)
			}
		}
	}
	if rows < 12 { // eight kinds in the mixed phase, feed in each comparison and in both reaction pages
		t.Errorf("%d table rows, want at least 12", rows)
	}
	if !strings.Contains(text, "\nresult: ok\n") {
		t.Errorf("the run did not end with result: ok")
	}

	// The JSON.
	b, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var res jsonReport
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	// Reactions: every kind counted exactly and every reacting viewer's
	// kind as acknowledged, and the two pages compared on each tally that
	// serves kinds beyond like (shapes only: the ratio is a measurement).
	kinds := []string{"like", "love", "haha", "wow", "sad", "angry"}
	checkReactions := func(target string) {
		ex, ok := res.Exactness[target]
		if !ok || !ex.Exact || ex.Checked < 200*(4+len(kinds)) || ex.Likes == 0 || ex.Comments == 0 || ex.Views == 0 ||
			len(ex.Reactions) != len(kinds) || ex.Reactions["like"] != ex.Likes || ex.Reactions["love"] == 0 || ex.Viewers == 0 {
			t.Errorf("exactness on %s: %+v", target, ex)
		}
		rp, ok := res.ReactionPage[target]
		if !ok || !slices.Equal(rp.Kinds, kinds) || rp.PagePosts != 50 || rp.Slices != 1 || rp.PostsWithOther == 0 ||
			rp.CountsPages == 0 || rp.ReactionPages == 0 || rp.CPURatio <= 0 || rp.TimeRatio <= 0 {
			t.Errorf("reaction page on %s: %+v", target, rp)
		}
		for _, p := range res.Phases {
			if p.Target == target && (p.Phase == "counts-page" || p.Phase == "reactions-page") && len(p.Kinds["feed"].Errors) > 0 {
				t.Errorf("%s on %s had errors: %v", p.Phase, target, p.Kinds["feed"].Errors)
			}
		}
	}
	checkReactions("tally-embedded")
	var mixed *jsonPhase
	for i, p := range res.Phases {
		if p.Phase == "mixed" && p.Target == "tally-embedded" {
			mixed = &res.Phases[i]
		}
	}
	if mixed == nil {
		t.Fatal("no mixed phase in the JSON")
	}
	for _, k := range kindNames {
		kd := mixed.Kinds[k]
		if kd.OK == 0 || kd.P50us <= 0 || kd.P99us < kd.P50us || kd.MaxUs < kd.P999us {
			t.Errorf("kind %s: %+v", k, kd)
		}
		if len(kd.Errors) > 0 {
			t.Errorf("kind %s had errors: %v", k, kd.Errors)
		}
	}
	// 20 subscriptions in 3 processes of at most 8: a red dot, a system
	// notification, and a like on each subscriber's post.
	bc := res.Broadcast["tally-embedded"]
	if bc.Subs != 20 || !bc.AllWithin1s || bc.Phases["redDot"].Delivered != 20 || bc.Phases["system"].Delivered != 20 ||
		bc.Phases["like"].Delivered != 20 || bc.Phases["mixed"].Delivered == 0 || bc.Stray != 0 {
		t.Errorf("broadcast: %+v", bc)
	}
	for _, ph := range []string{"redDot", "system", "like"} {
		if d := bc.Phases[ph]; d.P50us <= 0 || d.MaxUs < d.P99us || d.MaxUs > 1e6 {
			t.Errorf("%s delivery: %+v", ph, d)
		}
	}
	// An open subscription holds no goroutine, so the count moves only by
	// the server's own background work (it fell by one in a CI run): a
	// goroutine per socket would show as 1 or more.
	if m := res.Subscriptions["tally-embedded"]; m.Subs != 20 || m.Processes != 3 || m.GoroutinesAfter <= 0 || m.GoroutinesPerSub >= 1 || m.RSSAfter <= 0 {
		t.Errorf("subscriptions: %+v", m)
	}
	if !res.SameBytes {
		t.Errorf("tally and the reference answered different bytes for the same page")
	}
	if r := res.Ratios["tally-embedded/reference"]; r <= 0 {
		t.Errorf("no ratio tally-embedded/reference: %v", res.Ratios)
	}
	if withRedis {
		m := res.Subscriptions["tally-redis"]
		if m.Subs != 20 || m.Servers != 2 || m.Processes != 3 || m.GoroutinesAfter <= 0 {
			t.Errorf("subscriptions on the replicas: %+v", m)
		}
		bc := res.Broadcast["tally-redis"]
		if bc.Subs != 20 || !bc.AllWithin1s || bc.Phases["redDot"].Delivered != 20 || bc.Phases["system"].Delivered != 20 ||
			bc.Phases["like"].Delivered != 20 || bc.Stray != 0 || len(bc.Codes) != 0 {
			t.Errorf("broadcast over the replicas: %+v", bc)
		}
		checkReactions("tally-redis")
	}
	if withPostgres {
		if !res.PostgresSameBytes {
			t.Error("tally and the PostgreSQL peer answered different bytes for the same page")
		}
		var pg *jsonPhase
		for i, p := range res.Phases {
			if p.Target == "postgres" && p.Phase == "compare" {
				pg = &res.Phases[i]
			}
		}
		if pg == nil || pg.Kinds["feed"].OK == 0 || len(pg.Kinds["feed"].Errors) > 0 || pg.ServerCPUs <= 0 || pg.StoreCPUs < 0 || pg.StoreCPUs > pg.ServerCPUs {
			t.Errorf("postgres's comparison phase: %+v", pg)
		}
		for _, r := range []string{"tally-embedded/postgres", "postgres/reference", "tally-embedded/postgres cpu_per_page"} {
			if res.Ratios[r] <= 0 {
				t.Errorf("no ratio %s: %v", r, res.Ratios)
			}
		}
	}
}

// TestVerifyCatchesMiscount runs the exactness check against the
// reference server loaded with counts that differ from the ledger: a
// count above what was acknowledged (a write applied twice) and one below
// (an acknowledged write lost) must both be reported; with ambiguous
// writes, a count within acked..acked+ambiguous passes.
func TestVerifyCatchesMiscount(t *testing.T) {
	keys, _ := auth.NewKeys([]byte("test-secret-0123456789"))
	ref := &refServer{keys: keys}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/load" {
			ref.load(w, r)
			return
		}
		ref.query(w, r)
	}))
	defer srv.Close()
	admin, _ := keys.Sign(1, true, 0)
	g := newGQL(srv.URL, 1)

	mk := func(likes, comments int64, viewerLost bool) *world {
		w := &world{adminToken: admin, posts: []string{"100", "200"}, users: []uint64{7, 8, 9}, ledger: newLedger(3), kinds: []string{"like"}}
		for _, u := range w.users {
			tok, _ := keys.Sign(engine.UserID(u), false, 0)
			w.userTokens = append(w.userTokens, tok)
		}
		w.ledger.sized(2)
		w.ledger.react(pair{7, 100}, 0, true)
		w.ledger.react(pair{8, 100}, 0, true)
		w.ledger.comments[1] = 3
		w.ledger.postsBy[5] = 2
		author := &refUser{ID: "5", PostCount: 2}
		posts := []*readback{}
		for i, id := range w.posts {
			p := &readback{ID: id}
			p.Author = &struct {
				ID             string `json:"id"`
				PostCount      int64  `json:"postCount"`
				FollowerCount  int64  `json:"followerCount"`
				FollowingCount int64  `json:"followingCount"`
			}{ID: author.ID, PostCount: author.PostCount}
			if i == 0 {
				p.Counts.Likes = likes
			} else {
				p.Counts.Comments = comments
			}
			posts = append(posts, p)
		}
		rw := referenceWorld(w, posts)
		if viewerLost {
			rw.Likes = rw.Likes[:1]
		}
		if err := loadReference(&server{base: srv.URL}, rw); err != nil {
			t.Fatal(err)
		}
		return w
	}
	for _, c := range []struct {
		name            string
		likes, comments int64
		ambiguousLike   bool
		viewerLost      bool
		exact           bool
	}{
		{"equal", 2, 3, false, false, true},
		{"a like applied twice", 3, 3, false, false, false},
		{"an acknowledged like lost", 1, 3, false, false, false},
		{"an acknowledged comment lost", 2, 2, false, false, false},
		{"an ambiguous like applied", 3, 3, true, false, true},
		{"an ambiguous like not applied", 2, 3, true, false, true},
		{"beyond the ambiguous like", 4, 3, true, false, false},
		{"a viewer's like not shown", 2, 3, false, true, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := mk(c.likes, c.comments, c.viewerLost)
			if c.ambiguousLike {
				w.ledger.react(pair{9, 100}, 0, false)
			}
			ex, _, err := verify(context.Background(), g, w)
			if err != nil {
				t.Fatal(err)
			}
			if ex.Exact != c.exact {
				t.Errorf("exact = %v, want %v; mismatches %v", ex.Exact, c.exact, ex.Mismatches)
			}
		})
	}
}

// TestHistQuantiles compares the histogram's quantiles with the exact ones
// of the same samples: within the bucket width (1/64) everywhere.
func TestHistQuantiles(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var a, b hist
	var all []float64
	for i := range 100_000 {
		v := time.Duration(math.Exp(rng.NormFloat64()*1.5+13)) + time.Duration(rng.IntN(50))
		if i%2 == 0 {
			a.record(v)
		} else {
			b.record(v)
		}
		all = append(all, float64(v))
	}
	a.merge(&b)
	slices.Sort(all)
	if a.n != uint64(len(all)) || a.min != uint64(all[0]) || a.max != uint64(all[len(all)-1]) {
		t.Fatalf("n %d min %d max %d, want %d %v %v", a.n, a.min, a.max, len(all), all[0], all[len(all)-1])
	}
	for _, q := range []float64{0.001, 0.5, 0.9, 0.99, 0.999, 1} {
		want := all[int(math.Ceil(q*float64(len(all))))-1]
		got := float64(a.quantile(q))
		if math.Abs(got-want) > want/64+1 {
			t.Errorf("q%v = %v, exact %v", q, got, want)
		}
	}
	var empty hist
	if empty.quantile(0.99) != 0 {
		t.Error("an empty histogram has a quantile")
	}
	for _, v := range []uint64{0, 1, 63, 64, 65, 127, 128, 1 << 40, math.MaxUint64} {
		i := histIndex(v)
		if i < 0 || i >= histBuckets {
			t.Fatalf("index of %d is %d", v, i)
		}
		if hv := float64(histValue(i)); math.Abs(hv-float64(v)) > float64(v)/64+1 {
			t.Errorf("value %d lands in bucket %d valued %d", v, i, histValue(i))
		}
	}
}

func TestParseFlagsRefusesBadInput(t *testing.T) {
	for _, args := range [][]string{
		{"-mix", "feed=1,bogus=2"},
		{"-mix", "feed=x"},
		{"-mix", "feed=0"},
		{"-page-size", "50-20"},
		{"-page-size", "0"},
		{"-page-size", "20-200"},
		{"-clients", "0"},
		{"-posts", "10"},
		{"-subs", "-1"},
		{"-subs", "3000", "-subs-per-process", "10"},
		{"-subs-per-process", "0"},
		{"-sub-likes", "-1"},
		{"-replicas", "2"},
		{"-replicas", "0"},
		{"-postgres"},
		{"-spawn", "-postgres", "-compare", "0"},
		{"-react-compare", "-1s"},
		{"stray"},
	} {
		if _, err := parseFlags(append([]string{"-secret", "s-0123456789abcdef"}, args...), io.Discard); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
	if _, err := parseFlags([]string{}, io.Discard); err == nil && os.Getenv("TALLY_JWT_SECRET") == "" {
		t.Error("no secret and no admin token accepted")
	}
	c, err := parseFlags([]string{"-secret", "s-0123456789abcdef", "-page-size", "50", "-mix", "feed=3,like=1"}, io.Discard)
	if err != nil || c.pageMin != 50 || c.pageMax != 50 || c.mix[kFeed] != 3 || c.mix[kLike] != 1 || c.mix[kBadge] != 0 {
		t.Errorf("%+v %v", c, err)
	}
}

// TestClassify: the codes the tool reports per kind, and which failures
// leave a write's outcome unknown.
func TestClassify(t *testing.T) {
	for _, c := range []struct {
		r    reply
		code string
		amb  bool
	}{
		{reply{status: 200, body: []byte(`{"data":{"x":1}}`)}, "", false},
		{reply{status: 200, body: []byte(`{"errors":[{"message":"m","extensions":{"code":"RATE_LIMITED"}}],"data":null}`)}, "RATE_LIMITED", false},
		{reply{status: 200, body: []byte(`{"errors":[{"message":"m","extensions":{"code":"INTERNAL"}}]}`)}, "INTERNAL", true},
		{reply{status: 503, body: []byte(`{"errors":[{"message":"m","extensions":{"code":"UNAVAILABLE","retryAfter":1}}]}`)}, "UNAVAILABLE", true},
		{reply{status: 200, body: []byte(`{"errors":[{"message":"m"}]}`)}, codeNoCode, false},
		{reply{status: 503, body: []byte(`unavailable`)}, "HTTP_503", true},
		{reply{status: 429, body: []byte(`slow down`)}, "HTTP_429", false},
		{reply{status: 200, body: []byte(`{"data":{"title":"\"errors\""}}`)}, "", false},
		{reply{err: io.ErrUnexpectedEOF}, codeTransport, true},
	} {
		if got := classify(c.r); got != c.code || ambiguous(got) != c.amb {
			t.Errorf("%s: %q (ambiguous %v), want %q (%v)", c.r.body, got, ambiguous(got), c.code, c.amb)
		}
	}
}

// TestVerifyReactions seeds a tally in this process (the embedded engine
// with three kinds behind the real handler) through the tool, runs a
// short phase of likes, reactions and unreactions, and checks that the
// exactness check passes; then that it fails on a switch the ledger
// missed, on a reaction the server counts but nobody acknowledged, and
// passes again when the missed switch is a write without a definite
// answer.
func TestVerifyReactions(t *testing.T) {
	store, err := embedded.Open(embedded.Options{Reactions: []string{"like", "love", "haha"}})
	if err != nil {
		t.Fatal(err)
	}
	keys, _ := auth.NewKeys([]byte("test-secret-0123456789"))
	h := hub.New(store)
	srv := httptest.NewServer(transport.NewServerHandler(transport.ServerConfig{Config: transport.Config{Store: store, Hub: h, Keys: keys}}))
	t.Cleanup(func() {
		srv.Close()
		h.Close()
		store.Close()
	})
	cfg := config{users: 20, posts: 30, seed: 1, userBase: 1000, secret: "test-secret-0123456789"}
	tok := &tokens{cache: map[uint64]string{}}
	if err := tok.setup(cfg.secret, ""); err != nil {
		t.Fatal(err)
	}
	w, err := newWorld(cfg, tok, "verify-reactions")
	if err != nil {
		t.Fatal(err)
	}
	g := newGQL(srv.URL, 4)
	var out bytes.Buffer
	if err := seed(t.Context(), g, w, cfg, &report{w: &out}); err != nil {
		t.Fatal(err)
	}
	if !w.reacts || !slices.Equal(w.kinds, []string{"like", "love", "haha"}) {
		t.Fatalf("kinds %q (reactions %v); output %s", w.kinds, w.reacts, out.String())
	}
	m := mix{}
	m[kLike], m[kReact], m[kUnreact], m[kFeed] = 2, 2, 1, 1
	res := runPhase(g, w, phaseCfg{name: "mixed", duration: 300 * time.Millisecond, clients: 4, mix: m, pageMin: 5, pageMax: 5,
		page: mixedPage(w), seed: 1, runID: w.runID}, &server{name: "in-process"}, nil)
	for _, k := range []kind{kFeed, kLike, kReact, kUnreact} {
		if c := res.Kinds[k]; c.failed() > 0 {
			t.Errorf("%s failed: %v", kindNames[k], c.errEx)
		}
	}
	ex, _, err := verify(t.Context(), g, w)
	if err != nil {
		t.Fatal(err)
	}
	if !ex.Exact || ex.Reactions["love"]+ex.Reactions["haha"] == 0 || ex.Reactions["like"] != ex.Likes || ex.Viewers == 0 {
		t.Fatalf("exactness: %+v", ex)
	}

	// A love the ledger takes for a like: love's count, like's, and the
	// viewer's kind disagree.
	love := stateOf(w.kindIndex("love"))
	var switched pair
	for p, st := range w.ledger.reactions {
		if st == love {
			switched = p
			break
		}
	}
	if switched == (pair{}) {
		t.Fatal("no love standing")
	}
	w.ledger.react(switched, w.kindIndex("like"), true)
	if ex, _, _ := verify(t.Context(), g, w); ex.Exact || len(ex.Mismatches) != 4 {
		t.Errorf("a missed switch: %+v", ex)
	}
	// The switch to love without a definite answer: either is consistent.
	w.ledger.react(switched, w.kindIndex("love"), false)
	if ex, _, _ := verify(t.Context(), g, w); !ex.Exact || ex.Ambiguous != 1 {
		t.Errorf("an ambiguous switch: %+v", ex)
	}
	// A reaction nobody acknowledged, by a user the ledger says has none
	// on that post (the mixed phase's random reactions may have given any
	// one pair a haha already).
	var none pair
	for _, u := range w.users {
		for _, p := range w.posts {
			if _, ok := w.ledger.reactions[pair{u, postID(p)}]; !ok && none == (pair{}) {
				none = pair{u, postID(p)}
			}
		}
	}
	if none == (pair{}) {
		t.Fatal("every user reacted to every post")
	}
	if err := store.ReactToPost(t.Context(), engine.UserID(none.user), engine.PostID(none.post), "haha"); err != nil {
		t.Fatal(err)
	}
	if ex, _, _ := verify(t.Context(), g, w); ex.Exact {
		t.Errorf("a reaction not acknowledged: %+v", ex)
	}
}
