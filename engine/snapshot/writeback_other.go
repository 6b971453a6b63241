//go:build !linux

package snapshot

import "os"

// syncEverySteps is how many writeback steps pass between fsyncs where
// there is no sync_file_range.
const syncEverySteps = 16

// writeback fsyncs the file every syncEverySteps steps, so that the final
// fsync never has the whole file to write.
type writeback struct{ steps int }

func (wb *writeback) step(f *os.File, _, _ int64) error {
	if wb.steps++; wb.steps%syncEverySteps != 0 {
		return nil
	}
	return f.Sync()
}
