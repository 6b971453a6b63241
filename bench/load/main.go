// Command load drives a running Tally with a realistic mix of client
// traffic for a bounded time and reports what it sustained: feed pages of
// 20–50 posts (counts, the viewer's like and favorite flags, the authors'
// counts; on a server with reaction kinds beyond like, every kind's count
// and the viewer's kind in place of the like flag), likes, reactions of
// other kinds and switches between them, unreactions, comments, views,
// badge polls, N open unreadChanged
// subscriptions over graphql-transport-ws (held by subscriber processes,
// subchild.go), and admin broadcasts. It prints throughput and
// p50/p99/p999 latency per kind and errors per kind with their codes,
// checks at the end that every acknowledged write is counted exactly
// (every reaction kind's count, and each reacting viewer's kind),
// measures delivery of broadcasts (red dot, system notifications) to every
// subscriber and of a like to its post's owner, the server CPU per push
// and the memory per open subscription, and compares a feed page with a
// hand-written net/http + encoding/json reference server doing the same
// work in its own process (-reference runs that server) and with
// PostgreSQL under a gqlgen + dataloader + pgx server (-postgres,
// bench/pgpeer; -pg-peer runs that server), and on each tally serving
// kinds beyond like, the page of reactions with the page of counts
// (-react-compare).
//
// With -spawn it builds and starts everything itself on loopback (a tally
// on a fresh data directory, optionally tallies on a redis-server it
// starts, the reference, a PostgreSQL cluster) and stops what it started,
// by pid.
// Otherwise it drives the server at -url, which must share the tool's
// TALLY_JWT_SECRET (or -secret) so that the tool can sign its users'
// tokens. See -h for the flags, docs/load-tool.md for how to run it and
// docs/performance.md for figures.
package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

type config struct {
	url, referenceURL  string
	secret, adminToken string
	pid                int
	pprofURL           string
	referencePID       int

	spawn, redis, peer bool
	postgres           bool
	repo, serverCPUs   string
	tallyArgs          string
	keep               bool

	reference bool
	addr      string
	pgPeer    bool
	pgDSN     string

	duration, compare time.Duration
	warmup            time.Duration
	comparePage       int
	clients           int
	mix               mix
	pageMin, pageMax  int
	subs              int
	subsPerProcess    int
	subLikes          int
	replicas          int
	broadcastEvery    time.Duration
	broadcasts        int
	users, posts      int
	seed              uint64
	userBase          uint64
	jsonPath          string
	profileDir        string
	reactions         string
	reactCompare      time.Duration
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("load", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, `load drives a running tally with a realistic client mix and reports throughput,
latency percentiles and errors per kind, exactness of acknowledged writes, broadcast
delivery to open subscriptions, and a feed page against a hand-written reference server.

  go run ./bench/load -spawn -redis                 # build and start everything, compare
  go run ./bench/load -url http://127.0.0.1:8080    # a running tally (TALLY_JWT_SECRET set)
  go run ./bench/load -reference -addr 127.0.0.1:9090   # serve the reference peer

Flags:
`)
		fs.PrintDefaults()
	}
	fs.StringVar(&c.url, "url", "http://127.0.0.1:8080", "base URL of a running tally (without -spawn)")
	fs.StringVar(&c.referenceURL, "reference-url", "", "base URL of a running reference server to compare with (without -spawn)")
	fs.StringVar(&c.secret, "secret", os.Getenv("TALLY_JWT_SECRET"), "HS256 secret the server verifies tokens with, to sign the tool's users (default $TALLY_JWT_SECRET; with -spawn a random one)")
	fs.StringVar(&c.adminToken, "admin-token", "", "without a secret: one admin token used for every request (one user: likes de-duplicate, rate limits bind, at most -ws-max-per-user subscriptions)")
	fs.IntVar(&c.pid, "pid", 0, "pid of the running tally, for CPU from /proc/<pid>/stat and RSS (without -spawn; else CPU comes from /metrics)")
	fs.IntVar(&c.referencePID, "reference-pid", 0, "pid of the running reference server, for its CPU (without -spawn)")
	fs.StringVar(&c.pprofURL, "pprof-url", "", "without -spawn: base URL of the running tally's -pprof listener, used to force a GC before memory readings")
	fs.BoolVar(&c.spawn, "spawn", false, "build tally (go build -o into a temp dir) and start it on a fresh data directory, and the reference, on free loopback ports")
	fs.BoolVar(&c.redis, "redis", false, "with -spawn: also start a redis-server and a tally on it, and compare")
	fs.BoolVar(&c.peer, "peer", true, "with -spawn: also start the reference server and compare")
	fs.BoolVar(&c.postgres, "postgres", false, "with -spawn: also compare a PostgreSQL cluster it starts (Debian's postgresql, seed 003's tables) under a GraphQL server built with gqlgen + dataloader + pgx (bench/pgpeer), loaded with the first tally's posts, likes and favorites")
	fs.StringVar(&c.repo, "repo", "", "with -spawn: the tally module's directory (default: found upward from the working directory)")
	fs.StringVar(&c.serverCPUs, "server-cpus", "", "with -spawn: run the servers under taskset -c LIST (e.g. 1; run the tool itself under taskset -c 0)")
	fs.StringVar(&c.tallyArgs, "tally-args", "", "with -spawn: extra flags for tally, space-separated (e.g. \"-fsync batch\")")
	fs.BoolVar(&c.keep, "keep", false, "with -spawn: keep the temp directory (binaries, data, logs)")
	fs.BoolVar(&c.reference, "reference", false, "serve the hand-written reference server on -addr instead of generating load")
	fs.StringVar(&c.addr, "addr", "127.0.0.1:9090", "with -reference or -pg-peer: listen address")
	fs.BoolVar(&c.pgPeer, "pg-peer", false, "serve the PostgreSQL peer (bench/pgpeer) on -addr over the database at -pg instead of generating load")
	fs.StringVar(&c.pgDSN, "pg", "", "with -pg-peer: the database, as a postgres:// URL")
	fs.DurationVar(&c.duration, "duration", 10*time.Second, "length of the mixed phase on each tally (0 skips it)")
	fs.DurationVar(&c.compare, "compare", 5*time.Second, "length of the feed-only comparison phase on each server (0 skips it)")
	fs.DurationVar(&c.warmup, "warmup", time.Second, "unmeasured load on each server before its comparison phase")
	fs.IntVar(&c.comparePage, "compare-page", 50, "posts per page in the comparison phase")
	fs.IntVar(&c.clients, "clients", 16, "concurrent closed-loop clients")
	mixFlag := fs.String("mix", "feed=50,badge=25,like=8,react=2,unreact=1,comment=5,view=9", "weights of the kinds in the mixed phase (react: reactToPost with a kind other than like, half the time over one of the user's recent reactions; unreact: unreactToPost of one; on a server without reactions both are likes)")
	fs.StringVar(&c.reactions, "reactions", "like,love,haha,wow,sad,angry", "with -spawn: tally's -reactions (a tally that refuses them starts with its default, and the tool uses the kinds each server says it serves; empty: tally's default)")
	fs.DurationVar(&c.reactCompare, "react-compare", 4*time.Second, "on each tally serving kinds beyond like: the -compare-page page with reactions { kind count } viewerReaction against the one with counts and viewerHasLiked, alternating in half-second slices for this long (0 skips it)")
	pages := fs.String("page-size", "20-50", "posts per feed page in the mixed phase: N or MIN-MAX")
	fs.IntVar(&c.subs, "subs", 0, "open unreadChanged subscriptions (one WebSocket per user) during the mixed phase and the broadcast check")
	fs.IntVar(&c.subsPerProcess, "subs-per-process", 5000, "with -subs: subscriptions each subscriber process holds (a socket is an open file, and a process may have at most RLIMIT_NOFILE); process k dials from 127.0.k.1-4")
	fs.IntVar(&c.subLikes, "sub-likes", 100, "with -subs: subscribers that own a post, liked once each after the broadcasts to time a push to one user (0: none)")
	fs.IntVar(&c.replicas, "replicas", 1, "with -spawn -redis: tally processes on the one redis-server; the load, broadcasts and likes go to the first, subscriptions are spread over all")
	fs.DurationVar(&c.broadcastEvery, "broadcast-every", time.Second, "publish a system notification as admin this often during the mixed phase (0: never)")
	fs.IntVar(&c.broadcasts, "broadcasts", 5, "with -subs: broadcasts of the quiet check after the mixed phase, one at a time")
	fs.IntVar(&c.users, "users", 1000, "users the tool creates and acts as (the first fifth write the posts)")
	fs.IntVar(&c.posts, "posts", 2000, "posts the tool creates")
	fs.Uint64Var(&c.seed, "seed", 1, "seed of every random choice (the data and the requests)")
	fs.Uint64Var(&c.userBase, "user-base", 0, "first user id (the admin; users follow it, subscribers from +5,000,000); 0: 1000 with -spawn, else derived from the clock so that runs on one server do not mix")
	fs.StringVar(&c.jsonPath, "json", "", "also write the results as JSON to this file")
	fs.StringVar(&c.profileDir, "cpuprofile", "", "write into this directory a CPU profile of each tally during its comparison phase (TARGET-compare.pprof) and during the first quiet broadcasts (TARGET-broadcast.pprof), and a heap profile with the -subs subscriptions open (TARGET-subs-heap.pprof); from tally's -pprof, so -spawn or -pprof-url")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	if c.reference || c.pgPeer {
		return c, nil
	}
	var err error
	if c.mix, err = parseMix(*mixFlag); err != nil {
		return c, err
	}
	lo, hi, ok := strings.Cut(*pages, "-")
	if !ok {
		hi = lo
	}
	c.pageMin, err = strconv.Atoi(lo)
	if err == nil {
		c.pageMax, err = strconv.Atoi(hi)
	}
	if err != nil || c.pageMin < 1 || c.pageMax < c.pageMin || c.pageMax > 100 {
		return c, fmt.Errorf("-page-size %q: want N or MIN-MAX within 1-100", *pages)
	}
	switch {
	case c.clients < 1:
		return c, fmt.Errorf("-clients must be at least 1")
	case c.users < 5:
		return c, fmt.Errorf("-users must be at least 5")
	case c.posts < c.pageMax || c.posts < c.comparePage:
		return c, fmt.Errorf("-posts must be at least the largest page")
	case c.comparePage < 1 || c.comparePage > 100:
		return c, fmt.Errorf("-compare-page must be within 1-100")
	case c.subs < 0 || c.subs > 4_000_000:
		return c, fmt.Errorf("-subs must be within 0-4000000")
	case c.subsPerProcess < 1 || (c.subs+c.subsPerProcess-1)/c.subsPerProcess > 256:
		return c, fmt.Errorf("-subs-per-process must be at least 1 and at least -subs/256 (256 subscriber processes at most)")
	case c.subLikes < 0:
		return c, fmt.Errorf("-sub-likes must not be negative")
	case c.replicas < 1 || (c.replicas > 1 && !(c.spawn && c.redis)):
		return c, fmt.Errorf("-replicas must be at least 1, and more than 1 only with -spawn -redis")
	case c.postgres && (!c.spawn || c.compare == 0):
		return c, fmt.Errorf("-postgres compares feed pages: it needs -spawn and -compare above 0")
	case c.duration < 0 || c.compare < 0 || c.reactCompare < 0:
		return c, fmt.Errorf("-duration, -compare and -react-compare must not be negative")
	}
	if c.spawn && c.secret == "" {
		b := make([]byte, 24)
		rand.Read(b)
		c.secret = "load-" + hex.EncodeToString(b)
	}
	if c.secret == "" && c.adminToken == "" {
		return c, fmt.Errorf("the tool signs its users' tokens: set TALLY_JWT_SECRET (or -secret) to the server's secret, or give -admin-token")
	}
	if c.userBase == 0 {
		c.userBase = 1000
		if !c.spawn {
			c.userBase = uint64(time.Now().Unix()%100_000)*100_000_000 + 1000
		}
	}
	return c, nil
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-subs-child" {
		if err := runSubsChild(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "load -subs-child:", err)
			os.Exit(1)
		}
		return
	}
	cfg, err := parseFlags(os.Args[1:], os.Stderr)
	if err == flag.ErrHelp {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "load:", err)
		os.Exit(2)
	}
	if cfg.reference {
		if err := serveReference(cfg.addr); err != nil {
			fmt.Fprintln(os.Stderr, "load -reference:", err)
			os.Exit(1)
		}
		return
	}
	if cfg.pgPeer {
		if err := servePostgresPeer(cfg.addr, cfg.pgDSN); err != nil {
			fmt.Fprintln(os.Stderr, "load -pg-peer:", err)
			os.Exit(1)
		}
		return
	}
	out := &report{w: os.Stdout}
	ok, err := run(cfg, out)
	if err != nil {
		fmt.Fprintln(os.Stderr, "load:", err)
		os.Exit(1)
	}
	if !ok {
		os.Exit(1)
	}
}

type report struct {
	w    io.Writer
	json jsonReport
}

func (r *report) printf(format string, a ...any) { fmt.Fprintf(r.w, format, a...) }

// newWorld makes the users and their tokens (the posts come from seeding).
func newWorld(cfg config, tok *tokens, runID string) (*world, error) {
	w := &world{runID: runID, admin: cfg.userBase}
	if cfg.secret == "" {
		// One token for everything: the admin is the only user.
		w.adminToken = cfg.adminToken
		w.users = []uint64{subjectOf(cfg.adminToken)}
		w.userTokens = []string{cfg.adminToken}
		w.authors = 1
		w.ledger = newLedger(1)
		return w, nil
	}
	var err error
	if w.adminToken, err = tok.sign(w.admin, true); err != nil {
		return nil, err
	}
	for i := range cfg.users {
		u := cfg.userBase + 1 + uint64(i)
		w.users = append(w.users, u)
		w.userTokens = append(w.userTokens, tok.user(u))
	}
	w.authors = max(cfg.users/5, 1)
	w.ledger = newLedger(len(w.users))
	return w, nil
}

// subjectOf reads a JWT's sub claim without verifying it (the server does).
func subjectOf(token string) uint64 {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return 0
	}
	b, err := base64URL(parts[1])
	if err != nil {
		return 0
	}
	var c struct {
		Sub string `json:"sub"`
	}
	json.Unmarshal(b, &c)
	v, _ := strconv.ParseUint(c.Sub, 10, 64)
	return v
}

func run(cfg config, out *report) (bool, error) {
	ctx := context.Background()
	tok := &tokens{cache: map[uint64]string{}}
	if err := tok.setup(cfg.secret, cfg.adminToken); err != nil {
		return false, err
	}
	if cfg.secret == "" && cfg.subs > 16 {
		out.printf("warning: -admin-token without a secret: all %d subscriptions are one user's (tally allows 16 sockets per user by default)\n", cfg.subs)
	}
	limit, err := raiseOpenFiles(4*cfg.clients + 1024)
	if err != nil {
		return false, err
	}
	out.printf("load: seed %d, %d users, %d posts, %d clients, RLIMIT_NOFILE %d\n", cfg.seed, cfg.users, cfg.posts, cfg.clients, limit)

	var targets []*server
	var ref *server
	var tmpDir string
	if cfg.spawn {
		dir, err := os.MkdirTemp("", "tally-load-")
		if err != nil {
			return false, err
		}
		tmpDir = dir
		if cfg.keep {
			out.printf("temp directory %s (kept)\n", dir)
		} else {
			defer os.RemoveAll(dir)
		}
		repo := cfg.repo
		if repo == "" {
			if repo, err = findRepo(); err != nil {
				return false, err
			}
		}
		commit := gitHead(repo)
		t0 := time.Now()
		bin, err := buildTally(repo, dir)
		if err != nil {
			return false, err
		}
		out.printf("built tally from %s (%s) in %.1fs\n", repo, commit, time.Since(t0).Seconds())
		out.json.Commit = commit
		extra := strings.Fields(cfg.tallyArgs)
		var stops []*server
		defer func() {
			for _, s := range slices.Backward(stops) {
				s.stop()
			}
		}()
		emb, err := startTally("tally-embedded", bin, dir, cfg.serverCPUs, cfg.secret, "", cfg.reactions, extra)
		if err != nil {
			return false, err
		}
		stops = append(stops, emb)
		targets = append(targets, emb)
		if cfg.redis {
			rs, addr, err := startRedis(dir, cfg.serverCPUs)
			if err != nil {
				return false, err
			}
			stops = append(stops, rs)
			tr, err := startTally("tally-redis", bin, dir, cfg.serverCPUs, cfg.secret, addr, cfg.reactions, extra)
			if err != nil {
				return false, err
			}
			tr.backendCPU = rs.ownCPU
			stops = append(stops, tr)
			targets = append(targets, tr)
			for r := 1; r < cfg.replicas; r++ {
				rep, err := startTally(fmt.Sprintf("tally-redis-%d", r+1), bin, dir, cfg.serverCPUs, cfg.secret, addr, cfg.reactions, append([]string{"-node", strconv.Itoa(r)}, extra...))
				if err != nil {
					return false, err
				}
				stops = append(stops, rep)
				tr.replicas = append(tr.replicas, rep)
			}
		}
		if cfg.peer && cfg.compare > 0 {
			if ref, err = startReference(dir, cfg.serverCPUs, cfg.secret); err != nil {
				return false, err
			}
			stops = append(stops, ref)
		}
		for _, s := range stops {
			out.printf("started %s pid %d %s\n", s.name, s.pid, s.base)
			if s.note != "" {
				out.printf("  %s %s\n", s.name, s.note)
			}
		}
		if cfg.serverCPUs != "" {
			out.printf("servers pinned with taskset -c %s\n", cfg.serverCPUs)
		}
	} else {
		targets = []*server{{name: "tally", base: strings.TrimRight(cfg.url, "/"), pid: cfg.pid, tally: true, pprof: strings.TrimRight(cfg.pprofURL, "/")}}
		if cfg.referenceURL != "" {
			ref = &server{name: "reference", base: strings.TrimRight(cfg.referenceURL, "/"), pid: cfg.referencePID}
		}
	}

	allOK := true
	worlds := map[*server]*world{}
	var firstPosts []*readback
	for _, t := range targets {
		w, err := newWorld(cfg, tok, fmt.Sprintf("%s-%d-%d", t.name, cfg.seed, time.Now().UnixNano()))
		if err != nil {
			return false, err
		}
		worlds[t] = w
		g := newGQL(t.base, cfg.clients)
		out.printf("\n== %s (%s)\n", t.name, t.base)
		if err := seed(ctx, g, w, cfg, out); err != nil {
			return false, fmt.Errorf("%s: %w", t.name, err)
		}
		var subs *subscribers
		var subPosts []string
		if cfg.subs > 0 {
			if w.adminToken == "" {
				return false, errNoAdmin
			}
			subs, subPosts, err = measureSubscriptions(ctx, t, g, w, cfg, tok, out)
			if err != nil {
				out.printf("subscriptions: %v\n", err)
				allOK = false
			}
		}
		if cfg.duration > 0 {
			m := cfg.mix
			if !w.reacts {
				m = m.forLikesOnly()
			}
			res := runPhase(g, w, phaseCfg{name: "mixed", duration: cfg.duration, clients: cfg.clients, mix: m,
				pageMin: cfg.pageMin, pageMax: cfg.pageMax, page: mixedPage(w), broadcastEvery: cfg.broadcastEvery, seed: cfg.seed, runID: w.runID}, t, subs)
			out.phase(res)
		}
		if subs != nil {
			if cfg.duration > 0 {
				time.Sleep(time.Second) // let the mixed phase's last broadcast arrive
			}
			prof := profileFor(t, cfg, "broadcast", max(1, cfg.broadcasts*6/10), out)
			bres := subs.check(g, w, t.all(), cfg.broadcasts, subPosts)
			<-prof
			subs.summary(bres)
			out.broadcast(t.name, bres)
			if n := w.ledger.ambiguousPublish; n > 0 {
				out.printf("  warning: %d broadcasts got no definite answer; deliveries after them may be attributed to the wrong broadcast\n", n)
			}
			if !bres.AllWithin1s {
				allOK = false
			}
			subs.close()
		}
		ex, posts, err := verify(ctx, g, w)
		if err != nil {
			return false, fmt.Errorf("%s: %w", t.name, err)
		}
		out.exactness(t.name, ex)
		if !ex.Exact {
			allOK = false
		}
		if firstPosts == nil {
			firstPosts = posts
		}
		if cfg.reactCompare > 0 && len(w.kinds) > 1 {
			out.reactionPage(compareReactionPage(g, w, t, cfg))
		}
	}

	if cfg.compare > 0 {
		compareTargets := slices.Clone(targets)
		w := worlds[targets[0]]
		rw := referenceWorld(w, firstPosts)
		if cfg.postgres {
			pg, cluster, version, err := startPostgresPeer(ctx, tmpDir, cfg.serverCPUs, cfg.secret, rw)
			defer cluster.Stop()
			if err != nil {
				return false, fmt.Errorf("the PostgreSQL peer: %w", err)
			}
			defer pg.stop()
			out.printf("\nstarted PostgreSQL %s (postmaster pid %d, %s) and its GraphQL peer (gqlgen + dataloader + pgx) pid %d %s\n",
				version, cluster.PID(), cluster.Addr, pg.pid, pg.base)
			same, detail, err := parity(targets[0], pg, w, cfg.comparePage)
			if err != nil {
				return false, err
			}
			out.printf("postgres loaded with %s's %d posts, %d likes, %d favorites; the same page from both: %s\n",
				targets[0].name, len(rw.Posts), len(rw.Likes), len(rw.Favorites), detail)
			out.json.PostgresSameBytes = same
			worlds[pg] = w
			compareTargets = append(compareTargets, pg)
		}
		if ref != nil {
			if err := loadReference(ref, rw); err != nil {
				return false, err
			}
			same, detail, err := parity(targets[0], ref, w, cfg.comparePage)
			if err != nil {
				return false, err
			}
			out.printf("\nreference loaded with %s's %d posts; the same page from both: %s\n", targets[0].name, len(firstPosts), detail)
			out.json.SameBytes = same
			worlds[ref] = w
			compareTargets = append(compareTargets, ref)
		}
		var results []*phaseResult
		for _, t := range compareTargets {
			g := newGQL(t.base, cfg.clients)
			m := mix{}
			m[kFeed] = 1
			if cfg.warmup > 0 {
				runPhase(g, worlds[t], phaseCfg{name: "warmup", duration: cfg.warmup, clients: cfg.clients, mix: m,
					pageMin: cfg.comparePage, pageMax: cfg.comparePage, page: flagsPage, seed: cfg.seed + 2}, t, nil)
			}
			prof := profile(t, cfg, out)
			res := runPhase(g, worlds[t], phaseCfg{name: "compare", duration: cfg.compare, clients: cfg.clients, mix: m,
				pageMin: cfg.comparePage, pageMax: cfg.comparePage, page: flagsPage, seed: cfg.seed + 1}, t, nil)
			<-prof
			results = append(results, res)
		}
		out.compare(results, cfg)
	}
	if cfg.jsonPath != "" {
		b, _ := json.MarshalIndent(out.json, "", "  ")
		if err := os.WriteFile(cfg.jsonPath, b, 0o644); err != nil {
			return false, err
		}
	}
	if allOK {
		out.printf("\nresult: ok\n")
	} else {
		out.printf("\nresult: FAILED (see above)\n")
	}
	return allOK, nil
}

// measureSubscriptions opens cfg.subs subscriptions, spread over t and
// its replicas, and reports the servers' memory before and after (heap
// and stacks from /metrics, RSS from /proc/<pid>/status), summed over
// them. The first -sub-likes subscribers create a post first, for the
// like round.
func measureSubscriptions(ctx context.Context, t *server, g *gql, w *world, cfg config, tok *tokens, out *report) (*subscribers, []string, error) {
	servers := t.all()
	userBase := cfg.userBase + 5_000_000
	var posts []string
	if n := min(cfg.subLikes, cfg.subs); n > 0 {
		var err error
		if posts, err = ownPosts(ctx, g, w, n, userBase, tok); err != nil {
			return nil, nil, err
		}
	}
	per := (cfg.subs + len(servers) - 1) / len(servers)
	for _, srv := range servers {
		if lim := srv.openFilesLimit(); lim >= 0 && lim < int64(per+64) {
			out.printf("warning: %s's RLIMIT_NOFILE is %d, below its %d subscriptions\n", srv.name, lim, per)
		}
	}
	time.Sleep(500 * time.Millisecond)
	gc := true
	for _, srv := range servers {
		gc = srv.collectGarbage() && gc
	}
	before := memoryOf(servers)
	bases := make([]string, len(servers))
	for i, srv := range servers {
		bases[i] = srv.base
	}
	subs, err := openSubscribers(ctx, subsSetup{bases: bases, n: cfg.subs, userBase: userBase, perProcess: cfg.subsPerProcess,
		secret: cfg.secret, token: cfg.adminToken}, out)
	if subs == nil {
		return nil, nil, err
	}
	// The server's per-socket timers and first pushes settle: up to 2 s
	// for 10,000 subscriptions.
	time.Sleep(min(2*time.Second, 200*time.Millisecond+time.Duration(cfg.subs)*200*time.Microsecond))
	for _, srv := range servers {
		srv.collectGarbage()
	}
	after := memoryOf(servers)
	if cfg.profileDir != "" && t.pprof != "" {
		path := filepath.Join(cfg.profileDir, t.name+"-subs-heap.pprof")
		if err := fetchTo(t.pprof+"/debug/pprof/heap", path); err != nil {
			out.printf("heap profile of %s: %v\n", t.name, err)
		} else {
			out.printf("heap profile of %s with the subscriptions open: %s (go tool pprof -sample_index=inuse_space -top %s)\n", t.name, path, path)
		}
	}
	n := float64(subs.open)
	m := subMemory{Subs: subs.open, Requested: cfg.subs, Servers: len(servers), Processes: len(subs.procs), OpenSeconds: subs.openTime.Seconds(), AfterGC: gc}
	if before.metrics && after.metrics && n > 0 {
		m.HeapBefore, m.HeapAfter = before.heap, after.heap
		m.StackBefore, m.StackAfter = before.stack, after.stack
		m.GoroutinesBefore, m.GoroutinesAfter = before.goroutines, after.goroutines
		m.HeapPerSub = (m.HeapAfter - m.HeapBefore) / n
		m.StackPerSub = (m.StackAfter - m.StackBefore) / n
		m.GoroutinesPerSub = (m.GoroutinesAfter - m.GoroutinesBefore) / n
	}
	if before.rss > 0 && after.rss > 0 && n > 0 {
		m.RSSBefore, m.RSSAfter = before.rss, after.rss
		m.RSSPerSub = (m.RSSAfter - m.RSSBefore) / n
	}
	out.subscriptions(t.name, m)
	return subs, posts, err
}

// serverMemory is what servers hold together: heap in use, stacks and
// goroutines from /metrics (metrics: every server answered), RSS from
// /proc (0: some pid unknown).
type serverMemory struct {
	heap, stack, goroutines, rss float64
	metrics                      bool
}

func memoryOf(servers []*server) serverMemory {
	m := serverMemory{metrics: true}
	for _, srv := range servers {
		if v, err := srv.scrape(); err == nil {
			m.heap += v["go_memstats_heap_inuse_bytes"]
			m.stack += v["go_memstats_stack_inuse_bytes"]
			m.goroutines += v["go_goroutines"]
		} else {
			m.metrics = false
		}
	}
	for _, srv := range servers {
		rss := srv.status("VmRSS")
		if rss <= 0 {
			m.rss = 0
			break
		}
		m.rss += float64(rss)
	}
	return m
}

// profile starts fetching a CPU profile of t for the comparison phase
// (whole seconds of it) when -cpuprofile is set; the channel closes when
// it is written.
func profile(t *server, cfg config, out *report) <-chan struct{} {
	return profileFor(t, cfg, "compare", int(cfg.compare.Seconds()), out)
}

// profileFor fetches secs seconds of CPU profile of t into
// TARGET-phase.pprof.
func profileFor(t *server, cfg config, phase string, secs int, out *report) <-chan struct{} {
	done := make(chan struct{})
	if cfg.profileDir == "" || t.pprof == "" || secs < 1 {
		close(done)
		return done
	}
	go func() {
		defer close(done)
		path := filepath.Join(cfg.profileDir, t.name+"-"+phase+".pprof")
		if err := fetchTo(fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", t.pprof, secs), path); err != nil {
			out.printf("cpu profile of %s: %v\n", t.name, err)
			return
		}
		out.printf("cpu profile of %s during the %s phase: %s (go tool pprof -top %s)\n", t.name, phase, path, path)
	}()
	return done
}

func fetchTo(url, path string) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("%s: HTTP %d", url, resp.StatusCode)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// referenceWorld is what a peer is loaded with: the posts as tally
// counted them and the like and favorite pairs tally acknowledged (a
// reaction of another kind is no like: the peers serve counts and flags).
func referenceWorld(w *world, posts []*readback) refWorld {
	var rw refWorld
	for _, p := range posts {
		rp := refPost{ID: p.ID, Counts: refCounts(p.Counts)}
		if p.Author != nil {
			rp.Author = &refUser{ID: p.Author.ID, PostCount: p.Author.PostCount, FollowerCount: p.Author.FollowerCount, FollowingCount: p.Author.FollowingCount}
		}
		rw.Posts = append(rw.Posts, rp)
	}
	like := stateOf(w.kindIndex("like"))
	w.ledger.mu.Lock()
	for p, st := range w.ledger.reactions {
		if st == like {
			rw.Likes = append(rw.Likes, [2]uint64{p.user, p.post})
		}
	}
	for p, acked := range w.ledger.favs {
		if acked {
			rw.Favorites = append(rw.Favorites, [2]uint64{p.user, p.post})
		}
	}
	w.ledger.mu.Unlock()
	return rw
}

// loadReference gives the reference server rw.
func loadReference(ref *server, rw refWorld) error {
	b, _ := json.Marshal(rw)
	resp, err := http.Post(ref.base+"/load", "application/json", bytes.NewReader(b))
	if err != nil {
		return fmt.Errorf("loading the reference: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		msg, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("loading the reference: HTTP %d %s", resp.StatusCode, msg)
	}
	return nil
}

// parity asks tally and the reference for the same page as the same
// viewer (one who liked and favorited some of it) and compares the bytes:
// the comparison is only fair if both do the same work.
func parity(t, ref *server, w *world, size int) (bool, string, error) {
	ids := w.posts[:size]
	viewer := 0
	like := stateOf(w.kindIndex("like"))
	w.ledger.mu.Lock()
	best := -1
	for u := range w.users {
		n := 0
		for _, id := range ids {
			p := pair{w.users[u], postID(id)}
			if w.ledger.reactions[p] == like {
				n++
			}
			if w.ledger.favs[p] {
				n++
			}
		}
		if n > best {
			best, viewer = n, u
		}
	}
	w.ledger.mu.Unlock()
	body := appendIDsRequest(nil, feedPrefix, ids)
	var b1, b2 bytes.Buffer
	r1 := newGQL(t.base, 1).post(context.Background(), w.userTokens[viewer], body, &b1)
	r2 := newGQL(ref.base, 1).post(context.Background(), w.userTokens[viewer], body, &b2)
	if r1.err != nil || r2.err != nil {
		return false, "", fmt.Errorf("parity request: %v %v", r1.err, r2.err)
	}
	if bytes.Equal(r1.body, r2.body) {
		return true, fmt.Sprintf("identical bytes (%d B, viewer with %d likes/favorites on the page)", len(r1.body), best), nil
	}
	i := 0
	for i < len(r1.body) && i < len(r2.body) && r1.body[i] == r2.body[i] {
		i++
	}
	lo := max(i-40, 0)
	return false, fmt.Sprintf("DIFFERENT (%d vs %d B) from byte %d: tally %q… reference %q…", len(r1.body), len(r2.body), i,
		r1.body[lo:min(i+40, len(r1.body))], r2.body[lo:min(i+40, len(r2.body))]), nil
}

func gitHead(repo string) string {
	b, err := exec.Command("git", "-C", repo, "rev-parse", "--short=12", "HEAD").Output()
	if err != nil {
		return "unknown commit"
	}
	head := strings.TrimSpace(string(b))
	// go build takes the working tree, which may hold edits not committed.
	if st, err := exec.Command("git", "-C", repo, "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(bytes.TrimSpace(st)) > 0 {
		head += fmt.Sprintf(" + uncommitted changes in %d files", bytes.Count(bytes.TrimSpace(st), []byte("\n"))+1)
	}
	return head
}

func base64URL(s string) ([]byte, error) { return base64.RawURLEncoding.DecodeString(s) }
