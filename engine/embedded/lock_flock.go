//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package embedded

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

const lockName = "engine.lock"

// lockDir takes an exclusive flock on dir/engine.lock for the whole life
// of an Engine, so that Repair and Restore (which rename and delete
// snapshots and segments) refuse to run on a directory a server has open.
// The kernel drops the lock when the process dies: a crash never leaves a
// stale lock behind.
func lockDir(dir string) (unlock func() error, err error) {
	path := filepath.Join(dir, lockName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("embedded: lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("embedded: %s is in use by a running engine (stop the server first)", dir)
		}
		return nil, fmt.Errorf("embedded: lock %s: %w", path, err)
	}
	return f.Close, nil
}
