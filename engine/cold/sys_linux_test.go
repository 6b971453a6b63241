package cold

import (
	"errors"
	"os"
	"syscall"
)

// dropPageCache asks the kernel to forget the cached pages of f's file
// (posix_fadvise DONTNEED), so that its next reads go to the device.
func dropPageCache(f *File) error {
	fh, ok := f.closer.(*os.File)
	if !ok {
		return errors.New("not an os.File")
	}
	const fadvDontNeed = 4
	_, _, e := syscall.Syscall6(syscall.SYS_FADVISE64, fh.Fd(), 0, 0, fadvDontNeed, 0, 0)
	if e != 0 {
		return e
	}
	return nil
}
