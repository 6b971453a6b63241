package registry

import (
	"cmp"
	"slices"
	"time"
)

// Row is one post of an Import.
type Row struct {
	ID, Author uint64
}

// Import registers rows (Put semantics; for an id given twice the last
// row wins), building windows older than OpenAge at now straight into
// sealed runs, as postcounts.Import does for counts: a bulk import of
// old posts then never passes through open tables (about 24 bytes a post
// there, against 8 sealed). The rows of an old window that is empty, or
// in-memory sealed with nothing open and at least an eighth as many rows
// coming as it holds, are merged into a new run; the rest (recent
// windows, cold windows, windows a job holds, and rows too few to be
// worth rewriting their window for) go through Put and are sealed by
// compaction. It sorts rows in place. It needs the same exclusive access
// as Put; an error (a cold block that cannot be read) stops it midway,
// with the rows before it applied.
func (r *Registry) Import(rows []Row, now time.Time) error {
	slices.SortStableFunc(rows, func(a, b Row) int { return cmp.Compare(a.ID, b.ID) })
	out := rows[:0]
	for i, row := range rows {
		if i+1 < len(rows) && rows[i+1].ID == row.ID {
			continue // the last row of an id wins
		}
		out = append(out, row)
	}
	rows = out
	openEnd := now.UnixMilli() - max(r.opts.OpenAge, 0).Milliseconds()
	for len(rows) > 0 {
		_, _, last := r.win.Of(rows[0].ID)
		n, _ := slices.BinarySearchFunc(rows, last, func(x Row, id uint64) int {
			if x.ID <= id {
				return -1
			}
			return 1
		})
		group := rows[:n]
		rows = rows[n:]
		w := r.windowFor(group[0].ID)
		direct := r.win.End(w.num) <= openEnd && !w.busy && w.frozen == nil && w.cold == nil &&
			w.open.len() == 0 && (w.sealed == nil || len(group)*8 >= w.sealed.n)
		if !direct {
			for _, row := range group {
				if _, err := r.Put(row.ID, row.Author); err != nil {
					return err
				}
			}
			continue
		}
		added := mergeRun(w, group)
		w.live += added
		r.live += added
	}
	return nil
}

// mergeRun replaces w's in-memory run with its posts and group's
// (sorted, distinct; a row overrides the run) and returns how many posts
// are new.
func mergeRun(w *window, group []Row) int {
	over := make([]slot, len(group))
	for i, row := range group {
		over[i] = slot{row.ID - w.lo, row.Author}
	}
	b := newBuilder()
	n, before := 0, 0
	if w.sealed != nil {
		before = w.sealed.n
	}
	// In memory, the merge cannot fail.
	mergeEach(w.lo, over, w.sealed, nil, func(id, author uint64) bool {
		b.add(id, author)
		n++
		return true
	})
	w.sealed = b.finish()
	return n - before
}
