package tier

import (
	"errors"
	"fmt"
	"io"
	"iter"
	"slices"
	"time"
)

// SetJob rewrites one window of a set, as Job does for a post table: it
// seals an open table, folds a delta back into a sealed or cold window,
// or moves a sealed window to a file (folding its delta on the way).
// Plan makes jobs under the caller's write lock, Run does the work with
// no lock, Finish installs the result under the write lock again.
type SetJob struct {
	jobBase
	s     *Set
	w     *setWindow
	base  body   // the window's body when planned: immutable while the job runs
	fold  *delta // the delta frozen by Plan, folded into the result; may be nil
	limit int
	seg   *pairSegment
	file  *pairCold
}

// What describes the job for logs.
func (j *SetJob) What() string {
	to := Sealed
	if j.toCold {
		to = Cold
	}
	return fmt.Sprintf("set %s window %d: %v to %v, folding %d pairs", j.s.opts.Prefix, j.w.num, j.base.kind(), to, j.fold.len())
}

// Plan returns the jobs due at now, by the rules of Tier.Plan: open
// windows past OpenAge to seal, sealed windows past ColdAge (or the
// oldest, while MemoryBytes exceeds MemoryBudget) to move to files, and
// deltas holding CompactMin pairs and an eighth of their window to fold
// back. It marks their windows busy and freezes their deltas; writes go
// to fresh deltas meanwhile. Call it under the write lock; every job must
// then be Run and Finished.
func (s *Set) Plan(now time.Time) []*SetJob {
	var jobs []*SetJob
	planDue(s.opts, now, len(s.wins), s.MemoryBytes, func(i int) windowState {
		w := s.wins[i]
		st := windowState{end: s.win.End(w.num), kind: w.body.kind(), busy: w.busy, deltaDue: deltaDue(s.opts, w.live.len(), w.n)}
		if b, ok := w.body.(*setSealed); ok {
			st.sealedBytes = int64(b.s.sizeBytes())
		}
		return st
	}, func(i int, toCold bool) { jobs = append(jobs, s.plan(s.wins[i], toCold)) })
	return jobs
}

func (s *Set) plan(w *setWindow, toCold bool) *SetJob {
	w.busy = true
	if w.live != nil {
		w.frozen, w.live = w.live, nil
	}
	j := &SetJob{jobBase: jobBase{epoch: s.epoch, toCold: toCold}, s: s, w: w, base: w.body, fold: w.frozen, limit: s.blockLimit}
	if toCold {
		j.name = s.planFile(w.num)
	}
	s.jobs++
	return j
}

// Run builds the job's new window: in memory, or in a new file written
// complete or not at all (cold.Create). It reads only what Plan froze, so
// it needs no lock and may run while readers and writers use the set.
func (j *SetJob) Run() error {
	s := j.s
	return j.run(j.What, func() (err error) {
		j.seg, err = buildPairSegment(&s.arena, s.tag, j.limit, j.merge)
		return err
	}, s.opts.Dir, func(w io.Writer) error {
		pw := newPairWriter(w, s.tag, j.limit)
		if err := j.merge(pw.add); err != nil {
			return err
		}
		return pw.close()
	}, func() (err error) {
		j.file, err = openPairCold(s.opts.Dir, j.name, s.tag, s.cache)
		return err
	})
}

// merge passes the window's pairs in (post, user) order to add: the
// body's less the folded delta's tombstones, with its additions.
func (j *SetJob) merge(add func(post, user uint64) error) error {
	return mergePairs(j.base, j.w.lo, j.fold, add)
}

// mergePairs passes to add, in (post, user) order, the pairs of body b
// (whose window starts at lo) overlaid by delta d (may be nil).
func mergePairs(b body, lo uint64, d *delta, add func(post, user uint64) error) error {
	var adds []pk
	var dels *pairTable
	if d != nil {
		adds = d.adds.pairs(make([]pk, 0, d.adds.len()))
		dels = d.dels
	}
	if o, ok := b.(*setOpen); ok { // an open table: its pairs are sorted with the additions
		adds = o.t.pairs(adds)
		b = nil
	}
	for i := range adds {
		adds[i].k += lo
	}
	slices.SortFunc(adds, cmpPK)
	if b != nil {
		err := eachBody(b, lo, func(post, u uint64) error {
			for len(adds) > 0 && cmpPK(adds[0], pk{post, u}) < 0 {
				if err := add(adds[0].k, adds[0].u); err != nil {
					return err
				}
				adds = adds[1:]
			}
			if dels.has(u, post-lo) {
				return nil
			}
			return add(post, u)
		})
		if err != nil {
			return err
		}
	}
	for _, q := range adds {
		if err := add(q.k, q.u); err != nil {
			return err
		}
	}
	return nil
}

// Finish installs a job's result under the write lock. A job that failed
// leaves its window as it was (its frozen delta back under the live one)
// and returns its error; a job planned before a Load is dropped.
func (s *Set) Finish(j *SetJob) error {
	if j.s != s {
		return errors.New("tier: Finish with another set's job")
	}
	if stale, err := j.settle(&s.coldStore, s.epoch); err != nil || stale {
		if stale {
			j.discard()
		}
		return err
	}
	w := j.w
	if !w.busy {
		return errors.New("tier: set job finished twice")
	}
	w.busy = false
	s.jobs--
	if j.err != nil {
		j.discard()
		if o, ok := w.body.(*setOpen); ok {
			// Still open: the table takes writes in place again, so the
			// deltas go into it.
			for _, d := range [2]*delta{w.frozen, w.live} {
				if d != nil {
					d.adds.each(func(u, k uint64) bool { o.t.add(u, k); return true })
					d.dels.each(func(u, k uint64) bool { o.t.remove(u, k); return true })
				}
			}
			w.frozen, w.live = nil, nil
		} else if w.frozen != nil {
			w.live = composeDelta(w.frozen, w.live, s.keyBits)
			w.frozen = nil
		}
		return j.err
	}
	switch old := w.body.(type) {
	case *setCold:
		s.obsolete = append(s.obsolete, &old.f.coldBase)
	case *setSealed:
		old.s.release(&s.arena)
	}
	pairs := 0
	if j.toCold {
		w.body, pairs = &setCold{j.file}, j.file.idx.pairs
	} else {
		j.seg.installed = true
		w.body, pairs = &setSealed{j.seg}, j.seg.idx.pairs
	}
	w.frozen = nil
	if pairs == 0 && w.live.len() == 0 {
		// Nothing left: the window goes, and its empty file with it.
		switch b := w.body.(type) {
		case *setCold:
			s.obsolete = append(s.obsolete, &b.f.coldBase)
		case *setSealed:
			b.s.release(&s.arena)
		}
		s.removeWindow(w)
	}
	s.trim()
	return nil
}

// composeDelta returns the delta over a body equal to lower over it with
// upper over that (either may be nil), reusing upper's tables: what a
// failed job leaves of its frozen delta and the writes since.
func composeDelta(lower, upper *delta, keyBits uint) *delta {
	if upper == nil {
		return lower
	}
	lower.adds.each(func(u, k uint64) bool {
		// Absent from the body: a later removal cancels it.
		if !upper.dels.remove(u, k) {
			upper.table(&upper.adds, keyBits).add(u, k)
		}
		return true
	})
	lower.dels.each(func(u, k uint64) bool {
		// Present in the body: a later addition cancels it.
		if !upper.adds.remove(u, k) {
			upper.table(&upper.dels, keyBits).add(u, k)
		}
		return true
	})
	return upper
}

// trim lets the arena pack its full chunks, leaving alone the windows
// jobs read (busy windows' bodies) or write (not yet installed).
func (s *Set) trim() {
	busy := map[*pairSegment]bool{}
	for _, w := range s.wins {
		if b, ok := w.body.(*setSealed); ok && w.busy {
			busy[b.s] = true
		}
	}
	s.arena.trim(func(r arenaRegion) bool { p := r.(*pairSegment); return !p.installed || busy[p] })
}

func (j *SetJob) discard() {
	j.seg.release(&j.s.arena)
	j.seg = nil
	if j.file != nil {
		discardFile(&j.file.coldBase)
		j.file = nil
	}
}

// Finish installs the job's result: s.Finish(j).
func (j *SetJob) Finish() error { return j.s.Finish(j) }

// Maintain plans, runs and finishes jobs until none is due, holding the
// caller's write lock throughout: for loads, tests and benchmarks. An
// engine that must not block readers uses PlanWork (or Plan), releasing
// the lock around Run.
func (s *Set) Maintain(now time.Time) error { return maintain(s.PlanWork, now) }

// PlanWork is Plan for a loop over tables of different kinds (Maintainer).
func (s *Set) PlanWork(now time.Time) []Work {
	jobs := s.Plan(now)
	out := make([]Work, len(jobs))
	for i, j := range jobs {
		out[i] = j
	}
	return out
}

// Collect closes the files that jobs have replaced and deletes from Dir
// every file of this set's prefix that the set does not use, that no job
// is writing, and that keep (the files of the snapshots the caller still
// keeps) does not name. Call it under the write lock.
func (s *Set) Collect(keep []string) error { return s.collect(keep, s.Files()) }

// loadFlushMin is how many pairs of one old window LoadPairs gathers at
// least before it seals them.
const loadFlushMin = 1 << 16

// LoadPairs adds the pairs of seq (user, post), as reading an old
// snapshot's pair list does, and leaves the set as Add for each pair
// and then Maintain(now) would as far as sealing goes, but builds the
// windows that ended more than OpenAge before now as sealed windows
// directly, never as tables: pairs of such a window are gathered (16
// bytes each), sorted and encoded when the input moves to another
// window. Input in window order (what Range yields) thus builds each old
// window once, holding one window's pairs at a time; input in any other
// order is still right, and costs at most a logarithmic number of merges
// per window. Windows past ColdAge or MemoryBudget move to files at the
// next Plan. Duplicates are ignored. It needs the write lock and no
// pending job.
func (s *Set) LoadPairs(seq iter.Seq2[uint64, uint64], now time.Time) error {
	if s.jobs != 0 {
		return errors.New("tier: LoadPairs with jobs pending")
	}
	ms := now.UnixMilli()
	type buf struct {
		num   int64
		pairs []pk
	}
	var cur *buf
	parked := map[int64]*buf{}
	flush := func(b *buf) error {
		err := s.loadWindow(b.num, b.pairs)
		b.pairs = b.pairs[:0]
		return err
	}
	curLo, curLast := uint64(1), uint64(0)
	for user, post := range seq {
		if post < curLo || post > curLast {
			num, lo, last := s.win.Of(post)
			curLo, curLast = lo, last
			if !sealDue(s.opts, s.win.End(num), ms) {
				cur = nil // an open window: Add
			} else {
				if cur != nil && len(cur.pairs) >= max(loadFlushMin, s.sealedPairs(cur.num)) {
					if err := flush(cur); err != nil {
						return err
					}
				}
				cur = parked[num]
				if cur == nil {
					cur = &buf{num: num}
					parked[num] = cur
				}
			}
		}
		if cur == nil {
			if _, err := s.Add(user, post); err != nil {
				return err
			}
			continue
		}
		cur.pairs = append(cur.pairs, pk{k: post, u: user})
	}
	for _, b := range parked {
		if len(b.pairs) > 0 {
			if err := flush(b); err != nil {
				return err
			}
		}
	}
	s.trim()
	return nil
}

// sealedPairs returns the pairs of window num's sealed body.
func (s *Set) sealedPairs(num int64) int {
	if i := s.find(s.win.Start(num)); i >= 0 {
		if b, ok := s.wins[i].body.(*setSealed); ok {
			return b.s.idx.pairs
		}
	}
	return 0
}

// loadWindow adds pairs (post ids of window num) to the set: merged into
// the window's sealed body, or by Add when the window is in another
// state (open, cold, with deltas), which a load into a fresh set never
// meets.
func (s *Set) loadWindow(num int64, pairs []pk) error {
	slices.SortFunc(pairs, cmpPK)
	pairs = slices.Compact(pairs)
	lo := s.win.Start(num)
	var w *setWindow
	var old *pairSegment
	if i := s.find(lo); i >= 0 {
		w = s.wins[i]
		b, ok := w.body.(*setSealed)
		if !ok || w.live != nil || w.busy {
			for _, q := range pairs {
				if _, err := s.Add(q.u, q.k); err != nil {
					return err
				}
			}
			return nil
		}
		old = b.s
		// Drop pairs the window already has, so that merge gets new ones.
		pairs = slices.DeleteFunc(pairs, func(q pk) bool { return old.has(q.k, q.u) })
	}
	if len(pairs) == 0 {
		return nil
	}
	var base body
	if old != nil {
		base = &setSealed{old}
	}
	seg, err := buildPairSegment(&s.arena, s.tag, s.blockLimit, func(add func(post, user uint64) error) error {
		if base == nil {
			for _, q := range pairs {
				if err := add(q.k, q.u); err != nil {
					return err
				}
			}
			return nil
		}
		adds := &delta{adds: newPairTable(s.keyBits, len(pairs))}
		for _, q := range pairs {
			adds.adds.add(q.u, q.k-lo)
		}
		return mergePairs(base, lo, adds, add)
	})
	if err != nil {
		return err
	}
	seg.installed = true
	if w == nil {
		w = &setWindow{num: num, lo: lo, last: s.win.Last(num)}
		s.insertWindow(w)
	} else {
		old.release(&s.arena)
	}
	w.body = &setSealed{seg}
	s.adjust(w, len(pairs))
	return nil
}
