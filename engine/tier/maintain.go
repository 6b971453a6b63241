package tier

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"time"
)

// Job rewrites one window: it seals an open table, folds a delta back into
// a sealed or cold window, or moves a sealed window to a file (folding its
// delta on the way). Plan makes jobs under the caller's write lock, Run
// does the work with no lock, Finish installs the result under the write
// lock again.
type Job struct {
	t      *table
	w      *window
	epoch  uint64   // the table's when planned: a Load since voids the job
	base   body     // the window's body when planned: immutable while the job runs
	fold   overlay  // the delta Plan froze, which readers of w read until Finish; may be nil
	drop   []uint64 // the window's forgotten posts when planned, which the rewrite leaves out
	scrub  bool     // the window was marked for Scrub when planned (a failure marks it again)
	toCold bool
	// hold marks a View's hold on the window (view.go): it freezes the
	// delta as a job does and rewrites nothing; Release ends it, never
	// Run or Finish.
	hold   bool
	name   string // the file written when toCold
	sealed *sealedWindow
	file   *coldWindow
	err    error
	ran    bool
}

// What describes the job for logs: the table, the window, its form and
// what it becomes.
func (j *Job) What() string {
	to := Sealed
	if j.toCold {
		to = Cold
	}
	fold := 0
	if j.fold != nil {
		fold = j.fold.len()
	}
	return fmt.Sprintf("%s window %d: %v to %v, folding %d entries", j.t.opts.Prefix, j.w.num, j.base.kind(), to, fold)
}

// Plan returns the jobs due at now: open windows past OpenAge to seal
// (into a file if past ColdAge too), sealed windows past ColdAge to move
// to files, deltas holding CompactMin entries and an eighth of their
// window to fold back (into a new file for a cold window), and then,
// while MemoryBytes exceeds MemoryBudget, the oldest sealed windows to
// files. It marks their windows busy and freezes their deltas; writes go
// to fresh deltas meanwhile. Call it under the write lock; every job must
// then be Run and Finished.
func (t *table) Plan(now time.Time) []*Job {
	var jobs []*Job
	ms := now.UnixMilli()
	for _, w := range t.wins {
		if w.job != nil || w.held() {
			continue
		}
		end := t.win.End(w.num)
		switch w.body.kind() {
		case Open:
			if t.sealDue(end, ms) {
				jobs = append(jobs, t.plan(w, t.coldDue(end, ms)))
			}
		case Sealed:
			if t.coldDue(end, ms) {
				jobs = append(jobs, t.plan(w, true))
			} else if t.deltaDue(w) || w.scrubbed() || len(w.forgot()) > 0 {
				jobs = append(jobs, t.plan(w, false))
			}
		case Cold:
			if t.deltaDue(w) || w.scrubbed() || len(w.forgot()) > 0 {
				jobs = append(jobs, t.plan(w, true))
			}
		}
	}
	if t.opts.Dir == "" || t.opts.MemoryBudget <= 0 {
		return jobs
	}
	m := t.MemoryBytes()
	for _, w := range t.wins {
		if m <= t.opts.MemoryBudget {
			break
		}
		if s, ok := w.body.(*sealedWindow); ok && w.job == nil {
			m -= int64(s.memoryBytes())
			jobs = append(jobs, t.plan(w, true))
		}
	}
	return jobs
}

// sealDue reports whether a window that ended at end (Unix ms) is to be
// sealed at ms; coldDue whether it is to move to a file.
func (t *table) sealDue(end, ms int64) bool {
	if t.opts.OpenAge < 0 {
		return end <= ms
	}
	return end+t.opts.OpenAge.Milliseconds() <= ms
}

func (t *table) coldDue(end, ms int64) bool {
	return t.opts.Dir != "" && t.opts.ColdAge > 0 && end+t.opts.ColdAge.Milliseconds() <= ms
}

// deltaDue reports whether w's delta is to be folded back.
func (t *table) deltaDue(w *window) bool {
	if w.delta == nil {
		return false
	}
	d := w.delta.len()
	return d > 0 && d >= t.opts.CompactMin && d*8 >= w.n
}

func (t *table) plan(w *window, toCold bool) *Job {
	j := &Job{t: t, w: w, epoch: t.epoch, base: w.body, fold: w.delta, drop: slices.Clone(w.forgot()), scrub: w.scrubbed(), toCold: toCold}
	// The frozen delta holds whatever Scrub asked to be rewritten; what
	// is removed after this goes to the new delta and asks again.
	w.job, w.delta = j, nil
	w.setScrub(false)
	if toCold {
		j.name = t.planFile(w.num)
	}
	t.jobs++
	return j
}

// Run builds the job's new window: in memory, or in a new file written
// complete or not at all (createFile: a temporary file, fsync, rename,
// fsync of the directory). It reads only what Plan froze, so it needs no
// lock and may run while readers and writers use the table.
func (j *Job) Run() error {
	if j.hold {
		return errors.New("tier: Run of a view's hold")
	}
	if j.ran {
		return j.err
	}
	j.ran = true
	t := j.t
	write := func(w io.Writer) error { return t.shape.writeImage(w, j.base, j.w.lo, j.fold, j.drop) }
	if !j.toCold {
		var buf bytes.Buffer
		if j.err = write(&buf); j.err == nil {
			j.sealed, j.err = t.newSealed(buf.Bytes(), false)
		}
		return j.err
	}
	j.err = createFile(filepath.Join(t.opts.Dir, j.name), !t.opts.Derived, write)
	if j.err == nil {
		j.file, j.err = t.openCold(j.name)
	}
	if j.err != nil {
		j.err = fmt.Errorf("tier: %s: %w", j.What(), j.err)
	}
	return j.err
}

// Finish installs a job's result under the write lock. A job that failed
// leaves its window as it was (its frozen delta back under the delta)
// and returns its error; a job planned before a Load is dropped. A window
// left with no record goes, its file with it.
func (t *table) Finish(j *Job) error {
	if j.t != t {
		return errors.New("tier: Finish with another table's job")
	}
	if j.hold {
		return errors.New("tier: Finish of a view's hold")
	}
	if !j.ran {
		return errors.New("tier: Finish of a job that did not Run")
	}
	t.doneFile(j.name)
	if j.epoch != t.epoch {
		j.discard()
		return nil
	}
	w := j.w
	if w.job != j {
		return errors.New("tier: a job finished twice")
	}
	w.job = nil
	t.jobs--
	if j.err != nil {
		j.discard()
		t.unfreeze(w, j.fold)
		if j.scrub {
			w.setScrub(true)
		}
		return j.err
	}
	t.retire(w.body)
	if j.toCold {
		w.body = j.file
	} else {
		j.sealed.installed = true
		w.body = j.sealed
	}
	if len(j.drop) > 0 {
		if l := w.life; l != nil {
			l.forgot = slices.DeleteFunc(l.forgot, func(p uint64) bool { _, ok := slices.BinarySearch(j.drop, p); return ok })
			if len(l.forgot) == 0 {
				l.forgot = nil
			}
			w.tidyLife()
		}
		t.shape.dropped(w, j.drop)
	}
	if w.body.records() == 0 && (w.delta == nil || w.delta.len() == 0) {
		t.retire(w.body)
		t.removeWindow(w)
	}
	t.trim()
	return nil
}

// unfreeze puts a failed job's frozen delta back: into the window's open
// table, which takes writes in place again, with the delta written since;
// under that delta otherwise.
func (t *table) unfreeze(w *window, frozen overlay) {
	// A scan reading the open table with no lock (held) folds the delta
	// itself when it finishes.
	if w.body.kind() == Open && !w.held() {
		for _, o := range [2]overlay{frozen, w.delta} {
			if o != nil {
				t.shape.foldInto(w.body, o)
			}
		}
		w.delta = nil
		return
	}
	w.delta = t.shape.compose(frozen, w.delta)
}

// trim lets the arena pack its full chunks, leaving alone the windows
// jobs read (busy windows' bodies) or write (not yet installed).
func (t *table) trim() {
	busy := map[*sealedWindow]bool{}
	for _, w := range t.wins {
		if s, ok := w.body.(*sealedWindow); ok && w.job != nil {
			busy[s] = true
		}
	}
	t.arena.trim(func(s *sealedWindow) bool { return !s.installed || busy[s] })
}

func (j *Job) discard() {
	j.sealed.release(&j.t.arena)
	j.sealed = nil
	if j.file != nil {
		j.file.discard(j.t.dir)
		j.file = nil
	}
}

// Finish installs the job's result: its table's Finish.
func (j *Job) Finish() error { return j.t.Finish(j) }

// Maintain plans, runs and finishes jobs until none is due, holding the
// caller's write lock throughout: for loads, tests and benchmarks. An
// engine that must not block readers uses PlanWork (or Plan), releasing
// the lock around Run. A failed job's error is returned once its round
// has finished.
func (t *table) Maintain(now time.Time) error {
	for {
		jobs := t.Plan(now)
		if len(jobs) == 0 {
			return nil
		}
		var errs []error
		for _, j := range jobs {
			j.Run()
			if err := t.Finish(j); err != nil {
				errs = append(errs, err)
			}
		}
		if len(errs) > 0 {
			return errors.Join(errs...)
		}
	}
}

// Collect closes the files that jobs have replaced and deletes from Dir
// every file of this table's prefix that the table does not use, that no
// job is writing, and that keep (the files of the snapshots the caller
// still keeps) does not name. Call it under the write lock.
func (t *table) Collect(keep []string) error { return t.collect(keep, t.Files()) }

// Work is a job of any table, so that one maintenance loop can serve a
// list of tables (Maintainer): plan under the write lock, Run with no
// lock, Finish under the write lock again.
type Work interface {
	Run() error
	Finish() error
	What() string
}

// Maintainer is what a maintenance loop needs of a table: the post
// table, a set, or another store that keeps its own (engine/usercounts).
type Maintainer interface {
	PlanWork(now time.Time) []Work
	Collect(keep []string) error
	Files() []string
	MemoryBytes() int64
}

// PlanWork is Plan for a loop over tables of different kinds.
func (t *table) PlanWork(now time.Time) []Work {
	jobs := t.Plan(now)
	out := make([]Work, len(jobs))
	for i, j := range jobs {
		out[i] = j
	}
	return out
}
