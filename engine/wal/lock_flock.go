//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package wal

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

const lockName = "wal.lock"

// lockDir takes an exclusive flock on dir/wal.lock, so that two Logs (in
// one process or two) or a Repair and a Log never write the same segments.
// The kernel drops the lock when the process dies, so a crash never leaves
// a stale lock behind.
func lockDir(dir string) (unlock func() error, err error) {
	path := filepath.Join(dir, lockName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("wal: lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("wal: %s is in use by another open log", dir)
		}
		return nil, fmt.Errorf("wal: lock %s: %w", path, err)
	}
	return f.Close, nil
}
