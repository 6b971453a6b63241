package benchutil

import (
	"syscall"
	"time"
	"unsafe"
)

// ThreadCPU returns the CPU time the calling OS thread has used.
func ThreadCPU() time.Duration {
	var ts syscall.Timespec
	const clockThreadCPUTimeID = 3
	syscall.RawSyscall(syscall.SYS_CLOCK_GETTIME, clockThreadCPUTimeID, uintptr(unsafe.Pointer(&ts)), 0)
	return time.Duration(ts.Nano())
}
