package main

// What makes the binary operable: one logger setup for the server and
// every subcommand, usage texts, the build's version, the pprof listener
// and the metrics of the engine's internals (log, snapshots, Redis).

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// commands lists the subcommands, in the order `tally -h` shows them,
// with the one-line synopsis each one's -h repeats.
var commands = []struct{ name, args, synopsis string }{
	{"serve", "[flags]", "serve the GraphQL API (what `tally` with no command does)"},
	{"token", "-user ID [-admin] [-ttl D]", "print a signed bearer token"},
	{"import", "-data DIR FILE...", "bulk-load post counts (CSV or NDJSON, - for stdin)"},
	{"demo-seed", "-data DIR", "fill a data directory with a small demo world"},
	{"backup", "-data DIR -out FILE", "consistent backup of a data directory (the server may run)"},
	{"restore", "-in FILE -data NEWDIR", "make a data directory from a backup"},
	{"repair", "-data DIR", "after a failed start: set aside what is corrupt, say what is lost"},
	{"version", "", "print the version, commit and Go version"},
	{"help", "", "this text"},
}

// newFlagSet makes a command's flag set: errors and -h go to stderr, -h
// shows the command's synopsis and flags, and -log-format and -log-level
// are there for every command alike (parseFlags applies them).
func newFlagSet(cmd string, stderr io.Writer) *flag.FlagSet {
	name := "tally " + cmd
	if cmd == "serve" {
		name = "tally"
	}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.String("log-format", "text", "log format: text or json (one object per line)")
	fs.String("log-level", "info", "least level logged: debug (adds an access log line per request), info, warn or error")
	fs.Usage = func() {
		out := fs.Output()
		if cmd == "serve" {
			fmt.Fprint(out, usageText())
			fmt.Fprintf(out, "\nFlags of tally (serve):\n")
		} else {
			for _, c := range commands {
				if c.name == cmd {
					fmt.Fprintf(out, "Usage: tally %s %s\n\n%s.\n\nFlags:\n", c.name, c.args, capitalize(c.synopsis))
				}
			}
		}
		fs.PrintDefaults()
	}
	return fs
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

func usageText() string {
	var b strings.Builder
	b.WriteString("tally — counts and badges for social apps, over GraphQL.\n\nUsage:\n")
	for _, c := range commands {
		left := "tally " + c.name + " " + c.args
		if c.name == "serve" {
			left = "tally [serve] [flags]"
		}
		fmt.Fprintf(&b, "  %-40s %s\n", left, c.synopsis)
	}
	b.WriteString(`
Run tally COMMAND -h for a command's flags. Every command takes -log-format
(text or json) and -log-level. Every flag can also be set from the
environment: -addr as TALLY_ADDR, -fsync-window as TALLY_FSYNC_WINDOW, and so
on. Flags win over the environment. TALLY_JWT_SECRET (at least 16 bytes)
signs tokens; when it is unset the server makes a random secret for the run
and logs ready-to-paste tokens.
`)
	return b.String()
}

// setupLogging makes slog's default logger write to w in the format and
// from the level of fs's -log-format and -log-level. Every command goes
// through it (from parseFlags), so the server and the subcommands log
// alike.
func setupLogging(fs *flag.FlagSet) error {
	format, level := fs.Lookup("log-format"), fs.Lookup("log-level")
	if format == nil || level == nil {
		return nil
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level.Value.String())); err != nil {
		return usageError{fmt.Errorf("-log-level must be debug, info, warn or error, not %q", level.Value.String())}
	}
	opts := &slog.HandlerOptions{Level: lvl}
	var h slog.Handler
	switch format.Value.String() {
	case "text":
		h = slog.NewTextHandler(fs.Output(), opts)
	case "json":
		h = slog.NewJSONHandler(fs.Output(), opts)
	default:
		return usageError{fmt.Errorf("-log-format must be text or json, not %q", format.Value.String())}
	}
	slog.SetDefault(slog.New(h))
	loggingSet = true
	return nil
}

// loggingSet is whether a command has set up logging, so that run reports
// the command's failure through it rather than as plain text.
var loggingSet bool

// buildInfo is what the binary knows of its build.
type buildInfo struct {
	version, commit, goVersion string
	modified                   bool
	time                       string
}

// ldVersion and ldCommit, when set with -ldflags "-X main.ldVersion=v1.2.3
// -X main.ldCommit=abc123", win over what the Go toolchain stamped: for
// builds from a tarball or with -buildvcs=false, which carry no VCS data.
var ldVersion, ldCommit string

var readBuildInfo = sync.OnceValue(func() buildInfo {
	b := buildInfo{version: "(devel)", commit: "unknown", goVersion: runtime.Version()}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v := bi.Main.Version; v != "" {
			b.version = v
		}
		if bi.GoVersion != "" {
			b.goVersion = bi.GoVersion
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				b.commit = s.Value
			case "vcs.modified":
				b.modified = s.Value == "true"
			case "vcs.time":
				b.time = s.Value
			}
		}
	}
	if ldVersion != "" {
		b.version = ldVersion
	}
	if ldCommit != "" {
		b.commit, b.modified, b.time = ldCommit, false, ""
	}
	return b
})

func printVersion(w io.Writer) {
	b := readBuildInfo()
	commit := b.commit
	if b.modified {
		commit += " (modified)"
	}
	if b.time != "" {
		commit += " from " + b.time
	}
	fmt.Fprintf(w, "tally %s\ncommit %s\n%s %s/%s\n", b.version, commit, b.goVersion, runtime.GOOS, runtime.GOARCH)
}

// registerBuildInfo adds tally_build_info, always 1, whose labels say
// which build is running (dashboards join on it; alerts catch a fleet
// running mixed versions).
func registerBuildInfo(reg prometheus.Registerer) {
	b := readBuildInfo()
	commit := b.commit
	if b.modified {
		commit += "-modified"
	}
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "tally_build_info",
		Help:        "The running build: version, VCS commit and Go version (always 1).",
		ConstLabels: prometheus.Labels{"version": b.version, "commit": commit, "goversion": b.goVersion},
	})
	g.Set(1)
	reg.MustRegister(g)
}

// startPprof serves net/http/pprof on its own listener, never on the API's
// address: profiles reveal internals and cost CPU, so only an operator who
// asked for them (and can reach that address) gets them.
func startPprof(addr string) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("-pprof: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			slog.Warn("pprof server stopped", "err", err)
		}
	}()
	slog.Info("pprof serving", "pprof", "http://"+ln.Addr().String()+"/debug/pprof/")
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	}, nil
}

// engineMetrics receives the embedded engine's figures (embedded.Metrics)
// and Redis command latencies (a go-redis hook). One is made per process,
// before the store opens, and registered with the handler's registry.
type engineMetrics struct {
	fsync     prometheus.Histogram
	batchRecs prometheus.Histogram
	batchSize prometheus.Histogram
	snapDur   prometheus.Histogram
	snapSize  prometheus.Gauge
	redisCmd  *prometheus.HistogramVec
	redisErrs *prometheus.CounterVec
	redisUp   *prometheus.GaugeVec
}

func newEngineMetrics() *engineMetrics {
	return &engineMetrics{
		fsync: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "tally_wal_fsync_seconds",
			Help:    "Duration of each fsync of the embedded engine's log.",
			Buckets: []float64{.00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1},
		}),
		batchRecs: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "tally_wal_batch_records",
			Help:    "Records per group-commit batch written to the log.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 12),
		}),
		batchSize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "tally_wal_batch_bytes",
			Help:    "Bytes per group-commit batch written to the log.",
			Buckets: prometheus.ExponentialBuckets(64, 4, 10),
		}),
		snapDur: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "tally_snapshot_seconds",
			Help:    "Time to build and write each snapshot of the embedded engine.",
			Buckets: []float64{.01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300},
		}),
		snapSize: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tally_snapshot_bytes",
			Help: "Size of the newest snapshot file written.",
		}),
		redisCmd: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "tally_redis_command_seconds",
			Help:    "Round trip of each Redis command or pipeline, by command (\"pipeline\" for a pipeline); only commands the store issues, so the label is bounded.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1},
		}, []string{"command"}),
		redisErrs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tally_redis_errors_total",
			Help: "Failed Redis round trips, by shard (its master's address) and cause: the error reply's code (NOREPLICAS, CLUSTERDOWN, MOVED, READONLY, ...), WAIT (replicas did not acknowledge), timeout, connection, pool or other.",
		}, []string{"shard", "cause"}),
		redisUp: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tally_redis_shard_writable",
			Help: "Whether a Redis shard takes writes (0 while it is unreachable, refuses them, or its replicas do not acknowledge them), by its master's address; absent for shards never in trouble.",
		}, []string{"shard"}),
	}
}

func (m *engineMetrics) register(reg prometheus.Registerer) {
	reg.MustRegister(m.fsync, m.batchRecs, m.batchSize, m.snapDur, m.snapSize, m.redisCmd, m.redisErrs, m.redisUp)
}

// RedisError implements redisstore.Observer.
func (m *engineMetrics) RedisError(shard, cause string) {
	m.redisErrs.WithLabelValues(shard, cause).Inc()
}

// RedisShardWritable implements redisstore.Observer.
func (m *engineMetrics) RedisShardWritable(shard string, writable bool) {
	v := 0.0
	if writable {
		v = 1
	}
	m.redisUp.WithLabelValues(shard).Set(v)
}

func (m *engineMetrics) LogBatchWritten(records, bytes int) {
	m.batchRecs.Observe(float64(records))
	m.batchSize.Observe(float64(bytes))
}

func (m *engineMetrics) LogSynced(took time.Duration) { m.fsync.Observe(took.Seconds()) }

func (m *engineMetrics) SnapshotWritten(took time.Duration, bytes int64) {
	m.snapDur.Observe(took.Seconds())
	m.snapSize.Set(float64(bytes))
}

// redisHook times commands for tally_redis_command_seconds.
type redisHook struct{ m *engineMetrics }

func (redisHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h redisHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		start := time.Now()
		err := next(ctx, cmd)
		h.m.redisCmd.WithLabelValues(cmd.Name()).Observe(time.Since(start).Seconds())
		return err
	}
}

func (h redisHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		start := time.Now()
		err := next(ctx, cmds)
		h.m.redisCmd.WithLabelValues("pipeline").Observe(time.Since(start).Seconds())
		return err
	}
}
