package wal

import (
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// SyncMode says when a record counts as durable. The package doc spells
// out what each mode survives.
type SyncMode int

const (
	// SyncAlways: Append returns after the record is written and fsynced.
	SyncAlways SyncMode = iota
	// SyncBatch: Append returns after write(2); fsync follows within
	// Options.BatchWindow. If that fsync fails the log fails closed, and
	// the records acknowledged since the last good fsync may not survive a
	// power failure.
	SyncBatch
	// SyncNone: Append returns after write(2); only Close fsyncs.
	SyncNone
)

func (m SyncMode) String() string {
	switch m {
	case SyncAlways:
		return "always"
	case SyncBatch:
		return "batch"
	case SyncNone:
		return "none"
	}
	return fmt.Sprintf("SyncMode(%d)", int(m))
}

// ParseSyncMode parses the -fsync setting: "always", "batch" or "none".
func ParseSyncMode(s string) (SyncMode, error) {
	switch s {
	case "always":
		return SyncAlways, nil
	case "batch":
		return SyncBatch, nil
	case "none":
		return SyncNone, nil
	}
	return 0, fmt.Errorf("wal: unknown sync mode %q (want always, batch or none)", s)
}

// Defaults for zero Options fields.
const (
	DefaultSegmentBytes = 64 << 20
	DefaultBatchWindow  = 10 * time.Millisecond
)

// maxPendingBytes bounds the records queued behind the flusher; past it
// AppendAsync blocks, which pushes back on producers faster than the disk
// instead of growing memory without bound.
const maxPendingBytes = 32 << 20

// Options configure a Log. The zero value is SyncAlways with 64 MiB
// segments.
type Options struct {
	Sync SyncMode
	// BatchWindow is, for SyncBatch, the longest a written record waits for
	// its fsync. Zero means DefaultBatchWindow.
	BatchWindow time.Duration
	// SegmentBytes is the size past which the active segment is rotated.
	// Zero means DefaultSegmentBytes.
	SegmentBytes int64
	// FirstIndex is the index the first record gets when the directory holds
	// no log yet; zero means 1. Set it to the snapshot's index + 1 when
	// starting a log beside an existing snapshot. Ignored for an existing
	// log, whose indices continue where they stopped.
	FirstIndex uint64
	// Logger receives the warning about a dropped torn tail. Nil means
	// slog.Default().
	Logger *slog.Logger
	// Observer, when set, is told each batch written and each fsync's
	// duration (for /metrics).
	Observer Observer
}

// Observer receives the log's figures. Its methods run on the flusher
// goroutine, holding the write lock: they must be quick and never block.
type Observer interface {
	// LogBatchWritten reports a batch of records written with one write.
	LogBatchWritten(records, bytes int)
	// LogSynced reports one fsync of the active segment.
	LogSynced(took time.Duration)
}

var (
	// ErrWriteFailed is wrapped by every Append error after a write or
	// fsync failed: the log cannot write and refuses further records until
	// it is reopened. The wrapped chain also holds the OS error, so
	// errors.Is(err, syscall.ENOSPC) works.
	ErrWriteFailed = errors.New("wal: the log cannot write (disk full, read-only or failing?); no further records are accepted until it is reopened")
	// ErrClosed is returned by operations on a closed Log.
	ErrClosed = errors.New("wal: log is closed")
	// ErrOutOfRange is wrapped when asking for records the log does not
	// hold: truncated away, not yet appended, or missing behind a snapshot.
	ErrOutOfRange = errors.New("wal: records not in the log")
)

// writableFile is the part of *os.File the writer uses; tests substitute
// failing files through it.
type writableFile interface {
	Write(p []byte) (int, error)
	Sync() error
	Close() error
}

// Log is an open append-only log. All methods are safe for concurrent use.
type Log struct {
	dir    string
	opts   Options
	unlock func() error

	// mu guards the append side: the queue of encoded records not yet taken
	// by the flusher. It is held only to copy a record in.
	mu        sync.Mutex
	space     sync.Cond // pending drained, or the log failed or closed
	pending   []byte
	maxQueued int // maxPendingBytes; a field so tests can shrink it
	nextIndex uint64
	closed    bool
	failErr   error
	kick      chan struct{}
	// segEnd, when set, ends the active segment before the record of its
	// index, which starts at its offset in pending (EndSegment).
	segEnd segmentEnd

	// wmu guards the file side. The flusher holds it while writing and
	// syncing, which is exactly when new records pile up in pending for the
	// next batch.
	wmu         sync.Mutex
	f           writableFile
	activeFirst uint64
	activeSize  int64
	written     uint64 // last index written to the file
	dirty       bool   // written but not fsynced
	spare       []byte

	// segMu guards segs; the last entry is the active segment.
	segMu sync.Mutex
	segs  []segment

	// ackMu and ackCond let Wait sleep until acked passes its index.
	ackMu   sync.Mutex
	ackCond sync.Cond
	ackErr  error
	acked   atomic.Uint64 // last index reported durable
	lastIdx atomic.Uint64 // last index handed out

	size  atomic.Int64
	syncs atomic.Int64 // fsyncs of segment data, for benchmarks

	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
	closeErr  error
}

// Open opens the log in dir, creating dir and an empty log if needed. It
// verifies every record, cuts off a torn tail of the last segment (with a
// warning on opts.Logger) and refuses any other damage with a
// *CorruptError.
func Open(dir string, opts Options) (*Log, error) {
	if opts.Sync < SyncAlways || opts.Sync > SyncNone {
		return nil, fmt.Errorf("wal: invalid sync mode %d", int(opts.Sync))
	}
	if opts.BatchWindow <= 0 {
		opts.BatchWindow = DefaultBatchWindow
	}
	if opts.SegmentBytes <= 0 {
		opts.SegmentBytes = DefaultSegmentBytes
	}
	if opts.FirstIndex == 0 {
		opts.FirstIndex = 1
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("wal: %w", err)
	}
	unlock, err := lockDir(dir)
	if err != nil {
		return nil, err
	}
	l, err := open(dir, opts)
	if err != nil {
		unlock()
		return nil, err
	}
	l.unlock = unlock
	go l.run()
	return l, nil
}

func open(dir string, opts Options) (*Log, error) {
	doSync := opts.Sync != SyncNone
	if err := removeTempFiles(dir); err != nil {
		return nil, fmt.Errorf("wal: %w", err)
	}
	s, err := scanDir(dir)
	if err != nil {
		return nil, err
	}
	if err := s.versionError(dir); err != nil {
		return nil, err
	}
	// Missing tail segments first: a torn end of what is now the newest
	// segment is only a torn tail if no segment ever followed it.
	manifestOK, err := checkManifest(dir, s.segs)
	if err != nil {
		return nil, err
	}
	if s.bad != nil {
		if !s.torn() {
			return nil, s.corruptError(dir)
		}
		seg := &s.segs[s.badSeg]
		path := segmentPath(dir, seg.first)
		if err := truncateFile(path, s.bad.offset, doSync); err != nil {
			return nil, fmt.Errorf("wal: cut torn tail: %w", err)
		}
		opts.Logger.Warn("wal: dropped a torn record at the end of the log (crash during a write)",
			"file", path, "offset", s.bad.offset, "bytes", seg.size-s.bad.offset, "reason", s.bad.reason)
		seg.size = s.bad.offset
	}
	if len(s.segs) == 0 {
		f, err := createSegment(dir, opts.FirstIndex, doSync)
		if err != nil {
			return nil, fmt.Errorf("wal: %w", err)
		}
		f.Close()
		s.segs = []segment{{first: opts.FirstIndex, size: headerSize}}
		s.last = opts.FirstIndex - 1
	}
	active := s.segs[len(s.segs)-1]
	if !manifestOK {
		// A crash between a new segment's rename and its manifest's:
		// record the newest segment now.
		if err := writeManifest(dir, active.first, doSync); err != nil {
			return nil, fmt.Errorf("wal: %w", err)
		}
		if doSync {
			if err := syncDir(dir); err != nil {
				return nil, fmt.Errorf("wal: %w", err)
			}
		}
	}
	f, err := os.OpenFile(segmentPath(dir, active.first), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return nil, fmt.Errorf("wal: %w", err)
	}
	l := &Log{
		dir:         dir,
		opts:        opts,
		maxQueued:   maxPendingBytes,
		nextIndex:   s.last + 1,
		kick:        make(chan struct{}, 1),
		f:           f,
		activeFirst: active.first,
		activeSize:  active.size,
		written:     s.last,
		segs:        s.segs,
		stop:        make(chan struct{}),
		done:        make(chan struct{}),
	}
	l.space.L = &l.mu
	l.ackCond.L = &l.ackMu
	l.acked.Store(s.last)
	l.lastIdx.Store(s.last)
	var total int64
	for _, seg := range s.segs {
		total += seg.size
	}
	l.size.Store(total)
	return l, nil
}

// Append adds payload as the next record and returns its index once the
// record is durable (see SyncMode). The log keeps no reference to payload.
func (l *Log) Append(payload []byte) (uint64, error) {
	idx, err := l.AppendAsync(payload)
	if err != nil {
		return 0, err
	}
	return idx, l.Wait(idx)
}

// AppendAsync queues payload as the next record and returns its index
// without waiting for it to be durable; call Wait(index) before telling
// anyone it is saved. Indices follow call order, so a caller holding its
// own lock around AppendAsync fixes the log order of its operations and can
// Wait after releasing the lock. It blocks only when more than 32 MiB of
// records are queued behind a slow disk. The log keeps no reference to
// payload.
//
// It returns an index and no wait handle because a handle would cost an
// allocation per record; the index is all Wait needs.
func (l *Log) AppendAsync(payload []byte) (uint64, error) {
	if len(payload) > MaxRecordBytes {
		return 0, fmt.Errorf("wal: record of %d bytes exceeds MaxRecordBytes (%d)", len(payload), MaxRecordBytes)
	}
	// The payload's checksum, the costly part, is computed outside the lock.
	pcrc := crc32.Checksum(payload, castagnoli)
	l.mu.Lock()
	for {
		if l.failErr != nil {
			err := l.failErr
			l.mu.Unlock()
			return 0, err
		}
		if l.closed {
			l.mu.Unlock()
			return 0, ErrClosed
		}
		if len(l.pending) < l.maxQueued {
			break
		}
		l.space.Wait()
	}
	idx := l.nextIndex
	l.nextIndex++
	wasEmpty := len(l.pending) == 0
	l.pending = appendRecord(l.pending, idx, payload, pcrc)
	l.lastIdx.Store(idx)
	l.mu.Unlock()
	// Only the record that makes the queue non-empty wakes the flusher; the
	// others ride along in the same batch.
	if wasEmpty {
		select {
		case l.kick <- struct{}{}:
		default:
		}
	}
	return idx, nil
}

// Wait blocks until the record at index is durable (see SyncMode) and
// returns nil, or returns the error that keeps it from ever being: an
// ErrWriteFailed error if its write failed, ErrOutOfRange if no such
// record was appended.
func (l *Log) Wait(index uint64) error {
	if index <= l.acked.Load() {
		return nil
	}
	if last := l.lastIdx.Load(); index > last {
		return fmt.Errorf("%w: wait for record %d, but the last record appended is %d", ErrOutOfRange, index, last)
	}
	l.ackMu.Lock()
	defer l.ackMu.Unlock()
	for l.acked.Load() < index && l.ackErr == nil {
		l.ackCond.Wait()
	}
	if l.acked.Load() >= index {
		return nil
	}
	return l.ackErr
}

// run is the flusher: it writes whatever is queued whenever it is kicked,
// and in SyncBatch mode fsyncs at most BatchWindow after a write.
func (l *Log) run() {
	defer close(l.done)
	var timer *time.Timer
	var timerC <-chan time.Time
	if l.opts.Sync == SyncBatch {
		timer = time.NewTimer(time.Hour)
		timer.Stop()
	}
	for {
		select {
		case <-l.kick:
			// The kick comes from the first appender woken by the last
			// batch's ack; yielding once lets the others it woke queue
			// their records too, so the next fsync carries all of them
			// instead of a trickle (BenchmarkAppend's records per fsync
			// show it).
			runtime.Gosched()
			l.wmu.Lock()
			l.flushLocked()
			arm := timer != nil && timerC == nil && l.dirty
			l.wmu.Unlock()
			if arm {
				timer.Reset(l.opts.BatchWindow)
				timerC = timer.C
			}
		case <-timerC:
			timerC = nil
			l.wmu.Lock()
			l.syncLocked()
			l.wmu.Unlock()
		case <-l.stop:
			if timer != nil {
				timer.Stop()
			}
			return
		}
	}
}

// flushLocked writes every queued record as one batch and, once the batch
// is as durable as the mode asks, reports it. Caller holds wmu.
func (l *Log) flushLocked() {
	l.mu.Lock()
	if l.failErr != nil || len(l.pending) == 0 {
		l.mu.Unlock()
		return
	}
	batch := l.pending
	last := l.nextIndex - 1
	end := l.segEnd
	l.segEnd = segmentEnd{}
	l.pending = l.spare[:0]
	l.mu.Unlock()
	l.space.Broadcast()

	err := l.writeSplit(batch, l.written+1, end)
	// Reuse the buffer for the batch after next, unless a burst grew it
	// far beyond what steady traffic needs.
	if cap(batch) <= 4<<20 {
		l.spare = batch[:0]
	} else {
		l.spare = nil
	}
	if err != nil {
		l.fail(err)
		return
	}
	if o := l.opts.Observer; o != nil {
		o.LogBatchWritten(int(last-l.written), len(batch))
	}
	l.written = last
	l.dirty = true
	if l.opts.Sync == SyncAlways {
		if !l.syncLocked() {
			return
		}
	}
	l.publish(last)
}

// segmentEnd is where EndSegment ends the active segment: before the
// record of index, at offset off of the pending batch.
type segmentEnd struct {
	set   bool
	index uint64
	off   int
}

// writeSplit is writeLocked of a batch that end may cut in two: the
// records before it, then a new segment for the rest.
func (l *Log) writeSplit(batch []byte, first uint64, end segmentEnd) error {
	if !end.set {
		return l.writeLocked(batch, first)
	}
	if end.off > 0 {
		if err := l.writeLocked(batch[:end.off], first); err != nil {
			return err
		}
	}
	if l.activeSize > headerSize {
		if err := l.rotateLocked(end.index); err != nil {
			return err
		}
	}
	return l.writeLocked(batch[end.off:], end.index)
}

// EndSegment ends the active segment after the last record appended so
// far, which it returns: the next record appended starts a new segment.
// Unlike Rotate it neither writes nor waits (the flusher rotates when it
// writes that record), so a caller may hold the lock that orders its
// appends across it, and the segment then ends exactly where the caller's
// state stands: the engine cuts a snapshot there.
func (l *Log) EndSegment() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.segEnd = segmentEnd{set: true, index: l.nextIndex, off: len(l.pending)}
	return l.nextIndex - 1
}

// writeLocked appends batch, whose first record has index first, to the
// active segment, rotating first if the batch would overfill it.
func (l *Log) writeLocked(batch []byte, first uint64) error {
	if l.activeSize > headerSize && l.activeSize+int64(len(batch)) > l.opts.SegmentBytes {
		if err := l.rotateLocked(first); err != nil {
			return err
		}
	}
	n, err := l.f.Write(batch)
	l.activeSize += int64(n)
	l.size.Add(int64(n))
	if err != nil {
		return fmt.Errorf("write %s: %w", segmentPath(l.dir, l.activeFirst), err)
	}
	return nil
}

// syncLocked fsyncs the active segment if it has unsynced data and reports
// whether the log is still healthy.
func (l *Log) syncLocked() bool {
	if !l.dirty {
		return true
	}
	l.syncs.Add(1)
	start := time.Now()
	if err := l.f.Sync(); err != nil {
		l.fail(fmt.Errorf("fsync %s: %w", segmentPath(l.dir, l.activeFirst), err))
		return false
	}
	if o := l.opts.Observer; o != nil {
		o.LogSynced(time.Since(start))
	}
	l.dirty = false
	return true
}

// rotateLocked seals the active segment and starts one whose first record
// will have index first. The old segment is fsynced before the new one
// exists, in every mode but SyncNone, so that only the last segment can
// ever end in a torn record.
func (l *Log) rotateLocked(first uint64) error {
	doSync := l.opts.Sync != SyncNone
	if doSync && !l.syncLocked() {
		return errAlreadyFailed
	}
	nf, err := createSegment(l.dir, first, doSync)
	if err != nil {
		return fmt.Errorf("create segment: %w", err)
	}
	if err := l.f.Close(); err != nil {
		nf.Close()
		return fmt.Errorf("close %s: %w", segmentPath(l.dir, l.activeFirst), err)
	}
	l.segMu.Lock()
	l.segs[len(l.segs)-1].size = l.activeSize
	l.segs = append(l.segs, segment{first: first, size: headerSize})
	l.segMu.Unlock()
	l.f = nf
	l.activeFirst = first
	l.activeSize = headerSize
	l.dirty = false
	l.size.Add(headerSize)
	return nil
}

// errAlreadyFailed stands in for an error fail has already recorded; fail
// keeps the first error, so it never reaches a caller.
var errAlreadyFailed = errors.New("wal: already failed")

// publish reports every record up to last as durable.
func (l *Log) publish(last uint64) {
	l.ackMu.Lock()
	l.acked.Store(last)
	l.ackMu.Unlock()
	l.ackCond.Broadcast()
}

// fail puts the log into the failed-closed state. The first error wins:
// it describes the write that left the file in an unknown state.
func (l *Log) fail(err error) {
	werr := fmt.Errorf("%w: %w", ErrWriteFailed, err)
	l.mu.Lock()
	first := l.failErr == nil
	if first {
		l.failErr = werr
	}
	werr = l.failErr
	l.pending = l.pending[:0]
	l.mu.Unlock()
	l.space.Broadcast()
	l.ackMu.Lock()
	if l.ackErr == nil {
		l.ackErr = werr
	}
	l.ackMu.Unlock()
	l.ackCond.Broadcast()
	if first {
		l.opts.Logger.Error("wal: the log cannot write; refusing further records", "dir", l.dir, "err", err)
	}
}

// Rotate writes out every queued record, seals the active segment and
// starts a new one, returning the index the new segment starts at. If the
// active segment holds no record it is kept and its first index returned.
// After a snapshot covering index s, Rotate then TruncateBefore(s+1) frees
// the space the snapshot made redundant.
func (l *Log) Rotate() (uint64, error) {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	l.mu.Lock()
	closed, failErr := l.closed, l.failErr
	l.mu.Unlock()
	if failErr != nil {
		return 0, failErr
	}
	if closed {
		return 0, ErrClosed
	}
	l.flushLocked()
	if err := l.failure(); err != nil {
		return 0, err
	}
	first := l.written + 1
	if l.activeSize == headerSize {
		return l.activeFirst, nil
	}
	if err := l.rotateLocked(first); err != nil {
		l.fail(err)
		return 0, l.failure()
	}
	return first, nil
}

func (l *Log) failure() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.failErr
}

// TruncateBefore deletes the segments whose records all have indices below
// index, oldest first. The active segment is never deleted, so the log
// keeps its position even when every record is covered by a snapshot.
func (l *Log) TruncateBefore(index uint64) error {
	l.segMu.Lock()
	defer l.segMu.Unlock()
	n := 0
	for n < len(l.segs)-1 && l.segs[n+1].first <= index {
		n++
	}
	if n == 0 {
		return nil
	}
	var err error
	removed := 0
	for _, seg := range l.segs[:n] {
		if err = os.Remove(segmentPath(l.dir, seg.first)); err != nil && !errors.Is(err, os.ErrNotExist) {
			break
		}
		err = nil
		l.size.Add(-seg.size)
		removed++
	}
	l.segs = append([]segment(nil), l.segs[removed:]...)
	if removed > 0 && l.opts.Sync != SyncNone {
		if serr := syncDir(l.dir); err == nil {
			err = serr
		}
	}
	if err != nil {
		return fmt.Errorf("wal: truncate: %w", err)
	}
	return nil
}

// Replay calls fn for every durable record with index >= from, in index
// order, stopping at the first error fn returns (and returning it). It
// sees the records that were durable when it was called. payload is only
// valid until fn returns: the buffer is reused for the next record.
//
// from below FirstIndex (truncated records) or beyond LastIndex()+1 (a
// snapshot newer than the log) is an ErrOutOfRange error, so a gap between
// snapshot and log is never replayed silently. A record that no longer
// verifies is a *CorruptError.
func (l *Log) Replay(from uint64, fn func(index uint64, payload []byte) error) error {
	l.mu.Lock()
	closed := l.closed
	l.mu.Unlock()
	if closed {
		return ErrClosed
	}
	if from == 0 {
		from = 1
	}
	// Records up to limit are fully written: acked is published only after
	// the write returns, and the files are opened after reading it.
	limit := l.acked.Load()

	l.segMu.Lock()
	if first := l.segs[0].first; from < first {
		l.segMu.Unlock()
		return fmt.Errorf("%w: replay from %d, but records before %d were truncated", ErrOutOfRange, from, first)
	}
	if from > limit+1 {
		l.segMu.Unlock()
		return fmt.Errorf("%w: replay from %d, but the log ends at %d (records missing between snapshot and log?)", ErrOutOfRange, from, limit)
	}
	if from > limit {
		l.segMu.Unlock()
		return nil
	}
	start := len(l.segs) - 1
	for start > 0 && l.segs[start].first > from {
		start--
	}
	// Open every needed file under segMu so that a concurrent
	// TruncateBefore cannot delete one before it is opened; an open file
	// stays readable after its name is removed.
	type openSeg struct {
		seg segment
		f   *os.File
	}
	var files []openSeg
	defer func() {
		for _, o := range files {
			o.f.Close()
		}
	}()
	for _, seg := range l.segs[start:] {
		if seg.first > limit {
			break
		}
		f, err := os.Open(segmentPath(l.dir, seg.first))
		if err != nil {
			l.segMu.Unlock()
			return fmt.Errorf("wal: replay: %w", err)
		}
		files = append(files, openSeg{seg, f})
	}
	l.segMu.Unlock()

	sc := newScanner()
	next := from
	var end int64
	for i, o := range files {
		path := segmentPath(l.dir, o.seg.first)
		if i > 0 && o.seg.first != next {
			return &CorruptError{File: path, Reason: fmt.Sprintf("segment starts at index %d, expected %d", o.seg.first, next)}
		}
		info, err := o.f.Stat()
		if err != nil {
			return fmt.Errorf("wal: replay: %w", err)
		}
		var fnErr error
		res, err := sc.scanSegment(o.f, info.Size(), o.seg.first, false, func(index uint64, _ int64, payload []byte) (bool, error) {
			if index < from {
				return false, nil
			}
			if fnErr = fn(index, payload); fnErr != nil {
				return true, fnErr
			}
			next = index + 1
			return index >= limit, nil
		})
		if fnErr != nil {
			return fnErr
		}
		if err != nil {
			return fmt.Errorf("wal: replay %s: %w", path, err)
		}
		if next > limit {
			return nil
		}
		if res.bad != nil {
			return &CorruptError{File: path, Offset: res.bad.offset, Reason: res.bad.reason}
		}
		next = max(next, res.last+1)
		end = res.end
	}
	return &CorruptError{File: segmentPath(l.dir, files[len(files)-1].seg.first), Offset: end,
		Reason: fmt.Sprintf("log ends before record %d, which was durable", next)}
}

// FirstIndex returns the lowest index the log still holds (or would hold:
// it is LastIndex()+1 when every segment but an empty active one has been
// truncated).
func (l *Log) FirstIndex() uint64 {
	l.segMu.Lock()
	defer l.segMu.Unlock()
	return l.segs[0].first
}

// LastIndex returns the index of the last record appended, durable or not;
// 0 (or Options.FirstIndex-1) for an empty log.
func (l *Log) LastIndex() uint64 { return l.lastIdx.Load() }

// Size returns the bytes the log's segments take on disk, headers
// included; the engine compares it with its snapshot trigger.
func (l *Log) Size() int64 { return l.size.Load() }

// Close writes out queued records, fsyncs, and closes the log. Records
// appended before Close are durable when it returns nil. It returns the
// same result when called again. After a write failure it returns that
// failure.
func (l *Log) Close() error {
	l.closeOnce.Do(func() {
		l.mu.Lock()
		l.closed = true
		l.mu.Unlock()
		l.space.Broadcast()
		close(l.stop)
		<-l.done

		l.wmu.Lock()
		l.flushLocked()
		if l.failure() == nil {
			l.dirty = true // Close syncs in every mode, SyncNone included
			l.syncLocked()
		}
		cerr := l.f.Close()
		l.wmu.Unlock()

		l.closeErr = l.failure()
		if l.closeErr == nil && cerr != nil {
			l.closeErr = fmt.Errorf("wal: close: %w", cerr)
		}
		// Nothing can become durable any more; wake any waiter still
		// sleeping (only possible if the final flush failed).
		l.ackMu.Lock()
		if l.ackErr == nil {
			l.ackErr = ErrClosed
		}
		l.ackMu.Unlock()
		l.ackCond.Broadcast()
		if err := l.unlock(); l.closeErr == nil && err != nil {
			l.closeErr = fmt.Errorf("wal: unlock: %w", err)
		}
	})
	return l.closeErr
}
