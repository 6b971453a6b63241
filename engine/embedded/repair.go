package embedded

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/tally-dev/tally/engine/snapshot"
	"github.com/tally-dev/tally/engine/wal"
)

// Repair is the way out when Open refuses the data directory dir because a
// snapshot or the log is damaged (`tally repair`). It must not run while a
// server has dir open (the directory lock makes it fail if one does). It
// changes as little as it can and returns a report, line by line, of what
// it found, what it did and exactly what that lost:
//
//   - Snapshots that do not verify, newer than the newest one that does,
//     are renamed to *.corrupt (kept for inspection, never loaded) — but
//     only if that older snapshot (or the empty state, when the log still
//     starts at record 1) plus the log from its index form a complete
//     history. The engine keeps the log from the older of its two
//     snapshots on for this, so this loses nothing, unless the log itself
//     had to be cut below the corrupt snapshot's index (reported).
//   - Log segments that are damaged but hold only records that snapshot
//     already covers are deleted, with every older segment: nothing lost.
//   - Other log damage is cut off by wal.Repair at the first bad record:
//     every record after it is dropped, and the mutations in them are lost
//     (under -fsync always a hole left by a power failure holds records
//     never acknowledged; bit rot can hold acknowledged ones). The report
//     gives the bytes dropped and the last record kept.
//   - Log segments missing at the end (wal.manifest names a newer segment
//     than the newest present) are accepted as lost: the report says so;
//     the records in them are lost unless a snapshot covers them.
//   - A log that ends before the snapshot (log files lost) is restarted
//     right after the snapshot: nothing lost that the snapshot holds.
//
// A directory of another format (engine.FormatError) is not damage:
// Repair refuses it as Open does and changes nothing. If no snapshot
// verifies and the log does not start at record 1, or
// records between the snapshot and the log are missing, Repair changes no
// snapshot and returns an error: only a backup can restore that state.
// Finally it recovers the directory as Open would, to prove that it loads.
func Repair(dir string) (report string, err error) {
	var rep strings.Builder
	say := func(format string, args ...any) { fmt.Fprintf(&rep, format+"\n", args...) }
	if _, err := os.Stat(dir); err != nil {
		return "", fmt.Errorf("embedded: repair: %w", err)
	}
	unlock, err := lockDir(dir)
	if err != nil {
		return "", err
	}
	defer unlock()
	if err := snapshot.RemoveTemp(dir); err != nil {
		return "", err
	}
	list, err := snapshot.List(dir)
	if err != nil {
		return "", err
	}

	// The newest snapshot that loads is the base; newer ones are corrupt.
	var base *snapshot.Info
	var baseIndex uint64
	var bad []snapshot.Info
	for i := len(list) - 1; i >= 0; i-- {
		im, err := loadSnapshot(list[i], true, tables{})
		if err == nil {
			base, baseIndex = &list[i], im.index
			break
		}
		var ce *snapshot.CorruptError
		if !errors.As(err, &ce) {
			return rep.String(), repairErr(err, dir)
		}
		say("snapshot %s does not verify: %v", list[i].Path, ce)
		bad = append(bad, list[i])
	}
	baseName := "the empty state"
	if base != nil {
		baseName = "snapshot " + base.Path
		if len(bad) > 0 {
			say("newest snapshot that verifies: %s (log record %d)", base.Path, baseIndex)
		}
	} else if len(bad) > 0 {
		say("no snapshot verifies; the only possible base is the empty state")
	}

	// The log: open it, fixing damage one spot at a time.
	logger := slog.New(reportHandler{&rep})
	wopts := wal.Options{Sync: wal.SyncAlways, FirstIndex: baseIndex + 1, Logger: logger}
	var first, last uint64
	cut, missing := false, false
	for {
		l, err := wal.Open(dir, wopts)
		if err == nil {
			first, last = l.FirstIndex(), l.LastIndex()
			if err := l.Close(); err != nil {
				return rep.String(), err
			}
			if cut {
				say("the log now ends at record %d; every record after %d that was in the dropped bytes is lost",
					last, max(last, baseIndex))
			} else if missing {
				say("the log now ends at record %d", last)
			}
			break
		}
		var ce *wal.CorruptError
		if !errors.As(err, &ce) {
			return rep.String(), repairErr(err, dir)
		}
		if ce.Missing {
			say("log incomplete: %s is missing: %s", filepath.Base(ce.File), ce.Reason)
			if _, err := wal.Repair(dir); err != nil {
				return rep.String(), err
			}
			say("accepted the loss of the missing segments: the acknowledged records in them are lost " +
				"(a snapshot still holds what it covered)")
			missing = true
			continue
		}
		say("log damaged: %s at offset %d: %s", ce.File, ce.Offset, ce.Reason)
		segs, err := listSegments(dir)
		if err != nil {
			return rep.String(), err
		}
		d := segIndex(segs, filepath.Base(ce.File))
		covered := 0 // leading segments whose records are all in the base
		for covered+1 < len(segs) && segs[covered+1].first <= baseIndex+1 {
			covered++
		}
		switch {
		case d >= 0 && d < covered:
			if err := removeSegments(dir, segs[:d+1]); err != nil {
				return rep.String(), err
			}
			say("deleted log segments %s..%s: every record in them is in %s, so nothing is lost",
				segs[0].name, segs[d].name, baseName)
		case d > 0 && d == covered && ce.Offset == 0:
			// The damage is where the segment meets the one before it,
			// and everything before it is covered: drop those.
			if err := removeSegments(dir, segs[:d]); err != nil {
				return rep.String(), err
			}
			say("deleted log segments %s..%s: every record in them is in %s, so nothing is lost",
				segs[0].name, segs[d-1].name, baseName)
		default:
			dropped, err := wal.Repair(dir)
			if err != nil {
				return rep.String(), err
			}
			say("cut the log at that spot: %d bytes from there on dropped", dropped)
			cut = true
		}
	}

	if first > baseIndex+1 {
		return rep.String(), fmt.Errorf("embedded: repair: %s ends at log record %d but the log starts at %d: records %d..%d "+
			"are lost; nothing was changed for them. Restore a backup", baseName, baseIndex, first, baseIndex+1, first-1)
	}
	if last < baseIndex {
		segs, err := listSegments(dir)
		if err != nil {
			return rep.String(), err
		}
		if err := removeSegments(dir, segs); err != nil {
			return rep.String(), err
		}
		if err := wal.RemoveManifest(dir); err != nil {
			return rep.String(), err
		}
		l, err := wal.Open(dir, wopts)
		if err != nil {
			return rep.String(), err
		}
		if err := l.Close(); err != nil {
			return rep.String(), err
		}
		say("the log ended at record %d, before %s at record %d: restarted it after the snapshot "+
			"(every record it held is in the snapshot)", last, baseName, baseIndex)
		last = baseIndex
	}
	for _, b := range bad {
		to, err := snapshot.MoveAside(b.Path)
		if err != nil {
			return rep.String(), err
		}
		lost := "nothing is lost"
		if last < b.Index {
			lost = fmt.Sprintf("records %d..%d it covered are in no log and are lost", last+1, b.Index)
		}
		say("moved %s aside to %s; the state is %s plus log records %d..%d: %s", b.Path, to, baseName, baseIndex+1, last, lost)
	}

	// Prove the directory loads now, as Open will load it.
	im, l, rec, err := recoverDir(dir, wal.Options{Sync: wal.SyncAlways, Logger: logger}, tables{})
	if err != nil {
		return rep.String(), fmt.Errorf("embedded: repair: the directory still does not load: %w", err)
	}
	l.Close()
	if rep.Len() == 0 {
		say("nothing to repair")
	}
	say("the directory loads: %s plus %d log records, up to record %d", baseName, rec.records, im.index)
	return rep.String(), nil
}

// repairErr is the error Repair stops with on err, which is not damage:
// a directory of another format is refused as Open refuses it.
func repairErr(err error, dir string) error {
	if fe := formatError(err, dir); fe != nil {
		return fe
	}
	return fmt.Errorf("embedded: repair: %w", err)
}

func segIndex(segs []segFile, name string) int {
	for i, s := range segs {
		if s.name == name {
			return i
		}
	}
	return -1
}

// removeSegments deletes segments oldest first, so that an interrupted
// removal leaves a log that still starts with a contiguous run.
func removeSegments(dir string, segs []segFile) error {
	for _, s := range segs {
		if err := os.Remove(filepath.Join(dir, s.name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("embedded: repair: %w", err)
		}
	}
	return snapshot.SyncDir(dir)
}

// reportHandler turns the log package's warnings (a torn tail cut off)
// into report lines.
type reportHandler struct{ b *strings.Builder }

func (h reportHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h reportHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h reportHandler) WithGroup(string) slog.Handler            { return h }
func (h reportHandler) Handle(_ context.Context, r slog.Record) error {
	h.b.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(h.b, " %s=%v", a.Key, a.Value)
		return true
	})
	h.b.WriteByte('\n')
	return nil
}
