// Package embedded is Tally's default, in-process engine: every rule of
// engine.Store over packed, pointer-free tables, made durable by an
// append-only log.
//
// It owns the engine's state and its log records, not the product rules:
// those are in engine/ops, one typed operation per mutation whose Check
// validates the call and whose Decide maps the facts a backend read to a
// product error or to Effects. The engine is built as a deterministic
// state machine: a mutation is validated (Check), decided against the
// state (read the facts, Decide), turned into one typed log record
// carrying the operation and every non-deterministic input (the time,
// generated ids), appended to the log and applied, all under one lock;
// replaying the records in log order rebuilds the same state. A like is
// one record, and its de-duplication and the author's badge bump are both
// consequences of applying it, so a replay can neither lose one nor apply
// it twice. Validation failures, product errors, operations that change
// nothing and idempotent retries are not logged.
//
// # Commit path
//
//	Store method: op.Check → lock → time → idempotency lookup →
//	prepare (make ids; decide: facts → ops Decide → effects in st.eff)
//	→ encode → wal.AppendAsync (log order = apply order) → apply (the
//	record's own change, then applyEffects) → unlock → wal.Wait (group
//	commit: concurrent commits share one fsync) → events
//
// # Rules, facts and effects
//
// No rule is decided here. For each record, decide (state.go) reads the
// facts its operation's Decide asks for — does the post exist and who
// wrote it, is the like set already, who are the group's members, the
// newest notification, the push stamp — and runs it into one ops.Effects
// buffer the state keeps (reset per record, so that only the events' user
// lists are allocated once it is warm, and on replay, which decides
// Quiet, not even those). applyEffects is then the one place where effects change the
// state: count deltas, new posts in the post table and their authors' post
// counts, unread bumps, badges marked read, follow edges and follower
// counts, a message's fan-out over its group's current members, joins and
// leaves, receipts, red-dot clicks and pushes. What a record changes
// besides its effects is its own entity: the like or favorite flag, the
// new group, message or notification, a touch's cursor, a sweep. The
// badge read, the cursor's liveness, the red dot and an import's rows
// likewise call ops.Unread, ops.DecideTouch and ops.CursorLive, ops.RedDot
// and ops.DecideImport.
//
// The live path decides while preparing (a product error is returned, an
// operation that changes nothing is not logged) and applies those effects;
// replay decides again just before applying, on the same state, so it
// reaches the same effects. Events are the effects' Events (plus each
// fan-out's recipients) and are collected on live commits only, never
// during replay.
//
// # Log records
//
// Each kind of mutation has its own record type (record.go and the
// domains' files: createPostRec, reactRec, commentRec, sendMessageRec,
// ...), embedding its engine/ops operation plus the record's header (time,
// idempotency key hash and fingerprint) and the ids the engine decided
// before logging (new post, message, group and notification ids; a
// touch's cursor). Each has its own encoder and decoder (appendTo,
// readFrom) under one format version; the format is described in
// record.go. A decoder never panics and rejects anything its encoder would
// not have written (FuzzRecord).
//
// # Formats
//
// Every file of a data directory carries its format's version: the log's
// segments and manifest (package wal), the snapshot file (package
// snapshot), the snapshot's state (its META section) and each log record.
// Tally has never been released, so this build reads exactly the versions
// it writes: Open refuses a directory holding any other with an
// *engine.FormatError naming the format, the version found, the version
// this build reads and what to do (TestOlderFormatsRefused), and Repair
// leaves such a directory as it is. A change to any of these formats
// bumps its version.
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
// A snapshot (package snapshot's file format; the sections are listed in
// stateio.go and coded in their domains' files) holds the whole state at
// one log index: every table, list and counter, the idempotency keys and
// their expiry queue, the like and favorite sets, the time of the last
// record and the id generator's high-water mark. It is taken in the
// background, by SnapshotInterval or SnapshotLogBytes or on demand
// (Snapshot), and readers and writers do not wait for it. It takes a cut
// of the live state (cut.go) under the write lock: the log's segment ends
// at the last record appended (wal.EndSegment, which neither writes nor
// waits), and each part of the state is frozen, which copies no table —
// sealed and cold windows never change and are shared, bytes and files;
// everything that does change is frozen the way its package knows, its
// writes going to an overlay until the thaw (the windowed tables hold
// their windows as a rewriting job does, the per-user tables freeze their
// arrays or overlays, a group or message changed meanwhile is changed in
// a copy). The cut is written with no lock, paced against the writers
// (pacer: it pauses after each slice of work in which the log took
// records, at most paceRatio times as long as it worked), cold windows
// copied from their files into the snapshot, which stands alone; it is
// installed once every record it covers is durable, so a snapshot never
// contains an effect whose record was not; then the cut is thawed a part
// at a time, each part under the write lock for what was written to it
// meanwhile. What a snapshot costs is at most one core while it writes
// and, in memory, the writes made while it runs: never a second copy of
// the state.
// No maintenance job may be pending when a cut is taken (maintMu); jobs
// planned after it leave what it holds alone.
//
// After a snapshot, all but the newest two snapshots are deleted and the
// log is truncated before the older one's index, not the newer one's: if
// the newest snapshot is ever found damaged, the older one plus the log
// still hold every record, and Repair (offline) recovers from them,
// losing nothing. The older one is scrubbed first (every checksum read):
// one that rotted since it was written is moved aside, and the one before
// it and its log are kept instead. Disk use is therefore about two
// snapshots plus up to twice SnapshotLogBytes of log. The first snapshot
// after an erasure ended is the exception (afterSnapshot): kept alone,
// with no log before it, once no window it shares still waits for the
// erasure's rewrite.
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
// it started. BackupFile writes one from a data directory, whether or not
// a server has it open (`tally backup`), without writing to it. Restore
// verifies a backup completely and installs it as the only file of an
// empty data directory (`tally restore`); the log then starts after the
// backup's index.
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
// increase by at least 1 ns per record so that records stay ordered
// within one clock tick (two pushes in one tick are still two pushes,
// ops.PushRedDot). Idempotency keys expire by record time
// (every apply forgets keys older than engine.IdempotencyTTL), so replay
// forgets exactly what the live engine had forgotten.
//
// # System cursors
//
// A user's cursor counts while they were active within Options.CursorTTL
// (activity kept per day; the rule is ops.DecideTouch and ops.CursorLive).
// Expiry is decided on read: a cursor past its TTL reads as absent (0
// system unread) and the read records a touch that restarts it at the
// newest notification. Separately, a periodic sweep record
// (Options.SweepInterval) drops expired cursors from memory; it
// changes no answer, only memory. The sweep walks every visit record under
// the write lock, O(users), so it runs rarely.
//
// # Per-user records
//
// A user costs what they use: each kind of per-user state is a packed
// table of its own keyed by the user, and a user is in a table only when
// they have that state. An author with only posts has a post count
// (posted, an engine/usercounts table: sorted and bit-packed, a few bytes
// a user, with a small hash overlay of recent changes that the
// maintenance loop folds in like a tier's delta), a followed user a
// follower count (followers, the same); the badge tables are
// engine/table's open addressing keyed by userKey (two 32-bit words, so
// that slots are not padded): a user who reads their badges a visit record
// (seens: day and system cursor, 21 bytes a slot), a user with unread
// counts a badge record (badges: 25 bytes a slot), a user who clicked the
// red dot a click stamp (clicks: 17 bytes a slot). A snapshot joins a
// user's records into one item of one section (USER: badges, visit
// record and click; PROF: post and follower counts). BenchmarkUserMemory
// reports the live heap bytes per user of each kind.
//
// # Events
//
// Each subscriber has its own goroutine and a buffered channel of
// SubscriberBuffer events. Commits hand events over without blocking: when
// a subscriber's buffer is full (its fn is stuck) the event is dropped for
// that subscriber only. Events are published
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
// beside the same spread over 1000 (fsync=always and none, 1 and 64
// clients; docs/durability.md, "Measured", has the ratios). Increments are not coalesced: under
// fsync=always the engine is fsync-bound at low CPU, every caller must
// wait for its own record's fsync anyway and a batch already carries one
// record per waiting caller, so merging records would not add throughput;
// a like cannot merge at all (its de-dup is per user).
//
// # Files
//
//	doc.go      this design text
//	open.go     Options, Engine, Open, Close, Ready, Stats, the sweeper and
//	            the maintenance loop
//	commit.go   the write path: commit (validate → record → log → apply →
//	            publish), prepare, durability waits, new ids
//	record.go   the record kinds, the common header, the record format,
//	            appendRecord and the decoder (recordReader) with its helpers
//	state.go    the state struct, newState, decide and apply's dispatch,
//	            applyEffects
//	stateio.go  the snapshot container: the section list, the image,
//	            writeCut and readImage, item and chunk coding
//	cut.go      the snapshot's cut: freezing the state, thawing it
//	tables.go   how the state keeps its time-windowed tables (engine/tier:
//	            the post table, the like and favorite sets)
//	posts.go    posts, counts, likes and favorites, views, comments,
//	            reposts, import
//	badges.go   unread badges, mark read, the red dot, system cursors and
//	            notifications
//	follows.go  follows, the feed snapshots, user profiles (posts, followers)
//	userkey.go  userKey, the key of the per-user tables
//	groups.go   groups, members, messages and read receipts
//	idem.go     idempotency keys and their expiry queue
//	events.go   subscribers and event delivery
//	page.go     the batched page read
//	durable.go  snapshots, backup, restore and recovery
//	repair.go   Repair, offline
//	check.go    the derived counts' checks (engine.Checker, CheckDir) and
//	            the recount record that repairs one
//	lifecycle.go  comment ids, deleted posts, erasures: their records,
//	            decisions, masks for reads mid-erasure, snapshot sections
//	eraser.go   the goroutine that takes an erasure's bounded steps
//	lock_*.go   the data directory's lock
//
// Each domain file holds that domain's state types, its records and their
// encoders and decoders, its engine.Store methods, the facts its decide
// steps read, its parts of apply and applyEffects, and its snapshot
// sections' encoders and decoders.
package embedded
