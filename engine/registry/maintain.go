package registry

import (
	"fmt"
	"time"
)

// Job seals one window: its open entries (frozen when the job was planned)
// merged with its previous sealed run into a new run.
type Job struct {
	r      *Registry
	w      *window
	frozen *openTable
	base   *run
	out    *run
	ran    bool
}

// String describes the job for logs.
func (j *Job) String() string {
	kind := "seal"
	if j.base != nil {
		kind = "compact"
	}
	return fmt.Sprintf("registry: %s window %d (%d posts)", kind, j.w.num, j.frozen.len())
}

// Plan starts the next step due at now and returns it, or nil when nothing
// is due: seal a window that ended more than OpenAge ago and still has
// open entries, if it was never sealed or its open part reached
// CompactMin posts and an eighth of the sealed part. Plan needs the same
// exclusive access as Put; the Job must then be Run and passed to Finish.
func (r *Registry) Plan(now time.Time) *Job {
	openEnd := now.UnixMilli() - max(r.opts.OpenAge, 0).Milliseconds()
	for _, w := range r.wins {
		if w.busy || w.open.len() == 0 || r.win.End(w.num) > openEnd {
			continue
		}
		if w.sealed != nil {
			if n := w.open.len(); n < r.opts.CompactMin || n*8 < w.sealed.n {
				continue
			}
		}
		frozen := w.open
		w.open = openTable{}
		w.frozen = &frozen
		w.busy = true
		return &Job{r: r, w: w, frozen: w.frozen, base: w.sealed}
	}
	return nil
}

// Run builds the new run. It reads only the frozen table and the old run,
// which nothing changes while the job is out, so it needs no lock.
func (j *Job) Run() {
	rows := make([]row, 0, j.frozen.len()+j.baseLen())
	over := j.frozen.sorted()
	i := 0
	lo := j.w.lo
	if j.base != nil {
		j.base.each(func(id, author uint64) bool {
			for ; i < len(over) && lo+over[i].key < id; i++ {
				rows = append(rows, row{lo + over[i].key, over[i].author})
			}
			if i < len(over) && lo+over[i].key == id {
				author = over[i].author
				i++
			}
			rows = append(rows, row{id, author})
			return true
		})
	}
	for ; i < len(over); i++ {
		rows = append(rows, row{lo + over[i].key, over[i].author})
	}
	j.out = buildRun(rows)
	j.ran = true
}

func (j *Job) baseLen() int {
	if j.base == nil {
		return 0
	}
	return j.base.n
}

// Finish installs the job's run. It needs the same exclusive access as
// Put. A job that did not run leaves the window as it was, its frozen
// entries back in the open table.
func (j *Job) Finish() {
	w := j.w
	w.busy = false
	w.frozen = nil
	if !j.ran {
		j.frozen.each(func(k, a uint64) {
			if _, ok := w.open.get(k); !ok {
				w.open.put(k, a)
			}
		})
		return
	}
	w.sealed = j.out
}

// Maintain runs every step due at now, for callers that hold one lock
// around everything.
func (r *Registry) Maintain(now time.Time) {
	for j := r.Plan(now); j != nil; j = r.Plan(now) {
		j.Run()
		j.Finish()
	}
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
// still load correctly, through Put.
type Loader struct {
	r       *Registry
	openEnd int64
	w       *window  // window being built, nil if none
	b       *builder // its run so far
	prev    uint64
}

// NewLoader starts loading into r.
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
		if w.sealed != nil || w.open.len() > 0 || r.win.End(w.num) > l.openEnd {
			r.Put(id, author)
			return
		}
		l.w, l.b = w, newBuilder()
	}
	l.b.add(id, author)
	l.prev = id
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
