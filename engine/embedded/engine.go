// Package embedded is Tally's default, in-process engine: every rule of
// engine.Store over packed, pointer-free tables, made durable by an
// append-only log.
//
// It owns the engine's state and its log records. It is built as a
// deterministic state machine: a mutation is validated against the state,
// turned into one op record carrying every non-deterministic input (the
// time, generated ids), appended to the log and applied, all under one
// lock; replaying the records in log order rebuilds the same state. A like
// is one record, and its de-duplication and the author's badge bump are
// both consequences of applying it, so a replay can neither lose one nor
// apply it twice. Validation failures, repeats that change nothing and
// idempotent retries are not logged.
//
// # Commit path
//
//	lock → idempotency lookup → prepare (validate; decide ids) → time →
//	encode → wal.AppendAsync (log order = apply order) → apply → unlock →
//	wal.Wait (group commit: concurrent commits share one fsync) → events
//
// A mutation returns only after its record is as durable as Options.Sync
// promises. Anything that returns nil without logging (a repeated like, a
// retry) first waits until everything logged before it is durable, so a
// nil never vouches for state that could still vanish. If the log fails
// (disk full, read-only), that mutation and every later one return an
// error wrapping engine.ErrUnavailable and Ready reports it; reads keep
// working. The failed record was already applied in memory, so readers may
// see it until the restart, which drops it: it was never acknowledged.
//
// # Snapshots
//
// A snapshot (package snapshot's file format; the sections are described
// in stateio.go) holds the whole state at one log index: every table,
// list and counter, the idempotency keys and their expiry queue, the like
// and favorite sets, the time of the last record and the id generator's
// high-water mark. It is taken in the background, by SnapshotInterval or
// SnapshotLogBytes or on demand (Snapshot), without stopping readers or
// writers even for a copy of the state: the snapshotter ends the log's
// active segment (wal.Rotate; the state lock is not taken, the log's
// flusher waits for the new segment's few fsyncs), so the snapshot covers
// exactly the records of the sealed segments, then rebuilds the state at
// that index beside the live one, from the newest snapshot plus the log
// records after it — the same replay recovery does, which the determinism
// of apply makes exact — and writes it out. A capture of the live tables would pause writers for a memcpy of
// every table (0.1–0.3 s per GiB measured on the CI machine; seconds at
// 100M posts) and the tables are not copy-on-write; the rebuild costs
// instead one core (it yields it every few thousand items, see pacer) and
// a second copy of the state in memory while it runs, and a snapshot never
// contains an effect whose record was not durable.
//
// After a snapshot, all but the newest two snapshots are deleted and the
// log is truncated before the older one's index, not the newer one's: if
// the newest snapshot is ever found damaged, the older one plus the log
// still hold every record, and the snapshotter (or Repair, offline)
// rebuilds from them, losing nothing. Disk use is therefore about two
// snapshots plus up to twice SnapshotLogBytes of log.
//
// # Recovery
//
// Open loads the newest snapshot, verifying every checksum, then replays
// the log from the record after its index. A snapshot that does not
// verify, a log with damage before its last record, or a log that does not
// continue the snapshot stops Open with an error naming the file and
// offset; Open never falls back to an older snapshot by itself and never
// loads part of a file. Repair is the documented way out; it says exactly
// what it changes and loses. A torn final log record (a crash mid-write)
// is not damage: it was never acknowledged, and the log drops it with a
// warning.
//
// # Backup and restore
//
// A backup is one snapshot file holding every mutation acknowledged before
// it started. (*Engine).Backup writes one from a running engine (an admin
// endpoint); BackupDir and BackupFile write one from a data directory,
// whether or not a server has it open (`tally backup`), without writing
// to it. Restore verifies a backup completely and installs it as the only
// file of an empty data directory (`tally restore`); the log then starts
// after the backup's index.
//
// # Disk full, read-only
//
// A failed log write or fsync (ENOSPC, EROFS, EIO) makes the engine
// read-only until restart: that mutation and every later one return an
// error wrapping engine.ErrUnavailable whose message says the store cannot
// write, Ready reports it, reads keep working. A snapshot that fails to
// write (disk full) is deleted and retried later with backoff; the log is
// kept, so it costs disk, never data. A data directory that cannot be
// written at all when Open runs (read-only mount, permissions) is opened
// read-only: the state is recovered (the log through a temporary copy) and
// served, and every mutation fails as above.
//
// # Time
//
// Each record's time is the engine clock in Unix nanoseconds, forced to
// increase by at least 1 ns per record so that "a push after a click"
// stays true within one clock tick. Idempotency keys expire by record time
// (every apply forgets keys older than engine.IdempotencyTTL), so replay
// forgets exactly what the live engine had forgotten.
//
// # System cursors
//
// A user's cursor counts while they were active within Options.CursorTTL
// (activity kept per day). Expiry is decided on read: a cursor past its
// TTL reads as absent (0 system unread) and the read records a touch op
// that restarts it at the newest notification. Separately, a periodic
// sweep op (Options.SweepInterval) drops expired cursors from memory; it
// changes no answer, only memory. The sweep walks every badge record under
// the write lock: about 10 ns a user, so it runs rarely.
//
// # Events
//
// Each subscriber has its own goroutine and a buffered channel of
// SubscriberBuffer events. Commits hand events over without blocking: when
// a subscriber's buffer is full (its fn is stuck) the event is dropped for
// that subscriber only and counted in DroppedEvents. Events are published
// after the mutation is durable, never during replay.
//
// # Concurrency
//
// One sync.RWMutex guards the state: reads (Counts, Liked, Unread, ...)
// share it and never wait for each other; mutations hold it exclusively
// for validation and apply only (microseconds), never across the fsync.
//
// A hot post therefore serialises nothing that every other write does not
// share: BenchmarkDurableWrites measures likes and views aimed at one post
// at the same rate as spread over 1000 (hot/uniform 0.9–1.2, fsync=always
// and none, 1 and 64 clients). Increments are not coalesced: under
// fsync=always the engine is fsync-bound at low CPU, every caller must
// wait for its own record's fsync anyway and a batch already carries one
// record per waiting caller, so merging records would not add throughput;
// a like cannot merge at all (its de-dup is per user).
package embedded

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/likeset"
	"github.com/tally-dev/tally/engine/postcounts"
	"github.com/tally-dev/tally/engine/snapshot"
	"github.com/tally-dev/tally/engine/snowflake"
	"github.com/tally-dev/tally/engine/wal"
)

// MaxImportBatch is the most rows one Import call takes (one log record).
const MaxImportBatch = 10000

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
	// Counts tunes the time-partitioned post-count store (engine/postcounts):
	// the window size, when windows are sealed, and the cold tier (ColdAge,
	// MemoryBudget, ColdCacheBytes). Its Dir is set by Open: cold files live
	// in Dir/cold. They are derived data — every count is also in the
	// snapshots and the log — so Open clears that directory and the tier is
	// rebuilt from the recovered state by the maintenance loop.
	Counts postcounts.Options
	// MaintainInterval is how often windows are sealed, moved to the cold
	// tier and compacted; zero means DefaultMaintainInterval, negative never.
	MaintainInterval time.Duration
	// Node is the snowflake node of the ids this engine makes.
	Node uint64
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
	// SnapshotWritten reports a snapshot written: how long it took and
	// the size of its file.
	SnapshotWritten(took time.Duration, bytes int64)
}

// Engine is the embedded engine.Store. Safe for concurrent use.
type Engine struct {
	now    func() time.Time
	ttl    int64 // cursor TTL, ns
	logger *slog.Logger

	mu        sync.RWMutex
	st        *state
	gen       snowflake.Generator
	lastTime  int64 // time of the last record
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
	snapMu    sync.Mutex   // one snapshot or backup rebuild at a time
	metrics   Metrics      // nil: none
	snapIndex atomic.Uint64
	snapBase  atomic.Int64 // log size just after the newest snapshot
	// createSnapshot is snapshot.Create; tests substitute failing files.
	createSnapshot func(dir string, index uint64, sync bool) (*snapshot.File, error)
	ctx            context.Context // cancelled by Close
	cancel         context.CancelFunc

	subsMu  sync.Mutex
	subs    atomic.Pointer[[]*subscriber]
	dropped atomic.Uint64

	// shadowCounts are the post-count options of the states a snapshot is
	// rebuilt in: in memory only, never touching the live cold files.
	shadowCounts postcounts.Options

	stop chan struct{}
	wg   sync.WaitGroup
}

// DefaultMaintainInterval is how often the post-count store is maintained.
const DefaultMaintainInterval = time.Minute

// memCounts is co without the cold tier: for states that are rebuilt to be
// written out (snapshots, backups) or that cannot write (read-only).
func memCounts(co postcounts.Options) postcounts.Options {
	co.Dir, co.ColdAge, co.MemoryBudget = "", 0, 0
	return co
}

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
	opts.Counts.Dir = ""
	if opts.Counts.Now == nil {
		opts.Counts.Now = opts.Now
	}
	if _, err := postcounts.New(opts.Counts); err != nil {
		return nil, fmt.Errorf("embedded: %w", err)
	}
	e := &Engine{
		now:            opts.Now,
		ttl:            int64(opts.CursorTTL),
		logger:         opts.Logger,
		metrics:        opts.Metrics,
		st:             newState(opts.Counts),
		shadowCounts:   memCounts(opts.Counts),
		stop:           make(chan struct{}),
		createSnapshot: snapshot.Create,
	}
	e.ctx, e.cancel = context.WithCancel(context.Background())
	e.gen.Node, e.gen.Now = opts.Node, opts.Now
	if opts.Dir != "" {
		if err := e.openDir(opts); err != nil {
			e.cancel()
			return nil, err
		}
	}
	if opts.SweepInterval > 0 {
		e.wg.Add(1)
		go e.sweeper(opts.SweepInterval)
	}
	if opts.MaintainInterval > 0 {
		e.wg.Add(1)
		go e.maintainer(opts.MaintainInterval)
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
	co := opts.Counts
	co.Dir = filepath.Join(opts.Dir, "cold")
	if err := os.RemoveAll(co.Dir); err != nil { // derived data: rebuilt from the state below
		unlock()
		return fmt.Errorf("embedded: clearing the cold tier: %w", err)
	}
	if err := os.MkdirAll(co.Dir, 0o755); err != nil {
		unlock()
		return fmt.Errorf("embedded: %w", err)
	}
	var observer wal.Observer
	if opts.Metrics != nil {
		observer = opts.Metrics
	}
	im, l, rec, err := recoverDir(opts.Dir, wal.Options{Sync: opts.Sync, BatchWindow: opts.BatchWindow,
		SegmentBytes: opts.LogSegmentBytes, Logger: opts.Logger, Observer: observer}, co)
	if err != nil {
		unlock()
		return err
	}
	e.dir, e.unlock, e.log = opts.Dir, unlock, l
	e.syncFiles = opts.Sync != wal.SyncNone
	e.st, e.lastTime, e.lastIndex = im.st, im.lastTime, im.index
	if im.genHigh != 0 {
		e.gen.Observe(im.genHigh)
	}
	e.snapIndex.Store(rec.snapIndex)
	e.snapBase.Store(l.Size() - rec.bytes)
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
			if _, err := e.commit(&op{kind: opSweepCursors, a: uint64(e.ttl)}); err != nil {
				e.logger.Warn("embedded: cursor sweep failed", "err", err)
			}
		}
	}
}

// errWrite is what clients see when the log cannot write; the cause (with
// file names) goes to the operator's log only.
var errWrite = fmt.Errorf("%w: the store cannot write to disk", engine.ErrUnavailable)

var errClosed = fmt.Errorf("%w: the store is closed", engine.ErrUnavailable)

// fail makes the engine read-only after a log failure.
func (e *Engine) fail(err error) error {
	if e.failed.CompareAndSwap(nil, &err) {
		e.logger.Error("embedded: the store cannot write; mutations are refused until restart", "err", err)
	}
	return errWrite
}

// waitDurable waits until record index (0: none) is durable.
func (e *Engine) waitDurable(index uint64) error {
	if e.log == nil || index == 0 {
		return nil
	}
	if err := e.log.Wait(index); err != nil {
		return e.fail(err)
	}
	return nil
}

// commit runs o through the write path (see the package doc) and returns
// its result: the id it made or, for an idempotent retry, the id the first
// attempt made.
func (e *Engine) commit(o *op) (uint64, error) {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return 0, errClosed
	}
	if e.failed.Load() != nil {
		e.mu.Unlock()
		return 0, errWrite
	}
	now := e.now().UnixNano()
	res, done, err := e.prepare(o, now)
	if err != nil || done {
		seen := e.lastIndex
		e.mu.Unlock()
		if err != nil {
			return 0, err
		}
		return res, e.waitDurable(seen)
	}
	o.time = max(now, e.lastTime+1)
	var index uint64
	if e.log != nil || e.tap != nil {
		e.buf = appendOp(e.buf[:0], o)
		if e.log != nil {
			if index, err = e.log.AppendAsync(e.buf); err != nil {
				e.mu.Unlock()
				return 0, e.fail(err)
			}
			e.lastIndex = index
		}
		if e.tap != nil {
			e.tap(e.buf)
		}
	}
	e.lastTime = o.time
	var evs []engine.Event
	e.st.apply(o, &evs)
	if cerr := e.st.fault(); cerr != nil {
		// A write to a post in an unreadable cold block was not applied in
		// memory. Its record is in the log, and a restart rebuilds the cold
		// tier from the snapshot and the log, so nothing is lost; until
		// then take no more writes rather than let counts drift.
		e.fail(fmt.Errorf("cold tier: %w", cerr))
	}
	e.mu.Unlock()
	if err := e.waitDurable(index); err != nil {
		return 0, err
	}
	e.publish(evs)
	return res, nil
}

// newID returns a fresh snowflake id that taken does not know. Client
// supplied post ids share the id space, so a generated one can collide.
func (e *Engine) newID(taken func(uint64) bool) uint64 {
	for {
		if id := e.gen.Next(); !taken(id) {
			return id
		}
	}
}

// prepare validates o against the state and completes it (generated ids,
// lists reduced to what will change). done means o changes nothing and
// needs no record; res is then the answer to return.
func (e *Engine) prepare(o *op, now int64) (res uint64, done bool, err error) {
	st := e.st
	if o.idem != (idemKey{}) {
		v, ok := st.idemLookup(o.idem, now)
		if !ok && o.legacyIdem != (idemKey{}) {
			v, ok = st.idemLookup(o.legacyIdem, now)
		}
		if ok {
			if err := engine.CheckIdemReuse(v.fp, o.fp); err != nil {
				return 0, false, err
			}
			return v.result, true, nil
		}
	}
	// A registry block that cannot be read (a damaged cold file) fails
	// the operation rather than let it take the post for absent.
	var readErr error
	exists := func(p uint64) bool {
		_, ok, err := st.posts.Get(p)
		if err != nil && readErr == nil {
			readErr = err
		}
		return ok
	}
	defer func() {
		if readErr != nil {
			res, done, err = 0, false, e.unreadable("post registry", readErr)
		}
	}()
	switch o.kind {
	case opCreatePost:
		err = e.prepareCreatePost(o, exists)
	case opLike, opUnlike, opFavorite, opUnfavorite:
		done, err = e.prepareLike(o, exists)
	case opComment:
		err = prepareComment(o, exists)
	case opRepost:
		err = e.prepareRepost(o, exists)
	case opViews:
		done = prepareViews(o, exists)
	case opFollow, opUnfollow:
		done = e.prepareFollow(o)
	case opTouch:
		done = e.prepareTouch(o, now)
	case opPublish:
		e.preparePublish(o)
	case opCreateGroup:
		e.prepareCreateGroup(o)
	case opAddMembers:
		done, err = e.prepareAddMembers(o)
	case opLeaveGroup:
		done, err = e.prepareLeaveGroup(o)
	case opSendMessage:
		err = e.prepareSendMessage(o)
	case opMarkMessagesRead:
		done, err = e.prepareMarkMessagesRead(o)
	}
	if err != nil || done {
		return 0, done, err
	}
	return opResult(o), false, nil
}

var errNotMember = fmt.Errorf("%w: not a member of the group", engine.ErrForbidden)

// errSenderLeft: receipts are for a sender who is still a member.
var errSenderLeft = fmt.Errorf("%w: only the sender sees read receipts, while a member of the group", engine.ErrForbidden)

func errPostNotFound(id uint64) error {
	return fmt.Errorf("%w: post %d", engine.ErrNotFound, id)
}

func errGroupNotFound(id uint64) error {
	return fmt.Errorf("%w: group %d", engine.ErrNotFound, id)
}

// memberGroup returns group id if viewer is a current member of it.
func (e *Engine) memberGroup(id, viewer uint64) (*group, error) {
	g, ok := e.st.group(id)
	if !ok {
		return nil, errGroupNotFound(id)
	}
	if _, cur := e.st.memberOf(g, viewer); !cur {
		return nil, errNotMember
	}
	return g, nil
}

// makeIdemKey hashes an idempotency key with the viewer: a key is scoped
// to one viewer, and bound (by the fingerprint kept with it) to the kind
// and arguments of its first use, so reusing it for anything else is
// refused rather than answered with another call's result.
func makeIdemKey(viewer uint64, key string) idemKey { return hashIdemKey(0, viewer, key) }

// legacyIdemKey is the key as versions before fingerprints hashed it,
// scoped by kind too; kinds start at 1, so it never equals a makeIdemKey.
func legacyIdemKey(kind opKind, viewer uint64, key string) idemKey {
	return hashIdemKey(byte(kind), viewer, key)
}

func hashIdemKey(kind byte, viewer uint64, key string) idemKey {
	if key == "" {
		return idemKey{}
	}
	h := fnv.New128a()
	var b [9]byte
	b[0] = kind
	for i := range 8 {
		b[1+i] = byte(viewer >> (8 * i))
	}
	h.Write(b[:])
	h.Write([]byte(key))
	var sum [16]byte
	h.Sum(sum[:0])
	k := idemKey{}
	for i := range 8 {
		k[0] |= uint64(sum[i]) << (8 * i)
		k[1] |= uint64(sum[8+i]) << (8 * i)
	}
	if k == (idemKey{}) {
		k[0] = 1 // zero means "no key"
	}
	return k
}

// withIdem sets o's idempotency fields for a call carrying key.
func (o *op) withIdem(viewer uint64, key string, kind engine.IdemOp, args engine.IdemArgs) *op {
	if key == "" {
		return o
	}
	o.idem = makeIdemKey(viewer, key)
	o.legacyIdem = legacyIdemKey(o.kind, viewer, key)
	o.fp = engine.IdemFingerprint(kind, args)
	return o
}

func nsTime(ns int64) time.Time { return time.Unix(0, ns).UTC() }

// ids converts a list of ids to the record's []uint64.
func ids[T ~uint64](in []T) []uint64 {
	out := make([]uint64, len(in))
	for i, v := range in {
		out[i] = uint64(v)
	}
	return out
}

func users(in []uint64) []engine.UserID {
	out := make([]engine.UserID, len(in))
	for i, v := range in {
		out[i] = engine.UserID(v)
	}
	return out
}

// checkMutation runs the checks every mutation by a viewer shares.
func checkMutation(ctx context.Context, viewer engine.UserID, idemKey string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := engine.CheckViewer(viewer); err != nil {
		return err
	}
	return engine.CheckIdemKey(idemKey)
}

// CreatePost implements engine.Store.
func (e *Engine) CreatePost(ctx context.Context, viewer engine.UserID, id engine.PostID, idemKey string) (engine.PostID, error) {
	if err := checkMutation(ctx, viewer, idemKey); err != nil {
		return 0, err
	}
	if id != 0 {
		if err := engine.CheckPostID(id, e.now()); err != nil {
			return 0, err
		}
	}
	o := &op{kind: opCreatePost, viewer: uint64(viewer), a: uint64(id)}
	res, err := e.commit(o.withIdem(uint64(viewer), idemKey, engine.IdemCreatePost, engine.IdemArgs{Post: id}))
	return engine.PostID(res), err
}

// Posts implements engine.Store.
func (e *Engine) Posts(ctx context.Context, posts []engine.PostID) ([]engine.PostInfo, error) {
	if err := readCheck(ctx, posts); err != nil {
		return nil, err
	}
	out := make([]engine.PostInfo, len(posts))
	authors := make([]uint64, len(posts))
	found := make([]bool, len(posts))
	e.mu.RLock()
	err := e.st.posts.GetMany(ids(posts), authors, found)
	e.mu.RUnlock()
	if err != nil {
		return nil, e.unreadable("post registry", err)
	}
	for i := range out {
		out[i] = engine.PostInfo{Exists: found[i], Author: engine.UserID(authors[i])}
	}
	return out, nil
}

// unreadable reports a cold block that did not verify: say so rather than
// show zeros. The cause names files, so it goes to the log, not to the
// client.
func (e *Engine) unreadable(what string, err error) error {
	e.logger.Error("embedded: "+what+" cannot be read; restart to rebuild the cold tier", "err", err)
	return fmt.Errorf("%w: %s cannot be read", engine.ErrUnavailable, what)
}

func readCheck[T ~uint64](ctx context.Context, ids []T) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return engine.CheckIDs(ids)
}

// Counts implements engine.Store.
func (e *Engine) Counts(ctx context.Context, posts []engine.PostID) ([]engine.Counts, error) {
	if err := readCheck(ctx, posts); err != nil {
		return nil, err
	}
	out := make([]engine.Counts, len(posts))
	raw := ids(posts)
	e.mu.RLock()
	e.st.counts.GetMany(raw, out)
	err := e.st.counts.Err()
	e.mu.RUnlock()
	if err != nil {
		return nil, e.unreadable("post counts", err)
	}
	return out, nil
}

// Liked implements engine.Store.
func (e *Engine) Liked(ctx context.Context, viewer engine.UserID, ids []engine.PostID) ([]bool, error) {
	return e.inSet(ctx, false, viewer, ids)
}

// Favorited implements engine.Store.
func (e *Engine) Favorited(ctx context.Context, viewer engine.UserID, ids []engine.PostID) ([]bool, error) {
	return e.inSet(ctx, true, viewer, ids)
}

func (e *Engine) inSet(ctx context.Context, favs bool, viewer engine.UserID, posts []engine.PostID) ([]bool, error) {
	if err := readCheck(ctx, posts); err != nil {
		return nil, err
	}
	out := make([]bool, len(posts))
	e.mu.RLock()
	set := e.st.likes
	if favs {
		set = e.st.favs
	}
	set.HasMany(uint64(viewer), ids(posts), out)
	e.mu.RUnlock()
	return out, nil
}

func (e *Engine) likeOp(ctx context.Context, kind opKind, viewer engine.UserID, post engine.PostID) error {
	if err := checkMutation(ctx, viewer, ""); err != nil {
		return err
	}
	_, err := e.commit(&op{kind: kind, viewer: uint64(viewer), a: uint64(post)})
	return err
}

// Like implements engine.Store.
func (e *Engine) Like(ctx context.Context, viewer engine.UserID, post engine.PostID) error {
	return e.likeOp(ctx, opLike, viewer, post)
}

// Unlike implements engine.Store.
func (e *Engine) Unlike(ctx context.Context, viewer engine.UserID, post engine.PostID) error {
	return e.likeOp(ctx, opUnlike, viewer, post)
}

// Favorite implements engine.Store.
func (e *Engine) Favorite(ctx context.Context, viewer engine.UserID, post engine.PostID) error {
	return e.likeOp(ctx, opFavorite, viewer, post)
}

// Unfavorite implements engine.Store.
func (e *Engine) Unfavorite(ctx context.Context, viewer engine.UserID, post engine.PostID) error {
	return e.likeOp(ctx, opUnfavorite, viewer, post)
}

// Comment implements engine.Store.
func (e *Engine) Comment(ctx context.Context, viewer engine.UserID, post engine.PostID, mentions []engine.UserID, idemKey string) error {
	_, err := e.postWithMentions(ctx, opComment, viewer, post, mentions, idemKey)
	return err
}

// Repost implements engine.Store.
func (e *Engine) Repost(ctx context.Context, viewer engine.UserID, post engine.PostID, mentions []engine.UserID, idemKey string) (engine.PostID, error) {
	id, err := e.postWithMentions(ctx, opRepost, viewer, post, mentions, idemKey)
	return engine.PostID(id), err
}

func (e *Engine) postWithMentions(ctx context.Context, kind opKind, viewer engine.UserID, post engine.PostID, mentions []engine.UserID, idemKey string) (uint64, error) {
	if err := checkMutation(ctx, viewer, idemKey); err != nil {
		return 0, err
	}
	m, err := engine.NormalizeMentions(viewer, mentions)
	if err != nil {
		return 0, err
	}
	ik := engine.IdemComment
	if kind == opRepost {
		ik = engine.IdemRepost
	}
	o := &op{kind: kind, viewer: uint64(viewer), a: uint64(post), list: ids(m)}
	return e.commit(o.withIdem(uint64(viewer), idemKey, ik, engine.IdemArgs{Post: post, Mentions: m}))
}

// RecordViews implements engine.Store.
func (e *Engine) RecordViews(ctx context.Context, posts []engine.PostID) error {
	if err := readCheck(ctx, posts); err != nil {
		return err
	}
	if len(posts) == 0 {
		return nil
	}
	_, err := e.commit(&op{kind: opViews, list: ids(posts)})
	return err
}

// UserCounts implements engine.Store.
func (e *Engine) UserCounts(ctx context.Context, us []engine.UserID) ([]engine.UserCounts, error) {
	if err := readCheck(ctx, us); err != nil {
		return nil, err
	}
	out := make([]engine.UserCounts, len(us))
	e.mu.RLock()
	for i, u := range us {
		p, _ := e.st.profiles.Get(uint64(u))
		out[i] = engine.UserCounts{Posts: p.posts, Followers: p.followers,
			Following: int64(e.st.follows.Following(uint64(u)))}
	}
	e.mu.RUnlock()
	return out, nil
}

// Follow implements engine.Store.
func (e *Engine) Follow(ctx context.Context, viewer, target engine.UserID) error {
	return e.followOp(ctx, opFollow, viewer, target)
}

// Unfollow implements engine.Store.
func (e *Engine) Unfollow(ctx context.Context, viewer, target engine.UserID) error {
	return e.followOp(ctx, opUnfollow, viewer, target)
}

func (e *Engine) followOp(ctx context.Context, kind opKind, viewer, target engine.UserID) error {
	if err := checkMutation(ctx, viewer, ""); err != nil {
		return err
	}
	if err := engine.CheckViewer(target); err != nil {
		return err
	}
	if viewer == target {
		return fmt.Errorf("%w: cannot follow oneself", engine.ErrInvalid)
	}
	_, err := e.commit(&op{kind: kind, viewer: uint64(viewer), a: uint64(target)})
	return err
}

// Followees implements engine.Store.
func (e *Engine) Followees(ctx context.Context, viewer engine.UserID) ([]engine.UserID, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	e.mu.RLock()
	targets, _ := e.st.follows.List(uint64(viewer))
	out := make([]engine.UserID, len(targets))
	for i, f := range targets {
		out[i] = engine.UserID(f)
	}
	e.mu.RUnlock()
	return out, nil
}

// Unread implements engine.Store. A first visit, an expired cursor or the
// first visit of a day records a touch (at most one write per user per day
// from polling); every other call is a pure read.
func (e *Engine) Unread(ctx context.Context, viewer engine.UserID) (engine.Unread, error) {
	if err := ctx.Err(); err != nil {
		return engine.Unread{}, err
	}
	if err := engine.CheckViewer(viewer); err != nil {
		return engine.Unread{}, err
	}
	e.mu.RLock()
	u, touch := e.st.unread(uint64(viewer), e.now().UnixNano(), e.ttl)
	e.mu.RUnlock()
	if !touch {
		return u, nil
	}
	if _, err := e.commit(&op{kind: opTouch, viewer: uint64(viewer)}); err != nil {
		// A read-only engine still answers: what was read is right,
		// only the bookkeeping of the visit is lost.
		if errors.Is(err, engine.ErrUnavailable) {
			return u, nil
		}
		return engine.Unread{}, err
	}
	e.mu.RLock()
	u, _ = e.st.unread(uint64(viewer), e.now().UnixNano(), e.ttl)
	e.mu.RUnlock()
	return u, nil
}

// MarkRead implements engine.Store.
func (e *Engine) MarkRead(ctx context.Context, viewer engine.UserID, kind engine.UnreadKind) error {
	if err := checkMutation(ctx, viewer, ""); err != nil {
		return err
	}
	if kind < engine.Mentions || kind > engine.Feed {
		return fmt.Errorf("%w: unknown unread kind %d", engine.ErrInvalid, kind)
	}
	_, err := e.commit(&op{kind: opMarkRead, viewer: uint64(viewer), a: uint64(kind)})
	return err
}

// ClickRedDot implements engine.Store.
func (e *Engine) ClickRedDot(ctx context.Context, viewer engine.UserID) error {
	if err := checkMutation(ctx, viewer, ""); err != nil {
		return err
	}
	_, err := e.commit(&op{kind: opClickRedDot, viewer: uint64(viewer)})
	return err
}

// PushRedDot implements engine.Store: one timestamp, O(1).
func (e *Engine) PushRedDot(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	_, err := e.commit(&op{kind: opPushRedDot})
	return err
}

// PublishNotification implements engine.Store: one append, O(1). Its
// idempotency keys have no viewer (publishing is an admin act).
func (e *Engine) PublishNotification(ctx context.Context, title, body, idemKey string) (engine.Notification, error) {
	if err := ctx.Err(); err != nil {
		return engine.Notification{}, err
	}
	if err := engine.CheckNotification(title, body); err != nil {
		return engine.Notification{}, err
	}
	if err := engine.CheckIdemKey(idemKey); err != nil {
		return engine.Notification{}, err
	}
	o := &op{kind: opPublish, s1: title, s2: body}
	id, err := e.commit(o.withIdem(0, idemKey, engine.IdemPublish, engine.IdemArgs{Title: title, Body: body}))
	if err != nil {
		return engine.Notification{}, err
	}
	e.mu.RLock()
	defer e.mu.RUnlock()
	i := sort.Search(len(e.st.notifs), func(i int) bool { return e.st.notifs[i].id >= id })
	return e.st.notification(&e.st.notifs[i]), nil
}

// Notifications implements engine.Store.
func (e *Engine) Notifications(ctx context.Context, first int, after engine.NotificationID) ([]engine.Notification, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	first, err := engine.ClampPage(first)
	if err != nil {
		return nil, err
	}
	e.mu.RLock()
	defer e.mu.RUnlock()
	ns := e.st.notifs
	end := len(ns)
	if after != 0 {
		end = sort.Search(len(ns), func(i int) bool { return ns[i].id >= uint64(after) })
	}
	out := make([]engine.Notification, 0, min(first, end))
	for i := end - 1; i >= 0 && len(out) < first; i-- {
		out = append(out, e.st.notification(&ns[i]))
	}
	return out, nil
}

// CreateGroup implements engine.Store.
func (e *Engine) CreateGroup(ctx context.Context, viewer engine.UserID, members []engine.UserID) (engine.GroupID, error) {
	if err := checkMutation(ctx, viewer, ""); err != nil {
		return 0, err
	}
	ms, err := engine.NormalizeUsers(members)
	if err != nil {
		return 0, err
	}
	id, err := e.commit(&op{kind: opCreateGroup, viewer: uint64(viewer), list: ids(ms)})
	return engine.GroupID(id), err
}

// AddGroupMembers implements engine.Store.
func (e *Engine) AddGroupMembers(ctx context.Context, viewer engine.UserID, g engine.GroupID, us []engine.UserID) error {
	if err := checkMutation(ctx, viewer, ""); err != nil {
		return err
	}
	ms, err := engine.NormalizeUsers(us)
	if err != nil {
		return err
	}
	_, err = e.commit(&op{kind: opAddMembers, viewer: uint64(viewer), a: uint64(g), list: ids(ms)})
	return err
}

// LeaveGroup implements engine.Store. Leaving again is a no-op; a user who
// never joined gets ErrForbidden.
func (e *Engine) LeaveGroup(ctx context.Context, viewer engine.UserID, g engine.GroupID) error {
	if err := checkMutation(ctx, viewer, ""); err != nil {
		return err
	}
	_, err := e.commit(&op{kind: opLeaveGroup, viewer: uint64(viewer), a: uint64(g)})
	return err
}

// Group implements engine.Store.
func (e *Engine) Group(ctx context.Context, viewer engine.UserID, id engine.GroupID) (engine.Group, error) {
	if err := ctx.Err(); err != nil {
		return engine.Group{}, err
	}
	e.mu.RLock()
	defer e.mu.RUnlock()
	g, err := e.memberGroup(uint64(id), uint64(viewer))
	if err != nil {
		return engine.Group{}, err
	}
	out := engine.Group{ID: id, MemberCount: g.current, Members: make([]engine.UserID, 0, min(g.current, engine.MaxPageSize))}
	g.currentAfter(0, engine.MaxPageSize, func(u uint64) { out.Members = append(out.Members, engine.UserID(u)) })
	return out, nil
}

// GroupMembers implements engine.Store.
func (e *Engine) GroupMembers(ctx context.Context, viewer engine.UserID, id engine.GroupID, first int, after engine.UserID) ([]engine.UserID, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := engine.CheckPage(first); err != nil {
		return nil, err
	}
	e.mu.RLock()
	defer e.mu.RUnlock()
	g, err := e.memberGroup(uint64(id), uint64(viewer))
	if err != nil {
		return nil, err
	}
	from, err := e.cursorMapID(g, after)
	if err != nil {
		return nil, err
	}
	out := make([]engine.UserID, 0, min(first, g.current))
	g.currentAfter(from, first, func(u uint64) { out = append(out, engine.UserID(u)) })
	return out, nil
}

// cursorMapID is the mapid of the user a page starts after (0: none).
func (e *Engine) cursorMapID(g *group, after engine.UserID) (uint32, error) {
	if after == 0 {
		return 0, nil
	}
	mapid, _ := e.st.memberOf(g, uint64(after))
	if mapid == 0 {
		return 0, errBadCursor(after)
	}
	return mapid, nil
}

func errBadCursor(after engine.UserID) error {
	return fmt.Errorf("%w: after: user %d was never a member of the group", engine.ErrInvalid, uint64(after))
}

// SendMessage implements engine.Store.
func (e *Engine) SendMessage(ctx context.Context, viewer engine.UserID, g engine.GroupID, text string, mentions []engine.UserID, idemKey string) (engine.Message, error) {
	if err := checkMutation(ctx, viewer, idemKey); err != nil {
		return engine.Message{}, err
	}
	if err := engine.CheckText(text); err != nil {
		return engine.Message{}, err
	}
	m, err := engine.NormalizeMentions(viewer, mentions)
	if err != nil {
		return engine.Message{}, err
	}
	o := &op{kind: opSendMessage, viewer: uint64(viewer), a: uint64(g), list: ids(m), s1: text}
	id, err := e.commit(o.withIdem(uint64(viewer), idemKey, engine.IdemSendMessage,
		engine.IdemArgs{Group: g, Mentions: m, Text: text}))
	if err != nil {
		return engine.Message{}, err
	}
	e.mu.RLock()
	defer e.mu.RUnlock()
	msg, _ := e.st.message(id)
	return e.st.messageOut(msg), nil
}

// memberMessage returns message id if viewer is a current member of its
// group. Caller holds mu.
func (e *Engine) memberMessage(id, viewer uint64) (*message, error) {
	m, ok := e.st.message(id)
	if !ok {
		return nil, fmt.Errorf("%w: message %d", engine.ErrNotFound, id)
	}
	if _, err := e.memberGroup(m.group, viewer); err != nil {
		return nil, err
	}
	return m, nil
}

// Message implements engine.Store.
func (e *Engine) Message(ctx context.Context, viewer engine.UserID, id engine.MessageID) (engine.Message, error) {
	if err := ctx.Err(); err != nil {
		return engine.Message{}, err
	}
	e.mu.RLock()
	defer e.mu.RUnlock()
	m, err := e.memberMessage(uint64(id), uint64(viewer))
	if err != nil {
		return engine.Message{}, err
	}
	return e.st.messageOut(m), nil
}

// MarkMessagesRead implements engine.Store.
func (e *Engine) MarkMessagesRead(ctx context.Context, viewer engine.UserID, ms []engine.MessageID) ([]engine.Message, error) {
	if err := checkMutation(ctx, viewer, ""); err != nil {
		return nil, err
	}
	if err := engine.CheckIDs(ms); err != nil {
		return nil, err
	}
	if len(ms) == 0 {
		return []engine.Message{}, nil
	}
	if _, err := e.commit(&op{kind: opMarkMessagesRead, viewer: uint64(viewer), list: ids(ms)}); err != nil {
		return nil, err
	}
	out := make([]engine.Message, len(ms))
	e.mu.RLock()
	defer e.mu.RUnlock()
	for i, id := range ms {
		m, _ := e.st.message(uint64(id))
		out[i] = e.st.messageOut(m)
	}
	return out, nil
}

// Receipts implements engine.Store.
func (e *Engine) Receipts(ctx context.Context, viewer engine.UserID, id engine.MessageID, limit int) (engine.Receipts, error) {
	if err := ctx.Err(); err != nil {
		return engine.Receipts{}, err
	}
	limit, err := engine.ClampPage(limit)
	if err != nil {
		return engine.Receipts{}, err
	}
	e.mu.RLock()
	defer e.mu.RUnlock()
	m, g, err := e.senderMessage(id, viewer)
	if err != nil {
		return engine.Receipts{}, err
	}
	var r engine.Receipts
	r.ReadCount, r.UnreadCount = m.rc.Counts()
	if limit > 0 {
		r.Readers = make([]engine.UserID, 0, min(limit, r.ReadCount))
		m.rc.Readers(limit, func(mapid uint32) { r.Readers = append(r.Readers, engine.UserID(g.byMap[mapid-1])) })
		r.Unreaders = make([]engine.UserID, 0, min(limit, r.UnreadCount))
		m.rc.Unreaders(limit, func(mapid uint32) { r.Unreaders = append(r.Unreaders, engine.UserID(g.byMap[mapid-1])) })
	}
	return r, nil
}

// ReceiptMembers implements engine.Store.
func (e *Engine) ReceiptMembers(ctx context.Context, viewer engine.UserID, id engine.MessageID, readers bool, first int, after engine.UserID) ([]engine.UserID, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := engine.CheckPage(first); err != nil {
		return nil, err
	}
	e.mu.RLock()
	defer e.mu.RUnlock()
	m, g, err := e.senderMessage(id, viewer)
	if err != nil {
		return nil, err
	}
	from, err := e.cursorMapID(g, after)
	if err != nil {
		return nil, err
	}
	out := make([]engine.UserID, 0, first)
	add := func(mapid uint32) { out = append(out, engine.UserID(g.byMap[mapid-1])) }
	if readers {
		m.rc.ReadersAfter(from, first, add)
	} else {
		m.rc.UnreadersAfter(from, first, add)
	}
	return out, nil
}

// senderMessage returns message id and its group for its sender, while a
// member of the group: the receipts rule. Caller holds mu.
func (e *Engine) senderMessage(id engine.MessageID, viewer engine.UserID) (*message, *group, error) {
	m, ok := e.st.message(uint64(id))
	if !ok {
		return nil, nil, fmt.Errorf("%w: message %d", engine.ErrNotFound, id)
	}
	if m.sender != uint64(viewer) {
		return nil, nil, fmt.Errorf("%w: only the sender sees read receipts", engine.ErrForbidden)
	}
	g, _ := e.st.group(m.group)
	if _, cur := e.st.memberOf(g, uint64(viewer)); !cur {
		return nil, nil, errSenderLeft
	}
	return m, g, nil
}

// Import implements engine.Importer: at most MaxImportBatch rows per call,
// one log record.
func (e *Engine) Import(ctx context.Context, rows []engine.ImportRow) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if len(rows) > MaxImportBatch {
		return fmt.Errorf("%w: at most %d rows per import batch", engine.ErrInvalid, MaxImportBatch)
	}
	list := make([]uint64, 0, len(rows)*importStride)
	for _, r := range rows {
		c := r.Counts
		if r.Post == 0 {
			return fmt.Errorf("%w: post id 0", engine.ErrInvalid)
		}
		if min(c.Likes, c.Comments, c.Reposts, c.Views, c.Favorites) < 0 {
			return fmt.Errorf("%w: post %d has a negative count", engine.ErrInvalid, r.Post)
		}
		list = append(list, uint64(r.Post), uint64(r.Author), uint64(c.Likes), uint64(c.Comments),
			uint64(c.Reposts), uint64(c.Views), uint64(c.Favorites))
	}
	if len(list) == 0 {
		return nil
	}
	_, err := e.commit(&op{kind: opImport, list: list})
	return err
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
	mem := st.posts.MemoryBytes() + st.counts.MemoryBytes() + st.likes.MemoryBytes() + st.favs.MemoryBytes() +
		st.users.MemoryBytes() + st.wide.MemoryBytes() + st.profiles.MemoryBytes() + st.groups.MemoryBytes() + st.members.MemoryBytes() +
		st.msgs.MemoryBytes() + st.idem.MemoryBytes() + cap(st.notifText) + cap(st.msgText) +
		cap(st.notifs)*int(sizeofNotif) + cap(st.idemQ)*int(sizeofIdemExpiry) + cap(st.msgList)*int(sizeofMessage)
	mem += st.follows.MemoryBytes() + st.rcBytes
	for i := range st.groupList {
		g := &st.groupList[i]
		mem += 8*cap(g.byMap) + 8*cap(g.quit)
	}
	return engine.Stats{
		Posts:         int64(st.posts.Len()),
		CountedPosts:  int64(st.counts.Len()),
		Users:         st.nusers,
		Groups:        int64(len(st.groupList)),
		Messages:      int64(len(st.msgList)),
		Notifications: int64(len(st.notifs)),
		MemoryBytes:   int64(mem),
	}
}

// DroppedEvents returns how many events were dropped because a
// subscriber's buffer was full.
func (e *Engine) DroppedEvents() uint64 { return e.dropped.Load() }

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
	cerr := errors.Join(e.st.counts.Close(), e.st.posts.Close())
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

// maintainer seals, cools and compacts post-count windows and seals the
// registry's. A step is
// planned under the write lock, run without any lock (readers and writers
// carry on against the frozen inputs), and finished under the lock again.
// It changes how counts are kept, never what they are, so it is not
// logged: replay gives the same values whatever was sealed when.
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
	e.runSteps("post-count", func(now time.Time) *maintStep {
		j := e.st.counts.Plan(now)
		if j == nil {
			return nil
		}
		return &maintStep{j.String(), j.Run, func() error { return e.st.counts.Finish(j) }}
	})
	e.runSteps("registry", func(now time.Time) *maintStep {
		j := e.st.posts.Plan(now)
		if j == nil {
			return nil
		}
		return &maintStep{j.String(), j.Run, j.Finish}
	})
	for _, set := range []func() *likeset.Set{func() *likeset.Set { return e.st.likes }, func() *likeset.Set { return e.st.favs }} {
		e.runSteps("like-set", func(now time.Time) *maintStep {
			j := set().Plan(now)
			if j == nil {
				return nil
			}
			return &maintStep{j.String(), j.Run, func() error { return set().Finish(j) }}
		})
	}
}

// maintStep is one planned step of a store's upkeep.
type maintStep struct {
	name   string
	run    func() error // without the lock
	finish func() error // under the write lock
}

// runSteps runs the steps plan gives until it has none (or one fails,
// to be retried at the next tick): each planned under the write lock, run
// without it, finished under it again.
func (e *Engine) runSteps(what string, plan func(now time.Time) *maintStep) {
	for {
		select {
		case <-e.stop:
			return
		default:
		}
		e.mu.Lock()
		step := plan(e.now())
		e.mu.Unlock()
		if step == nil {
			return
		}
		runErr := step.run()
		e.mu.Lock()
		err := step.finish()
		e.mu.Unlock()
		if err == nil {
			err = runErr
		}
		if err != nil {
			e.logger.Error("embedded: "+what+" maintenance failed; will retry", "job", step.name, "err", err)
			return
		}
	}
}

// prepareCreatePost picks the new post's id, or refuses a client's id
// that is taken.
func (e *Engine) prepareCreatePost(o *op, exists func(uint64) bool) error {
	if o.a == 0 {
		o.a = e.newID(exists)
	} else if exists(o.a) {
		return fmt.Errorf("%w: post %d already exists", engine.ErrInvalid, o.a)
	}
	return nil
}

// prepareLike handles like, unlike, favorite and unfavorite: done when
// the set already says what the op would make it say.
func (e *Engine) prepareLike(o *op, exists func(uint64) bool) (done bool, err error) {
	if !exists(o.a) {
		return false, errPostNotFound(o.a)
	}
	set := e.st.likes
	if o.kind == opFavorite || o.kind == opUnfavorite {
		set = e.st.favs
	}
	present := set.Has(o.viewer, o.a)
	adding := o.kind == opLike || o.kind == opFavorite
	return present == adding, nil
}

func prepareComment(o *op, exists func(uint64) bool) error {
	if !exists(o.a) {
		return errPostNotFound(o.a)
	}
	return nil
}

func (e *Engine) prepareRepost(o *op, exists func(uint64) bool) error {
	if !exists(o.a) {
		return errPostNotFound(o.a)
	}
	o.b = e.newID(exists)
	return nil
}

// prepareViews drops the posts that do not exist; done if none is left.
func prepareViews(o *op, exists func(uint64) bool) (done bool) {
	o.list = slices.DeleteFunc(o.list, func(p uint64) bool { return !exists(p) })
	return len(o.list) == 0
}

// prepareFollow: done when the viewer already (un)follows the target.
func (e *Engine) prepareFollow(o *op) (done bool) {
	following := e.st.follows.Contains(o.viewer, o.a)
	return following == (o.kind == opFollow)
}

// prepareTouch: done when the cursor is live and today's activity is
// already recorded; otherwise an expired or missing cursor restarts at
// the newest notification.
func (e *Engine) prepareTouch(o *op, now int64) (done bool) {
	r, ok := e.st.users.Get(o.viewer)
	live := ok && cursorLive(&r, now, e.ttl)
	if live && r.day == day(now) {
		return true
	}
	if !live {
		o.a, o.b = e.st.newestNotif(), 1
	}
	return false
}

func (e *Engine) preparePublish(o *op) {
	newest := e.st.newestNotif()
	o.a = e.newID(func(id uint64) bool { return id <= newest })
}

func (e *Engine) prepareCreateGroup(o *op) {
	o.a = e.newID(func(id uint64) bool { _, ok := e.st.groups.Get(id); return ok })
	o.list = slices.DeleteFunc(o.list, func(u uint64) bool { return u == o.viewer })
}

// prepareAddMembers keeps only the users not yet current members and
// checks the group's size limit.
func (e *Engine) prepareAddMembers(o *op) (done bool, err error) {
	st := e.st
	g, err := e.memberGroup(o.a, o.viewer)
	if err != nil {
		return false, err
	}
	o.list = slices.DeleteFunc(o.list, func(u uint64) bool { _, cur := st.memberOf(g, u); return cur })
	if len(o.list) == 0 {
		return true, nil
	}
	fresh := 0
	for _, u := range o.list {
		if _, ok := st.members.Get(pair{g.id, u}); !ok {
			fresh++
		}
	}
	if len(g.byMap)+fresh > engine.MaxGroupMembers {
		return false, fmt.Errorf("%w: a group holds at most %d members", engine.ErrInvalid, engine.MaxGroupMembers)
	}
	return false, nil
}

func (e *Engine) prepareLeaveGroup(o *op) (done bool, err error) {
	g, ok := e.st.group(o.a)
	if !ok {
		return false, errGroupNotFound(o.a)
	}
	mapid, cur := e.st.memberOf(g, o.viewer)
	if mapid == 0 {
		return false, errNotMember
	}
	return !cur, nil // !cur: left already
}

func (e *Engine) prepareSendMessage(o *op) error {
	if _, err := e.memberGroup(o.a, o.viewer); err != nil {
		return err
	}
	o.b = e.newID(func(id uint64) bool { _, ok := e.st.msgs.Get(id); return ok })
	return nil
}

// prepareMarkMessagesRead: done when no message would change.
func (e *Engine) prepareMarkMessagesRead(o *op) (done bool, err error) {
	st := e.st
	// Every id is known before any membership is judged: an unknown
	// id anywhere in the list answers ErrNotFound, whatever the order.
	msgs := make([]*message, len(o.list))
	for i, id := range o.list {
		m, ok := st.message(id)
		if !ok {
			return false, fmt.Errorf("%w: message %d", engine.ErrNotFound, id)
		}
		msgs[i] = m
	}
	changes := false
	for _, m := range msgs {
		g, _ := st.group(m.group)
		mapid, cur := st.memberOf(g, o.viewer)
		if !cur {
			return false, errNotMember
		}
		changes = changes || (m.rc.Counted(mapid) && !m.rc.IsRead(mapid))
	}
	return !changes, nil
}
