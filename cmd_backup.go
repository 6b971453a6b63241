package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/tally-dev/tally/engine/embedded"
)

// backupCmd is `tally backup`: a consistent copy of a data directory in
// one file, taken while a server may be running on it.
func backupCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("backup", stderr)
	data := fs.String("data", "./data", "data directory to back up (a server may be running on it)")
	out := fs.String("out", "", "backup file to write")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *out == "" {
		return usageError{errors.New("-out must name the backup file")}
	}
	start := time.Now()
	index, err := embedded.BackupFile(ctx, *data, *out)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "backed up %s to %s (through log record %d) in %s\nrestore with: tally restore -in %s -data NEWDIR\n",
		*data, *out, index, time.Since(start).Round(time.Millisecond), *out)
	return nil
}
