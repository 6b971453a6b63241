package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/counters"
	"github.com/tally-dev/tally/engine/snowflake"
)

// Options configure a Store. Only Addrs is required.
type Options struct {
	// Addrs: one address for a single node, or any nodes of a cluster.
	// Cluster mode is detected from the first reachable address.
	Addrs []string
	// KeyPrefix starts every key and channel name, so several data sets
	// can share one Redis. It must not contain '{' or '}' (it stays outside
	// the hash tags).
	KeyPrefix string
	// Now is the clock for ids, red-dot stamps and cursor expiry.
	Now func() time.Time
	// CursorTTL: a system-notification cursor of a user inactive this long
	// is dropped (they start again at the newest). Default 30 days.
	CursorTTL time.Duration
	// SweepInterval: how often expired cursors are dropped from memory
	// (one replica sweeps per interval). Default 1h; negative disables.
	SweepInterval time.Duration
	// IntentSweepInterval: how often operations left half-applied by a
	// crashed process are looked for and finished (one replica sweeps
	// per interval, scanning each master for at most a tenth of it, on
	// from where the last sweep stopped: sweepintents.go). Default 5s;
	// negative disables.
	IntentSweepInterval time.Duration
	// Node is this replica's snowflake node (1..1023). 0 asks Redis for
	// one (INCR), so replicas sharing a data set never share a node.
	Node uint64
	// WaitReplicas > 0 sends WAIT after each write and fails the write
	// (ErrUnavailable) unless that many replicas acknowledged it within
	// WaitTimeout (or what is left of the caller's deadline, if less), so
	// an acknowledged write survives the promotion of a replica that has
	// it (see docs/redis-durability.md). A shard whose WAIT came back
	// short takes no writes until enough replicas are back (health.go).
	WaitReplicas int
	WaitTimeout  time.Duration // default 250ms

	// Layout. Fixed for the life of a data set: changing them re-maps keys.
	// PostWindowBits: post and message buckets span 2^PostWindowBits ms of
	// snowflake time (default 10, ~1 s); PostFanout (power of two, default
	// 16) spreads each window over that many buckets and hash slots.
	// UserBucketBits: 2^UserBucketBits consecutive user ids per bucket
	// (default 10).
	PostWindowBits int
	PostFanout     int
	UserBucketBits int

	// DialTimeout and ReadTimeout bound one connection attempt and one
	// round trip (defaults 250ms and 1s) when the caller's context allows
	// more. The server gives each request one deadline for all its Redis
	// calls (-redis-timeout, ReadTimeout's value); calls without a
	// deadline of their own (background sweeps) have only these.
	DialTimeout time.Duration
	ReadTimeout time.Duration
	PoolSize    int
	// Observer, when not nil, receives each failed call's shard and cause
	// and each shard's changes of state (health.go), for metrics.
	Observer Observer
	// EventShards: number of (sharded) pub/sub channels events spread
	// over. Default 8. Every Store subscribes to all of them.
	EventShards int
	// Reactions are the deployment's reaction kinds in display order
	// (counters.ParseKinds' result; nil: like alone, or, with Existing,
	// the keyspace's kinds as they stand), reconciled with the keyspace's
	// kinds table at Open (reactions.go).
	Reactions []string
	// Existing makes Open refuse a keyspace that holds no format marker
	// instead of marking an empty one: for tools that only read and
	// repair (tally check), to which an empty keyspace means a wrong
	// address or prefix.
	Existing bool
}

const (
	// denseMaxID is the largest group (in mapids) whose receipts are kept
	// as one packed record; larger groups switch representation.
	denseMaxID = 4096
	markerTTL  = engine.IdempotencyTTL + time.Hour
)

// Store is engine.Store on Redis or Redis Cluster.
type Store struct {
	opts Options
	k    keyspace
	// Two clients: reads (rdb) may be retried and follow redirects freely;
	// writes (wdb) are never retried by go-redis, because a script that
	// ran but whose reply was lost (EOF, timeout) must not run again. A
	// MOVED/ASK reply proves a write did not run: exec re-sends those.
	rdb      redis.UniversalClient
	wdb      redis.UniversalClient
	cluster  *redis.ClusterClient // reads; nil on a single node
	wcluster *redis.ClusterClient // writes; nil on a single node
	single   *redis.Client        // reads; nil on a cluster
	wsingle  *redis.Client        // writes; nil on a cluster
	sharded  bool                 // SPUBLISH/SSUBSCRIBE available
	gen      snowflake.Generator

	// kinds is the keyspace's reaction kinds table as Open reconciled it,
	// display the deployment's kinds in display order and order their
	// ids in that order (reactions.go).
	kinds   counters.Kinds
	display []string
	order   [counters.MaxKinds]counters.Kind

	bus    *bus
	stats  statCounters
	health health
	// intentsRecovered and intentSweepsFailed are IntentSweeps' counts.
	intentsRecovered, intentSweepsFailed atomic.Uint64

	uo      *redis.UniversalOptions
	redirMu sync.Mutex
	redir   map[string]*redis.Client

	closeOnce sync.Once
	stop      chan struct{}
	wg        sync.WaitGroup

	// checkPause, when set (tests), is called between a Check's steps
	// with the step's name, so a test can write while a check runs.
	checkPause func(step string)
	// erasureSaved, when set (tests), is called after an erasure saves
	// its progress: once per bounded step, so a test can time the steps.
	erasureSaved func()
}

var _ engine.Store = (*Store)(nil)

// Open connects, detects single node or cluster, loads the scripts and
// subscribes to the event channels. It fails if Redis is unreachable.
func Open(ctx context.Context, opts Options) (*Store, error) {
	if len(opts.Addrs) == 0 {
		return nil, fmt.Errorf("redisstore: no address")
	}
	if strings.ContainsAny(opts.KeyPrefix, "{}") {
		return nil, fmt.Errorf("redisstore: KeyPrefix %q must not contain braces", opts.KeyPrefix)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.CursorTTL <= 0 {
		opts.CursorTTL = engine.DefaultCursorTTL
	}
	if opts.SweepInterval == 0 {
		opts.SweepInterval = time.Hour
	}
	if opts.IntentSweepInterval == 0 {
		opts.IntentSweepInterval = 5 * time.Second
	}
	if opts.WaitTimeout <= 0 {
		opts.WaitTimeout = 250 * time.Millisecond
	}
	if opts.PostWindowBits <= 0 {
		opts.PostWindowBits = 10
	}
	if opts.PostFanout <= 0 {
		opts.PostFanout = 16
	}
	if opts.PostFanout&(opts.PostFanout-1) != 0 || opts.PostWindowBits > 30 {
		return nil, fmt.Errorf("redisstore: PostFanout must be a power of two and PostWindowBits at most 30")
	}
	if opts.UserBucketBits <= 0 {
		opts.UserBucketBits = 10
	}
	if opts.UserBucketBits > 20 {
		return nil, fmt.Errorf("redisstore: UserBucketBits must be at most 20")
	}
	if opts.DialTimeout <= 0 {
		opts.DialTimeout = 250 * time.Millisecond
	}
	if opts.ReadTimeout <= 0 {
		opts.ReadTimeout = time.Second
	}
	if opts.WaitReplicas > 0 && opts.ReadTimeout < opts.WaitTimeout+250*time.Millisecond {
		// WAIT blocks up to WaitTimeout; the reply must not time out first.
		opts.ReadTimeout = opts.WaitTimeout + 250*time.Millisecond
	}
	if opts.EventShards <= 0 {
		opts.EventShards = 8
	}

	clusterMode, version, err := probe(ctx, opts)
	if err != nil {
		return nil, unavailable(err)
	}
	if !clusterMode && len(opts.Addrs) > 1 {
		return nil, fmt.Errorf("redisstore: %d addresses given but %s is not in cluster mode", len(opts.Addrs), opts.Addrs[0])
	}
	uo := &redis.UniversalOptions{
		Addrs:         opts.Addrs,
		IsClusterMode: clusterMode,
		Protocol:      2,
		// Reads: one quick retry, redirects followed.
		MaxRetries:            1,
		MaxRedirects:          3,
		DialTimeout:           opts.DialTimeout,
		DialerRetries:         1, // a refused dial is an answer: fail now
		ReadTimeout:           opts.ReadTimeout,
		WriteTimeout:          opts.ReadTimeout,
		PoolTimeout:           opts.ReadTimeout,
		PoolSize:              opts.PoolSize,
		ContextTimeoutEnabled: true,
		DisableIdentity:       true,
		MaintNotificationsConfig: &maintnotifications.Config{
			Mode: maintnotifications.ModeDisabled,
		},
	}
	s := &Store{
		opts:    opts,
		k:       newKeyspace(opts.KeyPrefix, opts.PostWindowBits, opts.PostFanout, opts.UserBucketBits),
		sharded: version >= 7,
		stop:    make(chan struct{}),
	}
	s.health.s = s
	wo := *uo
	wo.MaxRetries, wo.MaxRedirects = -1, -1
	s.uo = &wo
	// Every node's client reports its calls to the node's shard health.
	hooked := func(writes bool) func(*redis.Options) *redis.Client {
		return func(o *redis.Options) *redis.Client {
			c := redis.NewClient(o)
			c.AddHook(s.health.hook(o.Addr, writes))
			return c
		}
	}
	if clusterMode {
		co, wco := uo.Cluster(), wo.Cluster()
		// A safety net behind fail(): topology changes are picked up
		// within seconds even by an idle client.
		co.ClusterStateReloadInterval = 5 * time.Second
		wco.ClusterStateReloadInterval = 5 * time.Second
		co.NewClient, wco.NewClient = hooked(false), hooked(true)
		s.cluster, s.wcluster = redis.NewClusterClient(co), redis.NewClusterClient(wco)
		s.rdb, s.wdb = s.cluster, s.wcluster
	} else {
		s.single, s.wsingle = hooked(false)(uo.Simple()), hooked(true)(wo.Simple())
		s.rdb, s.wdb = s.single, s.wsingle
	}
	s.gen.Now = opts.Now
	closeClients := func() { s.rdb.Close(); s.wdb.Close() }
	if err := s.loadScripts(ctx); err != nil {
		closeClients()
		return nil, unavailable(err)
	}
	if err := s.checkFormat(ctx); err != nil {
		closeClients()
		return nil, err
	}
	reactions := opts.Reactions
	if reactions == nil && !opts.Existing {
		reactions = []string{"like"}
	}
	if reactions != nil {
		var err error
		if reactions, err = counters.ParseKinds(strings.Join(reactions, ",")); err != nil {
			closeClients()
			return nil, fmt.Errorf("redisstore: -reactions: %w", err)
		}
	}
	if err := s.setKinds(ctx, reactions); err != nil {
		closeClients()
		return nil, err
	}
	node := opts.Node
	if node == 0 {
		n, err := s.wdb.Incr(ctx, s.k.nodeSeq()).Result()
		if err != nil {
			closeClients()
			return nil, unavailable(err)
		}
		// 1..1000: node 0 and the top of the range are left to clients
		// and tools that make their own ids.
		node = uint64((n-1)%1000) + 1
	}
	if node > snowflake.MaxNode {
		closeClients()
		return nil, fmt.Errorf("redisstore: node %d out of range", node)
	}
	s.gen.Node = node
	s.bus = newBus(s)
	if err := s.bus.start(ctx); err != nil {
		s.bus.close()
		closeClients()
		return nil, unavailable(err)
	}
	s.wg.Add(1)
	go s.flushLoop()
	if opts.SweepInterval > 0 {
		s.wg.Add(1)
		go s.electedLoop(s.opts.SweepInterval, "sweep", func(ctx context.Context) { _, _ = s.SweepCursors(ctx) })
	}
	if opts.IntentSweepInterval > 0 {
		s.wg.Add(1)
		go s.electedLoop(s.opts.IntentSweepInterval, "isweep", func(ctx context.Context) {
			if _, err := s.sweepIntents(ctx, s.opts.IntentSweepInterval/intentSweepShare); err != nil {
				s.intentSweepsFailed.Add(1)
			}
		})
	}
	return s, nil
}

// probe asks the first reachable address whether it runs in cluster mode
// and which major version it is.
func probe(ctx context.Context, opts Options) (cluster bool, major int, err error) {
	for _, addr := range opts.Addrs {
		c := redis.NewClient(&redis.Options{
			Addr: addr, Protocol: 2, DisableIdentity: true, MaxRetries: -1,
			DialTimeout: opts.DialTimeout, ReadTimeout: opts.ReadTimeout,
			MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
		})
		var info string
		info, err = c.Info(ctx, "server", "cluster").Result()
		c.Close()
		if err != nil {
			continue
		}
		for _, line := range strings.Split(info, "\n") {
			line = strings.TrimSpace(line)
			if v, ok := strings.CutPrefix(line, "redis_version:"); ok {
				major, _ = strconv.Atoi(strings.SplitN(v, ".", 2)[0])
			}
			if line == "cluster_enabled:1" {
				cluster = true
			}
		}
		return cluster, major, nil
	}
	return false, 0, err
}

// loadScripts caches every script on every master, so pipelines can use
// EVALSHA. A node that lost its cache (restart, promotion) is handled by
// falling back to EVAL on NOSCRIPT.
func (s *Store) loadScripts(ctx context.Context) error {
	load := func(ctx context.Context, c *redis.Client) error {
		p := c.Pipeline()
		digests := make([]*redis.StringCmd, len(allScripts))
		for i, sc := range allScripts {
			digests[i] = p.ScriptLoad(ctx, scriptSource[sc])
		}
		if _, err := p.Exec(ctx); err != nil {
			return err
		}
		for i, sc := range allScripts {
			if d := digests[i].Val(); d != sc.Hash() {
				return fmt.Errorf("script %d loaded as %q, want %q", i, d, sc.Hash())
			}
		}
		return nil
	}
	return eachMaster(ctx, s.cluster, s.single, load)
}

// Close stops event delivery and closes the connections.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		close(s.stop)
		s.health.shut()
		s.wg.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = s.flushStats(ctx)
		cancel()
		s.bus.close()
		_ = s.rdb.Close()
		_ = s.wdb.Close()
		s.redirMu.Lock()
		for _, c := range s.redir {
			_ = c.Close()
		}
		s.redirMu.Unlock()
		s.health.close()
	})
	return nil
}

// Ready pings every master, and fails only when none answers (see
// Readiness).
func (s *Store) Ready(ctx context.Context) error {
	_, err := s.Readiness(ctx)
	return err
}

func (s *Store) now() time.Time { return s.opts.Now() }

// unavailableError is what every Redis failure becomes: its message is the
// client-safe engine.ErrUnavailable text, the cause stays reachable with
// errors.As/Is for logs.
type unavailableError struct{ cause error }

func (e *unavailableError) Error() string   { return engine.ErrUnavailable.Error() }
func (e *unavailableError) Unwrap() []error { return []error{engine.ErrUnavailable, e.cause} }

// Cause returns the underlying Redis or network error.
func (e *unavailableError) Cause() error { return e.cause }

// fail turns a Redis failure into ErrUnavailable. On a cluster it also
// asks go-redis to reload the slot map: go-redis refreshes it on MOVED
// replies, but a dead master never answers, so without this a promoted
// replica would only be found at the next periodic reload. Errors of
// this package's own finding, a record it cannot have written
// (errCorrupt) or a decision that contradicts what a script was told
// (errBug), are returned as they are: a retry would not mend them, and
// clients see INTERNAL.
func (s *Store) fail(err error) error {
	if errors.Is(err, errCorrupt) || errors.Is(err, errBug) {
		return err
	}
	s.reload()
	return unavailable(err)
}

// errBug marks a decision of engine/ops that contradicts the facts or
// effects a script was given: a bug, reported as such.
var errBug = errors.New("redisstore: inconsistent decision")

func (s *Store) reload() {
	if s.cluster != nil {
		s.cluster.ReloadState(context.Background())
		s.wcluster.ReloadState(context.Background())
	}
}

// Cause returns the Redis or network error behind an ErrUnavailable from
// this package (for logs), or err itself.
func Cause(err error) error {
	var u *unavailableError
	if errors.As(err, &u) {
		return u.cause
	}
	return err
}

func unavailable(err error) error {
	if err == nil {
		return nil
	}
	var u *unavailableError
	if errors.As(err, &u) {
		return err
	}
	return &unavailableError{cause: err}
}

var errNotReplicated = errors.New("write not acknowledged by enough replicas")

// call is one command of a write batch: a script (sc) or a raw command.
type call struct {
	sc   *redis.Script
	keys []string
	args []any
	raw  []any
	res  *redis.Cmd
}

func script(sc *redis.Script, keys []string, args ...any) *call {
	return &call{sc: sc, keys: keys, args: args}
}

func raw(args ...any) *call { return &call{raw: args, keys: []string{fmt.Sprint(args[1])}} }

func (c *call) issue(ctx context.Context, p redis.Pipeliner, eval bool) {
	switch {
	case c.sc == nil:
		c.res = p.Do(ctx, c.raw...)
	case eval:
		c.res = c.sc.Eval(ctx, p, c.keys, c.args...)
	default:
		c.res = c.sc.EvalSha(ctx, p, c.keys, c.args...)
	}
}

// exec runs a batch of writes in one round trip (a pipeline; on a cluster
// go-redis splits it per node and runs the parts in parallel). With
// WaitReplicas it sends each node's part on one connection followed by
// WAIT, which only counts that connection's writes.
func (s *Store) exec(ctx context.Context, calls ...*call) error {
	if len(calls) == 0 {
		return nil
	}
	if err := s.writable(ctx, calls); err != nil {
		return err
	}
	wait := s.opts.WaitReplicas > 0
	switch {
	case !wait || s.wsingle != nil:
		if err := s.runPipe(ctx, s.wdb, calls, wait); err != nil {
			return err
		}
	default:
		groups := map[*redis.Client][]*call{}
		for _, c := range calls {
			node, err := s.wcluster.MasterForKey(ctx, c.keys[0])
			if err != nil {
				return s.fail(err)
			}
			groups[node] = append(groups[node], c)
		}
		errs := make(chan error, len(groups))
		for node, cs := range groups {
			go func() { errs <- s.runPipe(ctx, node, cs, true) }()
		}
		var first error
		for range groups {
			if err := <-errs; err != nil && first == nil {
				first = err
			}
		}
		if first != nil {
			return first
		}
	}
	var moved []*call
	for _, c := range calls {
		if c.res != nil && isMoved(c.res.Err()) {
			moved = append(moved, c)
		}
	}
	if len(moved) > 0 {
		// The slot map changed (failover, resharding): the moved commands
		// did not run. Send them once more, to the node the redirect names,
		// and let go-redis refresh its map in the background.
		s.reload()
		for _, c := range moved {
			node, err := s.redirected(c.res.Err())
			if err != nil {
				return s.fail(err)
			}
			if err := s.runPipe(ctx, node, []*call{c}, wait); err != nil {
				return err
			}
			if isMoved(c.res.Err()) {
				return s.fail(c.res.Err())
			}
		}
	}
	return nil
}

// redirected returns a client for the node a MOVED/ASK error names. Such
// clients are kept (few: one per node that took over slots) until Close.
func (s *Store) redirected(moved error) (*redis.Client, error) {
	f := strings.Fields(moved.Error())
	if len(f) < 3 {
		return nil, moved
	}
	addr := f[2]
	s.redirMu.Lock()
	defer s.redirMu.Unlock()
	if c, ok := s.redir[addr]; ok {
		return c, nil
	}
	o := s.uo.Simple()
	o.Addr = addr
	c := redis.NewClient(o)
	c.AddHook(s.health.hook(addr, true))
	if s.redir == nil {
		s.redir = map[string]*redis.Client{}
	}
	s.redir[addr] = c
	return c, nil
}

func isMoved(err error) bool {
	return err != nil && (redis.HasErrorPrefix(err, "MOVED") || redis.HasErrorPrefix(err, "ASK"))
}

func isNoScript(err error) bool { return err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") }

func (s *Store) runPipe(ctx context.Context, r redis.Cmdable, calls []*call, wait bool) error {
	pending, eval := calls, false
	for attempt := 0; attempt < 2; attempt++ {
		p := r.Pipeline()
		for _, c := range pending {
			c.issue(ctx, p, eval)
		}
		var w *redis.Cmd
		waitFor := s.waitFor(ctx)
		if wait {
			w = p.Do(ctx, "WAIT", s.opts.WaitReplicas, max(1, waitFor.Milliseconds()))
		}
		_, _ = p.Exec(ctx)
		var again []*call
		for _, c := range pending {
			err := c.res.Err()
			switch {
			case err == nil || err == redis.Nil:
			case isNoScript(err):
				again = append(again, c)
			case isMoved(err):
				// Did not run; exec re-sends these.
			default:
				return s.fail(err)
			}
		}
		if wait {
			n, err := w.Int64()
			if err != nil {
				return s.fail(err)
			}
			if n < int64(s.opts.WaitReplicas) {
				if c, ok := r.(*redis.Client); ok {
					sh := s.health.shard(c.Options().Addr)
					sh.failed(errNotReplicated, true, false)
					if waitFor == s.opts.WaitTimeout {
						// The shard had its full WaitTimeout: it cannot
						// replicate now, and takes no writes until it can.
						sh.unreplicated(n, int64(s.opts.WaitReplicas))
					}
				}
				return s.fail(errNotReplicated)
			}
		}
		if len(again) == 0 {
			return nil
		}
		pending, eval = again, true
	}
	return s.fail(errors.New("script cache keeps missing"))
}

// waitFor is how long a WAIT may block: WaitTimeout, or less when the
// caller's deadline comes sooner (with time left for the reply).
func (s *Store) waitFor(ctx context.Context) time.Duration {
	d := s.opts.WaitTimeout
	if dl, ok := ctx.Deadline(); ok {
		if left := time.Until(dl) - 20*time.Millisecond; left < d {
			d = left
		}
	}
	return d
}

// one runs a single script and returns its result.
func (s *Store) one(ctx context.Context, sc *redis.Script, keys []string, args ...any) (any, error) {
	c := script(sc, keys, args...)
	if err := s.exec(ctx, c); err != nil {
		return nil, err
	}
	v, err := c.res.Result()
	if err == redis.Nil {
		return nil, nil
	}
	return v, err
}

// query runs a read-only script: never followed by WAIT, so reads keep
// working while a shard has no replica to acknowledge writes.
func (s *Store) query(ctx context.Context, sc *redis.Script, keys []string, args ...any) (any, error) {
	c := script(sc, keys, args...)
	if err := s.runPipe(ctx, s.rdb, []*call{c}, false); err != nil {
		return nil, err
	}
	v, err := c.res.Result()
	if err == redis.Nil {
		return nil, nil
	}
	return v, err
}

// read runs read-only commands in one pipelined round trip.
func (s *Store) read(ctx context.Context, fn func(p redis.Pipeliner)) error {
	p := s.rdb.Pipeline()
	fn(p)
	cmds, err := p.Exec(ctx)
	if err == nil || err == redis.Nil {
		return nil
	}
	for _, c := range cmds {
		if e := c.Err(); e != nil && e != redis.Nil {
			if isNoScript(e) {
				// Read scripts are run through exec instead; a bare
				// NOSCRIPT here is a node that lost its cache.
				_ = s.loadScripts(ctx)
			}
			return s.fail(e)
		}
	}
	return s.fail(err)
}

// Result helpers. Scripts reply with integers, bulk strings and arrays.

func vals(v any) []any {
	a, _ := v.([]any)
	return a
}

func num(v any) int64 {
	switch x := v.(type) {
	case int64:
		return x
	case string:
		n, _ := strconv.ParseInt(x, 10, 64)
		return n
	}
	return 0
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

func at(a []any, i int) any {
	if i < len(a) {
		return a[i]
	}
	return nil
}

// ttlArg is the marker TTL of an operation ("" = not idempotent: 0).
func ttlArg(op string) int64 {
	if op == "" {
		return 0
	}
	return markerTTL.Milliseconds()
}

// Stats.

type statCounters struct {
	posts, counted, users, groups, messages atomic.Int64

	mu   sync.Mutex
	last engine.Stats
}

var statFields = []string{"posts", "counted", "users", "groups", "messages"}

func (c *statCounters) ptrs() []*atomic.Int64 {
	return []*atomic.Int64{&c.posts, &c.counted, &c.users, &c.groups, &c.messages}
}

// flushLoop moves locally counted deltas into Redis once a second: a
// counter bumped by every write would be one hot key for the cluster.
func (s *Store) flushLoop() {
	defer s.wg.Done()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), s.opts.ReadTimeout)
			_ = s.flushStats(ctx)
			cancel()
		}
	}
}

func (s *Store) flushStats(ctx context.Context) error {
	deltas := make([]int64, len(statFields))
	dirty := false
	for i, p := range s.stats.ptrs() {
		deltas[i] = p.Swap(0)
		dirty = dirty || deltas[i] != 0
	}
	if !dirty {
		return nil
	}
	p := s.wdb.Pipeline()
	for i, d := range deltas {
		if d != 0 {
			p.HIncrBy(ctx, s.k.stats(), statFields[i], d)
		}
	}
	if _, err := p.Exec(ctx); err != nil {
		for i, ptr := range s.stats.ptrs() {
			ptr.Add(deltas[i])
		}
		return err
	}
	return nil
}

// Stats reads the shared counters and the masters' used_memory, with a
// short timeout; when Redis does not answer it returns the last values.
func (s *Store) Stats() engine.Stats {
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.ReadTimeout)
	defer cancel()
	s.stats.mu.Lock()
	defer s.stats.mu.Unlock()
	if err := s.flushStats(ctx); err != nil {
		return s.stats.last
	}
	var st engine.Stats
	var h *redis.MapStringStringCmd
	var n, erasures *redis.IntCmd
	if err := s.read(ctx, func(p redis.Pipeliner) {
		h = p.HGetAll(ctx, s.k.stats())
		n = p.LLen(ctx, s.k.notifList())
		erasures = p.HLen(ctx, s.k.erasures())
	}); err != nil {
		return s.stats.last
	}
	m := h.Val()
	get := func(f string) int64 { v, _ := strconv.ParseInt(m[f], 10, 64); return v }
	st.Posts, st.CountedPosts, st.Users = get("posts"), get("counted"), get("users")
	st.Groups, st.Messages, st.Notifications = get("groups"), get("messages"), n.Val()
	st.Erasures = erasures.Val()
	st.MemoryBytes = s.usedMemory(ctx)
	s.stats.last = st
	return st
}

// usedMemory sums INFO memory used_memory over the masters (all data in
// those Redis servers, not only this prefix's).
func (s *Store) usedMemory(ctx context.Context) int64 {
	var total atomic.Int64
	one := func(ctx context.Context, c *redis.Client) error {
		info, err := c.Info(ctx, "memory").Result()
		if err != nil {
			return err
		}
		total.Add(infoInt(info, "used_memory"))
		return nil
	}
	if err := eachMaster(ctx, s.cluster, s.single, one); err != nil {
		return 0
	}
	return total.Load()
}

func infoInt(info, field string) int64 {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}

// eachMaster runs fn on every master of a cluster client, at once, or on
// the single node's client.
func eachMaster(ctx context.Context, cluster *redis.ClusterClient, single *redis.Client, fn func(context.Context, *redis.Client) error) error {
	if cluster != nil {
		return cluster.ForEachMaster(ctx, fn)
	}
	return fn(ctx, single)
}
