//go:build !linux

package follows

import (
	"errors"
	"os"
)

// punchHoleOS has no portable form: the caller writes zeros instead.
func punchHoleOS(*os.File, int64, int64) error { return errors.ErrUnsupported }
