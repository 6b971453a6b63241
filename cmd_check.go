package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/embedded"
)

// Exit codes of tally check beyond 0 (every count is what it counts), 1
// (the check failed) and 2 (usage).
const (
	exitDrifts   = 3 // drifts found and left (without -repair), or counts unsettled
	exitRepaired = 4 // drifts found, every one repaired
)

// checkCmd is `tally check`: it recounts every derived count from what it
// counts, in a stopped server's data directory (-data) or a live Redis
// keyspace (-redis), prints each drift and a summary, and with -repair
// sets each drifted count to its recount.
func checkCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("check", stderr)
	var sf storeFlags
	sf.register(fs)
	repair := fs.Bool("repair", false, "set each drifted count to its recount (a log record on -data, an atomic script on -redis) and say how many")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("unexpected arguments %q", fs.Args())}
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()

	start := time.Now()
	opts := engine.CheckOptions{Repair: *repair, Drift: func(d engine.Drift) { fmt.Fprintln(stdout, driftLine(d)) }}
	var res engine.CheckResult
	var err error
	if sf.redis != "" {
		sf.checkJob = true
		var store engine.Store
		if store, err = sf.open(ctx); err != nil {
			return err
		}
		defer store.Close()
		checker, ok := store.(engine.Checker)
		if !ok {
			return errors.New("this backend cannot check its counts")
		}
		res, err = checker.Check(ctx, opts)
	} else {
		if sf.data == "" {
			return usageError{errors.New("-data must name a directory")}
		}
		res, err = embedded.CheckDir(ctx, sf.data, opts, sf.tables(), slog.Default())
	}
	if err != nil {
		return err
	}
	return printCheckSummary(stdout, res, *repair, time.Since(start))
}

// driftLine is one drift as tally check prints it: what, which id, the
// stored value, the recounted one.
func driftLine(d engine.Drift) string {
	line := fmt.Sprintf("drift %s %d: stored %d, recounted %d", d.Count, d.ID, d.Stored, d.Recounted)
	switch {
	case d.Unsettled:
		line = fmt.Sprintf("unsettled %s %d: stored %d, recounted %d; it changed while it was checked, check again", d.Count, d.ID, d.Stored, d.Recounted)
	case d.Repaired:
		line += " (repaired)"
	}
	return line
}

// printCheckSummary prints the notes, a line per derived count and the
// totals, and returns the exit status they call for.
func printCheckSummary(w io.Writer, res engine.CheckResult, repair bool, took time.Duration) error {
	for _, n := range res.Notes {
		fmt.Fprintln(w, "note:", n)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "count\tchecked\tdrifts\trepaired\tunsettled\tskipped (imported)")
	for _, t := range res.Tallies {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\n", t.Count, t.Checked, t.Drifts, t.Repaired, t.Unsettled, t.Skipped)
	}
	tw.Flush()
	tot := res.Totals()
	fmt.Fprintf(w, "checked %d counts in %s: %d drifts, %d repaired, %d unsettled\n",
		tot.Checked, took.Round(time.Millisecond), tot.Drifts, tot.Repaired, tot.Unsettled)
	switch {
	case tot.Drifts == 0 && tot.Unsettled == 0:
		return nil
	case repair && tot.Repaired == tot.Drifts && tot.Unsettled == 0:
		return exitStatus{exitRepaired, fmt.Sprintf("%d drifts found and repaired", tot.Drifts)}
	case repair:
		return exitStatus{exitDrifts, fmt.Sprintf("%d drifts, %d repaired, %d unsettled: check again", tot.Drifts, tot.Repaired, tot.Unsettled)}
	case tot.Drifts == 0:
		return exitStatus{exitDrifts, fmt.Sprintf("%d counts changed while they were checked: check again", tot.Unsettled)}
	}
	return exitStatus{exitDrifts, fmt.Sprintf("%d drifts found (tally check -repair fixes them)", tot.Drifts)}
}
