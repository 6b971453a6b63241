package transport

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// EngineMetrics receives the embedded engine's figures (it is an
// embedded.Metrics) and Redis command latencies (RedisHook), for /metrics.
// One is made per process, before the store opens, and registered with
// the registry the server's handler serves.
type EngineMetrics struct {
	fsync     prometheus.Histogram
	batchRecs prometheus.Histogram
	batchSize prometheus.Histogram
	snapDur   prometheus.Histogram
	snapSize  prometheus.Gauge
	snapFail  prometheus.Counter
	redisCmd  *prometheus.HistogramVec
	redisErr  *prometheus.CounterVec
}

func NewEngineMetrics() *EngineMetrics {
	return &EngineMetrics{
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
		snapFail: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tally_snapshot_failures_total",
			Help: "Periodic snapshots that failed (each is retried with backoff; the log is kept meanwhile, so restarts replay more).",
		}),
		redisCmd: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "tally_redis_command_seconds",
			Help:    "Round trip of each Redis command or pipeline, by command (\"pipeline\" for a pipeline); only commands the store issues, so the label is bounded.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1},
		}, []string{"command"}),
		redisErr: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tally_redis_errors_total",
			Help: "Redis commands or pipelines that failed (connection errors, timeouts, error replies), by command as tally_redis_command_seconds; replies the store handles as part of the protocol (nil, NOSCRIPT, MOVED, ASK) and requests cancelled by their client are not counted.",
		}, []string{"command"}),
	}
}

// Register adds the metrics to reg.
func (m *EngineMetrics) Register(reg prometheus.Registerer) {
	reg.MustRegister(m.fsync, m.batchRecs, m.batchSize, m.snapDur, m.snapSize, m.snapFail, m.redisCmd, m.redisErr)
}

func (m *EngineMetrics) LogBatchWritten(records, bytes int) {
	m.batchRecs.Observe(float64(records))
	m.batchSize.Observe(float64(bytes))
}

func (m *EngineMetrics) LogSynced(took time.Duration) { m.fsync.Observe(took.Seconds()) }

func (m *EngineMetrics) SnapshotWritten(took time.Duration, bytes int64) {
	m.snapDur.Observe(took.Seconds())
	m.snapSize.Set(float64(bytes))
}

func (m *EngineMetrics) SnapshotFailed() { m.snapFail.Inc() }

// RedisHook returns the go-redis hook that times the store's commands
// for tally_redis_command_seconds.
func (m *EngineMetrics) RedisHook() redis.Hook { return redisHook{m} }

type redisHook struct{ m *EngineMetrics }

func (redisHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h redisHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		start := time.Now()
		err := next(ctx, cmd)
		h.m.redisCmd.WithLabelValues(cmd.Name()).Observe(time.Since(start).Seconds())
		if redisFailed(ctx, err) {
			h.m.redisErr.WithLabelValues(cmd.Name()).Inc()
		}
		return err
	}
}

func (h redisHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		start := time.Now()
		err := next(ctx, cmds)
		h.m.redisCmd.WithLabelValues("pipeline").Observe(time.Since(start).Seconds())
		failed := redisFailed(ctx, err)
		for _, cmd := range cmds {
			failed = failed || redisFailed(ctx, cmd.Err())
		}
		if failed {
			h.m.redisErr.WithLabelValues("pipeline").Inc()
		}
		return err
	}
}

// redisFailed reports whether err is a failure of Redis or of the way to
// it. The store meets some error replies in its ordinary work, and they
// say nothing about Redis's health: nil (no such key), NOSCRIPT (a node
// without the script cached yet, then sent it) and MOVED or ASK (a slot
// that moved, then followed). A request its client gave up on is not
// Redis's failure either.
func redisFailed(ctx context.Context, err error) bool {
	switch {
	case err == nil, errors.Is(err, redis.Nil), errors.Is(ctx.Err(), context.Canceled):
		return false
	}
	for _, prefix := range []string{"NOSCRIPT", "MOVED", "ASK"} {
		if redis.HasErrorPrefix(err, prefix) {
			return false
		}
	}
	return true
}
