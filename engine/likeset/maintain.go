package likeset

import (
	"errors"
	"fmt"
	"iter"
	"slices"
	"time"
)

// A Job is one maintenance step on one window: seal an open table, or fold
// a sealed window's delta into it (compaction). Plan starts it under the
// caller's write lock, Run does the work with no lock held, Finish installs
// the result under the write lock. While it runs the window's base and
// frozen delta are read-only, shared by the job and the readers, and
// writes go to a fresh live delta over them.
type Job struct {
	s    *Set
	w    *window
	kind string

	// Inputs, immutable while the job exists.
	inOpen   *pairTable
	inSealed *sealedWin
	frozen   *delta

	limit int // pairs per block
	ran   bool
	out   *sealedWin
}

// String describes the job for logs.
func (j *Job) String() string {
	return fmt.Sprintf("likeset: %s window %d", j.kind, j.w.num)
}

// Plan starts the next maintenance step due at now and returns it, or nil
// when nothing is due: first seal an open window that ended more than
// OpenAge before now, then compact a window whose delta holds at least
// CompactMin pairs and an eighth as many as its base.
//
// Plan needs the same exclusive access as Add. Every Job it returns must be
// run and passed to Finish; until then its window takes no other job.
func (s *Set) Plan(now time.Time) *Job {
	openEnd := now.UnixMilli() - max(s.opts.OpenAge, 0).Milliseconds()
	for _, w := range s.wins {
		if w.open != nil && !w.busy && s.end(w) <= openEnd {
			return s.start(w, "seal")
		}
	}
	for _, w := range s.wins {
		if w.busy || w.open != nil || w.live == nil {
			continue
		}
		base := 0
		if w.sealed != nil {
			base = w.sealed.pairs
		}
		if n := w.live.len(); n >= s.opts.CompactMin && n*8 >= base {
			return s.start(w, "compact")
		}
	}
	return nil
}

func (s *Set) start(w *window, kind string) *Job {
	j := &Job{s: s, w: w, kind: kind, inOpen: w.open, inSealed: w.sealed, limit: s.blockLimit}
	w.busy = true
	if w.open == nil && w.live != nil {
		w.frozen, w.live = w.live, nil
		j.frozen = w.frozen
	}
	s.jobs++
	return j
}

// Run encodes the job's window: the open table's pairs, or the sealed
// window merged with its frozen delta, into a new sealed window. It holds
// no lock and may run concurrently with every method of the Set, since it
// reads only what Plan froze. It must be called once.
func (j *Job) Run() error {
	if j.ran {
		return errors.New("likeset: Job.Run called twice")
	}
	j.ran = true
	var adds []pk
	var dels *pairTable
	switch {
	case j.inOpen != nil:
		adds = j.inOpen.pairs(make([]pk, 0, j.inOpen.len()))
	case j.frozen != nil:
		adds = j.frozen.adds.pairs(make([]pk, 0, j.frozen.adds.len()))
		dels = j.frozen.dels
	}
	slices.SortFunc(adds, cmpPK)
	j.out = merge(j.inSealed, dels, adds, j.limit)
	return nil
}

// merge builds a sealed window of base's pairs (base may be nil) less
// those in dels, plus adds: sorted, and absent from base.
func merge(base *sealedWin, dels *pairTable, adds []pk, limit int) *sealedWin {
	b := newBuilder(limit)
	if base != nil {
		base.each(func(k, u uint64) bool {
			for len(adds) > 0 && cmpPK(adds[0], pk{k, u}) < 0 {
				b.add(adds[0].k, adds[0].u)
				adds = adds[1:]
			}
			if !dels.has(u, k) {
				b.add(k, u)
			}
			return true
		})
	}
	for _, q := range adds {
		b.add(q.k, q.u)
	}
	return b.finish()
}

// Finish installs the result of a job that ran, in one step under the
// caller's write lock: a reader sees either the old base with both deltas
// or the new base with the live delta — the same pairs.
func (s *Set) Finish(j *Job) error {
	if j.s != s {
		return errors.New("likeset: Finish with another set's job")
	}
	if !j.ran {
		return errors.New("likeset: Finish before Run")
	}
	w := j.w
	if !w.busy {
		return errors.New("likeset: job finished twice")
	}
	w.busy = false
	s.jobs--
	w.open, w.frozen, w.sealed = nil, nil, nil
	if j.out.pairs > 0 {
		w.sealed = j.out
	}
	if w.sealed == nil && (w.live == nil || w.live.len() == 0) {
		s.removeWindow(w)
	}
	return nil
}

// Maintain runs every maintenance step due at now (see Plan), one after
// another, under the caller's write lock throughout: the form for callers
// that hold one lock, tests and loads. An engine that must not block
// readers calls Plan, Run and Finish itself, releasing the lock around Run.
func (s *Set) Maintain(now time.Time) error {
	for {
		j := s.Plan(now)
		if j == nil {
			return nil
		}
		if err := j.Run(); err != nil {
			return err
		}
		if err := s.Finish(j); err != nil {
			return err
		}
	}
}

// loadFlushMin is how many pairs of one old window Load gathers at least
// before it seals them.
const loadFlushMin = 1 << 16

// Load adds the pairs of seq (user, post), as reading a snapshot does, and
// leaves the set as Add for each pair and then Maintain(now) would, but
// builds the windows that ended more than OpenAge before now as sealed
// windows directly, never as tables: pairs of such a window are gathered
// (16 bytes each), sorted and encoded when the input moves to another
// window. Input in window order (what Range yields) thus builds each old
// window once, holding one window's pairs at a time; input in any other
// order is still right, and costs at most a logarithmic number of merges
// per window, since a window's gathered pairs are sealed only when there
// are as many as it already holds. Duplicates are ignored. Load needs the
// same access as Add and no job may be pending.
func (s *Set) Load(seq iter.Seq2[uint64, uint64], now time.Time) error {
	if s.jobs != 0 {
		return errors.New("likeset: Load with jobs pending")
	}
	openEnd := now.UnixMilli() - max(s.opts.OpenAge, 0).Milliseconds()
	type buf struct {
		num   int64
		pairs []pk
	}
	var cur *buf
	parked := map[int64]*buf{}
	flush := func(b *buf) {
		s.loadWindow(b.num, b.pairs)
		b.pairs = b.pairs[:0]
	}
	curLo, curLast := uint64(1), uint64(0)
	for user, post := range seq {
		if post < curLo || post > curLast {
			num, lo, last := s.windowOf(post)
			curLo, curLast = lo, last
			if (num+1)*s.opts.WindowMillis > openEnd {
				cur = nil // an open window: Add
			} else {
				if cur != nil && len(cur.pairs) >= max(loadFlushMin, s.sealedPairs(cur.num)) {
					flush(cur)
				}
				cur = parked[num]
				if cur == nil {
					cur = &buf{num: num}
					parked[num] = cur
				}
			}
		}
		if cur == nil {
			s.Add(user, post)
			continue
		}
		cur.pairs = append(cur.pairs, pk{k: post - curLo, u: user})
	}
	for _, b := range parked {
		if len(b.pairs) > 0 {
			flush(b)
		}
	}
	return nil
}

// sealedPairs returns the pairs of window num's sealed base.
func (s *Set) sealedPairs(num int64) int {
	if i := s.find(s.win.Start(num)); i >= 0 && s.wins[i].sealed != nil {
		return s.wins[i].sealed.pairs
	}
	return 0
}

// loadWindow adds pairs (keys of window num) to the set: merged into the
// window's sealed base, or by Add when the window is in another state
// (open, with deltas), which a Load into a fresh set never meets.
func (s *Set) loadWindow(num int64, pairs []pk) {
	slices.SortFunc(pairs, cmpPK)
	pairs = slices.Compact(pairs)
	lo := s.win.Start(num)
	i := s.find(lo)
	var w *window
	if i >= 0 {
		w = s.wins[i]
		if w.sealed == nil || w.live != nil || w.busy {
			for _, q := range pairs {
				s.Add(q.u, lo+q.k)
			}
			return
		}
		// Drop pairs the window already has, so merge gets new ones only.
		pairs = slices.DeleteFunc(pairs, func(q pk) bool { return w.sealed.has(q.k, q.u) })
	} else {
		w = &window{num: num, lo: lo, last: s.win.Last(num)}
		s.insertWindow(w)
	}
	if len(pairs) == 0 {
		return
	}
	old := 0
	if w.sealed != nil {
		old = w.sealed.pairs
	}
	w.sealed = merge(w.sealed, nil, pairs, s.blockLimit)
	s.adjust(w, w.sealed.pairs-old)
}
