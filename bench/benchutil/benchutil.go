// Package benchutil holds what Tally's benchmarks share to measure on a
// small, shared machine: per-thread CPU time, so that a benchmark can report
// the CPU a page cost beside its wall time (which includes waits for a core
// taken by other work).
package benchutil

import (
	"os"
	"runtime"
	"strconv"
)

// LockThread pins the calling goroutine to its OS thread, so that
// ThreadCPU measures only its work; UnlockThread releases it.
func LockThread() { runtime.LockOSThread() }

// UnlockThread undoes LockThread.
func UnlockThread() { runtime.UnlockOSThread() }

// N is the size of the benchmarks' data set: $TALLY_BENCH_N, or 1M.
// Issue 4's figures are taken at 1M, 10M and 100M.
func N() int {
	if n, err := strconv.Atoi(os.Getenv("TALLY_BENCH_N")); err == nil && n > 0 {
		return n
	}
	return 1_000_000
}
