package tier

import (
	"errors"
	"fmt"
	"io"
	"slices"
)

// A View is the table as it was when Capture took it, for a snapshot
// written with no lock while the table takes writes. It copies no record:
// sealed and cold windows never change, so the view shares their bytes
// and files with the table; an open table and a delta do change, so
// Capture holds every window the way a job does while it rewrites one
// (Plan's freeze): the window's delta becomes the frozen one that readers
// read under a fresh delta, an open table takes no more writes in place
// (they go to the delta), and no job is planned on the window, so its
// body, file included, stays as the view has it. Release gives the
// windows back: the writes made meanwhile go back into the open tables,
// and a delta frozen by Capture goes back under the one written since.
// What the view costs in memory is therefore what was written while it
// was out, never a copy of the table. A window's erasure state is taken
// with it: its scrub flag, and a copy of a set's forgotten posts (few,
// and changed in place). A Scan (scan.go) that runs while the view is
// out holds an open window as well, and the view's Release leaves the
// writes made meanwhile in the delta until the scan's Finish folds them.
type View struct {
	t       *table
	wins    []windowImage
	held    []*window             // the windows Capture held, in wins' order
	head    func(*snapshotWriter) // the shape's own state as Capture found it
	nextGen uint64
}

// Capture returns a View of the table as it is now. Call it under the
// write lock, with no job pending (a job planned before would rewrite a
// window the view shares), and Release the view under the write lock
// once it is written; until then the table has no other view, and Load
// is refused. Readers and writers use the table as usual meanwhile; Plan
// leaves the held windows alone.
func (t *table) Capture() (*View, error) {
	switch {
	case t.jobs != 0:
		return nil, fmt.Errorf("tier: Capture with %d jobs pending", t.jobs)
	case t.view != nil:
		return nil, errors.New("tier: Capture while a view is out")
	}
	v := &View{t: t, wins: make([]windowImage, len(t.wins)), held: make([]*window, len(t.wins)),
		head: t.shape.head(), nextGen: t.nextGen}
	for i, w := range t.wins {
		b := w.body
		if s, ok := b.(*sealedWindow); ok {
			// The arena may point the window at a packed copy of its
			// bytes (trim) once released; the view keeps these.
			b = &sealedWindow{data: s.data, idx: s.idx}
		}
		w.job = &Job{t: t, w: w, epoch: t.epoch, base: w.body, fold: w.delta, hold: true}
		w.delta = nil
		// The erasure state is the window's as of now: a Forget or a
		// Scrub while the view is out changes the window's own.
		v.wins[i] = windowImage{num: w.num, lo: w.lo, n: w.n, body: b, frozen: w.job.fold,
			scrub: w.scrubbed(), forgot: slices.Clone(w.forgot())}
		v.held[i] = w
	}
	t.view = v
	return v, nil
}

// WriteTo writes the view's image, in the format of the table's WriteTo,
// with every cold window written as a sealed one (its file's bytes, each
// block's checksum checked as it is copied): the image stands alone, and
// Load needs no file. It needs no lock: it reads only what Capture froze.
func (v *View) WriteTo(w io.Writer) (int64, error) {
	return v.t.writeImageOf(w, v.head, v.wins, v.nextGen, true)
}

// Len is the number of records the view holds.
func (v *View) Len() int {
	n := 0
	for _, w := range v.wins {
		n += w.n
	}
	return n
}

// Scrubbing reports how many of the view's windows wait for a rewrite
// that drops records (Scrub, Forget; the table's Scrubbing): their bytes
// may still hold what was removed.
func (v *View) Scrubbing() int {
	n := 0
	for _, w := range v.wins {
		if w.scrub || (len(w.forgot) > 0 && w.body.kind() != Open) {
			n++
		}
	}
	return n
}

// Release gives the view's windows back to the table (see View): the
// writes made to an open window while it was held go into its table, and
// the delta Capture froze goes back under the delta written since, which
// costs the smaller of the two. Call it under the write lock; the view
// must not be used again.
func (t *table) Release(v *View) error {
	if t.view != v || v == nil {
		return errors.New("tier: Release of a view the table did not give out")
	}
	for _, w := range v.held {
		j := w.job
		if j == nil || !j.hold {
			return fmt.Errorf("tier: window %d lost its hold", w.num)
		}
		w.job = nil
		t.unfreeze(w, j.fold)
		if w.body.kind() == Open && w.delta == nil {
			// What a Scrub marked while the view held the window is
			// folded into the open table, which forgets it in place.
			w.setScrub(false)
		}
	}
	t.view = nil
	t.trim()
	return nil
}

// copyCold writes the bytes of the cold window f to w, reading them into
// *buf in pieces of up to 256 KiB of whole blocks and checking each block's
// checksum: a block that fails stops the copy with an error wrapping
// ErrCorrupt, so a damaged file never makes a snapshot that verifies.
// The file's header, index and footer were checked when it was opened.
func (t *table) copyCold(w io.Writer, f *coldWindow, buf *[]byte) error {
	const piece = 256 << 10
	copyRange := func(off, end uint64) error {
		b, err := f.readRaw(off, end, buf)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	}
	if err := copyRange(0, headerSize); err != nil {
		return err
	}
	x := &f.idx
	for i := 0; i < x.blocks; {
		off, end := x.span(i)
		j := i + 1
		for j < x.blocks {
			_, e := x.span(j)
			if e-off > piece {
				break
			}
			end = e
			j++
		}
		b, err := f.readRaw(off, end, buf)
		if err != nil {
			return err
		}
		for k := i; k < j; k++ {
			bo, be := x.span(k)
			if err := t.shape.checkBlock(x, k, b[bo-off:be-off]); err != nil {
				return corruptAt(f.name, int64(bo), "block %d: %v", k, err)
			}
		}
		if _, err := w.Write(b); err != nil {
			return err
		}
		i = j
	}
	return copyRange(x.end, uint64(f.size))
}
