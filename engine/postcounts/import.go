package postcounts

import (
	"cmp"
	"fmt"
	"iter"
	"slices"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/cold"
	"github.com/tally-dev/tally/engine/sealed"
)

// importBatch is how many rows Import sorts at a time (48 MiB). Rows
// sorted by id, as a dump of a table keyed by post id is, give one window
// build per window; unsorted rows cost a rebuild of a window each time a
// batch touches it again.
const importBatch = 1 << 20

type importRow struct {
	id uint64
	c  engine.Counts
}

// Import sets the counts of every (id, counts) row, as Set does (set
// semantics: the row replaces the post's counts; negative counts are 0;
// zero counts delete the post; for an id given twice the last row wins).
// Rows of windows old enough to be sealed (see Options.OpenAge, with the
// Options.Now clock) are written straight into sealed windows — into
// files when they are also past ColdAge — rebuilding a window that
// already exists together with its delta, in one pass per window and
// batch; rows of recent windows, of windows a job holds, and rows too few
// to be worth rewriting their window for (under an eighth of it) go
// through Set. It needs the same exclusive access as Add.
func (s *Store) Import(rows iter.Seq2[uint64, engine.Counts]) error {
	var buf []importRow
	for id, c := range rows {
		buf = append(buf, importRow{id, c})
		if len(buf) == importBatch {
			if err := s.importRows(buf); err != nil {
				return err
			}
			buf = buf[:0]
		}
	}
	return s.importRows(buf)
}

func (s *Store) importRows(rows []importRow) error {
	if len(rows) == 0 {
		return nil
	}
	slices.SortStableFunc(rows, func(a, b importRow) int { return cmp.Compare(a.id, b.id) })
	// Keep the last row of each id.
	out := rows[:0]
	for i, r := range rows {
		if i+1 < len(rows) && rows[i+1].id == r.id {
			continue
		}
		v := fromCounts(r.c)
		for f := range v {
			v[f] = max(v[f], 0)
		}
		r.c = toCounts(v)
		out = append(out, r)
	}
	rows = out
	nowMs := s.opts.Now().UnixMilli()
	openEnd := nowMs - max(s.opts.OpenAge, 0).Milliseconds()
	coldEnd := int64(-1 << 63)
	if s.opts.Dir != "" && s.opts.ColdAge > 0 {
		coldEnd = nowMs - s.opts.ColdAge.Milliseconds()
	}
	for len(rows) > 0 {
		num, lo, last := s.windowOf(rows[0].id)
		n := 1
		for n < len(rows) && rows[n].id <= last {
			n++
		}
		batch := rows[:n]
		rows = rows[n:]
		end := (num + 1) * s.opts.WindowMillis
		i := s.find(batch[0].id)
		var w *window
		if i >= 0 {
			w = s.wins[i]
		}
		// A few rows for a large window go to its delta like any write
		// (compaction folds them later) rather than rewriting the window.
		small := w != nil && len(batch)*8 < baseLen(w)
		if end > openEnd || (w != nil && (w.open != nil || w.busy)) || small {
			for _, r := range batch {
				s.Set(r.id, r.c)
			}
			continue
		}
		if w == nil {
			w = &window{num: num, lo: lo, last: last}
		}
		if err := s.rebuild(w, batch, end <= coldEnd, i < 0); err != nil {
			return err
		}
	}
	return nil
}

// rebuild writes window w's new base: its current counts (base + delta)
// with rows replacing those of their posts. The window is new when
// fresh.
func (s *Store) rebuild(w *window, rows []importRow, toFile, fresh bool) error {
	var delta cold.Source = cold.NewSliceSource(nil, nil)
	if w.delta != nil {
		delta = s.deltaSource(w)
	}
	fill := func(sink cold.Sink) error {
		i := 0
		emit := func(id uint64, c engine.Counts) error { return sink.Add(id, c) }
		err := cold.Merge(sinkFunc(func(id uint64, c engine.Counts) error {
			for ; i < len(rows) && rows[i].id < id; i++ {
				if err := emit(rows[i].id, rows[i].c); err != nil {
					return err
				}
			}
			if i < len(rows) && rows[i].id == id {
				i++
				return emit(id, rows[i-1].c)
			}
			return emit(id, c)
		}), w.source(), delta)
		if err != nil {
			return err
		}
		for ; i < len(rows); i++ {
			if err := emit(rows[i].id, rows[i].c); err != nil {
				return err
			}
		}
		return nil
	}
	var (
		sw   *sealed.Window
		f    *cold.File
		path string
		err  error
	)
	if toFile {
		path = s.newPath(w.num)
		err = cold.CreateWindow(path, s.opts.Sealed, func(wr *sealed.Writer) error { return fill(wr) })
		if err == nil {
			f, err = cold.Open(path, s.cache)
		}
	} else {
		var ferr error
		sw, err = sealed.Build(func(yield func(uint64, engine.Counts) bool) {
			ferr = fill(sinkFunc(func(id uint64, c engine.Counts) error {
				if !yield(id, c) {
					return errStop
				}
				return nil
			}))
		}, s.opts.Sealed)
		if err == nil && ferr != nil {
			err = ferr
		}
	}
	if err != nil {
		return fmt.Errorf("postcounts: import into window %d: %w", w.num, err)
	}
	if w.cold != nil {
		w.cold.Close() // superseded; RemoveUnreferenced deletes the file
	}
	w.sealed, w.cold, w.coldPath, w.delta = sw, f, path, nil
	n := baseLen(w)
	s.live += n - w.live
	w.live = n
	switch {
	case fresh && n > 0:
		s.insertWindow(w)
	case !fresh && n == 0:
		s.removeWindow(w)
	}
	if n == 0 && f != nil {
		f.Close()
	}
	return nil
}
