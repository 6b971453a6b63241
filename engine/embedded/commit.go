package embedded

import (
	"context"
	"fmt"
	"time"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/ops"
)

// errWrite is what clients see when the log cannot write; the cause (with
// file names) goes to the operator's log only.
var errWrite = fmt.Errorf("%w: the store cannot write to disk", engine.ErrUnavailable)

var errClosed = fmt.Errorf("%w: the store is closed", engine.ErrUnavailable)

// fail makes the engine read-only after a log failure.
func (e *Engine) fail(err error) error {
	if e.failed.CompareAndSwap(nil, &err) {
		e.logger.Error("embedded: the store cannot write; mutations are refused until restart", "err", err)
	}
	return errWrite
}

// waitDurable waits until record index (0: none) is durable.
func (e *Engine) waitDurable(index uint64) error {
	if e.log == nil || index == 0 {
		return nil
	}
	if err := e.log.Wait(index); err != nil {
		return e.fail(err)
	}
	return nil
}

// commit runs r through the write path (see the package doc) and returns
// its result: the id it made or, for an idempotent retry, the id the first
// attempt made.
func (e *Engine) commit(r record) (uint64, error) {
	return e.commitCtx(context.Background(), r)
}

// checkedRecord is a record whose operation validates its call.
type checkedRecord interface {
	record
	Check() error
}

// commitChecked commits r (commitCtx) once ctx is still live and r's call
// is valid: what every write call does before its record may be logged.
func (e *Engine) commitChecked(ctx context.Context, r checkedRecord) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if err := r.Check(); err != nil {
		return 0, err
	}
	return e.commitCtx(ctx, r)
}

// commitCtx is commit for a write made with ctx: the events it makes carry
// ctx's engine.Cause (the traced request that made the write).
func (e *Engine) commitCtx(ctx context.Context, r record) (uint64, error) {
	e.mu.Lock()
	for len(e.st.erasing) > 0 && e.erasingAny(involved(r, e.involvedBuf[:0])...) {
		// A call by a user being erased, or that follows them or adds
		// them to a group, comes after the erasure: it waits for it.
		done := e.erasedCh
		e.mu.Unlock()
		select {
		case <-done:
		case <-ctx.Done():
			return 0, errErasing
		case <-e.stop:
			return 0, errClosed
		}
		e.mu.Lock()
	}
	if e.closed {
		e.mu.Unlock()
		return 0, errClosed
	}
	if e.failed.Load() != nil {
		e.mu.Unlock()
		return 0, errWrite
	}
	now := e.now().UnixNano()
	h, _, _, _ := recordInfo(r)
	h.time = max(now, e.lastTime+1)
	res, done, err := e.prepare(r, now)
	if err != nil || done {
		seen := e.lastIndex
		e.mu.Unlock()
		if err != nil {
			return 0, err
		}
		return res, e.waitDurable(seen)
	}
	var index uint64
	if e.log != nil || e.tap != nil {
		e.buf = appendRecord(e.buf[:0], r)
		if e.log != nil {
			if index, err = e.log.AppendAsync(e.buf); err != nil {
				e.mu.Unlock()
				return 0, e.fail(err)
			}
			e.lastIndex = index
		}
		if e.tap != nil {
			e.tap(e.buf)
		}
	}
	e.lastTime = h.time
	if _, _, _, id := recordInfo(r); id != 0 {
		e.genHigh = laterID(e.genHigh, id)
	}
	var evs []engine.Event
	erasing := len(e.st.erasing)
	e.st.apply(r, &evs, true)
	if len(e.st.erasing) < erasing {
		// An erasure ended: the calls waiting for it go on, and the next
		// snapshot drops the files before it (afterSnapshot).
		close(e.erasedCh)
		e.erasedCh = make(chan struct{})
		e.erasedAt.Store(index)
	}
	if cerr := e.st.fault(); cerr != nil {
		// A write to a post in an unreadable cold block was not applied in
		// memory. Its record is in the log, and a restart rebuilds the cold
		// tier from the snapshot and the log, so nothing is lost; until
		// then take no more writes rather than let counts drift.
		e.fail(fmt.Errorf("cold tier: %w", cerr))
	}
	e.mu.Unlock()
	if err := e.waitDurable(index); err != nil {
		return 0, err
	}
	if c := engine.CauseFrom(ctx); c != (engine.Cause{}) {
		for i := range evs {
			evs[i].Cause = c
		}
	}
	e.publish(evs)
	return res, nil
}

// newID returns a fresh snowflake id that taken does not know. Client
// supplied post ids share the id space, so a generated one can collide.
func (e *Engine) newID(taken func(uint64) bool) uint64 {
	for {
		if id := e.gen.Next(); !taken(id) {
			return id
		}
	}
}

// prepare completes r (the ids it makes, decided now) and decides it
// against the state (state.decide, leaving its effects in st.eff for
// apply): a product error, or done when r changes nothing and needs no
// record; res is then the answer to return. An idempotent retry is done
// with the first attempt's result.
func (e *Engine) prepare(r record, now int64) (res uint64, done bool, err error) {
	st := e.st
	h, _, _, _ := recordInfo(r)
	if h.idem != (idemKey{}) {
		if v, ok := st.idemLookup(h.idem, now); ok {
			if err := engine.CheckIdemReuse(v.fp, h.fp); err != nil {
				return 0, false, err
			}
			return v.result, true, nil
		}
	}
	switch r := r.(type) {
	case *createPostRec:
		if r.Post == 0 {
			r.Post = engine.PostID(e.newID(st.postTaken))
		}
	case *repostRec:
		r.NewPost = engine.PostID(e.newID(st.postTaken))
	case *publishRec:
		newest := st.newestNotif()
		r.id = e.newID(func(id uint64) bool { return id <= newest })
	case *createGroupRec:
		r.Group = engine.GroupID(e.newID(st.groupTaken))
	case *sendMessageRec:
		r.Message = engine.MessageID(e.newID(st.messageTaken))
	case *touchRec:
		done = e.prepareTouch(r, now)
	case *recountRec:
		if err := st.prepareRecount(r); err != nil {
			return 0, false, err
		}
	}
	err = st.decide(r, false)
	// A block that cannot be read (a damaged cold file) fails the
	// operation rather than let it take the post for absent or the like
	// for unset.
	if rerr := st.takeReadErr(); rerr != nil {
		return 0, false, e.unreadable("the cold tier", rerr)
	}
	if err != nil || done {
		return 0, done, err
	}
	if hasEffects(r) && st.eff.Empty() && !alwaysLogged(r) {
		return 0, true, nil
	}
	trim(r, &st.eff)
	_, _, res, _ = recordInfo(r)
	return res, false, nil
}

// trim keeps in r's lists only what its effects change, so that records
// stay small: the views of known posts, the users who join, the messages
// read. Decide gives the same effects from the trimmed record.
func trim(r record, eff *ops.Effects) {
	switch r := r.(type) {
	case *viewsRec:
		if len(eff.Counts) != len(r.Posts) {
			r.Posts = make([]engine.PostID, len(eff.Counts))
			for i, c := range eff.Counts {
				r.Posts[i] = c.Post
			}
		}
	case *addMembersRec:
		if len(eff.Joins) != len(r.Users) {
			r.Users = make([]engine.UserID, len(eff.Joins))
			for i, j := range eff.Joins {
				r.Users[i] = j.User
			}
		}
	case *markMessagesReadRec:
		if len(eff.Receipts) != len(r.Messages) {
			r.Messages = make([]engine.MessageID, len(eff.Receipts))
			for i, rc := range eff.Receipts {
				r.Messages[i] = rc.Message
			}
		}
	}
}

func readCheck[T ~uint64](ctx context.Context, ids []T) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return engine.CheckIDs(ids)
}

// unreadable reports a cold block that did not verify: say so rather than
// show zeros. The cause names files, so it goes to the log, not to the
// client.
func (e *Engine) unreadable(what string, err error) error {
	e.logger.Error("embedded: "+what+" cannot be read; restart to rebuild the cold tier", "err", err)
	return fmt.Errorf("%w: %s cannot be read", engine.ErrUnavailable, what)
}

// ids converts a list of ids to []uint64.
func ids[T ~uint64](in []T) []uint64 {
	out := make([]uint64, len(in))
	for i, v := range in {
		out[i] = uint64(v)
	}
	return out
}

func nsTime(ns int64) time.Time { return time.Unix(0, ns).UTC() }
