package embedded

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/snapshot"
)

// userRec is one user's badge state, packed (40 bytes, no pointers). The
// four unread counters are 32-bit: nearly every user's are small, but a
// celebrity's unread likes can pass 2^32 in a day and the badge must stay
// exact, so a counter at wideMark holds its value in state.wide instead
// (seed 003's narrow field with an escape to an overflow table).
type userRec struct {
	n      [4]uint32 // unread mentions, comments, likes, messages (nMentions...)
	day    uint32    // last active, in days since the Unix epoch
	flags  uint32
	click  int64  // Unix ns of the last red-dot click; 0: never
	cursor uint64 // last system notification seen, if flagCursor
}

// The counters of userRec.n.
const (
	nMentions = iota
	nComments
	nLikes
	nMessages
)

// wideMark in userRec.n says the counter's value is in state.wide.
const wideMark = math.MaxUint32

// bump adds 1 to unread counter k of user u.
func (st *state) bump(u uint64, k int) {
	r := st.user(u)
	switch {
	case r.n[k] < wideMark-1:
		r.n[k]++
	case r.n[k] == wideMark-1:
		r.n[k] = wideMark
		st.wide.Upsert(u)[k] = wideMark
	default:
		w, _ := st.wide.Ref(u)
		w[k]++
	}
}

// counter returns unread counter k of u, whose record is r.
func (st *state) counter(u uint64, r *userRec, k int) int64 {
	if r.n[k] != wideMark {
		return int64(r.n[k])
	}
	w, _ := st.wide.Get(u)
	return w[k]
}

// setCounter sets unread counter k of u, whose record is r, to v >= 0.
func (st *state) setCounter(u uint64, r *userRec, k int, v int64) {
	if r.n[k] == wideMark {
		w, _ := st.wide.Ref(u)
		if w[k] = 0; *w == [4]int64{} {
			st.wide.Delete(u)
		}
	}
	if v < wideMark {
		r.n[k] = uint32(v)
		return
	}
	r.n[k] = wideMark
	st.wide.Upsert(u)[k] = v
}

// flagCursor: the user has a system cursor. Without one the user is new
// (or was idle long enough to be forgotten) and reads 0 system unread.
const flagCursor = 1

// user returns u's badge record, creating it. The pointer is valid until
// the next insert into or delete from st.users.
func (st *state) user(u uint64) *userRec {
	if r, ok := st.users.Ref(u); ok {
		return r
	}
	if !st.known(u) {
		st.nusers++
	}
	return st.users.Upsert(u)
}

// day returns the day number of a Unix-ns time.
func day(ns int64) uint32 { return uint32(ns / nsPerDay) }

const nsPerDay = int64(24 * 60 * 60 * 1e9)

// cursorLive reports whether r's system cursor still counts at now, by
// engine.CursorExpired (r.day is the user's last activity day).
func cursorLive(r *userRec, now, ttl int64) bool {
	return r.flags&flagCursor != 0 &&
		!engine.CursorExpired(time.Unix(0, int64(r.day)*nsPerDay), time.Unix(0, now), time.Duration(ttl))
}

// unread computes viewer's badges at now. It also reports whether the
// viewer needs a touch op: a first visit (set the cursor), a cursor that
// has expired (set it again), or a new day of activity.
func (st *state) unread(viewer uint64, now, ttl int64) (u engine.Unread, touch bool) {
	r, ok := st.users.Get(viewer)
	if ok {
		u.Mentions, u.Comments = st.counter(viewer, &r, nMentions), st.counter(viewer, &r, nComments)
		u.Likes, u.Messages = st.counter(viewer, &r, nLikes), st.counter(viewer, &r, nMessages)
	}
	live := ok && cursorLive(&r, now, ttl)
	if live {
		u.System = int64(st.notifsAfter(r.cursor))
	}
	targets, snaps := st.follows.List(viewer)
	for i, f := range targets {
		// As engine.FeedUnread: a count below the snapshot (an import
		// replaced it) adds nothing rather than subtracting.
		if d := st.postCount(f) - snaps[i]; d > 0 {
			u.Feed += d
		}
	}
	u.RedDot = st.push > r.click
	return u, !live || r.day != day(now)
}

// Unread implements engine.Store. A first visit, an expired cursor or the
// first visit of a day records a touch (at most one write per user per day
// from polling); every other call is a pure read.
func (e *Engine) Unread(ctx context.Context, viewer engine.UserID) (engine.Unread, error) {
	if err := ctx.Err(); err != nil {
		return engine.Unread{}, err
	}
	if err := engine.CheckViewer(viewer); err != nil {
		return engine.Unread{}, err
	}
	e.mu.RLock()
	u, touch := e.st.unread(uint64(viewer), e.now().UnixNano(), e.ttl)
	e.mu.RUnlock()
	if !touch {
		return u, nil
	}
	if _, err := e.commit(&op{kind: opTouch, viewer: uint64(viewer)}); err != nil {
		// A read-only engine still answers: what was read is right,
		// only the bookkeeping of the visit is lost.
		if errors.Is(err, engine.ErrUnavailable) {
			return u, nil
		}
		return engine.Unread{}, err
	}
	e.mu.RLock()
	u, _ = e.st.unread(uint64(viewer), e.now().UnixNano(), e.ttl)
	e.mu.RUnlock()
	return u, nil
}

// MarkRead implements engine.Store.
func (e *Engine) MarkRead(ctx context.Context, viewer engine.UserID, kind engine.UnreadKind) error {
	if err := checkMutation(ctx, viewer, ""); err != nil {
		return err
	}
	if kind < engine.Mentions || kind > engine.Feed {
		return fmt.Errorf("%w: unknown unread kind %d", engine.ErrInvalid, kind)
	}
	_, err := e.commit(&op{kind: opMarkRead, viewer: uint64(viewer), a: uint64(kind)})
	return err
}

// ClickRedDot implements engine.Store.
func (e *Engine) ClickRedDot(ctx context.Context, viewer engine.UserID) error {
	if err := checkMutation(ctx, viewer, ""); err != nil {
		return err
	}
	_, err := e.commit(&op{kind: opClickRedDot, viewer: uint64(viewer)})
	return err
}

// PushRedDot implements engine.Store: one timestamp, O(1).
func (e *Engine) PushRedDot(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	_, err := e.commit(&op{kind: opPushRedDot})
	return err
}

// prepareTouch: done when the cursor is live and today's activity is
// already recorded; otherwise an expired or missing cursor restarts at
// the newest notification.
func (e *Engine) prepareTouch(o *op, now int64) (done bool) {
	r, ok := e.st.users.Get(o.viewer)
	live := ok && cursorLive(&r, now, e.ttl)
	if live && r.day == day(now) {
		return true
	}
	if !live {
		o.a, o.b = e.st.newestNotif(), 1
	}
	return false
}

func (st *state) applyTouch(o *op) {
	r := st.user(o.viewer)
	r.day = day(o.time)
	if o.b != 0 {
		r.cursor, r.flags = o.a, r.flags|flagCursor
	}
}

func (st *state) applyMarkRead(o *op, out *[]engine.Event) {
	// Not activity (engine.CursorExpired): only a badge read is.
	r := st.user(o.viewer)
	switch engine.UnreadKind(o.a) {
	case engine.Mentions:
		st.setCounter(o.viewer, r, nMentions, 0)
	case engine.Comments:
		st.setCounter(o.viewer, r, nComments, 0)
	case engine.Likes:
		st.setCounter(o.viewer, r, nLikes, 0)
	case engine.Messages:
		st.setCounter(o.viewer, r, nMessages, 0)
	case engine.System:
		r.cursor, r.flags = st.newestNotif(), r.flags|flagCursor
	case engine.Feed:
		st.follows.SetSnaps(o.viewer, st.postCount)
	}
	emitUnread(out, []engine.UserID{engine.UserID(o.viewer)})
}

func (st *state) applyClickRedDot(o *op, out *[]engine.Event) {
	r := st.user(o.viewer)
	r.click = o.time
	emitUnread(out, []engine.UserID{engine.UserID(o.viewer)})
}

func (st *state) applyPushRedDot(o *op, out *[]engine.Event) {
	st.push = o.time
	emitBroadcast(out)
}

// sweepCursors drops the system cursors that expired at now, and the
// badge records left holding nothing. A dropped cursor reads exactly as an
// expired one (cursorLive), so the sweep changes memory, never answers.
func (st *state) sweepCursors(now, ttl int64) {
	var expired []uint64
	st.users.Range(func(u uint64, r userRec) bool {
		if r.flags&flagCursor != 0 && !cursorLive(&r, now, ttl) {
			expired = append(expired, u)
		}
		return true
	})
	for _, u := range expired {
		r, _ := st.users.Ref(u)
		r.flags &^= flagCursor
		r.cursor = 0
		if (*r == userRec{day: r.day}) {
			st.users.Delete(u)
			if !st.known(u) {
				st.nusers--
			}
		}
	}
}

func (st *state) userFields(u uint64, r *userRec) [8]uint64 {
	return [8]uint64{uint64(st.counter(u, r, nMentions)), uint64(st.counter(u, r, nComments)),
		uint64(st.counter(u, r, nLikes)), uint64(st.counter(u, r, nMessages)),
		uint64(r.click), r.cursor, uint64(r.day), uint64(r.flags)}
}

func writeUsers(e *enc, st *state) {
	st.users.Range(func(u uint64, r userRec) bool {
		f := st.userFields(u, &r)
		e.start()
		e.u(u)
		e.masked(f[:])
		e.end()
		return true
	})
}

func readUsers(sr *snapshot.SectionReader, pc *pacer, st *state) error {
	err := eachItem(sr, pc, func(d *dec) {
		u := d.u("user")
		mask := d.byte1("field mask")
		var f [8]uint64
		for i := range f {
			if mask&(1<<i) != 0 {
				if f[i] = d.u("field"); f[i] == 0 {
					d.fail("zero field in the mask")
				}
			}
		}
		if d.err != "" {
			return
		}
		if f[6] > math.MaxUint32 || f[7] > math.MaxUint32 || max(f[0], f[1], f[2], f[3], f[4]) > math.MaxInt64 {
			d.fail("field out of range")
			return
		}
		if _, dup := st.users.Get(u); dup {
			d.fail(fmt.Sprintf("user %d listed twice", u))
			return
		}
		r := st.users.Upsert(u)
		*r = userRec{click: int64(f[4]), cursor: f[5], day: uint32(f[6]), flags: uint32(f[7])}
		for k := range r.n {
			st.setCounter(u, r, k, int64(f[k]))
		}
	})
	if err != nil {
		return err
	}
	return checkLen(sr, st.users.Len())
}

// notif is one system notification; its title and body live in
// state.notifText so that the list holds no pointers.
type notif struct {
	id                uint64
	time              int64
	off               uint64
	titleLen, bodyLen uint32
}

// newestNotif returns the id of the newest system notification, 0 if none.
func (st *state) newestNotif() uint64 {
	if n := len(st.notifs); n > 0 {
		return st.notifs[n-1].id
	}
	return 0
}

// notifsAfter counts the notifications newer than id: binary search, so a
// badge read costs O(log n) however long the list.
func (st *state) notifsAfter(id uint64) int {
	i := sort.Search(len(st.notifs), func(i int) bool { return st.notifs[i].id > id })
	return len(st.notifs) - i
}

func (st *state) notification(n *notif) engine.Notification {
	t := st.notifText[n.off : n.off+uint64(n.titleLen)+uint64(n.bodyLen)]
	return engine.Notification{
		ID:        engine.NotificationID(n.id),
		Title:     string(t[:n.titleLen]),
		Body:      string(t[n.titleLen:]),
		CreatedAt: nsTime(n.time),
	}
}

// PublishNotification implements engine.Store: one append, O(1). Its
// idempotency keys have no viewer (publishing is an admin act).
func (e *Engine) PublishNotification(ctx context.Context, title, body, idemKey string) (engine.Notification, error) {
	if err := ctx.Err(); err != nil {
		return engine.Notification{}, err
	}
	if err := engine.CheckNotification(title, body); err != nil {
		return engine.Notification{}, err
	}
	if err := engine.CheckIdemKey(idemKey); err != nil {
		return engine.Notification{}, err
	}
	o := &op{kind: opPublish, s1: title, s2: body}
	id, err := e.commit(o.withIdem(0, idemKey, engine.IdemPublish, engine.IdemArgs{Title: title, Body: body}))
	if err != nil {
		return engine.Notification{}, err
	}
	e.mu.RLock()
	defer e.mu.RUnlock()
	i := sort.Search(len(e.st.notifs), func(i int) bool { return e.st.notifs[i].id >= id })
	return e.st.notification(&e.st.notifs[i]), nil
}

// Notifications implements engine.Store.
func (e *Engine) Notifications(ctx context.Context, first int, after engine.NotificationID) ([]engine.Notification, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	first, err := engine.ClampPage(first)
	if err != nil {
		return nil, err
	}
	e.mu.RLock()
	defer e.mu.RUnlock()
	ns := e.st.notifs
	end := len(ns)
	if after != 0 {
		end = sort.Search(len(ns), func(i int) bool { return ns[i].id >= uint64(after) })
	}
	out := make([]engine.Notification, 0, min(first, end))
	for i := end - 1; i >= 0 && len(out) < first; i-- {
		out = append(out, e.st.notification(&ns[i]))
	}
	return out, nil
}

func (e *Engine) preparePublish(o *op) {
	newest := e.st.newestNotif()
	o.a = e.newID(func(id uint64) bool { return id <= newest })
}

func (st *state) applyPublish(o *op, out *[]engine.Event) {
	off := uint64(len(st.notifText))
	st.notifText = append(append(st.notifText, o.s1...), o.s2...)
	st.notifs = append(st.notifs, notif{id: o.a, time: o.time, off: off,
		titleLen: uint32(len(o.s1)), bodyLen: uint32(len(o.s2))})
	emitBroadcast(out)
}

func writeNotifs(e *enc, st *state) {
	for i := range st.notifs {
		n := &st.notifs[i]
		text := st.notifText[n.off : n.off+uint64(n.titleLen)+uint64(n.bodyLen)]
		e.start()
		e.u(n.id)
		e.v(n.time)
		e.str(text[:n.titleLen])
		e.str(text[n.titleLen:])
		e.end()
	}
}

func readNotifs(sr *snapshot.SectionReader, pc *pacer, st *state) error {
	return eachItem(sr, pc, func(d *dec) {
		id := d.u("id")
		t := d.nonNeg(d.v("time"), "time")
		title := d.bytes(maxStringLen, "title")
		body := d.bytes(maxStringLen, "body")
		if d.err != "" {
			return
		}
		if n := len(st.notifs); id == 0 || n > 0 && id <= st.notifs[n-1].id {
			d.fail("notification ids not increasing")
			return
		}
		off := uint64(len(st.notifText))
		st.notifText = append(append(st.notifText, title...), body...)
		st.notifs = append(st.notifs, notif{id: id, time: t, off: off,
			titleLen: uint32(len(title)), bodyLen: uint32(len(body))})
	})
}
