//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package wal

// lockDir is a no-op where flock is not available; running two logs on one
// directory there is the caller's mistake to avoid.
func lockDir(dir string) (unlock func() error, err error) {
	return func() error { return nil }, nil
}
