package main

import (
	"fmt"
	"io"

	"github.com/tally-dev/tally/engine/embedded"
)

// repairCmd is `tally repair`: after a start refused for damage, it sets
// aside what is corrupt and reports what is lost.
func repairCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("repair", stderr)
	data := fs.String("data", "./data", "data directory that failed to open (the server must be stopped)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	report, err := embedded.Repair(*data)
	if report != "" {
		fmt.Fprintln(stdout, report)
	}
	return err
}
