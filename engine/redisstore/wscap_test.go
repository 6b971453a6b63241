package redisstore_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tally-dev/tally/engine/redisstore"
	"github.com/tally-dev/tally/engine/redisstore/redistest"
)

// Two replicas' SocketCaps on one Redis share each user's cap; a released
// socket frees its place at once; a replica that stops renewing (as a
// crashed one does) has its sockets freed one lease later, while a live
// replica's renewals keep its sockets counted past their first lease.
func TestSocketCapSharedAcrossReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	t.Run("single", func(t *testing.T) {
		addr, stop := redistest.StartSingle(t)
		defer stop()
		testSocketCap(t, []string{addr})
	})
	t.Run("cluster", func(t *testing.T) {
		c := redistest.StartCluster(t, 3, 0)
		testSocketCap(t, c.Addrs())
	})
}

func testSocketCap(t *testing.T, addrs []string) {
	p := prefix()
	replica := func(lease time.Duration) *redisstore.SocketCap {
		s := open(t, redisstore.Options{Addrs: addrs, KeyPrefix: p})
		c, err := s.NewSocketCap(3, lease)
		must(t, err)
		t.Cleanup(c.Close)
		return c
	}
	const lease = 900 * time.Millisecond
	a, b := replica(lease), replica(lease)
	acquire := func(c *redisstore.SocketCap, user uint64) (func(), bool) {
		t.Helper()
		rel, ok, err := c.Acquire(bg, user)
		must(t, err)
		return rel, ok
	}

	relA1, _ := acquire(a, 1)
	acquire(a, 1)
	if _, ok := acquire(b, 1); !ok {
		t.Fatal("third socket of a cap of 3 refused")
	}
	if _, ok := acquire(b, 1); ok {
		t.Fatal("fourth socket admitted: B did not see A's two")
	}
	if _, ok := acquire(a, 2); !ok {
		t.Fatal("user 2 refused: user 1's sockets counted against them")
	}
	relA1()
	relA1() // twice is once
	if _, ok := acquire(b, 1); !ok {
		t.Fatal("a released socket still counted")
	}
	if _, ok := acquire(b, 1); ok {
		t.Fatal("a second release freed a second place")
	}

	// Renewals (every lease/3) keep A's sockets counted past their lease.
	time.Sleep(2 * lease)
	if _, ok := acquire(b, 1); ok {
		t.Fatal("live sockets expired although their replica renews them")
	}

	// A stops renewing (crashed): its one socket of user 1 is freed after
	// a lease, B's two stay.
	a.Close()
	deadline := time.Now().Add(lease + 2*time.Second)
	for {
		if _, ok := acquire(b, 1); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a dead replica's socket still counted after its lease")
		}
		time.Sleep(lease / 10)
	}
	if _, ok := acquire(b, 1); ok {
		t.Fatal("more than the dead replica's socket was freed")
	}

	// A user without sockets leaves no key behind: user 2's one socket was
	// on A.
	rdb := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: addrs})
	defer rdb.Close()
	for rdb.Exists(bg, p+"{ws2}").Val() != 0 {
		if time.Now().After(deadline.Add(time.Second)) {
			t.Fatal("the key of a user whose sockets all expired is still there")
		}
		time.Sleep(lease / 10)
	}
}

// Racing admissions of one user on two replicas never pass the cap.
func TestSocketCapRace(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	addr, stop := redistest.StartSingle(t)
	defer stop()
	p := prefix()
	var caps []*redisstore.SocketCap
	for range 2 {
		c, err := open(t, redisstore.Options{Addrs: []string{addr}, KeyPrefix: p}).NewSocketCap(5, 0)
		must(t, err)
		t.Cleanup(c.Close)
		caps = append(caps, c)
	}
	var wins atomic.Int64
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			if _, ok, err := caps[i%2].Acquire(bg, 9); err == nil && ok {
				wins.Add(1)
			}
		})
	}
	wg.Wait()
	if wins.Load() != 5 {
		t.Fatalf("%d racing sockets admitted, want the cap of 5", wins.Load())
	}
	if n := caps[0].Open() + caps[1].Open(); n != 5 {
		t.Fatalf("replicas track %d sockets, want the 5 admitted", n)
	}
}

// Redis unreachable: Acquire says so (the caller chooses to admit or not)
// and still tracks the socket, so its release is safe.
func TestSocketCapUnavailable(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	n := redistest.StartSingleNode(t)
	s := open(t, redisstore.Options{Addrs: []string{n.Addr}, KeyPrefix: prefix()})
	c, err := s.NewSocketCap(2, 0)
	must(t, err)
	defer c.Close()
	if _, err := s.NewSocketCap(0, 0); err == nil {
		t.Fatal("a cap of 0 was accepted")
	}
	n.Kill()
	rel, ok, err := c.Acquire(bg, 1)
	if err == nil || ok {
		t.Fatalf("Redis down: ok %v, err %v", ok, err)
	}
	if c.Open() != 1 {
		t.Fatal("a socket of unknown admission is not tracked")
	}
	rel()
	if c.Open() != 0 {
		t.Fatal("released socket still tracked")
	}
}

// A Redis that lost the counts (flushed, or restarted empty) and its
// scripts gets both back at the next renewal: open sockets count again.
func TestSocketCapRenewRestoresLostCounts(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	addr, stop := redistest.StartSingle(t)
	defer stop()
	c, err := open(t, redisstore.Options{Addrs: []string{addr}, KeyPrefix: prefix()}).NewSocketCap(2, 0)
	must(t, err)
	defer c.Close()
	for range 2 {
		if _, ok, err := c.Acquire(bg, 1); err != nil || !ok {
			t.Fatalf("admission under the cap: %v %v", ok, err)
		}
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	must(t, rdb.FlushAll(bg).Err())
	must(t, rdb.ScriptFlush(bg).Err())
	must(t, c.RenewNow(bg))
	if _, ok, err := c.Acquire(bg, 1); err != nil || ok {
		t.Fatalf("third socket after the renewal restored two: ok %v, err %v", ok, err)
	}
}
