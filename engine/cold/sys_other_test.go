//go:build !linux

package cold

import (
	"errors"
	"time"
)

var start = time.Now()

// threadCPU falls back to wall time where there is no per-thread clock.
func threadCPU() time.Duration { return time.Since(start) }

func lockThread()   {}
func unlockThread() {}

func dropPageCache(*File) error { return errors.New("not supported on this OS") }
