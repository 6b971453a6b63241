// Command tally serves Tally's GraphQL API: counts and badges for social
// apps. `tally` with no arguments serves on the embedded engine; see
// `tally help` for the subcommands (token, import, demo-seed, backup,
// restore, repair, version), each in its cmd_*.go file.
//
// This file holds the server: the flags that choose and tune the engine
// and the transport, the wiring of store, hub and handler, and serving
// until a signal. The server's handler is web/transport's; the engine is
// engine/embedded or engine/redisstore.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/extra/redisotel/v9"
	"go.opentelemetry.io/otel/trace"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/counters"
	"github.com/tally-dev/tally/engine/embedded"
	"github.com/tally-dev/tally/engine/redisstore"
	"github.com/tally-dev/tally/engine/tier"
	"github.com/tally-dev/tally/engine/wal"
	"github.com/tally-dev/tally/resolvers"
	"github.com/tally-dev/tally/web"
	"github.com/tally-dev/tally/web/auth"
	"github.com/tally-dev/tally/web/hub"
	"github.com/tally-dev/tally/web/memory"
	"github.com/tally-dev/tally/web/tracing"
	"github.com/tally-dev/tally/web/transport"
)

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

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
	metrics *transport.EngineMetrics
	// batchJob (import) opens a Redis store without its background
	// sweepers: the servers sweep, and the intent sweeper's SCAN of the
	// whole keyspace every few seconds would compete with the import for
	// redis-server's CPU.
	batchJob bool
	// checkJob (check) opens a Redis store that runs no background work
	// and takes a node of its own instead of allocating one (a write):
	// a check makes no ids.
	checkJob    bool
	redisPrefix string
	reactions   string
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
	fs.StringVar(&f.redisPrefix, "redis-prefix", "", "with -redis: the key prefix of this data set's keys, so several share one Redis (no braces)")
	fs.StringVar(&f.reactions, "reactions", "like", "comma-separated reaction kinds in display order, like always among them (e.g. like,love,haha,wow,sad,angry); a kind may be added at any start, and one that still has counts cannot be left out")
}

func (f *storeFlags) open(ctx context.Context) (engine.Store, error) {
	if f.node > 1023 {
		return nil, usageError{fmt.Errorf("-node must be 0..1023")}
	}
	reactions, err := counters.ParseKinds(f.reactions)
	if err != nil {
		return nil, usageError{fmt.Errorf("-reactions: %w", err)}
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
			KeyPrefix:    f.redisPrefix,
			CursorTTL:    f.cursorTTL,
			Node:         f.node,
			WaitReplicas: f.redisWait,
			WaitTimeout:  f.redisWaitTimeout,
			ReadTimeout:  f.redisTimeout,
			Reactions:    reactions,
		}
		if f.metrics != nil {
			opts.Observer = f.metrics
		}
		if f.batchJob || f.checkJob {
			opts.SweepInterval, opts.IntentSweepInterval = -1, -1
		}
		if f.checkJob {
			// A check recounts the kinds the keyspace has.
			opts.Node, opts.Existing, opts.Reactions = max(opts.Node, 1), true, nil
		}
		s, err := openRedis(ctx, opts, f.redisStartWait)
		if rs, ok := s.(*redisstore.Store); ok && err == nil && f.metrics != nil {
			rs.AddHook(f.metrics.RedisHook())
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
		Tables:           f.tables(),
		Reactions:        reactions,
	})
}

// tables are the embedded engine's table options.
func (f *storeFlags) tables() tier.Options {
	return tier.Options{
		WindowMillis:   f.window.Milliseconds(),
		OpenAge:        f.openAge,
		ColdAge:        f.coldAge,
		MemoryBudget:   f.memoryBudget,
		ColdCacheBytes: f.coldCache,
	}
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

// identityFlags are the flags that say which tokens are accepted, besides
// HS256 ones signed with TALLY_JWT_SECRET.
type identityFlags struct {
	jwks      string
	issuer    string
	audience  string
	roleClaim string
}

// register adds the flags; serve also gets -jwks (`tally token` signs
// HS256 only, but with the issuer, audience and role claim the server
// checks).
func (f *identityFlags) register(fs *flag.FlagSet, serve bool) {
	if serve {
		fs.StringVar(&f.jwks, "jwks", "", "also accept tokens signed by the app's identity provider: the URL (fetched with a timeout, refetched when a token names an unknown kid, at most once a minute) or file of its JSON Web Key Set; RS256, ES256 and EdDSA keys")
	}
	fs.StringVar(&f.issuer, "jwt-issuer", "", "when set, a token's iss claim must be this (and `tally token` writes it)")
	fs.StringVar(&f.audience, "jwt-audience", "", "when set, a token's aud claim must include this (and `tally token` writes it)")
	fs.StringVar(&f.roleClaim, "jwt-role-claim", auth.DefaultRoleClaim, "dotted path of the claim holding the role, e.g. app_metadata.role or realm_access.roles: a string \"admin\" or \"service\", or a list of roles holding one of them")
}

// keys returns the token keys: HS256 with TALLY_JWT_SECRET, or else a
// random secret for this run (dev mode), which is also written to
// <data>/dev-jwt-secret so that `tally token -data DIR` can sign tokens the
// running dev server accepts; and the identity provider of -jwks, if any.
func keys(dataDir string, serve bool, idf identityFlags) (k *auth.Keys, dev bool, err error) {
	opts := auth.Options{Issuer: idf.issuer, Audience: idf.audience, RoleClaim: idf.roleClaim}
	if s := os.Getenv("TALLY_JWT_SECRET"); s != "" {
		opts.Secret = []byte(s)
	} else {
		dev = true
		path := filepath.Join(dataDir, "dev-jwt-secret")
		if !serve {
			b, err := os.ReadFile(path)
			if err != nil {
				return nil, true, errors.New("TALLY_JWT_SECRET is unset and no dev server has written " + path + "; set TALLY_JWT_SECRET (the same value as the server's)")
			}
			opts.Secret = b
		} else {
			opts.Secret = auth.RandomSecret()
			if dataDir != "" {
				if err := os.MkdirAll(dataDir, 0o700); err == nil {
					_ = os.WriteFile(path, opts.Secret, 0o600)
				}
			}
			opts.Dev = true
		}
	}
	if idf.jwks != "" {
		if opts.Provider, err = auth.OpenProvider(auth.ProviderOptions{Source: idf.jwks}); err != nil {
			return nil, dev, usageError{err}
		}
	}
	k, err = auth.New(opts)
	if err != nil && opts.Provider != nil {
		opts.Provider.Close()
	}
	if err != nil {
		return nil, dev, err
	}
	return k, dev, nil
}

func serve(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("serve", stderr)
	var sf storeFlags
	sf.register(fs)
	var mem memory.Settings
	mem.Register(fs)
	addr := fs.String("addr", "127.0.0.1:8080", "listen address")
	apqTTL := fs.Duration("apq-ttl", transport.DefaultAPQTTL, "with -redis: how long a persisted query (APQ) stays in Redis, shared by the replicas, after its last use")
	pprofAddr := fs.String("pprof", "", "serve net/http/pprof on this separate address, e.g. 127.0.0.1:6060 (off when empty)")
	showVersion := fs.Bool("version", false, "print the version, commit and Go version, and exit")
	complexity := fs.Int("complexity-limit", 5000, "largest operation cost accepted: each field 1, lists times the most they return, each element of a list argument 1, introspection by what it returns")
	maxBody := fs.Int64("max-body-bytes", 1<<20, "largest request body accepted")
	corsOrigins := fs.String("cors-origins", "", "comma-separated browser origins (or *) allowed to call /query from another origin")
	origins := fs.String("ws-origins", "", "comma-separated host patterns allowed to open WebSockets cross-origin (same origin is always allowed)")
	rateLimit := fs.Float64("rate-limit", 50, "mutations per second per user (0 = unlimited)")
	rateBurst := fs.Int("rate-burst", 100, "burst of mutations per user above -rate-limit")
	maxMutations := fs.Int("max-mutations-per-request", transport.DefaultMaxMutationsPerRequest, "mutation fields (aliases count each) one request may carry, at most -rate-burst; more is BAD_USER_INPUT (negative: only -rate-burst caps)")
	costRate := fs.Float64("cost-rate", 10000, "operation cost (as -complexity-limit prices it) each client may spend per second: per signed-in user, per remote address for anonymous requests (behind a proxy, all anonymous clients share its address); beyond it RATE_LIMITED with retryAfter (0 = no budget)")
	costBurst := fs.Int("cost-burst", 50000, "burst of -cost-rate (at least -complexity-limit)")
	contentWrites := fs.String("content-writes", "any", "who may create and delete posts, reposts and comments: any (every signed-in user) or service (only tokens with role service or admin, the app's backend: end users get FORBIDDEN and keep likes, favorites, views, follows, reads and messages); see docs/integration.md")
	introspection := fs.Bool("introspection", true, "answer __schema and __type (GraphiQL's Docs need it); -introspection=false refuses them with BAD_USER_INPUT, reason INTROSPECTION_DISABLED")
	var timeouts transport.Timeouts
	registerTimeoutFlags(fs, &timeouts)
	var wsCfg transport.WSConfig
	registerWSFlags(fs, &wsCfg)
	var idf identityFlags
	idf.register(fs, true)
	wsLease := fs.Duration("ws-lease", redisstore.DefaultSocketLease, "with -redis: how long a replica's open WebSockets stay in the shared per-user count without being renewed (each replica renews every third of it), so a crashed replica's sockets stop counting within it")
	graphiqlCDN := fs.Bool("graphiql-cdn", false, "load GraphiQL's scripts from unpkg instead of the copy built into the binary")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *showVersion {
		printVersion(stdout)
		return nil
	}
	writes, err := resolvers.ParseContentWrites(*contentWrites)
	if err != nil {
		return usageError{err}
	}
	if err := mem.Check(sf.memoryBudget); err != nil {
		return usageError{err}
	}
	defer mem.Apply()()
	sf.metrics = transport.NewEngineMetrics()
	reg := prometheus.NewRegistry()
	sf.metrics.Register(reg)
	registerBuildInfo(reg)

	k, dev, err := keys(sf.data, true, idf)
	if err != nil {
		return err
	}
	defer k.Close()
	store, err := sf.open(ctx)
	if err != nil {
		return err
	}
	defer store.Close()
	// Traces, when the OTEL_* environment asks for them (tracing.Enabled).
	tp, err := tracing.Setup(ctx, readBuildInfo().version)
	if err != nil {
		return usageError{err}
	}
	var tracer trace.TracerProvider
	if tp != nil {
		tracer = tp
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := tp.Shutdown(sctx); err != nil {
				slog.Warn("OpenTelemetry: flushing the last spans failed", "err", err)
			}
		}()
		if rs, ok := store.(*redisstore.Store); ok {
			if err := redisotel.InstrumentTracing(rs.Client(), redisotel.WithTracerProvider(tp), redisotel.WithDBStatement(false)); err != nil {
				return err
			}
		}
		slog.Info("OpenTelemetry traces on", "protocol", tp.Protocol)
	}
	h := hub.New(store)
	defer h.Close()

	var devToken func(uint64, bool) (string, error)
	if dev {
		devToken = func(u uint64, admin bool) (string, error) { return k.Sign(engine.UserID(u), admin, 24*time.Hour) }
	}
	// Replicas share persisted queries in Redis mode: a client behind a
	// load balancer persists a query once, not once per replica.
	var apq graphql.Cache[string]
	var limiter transport.RateLimiter
	var socketCap transport.SocketCap
	var storeTimeout time.Duration
	if rs, ok := store.(*redisstore.Store); ok {
		storeTimeout = sf.redisTimeout
		apq = transport.NewRedisAPQCache(rs.Client(), rs.KeyPrefix(), *apqTTL)
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
			limiter = transport.SharedRateLimiter(l)
		}
		// And each user's open WebSockets: a crashed replica's stop
		// counting one lease after its last renewal.
		if n := wsCfg.UserCap(); n > 0 {
			sc, err := rs.NewSocketCap(n, *wsLease)
			if err != nil {
				return usageError{err}
			}
			defer sc.Close()
			socketCap = transport.SharedSocketCap(sc)
		}
	}
	handler := transport.NewServerHandler(transport.ServerConfig{Config: transport.Config{
		Store:           store,
		Hub:             h,
		APQCache:        apq,
		Metrics:         reg,
		Keys:            k,
		ContentWrites:   writes,
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
		Tracer:                 tracer,
	}, DevToken: devToken, UI: web.Options{DataDir: sf.data, Reactions: store.ReactionKinds(), GraphiQLCDN: *graphiqlCDN}})

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
	srv := transport.NewHTTPServer(handler, timeouts)
	// What Shutdown leaves running ends with the base context.
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
	// WebSockets outlive Shutdown (it does not track hijacked
	// connections): they are closed with 1001, and their close frames
	// out, before the process exits.
	if err := transport.CloseWebSockets(sctx); err != nil {
		slog.Warn("shutdown: WebSockets still open", "err", err)
	}
	endSockets()
	if err := store.Close(); err != nil {
		return fmt.Errorf("closing the store: %w", err)
	}
	slog.Info("stopped")
	return nil
}

// registerTimeoutFlags adds the http.Server's limits for ordinary
// requests (a WebSocket's own -ws-* limits replace them once upgraded).
func registerTimeoutFlags(fs *flag.FlagSet, t *transport.Timeouts) {
	fs.DurationVar(&t.ReadHeader, "read-header-timeout", 5*time.Second, "a request's headers must arrive within this (0: -read-timeout)")
	fs.DurationVar(&t.Read, "read-timeout", 30*time.Second, "a request, headers and body, must arrive within this (a body that never ends is cut off; 0: no limit)")
	fs.DurationVar(&t.Write, "write-timeout", 30*time.Second, "a response must be written within this from the end of the request's headers (a client that does not read is cut off; 0: no limit)")
	fs.DurationVar(&t.Idle, "idle-timeout", 2*time.Minute, "a kept-alive connection may wait this long for its next request (0: -read-timeout)")
}

func registerWSFlags(fs *flag.FlagSet, c *transport.WSConfig) {
	fs.IntVar(&c.MaxPerUser, "ws-max-per-user", 16, "open WebSockets per user (with -redis: across all replicas; negative: no cap); the next is closed with 4429")
	fs.IntVar(&c.MaxPerAddress, "ws-max-per-address", 256, "WebSockets per remote IP not yet initialised or without a token, in this process (negative: no cap); the next is accepted and closed with 1013, which clients retry with backoff. Sized for many clients behind one address (NAT, proxy)")
	fs.IntVar(&c.MaxSubscriptions, "ws-max-subscriptions", 100, "operations active at once on one WebSocket (negative: no cap); the next subscribe gets an error with RATE_LIMITED")
	fs.DurationVar(&c.InitTimeout, "ws-init-timeout", 10*time.Second, "a WebSocket must send connection_init within this (else 4408)")
	fs.DurationVar(&c.PingInterval, "ws-ping-interval", 20*time.Second, "ping each WebSocket this often; one that has not answered by the next ping is dropped (negative: never)")
	fs.DurationVar(&c.WriteTimeout, "ws-write-timeout", 10*time.Second, "a WebSocket that does not take one message within this is dropped")
	fs.IntVar(&c.SendQueueBytes, "ws-send-queue-bytes", 256<<10, "bytes queued for one WebSocket beyond which it is dropped as a slow reader (1013)")
}

func backendName(sf storeFlags) string {
	if sf.redis != "" {
		return "redis " + sf.redis
	}
	return "embedded " + sf.data
}
