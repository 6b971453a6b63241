package snapshot

import (
	"os"

	"golang.org/x/sys/unix"
)

// writeback starts the kernel writing each range back as soon as it is
// written, and waits for the range before it, so that at most two ranges
// are dirty at a time and the disk sees the file as a steady trickle of
// writes, as RocksDB's bytes_per_sync does. sync_file_range makes nothing
// durable (no metadata, no device cache flush): Commit's fsync still
// does, and finds almost nothing left to write.
type writeback struct {
	prevOff, prevEnd int64
}

// step starts the writeback of [off, end) and waits for the range given
// at the step before.
func (wb *writeback) step(f *os.File, off, end int64) error {
	fd := int(f.Fd())
	if err := unix.SyncFileRange(fd, off, end-off, unix.SYNC_FILE_RANGE_WRITE); err != nil {
		return err
	}
	if wb.prevEnd > wb.prevOff {
		const wait = unix.SYNC_FILE_RANGE_WAIT_BEFORE | unix.SYNC_FILE_RANGE_WRITE | unix.SYNC_FILE_RANGE_WAIT_AFTER
		if err := unix.SyncFileRange(fd, wb.prevOff, wb.prevEnd-wb.prevOff, wait); err != nil {
			return err
		}
	}
	wb.prevOff, wb.prevEnd = off, end
	return nil
}
