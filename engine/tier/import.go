package tier

import (
	"fmt"
	"iter"
	"time"
)

// Import adds the records of seq, in strictly increasing id order,
// replacing those of ids the tier holds. A window already due for sealing
// at now is built straight into a sealed window, without an open table or
// delta in between:
//   - a window with no records yet, from seq's records, a block at a time;
//   - a sealed window that no job holds, when seq brings it CompactMin
//     records or an eighth as many as it has, by merging them (and its
//     delta) into its blocks: a file of many batches, each a slice of a
//     window, rebuilds a window a few times instead of leaving a delta of
//     its last batch behind.
//
// Every other window takes seq's records as Puts (its open table, or its
// delta, which the next jobs fold back): a file in no id order brings
// each window a few records a batch. Call Maintain(now), or let the
// maintenance loop run, to move windows to files as the policy says.
// Import needs the write lock. An error (ids out of order, a cold block
// that cannot be read) leaves the records before it imported.
func (t *Tier[R]) Import(seq iter.Seq2[uint64, R], now time.Time) error {
	ms := now.UnixMilli()
	var (
		cur  *window
		mode importMode
		ww   *windowWriter // importDirect: the window being written
		buf  *bytesBuffer
		over *openTable // importMerge: the window's records from seq
		last uint64
		any  bool
	)
	finish := func() error {
		switch mode {
		case importDirect:
			if err := ww.close(); err != nil {
				return err
			}
			return t.install(cur, buf.b)
		case importMerge:
			return t.mergeImport(cur, over)
		}
		return nil
	}
	for id, r := range seq {
		if any && id <= last {
			return fmt.Errorf("tier: Import: id %d after %d: %w", id, last, errOrder)
		}
		last, any = id, true
		if cur == nil || id > cur.last {
			if err := finish(); err != nil {
				return err
			}
			cur = t.windowFor(id)
			mode = t.importModeOf(cur, ms)
			switch mode {
			case importDirect:
				buf = &bytesBuffer{b: buf.reuse()}
				ww = newWindowWriter(buf, t.tag, t.sh)
			case importMerge:
				over = newOpenTable()
			}
		}
		switch mode {
		case importDirect:
			row := t.codec.Split(r)
			if err := ww.add(id, &row); err != nil {
				return err
			}
			cur.n++
			t.live++
		case importMerge:
			row := t.codec.Split(r)
			over.put(id-cur.lo+1, &t.layout, &row)
		default:
			if err := t.Put(id, r); err != nil {
				return err
			}
		}
	}
	err := finish()
	t.trim()
	return err
}

// importMode is how Import writes a window's records.
type importMode uint8

const (
	importPut    importMode = iota // Put, one record at a time
	importDirect                   // encode a sealed window from the records alone
	importMerge                    // merge them into the window's sealed blocks
)

func (t *Tier[R]) importModeOf(w *window, ms int64) importMode {
	if !t.sealDue(t.win.End(w.num), ms) || w.busy || w.frozen != nil {
		return importPut
	}
	switch w.body.(type) {
	case *openBody:
		if w.n == 0 && w.delta == nil {
			return importDirect
		}
	case *sealedBody:
		return importMerge
	}
	return importPut
}

// install makes the window image raw w's sealed body; w has no records.
func (t *Tier[R]) install(w *window, raw []byte) error {
	s, err := newSegment(&t.arena, raw, t.tag, t.sh, false)
	if err != nil {
		return err
	}
	s.installed = true
	w.body = &sealedBody{s}
	return nil
}

// mergeImport writes over's records into w, a sealed window no job holds:
// by rebuilding its blocks with its delta and over's records when over
// holds CompactMin records or an eighth as many as w, as Puts into its
// delta otherwise.
func (t *Tier[R]) mergeImport(w *window, over *openTable) error {
	if over.n < t.opts.CompactMin && over.n*8 < w.n {
		var row Row
		for _, key := range over.sorted(&t.layout) {
			over.get(key, &t.layout, &row)
			if err := t.put(w.lo+key-1, t.codec.Join(row), unknown); err != nil {
				return err
			}
		}
		return nil
	}
	old := w.body.(*sealedBody)
	n := 0
	s, err := buildSegment(&t.arena, t.tag, t.sh, func(add func(id uint64, r *Row) error) error {
		return mergeWindow(old, w.lo, &t.layout, []*openTable{w.delta, over}, func(id uint64, r *Row) error {
			n++
			return add(id, r)
		})
	})
	if err != nil {
		return err
	}
	old.s.release(&t.arena)
	s.installed = true
	w.body, w.delta = &sealedBody{s}, nil
	t.live += n - w.n
	w.n = n
	return nil
}

// bytesBuffer is a minimal growable writer whose storage Import reuses
// from window to window.
type bytesBuffer struct{ b []byte }

func (w *bytesBuffer) Write(p []byte) (int, error) { w.b = append(w.b, p...); return len(p), nil }

func (w *bytesBuffer) reuse() []byte {
	if w == nil {
		return nil
	}
	return w.b[:0]
}
