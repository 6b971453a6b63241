//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package embedded

// lockDir is a no-op where flock is not available; running Repair or
// Restore on a directory a server has open is then the operator's mistake
// to avoid.
func lockDir(dir string) (unlock func() error, err error) {
	return func() error { return nil }, nil
}
