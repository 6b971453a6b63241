package postcounts

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/cold"
	"github.com/tally-dev/tally/engine/sealed"
)

// A Job is one maintenance step on one window: seal an open table, fold a
// delta into a sealed window or a cold file (compaction), or move a sealed
// window to a file. Plan starts it under the caller's write lock, Run does
// the work with no lock held, Finish installs the result under the write
// lock. While it runs, the window's base and frozen delta are read-only
// and shared by the job and the readers; writes go to a fresh delta.
type Job struct {
	s      *Store
	epoch  uint64
	w      *window
	kind   string
	lo     uint64
	toFile bool
	path   string
	opts   sealed.Options
	cache  *cold.Cache

	// Inputs, immutable while the job exists.
	inOpen   *narrow
	inSealed *sealed.Window
	inCold   *cold.File
	frozen   *narrow

	ran       bool
	err       error
	outSealed *sealed.Window
	outCold   *cold.File
}

// String describes the job for logs.
func (j *Job) String() string {
	to := "memory"
	if j.toFile {
		to = filepath.Base(j.path)
	}
	return fmt.Sprintf("%s window %d to %s", j.kind, j.w.num, to)
}

// end returns the Unix millisecond at which window w ends.
func (s *Store) end(w *window) int64 { return (w.num + 1) * s.opts.WindowMillis }

// Plan starts the next maintenance step due at now and returns it, or nil
// when nothing is due. In order: seal open windows that ended more than
// OpenAge ago (straight to a file if they are also past ColdAge); move
// sealed windows past ColdAge to files; while MemoryBytes exceeds
// MemoryBudget, move the oldest sealed window to a file; compact windows
// whose delta reached CompactMin posts and an eighth of the window.
//
// Plan needs the same exclusive access as Add. Every Job it returns must
// be run and then passed to Finish; until then its window takes no
// other job.
func (s *Store) Plan(now time.Time) *Job {
	nowMs := now.UnixMilli()
	openEnd := nowMs - max(s.opts.OpenAge, 0).Milliseconds()
	coldEnd := int64(math.MinInt64)
	coldTier := s.opts.Dir != ""
	if coldTier && s.opts.ColdAge > 0 {
		coldEnd = nowMs - s.opts.ColdAge.Milliseconds()
	}
	for _, w := range s.wins {
		if w.open != nil && !w.busy && s.end(w) <= openEnd {
			return s.start(w, "seal", coldTier && s.end(w) <= coldEnd)
		}
	}
	for _, w := range s.wins {
		if w.sealed != nil && !w.busy && s.end(w) <= coldEnd {
			return s.start(w, "cool", true)
		}
	}
	if coldTier && s.opts.MemoryBudget > 0 && int64(s.budgetBytes()) > s.opts.MemoryBudget {
		for _, w := range s.wins {
			if w.sealed != nil && !w.busy {
				return s.start(w, "cool", true)
			}
		}
		// Every sealed window is in a file: fold the largest delta into
		// its file, since deltas are now what memory holds.
		var big *window
		for _, w := range s.wins {
			if w.cold != nil && !w.busy && w.delta != nil && (big == nil || w.delta.len() > big.delta.len()) {
				big = w
			}
		}
		if big != nil && big.delta.len() >= s.opts.CompactMin {
			return s.start(big, "compact", true)
		}
	}
	for _, w := range s.wins {
		if w.busy || w.delta == nil || (w.sealed == nil && w.cold == nil) {
			continue
		}
		if n := w.delta.len(); n >= s.opts.CompactMin && n*8 >= baseLen(w) {
			return s.start(w, "compact", w.cold != nil)
		}
	}
	return nil
}

// budgetBytes is MemoryBytes as the memory budget sees it: once a window
// is cold the cache counts at its bound, not at what it has filled so
// far, or moving windows out would fill the cache, push memory back over
// the budget and move yet more windows out.
func (s *Store) budgetBytes() int {
	n := s.MemoryBytes()
	if s.cache != nil && slices.ContainsFunc(s.wins, func(w *window) bool { return w.cold != nil }) {
		n += s.cache.CapacityBytes() - s.cache.SizeBytes()
	}
	return n
}

func baseLen(w *window) int {
	switch {
	case w.open != nil:
		return w.open.len()
	case w.sealed != nil:
		return w.sealed.Len()
	case w.cold != nil:
		return w.cold.Len()
	}
	return 0
}

func (s *Store) start(w *window, kind string, toFile bool) *Job {
	j := &Job{s: s, epoch: s.epoch, w: w, kind: kind, lo: w.lo, toFile: toFile, opts: s.opts.Sealed, cache: s.cache,
		inOpen: w.open, inSealed: w.sealed, inCold: w.cold}
	w.busy = true
	if w.open == nil && w.delta != nil {
		w.frozen, w.delta = w.delta, nil
		j.frozen = w.frozen
	}
	if toFile {
		j.path = s.newPath(w.num)
		s.writing[j.path] = true
	}
	s.jobs[w] = j
	return j
}

// coldName is the name of the gen-th file written, for window num. The
// generation makes every file name new: a file, once written, is never
// replaced, so a snapshot that lists it stays valid while it exists.
func coldName(num int64, gen uint64) string { return fmt.Sprintf("pc-%d-%d.win", num, gen) }

// parseColdName returns the generation of a name coldName made.
func parseColdName(name string) (uint64, bool) {
	rest, ok := strings.CutPrefix(name, "pc-")
	if !ok {
		return 0, false
	}
	rest, ok = strings.CutSuffix(rest, ".win")
	if !ok {
		return 0, false
	}
	num, gen, ok := strings.Cut(rest, "-")
	if !ok {
		return 0, false
	}
	if _, err := strconv.ParseUint(num, 10, 63); err != nil {
		return 0, false
	}
	g, err := strconv.ParseUint(gen, 10, 64)
	if err != nil || coldName(mustAtoi(num), g) != name {
		return 0, false
	}
	return g, true
}

func mustAtoi(s string) int64 {
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}

func (s *Store) newPath(num int64) string {
	p := filepath.Join(s.opts.Dir, coldName(num, s.nextGen))
	s.nextGen++
	return p
}

// scanGen makes new file names follow every name already in Dir, so that a
// store recovered from an older snapshot never overwrites a file a newer
// snapshot may list.
func (s *Store) scanGen() error {
	ents, err := os.ReadDir(s.opts.Dir)
	if err != nil {
		return fmt.Errorf("postcounts: %w", err)
	}
	for _, e := range ents {
		if g, ok := parseColdName(e.Name()); ok && g >= s.nextGen {
			s.nextGen = g + 1
		}
	}
	return nil
}

// Run does the job's work: it encodes the base and frozen delta into a new
// sealed window in memory or a new file (cold.Merge semantics). It holds
// no lock and may run concurrently with every method of the Store; it
// must be called once.
func (j *Job) Run() error {
	if j.ran {
		return errors.New("postcounts: Job.Run called twice")
	}
	j.ran = true
	var src cold.Source
	switch {
	case j.inOpen != nil:
		src = newKeySource(j.inOpen, j.lo)
	case j.inSealed != nil:
		src = j.inSealed.Iter()
	case j.inCold != nil:
		src = j.inCold.Iter()
	}
	var delta cold.Source = cold.NewSliceSource(nil, nil)
	if j.frozen != nil {
		delta = newKeySource(j.frozen, j.lo)
	}
	if j.toFile {
		j.err = cold.CreateWindow(j.path, j.opts, func(w *sealed.Writer) error {
			return cold.Merge(w, src, delta)
		})
		if j.err == nil {
			j.outCold, j.err = cold.Open(j.path, j.cache)
		}
	} else {
		j.outSealed, j.err = buildMerged(src, delta, j.opts)
	}
	if j.err != nil {
		j.err = fmt.Errorf("postcounts: %s: %w", j, j.err)
	}
	return j.err
}

// buildMerged is cold.Merge into a new in-memory window.
func buildMerged(base, delta cold.Source, opts sealed.Options) (*sealed.Window, error) {
	var merr error
	w, err := sealed.Build(func(yield func(uint64, engine.Counts) bool) {
		merr = cold.Merge(sinkFunc(func(id uint64, c engine.Counts) error {
			if !yield(id, c) {
				return errStop
			}
			return nil
		}), base, delta)
	}, opts)
	if merr != nil && !errors.Is(merr, errStop) {
		return nil, merr
	}
	return w, err
}

// Finish installs the result of a job that ran: the window's new base
// replaces the old one and its frozen delta, in one step under the
// caller's write lock, so a reader sees either the old base with both
// deltas or the new one with the live delta — the same counts. If the
// job failed, its window returns to its state before Plan (the frozen
// and live deltas summed) and Finish returns the job's error. A job
// planned before a Load is discarded.
func (s *Store) Finish(j *Job) error {
	if j.s != s {
		return errors.New("postcounts: Finish with another store's job")
	}
	if !j.ran {
		return errors.New("postcounts: Finish before Run")
	}
	w := j.w
	if s.jobs[w] != j {
		return errors.New("postcounts: job finished twice")
	}
	delete(s.jobs, w)
	delete(s.writing, j.path)
	if j.epoch != s.epoch || j.err != nil {
		if j.outCold != nil {
			j.outCold.Close()
		}
		if j.path != "" {
			os.Remove(j.path)
		}
		if j.epoch != s.epoch {
			return j.err
		}
		s.abort(j)
		return j.err
	}
	w.busy = false
	if w.cold != nil {
		w.cold.Close() // superseded; RemoveUnreferenced deletes the file
	}
	w.open, w.sealed, w.cold, w.coldPath, w.frozen = nil, nil, nil, "", nil
	if j.outCold != nil {
		w.cold, w.coldPath = j.outCold, j.path
	} else {
		w.sealed = j.outSealed
	}
	if baseLen(w) == 0 && (w.delta == nil || w.delta.len() == 0) {
		if w.cold != nil {
			w.cold.Close()
		}
		s.removeWindow(w)
	}
	return nil
}

// abort undoes Plan's split of a window whose job failed: its live delta
// goes back into what it was relative to, the open table or the frozen
// delta. The sums stay in range because base+frozen+delta is.
func (s *Store) abort(j *Job) {
	w := j.w
	w.busy = false
	if w.delta == nil {
		w.delta, w.frozen = w.frozen, nil
		return
	}
	into := w.open
	if into == nil {
		into = w.frozen
	}
	if into != nil {
		w.delta.each(func(k uint64, d vals) bool {
			v, _ := into.get(k)
			v = add(v, d)
			into.put(k, &v)
			return true
		})
		w.delta = nil
		if w.open == nil {
			w.delta = into
		}
	}
	w.frozen = nil
}

// Maintain runs every maintenance step due at now (see Plan), one after
// another, under the caller's write lock throughout: the simple form for
// tests and small stores. An engine that must not block readers calls
// Plan, Run and Finish itself, releasing the lock around Run.
func (s *Store) Maintain(now time.Time) error {
	for {
		j := s.Plan(now)
		if j == nil {
			return nil
		}
		j.Run()
		if err := s.Finish(j); err != nil {
			return err
		}
	}
}

// Files returns the paths of the cold files the store's state reads:
// what a snapshot of the store depends on.
func (s *Store) Files() []string {
	var fs []string
	for _, w := range s.wins {
		if w.cold != nil {
			fs = append(fs, w.coldPath)
		}
	}
	return fs
}

// RemoveUnreferenced deletes the cold files of Dir that neither the
// store's state, nor a running job, nor keep (the files of snapshots
// still kept, by path or base name) refers to: files superseded by
// compactions and imports, and files written after the snapshot a store
// was recovered from. It returns the paths removed. It needs the same
// access as Add.
func (s *Store) RemoveUnreferenced(keep []string) ([]string, error) {
	if s.opts.Dir == "" {
		return nil, nil
	}
	ref := map[string]bool{}
	for _, p := range keep {
		ref[filepath.Base(p)] = true
	}
	for _, p := range s.Files() {
		ref[filepath.Base(p)] = true
	}
	for p := range s.writing {
		ref[filepath.Base(p)] = true
	}
	ents, err := os.ReadDir(s.opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("postcounts: %w", err)
	}
	var removed []string
	for _, e := range ents {
		if _, ok := parseColdName(e.Name()); !ok || ref[e.Name()] || !e.Type().IsRegular() {
			continue
		}
		p := filepath.Join(s.opts.Dir, e.Name())
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return removed, fmt.Errorf("postcounts: %w", err)
		}
		removed = append(removed, p)
	}
	return removed, nil
}

// Close closes the cold files. The store must not be used afterwards;
// running jobs must have finished.
func (s *Store) Close() error {
	var first error
	for _, w := range s.wins {
		if w.cold != nil {
			if err := w.cold.Close(); err != nil && first == nil {
				first = err
			}
		}
	}
	return first
}

// keySource is a cold.Source over a narrow table in id order: it sorts the
// keys (8 bytes a post) and looks each up again, rather than copying
// whole entries.
type keySource struct {
	t    *narrow
	lo   uint64
	keys []uint64
	i    int
	cur  engine.Counts
}

func newKeySource(t *narrow, lo uint64) *keySource {
	keys := make([]uint64, 0, t.len())
	t.each(func(k uint64, _ vals) bool {
		keys = append(keys, k)
		return true
	})
	slices.Sort(keys)
	return &keySource{t: t, lo: lo, keys: keys, i: -1}
}

func (ks *keySource) Next() bool {
	ks.i++
	if ks.i >= len(ks.keys) {
		return false
	}
	v, _ := ks.t.get(ks.keys[ks.i])
	ks.cur = toCounts(v)
	return true
}

func (ks *keySource) ID() uint64            { return ks.lo + ks.keys[ks.i] }
func (ks *keySource) Counts() engine.Counts { return ks.cur }
func (ks *keySource) Err() error            { return nil }
