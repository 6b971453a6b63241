package embedded

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/counters"
	"github.com/tally-dev/tally/engine/snapshot"
	"github.com/tally-dev/tally/engine/snowflake"
	"github.com/tally-dev/tally/engine/tier"
	"github.com/tally-dev/tally/engine/wal"
)

// DefaultSweepInterval is how often idle system cursors are swept.
const DefaultSweepInterval = time.Hour

// SubscriberBuffer is how many events may wait for one subscriber before
// further events to it are dropped.
const SubscriberBuffer = 4096

// Options configure an Engine.
type Options struct {
	// Dir is the data directory: the log's segments (wal-*.log) and the
	// snapshots (snap-*.snap) live directly in it. "" keeps state in
	// memory only (nothing survives Close).
	Dir string
	// Sync is the log's durability mode (wal.SyncAlways by default).
	Sync wal.SyncMode
	// BatchWindow bounds, under wal.SyncBatch, how long a written record
	// waits for its fsync; zero means wal.DefaultBatchWindow.
	BatchWindow time.Duration
	// Now is the clock; nil means time.Now. Tests pass a fake one.
	Now func() time.Time
	// CursorTTL is how long an idle user keeps their system cursor; zero
	// means engine.DefaultCursorTTL.
	CursorTTL time.Duration
	// SweepInterval is how often expired cursors are dropped from memory;
	// zero means DefaultSweepInterval, negative never.
	SweepInterval time.Duration
	// SnapshotInterval is how often a snapshot is taken while the log has
	// records no snapshot covers; zero means DefaultSnapshotInterval,
	// negative never (Snapshot still works).
	SnapshotInterval time.Duration
	// SnapshotLogBytes triggers a snapshot once the log has grown this much
	// since the last one; zero means DefaultSnapshotLogBytes, negative
	// never.
	SnapshotLogBytes int64
	// LogSegmentBytes is the size of the log's segment files, the unit in
	// which a snapshot frees log space; zero means wal.DefaultSegmentBytes.
	LogSegmentBytes int64
	// Tables tunes the time-windowed tables (engine/tier): the post table
	// (each post's author and counts) and the like and favorite sets —
	// the window length, when windows are sealed (OpenAge), and the cold
	// tier (ColdAge; MemoryBudget, which bounds each table's own bytes;
	// ColdCacheBytes, one block cache the tables share). Dir, Prefix and
	// Cache are set by Open: cold files live in Dir/cold. They are derived
	// data — every record is also in the snapshots and the log — so Open
	// clears that directory and the maintenance loop rebuilds the cold
	// tier from the recovered state.
	Tables tier.Options
	// FollowersInMemory keeps the follow graph's reverse direction (who
	// follows each user) in memory. By default, with Dir set, it lives in
	// the cold directory beside the cold windows: a file of packed blocks
	// rebuilt from the followee lists at Open, with a directory and the
	// changes since the file was written in memory, merged into a new
	// file by the maintenance loop (engine/follows' cold.go). Only
	// erasures and checks read it.
	FollowersInMemory bool
	// MaintainInterval is how often windows are sealed, moved to the cold
	// tier and compacted; zero means DefaultMaintainInterval, negative never.
	MaintainInterval time.Duration
	// Node is the snowflake node of the ids this engine makes.
	Node uint64
	// Reactions are the deployment's reaction kinds in display order
	// (-reactions; nil: like alone): counters.ParseKinds' rules. A kind
	// may be added at any start; leaving out one whose reactions are
	// still counted fails Open with a *counters.KindInUseError naming it
	// and its count.
	Reactions []string
	// StoredReactions keeps the data's kinds as they stand, Reactions
	// unused (in id order): for a tool that writes records but serves
	// nobody (check -repair), which must not refuse or change them.
	StoredReactions bool
	// Logger receives operational messages; nil means slog.Default().
	Logger *slog.Logger
	// Metrics, when set, receives the log's batch sizes and fsync
	// durations and each snapshot's duration and size (for /metrics).
	Metrics Metrics
}

// Metrics receives the engine's figures; its methods must be quick and
// never block.
type Metrics interface {
	wal.Observer
	// SnapshotWritten reports a snapshot written: how long it took, how
	// much of that it paused for the writers (see pacer), and the size of
	// its file.
	SnapshotWritten(took, paced time.Duration, bytes int64)
	// SnapshotFailed reports a periodic snapshot that failed (it will be
	// retried; the engine logs the error).
	SnapshotFailed()
}

// Engine is the embedded engine.Store. Safe for concurrent use.
type Engine struct {
	now    func() time.Time
	ttl    int64 // cursor TTL, ns
	logger *slog.Logger

	// display are the reaction kinds in display order (Options.Reactions),
	// kinds their ids, order the id of each in display order: set by
	// Open, read-only after.
	display []string
	kinds   counters.Kinds
	order   [counters.MaxKinds]counters.Kind

	mu        sync.RWMutex
	st        *state
	gen       snowflake.Generator
	lastTime  int64  // time of the last record
	genHigh   uint64 // the highest id the records carry (image.genHigh)
	log       *wal.Log
	lastIndex uint64 // index of the last record appended to log
	buf       []byte // record encoding buffer, reused under mu (the log copies)
	closed    bool
	// tap, when set (tests), sees every record committed, under mu.
	tap func(rec []byte)

	failed atomic.Pointer[error] // why the engine is read-only: a log failure, an unwritable directory

	// Durability beyond the log (durable.go).
	dir       string
	syncFiles bool         // fsync snapshots (not under wal.SyncNone)
	unlock    func() error // releases the data directory's lock
	snapMu    sync.Mutex   // one snapshot at a time
	// maintMu is read-held by each maintenance round (runTier) and held
	// by a snapshot while it takes its cut: no job is pending at a cut.
	maintMu   sync.RWMutex
	metrics   Metrics // nil: none
	snapIndex atomic.Uint64
	snapBase  atomic.Int64 // log size just after the newest snapshot
	snapAt    atomic.Int64 // unix ns the newest snapshot was written; 0: none
	// createSnapshot is snapshot.Create; tests substitute failing files.
	createSnapshot func(dir string, index uint64, sync bool) (*snapshot.File, error)
	// sleep is sleepCtx, for the snapshot's pacer; tests substitute one
	// that sees its pauses.
	sleep func(context.Context, time.Duration)
	// pruneStepBytes is how much of an old snapshot a prune frees between
	// two pacing steps (snapshot.PruneStepBytes when zero); tests shrink
	// it to pause inside a small file's prune.
	pruneStepBytes int64
	ctx            context.Context // cancelled by Close
	cancel         context.CancelFunc

	subsMu sync.Mutex
	subs   atomic.Pointer[[]*subscriber]

	// maintains says windows are maintained (MaintainInterval > 0), so
	// Import may fold the authors' post counts itself.
	maintains bool

	// eraseWake wakes the eraser (eraser.go); erasedCh is closed, and
	// replaced, under mu whenever an erasure ends, for the calls waiting
	// for one; involvedBuf is commit's scratch for the users a record
	// involves.
	eraseWake   chan struct{}
	erasedCh    chan struct{}
	involvedBuf []uint64
	// erasedAt is the log index of the last record that ended an
	// erasure and that no snapshot has pruned the files before (0: none).
	erasedAt atomic.Uint64
	// passMu serialises maintenance passes (the loop's, Snapshot's, the
	// eraser's); each round of a pass still read-holds maintMu.
	passMu sync.Mutex
	// stepGate, when set (tests), is called before each erasure step.
	stepGate atomic.Pointer[func()]

	stop chan struct{}
	wg   sync.WaitGroup
}

// DefaultMaintainInterval is how often the time-windowed tables are
// maintained. A pass plans in O(windows) under the write lock and does
// nothing more when no job is due; what is due between passes waits in
// memory (a delta past its fold point, a window past its age), so passes
// are frequent.
const DefaultMaintainInterval = 10 * time.Second

var _ engine.Store = (*Engine)(nil)
var _ engine.Importer = (*Engine)(nil)

// Open starts an engine. With opts.Dir set it recovers the state kept
// there (the newest snapshot, then the log after it) or starts an empty
// one; a damaged snapshot or log stops Open with an error naming the file
// and offset (see Repair), and a directory it cannot write is opened
// read-only (see the package doc).
func Open(opts Options) (*Engine, error) {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.CursorTTL <= 0 {
		opts.CursorTTL = engine.DefaultCursorTTL
	}
	if opts.SweepInterval == 0 {
		opts.SweepInterval = DefaultSweepInterval
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Node > snowflake.MaxNode {
		return nil, fmt.Errorf("embedded: node %d exceeds %d", opts.Node, snowflake.MaxNode)
	}
	if opts.SnapshotInterval == 0 {
		opts.SnapshotInterval = DefaultSnapshotInterval
	}
	if opts.SnapshotLogBytes == 0 {
		opts.SnapshotLogBytes = DefaultSnapshotLogBytes
	}
	if opts.MaintainInterval == 0 {
		opts.MaintainInterval = DefaultMaintainInterval
	}
	reactions := []string{"like"}
	if len(opts.Reactions) > 0 {
		var err error
		if reactions, err = counters.ParseKinds(strings.Join(opts.Reactions, ",")); err != nil {
			return nil, fmt.Errorf("embedded: -reactions: %w", err)
		}
	}
	opts.Tables.Dir, opts.Tables.Prefix, opts.Tables.Cache = "", "", nil
	if _, err := tier.NewPosts(opts.Tables); err != nil {
		return nil, fmt.Errorf("embedded: %w", err)
	}
	tc := tables{opts: opts.Tables, now: opts.Now}
	e := &Engine{
		now:            opts.Now,
		ttl:            int64(opts.CursorTTL),
		logger:         opts.Logger,
		metrics:        opts.Metrics,
		st:             newState(tc),
		stop:           make(chan struct{}),
		createSnapshot: snapshot.Create,
		sleep:          sleepCtx,
		eraseWake:      make(chan struct{}, 1),
		erasedCh:       make(chan struct{}),
	}
	e.ctx, e.cancel = context.WithCancel(context.Background())
	e.gen.Node, e.gen.Now = opts.Node, opts.Now
	if opts.Dir != "" {
		if err := e.openDir(opts); err != nil {
			e.cancel()
			return nil, err
		}
	}
	if opts.StoredReactions {
		e.mu.RLock()
		kinds := e.st.posts.Kinds()
		e.mu.RUnlock()
		reactions = reactions[:0]
		for _, id := range kinds.IDs() {
			reactions = append(reactions, kinds.Name(id))
		}
	}
	if err := e.setKinds(reactions); err != nil {
		e.Close()
		return nil, err
	}
	if opts.SweepInterval > 0 {
		e.wg.Add(1)
		go e.sweeper(opts.SweepInterval)
	}
	if opts.MaintainInterval > 0 {
		e.maintains = true
		e.wg.Add(1)
		go e.maintainer(opts.MaintainInterval)
	}
	e.wg.Add(1)
	go e.eraser()
	if len(e.st.erasing) > 0 {
		e.wakeEraser() // erasures the log left under way
	}
	if e.log != nil && (opts.SnapshotInterval > 0 || opts.SnapshotLogBytes > 0) {
		e.wg.Add(1)
		go e.snapshotter(opts.SnapshotInterval, opts.SnapshotLogBytes)
	}
	return e, nil
}

// openDir locks the data directory and recovers its state: the newest
// snapshot, then the log after it, without events.
func (e *Engine) openDir(opts Options) error {
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return fmt.Errorf("embedded: %w", err)
	}
	unlock, err := lockDir(opts.Dir)
	if err != nil {
		if cannotWrite(err) {
			return e.openReadOnly(opts, err)
		}
		return err
	}
	tc := tables{opts: opts.Tables, now: opts.Now, followersInMemory: opts.FollowersInMemory}
	tc.opts.Dir = filepath.Join(opts.Dir, "cold")
	tc.opts.Derived = true // cleared below, rebuilt from the snapshot and the log
	tc.opts.Cache = tier.NewCache(coldCacheBytes(opts.Tables.ColdCacheBytes))
	if err := os.RemoveAll(tc.opts.Dir); err != nil { // derived data: rebuilt from the state below
		unlock()
		return fmt.Errorf("embedded: clearing the cold tier: %w", err)
	}
	if err := os.MkdirAll(tc.opts.Dir, 0o755); err != nil {
		unlock()
		return fmt.Errorf("embedded: %w", err)
	}
	var observer wal.Observer
	if opts.Metrics != nil {
		observer = opts.Metrics
	}
	im, l, rec, err := recoverDir(opts.Dir, wal.Options{Sync: opts.Sync, BatchWindow: opts.BatchWindow,
		SegmentBytes: opts.LogSegmentBytes, Logger: opts.Logger, Observer: observer}, tc)
	if err != nil {
		unlock()
		return err
	}
	e.dir, e.unlock, e.log = opts.Dir, unlock, l
	e.syncFiles = opts.Sync != wal.SyncNone
	e.st, e.lastTime, e.lastIndex, e.genHigh = im.st, im.lastTime, im.index, im.genHigh
	if im.genHigh != 0 {
		e.gen.Observe(im.genHigh)
	}
	e.snapIndex.Store(rec.snapIndex)
	e.snapBase.Store(l.Size() - rec.bytes)
	e.erasedAt.Store(im.erasedAt)
	if rec.snapshot != "" {
		if fi, err := os.Stat(rec.snapshot); err == nil {
			e.snapAt.Store(fi.ModTime().UnixNano())
		}
	}
	opts.Logger.Info("embedded: state recovered", "dir", opts.Dir, "snapshot", rec.snapshot, "snapshot_load", rec.loadTook,
		"log_records", rec.records, "log_replay", rec.replayDur, "last_index", im.index)
	return nil
}

func (e *Engine) sweeper(every time.Duration) {
	defer e.wg.Done()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-e.stop:
			return
		case <-t.C:
			if _, err := e.commit(&sweepRec{ttl: e.ttl}); err != nil {
				e.logger.Warn("embedded: cursor sweep failed", "err", err)
			}
		}
	}
}

// Ready implements engine.Store.
func (e *Engine) Ready(ctx context.Context) error {
	if p := e.failed.Load(); p != nil {
		return errWrite
	}
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.closed {
		return errClosed
	}
	return nil
}

// Stats implements engine.Store.
func (e *Engine) Stats() engine.Stats {
	e.mu.RLock()
	defer e.mu.RUnlock()
	st := e.st
	var setBytes int64
	for _, s := range st.sets() {
		setBytes += s.MemoryBytes()
	}
	mem := int(st.posts.MemoryBytes()+setBytes+st.origins.MemoryBytes()+st.unposted.MemoryBytes()) +
		st.badges.MemoryBytes() + st.seens.MemoryBytes() + st.clicks.MemoryBytes() + st.wide.MemoryBytes() + int(st.posted.MemoryBytes()+st.followers.MemoryBytes()) + st.groups.MemoryBytes() + st.members.MemoryBytes() +
		st.msgs.MemoryBytes() + st.idem.MemoryBytes() + cap(st.notifText) + cap(st.msgText) +
		cap(st.notifs)*int(sizeofNotif) + cap(st.idemQ)*int(sizeofIdemExpiry) + cap(st.msgList)*int(sizeofMessage)
	mem += st.follows.MemoryBytes() + st.rcBytes
	for i := range st.groupList {
		g := &st.groupList[i]
		mem += 8*cap(g.byMap) + 8*cap(g.quit)
	}
	return engine.Stats{
		Posts:         int64(st.posts.Len()),
		CountedPosts:  st.counted,
		Users:         st.nusers,
		Groups:        int64(len(st.groupList)),
		Messages:      int64(len(st.msgList)),
		Notifications: int64(len(st.notifs)),
		MemoryBytes:   int64(mem),
		Erasures:      int64(len(st.erasing)),
	}
}

// Close stops the sweeper and event delivery and closes the log, after
// which every record acknowledged so far is on disk.
func (e *Engine) Close() error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	e.mu.Unlock()
	close(e.stop)
	e.cancel()
	e.wg.Wait()
	// A Snapshot or Backup called by the user sees the cancel and stops
	// reading the log before it is closed.
	e.snapMu.Lock()
	defer e.snapMu.Unlock()
	e.subsMu.Lock()
	if subs := e.subs.Load(); subs != nil {
		for _, s := range *subs {
			s.close()
		}
	}
	e.subs.Store(nil)
	e.subsMu.Unlock()
	e.mu.Lock()
	errs := []error{e.st.posts.Close(), e.st.follows.Close()}
	for _, s := range e.st.sets() {
		errs = append(errs, s.Close())
	}
	cerr := errors.Join(errs...)
	e.mu.Unlock()
	if e.log == nil {
		return cerr
	}
	err := e.log.Close()
	if err == nil {
		err = cerr
	}
	if uerr := e.unlock(); err == nil && uerr != nil {
		err = fmt.Errorf("embedded: unlock: %w", uerr)
	}
	return err
}

// maintainer seals, cools and compacts the windows of the time-windowed
// tables. A step is planned under the write lock, run without any lock
// (readers and writers carry on against the frozen inputs), and finished
// under the lock again. It changes how records are kept, never what they
// are, so it is not logged: replay gives the same values whatever was
// sealed when.
func (e *Engine) maintainer(every time.Duration) {
	defer e.wg.Done()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		e.maintain()
		select {
		case <-e.stop:
			return
		case <-t.C:
		}
	}
}

func (e *Engine) maintain() {
	e.passMu.Lock()
	defer e.passMu.Unlock()
	e.runTier("post table", func() tier.Maintainer { return e.st.posts }, true)
	e.runTier("like set", func() tier.Maintainer { return e.st.likes }, true)
	e.runTier("favorite set", func() tier.Maintainer { return e.st.favs }, true)
	e.runTier("deleted posts", func() tier.Maintainer { return e.st.deleted }, true)
	e.runTier("comment ids", func() tier.Maintainer { return e.st.comments }, true)
	e.runTier("deleted comment ids", func() tier.Maintainer { return e.st.uncounted }, true)
	e.runTier("comment writers", func() tier.Maintainer { return e.st.writers }, true)
	e.runTier("authors' post counts", func() tier.Maintainer { return e.st.posted }, true)
	e.runTier("authors' deleted posts", func() tier.Maintainer { return e.st.unposted }, true)
	e.runTier("reposts' originals", func() tier.Maintainer { return e.st.origins }, true)
	e.runTier("follower counts", func() tier.Maintainer { return e.st.followers }, true)
	e.runTier("follow graph's followers", func() tier.Maintainer { return e.st.follows.Maintainer() }, true)
}

// runTier runs a tier's jobs until none is due (or one fails, to be
// retried at the next tick), each run without the lock and finished under
// it, then deletes the cold files the jobs replaced: snapshots hold whole
// images, never cold files' names, so no kept snapshot needs them. A
// round of jobs read-holds maintMu, so that no job is pending when a
// snapshot takes its cut; with wait false, a round that would wait for a
// cut is skipped instead, for a caller that must not wait.
func (e *Engine) runTier(what string, of func() tier.Maintainer, wait bool) {
	for {
		select {
		case <-e.stop:
			return
		default:
		}
		if !e.tierRound(what, of, wait) {
			return
		}
	}
}

// tierRound runs one round of runTier and reports whether jobs ran and
// none failed.
func (e *Engine) tierRound(what string, of func() tier.Maintainer, wait bool) bool {
	if wait {
		e.maintMu.RLock()
	} else if !e.maintMu.TryRLock() {
		return false
	}
	defer e.maintMu.RUnlock()
	e.mu.Lock()
	jobs := of().PlanWork(e.now())
	e.mu.Unlock()
	if len(jobs) == 0 {
		return false
	}
	var failed error
	for _, j := range jobs {
		runErr := j.Run()
		e.mu.Lock()
		err := j.Finish()
		e.mu.Unlock()
		if err = cmp.Or(err, runErr); err != nil {
			e.logger.Error("embedded: "+what+" maintenance failed; will retry", "job", j.What(), "err", err)
			failed = err
		}
	}
	e.mu.Lock()
	err := of().Collect(nil)
	e.mu.Unlock()
	if err != nil {
		e.logger.Warn("embedded: "+what+": deleting replaced cold files", "err", err)
	}
	return failed == nil
}

// scrubbing reports whether windows wait for a rewrite that drops
// records still in their bytes: an erasure's (tier's Scrub) or a deleted
// post's likers (Forget).
func (e *Engine) scrubbing() bool {
	e.mu.RLock()
	defer e.mu.RUnlock()
	n := e.st.posts.Scrubbing()
	for _, s := range e.st.sets() {
		n += s.Scrubbing()
	}
	return n > 0
}
