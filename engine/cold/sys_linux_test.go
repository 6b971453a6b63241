package cold

import (
	"errors"
	"os"
	"runtime"
	"syscall"
	"time"
	"unsafe"
)

// threadCPU returns the CPU time the calling OS thread has used. The
// benchmarks lock their goroutine to a thread and report CPU ns beside
// wall ns: this machine has two cores shared with other work, so wall time
// includes time spent waiting for a core while CPU time does not.
func threadCPU() time.Duration {
	var ts syscall.Timespec
	const clockThreadCPUTimeID = 3
	syscall.RawSyscall(syscall.SYS_CLOCK_GETTIME, clockThreadCPUTimeID, uintptr(unsafe.Pointer(&ts)), 0)
	return time.Duration(ts.Nano())
}

func lockThread()   { runtime.LockOSThread() }
func unlockThread() { runtime.UnlockOSThread() }

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
