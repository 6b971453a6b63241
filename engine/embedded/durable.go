package embedded

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/snapshot"
	"github.com/tally-dev/tally/engine/wal"
)

// Snapshot defaults (see Options).
const (
	DefaultSnapshotInterval = 10 * time.Minute
	DefaultSnapshotLogBytes = 256 << 20
	// keepSnapshots is how many snapshots stay on disk. The log is kept
	// from the older one's index on, so that a newest snapshot found
	// corrupt can be replaced by the older one plus the log, losing
	// nothing (see Repair).
	keepSnapshots = 2
)

var errNoDir = errors.New("embedded: the engine has no data directory (in-memory)")

// recovered is what recoverDir found, for the start-up log line and the
// snapshot trigger.
type recovered struct {
	snapshot  string // path of the snapshot loaded, "" if none
	snapIndex uint64 // its index
	loadTook  time.Duration
	records   int   // log records replayed after it
	bytes     int64 // their bytes in the log, headers included
	replayDur time.Duration
}

// recoverDir rebuilds the state of the data directory dir: the newest
// snapshot, then the log from the record after it. A snapshot that does
// not verify stops it (never a silent fall back to an older one), as does
// a log that does not continue the snapshot. The log is returned open.
func recoverDir(dir string, wopts wal.Options, tc tables) (*image, *wal.Log, recovered, error) {
	if err := snapshot.RemoveTemp(dir); err != nil {
		return nil, nil, recovered{}, fmt.Errorf("embedded: %w", err)
	}
	return recoverFrom(dir, dir, wopts, tc)
}

// recoverFrom is recoverDir with the snapshots read from snapDir and the
// log opened in logDir (a copy, when dir is read-only).
func recoverFrom(snapDir, logDir string, wopts wal.Options, tc tables) (*image, *wal.Log, recovered, error) {
	var rec recovered
	dir := snapDir
	list, err := snapshot.List(snapDir)
	if err != nil {
		return nil, nil, rec, fmt.Errorf("embedded: %w", err)
	}
	im := newImage(tc)
	if len(list) > 0 {
		newest := list[len(list)-1]
		start := time.Now()
		if im, err = loadSnapshot(newest, true, tc); err != nil {
			if fe := formatError(err, dir); fe != nil {
				return nil, nil, rec, fe
			}
			return nil, nil, rec, corruptHint(err, dir)
		}
		rec.snapshot, rec.snapIndex, rec.loadTook = newest.Path, im.index, time.Since(start)
	}
	wopts.FirstIndex = im.index + 1
	l, err := wal.Open(logDir, wopts)
	if err != nil {
		if fe := formatError(err, dir); fe != nil {
			return nil, nil, rec, fe
		}
		return nil, nil, rec, fmt.Errorf("embedded: open log: %w", err)
	}
	if err := checkContinues(l, im, rec.snapshot); err != nil {
		l.Close()
		return nil, nil, rec, err
	}
	start := time.Now()
	err = l.Replay(im.index+1, func(index uint64, payload []byte) error {
		rec.records++
		rec.bytes += int64(len(payload)) + 16
		return im.applyRecord(index, payload)
	})
	if err != nil {
		l.Close()
		if fe := formatError(err, dir); fe != nil {
			return nil, nil, rec, fe
		}
		return nil, nil, rec, fmt.Errorf("embedded: replay %s: %w", dir, err)
	}
	rec.replayDur = time.Since(start)
	return im, l, rec, nil
}

// checkContinues reports a log that does not pick up where the snapshot
// (or, without one, the empty state) ends.
func checkContinues(l *wal.Log, im *image, snap string) error {
	first, last := l.FirstIndex(), l.LastIndex()
	base := "the empty state (no snapshot)"
	if snap != "" {
		base = "snapshot " + snap
	}
	switch {
	case first > im.index+1:
		return fmt.Errorf("embedded: %s ends at log record %d but the log starts at record %d: records %d..%d are in "+
			"neither (a snapshot or log segment was deleted?); restore a backup", base, im.index, first, im.index+1, first-1)
	case last < im.index:
		return fmt.Errorf("embedded: the log ends at record %d, before the end of %s at record %d (log files "+
			"lost or replaced?); `tally repair` restarts the log after the snapshot, losing nothing the snapshot holds", last, base, im.index)
	}
	return nil
}

// formatError returns, for an error that says a file of the data
// directory dir is in another format than this build's (a snapshot file
// or state, a log segment, manifest or record), the *engine.FormatError
// Open reports: which directory, which format, both versions and what to
// do. It returns nil for any other error.
func formatError(err error, dir string) error {
	return formatErrorOf(err, "data directory "+dir, "an empty -data directory")
}

// formatErrorOf is formatError for the state store holds (a directory, a
// backup file), fresh saying where to start afresh.
func formatErrorOf(err error, store, fresh string) error {
	var fe *engine.FormatError
	var sv *snapshot.VersionError
	var wv *wal.VersionError
	file := ""
	switch {
	case errors.As(err, &sv):
		fe = &engine.FormatError{Format: "snapshot file", Found: uint64(sv.Found), Want: snapshot.Version}
		file = sv.File
	case errors.As(err, &wv):
		fe = &engine.FormatError{Format: wv.Format, Found: uint64(wv.Found), Want: uint64(wv.Want)}
		file = wv.File
	case errors.As(err, &fe):
		fe = &engine.FormatError{Format: fe.Format, Found: fe.Found, Want: fe.Want}
	default:
		return nil
	}
	if file != "" && !strings.HasSuffix(store, file) {
		store += " (" + filepath.Base(file) + ")"
	}
	fe.Store, fe.Fresh = store, fresh
	return fmt.Errorf("embedded: %w", fe)
}

// corruptHint adds the way out to a damaged snapshot's error.
func corruptHint(err error, dir string) error {
	var ce *snapshot.CorruptError
	if !errors.As(err, &ce) {
		return fmt.Errorf("embedded: %w", err)
	}
	return fmt.Errorf("embedded: %w; refusing to start from it or from an older state. "+
		"`tally repair -data %s` moves it aside when an older snapshot and the log still hold every record "+
		"(nothing is lost then); otherwise restore a backup", err, dir)
}

// loadSnapshot reads and fully decodes one snapshot file (on parallel
// goroutines if parallel, see readImage).
func loadSnapshot(in snapshot.Info, parallel bool, tc tables) (*image, error) {
	fr, err := snapshot.Open(in.Path)
	if err != nil {
		return nil, err
	}
	defer fr.Close()
	if fr.Index() != in.Index {
		return nil, fr.Corrupt(0, fmt.Sprintf("header says log index %d but the file name says %d", fr.Index(), in.Index))
	}
	return readImage(fr.Reader, parallel, tc)
}

// cannotWrite reports an error that says the data directory cannot be
// written at all (as opposed to being damaged).
func cannotWrite(err error) bool {
	return errors.Is(err, syscall.EROFS) || errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EPERM)
}

// openReadOnly recovers a data directory that cannot be written (a
// read-only mount, or one the kernel remounted read-only after disk
// errors) and serves reads from it: every mutation fails with
// engine.ErrUnavailable and Ready says why.
func (e *Engine) openReadOnly(opts Options, cause error) error {
	im, rec, err := recoverReadOnly(opts.Dir, opts.Logger, tables{opts: opts.Tables, now: opts.Now}.inMemory())
	if err != nil {
		return err
	}
	e.st, e.lastTime, e.lastIndex, e.genHigh = im.st, im.lastTime, im.index, im.genHigh
	e.dir = opts.Dir
	ferr := fmt.Errorf("embedded: data directory %s cannot be written: %w", opts.Dir, cause)
	e.failed.Store(&ferr)
	opts.Logger.Error("embedded: the data directory cannot be written; serving reads only, every mutation fails until restart",
		"dir", opts.Dir, "err", cause, "snapshot", rec.snapshot, "log_records", rec.records, "last_index", im.index)
	return nil
}

// recoverReadOnly recovers the state of the data directory dir without
// writing to it: snapshots are read in place, and the log (which opening
// may have to cut at a torn tail) through a copy in a temporary directory,
// deleted once the state is built.
func recoverReadOnly(dir string, logger *slog.Logger, tc tables) (*image, recovered, error) {
	tmp, err := os.MkdirTemp("", "tally-readonly-log-")
	if err != nil {
		return nil, recovered{}, fmt.Errorf("embedded: no temporary directory for a copy of %s's log: %w", dir, err)
	}
	defer os.RemoveAll(tmp)
	if err := copyManifest(dir, tmp); err != nil {
		return nil, recovered{}, err
	}
	segs, err := listSegments(dir)
	if err != nil {
		return nil, recovered{}, err
	}
	for _, sg := range segs {
		if err := linkOrCopy(filepath.Join(dir, sg.name), filepath.Join(tmp, sg.name), false); err != nil {
			return nil, recovered{}, err
		}
	}
	im, l, rec, err := recoverFrom(dir, tmp, wal.Options{Sync: wal.SyncNone, Logger: logger}, tc)
	if err != nil {
		return nil, rec, err
	}
	l.Close()
	return im, rec, nil
}

func (e *Engine) canSnapshot() error {
	switch {
	case e.log != nil:
		return nil
	case e.dir != "":
		return fmt.Errorf("embedded: %s is open read-only; `tally backup` (BackupFile) reads it without an engine", e.dir)
	}
	return errNoDir
}

// snapCtx returns ctx, also cancelled when the engine closes.
func (e *Engine) snapCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(e.ctx, cancel)
	return ctx, func() { stop(); cancel() }
}

// Snapshot writes a snapshot of every record logged so far, then prunes
// old snapshots and the log they made redundant. Readers and writers do
// not wait for it: it holds the write lock only to take a cut of the state
// (see cut), which copies no table, then writes the cut with no lock and
// thaws it, a part at a time, each under the lock for what was written to
// that part meanwhile. It returns nil without writing if the newest
// snapshot already covers every record. A failed snapshot changes
// nothing: the log is kept and the engine keeps serving.
func (e *Engine) Snapshot(ctx context.Context) error {
	if err := e.canSnapshot(); err != nil {
		return err
	}
	e.snapMu.Lock()
	defer e.snapMu.Unlock()
	ctx, cancel := e.snapCtx(ctx)
	defer cancel()
	start := time.Now()
	if e.scrubbing() {
		// An erasure's removals wait for their windows' rewrite (cold
		// files too): do it now, so that the snapshot that prunes every
		// older file leaves none naming the user.
		e.maintain()
	}
	c, held, err := e.takeCut()
	if err != nil || c == nil {
		return err
	}
	pc := newPacer(e.log.LastIndex, func(d time.Duration) { e.sleep(ctx, d) })
	path, size, werr := e.writeSnapshot(ctx, c, pc)
	thawHeld := e.thaw(c)
	if werr != nil {
		return werr
	}
	e.snapIndex.Store(c.index)
	e.snapAt.Store(time.Now().UnixNano())
	e.afterSnapshot(c.index, c.scrubbing == 0, pc)
	// After afterSnapshot: the log segments it removes shrink Size, and a
	// base taken before would leave the -snapshot-log-bytes trigger (and
	// SnapshotLag) that many bytes behind.
	e.snapBase.Store(e.log.Size())
	if e.metrics != nil {
		e.metrics.SnapshotWritten(time.Since(start), pc.slept, size)
	}
	e.logger.Info("embedded: snapshot written", "file", path, "index", c.index, "bytes", size,
		"cut", held, "thaw", thawHeld, "paced", pc.slept, "took", time.Since(start))
	return nil
}

// takeCut takes a cut of the state at the last record appended (nil when
// the newest snapshot covers it) and ends the log's segment there, under
// the write lock, which it returns how long it held. The snapshot ends
// where a segment ends, so that segments hold records either all covered
// by a snapshot or none, and log damage in covered records can be dropped
// whole, losing nothing (see Repair). No maintenance job may be pending
// (the cut shares the windows jobs rewrite): maintMu waits for the
// maintenance rounds under way, and rounds wait for the cut, not for the
// snapshot, since the cut's tables plan no job on what it holds.
func (e *Engine) takeCut() (*cut, time.Duration, error) {
	e.maintMu.Lock()
	defer e.maintMu.Unlock()
	e.mu.Lock()
	defer e.mu.Unlock()
	start := time.Now()
	switch {
	case e.closed:
		return nil, 0, errClosed
	case e.failed.Load() != nil:
		return nil, 0, fmt.Errorf("embedded: snapshot: %w", errWrite)
	case e.lastIndex <= e.snapIndex.Load():
		return nil, 0, nil
	}
	if end := e.log.EndSegment(); end != e.lastIndex {
		return nil, 0, fmt.Errorf("embedded: snapshot: the log's last record is %d, the state's %d", end, e.lastIndex)
	}
	c, err := e.st.freeze()
	if err != nil {
		return nil, 0, err
	}
	c.index, c.lastTime, c.genHigh = e.lastIndex, e.lastTime, e.genHigh
	return c, time.Since(start), nil
}

// writeSnapshot writes the cut to a new snapshot file and installs it once
// every record it covers is durable: a snapshot never vouches for a
// record the log could still lose. It returns the file and its size.
func (e *Engine) writeSnapshot(ctx context.Context, c *cut, pc *pacer) (string, int64, error) {
	list, err := snapshot.List(e.dir)
	if err != nil {
		return "", 0, err
	}
	if n := len(list); n > 0 && list[n-1].Index > c.index {
		// Not this engine's: it would be the newest, and the next Open
		// would start from it.
		return "", 0, fmt.Errorf("embedded: snapshot %s is ahead of the log (last record %d)", list[n-1].Path, c.index)
	}
	f, err := e.createSnapshot(e.dir, c.index, e.syncFiles)
	if err != nil {
		return "", 0, fmt.Errorf("embedded: snapshot: %w", err)
	}
	if err := writeCut(f.Writer, c, ctx.Err, pc); err != nil {
		f.Abort()
		return "", 0, fmt.Errorf("embedded: snapshot: %w", err)
	}
	if err := e.log.Wait(c.index); err != nil {
		f.Abort()
		return "", 0, fmt.Errorf("embedded: snapshot: the log failed, nothing more can be made durable: %w", err)
	}
	// A cancel during the last slice's pause comes after writeCut's last
	// look at ctx: a snapshot cancelled before its install is not
	// installed.
	path, err := f.Commit(func() error { pc.step(); return ctx.Err() })
	if err != nil {
		return "", 0, fmt.Errorf("embedded: snapshot: %w", err)
	}
	var size int64
	if info, err := os.Stat(path); err == nil {
		size = info.Size()
	}
	return path, size, nil
}

// thaw runs the cut's thaw steps, each under the write lock on its own,
// and returns the longest hold. A step that fails is a bug (the cut's
// views were given out by these very tables); it is logged and the
// others still run.
func (e *Engine) thaw(c *cut) time.Duration {
	var longest time.Duration
	for _, step := range c.thawSteps() {
		e.mu.Lock()
		start := time.Now()
		err := step()
		longest = max(longest, time.Since(start))
		e.mu.Unlock()
		if err != nil {
			e.logger.Error("embedded: snapshot: thawing the state", "err", err)
		}
	}
	return longest
}

// afterSnapshot prunes old snapshots and the log segments no kept
// snapshot needs. Failures here lose nothing (the files stay), so they are
// logged, not returned.
//
// A snapshot at index that covers the end of an erasure is kept alone,
// with no log before it: the older snapshot and the log name the erased
// user, and erasure means no file does after the next snapshot. Until the
// next snapshot after it, a damaged newest snapshot then has no older one
// to fall back on (Repair says so); that is the price of forgetting. A
// snapshot whose cut held a window still waiting for an erasure's rewrite
// (clean false: an erasure ended between Snapshot's maintenance pass and
// the cut) names the user in that window's bytes, so it is not that
// snapshot: the next one is.
func (e *Engine) afterSnapshot(index uint64, clean bool, pc *pacer) {
	keep := keepSnapshots
	erased := e.erasedAt.Load()
	if erased != 0 && index >= erased && clean {
		keep = 1
	} else {
		e.scrubPrevious(pc)
	}
	removed, err := snapshot.Prune(e.dir, keep, e.syncFiles, e.pruneStepBytes, pc.step)
	if err != nil {
		e.logger.Warn("embedded: pruning old snapshots failed", "err", err)
	}
	for _, p := range removed {
		e.logger.Debug("embedded: old snapshot removed", "file", p)
	}
	if keep == 1 {
		if err == nil {
			// The cut ended its segment only for the next record
			// (EndSegment): with none appended since, the records it
			// covers are still in the active segment, which
			// TruncateBefore keeps.
			_, err = e.log.Rotate()
		}
		if err == nil {
			err = e.log.TruncateBefore(index + 1)
		}
		if err != nil {
			e.logger.Warn("embedded: dropping the files before an erasure's snapshot failed; the next snapshot tries again", "err", err)
			return
		}
		e.erasedAt.CompareAndSwap(erased, 0)
		return
	}
	list, err := snapshot.List(e.dir)
	if err != nil || len(list) < keepSnapshots {
		return
	}
	// Every record up to the oldest kept snapshot's index is in both kept
	// snapshots; the log from there on is what lets the older one stand
	// in for a damaged newer one.
	if err := e.log.TruncateBefore(list[0].Index + 1); err != nil {
		e.logger.Warn("embedded: truncating the log failed", "err", err)
	}
}

// scrubPrevious verifies every checksum of the snapshot before the newest
// (a chunk at a time), which is about to become the one the log is kept
// for: one that no longer verifies (bit rot since it was written) is
// moved aside with an error logged while the one before it and the log
// after it can still stand in for it, so that Prune keeps that one and
// its log instead, and nothing is lost. It reads the whole file, paced as
// the snapshot was (pc).
func (e *Engine) scrubPrevious(pc *pacer) {
	list, err := snapshot.List(e.dir)
	if err != nil || len(list) < 2 {
		return
	}
	prev := list[len(list)-2]
	fr, err := snapshot.Open(prev.Path)
	if err == nil {
		err = fr.Reader.Verify(pc.step)
		fr.Close()
	}
	var ce *snapshot.CorruptError
	if !errors.As(err, &ce) {
		return
	}
	e.logger.Error("embedded: a snapshot no longer verifies; moving it aside and keeping the one before it and the log",
		"file", prev.Path, "err", err)
	if _, err := snapshot.MoveAside(prev.Path); err != nil {
		e.logger.Error("embedded: moving a damaged snapshot aside failed", "file", prev.Path, "err", err)
	}
}

// snapshotter takes a snapshot whenever SnapshotInterval has passed or the
// log has grown by SnapshotLogBytes since the last one, if there is
// anything new. A failure is logged and retried with backoff; the log is
// kept meanwhile, so nothing depends on the snapshot succeeding.
func (e *Engine) snapshotter(interval time.Duration, logBytes int64) {
	defer e.wg.Done()
	check := time.Second
	if interval > 0 {
		check = min(check, interval)
	}
	t := time.NewTicker(check)
	defer t.Stop()
	last := time.Now()
	var failures int
	var retryAt time.Time
	for {
		select {
		case <-e.stop:
			return
		case <-t.C:
		}
		now := time.Now()
		if e.failed.Load() != nil || now.Before(retryAt) || e.log.LastIndex() <= e.snapIndex.Load() {
			continue
		}
		due := interval > 0 && now.Sub(last) >= interval ||
			logBytes > 0 && e.log.Size()-e.snapBase.Load() >= logBytes
		if !due {
			continue
		}
		if err := e.Snapshot(e.ctx); err != nil {
			if e.ctx.Err() != nil {
				return
			}
			failures++
			if e.metrics != nil {
				e.metrics.SnapshotFailed()
			}
			backoff := min(10*time.Second<<min(failures-1, 5), 5*time.Minute)
			retryAt = time.Now().Add(backoff)
			e.logger.Error("embedded: snapshot failed; the log is kept and the snapshot will be retried",
				"err", err, "retry_in", backoff)
			continue
		}
		failures = 0
		last = time.Now()
	}
}

// SnapshotLag reports what the newest snapshot does not cover: the log
// records and bytes after it (what a restart replays), and when it was
// written (zero when the data directory has none yet).
func (e *Engine) SnapshotLag() (records uint64, logBytes int64, newest time.Time) {
	if e.log == nil {
		return 0, 0, time.Time{}
	}
	if at := e.snapAt.Load(); at != 0 {
		newest = time.Unix(0, at)
	}
	return e.log.LastIndex() - min(e.snapIndex.Load(), e.log.LastIndex()), max(e.log.Size()-e.snapBase.Load(), 0), newest
}

func writeBackup(ctx context.Context, im *image, w io.Writer) error {
	sw, err := snapshot.NewWriter(w, im.index)
	if err != nil {
		return fmt.Errorf("embedded: backup: %w", err)
	}
	if err := writeImage(sw, im, ctx.Err, &pacer{}); err != nil {
		return fmt.Errorf("embedded: backup: %w", err)
	}
	if _, err := sw.Finish(); err != nil {
		return fmt.Errorf("embedded: backup: %w", err)
	}
	return nil
}

// backupDir writes to w a backup of the data directory dir, whether or not
// a server has it open (`tally backup -data DIR -out FILE`), and returns
// the log index it covers: every mutation acknowledged before the call is
// in it. It never writes to dir's files: it hard-links the newest snapshot
// and the sealed log segments into a private directory dir/.backup-*
// (the system temporary directory if dir is read-only; copying where links
// fail), copies the active segment (a record being written as it is
// copied reads as a torn tail and is dropped, as after a crash: it was not
// acknowledged yet), recovers the state from those as Open would, and
// writes it out. It needs memory for one copy of the state and, where
// links fail, disk for the copies; the private directory is removed
// afterwards (a crashed backup leaves it behind; it may be deleted). If a
// running server prunes what it linked mid-way, it retries.
func backupDir(ctx context.Context, dir string, w io.Writer) (uint64, error) {
	var lastErr error
	for range 3 {
		im, err := stageAndRecover(dir)
		if err == nil {
			return im.index, writeBackup(ctx, im, w)
		}
		lastErr = err
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
	}
	return 0, lastErr
}

// BackupFile is backupDir into the file out, written as out.tmp, fsynced
// and renamed, so that out is either absent or a complete backup.
func BackupFile(ctx context.Context, dir, out string) (uint64, error) {
	tmp := out + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return 0, fmt.Errorf("embedded: backup: %w", err)
	}
	fail := func(err error) (uint64, error) {
		f.Close()
		os.Remove(tmp)
		return 0, err
	}
	index, err := backupDir(ctx, dir, f)
	if err != nil {
		return fail(err)
	}
	if err := f.Sync(); err != nil {
		return fail(fmt.Errorf("embedded: backup: %w", err))
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return 0, fmt.Errorf("embedded: backup: %w", err)
	}
	if err := os.Rename(tmp, out); err != nil {
		os.Remove(tmp)
		return 0, fmt.Errorf("embedded: backup: %w", err)
	}
	return index, snapshot.SyncDir(filepath.Dir(out))
}

func stageAndRecover(dir string) (*image, error) {
	tmp, err := os.MkdirTemp(dir, ".backup-")
	if err != nil {
		// A read-only data directory: stage elsewhere, by copying.
		if tmp, err = os.MkdirTemp("", "tally-backup-"); err != nil {
			return nil, fmt.Errorf("embedded: backup: %w", err)
		}
	}
	defer os.RemoveAll(tmp)
	list, err := snapshot.List(dir)
	if err != nil {
		return nil, err
	}
	if n := len(list); n > 0 {
		if err := linkOrCopy(list[n-1].Path, filepath.Join(tmp, filepath.Base(list[n-1].Path)), true); err != nil {
			return nil, err
		}
	}
	// The manifest before the segments: a rotation in between makes the
	// copy's newest segment newer than its manifest, which is no loss;
	// the other order could make a complete copy look truncated.
	if err := copyManifest(dir, tmp); err != nil {
		return nil, err
	}
	segs, err := listSegments(dir)
	if err != nil {
		return nil, err
	}
	for i, s := range segs {
		// Sealed segments never change; the last one may be appended to
		// as it is read, so it is copied, never linked (recovery may cut
		// its torn tail, which must not touch the server's file).
		if err := linkOrCopy(filepath.Join(dir, s.name), filepath.Join(tmp, s.name), i < len(segs)-1); err != nil {
			return nil, err
		}
	}
	im, l, _, err := recoverDir(tmp, wal.Options{Sync: wal.SyncNone, Logger: slog.New(slog.DiscardHandler)}, tables{})
	if err != nil {
		return nil, err
	}
	l.Close()
	return im, nil
}

// copyManifest copies the log's manifest of dir into tmp, if it has one,
// so that a copy of the log is checked for missing segments too.
func copyManifest(dir, tmp string) error {
	from := filepath.Join(dir, wal.ManifestName)
	if _, err := os.Stat(from); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return linkOrCopy(from, filepath.Join(tmp, wal.ManifestName), false)
}

func linkOrCopy(from, to string, link bool) error {
	if link && os.Link(from, to) == nil {
		return nil
	}
	src, err := os.Open(from)
	if err != nil {
		return fmt.Errorf("embedded: backup: %w", err)
	}
	defer src.Close()
	dst, err := os.Create(to)
	if err != nil {
		return fmt.Errorf("embedded: backup: %w", err)
	}
	_, err = io.Copy(dst, src)
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("embedded: backup: %w", err)
	}
	return nil
}

// segFile is one log segment as its name describes it (the wal package
// documents the name: wal-<first index, 16 hex digits>.log).
type segFile struct {
	name  string
	first uint64
}

func listSegments(dir string) ([]segFile, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("embedded: %w", err)
	}
	var out []segFile
	for _, e := range entries {
		if first, ok := parseSegmentName(e.Name()); ok {
			out = append(out, segFile{e.Name(), first})
		}
	}
	slices.SortFunc(out, func(a, b segFile) int { return strings.Compare(a.name, b.name) })
	return out, nil
}

func parseSegmentName(name string) (uint64, bool) {
	hex, ok := strings.CutPrefix(name, "wal-")
	if !ok {
		return 0, false
	}
	if hex, ok = strings.CutSuffix(hex, ".log"); !ok || len(hex) != 16 || strings.ToLower(hex) != hex {
		return 0, false
	}
	v, err := strconv.ParseUint(hex, 16, 64)
	return v, err == nil
}

// Restore installs the backup file (from BackupFile, `tally backup`) as the state
// of the data directory dir, which must not hold a store yet (no snapshot
// or log files; other files such as a dev secret may be there). It reads
// and decodes the whole backup first, so a damaged backup is refused
// before anything is installed; then it copies it into dir under a
// temporary name, verifies the copy, fsyncs and renames it. The next Open
// of dir loads it and starts the log after the backup's index.
func Restore(file, dir string) error {
	fr, err := snapshot.Open(file)
	if err == nil {
		defer fr.Close()
		_, err = readImage(fr.Reader, true, tables{})
	}
	if err != nil {
		if fe := formatErrorOf(err, "backup "+file, "a backup written by this build"); fe != nil {
			return fe
		}
		return fmt.Errorf("embedded: restore: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("embedded: restore: %w", err)
	}
	unlock, err := lockDir(dir)
	if err != nil {
		return err
	}
	defer unlock()
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("embedded: restore: %w", err)
	}
	for _, en := range entries {
		name := en.Name()
		if _, ok := parseSegmentName(name); ok || strings.HasPrefix(name, "snap-") {
			return fmt.Errorf("embedded: restore: %s already holds a store (%s); restore into an empty directory", dir, name)
		}
	}
	final := filepath.Join(dir, snapshot.FileName(fr.Index()))
	tmp := final + ".tmp"
	if err := copyFile(fr.File(), tmp); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("embedded: restore: %w", err)
	}
	copied, err := snapshot.Open(tmp)
	if err == nil {
		err = copied.Verify(nil)
		copied.Close()
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("embedded: restore: the copy does not verify: %w", err)
	}
	if err := os.Rename(tmp, final); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("embedded: restore: %w", err)
	}
	return snapshot.SyncDir(dir)
}

func copyFile(src *os.File, to string) error {
	dst, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	_, err = io.Copy(dst, io.NewSectionReader(src, 0, 1<<62))
	if err == nil {
		err = dst.Sync()
	}
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	return err
}
