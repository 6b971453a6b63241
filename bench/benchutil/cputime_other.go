//go:build !linux

package benchutil

import "time"

var start = time.Now()

// ThreadCPU falls back to wall time where there is no per-thread clock.
func ThreadCPU() time.Duration { return time.Since(start) }

// Monotonic falls back to this process's own monotonic clock: times taken
// in different processes cannot be compared there.
func Monotonic() time.Duration { return time.Since(start) }
