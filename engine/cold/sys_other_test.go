//go:build !linux

package cold

import "errors"

func dropPageCache(*File) error { return errors.New("not supported on this OS") }
