// Package benchutil holds what Tally's benchmarks share to measure on a
// small, shared machine: per-thread CPU time, so that a benchmark can report
// the CPU a page cost beside its wall time (which includes waits for a core
// taken by other work).
package benchutil

import "runtime"

// LockThread pins the calling goroutine to its OS thread, so that
// ThreadCPU measures only its work; UnlockThread releases it.
func LockThread() { runtime.LockOSThread() }

// UnlockThread undoes LockThread.
func UnlockThread() { runtime.UnlockOSThread() }
