package embedded

import (
	"context"
	"fmt"
	"time"

	"github.com/tally-dev/tally/engine"
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

// commit runs o through the write path (see the package doc) and returns
// its result: the id it made or, for an idempotent retry, the id the first
// attempt made.
func (e *Engine) commit(o *op) (uint64, error) {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return 0, errClosed
	}
	if e.failed.Load() != nil {
		e.mu.Unlock()
		return 0, errWrite
	}
	now := e.now().UnixNano()
	res, done, err := e.prepare(o, now)
	if err != nil || done {
		seen := e.lastIndex
		e.mu.Unlock()
		if err != nil {
			return 0, err
		}
		return res, e.waitDurable(seen)
	}
	o.time = max(now, e.lastTime+1)
	var index uint64
	if e.log != nil || e.tap != nil {
		e.buf = appendOp(e.buf[:0], o)
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
	e.lastTime = o.time
	var evs []engine.Event
	e.st.apply(o, &evs)
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

// prepare validates o against the state and completes it (generated ids,
// lists reduced to what will change). done means o changes nothing and
// needs no record; res is then the answer to return.
func (e *Engine) prepare(o *op, now int64) (res uint64, done bool, err error) {
	st := e.st
	if o.idem != (idemKey{}) {
		v, ok := st.idemLookup(o.idem, now)
		if !ok && o.legacyIdem != (idemKey{}) {
			v, ok = st.idemLookup(o.legacyIdem, now)
		}
		if ok {
			if err := engine.CheckIdemReuse(v.fp, o.fp); err != nil {
				return 0, false, err
			}
			return v.result, true, nil
		}
	}
	// A registry block that cannot be read (a damaged cold file) fails
	// the operation rather than let it take the post for absent.
	var readErr error
	exists := func(p uint64) bool {
		_, ok, err := st.posts.Get(p)
		if err != nil && readErr == nil {
			readErr = err
		}
		return ok
	}
	defer func() {
		if readErr != nil {
			res, done, err = 0, false, e.unreadable("post registry", readErr)
		}
	}()
	switch o.kind {
	case opCreatePost:
		err = e.prepareCreatePost(o, exists)
	case opLike, opUnlike, opFavorite, opUnfavorite:
		done, err = e.prepareLike(o, exists)
	case opComment:
		err = prepareComment(o, exists)
	case opRepost:
		err = e.prepareRepost(o, exists)
	case opViews:
		done = prepareViews(o, exists)
	case opFollow, opUnfollow:
		done = e.prepareFollow(o)
	case opTouch:
		done = e.prepareTouch(o, now)
	case opPublish:
		e.preparePublish(o)
	case opCreateGroup:
		e.prepareCreateGroup(o)
	case opAddMembers:
		done, err = e.prepareAddMembers(o)
	case opLeaveGroup:
		done, err = e.prepareLeaveGroup(o)
	case opSendMessage:
		err = e.prepareSendMessage(o)
	case opMarkMessagesRead:
		done, err = e.prepareMarkMessagesRead(o)
	}
	if err != nil || done {
		return 0, done, err
	}
	return opResult(o), false, nil
}

// opResult is what a retry of o with the same idempotency key returns.
func opResult(o *op) uint64 {
	switch o.kind {
	case opRepost, opSendMessage:
		return o.b
	}
	return o.a
}

// checkMutation runs the checks every mutation by a viewer shares.
func checkMutation(ctx context.Context, viewer engine.UserID, idemKey string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := engine.CheckViewer(viewer); err != nil {
		return err
	}
	return engine.CheckIdemKey(idemKey)
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

// ids converts a list of ids to the record's []uint64.
func ids[T ~uint64](in []T) []uint64 {
	out := make([]uint64, len(in))
	for i, v := range in {
		out[i] = uint64(v)
	}
	return out
}

func users(in []uint64) []engine.UserID {
	out := make([]engine.UserID, len(in))
	for i, v := range in {
		out[i] = engine.UserID(v)
	}
	return out
}

func nsTime(ns int64) time.Time { return time.Unix(0, ns).UTC() }
