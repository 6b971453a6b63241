// Package wal is the embedded engine's append-only log: the durable record
// of every mutation between two snapshots.
//
// It owns the segment files of one directory (wal-*.log, a wal.lock file,
// the wal.manifest file and transient *.tmp files of those) and nothing
// else in it, so snapshots may live beside it. Records are opaque byte strings to this package; the
// engine encodes one engine operation per record.
//
// # Promises
//
//   - Every record gets an index (LSN): 1, 2, 3, ... with no gaps, in the
//     order AppendAsync/Append took them. Records become durable in index
//     order, so "index i is durable" implies every index below i is too.
//   - A record is reported durable (Append returns nil, Wait(i) returns nil)
//     only once it is as durable as the SyncMode promises; a record whose
//     write failed, fully or partly, is never reported durable.
//   - Concurrent appenders share one write(2) and one fsync (group commit):
//     a single flusher goroutine takes every record queued while the
//     previous batch was being written and synced, and writes them at once.
//   - Open validates every record of every segment. A torn final record of
//     the last segment (crash mid-write: short record, zero-filled tail, bad
//     checksum with nothing valid after it) is cut off and reported with a
//     slog warning naming the file and offset. Damage anywhere else is
//     returned as a *CorruptError naming the file and offset; Open never
//     loads a partial log silently. That includes a log whose newest
//     segments were deleted: wal.manifest names the newest segment created
//     (see manifest.go), and a log that ends before it is refused with a
//     *CorruptError whose Missing is set. Repair (`tally repair`) is the way out:
//     it truncates the log at the first bad record and drops everything
//     after it, or accepts the missing segments as lost.
//   - Open reads exactly one format: segments and manifest of this build's
//     format versions. A log of any other (a sound header or manifest of
//     another version, or segments holding records with no manifest, as
//     logs had before manifests) is refused whole with a *VersionError,
//     which Repair does not touch.
//   - After a write or fsync error (ENOSPC, EROFS, EIO, ...) the Log is
//     failed-closed for writes: that Append and every later one returns an
//     error wrapping ErrWriteFailed, because the file may now end in a
//     half-written batch and the state of the OS page cache after a failed
//     fsync is unknown. Replay of what was durable keeps working; the next
//     Open treats the half-written tail as a torn tail and drops it.
//
// # Sync modes
//
//   - SyncAlways (default): Append returns after the record's batch has
//     been written and fsynced. Survives kill -9 and power failure.
//   - SyncBatch: Append returns after the batch has been written with
//     write(2); the flusher fsyncs within Options.BatchWindow of that write.
//     Survives kill -9 (the data is in the OS page cache); a power failure
//     or kernel crash loses what was written within the last BatchWindow.
//     A failed background fsync fails the log closed like a failed write.
//   - SyncNone: Append returns after write(2) and nothing is ever fsynced
//     except by Close. Survives kill -9; a power failure may lose or damage
//     any part of the log. For tests and benchmarks.
//
// # File format
//
// A log is a sequence of segment files named wal-<first index as 16 lower
// case hex digits>.log; segment k+1 starts at the index after the last
// record of segment k. All integers are little-endian.
//
// Segment header, 24 bytes:
//
//	offset  size  field
//	0       8     magic "TALLYWAL"
//	8       4     format version, uint32 (1)
//	12      8     index of the segment's first record, uint64 (matches the name)
//	20      4     CRC32C (Castagnoli) of bytes 0..20
//
// followed by zero or more records, each 16 bytes of header and the payload,
// with no padding between records:
//
//	offset  size  field
//	0       4     payload length n, uint32 (at most MaxRecordBytes)
//	4       4     CRC32C (Castagnoli) of payload ‖ bytes 0..4 ‖ bytes 8..16
//	8       8     index, uint64 (previous record's index + 1)
//	16      n     payload
//
// The checksum covers the payload first so that its costly part can be
// computed before the append lock is taken; it also covers the length and
// the index, so a record moved, duplicated or mis-framed fails the check.
// A record of zeros never verifies (CRC32C of zeros is not zero), which is
// what makes a zero-filled tail detectable.
//
// Segments are created as wal-X.log.tmp, header written and fsynced, then
// renamed and the directory fsynced, so a segment file that exists has a
// valid header; leftover .tmp files are deleted by Open. A segment is
// fsynced before the next one is created, so only the last segment can end
// in a torn record. Segments are rotated when a batch would push the
// active one past Options.SegmentBytes (a batch is never split by size,
// so one batch larger than that makes a larger segment), on Rotate, and
// where EndSegment says: before the first record appended after it, which
// may split a batch in two.
//
// # Snapshots and truncation
//
// The engine takes a snapshot covering records up to some index s (ending
// the segment there with EndSegment, under the lock that orders its
// appends, so that a segment's records are all covered by a snapshot or
// none are), calls Wait(s) before installing it (a snapshot must never
// claim records that are not durable), then may call TruncateBefore(s+1), which
// deletes whole segments whose records are all below s+1. On start it loads
// the snapshot and calls Replay(s+1, ...). A log opened on an empty
// directory next to a snapshot must be told where to start with
// Options.FirstIndex = s+1, or Replay reports the gap.
//
// # Known limit
//
// On a power failure (not kill -9) the file system may persist the pages of
// an unsynced batch out of order, leaving a hole followed by valid records.
// Open cannot tell that from bit rot and reports a *CorruptError; under
// SyncAlways the records after the hole were never acknowledged, so Repair
// loses nothing that any client was told was saved.
package wal
