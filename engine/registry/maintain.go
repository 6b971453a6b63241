package registry

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"time"
)

// Job is one maintenance step on one window: seal its open entries into a
// run, fold late entries into its run or cold file (compaction), or move
// its run to a cold file (cool). Inputs — the entries frozen when the job
// was planned, the old run or cold file — are immutable while it is out;
// writes meanwhile go to a fresh open table, which overrides them.
type Job struct {
	r      *Registry
	epoch  uint64
	w      *window
	kind   string
	frozen *openTable // nil when there were no open entries (a cool)
	base   *run
	baseCF *coldFile // held (acquired) until Finish
	toFile bool
	path   string

	ran     bool
	err     error
	out     *run
	outCold *coldFile
}

// String describes the job for logs.
func (j *Job) String() string {
	to := "memory"
	if j.toFile {
		to = filepath.Base(j.path)
	}
	n := 0
	if j.frozen != nil {
		n = j.frozen.len()
	}
	return fmt.Sprintf("registry: %s window %d (%d open posts) to %s", j.kind, j.w.num, n, to)
}

// Plan starts the next step due at now and returns it, or nil when nothing
// is due. In order: seal a window that ended more than OpenAge ago and was
// never sealed (straight to a file if it is also past ColdAge); move
// sealed windows past ColdAge to files; while MemoryBytes exceeds
// MemoryBudget, move the oldest sealed window to a file; compact a sealed
// or cold window whose open part reached CompactMin posts and an eighth of
// the sealed part (a cold window's into a new file).
//
// Plan needs the same exclusive access as Put. A Job must then be Run
// (with no lock) and passed to Finish (exclusive access again); until
// then its window takes no other job.
func (r *Registry) Plan(now time.Time) *Job {
	nowMs := now.UnixMilli()
	openEnd := nowMs - max(r.opts.OpenAge, 0).Milliseconds()
	coldTier := r.opts.Dir != ""
	coldEnd := int64(math.MinInt64)
	if coldTier && r.opts.ColdAge > 0 {
		coldEnd = nowMs - r.opts.ColdAge.Milliseconds()
	}
	for _, w := range r.wins {
		if !w.busy && w.sealed == nil && w.cold == nil && w.open.len() > 0 && r.win.End(w.num) <= openEnd {
			return r.start(w, "seal", r.win.End(w.num) <= coldEnd)
		}
	}
	for _, w := range r.wins {
		if !w.busy && w.sealed != nil && r.win.End(w.num) <= coldEnd {
			return r.start(w, "cool", true)
		}
	}
	if coldTier && r.opts.MemoryBudget > 0 && int64(r.MemoryBytes()) > r.opts.MemoryBudget {
		for _, w := range r.wins {
			if !w.busy && w.sealed != nil {
				return r.start(w, "cool", true)
			}
		}
	}
	for _, w := range r.wins {
		if w.busy || w.open.len() == 0 || (w.sealed == nil && w.cold == nil) {
			continue
		}
		if n := w.open.len(); n >= r.opts.CompactMin && n*8 >= w.baseLen() {
			return r.start(w, "compact", w.cold != nil)
		}
	}
	return nil
}

func (w *window) baseLen() int {
	switch {
	case w.sealed != nil:
		return w.sealed.n
	case w.cold != nil:
		return w.cold.n
	}
	return 0
}

func (r *Registry) start(w *window, kind string, toFile bool) *Job {
	j := &Job{r: r, epoch: r.epoch, w: w, kind: kind, base: w.sealed, baseCF: w.cold, toFile: toFile}
	if w.open.len() > 0 {
		frozen := w.open
		w.open = openTable{}
		w.frozen = &frozen
		j.frozen = w.frozen
	}
	if j.baseCF != nil {
		j.baseCF.acquire()
	}
	if toFile {
		j.path = filepath.Join(r.opts.Dir, coldName(w.num, r.nextGen))
		r.nextGen++
	}
	w.busy = true
	return j
}

// Run builds the new run or file. It reads only the frozen entries and the
// old run or file, which nothing changes while the job is out, so it
// needs no lock; it must be called once.
func (j *Job) Run() error {
	if j.ran {
		return errors.New("registry: Job.Run called twice")
	}
	j.ran = true
	w, r := j.w, j.r
	if j.toFile && j.frozen == nil && j.base != nil {
		// A plain cool: the run's blocks go to the file as they are.
		j.outCold, j.err = copyCold(j.path, r.cache, w.num, w.lo, w.last, j.base)
	} else {
		var over []slot
		if j.frozen != nil {
			over = j.frozen.sorted()
		}
		fill := func(b *builder) {
			_, err := mergeEach(w.lo, over, j.base, j.baseCF, func(id, author uint64) bool {
				b.add(id, author)
				return true
			})
			if err != nil && j.err == nil {
				j.err = err
			}
		}
		if j.toFile {
			var err error
			j.outCold, err = writeCold(j.path, r.cache, w.num, w.lo, w.last, fill)
			if j.err == nil {
				j.err = err
			}
		} else {
			b := newBuilder()
			fill(b)
			j.out = b.finish()
		}
	}
	if j.err != nil {
		j.err = fmt.Errorf("%s: %w", j, j.err)
	}
	return j.err
}

// Finish installs the job's result, in one step under the caller's
// exclusive access: a reader sees the old base with the frozen entries or
// the new base — the same authors. A job that did not run or failed
// leaves the window as it was (its frozen entries back in the open table,
// under the newer ones) and Finish returns its error; a job planned
// before a Load is discarded. A superseded cold file is deleted once the
// last reader (a snapshot being written) lets go of it.
func (j *Job) Finish() error {
	r, w := j.r, j.w
	if j.baseCF != nil {
		j.baseCF.release()
	}
	void := j.epoch != r.epoch
	if !j.ran && j.err == nil {
		j.err = fmt.Errorf("%s: Finish before Run", j)
	}
	if void || j.err != nil {
		if j.outCold != nil {
			j.outCold.obsolete.Store(true)
			j.outCold.release()
		} else if j.path != "" {
			removeQuiet(j.path)
		}
		if void {
			return j.err
		}
		w.busy = false
		w.frozen = nil
		if j.frozen != nil {
			j.frozen.each(func(k, a uint64) {
				if _, ok := w.open.get(k); !ok {
					w.open.put(k, a)
				}
			})
		}
		return j.err
	}
	w.busy = false
	w.frozen = nil
	if w.cold != nil {
		w.cold.obsolete.Store(true)
		w.cold.release()
	}
	w.sealed, w.cold = j.out, j.outCold
	return nil
}

// Maintain runs every step due at now, for callers that hold one lock
// around everything. It stops at the first failure.
func (r *Registry) Maintain(now time.Time) error {
	for j := r.Plan(now); j != nil; j = r.Plan(now) {
		j.Run()
		if err := j.Finish(); err != nil {
			return err
		}
	}
	return nil
}

// Files returns the paths of the cold files the registry reads now.
func (r *Registry) Files() []string {
	var fs []string
	for _, w := range r.wins {
		if w.cold != nil {
			fs = append(fs, w.cold.path)
		}
	}
	return fs
}

// Close closes the cold files (a snapshot still being written keeps its
// own hold until its Close). The registry must not be used afterwards;
// running jobs must have finished.
func (r *Registry) Close() error {
	for _, w := range r.wins {
		if w.cold != nil {
			w.cold.release()
			w.cold = nil
		}
	}
	r.wins, r.los, r.live = nil, nil, 0
	return nil
}

func (t *openTable) each(fn func(k, author uint64)) {
	for _, s := range t.slots {
		if s.key != 0 {
			fn(s.key-1, s.author)
		}
	}
}

// Loader fills an empty registry from rows, building the windows that
// ended more than OpenAge before now straight into sealed runs, a block at
// a time, so that a large registry never passes through open tables. Rows
// in id order (as Range gives them) take that path; rows out of order
// still load correctly, through Put. Cold windows come later, from Plan.
type Loader struct {
	r       *Registry
	openEnd int64
	w       *window  // window being built, nil if none
	b       *builder // its run so far
	prev    uint64
}

// NewLoader starts loading into r, which must have no cold window.
func (r *Registry) NewLoader(now time.Time) *Loader {
	return &Loader{r: r, openEnd: now.UnixMilli() - max(r.opts.OpenAge, 0).Milliseconds()}
}

// Add registers id with author; a repeated id keeps the last author.
func (l *Loader) Add(id, author uint64) {
	r := l.r
	if l.w != nil && (id > l.w.last || id <= l.prev) {
		l.finish()
	}
	if l.w == nil {
		w := r.windowFor(id)
		if w.sealed != nil || w.cold != nil || w.open.len() > 0 || r.win.End(w.num) > l.openEnd {
			r.Put(id, author) // no cold window: cannot fail
			return
		}
		l.w, l.b = w, newBuilder()
	}
	l.b.add(id, author)
	l.prev = id
	l.w.live++
	r.live++
}

// finish installs the run being built.
func (l *Loader) finish() {
	if l.w == nil {
		return
	}
	l.w.sealed = l.b.finish()
	l.w, l.b = nil, nil
}

// Close finishes the load.
func (l *Loader) Close() { l.finish() }
