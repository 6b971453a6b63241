package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/tally-dev/tally/web/demoseed"
)

// demoSeedCmd is `tally demo-seed`: it fills a store with the web demo's
// small world, once (a second run changes nothing).
func demoSeedCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("demo-seed", stderr)
	var sf storeFlags
	sf.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	store, err := sf.open(ctx)
	if err != nil {
		return err
	}
	defer store.Close()
	sum, already, err := demoseed.SeedDir(ctx, store, sf.data)
	if err != nil {
		return err
	}
	if already {
		fmt.Fprintf(stdout, "%s already holds the demo world (%s): nothing to do\n", filepath.Join(sf.data, demoseed.FileName), sum)
		return nil
	}
	same := "-data"
	if kinds := store.ReactionKinds(); len(kinds) > 1 {
		// A start without them is refused: they have counts now.
		same = "-data and -reactions " + strings.Join(kinds, ",")
	}
	fmt.Fprintf(stdout, "seeded %s: %v\nstart the server with the same %s, then open /demo\n", backendName(sf), sum, same)
	return nil
}
