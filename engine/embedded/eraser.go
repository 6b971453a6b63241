package embedded

import (
	"sort"
	"time"

	"github.com/tally-dev/tally/engine/tier"
)

// The eraser drives erasures (lifecycle.go): one goroutine that takes
// bounded steps of the oldest erasure under way, each a log record, until
// none is left. It is woken by EraseUser and by Open when the recovered
// state has erasures under way, and it reads no clock, so tests with a
// fake one see erasures finish as soon as they can.

// wakeEraser tells the eraser there is work.
func (e *Engine) wakeEraser() {
	select {
	case e.eraseWake <- struct{}{}:
	default:
	}
}

func (e *Engine) eraser() {
	defer e.wg.Done()
	for {
		select {
		case <-e.stop:
			return
		case <-e.eraseWake:
		}
		for e.eraseStep() {
			select {
			case <-e.stop:
				return
			default:
			}
		}
	}
}

// eraseRetry is how long the eraser waits after a step failed (a cold
// block that cannot be read, a log that cannot write) before trying again.
const eraseRetry = time.Second

// eraseStep takes one step of the oldest erasure under way and reports
// whether there may be more to do.
func (e *Engine) eraseStep() bool {
	if gate := e.stepGate.Load(); gate != nil {
		e.mu.RLock()
		idle := len(e.st.erasing) == 0
		e.mu.RUnlock()
		if idle {
			return false
		}
		(*gate)()
	}
	e.mu.RLock()
	if e.closed || len(e.st.erasing) == 0 || e.failed.Load() != nil {
		e.mu.RUnlock()
		return false
	}
	x := e.st.erasing[0]
	st := e.st
	r := &eraseStepRec{user: x.user, phase: x.phase}
	switch x.phase {
	case phaseFollows:
		// Up to eraseBatch edges each way; the step removes them, and
		// the phase ends with the step that finds fewer.
		out := st.follows.FolloweesPage(x.user, 0, eraseBatch, nil)
		ins := st.follows.Followers(x.user, 0, eraseBatch, nil)
		for _, t := range out {
			r.keys = append(r.keys, x.user, t)
		}
		for _, f := range ins {
			r.keys = append(r.keys, f, x.user)
		}
		r.phaseEnd = len(out) < eraseBatch && len(ins) < eraseBatch
	case phaseGroups:
		n := uint64(len(st.groupList))
		r.next = tier.Cursor{Post: min(x.cursor.Post+eraseBatch, n)}
		r.phaseEnd = r.next.Post >= n
	case phaseMessages:
		n := uint64(len(st.msgList))
		r.next = tier.Cursor{Post: min(x.cursor.Post+eraseBatch, n)}
		r.phaseEnd = r.next.Post >= n
	case phaseIdem:
		q := st.idemQ[st.idemHead:]
		from := sort.Search(len(q), func(i int) bool { return uint64(q[i].time) >= x.cursor.Post })
		if end := from + eraseBatch; end < len(q) {
			r.next = tier.Cursor{Post: uint64(q[end].time)}
		} else {
			r.phaseEnd = true
		}
	}
	e.mu.RUnlock()
	switch x.phase {
	case phaseLikes, phaseFavorites, phaseWrites, phasePosts:
		if !e.scanStep(x, r) {
			return e.retryLater()
		}
		// A scan of an open window finds all of it at once: its records
		// go a batch a step, the cursor moving with the last.
		keys, next, end := r.keys, r.next, r.phaseEnd
		for len(keys) > eraseBatch {
			part := &eraseStepRec{user: x.user, phase: x.phase, keys: keys[:eraseBatch], next: x.cursor}
			if _, err := e.commit(part); err != nil {
				return e.retryLater()
			}
			keys = keys[eraseBatch:]
		}
		r.keys, r.next, r.phaseEnd = keys, next, end
	}
	if _, err := e.commit(r); err != nil {
		e.logger.Warn("embedded: an erasure step failed; retrying", "err", err)
		return e.retryLater()
	}
	if r.phase == phaseIdem && r.phaseEnd && e.maintains {
		// The erasure is done: rewrite the windows it touched now,
		// rather than at the next maintenance tick.
		e.maintain()
	}
	return true
}

// scanStep finds the next batch of a set phase's or the posts phase's
// records: a Scan planned and finished under the write lock, run with
// none.
func (e *Engine) scanStep(x erasure, r *eraseStepRec) bool {
	e.mu.Lock()
	var sc *tier.Scan
	switch x.phase {
	case phaseLikes:
		sc = e.st.likes.PlanScan(x.user, x.cursor, eraseBatch)
	case phaseFavorites:
		sc = e.st.favs.PlanScan(x.user, x.cursor, eraseBatch)
	case phaseWrites:
		sc = e.st.writers.PlanScan(x.user, x.cursor, eraseBatch)
	case phasePosts:
		sc = e.st.posts.PlanScan(x.user, x.cursor, eraseBatch)
	}
	e.mu.Unlock()
	// Finish reports the run's error, except for a window replaced while
	// the scan read it (a job installed a new body and Collect may have
	// closed the file read): that window is read again from the same
	// cursor, so its read error says nothing.
	_ = sc.Run()
	e.mu.Lock()
	found, next, done, err := sc.Finish()
	e.mu.Unlock()
	if err != nil {
		e.logger.Warn("embedded: an erasure's scan failed; retrying", "err", err)
		return false
	}
	r.keys, r.next, r.phaseEnd = found, next, done
	return true
}

// retryLater waits before the eraser tries again, and reports whether it
// should (false once the engine closes).
func (e *Engine) retryLater() bool {
	select {
	case <-e.stop:
		return false
	case <-time.After(eraseRetry):
		return true
	}
}
