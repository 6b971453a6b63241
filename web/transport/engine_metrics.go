package transport

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// EngineMetrics receives the embedded engine's figures (it is an
// embedded.Metrics), Redis command latencies (RedisHook) and Redis
// failures per shard and cause (it is a redisstore.Observer), for /metrics.
// One is made per process, before the store opens, and registered with
// the registry the server's handler serves.
type EngineMetrics struct {
	fsync     prometheus.Histogram
	batchRecs prometheus.Histogram
	batchSize prometheus.Histogram
	snapDur   prometheus.Histogram
	snapSize  prometheus.Gauge
	snapPaced prometheus.Counter
	snapFail  prometheus.Counter
	redisCmd  *prometheus.HistogramVec
	redisErrs *prometheus.CounterVec
	redisUp   *prometheus.GaugeVec
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
		snapPaced: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tally_snapshot_paced_seconds_total",
			Help: "Time snapshots spent paused for the writers (the snapshot writer's pacing): the part of tally_snapshot_seconds that is not work.",
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

// Register adds the metrics to reg.
func (m *EngineMetrics) Register(reg prometheus.Registerer) {
	reg.MustRegister(m.fsync, m.batchRecs, m.batchSize, m.snapDur, m.snapSize, m.snapPaced, m.snapFail, m.redisCmd, m.redisErrs, m.redisUp)
}

func (m *EngineMetrics) LogBatchWritten(records, bytes int) {
	m.batchRecs.Observe(float64(records))
	m.batchSize.Observe(float64(bytes))
}

func (m *EngineMetrics) LogSynced(took time.Duration) { m.fsync.Observe(took.Seconds()) }

func (m *EngineMetrics) SnapshotWritten(took, paced time.Duration, bytes int64) {
	m.snapDur.Observe(took.Seconds())
	m.snapPaced.Add(paced.Seconds())
	m.snapSize.Set(float64(bytes))
}

func (m *EngineMetrics) SnapshotFailed() { m.snapFail.Inc() }

// RedisError implements redisstore.Observer.
func (m *EngineMetrics) RedisError(shard, cause string) {
	m.redisErrs.WithLabelValues(shard, cause).Inc()
}

// RedisShardWritable implements redisstore.Observer.
func (m *EngineMetrics) RedisShardWritable(shard string, writable bool) {
	v := 0.0
	if writable {
		v = 1
	}
	m.redisUp.WithLabelValues(shard).Set(v)
}

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
