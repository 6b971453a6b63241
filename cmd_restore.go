package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/tally-dev/tally/engine/embedded"
)

// restoreCmd is `tally restore`: it makes a new data directory from a
// backup file.
func restoreCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("restore", stderr)
	in := fs.String("in", "", "backup file made by tally backup")
	data := fs.String("data", "", "new (empty) data directory to create")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *in == "" || *data == "" {
		return usageError{errors.New("-in and -data are required")}
	}
	if err := embedded.Restore(*in, *data); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "restored %s into %s; start the server with: tally -data %s\n", *in, *data, *data)
	return nil
}
