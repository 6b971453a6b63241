// Command tally serves Tally's GraphQL API: counts and badges for social
// apps. `tally` with no arguments serves on the embedded engine; see
// `tally help` for the subcommands (token, import, demo-seed).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/embedded"
	"github.com/tally-dev/tally/engine/importfile"
	"github.com/tally-dev/tally/engine/redisstore"
	"github.com/tally-dev/tally/engine/tier"
	"github.com/tally-dev/tally/engine/wal"
	"github.com/tally-dev/tally/resolvers"
	"github.com/tally-dev/tally/resolvers/auth"
	"github.com/tally-dev/tally/resolvers/hub"
	"github.com/tally-dev/tally/web"
	"github.com/tally-dev/tally/web/demoseed"
)

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	loggingSet = false
	cmd := "serve"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, args = args[0], args[1:]
	}
	var err error
	switch cmd {
	case "serve":
		err = serve(ctx, args, stdout, stderr)
	case "token":
		err = tokenCmd(args, stdout, stderr)
	case "import":
		err = importCmd(ctx, args, stdout, stderr)
	case "demo-seed":
		err = demoSeedCmd(ctx, args, stdout, stderr)
	case "backup":
		err = backupCmd(ctx, args, stdout, stderr)
	case "restore":
		err = restoreCmd(args, stdout, stderr)
	case "repair":
		err = repairCmd(args, stdout, stderr)
	case "version":
		printVersion(stdout)
		return 0
	case "help":
		fmt.Fprint(stdout, usageText())
		return 0
	default:
		fmt.Fprintf(stderr, "tally: unknown command %q\n\n%s", cmd, usageText())
		return 2
	}
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		var ue usageError
		if errors.As(err, &ue) {
			fmt.Fprintf(stderr, "tally %s: %v\n", cmd, err)
			return 2
		}
		if loggingSet {
			slog.Error("tally "+cmd+" failed", "err", err)
		} else {
			fmt.Fprintf(stderr, "tally %s: %v\n", cmd, err)
		}
		return 1
	}
	return 0
}

type usageError struct{ error }

// storeFlags are the flags that choose and tune the engine.
type storeFlags struct {
	data        string
	redis       string
	fsync       string
	fsyncWindow time.Duration
	cursorTTL   time.Duration
	node        uint64
	redisWait   int
	// redisTimeout is one request's deadline for all its Redis calls;
	// redisWaitTimeout how long one WAIT may wait for replicas.
	redisTimeout     time.Duration
	redisWaitTimeout time.Duration
	// redisStartWait is how long to keep trying to reach Redis at start:
	// replicas and Redis often start together, and a replica that exits
	// because Redis was a second late only adds restart churn.
	redisStartWait time.Duration
	snapEvery      time.Duration
	snapLogBytes   int64
	window         time.Duration
	openAge        time.Duration
	coldAge        time.Duration
	memoryBudget   int64
	coldCache      int
	// metrics, when set (serve), receives the engine's log, snapshot and
	// Redis figures.
	metrics *engineMetrics
	// batchJob (import) opens a Redis store without its background
	// sweepers: the servers sweep, and the intent sweeper's SCAN of the
	// whole keyspace every few seconds took 39% of redis-server's CPU
	// during a 10M-post import.
	batchJob bool
}

func (f *storeFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.data, "data", "./data", "data directory of the embedded engine")
	fs.StringVar(&f.redis, "redis", "", "comma-separated Redis address(es); when set, state lives in Redis or Redis Cluster instead of the embedded engine")
	fs.StringVar(&f.fsync, "fsync", "always", "log durability: always (acknowledge after fsync), batch (fsync within -fsync-window; survives a process crash, not power loss), none (tests only)")
	fs.DurationVar(&f.fsyncWindow, "fsync-window", 10*time.Millisecond, "with -fsync batch: longest delay before the log is fsynced")
	fs.DurationVar(&f.cursorTTL, "cursor-ttl", engine.DefaultCursorTTL, "drop system-notification cursors of users inactive this long")
	fs.DurationVar(&f.snapEvery, "snapshot-interval", embedded.DefaultSnapshotInterval, "take a snapshot of the embedded engine this often (negative: never)")
	fs.Int64Var(&f.snapLogBytes, "snapshot-log-bytes", embedded.DefaultSnapshotLogBytes, "also take one when the log has grown by this many bytes (negative: never)")
	fs.DurationVar(&f.window, "window", 24*time.Hour, "time window that posts (counts, authors, likes) are partitioned by (the snowflake id's time); only the layout depends on it, so it may change between runs")
	fs.DurationVar(&f.openAge, "open-age", tier.DefaultOpenAge, "keep a window of posts (authors and counts) and likes in an open hash table until it ended this long ago, then seal it")
	fs.DurationVar(&f.coldAge, "cold-age", 0, "move sealed windows that ended this long ago to the cold tier on disk (0: only by -memory-budget)")
	fs.Int64Var(&f.memoryBudget, "memory-budget", 0, "bytes of the post table, and separately of each of the like and favorite sets, kept in memory; beyond it the oldest sealed windows move to the cold tier (0: no budget)")
	fs.IntVar(&f.coldCache, "cold-cache-bytes", tier.DefaultColdCacheBytes, "block cache of the cold tier (negative: none)")
	fs.Uint64Var(&f.node, "node", 0, "snowflake node id (0-1023) of this server; give each replica its own")
	fs.IntVar(&f.redisWait, "redis-wait-replicas", 0, "with -redis: acknowledge a write only after this many replicas have it (WAIT); see docs/redis-durability.md")
	fs.DurationVar(&f.redisTimeout, "redis-timeout", time.Second, "with -redis: one deadline for all the Redis calls of a request; what has not answered by then fails with UNAVAILABLE")
	fs.DurationVar(&f.redisWaitTimeout, "redis-wait-timeout", 250*time.Millisecond, "with -redis-wait-replicas: how long a write waits for its replicas before it fails with UNAVAILABLE (and its shard takes no writes until they are back)")
	fs.DurationVar(&f.redisStartWait, "redis-start-wait", 30*time.Second, "with -redis: keep trying to reach Redis this long at start")
}

func (f *storeFlags) open(ctx context.Context) (engine.Store, error) {
	if f.node > 1023 {
		return nil, usageError{fmt.Errorf("-node must be 0..1023")}
	}
	if f.redis != "" {
		if f.redisTimeout < 0 || f.redisWaitTimeout < 0 {
			return nil, usageError{errors.New("-redis-timeout and -redis-wait-timeout must not be negative")}
		}
		if f.redisWait > 0 && f.redisTimeout > 0 && f.redisWaitTimeout >= f.redisTimeout {
			return nil, usageError{errors.New("-redis-wait-timeout must be shorter than -redis-timeout: a write's WAIT must answer within its request's deadline")}
		}
		opts := redisstore.Options{
			Addrs:        splitList(f.redis),
			CursorTTL:    f.cursorTTL,
			Node:         f.node,
			WaitReplicas: f.redisWait,
			WaitTimeout:  f.redisWaitTimeout,
			ReadTimeout:  f.redisTimeout,
		}
		if f.metrics != nil {
			opts.Observer = f.metrics
		}
		if f.batchJob {
			opts.SweepInterval, opts.IntentSweepInterval = -1, -1
		}
		s, err := openRedis(ctx, opts, f.redisStartWait)
		if rs, ok := s.(*redisstore.Store); ok && err == nil && f.metrics != nil {
			rs.AddHook(redisHook{f.metrics})
		}
		return s, err
	}
	sync, err := wal.ParseSyncMode(f.fsync)
	if err != nil {
		return nil, usageError{fmt.Errorf("-fsync must be always, batch or none, not %q", f.fsync)}
	}
	if f.data == "" {
		return nil, usageError{errors.New("-data must name a directory")}
	}
	var metrics embedded.Metrics
	if f.metrics != nil {
		metrics = f.metrics
	}
	return embedded.Open(embedded.Options{
		Metrics:          metrics,
		Dir:              f.data,
		Sync:             sync,
		BatchWindow:      f.fsyncWindow,
		CursorTTL:        f.cursorTTL,
		Node:             f.node,
		SnapshotInterval: f.snapEvery,
		SnapshotLogBytes: f.snapLogBytes,
		Tables: tier.Options{
			WindowMillis:   f.window.Milliseconds(),
			OpenAge:        f.openAge,
			ColdAge:        f.coldAge,
			MemoryBudget:   f.memoryBudget,
			ColdCacheBytes: f.coldCache,
		},
	})
}

// openRedis opens the Redis backend, retrying with backoff for up to wait
// while Redis is unreachable.
func openRedis(ctx context.Context, opts redisstore.Options, wait time.Duration) (engine.Store, error) {
	deadline := time.Now().Add(wait)
	backoff := 100 * time.Millisecond
	for {
		s, err := redisstore.Open(ctx, opts)
		if err == nil || !errors.Is(err, engine.ErrUnavailable) || time.Now().Add(backoff).After(deadline) {
			return s, err
		}
		slog.Warn("waiting for Redis", "addrs", opts.Addrs, "err", redisstore.Cause(err))
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// parseFlags parses args, then fills every flag not given on the command
// line from TALLY_<NAME> in the environment.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err}
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		env := "TALLY_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v, ok := os.LookupEnv(env); ok && !given[f.Name] && err == nil {
			if e := f.Value.Set(v); e != nil {
				err = usageError{fmt.Errorf("%s=%q: %v", env, v, e)}
			}
		}
	})
	if err != nil {
		return err
	}
	return setupLogging(fs)
}

// keys returns the token keys: from TALLY_JWT_SECRET, or else a random
// secret for this run (dev mode), which is also written to
// <data>/dev-jwt-secret so that `tally token -data DIR` can sign tokens the
// running dev server accepts.
func keys(dataDir string, serve bool) (k *auth.Keys, dev bool, err error) {
	if s := os.Getenv("TALLY_JWT_SECRET"); s != "" {
		k, err = auth.NewKeys([]byte(s))
		return k, false, err
	}
	path := filepath.Join(dataDir, "dev-jwt-secret")
	if !serve {
		if b, err := os.ReadFile(path); err == nil {
			k, err := auth.NewKeys(b)
			return k, true, err
		}
		return nil, true, errors.New("TALLY_JWT_SECRET is unset and no dev server has written " + path + "; set TALLY_JWT_SECRET (the same value as the server's)")
	}
	secret := auth.RandomSecret()
	if dataDir != "" {
		if err := os.MkdirAll(dataDir, 0o700); err == nil {
			_ = os.WriteFile(path, secret, 0o600)
		}
	}
	k, err = auth.NewKeys(secret)
	return k, true, err
}

func serve(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("serve", stderr)
	var sf storeFlags
	sf.register(fs)
	var mem memorySettings
	mem.register(fs)
	addr := fs.String("addr", "127.0.0.1:8080", "listen address")
	apqTTL := fs.Duration("apq-ttl", resolvers.DefaultAPQTTL, "with -redis: how long a persisted query (APQ) stays in Redis, shared by the replicas, after its last use")
	pprofAddr := fs.String("pprof", "", "serve net/http/pprof on this separate address, e.g. 127.0.0.1:6060 (off when empty)")
	showVersion := fs.Bool("version", false, "print the version, commit and Go version, and exit")
	complexity := fs.Int("complexity-limit", 5000, "largest operation cost accepted: each field 1, lists times the most they return, each element of a list argument 1, introspection by what it returns")
	maxBody := fs.Int64("max-body-bytes", 1<<20, "largest request body accepted")
	corsOrigins := fs.String("cors-origins", "", "comma-separated browser origins (or *) allowed to call /query from another origin")
	origins := fs.String("ws-origins", "", "comma-separated host patterns allowed to open WebSockets cross-origin (same origin is always allowed)")
	rateLimit := fs.Float64("rate-limit", 50, "mutations per second per user (0 = unlimited)")
	rateBurst := fs.Int("rate-burst", 100, "burst of mutations per user above -rate-limit")
	maxMutations := fs.Int("max-mutations-per-request", resolvers.DefaultMaxMutationsPerRequest, "mutation fields (aliases count each) one request may carry, at most -rate-burst; more is BAD_USER_INPUT (negative: only -rate-burst caps)")
	costRate := fs.Float64("cost-rate", 10000, "operation cost (as -complexity-limit prices it) each client may spend per second: per signed-in user, per remote address for anonymous requests (behind a proxy, all anonymous clients share its address); beyond it RATE_LIMITED with retryAfter (0 = no budget)")
	costBurst := fs.Int("cost-burst", 50000, "burst of -cost-rate (at least -complexity-limit)")
	introspection := fs.Bool("introspection", true, "answer __schema and __type (GraphiQL's Docs need it); -introspection=false refuses them with BAD_USER_INPUT, reason INTROSPECTION_DISABLED")
	var timeouts httpTimeouts
	timeouts.register(fs)
	var wsCfg resolvers.WSConfig
	registerWSFlags(fs, &wsCfg)
	wsLease := fs.Duration("ws-lease", redisstore.DefaultSocketLease, "with -redis: how long a replica's open WebSockets stay in the shared per-user count without being renewed (each replica renews every third of it), so a crashed replica's sockets stop counting within it")
	graphiqlCDN := fs.Bool("graphiql-cdn", false, "load GraphiQL's scripts from unpkg instead of the copy built into the binary")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *showVersion {
		printVersion(stdout)
		return nil
	}
	if err := mem.check(sf.memoryBudget); err != nil {
		return usageError{err}
	}
	defer mem.apply()()
	sf.metrics = newEngineMetrics()
	reg := prometheus.NewRegistry()
	sf.metrics.register(reg)

	k, dev, err := keys(sf.data, true)
	if err != nil {
		return err
	}
	store, err := sf.open(ctx)
	if err != nil {
		return err
	}
	defer store.Close()
	h := hub.New(store)
	defer h.Close()

	var devToken func(uint64, bool) (string, error)
	if dev {
		devToken = func(u uint64, admin bool) (string, error) { return k.Sign(engine.UserID(u), admin, 24*time.Hour) }
	}
	// Replicas share persisted queries in Redis mode: a client behind a
	// load balancer persists a query once, not once per replica.
	var apq graphql.Cache[string]
	var limiter resolvers.RateLimiter
	var socketCap resolvers.SocketCap
	var storeTimeout time.Duration
	if rs, ok := store.(*redisstore.Store); ok {
		storeTimeout = sf.redisTimeout
		apq = resolvers.NewRedisAPQCache(rs.Client(), rs.KeyPrefix(), *apqTTL)
		// Replicas share each user's mutation budget in Redis.
		if *rateLimit > 0 {
			burst := *rateBurst
			if burst <= 0 {
				burst = max(1, int(*rateLimit*2)) // as the in-process limiter
			}
			l, err := rs.NewLimiter(*rateLimit, burst)
			if err != nil {
				return usageError{err}
			}
			limiter = resolvers.SharedRateLimiter(l)
		}
		// And each user's open WebSockets: a crashed replica's stop
		// counting one lease after its last renewal.
		if n := wsCfg.UserCap(); n > 0 {
			sc, err := rs.NewSocketCap(n, *wsLease)
			if err != nil {
				return usageError{err}
			}
			defer sc.Close()
			socketCap = resolvers.SharedSocketCap(sc)
		}
	}
	handler := newHandler(store, h, resolvers.Config{
		APQCache:        apq,
		Metrics:         reg,
		Keys:            k,
		ComplexityLimit: *complexity,
		MaxBodyBytes:    *maxBody,
		OriginPatterns:  splitList(*origins),
		CORSOrigins:     splitList(*corsOrigins),
		RateLimit:       *rateLimit,
		RateBurst:       *rateBurst,
		RateLimiter:     limiter,
		WebSocket:       wsCfg,
		SocketCap:       socketCap,

		MaxMutationsPerRequest: *maxMutations,
		DisableIntrospection:   !*introspection,
		CostRate:               *costRate,
		CostBurst:              *costBurst,
		StoreTimeout:           storeTimeout,
	}, devToken, web.Options{DataDir: sf.data, GraphiQLCDN: *graphiqlCDN})

	if *pprofAddr != "" {
		stopPprof, err := startPprof(*pprofAddr)
		if err != nil {
			return err
		}
		defer stopPprof()
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	srv := newHTTPServer(handler, timeouts)
	// WebSockets outlive Shutdown (it does not track hijacked connections);
	// ending the base context after it closes them with 1001.
	baseCtx, endSockets := context.WithCancel(context.Background())
	defer endSockets()
	srv.BaseContext = func(net.Listener) context.Context { return baseCtx }
	slog.Info("tally serving", "addr", "http://"+ln.Addr().String(), "backend", backendName(sf), "graphiql", "http://"+ln.Addr().String()+"/")
	if dev {
		admin, _ := k.Sign(1, true, 24*time.Hour)
		user, _ := k.Sign(2, false, 24*time.Hour)
		slog.Warn("TALLY_JWT_SECRET is unset: using a random secret for this run (tokens below expire in 24h)")
		if fs.Lookup("log-format").Value.String() == "json" {
			slog.Warn("dev tokens", "admin_user", 1, "admin_authorization", "Bearer "+admin, "user", 2, "user_authorization", "Bearer "+user)
		} else {
			fmt.Fprintf(stderr, "\n  admin token (user 1):  Authorization: Bearer %s\n  user token  (user 2):  Authorization: Bearer %s\n\n", admin, user)
		}
	}

	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	slog.Info("shutting down: draining requests")
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h.Close()
	if err := srv.Shutdown(sctx); err != nil {
		slog.Warn("shutdown", "err", err)
	}
	endSockets()
	if err := store.Close(); err != nil {
		return fmt.Errorf("closing the store: %w", err)
	}
	slog.Info("stopped")
	return nil
}

// httpTimeouts are the http.Server's limits for ordinary requests. A
// WebSocket on /query clears them when it is upgraded (its own
// -ws-* limits apply instead).
type httpTimeouts struct{ readHeader, read, write, idle time.Duration }

func (t *httpTimeouts) register(fs *flag.FlagSet) {
	fs.DurationVar(&t.readHeader, "read-header-timeout", 5*time.Second, "a request's headers must arrive within this (0: -read-timeout)")
	fs.DurationVar(&t.read, "read-timeout", 30*time.Second, "a request, headers and body, must arrive within this (a body that never ends is cut off; 0: no limit)")
	fs.DurationVar(&t.write, "write-timeout", 30*time.Second, "a response must be written within this from the end of the request's headers (a client that does not read is cut off; 0: no limit)")
	fs.DurationVar(&t.idle, "idle-timeout", 2*time.Minute, "a kept-alive connection may wait this long for its next request (0: -read-timeout)")
}

func newHTTPServer(h http.Handler, t httpTimeouts) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: t.readHeader,
		ReadTimeout:       t.read,
		WriteTimeout:      t.write,
		IdleTimeout:       t.idle,
		MaxHeaderBytes:    64 << 10,
	}
}

func registerWSFlags(fs *flag.FlagSet, c *resolvers.WSConfig) {
	fs.IntVar(&c.MaxPerUser, "ws-max-per-user", 16, "open WebSockets per user (with -redis: across all replicas), and per remote IP for sockets without a token or not yet initialised (negative: no cap); the next is closed with 4429 (per IP: refused with HTTP 429)")
	fs.IntVar(&c.MaxSubscriptions, "ws-max-subscriptions", 100, "operations active at once on one WebSocket (negative: no cap); the next subscribe gets an error with RATE_LIMITED")
	fs.DurationVar(&c.InitTimeout, "ws-init-timeout", 10*time.Second, "a WebSocket must send connection_init within this (else 4408)")
	fs.DurationVar(&c.PingInterval, "ws-ping-interval", 20*time.Second, "ping each WebSocket this often; one that has not answered by the next ping is dropped (negative: never)")
	fs.DurationVar(&c.WriteTimeout, "ws-write-timeout", 10*time.Second, "a WebSocket that does not take one message within this is dropped")
	fs.IntVar(&c.SendQueueBytes, "ws-send-queue-bytes", 256<<10, "bytes queued for one WebSocket beyond which it is dropped as a slow reader (1013)")
}

// newHandler routes the server's endpoints: /query (GraphQL), /healthz
// (liveness), /readyz (the store answers), /metrics (Prometheus) and the
// web UI (GraphiQL at /, the demo at /demo).
func newHandler(store engine.Store, h *hub.Hub, cfg resolvers.Config, devToken func(uint64, bool) (string, error), ui web.Options) http.Handler {
	// serve passes its registry (the engine's metrics are in it already).
	reg, ok := cfg.Metrics.(*prometheus.Registry)
	if !ok {
		reg = prometheus.NewRegistry()
	}
	registerBuildInfo(reg)
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	registerMemoryMetrics(reg)
	registerStoreMetrics(reg, store, h)
	cfg.Store, cfg.Hub, cfg.Metrics = store, h, reg

	mux := http.NewServeMux()
	mux.Handle("/query", resolvers.NewHandler(cfg))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		rctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		// Redis reports each shard (redisstore.Readiness): one that is
		// down or cannot write is named, and fails the check only when
		// no shard answers.
		var report string
		var err error
		if rs, ok := store.(interface {
			Readiness(context.Context) (string, error)
		}); ok {
			report, err = rs.Readiness(rctx)
		} else {
			err = store.Ready(rctx)
		}
		if err != nil {
			msg := err.Error()
			if cause := redisstore.Cause(err); cause != err {
				msg += " (" + cause.Error() + ")" // for operators: /readyz is not the API
			}
			http.Error(w, "not ready: "+msg+"\n"+report, http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ready\n"+report)
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	ui.GraphQLPath, ui.DevToken = "/query", devToken
	mux.Handle("/", web.Handler(ui))
	return resolvers.ObserveHTTP(reg, mux)
}

func backendName(sf storeFlags) string {
	if sf.redis != "" {
		return "redis " + sf.redis
	}
	return "embedded " + sf.data
}

func registerStoreMetrics(reg prometheus.Registerer, store engine.Store, h *hub.Hub) {
	gauge := func(name, help string, f func(engine.Stats) int64) {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help},
			func() float64 { return float64(f(store.Stats())) }))
	}
	gauge("tally_engine_posts", "Known posts (with an author or a count).", func(s engine.Stats) int64 { return s.Posts })
	gauge("tally_engine_counted_posts", "Posts with a non-zero counter.", func(s engine.Stats) int64 { return s.CountedPosts })
	gauge("tally_engine_users", "Users with any state.", func(s engine.Stats) int64 { return s.Users })
	gauge("tally_engine_groups", "Groups.", func(s engine.Stats) int64 { return s.Groups })
	gauge("tally_engine_messages", "Group messages.", func(s engine.Stats) int64 { return s.Messages })
	gauge("tally_engine_notifications", "System notifications.", func(s engine.Stats) int64 { return s.Notifications })
	gauge("tally_engine_memory_bytes", "Bytes held by the engine's tables.", func(s engine.Stats) int64 { return s.MemoryBytes })
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "tally_subscriptions", Help: "Open GraphQL subscriptions.",
	}, func() float64 { u, r := h.Watchers(); return float64(u + r) }))
}

func tokenCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("token", stderr)
	user := fs.String("user", "", "user id (decimal)")
	admin := fs.Bool("admin", false, "grant role admin")
	ttl := fs.Duration("ttl", 0, "expiry (0 = no exp claim)")
	data := fs.String("data", "./data", "data directory of a dev server, whose dev-jwt-secret signs the token when TALLY_JWT_SECRET is unset")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	id, err := strconv.ParseUint(*user, 10, 64)
	if err != nil || id == 0 {
		return usageError{fmt.Errorf("-user must be a positive decimal user id")}
	}
	k, _, err := keys(*data, false)
	if err != nil {
		return err
	}
	tok, err := k.Sign(engine.UserID(id), *admin, *ttl)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, tok)
	return nil
}

func importCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("import", stderr)
	var sf storeFlags
	sf.register(fs)
	// The import builds the same tables as the server and paces its GC
	// alike: its peak RSS was twice the tables' size with Go's pacing.
	var mem memorySettings
	mem.register(fs)
	batch := fs.Int("batch", 10000, "rows per durable batch")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	files := fs.Args()
	if len(files) == 0 {
		return usageError{errors.New("name at least one FILE (CSV or .ndjson/.jsonl, - for stdin)")}
	}
	if err := mem.check(sf.memoryBudget); err != nil {
		return usageError{err}
	}
	defer mem.apply()()
	if sf.fsync == "always" {
		sf.fsync = "batch" // one fsync per batch is what Import promises anyway
	}
	sf.batchJob = true
	store, err := sf.open(ctx)
	if err != nil {
		return err
	}
	defer store.Close()
	imp, ok := store.(engine.Importer)
	if !ok {
		return errors.New("this backend cannot import")
	}
	var total, rejected int
	progress := importProgress{useBar: isTerminal(stderr) && fs.Lookup("log-format").Value.String() == "text"}
	start := time.Now()
	rows := make([]engine.ImportRow, 0, *batch)
	flush := func() error {
		if len(rows) == 0 {
			return nil
		}
		if err := imp.Import(ctx, rows); err != nil {
			// Redis's errors reach clients as the bare ErrUnavailable;
			// an operator needs what was behind it and how far it got.
			if cause := redisstore.Cause(err); cause != err {
				return fmt.Errorf("import stopped after %d rows: %w (cause: %v)", total, err, cause)
			}
			return fmt.Errorf("import stopped after %d rows: %w", total, err)
		}
		total += len(rows)
		rows = rows[:0]
		progress.report(stderr, total, float64(total)/time.Since(start).Seconds(), rejected)
		return nil
	}
	for _, name := range files {
		var in io.Reader = os.Stdin
		if name != "-" {
			f, err := os.Open(name)
			if err != nil {
				return err
			}
			defer f.Close()
			in = f
			if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() {
				progress.total += fi.Size()
			}
		}
		in = &countingReader{r: in, n: &progress.done}
		r, err := importfile.NewReader(in, name, importfile.FormatOf(name))
		if err != nil {
			return err
		}
		for {
			row, err := r.Next()
			if err == io.EOF {
				break
			}
			var re *importfile.RowError
			if errors.As(err, &re) {
				rejected++
				progress.log(stderr, slog.LevelWarn, "import: row rejected", "err", re.Error())
				continue
			}
			if err != nil {
				return err
			}
			rows = append(rows, row)
			if len(rows) == cap(rows) {
				if err := flush(); err != nil {
					return err
				}
			}
		}
	}
	if err := flush(); err != nil {
		return err
	}
	progress.finish(stderr)
	fmt.Fprintf(stdout, "imported %d rows in %s; rejected %d\n", total, time.Since(start).Round(time.Millisecond), rejected)
	if rejected > 0 {
		return fmt.Errorf("%d rows rejected (see above)", rejected)
	}
	return nil
}

func demoSeedCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("demo-seed", stderr)
	var sf storeFlags
	sf.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	store, err := sf.open(ctx)
	if err != nil {
		return err
	}
	defer store.Close()
	sum, already, err := demoseed.SeedDir(ctx, store, sf.data)
	if err != nil {
		return err
	}
	if already {
		fmt.Fprintf(stdout, "%s already holds the demo world (%s): nothing to do\n", filepath.Join(sf.data, demoseed.FileName), sum)
		return nil
	}
	fmt.Fprintf(stdout, "seeded %s: %v\nstart the server with the same -data, then open /demo\n", backendName(sf), sum)
	return nil
}

func backupCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("backup", stderr)
	data := fs.String("data", "./data", "data directory to back up (a server may be running on it)")
	out := fs.String("out", "", "backup file to write")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *out == "" {
		return usageError{errors.New("-out must name the backup file")}
	}
	start := time.Now()
	index, err := embedded.BackupFile(ctx, *data, *out)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "backed up %s to %s (through log record %d) in %s\nrestore with: tally restore -in %s -data NEWDIR\n",
		*data, *out, index, time.Since(start).Round(time.Millisecond), *out)
	return nil
}

func restoreCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("restore", stderr)
	in := fs.String("in", "", "backup file made by tally backup")
	data := fs.String("data", "", "new (empty) data directory to create")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *in == "" || *data == "" {
		return usageError{errors.New("-in and -data are required")}
	}
	if err := embedded.Restore(*in, *data); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "restored %s into %s; start the server with: tally -data %s\n", *in, *data, *data)
	return nil
}

func repairCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("repair", stderr)
	data := fs.String("data", "./data", "data directory that failed to open (the server must be stopped)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	report, err := embedded.Repair(*data)
	if report != "" {
		fmt.Fprintln(stdout, report)
	}
	return err
}

// importProgress reports the import's progress from the bytes read of
// the input files whose size is known (stdin has none: it then only
// counts rows): as a bar redrawn in place on a terminal with text logs,
// otherwise as a log line every few seconds, so that JSON logs and
// redirected output stay one record per line.
type importProgress struct {
	done, total int64
	useBar      bool
	drawn       bool // the bar is on the current line
	logged      time.Time
}

func (p *importProgress) report(w io.Writer, rows int, perSecond float64, rejected int) {
	if p.useBar {
		fmt.Fprintf(w, "\r%s %d rows (%.0f rows/s), rejected %d ", p.bar(), rows, perSecond, rejected)
		p.drawn = true
		return
	}
	if time.Since(p.logged) < 2*time.Second {
		return
	}
	p.logged = time.Now()
	attrs := []any{"rows", rows, "rows_per_s", int64(perSecond), "rejected", rejected}
	if p.total > 0 {
		attrs = append(attrs, "percent", min(100*p.done/p.total, 100))
	}
	slog.Info("import: progress", attrs...)
}

// log writes a log line below the bar, if one is drawn.
func (p *importProgress) log(w io.Writer, level slog.Level, msg string, args ...any) {
	p.finish(w)
	slog.Log(context.Background(), level, msg, args...)
}

func (p *importProgress) finish(w io.Writer) {
	if p.drawn {
		fmt.Fprintln(w)
		p.drawn = false
	}
}

// isTerminal reports whether w is a terminal (a character device).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

func (p *importProgress) bar() string {
	if p.total <= 0 {
		return "importing:"
	}
	const width = 30
	frac := min(float64(p.done)/float64(p.total), 1)
	n := int(frac * width)
	return fmt.Sprintf("[%s%s] %3.0f%%", strings.Repeat("=", n), strings.Repeat(" ", width-n), frac*100)
}

type countingReader struct {
	r io.Reader
	n *int64
}

func (c *countingReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	*c.n += int64(n)
	return n, err
}
