package transport

import (
	"context"
	"io"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/redisstore"
	"github.com/tally-dev/tally/web"
	"github.com/tally-dev/tally/web/hub"
	"github.com/tally-dev/tally/web/memory"
)

// ServerConfig is what the server's whole handler needs: the /query
// endpoint's Config (its Store and Hub also answer /readyz and the
// engine's gauges), and the web UI's options.
type ServerConfig struct {
	Config
	// DevToken, set in dev mode only, signs tokens for the web UI.
	DevToken func(user uint64, admin bool) (string, error)
	UI       web.Options
}

// NewServerHandler routes the server's endpoints: /query (GraphQL),
// /healthz (liveness), /readyz (the store answers), /metrics (Prometheus)
// and the web UI (GraphiQL at /, the demo at /demo). cfg.Metrics, when it
// is a *prometheus.Registry, is the one /metrics serves (the caller may
// have registered its own collectors in it already); otherwise a new one.
func NewServerHandler(cfg ServerConfig) http.Handler {
	reg, ok := cfg.Metrics.(*prometheus.Registry)
	if !ok {
		reg = prometheus.NewRegistry()
	}
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	memory.RegisterMetrics(reg)
	registerStoreMetrics(reg, cfg.Store, cfg.Hub)
	cfg.Metrics = reg

	store := cfg.Store
	mux := http.NewServeMux()
	mux.Handle("/query", NewHandler(cfg.Config))
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
	ui := cfg.UI
	ui.GraphQLPath, ui.DevToken = "/query", cfg.DevToken
	mux.Handle("/", web.Handler(ui))
	return ObserveHTTP(reg, mux)
}

// snapshotLagger is the embedded engine: how far its newest snapshot is
// behind the log.
type snapshotLagger interface {
	SnapshotLag() (records uint64, logBytes int64, newest time.Time)
}

// intentSweeper is the Redis store: what its sweeps of half-applied
// operations did.
type intentSweeper interface {
	IntentSweeps() (recovered, failed uint64)
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
	// What /readyz answers, for alerts on a box no load balancer polls.
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "tally_ready", Help: "1 when the store answers (as /readyz, asked at each scrape), else 0: the embedded engine's log failed, or Redis is unreachable.",
	}, func() float64 {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if store.Ready(ctx) != nil {
			return 0
		}
		return 1
	}))
	// What only one backend has, asked of it by what it offers.
	switch s := store.(type) {
	case snapshotLagger:
		reg.MustRegister(
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tally_snapshot_timestamp_seconds",
				Help: "Unix time the newest snapshot was written (0: the data directory has none yet)."},
				func() float64 {
					if _, _, newest := s.SnapshotLag(); !newest.IsZero() {
						return float64(newest.UnixNano()) / 1e9
					}
					return 0
				}),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tally_wal_records_since_snapshot",
				Help: "Log records the newest snapshot does not cover (a restart replays them)."},
				func() float64 { records, _, _ := s.SnapshotLag(); return float64(records) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tally_wal_bytes_since_snapshot",
				Help: "Log bytes written since the newest snapshot (a restart replays them; -snapshot-log-bytes triggers a snapshot)."},
				func() float64 { _, bytes, _ := s.SnapshotLag(); return float64(bytes) }),
		)
	case intentSweeper:
		reg.MustRegister(
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tally_redis_intents_recovered_total",
				Help: "Half-applied operations (and import chunks) this replica's intent sweeps finished: each one a process left between its steps, because it died or Redis failed it mid-way."},
				func() float64 { n, _ := s.IntentSweeps(); return float64(n) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tally_redis_intent_sweep_failures_total",
				Help: "Periodic intent sweep steps of this replica that failed: half-applied operations wait for a later step meanwhile."},
				func() float64 { _, n := s.IntentSweeps(); return float64(n) }),
		)
	}
}

// Timeouts are the http.Server's limits for ordinary requests. A
// WebSocket on /query clears them when it is upgraded (its own
// WSConfig limits apply instead).
type Timeouts struct {
	// ReadHeader bounds the arrival of a request's headers (0: Read).
	ReadHeader time.Duration
	// Read bounds the arrival of a whole request, headers and body, so
	// that a body that never ends is cut off (0: no limit).
	Read time.Duration
	// Write bounds the writing of a response from the end of the
	// request's headers, so that a client that does not read is cut off
	// (0: no limit).
	Write time.Duration
	// Idle bounds the wait of a kept-alive connection for its next
	// request (0: Read).
	Idle time.Duration
}

// NewHTTPServer is the server's http.Server for h.
func NewHTTPServer(h http.Handler, t Timeouts) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: t.ReadHeader,
		ReadTimeout:       t.Read,
		WriteTimeout:      t.Write,
		IdleTimeout:       t.Idle,
		MaxHeaderBytes:    64 << 10,
	}
}
