package enginetest

import (
	"sync"
	"testing"
	"time"

	"github.com/tally-dev/tally/engine"
)

// Clock is a fake time source for the suites: backends read it through
// their Options.Now, so cursor expiry, idempotency expiry, red-dot order
// and the ids the server makes follow it rather than the wall clock.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// ClockStart is where every suite's clock starts: noon UTC, so that a day
// boundary (cursor activity is kept per day) is 12 hours away.
var ClockStart = time.Date(2026, 1, 10, 12, 0, 0, 0, time.UTC)

// NewClock returns a clock at ClockStart.
func NewClock() *Clock { return &Clock{t: ClockStart} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// Set moves the clock to t.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

// Config is what a suite asks of a backend it opens.
type Config struct {
	Now       func() time.Time // the backend's clock (Options.Now)
	CursorTTL time.Duration    // Options.CursorTTL; 0 means engine.DefaultCursorTTL
	// Reactions are the deployment's reaction kinds (-reactions; nil:
	// like alone). The suites ask for ScriptKinds.
	Reactions []string
}

// ScriptKinds are the reaction kinds the suites configure: the six of
// API.md's example.
var ScriptKinds = []string{"like", "love", "haha", "wow", "sad", "angry"}

// Backend opens fresh stores for the clocked suites (the rule scripts and
// the metamorphic test).
type Backend struct {
	Name string
	// Open returns a fresh, empty store configured by cfg and arranges its
	// Close with t.Cleanup. restart, when not nil, closes the store and
	// opens the same data again as a new process would (the old store is
	// not used after); it returns the new store.
	Open func(t *testing.T, cfg Config) (s engine.Store, restart func() (engine.Store, error))
}
