package tier

import (
	"fmt"
	"iter"
	"time"
)

// Import adds the records of seq, in strictly increasing id order,
// replacing those of ids the table holds. A window already due for sealing
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
func (p *Posts) Import(seq iter.Seq2[uint64, Post], now time.Time) error {
	ms := now.UnixMilli()
	var (
		cur  *window
		mode importMode
		pw   *postWriter // importDirect: the window being written
		buf  bytesBuffer
		over *rowTable // importMerge: the window's records from seq
		last uint64
		any  bool
	)
	finish := func() error {
		switch mode {
		case importDirect:
			if err := pw.close(); err != nil {
				return err
			}
			return p.install(cur, buf.b)
		case importMerge:
			return p.mergeImport(cur, over)
		}
		return nil
	}
	for id, post := range seq {
		if any && id <= last {
			return fmt.Errorf("tier: Import: id %d after %d: %w", id, last, errOrder)
		}
		last, any = id, true
		if cur == nil || id > cur.last {
			if err := finish(); err != nil {
				return err
			}
			cur = p.windowFor(id)
			mode = p.importModeOf(cur, ms)
			switch mode {
			case importDirect:
				buf.reset()
				pw = newPostWriter(&buf)
			case importMerge:
				over = newRowTable()
			}
		}
		switch mode {
		case importDirect:
			r := post.row()
			if err := pw.add(id, &r); err != nil {
				return err
			}
			p.adjust(cur, 1)
		case importMerge:
			r := post.row()
			over.put(id-cur.lo+1, &p.layout, &r)
		default:
			if err := p.Put(id, post); err != nil {
				return err
			}
		}
	}
	err := finish()
	p.trim()
	return err
}

// importMode is how Import writes a window's records.
type importMode uint8

const (
	importPut    importMode = iota // Put, one record at a time
	importDirect                   // encode a sealed window from the records alone
	importMerge                    // merge them into the window's sealed blocks
)

func (p *Posts) importModeOf(w *window, ms int64) importMode {
	if !p.sealDue(p.win.End(w.num), ms) || w.job != nil {
		return importPut
	}
	switch w.body.kind() {
	case Open:
		if w.n == 0 && w.delta == nil {
			return importDirect
		}
	case Sealed:
		return importMerge
	}
	return importPut
}

// install makes the window image raw w's sealed body; w has no records.
func (t *table) install(w *window, raw []byte) error {
	s, err := t.newSealed(raw, false)
	if err != nil {
		return err
	}
	s.installed = true
	w.body = s
	return nil
}

// mergeImport writes over's records into w, a sealed window no job holds:
// by rebuilding its blocks with its delta and over's records when over
// holds CompactMin records or an eighth as many as w, as Puts into its
// delta otherwise.
func (p *Posts) mergeImport(w *window, over *rowTable) error {
	if over.n < p.opts.CompactMin && over.n*8 < w.n {
		var r postRow
		for _, key := range over.sorted(&p.layout) {
			over.get(key, &p.layout, &r)
			if err := p.put(w.lo+key-1, r.post(), unknown); err != nil {
				return err
			}
		}
		return nil
	}
	var buf bytesBuffer
	pw := newPostWriter(&buf)
	n := 0
	if err := p.merge(w.body, w.lo, []*rowTable{asRows(w.delta), over}, func(id uint64, r *postRow) error {
		n++
		return pw.add(id, r)
	}); err != nil {
		return err
	}
	if err := pw.close(); err != nil {
		return err
	}
	old := w.body
	if err := p.install(w, buf.b); err != nil {
		return err
	}
	p.retire(old)
	w.delta = nil
	p.adjust(w, n-w.n)
	return nil
}
