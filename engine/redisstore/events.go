package redisstore

import (
	"context"
	"encoding/binary"
	"errors"
	"hash/maphash"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tally-dev/tally/engine"
)

// Events travel through Redis pub/sub, never directly from the mutating
// call to local subscribers: every tally replica sees the same stream, so
// a change made through replica A wakes a subscriber connected to B, and
// a replica's own events take the same path (one code path, no
// duplicates). Channels are sharded (SPUBLISH/SSUBSCRIBE on Redis 7, which
// on a cluster spreads them over the shards' slots); each Store subscribes
// to all shards once, at Open, so Subscribe itself is local and instant.
// A broadcast is one message on one channel. Delivery is at most once: a
// reconnecting subscription misses what was published meanwhile, which is
// fine because events carry no state.

const maxUsersPerEvent = 1000

type bus struct {
	s      *Store
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	in     chan string

	mu   sync.Mutex
	subs atomic.Pointer[[]*subscriber] // copy on write

	// live holds the open subscriptions: a blocked read does not watch
	// ctx, so close() closes them to end it at once.
	liveMu sync.Mutex
	live   map[*redis.PubSub]bool
}

type subscriber struct {
	fn     func(engine.Event)
	active atomic.Bool
}

func newBus(s *Store) *bus {
	ctx, cancel := context.WithCancel(context.Background())
	b := &bus{s: s, ctx: ctx, cancel: cancel, in: make(chan string, 4096), live: map[*redis.PubSub]bool{}}
	b.subs.Store(&[]*subscriber{})
	return b
}

// start subscribes to every shard and waits (bounded by ctx) until Redis
// confirmed each subscription, so events published after Open returns are
// not missed.
func (b *bus) start(ctx context.Context) error {
	n := b.s.opts.EventShards
	ready := make(chan error, n)
	for i := range n {
		b.wg.Add(1)
		go b.listen(b.s.k.channel(i), ready)
	}
	b.wg.Add(1)
	go b.dispatch()
	for range n {
		select {
		case err := <-ready:
			if err != nil {
				return err
			}
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Second):
			return errors.New("event subscription not confirmed within 5s")
		}
	}
	return nil
}

func (b *bus) close() {
	b.cancel()
	b.liveMu.Lock()
	for ps := range b.live {
		_ = ps.Close()
	}
	b.liveMu.Unlock()
	b.wg.Wait()
}

// track registers ps while the bus runs; false if it is shutting down.
func (b *bus) track(ps *redis.PubSub, on bool) bool {
	b.liveMu.Lock()
	defer b.liveMu.Unlock()
	if !on {
		delete(b.live, ps)
		return true
	}
	if b.ctx.Err() != nil {
		return false
	}
	b.live[ps] = true
	return true
}

// node returns the client of the node that serves ch: the single node, or
// the master of ch's slot.
func (b *bus) node(ctx context.Context, ch string) (*redis.Client, error) {
	if b.s.cluster == nil {
		return b.s.single, nil
	}
	return b.s.cluster.MasterForKey(ctx, ch)
}

// listen keeps one channel subscribed for the life of the Store,
// re-subscribing after errors (Redis restart, failover). The subscription
// is pinned to the node that was the slot's master when it was made, and
// checked every second against the current slot map: after a failover a
// connection to the old master (or to a node that was demoted while we
// subscribed) would otherwise stay open and silent.
func (b *bus) listen(ch string, ready chan<- error) {
	defer b.wg.Done()
	first := true
	report := func(err error) {
		if first {
			ready <- err
			first = false
		}
	}
	for b.ctx.Err() == nil {
		node, err := b.node(b.ctx, ch)
		if err == nil {
			var ps *redis.PubSub
			if b.s.sharded {
				ps = node.SSubscribe(b.ctx, ch)
			} else {
				ps = node.Subscribe(b.ctx, ch)
			}
			if !b.track(ps, true) {
				_ = ps.Close()
				report(b.ctx.Err())
				return
			}
			_, err = ps.ReceiveTimeout(b.ctx, 2*time.Second) // the confirmation
			report(err)
			if err == nil {
				b.receive(ps, ch, node)
			}
			b.track(ps, false)
			_ = ps.Close()
		} else {
			report(err)
		}
		if b.s.cluster != nil {
			b.s.cluster.ReloadState(b.ctx)
		}
		select {
		case <-b.ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (b *bus) receive(ps *redis.PubSub, ch string, node *redis.Client) {
	idle := 0
	for {
		msg, err := ps.ReceiveTimeout(b.ctx, time.Second)
		if err != nil {
			var ne net.Error
			if !errors.As(err, &ne) || !ne.Timeout() || b.ctx.Err() != nil {
				return
			}
			if cur, err := b.node(b.ctx, ch); err != nil || cur != node {
				return // the slot moved: subscribe where it lives now
			}
			if idle++; idle%5 == 0 && ps.Ping(b.ctx) != nil {
				return
			}
			continue
		}
		idle = 0
		switch m := msg.(type) {
		case *redis.Message:
			select {
			case b.in <- m.Payload:
			case <-b.ctx.Done():
				return
			}
		case *redis.Subscription:
			if m.Count == 0 {
				// Redis dropped the subscription (its slot moved).
				return
			}
		}
	}
}

// dispatch is the delivery goroutine: subscribers run here, one event at
// a time, in arrival order.
func (b *bus) dispatch() {
	defer b.wg.Done()
	for {
		select {
		case <-b.ctx.Done():
			return
		case payload := <-b.in:
			ev, err := decodeEvent(payload)
			if err != nil {
				continue
			}
			for _, s := range *b.subs.Load() {
				if s.active.Load() {
					s.fn(ev)
				}
			}
		}
	}
}

// Subscribe implements engine.Store.
func (s *Store) Subscribe(fn func(engine.Event)) (cancel func()) {
	sub := &subscriber{fn: fn}
	sub.active.Store(true)
	b := s.bus
	b.mu.Lock()
	next := append(append([]*subscriber{}, *b.subs.Load()...), sub)
	b.subs.Store(&next)
	b.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			sub.active.Store(false)
			b.mu.Lock()
			defer b.mu.Unlock()
			cur := *b.subs.Load()
			next := make([]*subscriber, 0, len(cur))
			for _, x := range cur {
				if x != sub {
					next = append(next, x)
				}
			}
			b.subs.Store(&next)
		})
	}
}

var shardSeed = maphash.MakeSeed()

// emitAll emits the events an operation's effects carry, in order.
func (s *Store) emitAll(ctx context.Context, evs []engine.Event) {
	for _, ev := range evs {
		s.emit(ctx, ev)
	}
}

// emit publishes ev after the change it reports is applied. It never fails
// the operation: the change is durable, and events are at most once.
func (s *Store) emit(ctx context.Context, ev engine.Event) {
	users := ev.Users
	for {
		part := ev
		if len(users) > maxUsersPerEvent {
			part.Users, users = users[:maxUsersPerEvent], users[maxUsersPerEvent:]
		} else {
			part.Users, users = users, nil
		}
		s.publish(ctx, part)
		if len(users) == 0 {
			return
		}
	}
}

func (s *Store) publish(ctx context.Context, ev engine.Event) {
	var key uint64
	switch {
	case len(ev.Users) > 0:
		key = uint64(ev.Users[0])
	case ev.Author != 0:
		key = uint64(ev.Author)
	default:
		key = uint64(ev.Message)
	}
	var h maphash.Hash
	h.SetSeed(shardSeed)
	_ = binary.Write(&h, binary.LittleEndian, key)
	ch := s.k.channel(int(h.Sum64() % uint64(s.opts.EventShards)))
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.ReadTimeout)
	defer cancel()
	payload := encodeEvent(ev)
	if s.sharded {
		_ = s.wdb.SPublish(ctx, ch, payload).Err()
	} else {
		_ = s.wdb.Publish(ctx, ch, payload).Err()
	}
}

// Event wire format: [kind][uvarint author][uvarint message][uvarint n]
// [uvarint user]*n.
func encodeEvent(ev engine.Event) string {
	b := []byte{byte(ev.Kind)}
	b = binary.AppendUvarint(b, uint64(ev.Author))
	b = binary.AppendUvarint(b, uint64(ev.Message))
	b = binary.AppendUvarint(b, uint64(len(ev.Users)))
	for _, u := range ev.Users {
		b = binary.AppendUvarint(b, uint64(u))
	}
	return string(b)
}

func decodeEvent(s string) (engine.Event, error) {
	b := []byte(s)
	if len(b) == 0 {
		return engine.Event{}, errCorrupt
	}
	ev := engine.Event{Kind: engine.EventKind(b[0])}
	b = b[1:]
	next := func() (uint64, bool) {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			return 0, false
		}
		b = b[n:]
		return v, true
	}
	a, ok1 := next()
	m, ok2 := next()
	n, ok3 := next()
	if !ok1 || !ok2 || !ok3 || n > uint64(len(b)) {
		return engine.Event{}, errCorrupt
	}
	ev.Author, ev.Message = engine.UserID(a), engine.MessageID(m)
	if n > 0 {
		ev.Users = make([]engine.UserID, n)
		for i := range ev.Users {
			u, ok := next()
			if !ok {
				return engine.Event{}, errCorrupt
			}
			ev.Users[i] = engine.UserID(u)
		}
	}
	return ev, nil
}
