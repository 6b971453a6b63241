package redisstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// Shard health: which master a Redis failure came from, what it was, and
// whether the shard can take writes now.
//
// Every command goes through a hook on its node's client (installed as
// go-redis makes each one), which knows the node's address: a failure is
// counted against that shard and its cause (causeOf: NOREPLICAS,
// CLUSTERDOWN, MOVED, timeout, connection, ...), passed to
// Options.Observer, and logged at most once per shard and cause every
// logEvery, with the count since, so that an outage is a few lines that
// name it rather than one line per failed request.
//
// A shard is kept from writes, which then fail at once with
// ErrUnavailable naming the shard and cause, unsent (so they provably did
// not run), while its master did not answer a probe (PING) made after a
// timeout or a broken connection, or, with WaitReplicas, after a WAIT
// there came back short until a probe finds enough replicas online and
// caught up (INFO replication). Each of those writes would otherwise hold
// its request for the whole timeout, or WaitTimeout, and fail anyway. A
// kept shard is probed every probeEvery until it recovers, stops being a
// master, or has been out of use (out of the slot map) for retireAfter.
// A shard that answers writes with a refusal (NOREPLICAS, READONLY,
// CLUSTERDOWN, MASTERDOWN, LOADING, ...) is reported likewise but not
// kept: its refusals come as quickly, and its next accepted write clears
// it. Reads are never kept from a shard: a master that cannot replicate
// still serves them, and a dead one refuses connections at once.
const (
	logEvery     = 10 * time.Second
	probeEvery   = 200 * time.Millisecond
	probeTimeout = 500 * time.Millisecond
	retireAfter  = 10 * time.Second
)

// Observer receives what the store sees of Redis, for metrics. Shards are
// named by their master's address; causes are causeOf's few words.
type Observer interface {
	RedisError(shard, cause string)
	RedisShardWritable(shard string, writable bool)
}

// causeOf names what a Redis call's error was, in a word or two fit for
// a metric label: the error reply's code, "WAIT" (replicas did not
// acknowledge), "timeout", "connection", "pool", "canceled", or "other".
// "" is no error.
func causeOf(err error) string {
	var re redis.Error
	var ne net.Error
	switch {
	case err == nil || errors.Is(err, redis.Nil) || errors.Is(err, redis.ErrClosed):
		return "" // no error, or the store closing
	case errors.Is(err, errNotReplicated):
		return "WAIT"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.Is(err, redis.ErrPoolTimeout), errors.Is(err, redis.ErrPoolExhausted):
		return "pool"
	case errors.As(err, &re):
		code, _, _ := strings.Cut(re.Error(), " ")
		switch code {
		case "NOREPLICAS", "CLUSTERDOWN", "MOVED", "ASK", "TRYAGAIN", "LOADING", "READONLY", "MASTERDOWN",
			"BUSY", "OOM", "MISCONF", "NOSCRIPT", "CROSSSLOT", "NOAUTH", "WRONGPASS", "NOPERM":
			return code
		}
		return "ERR"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNREFUSED),
		errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE), errors.Is(err, net.ErrClosed),
		errors.As(err, new(*net.OpError)):
		return "connection"
	}
	return "other"
}

// refusals are the error replies of a master that is up but will not
// take writes now.
var refusals = map[string]bool{
	"NOREPLICAS": true, "READONLY": true, "CLUSTERDOWN": true, "MASTERDOWN": true,
	"LOADING": true, "TRYAGAIN": true, "OOM": true, "MISCONF": true,
}

type health struct {
	s      *Store
	mu     sync.Mutex
	shards map[string]*shard
	closed bool         // no more probes: the store is closing
	kept   atomic.Int32 // shards kept from writes
}

// shard is one master's health, shared by the hooks of every client of
// its address.
type shard struct {
	h    *health
	addr string
	used atomic.Int64 // unix ns of the last command sent to it
	bad  atomic.Bool  // kept or refused: what the hooks' success path looks at

	mu      sync.Mutex
	kept    string // why writes are kept from it; "" when not
	refused string // the refusal its last write got; "" once one is accepted
	since   time.Time
	probing bool
	errs    map[string]*errTally
	client  *redis.Client // the probes'
}

type errTally struct {
	n      int
	logged time.Time
}

func (h *health) shard(addr string) *shard {
	h.mu.Lock()
	defer h.mu.Unlock()
	sh := h.shards[addr]
	if sh == nil {
		sh = &shard{h: h, addr: addr, errs: map[string]*errTally{}}
		if h.shards == nil {
			h.shards = map[string]*shard{}
		}
		h.shards[addr] = sh
	}
	return sh
}

// check returns the error a write to the shard at addr fails with now,
// unsent, or nil.
func (h *health) check(addr string) error {
	if h.kept.Load() == 0 {
		return nil
	}
	h.mu.Lock()
	sh := h.shards[addr]
	h.mu.Unlock()
	if sh == nil {
		return nil
	}
	sh.used.Store(time.Now().UnixNano())
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.kept == "" {
		return nil
	}
	return unavailable(&shardError{addr: addr, cause: sh.kept, since: sh.since})
}

// shardError is why a write was not sent to a shard.
type shardError struct {
	addr, cause string
	since       time.Time
}

func (e *shardError) Error() string {
	return fmt.Sprintf("shard %s kept from writes for %v: %s", e.addr, time.Since(e.since).Round(time.Millisecond), e.cause)
}

// failed counts err (a failed call to the shard) and acts on its cause;
// writes says a write client made the call, topology that it asked for
// the slot map (a replica may answer those: a failure does not make it
// a shard to probe).
func (sh *shard) failed(err error, writes, topology bool) {
	cause := causeOf(err)
	switch cause {
	case "", "canceled", "NOSCRIPT":
		// Not the shard's failure: the caller gave up, or a node lost
		// its script cache (exec loads the script again).
		return
	}
	if o := sh.h.s.opts.Observer; o != nil {
		o.RedisError(sh.addr, cause)
	}
	now := time.Now()
	sh.mu.Lock()
	t := sh.errs[cause]
	if t == nil {
		t = &errTally{}
		sh.errs[cause] = t
	}
	t.n++
	if now.Sub(t.logged) >= logEvery {
		slog.Warn("redis errors", "shard", sh.addr, "cause", cause, "count", t.n, "err", err)
		t.n, t.logged = 0, now
	}
	refusedNow := writes && refusals[cause] && sh.refused == ""
	if refusedNow {
		sh.refused = cause
		if sh.kept == "" {
			sh.since = now
		}
		sh.bad.Store(true)
	}
	sh.mu.Unlock()
	if refusedNow {
		sh.writable(false)
	}
	if (cause == "timeout" || cause == "connection") && !topology {
		sh.probe()
	}
}

// answered notes a call the shard answered: it is reachable.
func (sh *shard) answered() {
	if !sh.bad.Load() {
		return
	}
	sh.mu.Lock()
	unreachable := strings.HasPrefix(sh.kept, unreachable)
	sh.mu.Unlock()
	if unreachable {
		sh.release("answers again")
	}
}

// unreachable starts the cause of a shard kept for not answering.
const unreachable = "unreachable: "

// accepted notes a write the shard took: a refusal is over.
func (sh *shard) accepted() {
	if !sh.bad.Load() {
		return
	}
	sh.mu.Lock()
	was := sh.refused
	sh.refused = ""
	clear := was != "" && sh.kept == ""
	if clear {
		sh.bad.Store(false)
	}
	since := sh.since
	sh.mu.Unlock()
	if clear {
		slog.Info("redis shard takes writes again", "shard", sh.addr, "after", time.Since(since).Round(time.Millisecond), "was", was)
		sh.writable(true)
	}
}

// unreplicated notes a WAIT that came back short after its full timeout.
func (sh *shard) unreplicated(got, want int64) {
	sh.keep(fmt.Sprintf("WAIT: %d of %d replicas acknowledged", got, want))
	sh.probe()
}

func (sh *shard) keep(cause string) {
	sh.mu.Lock()
	first := sh.kept == ""
	if first {
		if sh.refused == "" {
			sh.since = time.Now()
		}
		sh.h.kept.Add(1)
		sh.bad.Store(true)
	}
	sh.kept = cause
	sh.mu.Unlock()
	if first {
		slog.Warn("redis shard kept from writes", "shard", sh.addr, "cause", cause)
		sh.writable(false)
	}
}

// release ends a keep; why says why, for the log.
func (sh *shard) release(why string) {
	sh.mu.Lock()
	was := sh.kept
	if was != "" {
		sh.kept = ""
		sh.h.kept.Add(-1)
		sh.bad.Store(sh.refused != "")
	}
	since, refused := sh.since, sh.refused
	sh.mu.Unlock()
	if was != "" {
		slog.Info("redis shard "+why, "shard", sh.addr, "after", time.Since(since).Round(time.Millisecond), "was", was)
		sh.writable(refused == "")
	}
}

func (sh *shard) writable(ok bool) {
	if o := sh.h.s.opts.Observer; o != nil {
		o.RedisShardWritable(sh.addr, ok)
	}
}

// probe starts probing the shard unless a probe runs already.
func (sh *shard) probe() {
	sh.mu.Lock()
	start := !sh.probing
	sh.probing = true
	sh.mu.Unlock()
	if !start {
		return
	}
	s := sh.h.s
	sh.h.mu.Lock()
	closed := sh.h.closed
	if !closed {
		s.wg.Add(1) // under h.mu: never after shut, so never beside Close's Wait
	}
	sh.h.mu.Unlock()
	if closed {
		return
	}
	go func() {
		defer s.wg.Done()
		defer func() {
			sh.mu.Lock()
			sh.probing = false
			sh.mu.Unlock()
		}()
		for {
			cause, master := sh.probeOnce()
			switch {
			case !master:
				sh.release("is no longer a master")
				return
			case cause == "":
				sh.release("takes writes again")
				return
			}
			sh.keep(cause)
			if time.Since(time.Unix(0, sh.used.Load())) > retireAfter {
				// Nothing is routed here any more: its slots moved.
				sh.release("is out of use")
				return
			}
			select {
			case <-s.stop:
				return
			case <-time.After(probeEvery):
			}
		}
	}()
}

// probeOnce asks the shard's master whether it can take writes: "" if
// so, else why not; master is false if the node now is a replica.
func (sh *shard) probeOnce() (cause string, master bool) {
	s := sh.h.s
	ctx, cancel := context.WithTimeout(context.Background(), min(s.opts.ReadTimeout, probeTimeout))
	defer cancel()
	info, err := sh.probeClient().Info(ctx, "replication").Result()
	if err != nil {
		return unreachable + causeOf(err), true
	}
	if strings.Contains(info, "\nrole:slave") || strings.HasPrefix(info, "role:slave") {
		return "", false
	}
	if want := s.opts.WaitReplicas; want > 0 {
		if got := replicasCaughtUp(info); got < want {
			return fmt.Sprintf("WAIT: %d of %d replicas online and caught up", got, want), true
		}
	}
	return "", true
}

// probeClient is the shard's client for probes and readiness: not
// hooked (a probe's failure is its answer, not a failure to count), and
// quick to give up.
func (sh *shard) probeClient() *redis.Client {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.client == nil {
		o := sh.h.s.uo.Simple()
		o.Addr = sh.addr
		o.ReadTimeout, o.WriteTimeout = min(o.ReadTimeout, probeTimeout), min(o.WriteTimeout, probeTimeout)
		o.DialTimeout = min(o.DialTimeout, probeTimeout)
		sh.client = redis.NewClient(o)
	}
	return sh.client
}

// replicasCaughtUp counts the replicas INFO replication lists online with
// a lag (seconds since their last acknowledgement) of at most one.
func replicasCaughtUp(info string) int {
	n := 0
	for _, line := range strings.Split(info, "\n") {
		name, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || len(name) <= len("slave") || !strings.HasPrefix(name, "slave") ||
			strings.TrimLeft(name[len("slave"):], "0123456789") != "" {
			continue // not a "slave<n>:" line
		}
		fields := map[string]string{}
		for _, kv := range strings.Split(v, ",") {
			k, val, _ := strings.Cut(kv, "=")
			fields[k] = val
		}
		if lag, err := strconv.Atoi(fields["lag"]); fields["state"] == "online" && err == nil && lag <= 1 {
			n++
		}
	}
	return n
}

// hook is the hook of a client of the node at addr; writes says whether
// it is one of the store's write clients.
func (h *health) hook(addr string, writes bool) redis.Hook {
	return shardHook{sh: h.shard(addr), writes: writes}
}

// shut starts no more probes.
func (h *health) shut() {
	h.mu.Lock()
	h.closed = true
	h.mu.Unlock()
}

// close closes the probes' clients.
func (h *health) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, sh := range h.shards {
		sh.mu.Lock()
		if sh.client != nil {
			_ = sh.client.Close()
			sh.client = nil
		}
		sh.mu.Unlock()
	}
}

// writeCommands are the commands whose success shows that a shard takes
// writes (the store's scripts, and the few commands it writes with).
var writeCommands = map[string]bool{
	"evalsha": true, "eval": true, "set": true, "del": true, "hset": true, "hsetnx": true,
	"hincrby": true, "incr": true, "setnx": true,
}

type shardHook struct {
	sh     *shard
	writes bool
}

func (k shardHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (k shardHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		k.sh.used.Store(time.Now().UnixNano())
		err := next(ctx, cmd)
		k.done(err, writeCommands[cmd.Name()], cmd.Name() == "cluster")
		return err
	}
}

func (k shardHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		k.sh.used.Store(time.Now().UnixNano())
		err := next(ctx, cmds)
		var first error
		wrote := false
		for _, c := range cmds {
			if e := c.Err(); e != nil && !errors.Is(e, redis.Nil) {
				first = e
				break
			}
			wrote = wrote || writeCommands[c.Name()]
		}
		if first == nil && err != nil && !errors.Is(err, redis.Nil) {
			first = err
		}
		// One count per round trip, whatever the pipeline's length.
		k.done(first, wrote, false)
		return err
	}
}

func (k shardHook) done(err error, wrote, topology bool) {
	if err == nil || errors.Is(err, redis.Nil) {
		k.sh.answered()
		if k.writes && wrote {
			k.sh.accepted()
		}
		return
	}
	k.sh.failed(err, k.writes, topology)
}

// shardOf is the address of the master serving key's slot.
func (s *Store) shardOf(ctx context.Context, key string) string {
	if s.wcluster == nil {
		return s.wsingle.Options().Addr
	}
	c, err := s.wcluster.MasterForKey(ctx, key)
	if err != nil {
		return ""
	}
	return c.Options().Addr
}

// writable fails a batch of writes at once, unsent, when a shard it
// writes to is kept from writes.
func (s *Store) writable(ctx context.Context, calls []*call) error {
	if s.health.kept.Load() == 0 {
		return nil
	}
	for _, c := range calls {
		if err := s.health.check(s.shardOf(ctx, c.keys[0])); err != nil {
			// The slot may have moved to a replica promoted since.
			s.reload()
			return err
		}
	}
	return nil
}

// Readiness reports each master: whether it answers, and whether it
// takes writes. It fails only when no master answers: a shard that is
// down or cannot write fails the same requests on every replica, so a
// load balancer gains nothing by dropping them all (say during a
// failover); a replica that cannot reach Redis at all is worth dropping.
// It asks the nodes directly, through the probes' clients, so that a
// node that hangs costs it no more than probeTimeout.
func (s *Store) Readiness(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*probeTimeout)
	defer cancel()
	masters, err := s.masters(ctx)
	if err != nil {
		return "", unavailable(err)
	}
	answers := make([]error, len(masters))
	var wg sync.WaitGroup
	for i, m := range masters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i] = s.health.shard(m.addr).probeClient().Ping(ctx).Err()
		}()
	}
	wg.Wait()
	var b strings.Builder
	up := 0
	for i, m := range masters {
		fmt.Fprintf(&b, "redis %s%s: ", m.addr, m.slots)
		if err := answers[i]; err != nil {
			fmt.Fprintf(&b, "unreachable (%s)\n", causeOf(err))
			continue
		}
		up++
		sh := s.health.shard(m.addr)
		sh.answered()
		sh.mu.Lock()
		why := sh.kept
		if why == "" {
			why = sh.refused
		}
		since := sh.since
		sh.mu.Unlock()
		if why != "" {
			fmt.Fprintf(&b, "cannot write for %v (%s)\n", time.Since(since).Round(time.Second), why)
			continue
		}
		b.WriteString("ok\n")
	}
	if up == 0 {
		return b.String(), unavailable(errors.New("no Redis master answers"))
	}
	return b.String(), nil
}

// master is a master's address and, on a cluster, its slots as text.
type master struct{ addr, slots string }

// masters lists the masters, from the first node to answer CLUSTER SLOTS
// of all the store has seen and was given (asked at once, so that a node
// that hangs delays nothing).
func (s *Store) masters(ctx context.Context) ([]master, error) {
	if s.cluster == nil {
		return []master{{addr: s.wsingle.Options().Addr}}, nil
	}
	addrs := slices.Clone(s.opts.Addrs)
	s.health.mu.Lock()
	for a := range s.health.shards {
		if !slices.Contains(addrs, a) {
			addrs = append(addrs, a)
		}
	}
	s.health.mu.Unlock()
	type answer struct {
		slots []redis.ClusterSlot
		err   error
	}
	answers := make(chan answer, len(addrs))
	for _, a := range addrs {
		go func() {
			slots, err := s.health.shard(a).probeClient().ClusterSlots(ctx).Result()
			answers <- answer{slots, err}
		}()
	}
	var firstErr error
	for range addrs {
		ans := <-answers
		if ans.err != nil || len(ans.slots) == 0 {
			firstErr = cmp.Or(firstErr, ans.err)
			continue
		}
		ranges := map[string][]string{}
		var order []string
		for _, sl := range ans.slots {
			if len(sl.Nodes) == 0 {
				continue
			}
			a := sl.Nodes[0].Addr
			if _, ok := ranges[a]; !ok {
				order = append(order, a)
			}
			ranges[a] = append(ranges[a], fmt.Sprintf("%d-%d", sl.Start, sl.End))
		}
		sort.Strings(order)
		out := make([]master, len(order))
		for i, a := range order {
			out[i] = master{addr: a, slots: " (slots " + strings.Join(ranges[a], ",") + ")"}
		}
		return out, nil
	}
	return nil, cmp.Or(firstErr, errors.New("no node knows the cluster's slots"))
}
