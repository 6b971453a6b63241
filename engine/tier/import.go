package tier

import (
	"fmt"
	"iter"
	"time"
)

// Import adds the records of seq, in strictly increasing id order, to an
// empty tier: the windows already due for sealing at now are encoded
// straight into sealed windows, a block at a time, without an open table
// in between; the others are put into open tables. Call Maintain(now)
// afterwards to move windows to files as the policy says. Import needs
// the write lock.
func (t *Tier[R]) Import(seq iter.Seq2[uint64, R], now time.Time) error {
	if len(t.wins) > 0 {
		return fmt.Errorf("tier: Import into a tier that holds %d windows", len(t.wins))
	}
	ms := now.UnixMilli()
	var (
		cur  *window
		ww   *windowWriter
		buf  *bytesBuffer
		last uint64
		any  bool
	)
	finish := func() error {
		if ww == nil {
			return nil
		}
		if err := ww.close(); err != nil {
			return err
		}
		s, err := newSegment(&t.arena, buf.b, t.tag, t.sh, false)
		if err != nil {
			return err
		}
		s.installed = true
		cur.body = &sealedBody{s}
		ww = nil
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
			if t.sealDue(t.win.End(cur.num), ms) {
				buf = &bytesBuffer{b: buf.reuse()}
				ww = newWindowWriter(buf, t.tag, t.sh)
			}
		}
		if ww == nil {
			if err := t.Put(id, r); err != nil {
				return err
			}
			continue
		}
		row := t.codec.Split(r)
		if err := ww.add(id, &row); err != nil {
			return err
		}
		cur.n++
		t.live++
	}
	err := finish()
	t.trim()
	return err
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
