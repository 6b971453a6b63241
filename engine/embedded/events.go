package embedded

import (
	"slices"
	"sync"

	"github.com/tally-dev/tally/engine"
)

// subscriber delivers events to one fn on its own goroutine, so a slow fn
// delays only itself and a stuck one loses only its own events.
type subscriber struct {
	fn   func(engine.Event)
	ch   chan engine.Event
	done chan struct{}
	once sync.Once
}

func (s *subscriber) run() {
	for {
		select {
		case <-s.done:
			return
		case ev := <-s.ch:
			// select picks among ready cases at random: check done again
			// so that no event is delivered after cancel returned.
			select {
			case <-s.done:
				return
			default:
			}
			s.fn(ev)
		}
	}
}

func (s *subscriber) close() { s.once.Do(func() { close(s.done) }) }

// Subscribe implements engine.Store. fn runs on a goroutine of its own;
// after cancel returns fn is not called again (though a call already
// running may still be finishing).
func (e *Engine) Subscribe(fn func(engine.Event)) (cancel func()) {
	s := &subscriber{fn: fn, ch: make(chan engine.Event, SubscriberBuffer), done: make(chan struct{})}
	e.subsMu.Lock()
	var list []*subscriber
	if cur := e.subs.Load(); cur != nil {
		list = slices.Clone(*cur)
	}
	list = append(list, s)
	e.subs.Store(&list)
	e.subsMu.Unlock()
	go s.run()
	return func() {
		e.subsMu.Lock()
		if cur := e.subs.Load(); cur != nil {
			list := slices.DeleteFunc(slices.Clone(*cur), func(x *subscriber) bool { return x == s })
			e.subs.Store(&list)
		}
		e.subsMu.Unlock()
		s.close()
	}
}

// publish hands evs to every subscriber without blocking: the subscriber
// list is copy-on-write, so a commit takes no lock here.
func (e *Engine) publish(evs []engine.Event) {
	if len(evs) == 0 {
		return
	}
	subs := e.subs.Load()
	if subs == nil {
		return
	}
	for _, s := range *subs {
		for _, ev := range evs {
			select {
			case s.ch <- ev:
			default: // its buffer is full: dropped for it alone
			}
		}
	}
}
