//go:build !linux

package postcounts

import "time"

var start = time.Now()

// threadCPU falls back to wall time where there is no per-thread clock.
func threadCPU() time.Duration { return time.Since(start) }

func lockThread()   {}
func unlockThread() {}
