package tier

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"time"

	"github.com/tally-dev/tally/engine/cold"
)

// Job rewrites one window: it seals an open table, folds a delta back into
// a sealed or cold window, or moves a sealed window to a file (folding its
// delta on the way). Plan makes jobs under the caller's write lock, Run
// does the work with no lock, Finish installs the result under the write
// lock again.
type Job[R any] struct {
	jobBase
	t    *Tier[R]
	w    *window
	base body       // the window's body when planned: immutable while the job runs
	fold *openTable // the delta frozen by Plan, folded into the result; may be nil
	seg  *segment
	file *coldFile
}

// jobBase is what the jobs of every table have: the epoch they were
// planned in, whether they write a file and which, and how Run went.
type jobBase struct {
	epoch  uint64
	toCold bool
	name   string // the file written when toCold
	err    error
	ran    bool
}

// run runs a job once: build makes the window in memory, or write writes
// it to the file dir/name, complete or not at all (cold.Create), and
// open opens what it wrote; the errors of a file job name it (what).
func (j *jobBase) run(what func() string, build func() error, dir string, write func(io.Writer) error, open func() error) error {
	if j.ran {
		return j.err
	}
	j.ran = true
	if !j.toCold {
		j.err = build()
		return j.err
	}
	j.err = cold.Create(filepath.Join(dir, j.name), write)
	if j.err == nil {
		j.err = open()
	}
	if j.err != nil {
		j.err = fmt.Errorf("tier: %s: %w", what(), j.err)
	}
	return j.err
}

// settle begins a Finish: it checks that the job ran, lets the name of
// its file go from the pending ones, and reports whether the job was
// planned before a Load (epoch), which voids it.
func (j *jobBase) settle(c *coldStore, epoch uint64) (stale bool, err error) {
	if !j.ran {
		return false, errors.New("tier: Finish of a job that did not Run")
	}
	c.doneFile(j.name)
	return j.epoch != epoch, nil
}

// What describes the job for logs: the window, its form and what it
// becomes.
func (j *Job[R]) What() string {
	to := Sealed
	if j.toCold {
		to = Cold
	}
	fold := 0
	if j.fold != nil {
		fold = j.fold.n
	}
	return fmt.Sprintf("window %d: %v to %v, folding %d records", j.w.num, j.base.kind(), to, fold)
}

func (t *Tier[R]) sealDue(end, now int64) bool { return sealDue(t.opts, end, now) }
func (t *Tier[R]) coldDue(end, now int64) bool { return coldDue(t.opts, end, now) }

// sealDue reports whether a window that ended at end (Unix ms) is to be
// sealed at now under opts; coldDue whether it is to move to a file.
func sealDue(opts Options, end, now int64) bool {
	if opts.OpenAge < 0 {
		return end <= now
	}
	return end+opts.OpenAge.Milliseconds() <= now
}

func coldDue(opts Options, end, now int64) bool {
	return opts.Dir != "" && opts.ColdAge > 0 && end+opts.ColdAge.Milliseconds() <= now
}

func (t *Tier[R]) deltaDue(w *window) bool {
	d := 0
	if w.delta != nil {
		d = w.delta.n
	}
	return deltaDue(t.opts, d, w.n)
}

// deltaDue reports whether a delta of d entries over a window of n is
// to be folded back under opts.
func deltaDue(opts Options, d, n int) bool {
	return d > 0 && d >= opts.CompactMin && d*8 >= n
}

// Plan returns the jobs due at now: open windows past OpenAge to seal,
// sealed windows past ColdAge (or the oldest, while MemoryBytes exceeds
// MemoryBudget) to move to files, and deltas large enough to fold back.
// It marks their windows busy and freezes their deltas; writes to them
// go to fresh deltas meanwhile. Call it under the write lock; every job
// must then be Run and Finished.
func (t *Tier[R]) Plan(now time.Time) []*Job[R] {
	var jobs []*Job[R]
	planDue(t.opts, now, len(t.wins), t.MemoryBytes, func(i int) windowState {
		w := t.wins[i]
		st := windowState{end: t.win.End(w.num), kind: w.body.kind(), busy: w.busy, deltaDue: t.deltaDue(w)}
		if b, ok := w.body.(*sealedBody); ok {
			st.sealedBytes = int64(b.s.sizeBytes())
		}
		return st
	}, func(i int, toCold bool) { jobs = append(jobs, t.plan(t.wins[i], toCold)) })
	return jobs
}

// windowState is what the maintenance policy (planDue) looks at in a
// window, whatever its table.
type windowState struct {
	end         int64 // Unix ms
	kind        Kind
	busy        bool
	deltaDue    bool
	sealedBytes int64 // a sealed window's memory
}

// planDue applies the maintenance policy of opts at now to n windows,
// oldest first, calling plan for each job due: seal an open window past
// OpenAge (into a file if it is past ColdAge too), move a sealed window
// past ColdAge to a file, fold a due delta back (into a new file for a
// cold window), and then, while mem() exceeds MemoryBudget, move the
// oldest sealed windows not yet planned to files. state(i) must reflect
// the jobs planned so far (a planned window is busy).
func planDue(opts Options, now time.Time, n int, mem func() int64, state func(i int) windowState, plan func(i int, toCold bool)) {
	ms := now.UnixMilli()
	for i := range n {
		st := state(i)
		if st.busy {
			continue
		}
		switch st.kind {
		case Open:
			if sealDue(opts, st.end, ms) {
				plan(i, coldDue(opts, st.end, ms))
			}
		case Sealed:
			if coldDue(opts, st.end, ms) {
				plan(i, true)
			} else if st.deltaDue {
				plan(i, false)
			}
		case Cold:
			if st.deltaDue {
				plan(i, true)
			}
		}
	}
	if opts.Dir == "" || opts.MemoryBudget <= 0 {
		return
	}
	m := mem()
	for i := 0; i < n && m > opts.MemoryBudget; i++ {
		if st := state(i); st.kind == Sealed && !st.busy {
			m -= st.sealedBytes
			plan(i, true)
		}
	}
}

func (t *Tier[R]) plan(w *window, toCold bool) *Job[R] {
	w.busy = true
	if w.delta != nil {
		w.frozen, w.delta = w.delta, nil
	}
	j := &Job[R]{jobBase: jobBase{epoch: t.epoch, toCold: toCold}, t: t, w: w, base: w.body, fold: w.frozen}
	if toCold {
		j.name = t.planFile(w.num)
	}
	return j
}

// Run builds the job's new window: in memory, or in a new file written
// complete or not at all (cold.Create). It reads only what Plan froze, so
// it needs no lock and may run while readers and writers use the tier.
func (j *Job[R]) Run() error {
	t := j.t
	return j.run(j.What, func() (err error) {
		j.seg, err = buildSegment(&t.arena, t.tag, t.sh, j.merge)
		return err
	}, t.opts.Dir, func(w io.Writer) error {
		ww := newWindowWriter(w, t.tag, t.sh)
		if err := j.merge(ww.add); err != nil {
			return err
		}
		return ww.close()
	}, func() (err error) {
		j.file, err = openCold(t.opts.Dir, j.name, t.tag, t.sh, t.cache)
		return err
	})
}

// merge passes the window's records in id order to add: the base's, with
// the folded delta's in their place.
func (j *Job[R]) merge(add func(id uint64, r *Row) error) error {
	return mergeWindow(j.base, j.w.lo, &j.t.layout, []*openTable{j.fold}, add)
}

// mergeWindow passes to add, in id order, the records of base overlaid by
// overlays (nil ones skipped; a later overlay's record wins).
func mergeWindow(base body, lo uint64, l *slotLayout, overlays []*openTable, add func(id uint64, r *Row) error) error {
	var fk []uint64
	for _, o := range overlays {
		if o != nil {
			fk = append(fk, o.sorted(l)...)
		}
	}
	slices.Sort(fk)
	fk = slices.Compact(fk)
	fi := 0
	var fr Row
	overlay := func(key uint64) {
		for i := len(overlays) - 1; i >= 0; i-- {
			if overlays[i] != nil && overlays[i].get(key, l, &fr) {
				return
			}
		}
	}
	emit := func(id uint64, r *Row) error {
		for fi < len(fk) && lo+fk[fi]-1 < id {
			overlay(fk[fi])
			if err := add(lo+fk[fi]-1, &fr); err != nil {
				return err
			}
			fi++
		}
		if fi < len(fk) && lo+fk[fi]-1 == id {
			overlay(fk[fi])
			fi++
			return add(id, &fr)
		}
		return add(id, r)
	}
	if err := eachBase(base, lo, l, emit); err != nil {
		return err
	}
	for ; fi < len(fk); fi++ {
		overlay(fk[fi])
		if err := add(lo+fk[fi]-1, &fr); err != nil {
			return err
		}
	}
	return nil
}

// errStop ends a Range early.
var errStop = errors.New("stop")

// Range calls fn for every record in id order until fn returns false. A
// cold window's blocks are read from its file and checked (not through
// the cache); an unreadable one ends the walk with its error. Range only
// reads: it may run under the read lock.
func (t *Tier[R]) Range(fn func(id uint64, r R) bool) error {
	return walkWindows(len(t.wins), func(i int) error {
		w := t.wins[i]
		return mergeWindow(w.body, w.lo, &t.layout, []*openTable{w.frozen, w.delta}, func(id uint64, r *Row) error {
			if !fn(id, t.codec.Join(*r)) {
				return errStop
			}
			return nil
		})
	})
}

// walkWindows calls walk for windows 0 to n-1 until it fails; errStop
// ends the walk without an error (a Range whose fn returned false).
func walkWindows(n int, walk func(i int) error) error {
	for i := range n {
		if err := walk(i); err != nil {
			if err == errStop {
				return nil
			}
			return err
		}
	}
	return nil
}

// eachBase passes the records of a window body to fn in id order. A cold
// body's blocks are read from the file and fully checked, not cached.
func eachBase(b body, lo uint64, l *slotLayout, fn func(id uint64, r *Row) error) error {
	var row Row
	switch b := b.(type) {
	case *openBody:
		for _, key := range b.t.sorted(l) {
			b.t.get(key, l, &row)
			if err := fn(lo+key-1, &row); err != nil {
				return err
			}
		}
		return nil
	case *sealedBody:
		return eachBlock(&b.s.idx, b.s.sh, "", func(i int) ([]byte, error) {
			_, blk := b.s.blockBytes(i)
			return blk, nil
		}, fn)
	case *coldBody:
		f := b.f
		var buf []byte
		return eachBlock(&f.idx, f.sh, f.name, func(i int) ([]byte, error) {
			_, off, end := f.idx.Block(i)
			return f.readRaw(off, end, &buf)
		}, fn)
	}
	return errors.New("tier: unknown window body")
}

func eachBlock(idx interface {
	Blocks() int
	Block(int) (uint64, uint64, uint64)
}, sh shape, file string, block func(int) ([]byte, error), fn func(id uint64, r *Row) error) error {
	ids := make([]uint64, MaxBlockRecords)
	rows := make([]Row, MaxBlockRecords)
	for b := range idx.Blocks() {
		first, off, _ := idx.Block(b)
		blk, err := block(b)
		if err != nil {
			return err
		}
		if err := checkBlock(first, blk, sh); err != nil {
			return corruptAt(file, int64(off), "block %d: %v", b, err)
		}
		var k Block
		_ = k.Parse(first, blk[:len(blk)-4], sh)
		if err := k.Decode(ids, rows); err != nil {
			return corruptAt(file, int64(off), "block %d: %v", b, err)
		}
		for i := range k.Len() {
			if err := fn(ids[i], &rows[i]); err != nil {
				return err
			}
		}
	}
	return nil
}

// Finish installs a job's result under the write lock. A job that failed
// leaves its window as it was (its frozen delta back under the delta)
// and returns its error; a job planned before a Load is dropped.
func (t *Tier[R]) Finish(j *Job[R]) error {
	if stale, err := j.settle(&t.coldStore, t.epoch); err != nil || stale {
		if stale {
			j.discard()
		}
		return err
	}
	w := j.w
	w.busy = false
	if j.err != nil {
		j.discard()
		if w.frozen != nil {
			if w.delta == nil {
				w.delta = w.frozen
			} else {
				var row Row
				for _, key := range w.frozen.sorted(&t.layout) {
					if !w.delta.has(key, &t.layout) {
						w.frozen.get(key, &t.layout, &row)
						w.delta.put(key, &t.layout, &row)
					}
				}
			}
			w.frozen = nil
		}
		return j.err
	}
	switch old := w.body.(type) {
	case *coldBody:
		t.obsolete = append(t.obsolete, &old.f.coldBase)
	case *sealedBody:
		old.s.release(&t.arena)
	}
	if j.toCold {
		w.body = &coldBody{j.file}
	} else {
		j.seg.installed = true
		w.body = &sealedBody{j.seg}
	}
	w.frozen = nil
	t.trim()
	return nil
}

// trim lets the arena pack its full chunks, leaving alone the segments
// jobs read (busy windows' bodies) or write (not yet installed).
func (t *Tier[R]) trim() {
	busy := map[*segment]bool{}
	for _, w := range t.wins {
		if b, ok := w.body.(*sealedBody); ok && w.busy {
			busy[b.s] = true
		}
	}
	t.arena.trim(func(r arenaRegion) bool { s := r.(*segment); return !s.installed || busy[s] })
}

func (j *Job[R]) discard() {
	j.seg.release(&j.t.arena)
	j.seg = nil
	if j.file != nil {
		discardFile(&j.file.coldBase)
		j.file = nil
	}
}

// Maintain plans, runs and finishes jobs until none is due: for imports,
// tests and benchmarks, where the caller holds the write lock throughout.
func (t *Tier[R]) Maintain(now time.Time) error { return maintain(t.PlanWork, now) }

// maintain plans, runs and finishes a table's jobs until none is due;
// a failed job's error is returned once its round has finished.
func maintain(plan func(now time.Time) []Work, now time.Time) error {
	for {
		jobs := plan(now)
		if len(jobs) == 0 {
			return nil
		}
		var errs []error
		for _, j := range jobs {
			j.Run()
			if err := j.Finish(); err != nil {
				errs = append(errs, err)
			}
		}
		if len(errs) > 0 {
			return errors.Join(errs...)
		}
	}
}

// Collect closes the files that jobs have replaced and deletes from Dir
// every file of this tier's prefix that the tier does not use, that no
// job is writing, and that keep (the files of the snapshots the caller
// still keeps) does not name. Call it under the write lock.
func (t *Tier[R]) Collect(keep []string) error { return t.collect(keep, t.Files()) }

// Work is a job of any tier, whatever its record type, so that one
// maintenance loop can serve a list of tiers (Maintainer): plan under
// the write lock, Run with no lock, Finish under the write lock again.
type Work interface {
	Run() error
	Finish() error
	What() string
}

// Maintainer is what a maintenance loop needs of a tier.
type Maintainer interface {
	PlanWork(now time.Time) []Work
	Collect(keep []string) error
	Files() []string
	MemoryBytes() int64
}

// Finish installs the job's result: t.Finish(j).
func (j *Job[R]) Finish() error { return j.t.Finish(j) }

// PlanWork is Plan for a loop over tiers of different record types.
func (t *Tier[R]) PlanWork(now time.Time) []Work {
	jobs := t.Plan(now)
	out := make([]Work, len(jobs))
	for i, j := range jobs {
		out[i] = j
	}
	return out
}
