package redisstore_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/redisstore"
	"github.com/tally-dev/tally/engine/redisstore/redistest"
)

// observer records what a store reports of its shards.
type observer struct {
	mu       sync.Mutex
	errors   map[string]int // "shard cause"
	writable map[string]bool
}

func newObserver() *observer {
	return &observer{errors: map[string]int{}, writable: map[string]bool{}}
}

func (o *observer) RedisError(shard, cause string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.errors[shard+" "+cause]++
}

func (o *observer) RedisShardWritable(shard string, ok bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.writable[shard] = ok
}

func (o *observer) state(shard, cause string) (errs int, writable, known bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	writable, known = o.writable[shard]
	return o.errors[shard+" "+cause], writable, known
}

func configSet(t *testing.T, addr string, kv ...string) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, DisableIdentity: true})
	defer c.Close()
	for i := 0; i < len(kv); i += 2 {
		must(t, c.ConfigSet(bg, kv[i], kv[i+1]).Err())
	}
}

// A master that refuses writes (NOREPLICAS, from min-replicas-to-write)
// is named with its cause: in the error's cause, the metrics and the
// readiness report, which stays ready (the shard's trouble is every
// replica's). Reads go on; the first accepted write ends it.
func TestShardRefusingWrites(t *testing.T) {
	node := redistest.StartSingleNode(t)
	obs := newObserver()
	s := open(t, redisstore.Options{Addrs: []string{node.Addr}, KeyPrefix: prefix(), Observer: obs})
	post, err := s.CreatePost(bg, 1, 0, "")
	must(t, err)

	configSet(t, node.Addr, "min-replicas-to-write", "1")
	err = s.Like(bg, 2, post)
	if !errors.Is(err, engine.ErrUnavailable) || !strings.HasPrefix(redisstore.Cause(err).Error(), "NOREPLICAS") {
		t.Fatalf("write to a master refusing writes: %v (cause %v), want ErrUnavailable from NOREPLICAS", err, redisstore.Cause(err))
	}
	if n, writable, known := obs.state(node.Addr, "NOREPLICAS"); n == 0 || writable || !known {
		t.Fatalf("observer: %d NOREPLICAS errors, writable %v (reported %v); want some, false", n, writable, known)
	}
	report, err := s.Readiness(bg)
	if err != nil || !strings.Contains(report, node.Addr+": cannot write") || !strings.Contains(report, "NOREPLICAS") {
		t.Fatalf("readiness with a shard refusing writes: %q, %v; want ready, naming the shard and NOREPLICAS", report, err)
	}
	if _, err := s.Counts(bg, []engine.PostID{post}); err != nil {
		t.Fatalf("read from a master refusing writes: %v", err)
	}

	configSet(t, node.Addr, "min-replicas-to-write", "0")
	must(t, s.Like(bg, 2, post))
	if _, writable, _ := obs.state(node.Addr, ""); !writable {
		t.Fatal("observer not told the shard takes writes again")
	}
	if report, err := s.Readiness(bg); err != nil || report != "redis "+node.Addr+": ok\n" {
		t.Fatalf("readiness after the shard took a write: %q, %v", report, err)
	}
}

// With WaitReplicas, a master whose replicas cannot acknowledge costs one
// write its WaitTimeout; the writes after it fail at once, unsent, until a
// replica is back. Reads are not held up.
func TestShardWithoutReplicasFailsFast(t *testing.T) {
	node := redistest.StartSingleNode(t)
	obs := newObserver()
	const waitTimeout = 200 * time.Millisecond
	s := open(t, redisstore.Options{Addrs: []string{node.Addr}, KeyPrefix: prefix(), Observer: obs,
		WaitReplicas: 1, WaitTimeout: waitTimeout})

	start := time.Now()
	if _, err := s.CreatePost(bg, 1, 0, ""); !errors.Is(err, engine.ErrUnavailable) {
		t.Fatalf("write without a replica: %v, want ErrUnavailable", err)
	}
	if d := time.Since(start); d < waitTimeout {
		t.Fatalf("first write failed in %v, before its WAIT could time out", d)
	}
	start = time.Now()
	for range 20 {
		_, err := s.CreatePost(bg, 1, 0, "")
		if !errors.Is(err, engine.ErrUnavailable) || !strings.Contains(redisstore.Cause(err).Error(), "kept from writes") {
			t.Fatalf("write to a shard kept from writes: %v (cause %v)", err, redisstore.Cause(err))
		}
	}
	if d := time.Since(start); d >= waitTimeout {
		t.Fatalf("20 writes to a shard known unable to replicate took %v; want each to fail at once", d)
	}
	if n, writable, _ := obs.state(node.Addr, "WAIT"); n == 0 || writable {
		t.Fatalf("observer: %d WAIT errors, writable %v", n, writable)
	}
	if report, err := s.Readiness(bg); err != nil || !strings.Contains(report, "WAIT") {
		t.Fatalf("readiness: %q, %v; want ready, naming WAIT", report, err)
	}
	if _, err := s.UserCounts(bg, []engine.UserID{1}); err != nil {
		t.Fatalf("read from a shard kept from writes: %v", err)
	}

	host, port, _ := strings.Cut(node.Addr, ":")
	redistest.StartSingleNode(t, "--replicaof", host, port)
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := s.CreatePost(bg, 1, 0, "")
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("writes not back 10 s after a replica came: %v", redisstore.Cause(err))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, writable, _ := obs.state(node.Addr, ""); !writable {
		t.Fatal("observer not told the shard takes writes again")
	}
}

// A master that stops answering (SIGSTOP) holds a call no longer than its
// caller's deadline; once a probe finds it silent, writes to it fail at
// once; when it answers again, they go through.
func TestStalledMasterHoldsNoCallPastItsDeadline(t *testing.T) {
	node := redistest.StartSingleNode(t)
	s := open(t, redisstore.Options{Addrs: []string{node.Addr}, KeyPrefix: prefix()})
	post, err := s.CreatePost(bg, 1, 0, "")
	must(t, err)

	node.Pause()
	defer node.Resume()
	// Margins are wide for a loaded CI machine, still well apart from what
	// they tell apart: a call that outlives its deadline, a write that
	// waits for a silent master at all.
	const deadline = 600 * time.Millisecond
	like := func(user engine.UserID) (time.Duration, error) {
		ctx, cancel := context.WithTimeout(bg, deadline)
		defer cancel()
		start := time.Now()
		err := s.Like(ctx, user, post)
		return time.Since(start), err
	}
	first, err := like(2)
	if !errors.Is(err, engine.ErrUnavailable) || first > deadline+400*time.Millisecond {
		t.Fatalf("like on a stalled master: %v after %v; want ErrUnavailable within its %v deadline", err, first, deadline)
	}
	var fast time.Duration
	for wait := time.Now().Add(5 * time.Second); ; {
		took, err := like(3)
		if strings.Contains(redisstore.Cause(err).Error(), "kept from writes") {
			fast = took
			break
		}
		if time.Now().After(wait) {
			t.Fatalf("stalled master never kept from writes: last %v", redisstore.Cause(err))
		}
	}
	if fast > deadline/3 {
		t.Fatalf("write to a master known stalled took %v", fast)
	}
	t.Logf("first like on the stalled master failed after %v (deadline %v); once known stalled, after %v", first, deadline, fast)

	node.Resume()
	for wait := time.Now().Add(5 * time.Second); ; {
		if _, err := like(3); err == nil {
			break
		}
		if time.Now().After(wait) {
			t.Fatalf("writes not back 5 s after the master resumed: %v", redisstore.Cause(err))
		}
		time.Sleep(50 * time.Millisecond)
	}
}
