// Package hub routes engine events to the subscriptions open on this
// server (the resolvers' badge and receipt streams). It sits in web/, not
// in engine/, because it holds connection state and no product rule, and
// works on any engine.Store through Subscribe.
//
// It owns the question "which open subscriptions does this change
// concern?" and answers it without touching users who are not connected: a broadcast wakes the
// connected badge subscribers only, and a post by an author with millions of
// followers wakes only the connected ones, found through an index of each
// connected viewer's followees (built when they subscribe, kept current by
// FollowsChanged events) rather than by enumerating followers.
//
// Wake-ups are level-triggered and coalesced: a subscriber holds a
// one-slot signal channel, so a burst of changes costs one re-read; or
// it is called back (WatchUnreadFunc), with no goroutine waiting on a
// channel, and coalesces itself. Events carry no state; the subscriber
// re-reads what it shows.
package hub

import (
	"context"
	"log/slog"
	"slices"
	"sync"

	"github.com/tally-dev/tally/engine"
)

// Hub fans engine events out to watchers. Safe for concurrent use.
type Hub struct {
	store  engine.Store
	cancel func()

	mu sync.Mutex
	// byUser is a slice per user: most users watch once (a feed is shared
	// by the user's subscriptions), and a map per user would cost more.
	byUser    map[engine.UserID][]*watcher
	byAuthor  map[engine.UserID]map[*watcher]struct{}
	byMessage map[engine.MessageID]map[*watcher]struct{}
	// unread holds every badge watcher, for broadcasts.
	unread map[*watcher]struct{}
	// bySignal finds a watcher from the channel its owner holds
	// (TakeCauses).
	bySignal map[<-chan struct{}]*watcher
}

type watcher struct {
	user      engine.UserID
	followees []engine.UserID // sorted; unread watchers only
	signal    chan struct{}
	// call, instead of signal, is called back with each event's cause.
	call func(engine.Cause)
	// causes are the traced writes (engine.Event.Cause) of the events
	// that woke a signal watcher since its owner last took them: at most
	// maxCauses, the latest. Guarded by Hub.mu.
	causes []engine.Cause
	// refreshing is set while a goroutine re-reads followees; stale asks it
	// to read once more because another follow change came in meanwhile.
	// Both are guarded by Hub.mu.
	refreshing, stale bool
}

// maxCauses bounds the causes a watcher keeps between two pushes: a push
// links to a handful of writes, not to every one of a burst.
const maxCauses = 8

// wakeFor wakes w for an event caused by c.
func (w *watcher) wakeFor(c engine.Cause) {
	if w.call != nil {
		w.call(c)
		return
	}
	if c != (engine.Cause{}) {
		if len(w.causes) == maxCauses {
			w.causes = append(w.causes[:0], w.causes[1:]...)
		}
		w.causes = append(w.causes, c)
	}
	w.wake()
}

func (w *watcher) wake() {
	select {
	case w.signal <- struct{}{}:
	default: // a wake-up is already pending
	}
}

// New subscribes to s's events. Close releases the subscription.
func New(s engine.Store) *Hub {
	h := &Hub{
		store:     s,
		byUser:    map[engine.UserID][]*watcher{},
		byAuthor:  map[engine.UserID]map[*watcher]struct{}{},
		byMessage: map[engine.MessageID]map[*watcher]struct{}{},
		unread:    map[*watcher]struct{}{},
		bySignal:  map[<-chan struct{}]*watcher{},
	}
	h.cancel = s.Subscribe(h.dispatch)
	return h
}

// Close stops receiving events.
func (h *Hub) Close() { h.cancel() }

// WatchUnread returns a channel that receives a value whenever viewer's
// badges may have changed, until ctx ends.
func (h *Hub) WatchUnread(ctx context.Context, viewer engine.UserID) (<-chan struct{}, error) {
	w := &watcher{user: viewer, signal: make(chan struct{}, 1)}
	if err := h.watchUnread(ctx, w); err != nil {
		return nil, err
	}
	context.AfterFunc(ctx, func() { h.unwatchUnread(w) })
	return w.signal, nil
}

// WatchUnreadFunc calls call whenever viewer's badges may have changed,
// with the traced write that changed them (engine.Event.Cause; zero for
// none), until stop is called. call runs on the store's event delivery
// goroutine with the hub locked: it must return at once (hand the
// re-read to another goroutine) and must not call the hub. ctx bounds
// the read of viewer's followees only.
func (h *Hub) WatchUnreadFunc(ctx context.Context, viewer engine.UserID, call func(engine.Cause)) (stop func(), err error) {
	w := &watcher{user: viewer, call: call}
	if err := h.watchUnread(ctx, w); err != nil {
		return nil, err
	}
	var once sync.Once
	return func() { once.Do(func() { h.unwatchUnread(w) }) }, nil
}

func (h *Hub) watchUnread(ctx context.Context, w *watcher) error {
	followees, err := h.store.Followees(ctx, w.user)
	if err != nil {
		return err
	}
	w.followees = sortedCopy(followees)
	h.mu.Lock()
	h.byUser[w.user] = append(h.byUser[w.user], w)
	for _, f := range w.followees {
		add(h.byAuthor, f, w)
	}
	h.unread[w] = struct{}{}
	if w.signal != nil {
		h.bySignal[w.signal] = w
	}
	h.mu.Unlock()
	return nil
}

func (h *Hub) unwatchUnread(w *watcher) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if ws := slices.DeleteFunc(h.byUser[w.user], func(x *watcher) bool { return x == w }); len(ws) > 0 {
		h.byUser[w.user] = ws
	} else {
		delete(h.byUser, w.user)
	}
	for _, f := range w.followees {
		remove(h.byAuthor, f, w)
	}
	delete(h.unread, w)
	if w.signal != nil {
		delete(h.bySignal, w.signal)
	}
}

// WatchReceipts returns a channel that receives a value whenever message's
// receipts may have changed, until ctx ends.
func (h *Hub) WatchReceipts(ctx context.Context, message engine.MessageID) <-chan struct{} {
	w := &watcher{signal: make(chan struct{}, 1)}
	h.mu.Lock()
	add(h.byMessage, message, w)
	h.bySignal[w.signal] = w
	h.mu.Unlock()
	context.AfterFunc(ctx, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		remove(h.byMessage, message, w)
		delete(h.bySignal, w.signal)
	})
	return w.signal
}

// Watchers reports how many subscriptions are open, for /metrics.
func (h *Hub) Watchers() (unread, receipts int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, ws := range h.byMessage {
		receipts += len(ws)
	}
	return len(h.unread), receipts
}

// dispatch runs on the store's delivery goroutine; it must not block.
func (h *Hub) dispatch(e engine.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch e.Kind {
	case engine.UnreadChanged:
		for _, u := range e.Users {
			for _, w := range h.byUser[u] {
				w.wakeFor(e.Cause)
			}
		}
	case engine.AuthorPosted:
		wakeAll(h.byAuthor[e.Author], e.Cause)
	case engine.Broadcast:
		wakeAll(h.unread, e.Cause)
	case engine.ReceiptsChanged:
		wakeAll(h.byMessage[e.Message], e.Cause)
	case engine.FollowsChanged:
		for _, u := range e.Users {
			for _, w := range h.byUser[u] {
				h.refollow(w)
				w.wakeFor(e.Cause)
			}
		}
	default:
		slog.Debug("hub: unknown event", "kind", e.Kind)
	}
}

// refollow re-indexes w after its user followed or unfollowed someone.
// The store is asked off the delivery goroutine, by one goroutine per
// watcher at a time; a change that arrives while it asks makes it ask
// again, so the index ends on the store's latest answer whatever order
// the answers come back in. Until then w stays indexed as it was, which
// at worst costs a spurious wake-up or a push that arrives with the next.
// Called with h.mu held.
func (h *Hub) refollow(w *watcher) {
	if w.refreshing {
		w.stale = true
		return
	}
	w.refreshing = true
	go func() {
		for {
			followees, err := h.store.Followees(context.Background(), w.user)
			h.mu.Lock()
			if _, live := h.unread[w]; !live || err != nil {
				w.refreshing, w.stale = false, false
				h.mu.Unlock()
				return
			}
			h.reindex(w, sortedCopy(followees))
			if !w.stale {
				w.refreshing = false
				h.mu.Unlock()
				return
			}
			w.stale = false
			h.mu.Unlock()
		}
	}()
}

// reindex replaces w's followees with next (sorted) in the author index.
// Called with h.mu held.
func (h *Hub) reindex(w *watcher, next []engine.UserID) {
	for _, f := range w.followees {
		if _, found := slices.BinarySearch(next, f); !found {
			remove(h.byAuthor, f, w)
		}
	}
	for _, f := range next {
		if _, found := slices.BinarySearch(w.followees, f); !found {
			add(h.byAuthor, f, w)
		}
	}
	w.followees = next
}

func wakeAll(ws map[*watcher]struct{}, c engine.Cause) {
	for w := range ws {
		w.wakeFor(c)
	}
}

// TakeCauses returns, and forgets, the traced writes that caused the
// events signal was woken for since the last call (the latest few; none
// for writes not traced, or made through a backend whose events do not
// carry them). signal is a channel WatchUnread or WatchReceipts returned.
func (h *Hub) TakeCauses(signal <-chan struct{}) []engine.Cause {
	h.mu.Lock()
	defer h.mu.Unlock()
	w := h.bySignal[signal]
	if w == nil || len(w.causes) == 0 {
		return nil
	}
	out := w.causes
	w.causes = nil
	return out
}

func add[K comparable](m map[K]map[*watcher]struct{}, k K, w *watcher) {
	set := m[k]
	if set == nil {
		set = map[*watcher]struct{}{}
		m[k] = set
	}
	set[w] = struct{}{}
}

func remove[K comparable](m map[K]map[*watcher]struct{}, k K, w *watcher) {
	if set := m[k]; set != nil {
		delete(set, w)
		if len(set) == 0 {
			delete(m, k)
		}
	}
}

func sortedCopy(ids []engine.UserID) []engine.UserID {
	out := slices.Clone(ids)
	slices.Sort(out)
	return slices.Compact(out)
}
