package follows

import (
	"os"

	"golang.org/x/sys/unix"
)

// punchHoleOS deallocates [off, off+n) of f, which then reads as zeros,
// keeping the file's size: the bytes leave the disk without a write.
func punchHoleOS(f *os.File, off, n int64) error {
	return unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, n)
}
