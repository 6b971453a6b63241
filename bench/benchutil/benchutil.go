// Package benchutil holds what Tally's benchmarks share to measure on a
// small, shared machine: per-thread CPU time, so that a benchmark can report
// the CPU a page cost beside its wall time (which includes waits for a core
// taken by other work).
package benchutil

import (
	"os"
	"runtime"
	"runtime/metrics"
	"strconv"
	"testing"
	"time"
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

// Interleave runs two page readers turn about, 16 pages each, on one
// locked thread until the benchmark ends, so both see the same machine,
// and returns each one's CPU time per page. first and second get the page
// number; a reader meant to see other pages than its peer offsets it.
func Interleave(b *testing.B, first, second func(page int)) (firstNs, secondNs float64) {
	LockThread()
	defer UnlockThread()
	var t1, t2 time.Duration
	i := 0
	for b.Loop() {
		c0 := ThreadCPU()
		for k := range 16 {
			first(i + k)
		}
		c1 := ThreadCPU()
		for k := range 16 {
			second(i + k)
		}
		t1, t2 = t1+c1-c0, t2+ThreadCPU()-c1
		i += 16
	}
	return float64(t1.Nanoseconds()) / float64(i), float64(t2.Nanoseconds()) / float64(i)
}

var liveSample = []metrics.Sample{{Name: "/gc/heap/live:bytes"}}

// LiveHeap returns the bytes of live heap objects after a full GC: what a
// data structure costs in Go heap, measured as a difference of two calls.
func LiveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	metrics.Read(liveSample)
	return liveSample[0].Value.Uint64()
}

// SkipUnless skips t when what it needs is missing (ok false; why says
// what and how to install it), or fails it when the environment variable
// env is set: scripts/test sets TALLY_REQUIRE_REDIS and
// TALLY_REQUIRE_POSTGRES, having installed the packages, so that a suite
// which measured nothing cannot pass.
func SkipUnless(t testing.TB, ok bool, env, why string) {
	t.Helper()
	if ok {
		return
	}
	if os.Getenv(env) != "" {
		t.Fatalf("%s; %s is set, so this is a failure", why, env)
	}
	t.Skipf("%s; set %s=1 to make this a failure", why, env)
}
