package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/importfile"
	"github.com/tally-dev/tally/engine/redisstore"
	"github.com/tally-dev/tally/web/memory"
)

// importCmd is `tally import`: it bulk-loads post counts and authors from
// CSV or NDJSON files into the store of -data or -redis, in durable
// batches, rejecting bad rows with a message and loading the rest.
func importCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("import", stderr)
	var sf storeFlags
	sf.register(fs)
	// The import builds the same tables as the server and paces its GC
	// alike: its peak RSS was twice the tables' size with Go's pacing.
	var mem memory.Settings
	mem.Register(fs)
	batch := fs.Int("batch", 10000, "rows per durable batch")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	files := fs.Args()
	if len(files) == 0 {
		return usageError{errors.New("name at least one FILE (CSV or .ndjson/.jsonl, - for stdin)")}
	}
	if err := mem.Check(sf.memoryBudget); err != nil {
		return usageError{err}
	}
	defer mem.Apply()()
	if sf.fsync == "always" {
		sf.fsync = "batch" // one fsync per batch is what Import promises anyway
	}
	sf.batchJob = true
	store, err := sf.open(ctx)
	if err != nil {
		return err
	}
	defer store.Close()
	imp, ok := store.(engine.Importer)
	if !ok {
		return errors.New("this backend cannot import")
	}
	// The columns of reaction kinds are those of the store's kinds table:
	// the store opened as a server start would, reconciling -reactions
	// with the data's table (a new kind is added, one left out that still
	// has counts refused), so the import and the next server cannot
	// disagree on what a kind's id is.
	kinds := imp.ImportKinds()
	var total, rejected int
	progress := importProgress{useBar: isTerminal(stderr) && fs.Lookup("log-format").Value.String() == "text"}
	start := time.Now()
	rows := make([]engine.ImportRow, 0, *batch)
	flush := func() error {
		if len(rows) == 0 {
			return nil
		}
		if err := imp.Import(ctx, rows); err != nil {
			// Redis's errors reach clients as the bare ErrUnavailable;
			// an operator needs what was behind it and how far it got.
			if cause := redisstore.Cause(err); cause != err {
				return fmt.Errorf("import stopped after %d rows: %w (cause: %v)", total, err, cause)
			}
			return fmt.Errorf("import stopped after %d rows: %w", total, err)
		}
		total += len(rows)
		rows = rows[:0]
		progress.report(stderr, total, float64(total)/time.Since(start).Seconds(), rejected)
		return nil
	}
	for _, name := range files {
		var in io.Reader = os.Stdin
		if name != "-" {
			f, err := os.Open(name)
			if err != nil {
				return err
			}
			defer f.Close()
			in = f
			if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() {
				progress.total += fi.Size()
			}
		}
		in = &countingReader{r: in, n: &progress.done}
		r, err := importfile.NewReader(in, name, importfile.FormatOf(name), &kinds)
		if err != nil {
			return err
		}
		reported := 0 // ignored columns reported so far
		for {
			row, err := r.Next()
			// Each ignored column is reported once, as it is first seen
			// (a CSV's with its header), so that a misspelt count column
			// is not silently imported as zeros.
			if ignored := r.Ignored(); len(ignored) > reported {
				progress.log(stderr, slog.LevelWarn, "import: columns ignored (no such count or reaction kind)",
					"file", name, "columns", strings.Join(ignored[reported:], ","), "reactions", strings.Join(store.ReactionKinds(), ","))
				reported = len(ignored)
			}
			if err == io.EOF {
				break
			}
			var re *importfile.RowError
			if errors.As(err, &re) {
				rejected++
				progress.log(stderr, slog.LevelWarn, "import: row rejected", "err", re.Error())
				continue
			}
			if err != nil {
				return err
			}
			rows = append(rows, row)
			if len(rows) == cap(rows) {
				if err := flush(); err != nil {
					return err
				}
			}
		}
	}
	if err := flush(); err != nil {
		return err
	}
	progress.finish(stderr)
	fmt.Fprintf(stdout, "imported %d rows in %s; rejected %d\n", total, time.Since(start).Round(time.Millisecond), rejected)
	if rejected > 0 {
		return fmt.Errorf("%d rows rejected (see above)", rejected)
	}
	return nil
}

// importProgress reports the import's progress from the bytes read of
// the input files whose size is known (stdin has none: it then only
// counts rows): as a bar redrawn in place on a terminal with text logs,
// otherwise as a log line every few seconds, so that JSON logs and
// redirected output stay one record per line.
type importProgress struct {
	done, total int64
	useBar      bool
	drawn       bool // the bar is on the current line
	logged      time.Time
}

func (p *importProgress) report(w io.Writer, rows int, perSecond float64, rejected int) {
	if p.useBar {
		fmt.Fprintf(w, "\r%s %d rows (%.0f rows/s), rejected %d ", p.bar(), rows, perSecond, rejected)
		p.drawn = true
		return
	}
	if time.Since(p.logged) < 2*time.Second {
		return
	}
	p.logged = time.Now()
	attrs := []any{"rows", rows, "rows_per_s", int64(perSecond), "rejected", rejected}
	if p.total > 0 {
		attrs = append(attrs, "percent", min(100*p.done/p.total, 100))
	}
	slog.Info("import: progress", attrs...)
}

// log writes a log line below the bar, if one is drawn.
func (p *importProgress) log(w io.Writer, level slog.Level, msg string, args ...any) {
	p.finish(w)
	slog.Log(context.Background(), level, msg, args...)
}

func (p *importProgress) finish(w io.Writer) {
	if p.drawn {
		fmt.Fprintln(w)
		p.drawn = false
	}
}

// isTerminal reports whether w is a terminal (a character device).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

func (p *importProgress) bar() string {
	if p.total <= 0 {
		return "importing:"
	}
	const width = 30
	frac := min(float64(p.done)/float64(p.total), 1)
	n := int(frac * width)
	return fmt.Sprintf("[%s%s] %3.0f%%", strings.Repeat("=", n), strings.Repeat(" ", width-n), frac*100)
}

type countingReader struct {
	r io.Reader
	n *int64
}

func (c *countingReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	*c.n += int64(n)
	return n, err
}
