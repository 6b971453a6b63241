package embedded

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/ops"
	"github.com/tally-dev/tally/engine/snapshot"
	"github.com/tally-dev/tally/engine/snowflake"
	"github.com/tally-dev/tally/engine/table"
)

// A user's badge state is kept in three packed tables (no pointers), so
// that each user pays for what they use: a user who only reads their
// badges has a visit record (seenRec: 12 bytes, a 21-byte slot), a user
// with unread counts a badge record (badgeRec: 8 bytes, a 17-byte slot),
// a user who clicked the red dot a click stamp (state.clicks: 8 bytes, a
// 17-byte slot), and a user who does none of these has none. The four
// unread counters are 16-bit: nearly every user's are small (a badge is
// read and cleared), but a celebrity's unread likes pass 65,534 in an
// hour and the badge must stay exact, so a counter at wideMark holds its
// value in state.wide instead (seed 003's narrow field with an escape to
// an overflow table), which costs such a user 32 bytes more.
type badgeRec struct {
	n [4]uint16 // unread mentions, comments, likes, messages (nMentions...)
}

// seenRec is a user's last visit and system cursor.
type seenRec struct {
	day    uint32    // last active, in days since the Unix epoch; flagCursor: has a cursor
	cursor [2]uint32 // last system notification seen (low, high word), if flagCursor
}

// userRec is a user's badge state as one record: what the three tables
// hold of them together, as snapshots (USER) and tests see it.
type userRec struct {
	n      [4]uint16
	day    uint32
	flags  uint32
	click  int64
	cursor uint64
}

// The counters of badgeRec.n.
const (
	nMentions = iota
	nComments
	nLikes
	nMessages
)

// wideMark in badgeRec.n says the counter's value is in state.wide.
const wideMark = math.MaxUint16

// flagCursor: the user has a system cursor. Without one the user is new
// (or was idle long enough to be forgotten) and reads 0 system unread.
// It is userRec.flags' one bit, and seenRec.day's top bit (day numbers
// stay below 2^31 for millions of years).
const flagCursor = 1

const seenCursor = 1 << 31

func words(v uint64) [2]uint32   { return [2]uint32{uint32(v), uint32(v >> 32)} }
func unwords(w [2]uint32) uint64 { return uint64(w[0]) | uint64(w[1])<<32 }

func (r *seenRec) hasCursor() bool { return r.day&seenCursor != 0 }
func (r *seenRec) lastDay() uint32 { return r.day &^ seenCursor }

// setCursor gives r the system cursor c.
func (r *seenRec) setCursor(c uint64) { r.cursor, r.day = words(c), r.day|seenCursor }

// bump adds 1 to unread counter k of user u.
func (st *state) bump(u uint64, k int) {
	r := st.badge(u)
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

// counter returns unread counter k of u, whose badge record is r.
func (st *state) counter(u uint64, r *badgeRec, k int) int64 {
	if r.n[k] != wideMark {
		return int64(r.n[k])
	}
	w, _ := st.wide.Get(u)
	return w[k]
}

// setCounter sets unread counter k of u, whose badge record is r, to v >= 0.
func (st *state) setCounter(u uint64, r *badgeRec, k int, v int64) {
	if r.n[k] == wideMark {
		w, _ := st.wide.Ref(u)
		if w[k] = 0; *w == [4]int64{} {
			st.wide.Delete(u)
		}
	}
	if v < wideMark {
		r.n[k] = uint16(v)
		return
	}
	r.n[k] = wideMark
	st.wide.Upsert(u)[k] = v
}

// badge returns u's badge record, creating it. The pointer is valid until
// the next insert into or delete from st.badges.
func (st *state) badge(u uint64) *badgeRec { return userRecord(st, st.badges, u) }

// seen returns u's visit record, creating it; valid as badge's.
func (st *state) seen(u uint64) *seenRec { return userRecord(st, st.seens, u) }

// userRecord returns u's record in one of the per-user tables, creating
// it (and counting u in the Users statistic if it is their first state).
func userRecord[V any](st *state, t *table.Table[userKey, V], u uint64) *V {
	if r, ok := t.Ref(keyOf(u)); ok {
		return r
	}
	if !st.known(u) {
		st.nusers++
	}
	return t.Upsert(keyOf(u))
}

// hasUserRec reports whether u has a badge or a visit record or a click.
func (st *state) hasUserRec(u uint64) bool {
	_, b := st.badges.Get(keyOf(u))
	_, s := st.seens.Get(keyOf(u))
	_, c := st.clicks.Get(keyOf(u))
	return b || s || c
}

// setClick records u's red-dot click at stamp (Unix ns).
func (st *state) setClick(u uint64, stamp int64) {
	if !st.known(u) {
		st.nusers++
	}
	st.clicks.Put(keyOf(u), words(uint64(stamp)))
}

// userView returns u's badge state as one record, and whether u has any.
func (st *state) userView(u uint64) (userRec, bool) {
	b, bok := st.badges.Get(keyOf(u))
	s, sok := st.seens.Get(keyOf(u))
	c, cok := st.clicks.Get(keyOf(u))
	r := userRec{n: b.n, click: int64(unwords(c)), day: s.lastDay(), cursor: unwords(s.cursor)}
	if s.hasCursor() {
		r.flags = flagCursor
	}
	return r, bok || sok || cok
}

// rangeUserRecs calls fn once for every user with a badge or a visit
// record or a click.
func (st *state) rangeUserRecs(fn func(u uint64)) {
	st.badges.Range(func(k userKey, _ badgeRec) bool {
		fn(k.id())
		return true
	})
	st.seens.Range(func(k userKey, _ seenRec) bool {
		if _, ok := st.badges.Get(k); !ok {
			fn(k.id())
		}
		return true
	})
	st.clicks.Range(func(k userKey, _ [2]uint32) bool {
		_, b := st.badges.Get(k)
		_, s := st.seens.Get(k)
		if !b && !s {
			fn(k.id())
		}
		return true
	})
}

// userRecords returns how many users have a badge or a visit record or a
// click.
func (st *state) userRecords() int {
	n := 0
	st.rangeUserRecs(func(uint64) { n++ })
	return n
}

// day returns the day number of a Unix-ns time.
func day(ns int64) uint32 { return uint32(ns / nsPerDay) }

const nsPerDay = int64(24 * 60 * 60 * 1e9)

// cursorFacts are what u's visit record r (ok: u has one) says of their
// system cursor, for the ops cursor rules. Activity is kept per day: a
// user last active on day d was last active at its start.
func cursorFacts(r *seenRec, ok bool) ops.CursorFacts {
	if !ok {
		return ops.CursorFacts{}
	}
	return ops.CursorFacts{HasCursor: r.hasCursor(), LastActive: time.Unix(0, int64(r.lastDay())*nsPerDay)}
}

// unread computes viewer's badges at now (ops.Unread) and what the read
// owes the viewer's record (ops.DecideTouch): a first visit (set the
// cursor), a cursor that has expired (set it again), or a new day of
// activity.
func (st *state) unread(viewer uint64, now, ttl int64) (engine.Unread, ops.Touch) {
	var f ops.UnreadFacts
	b, ok := st.badges.Get(keyOf(viewer))
	if ok {
		f.Mentions, f.Comments = st.counter(viewer, &b, nMentions), st.counter(viewer, &b, nComments)
		f.Likes, f.Messages = st.counter(viewer, &b, nLikes), st.counter(viewer, &b, nMessages)
	}
	r, ok := st.seens.Get(keyOf(viewer))
	cf, at := cursorFacts(&r, ok), time.Unix(0, now)
	if f.CursorLive = ops.CursorLive(cf, at, time.Duration(ttl)); f.CursorLive {
		f.Newer = int64(st.notifsAfter(unwords(r.cursor)))
	}
	fb := feedBufs.Get().(*feedBuf)
	fb.targets, fb.snaps = st.follows.List(viewer, fb.targets[:0], fb.snaps[:0])
	fb.posts = slices.Grow(fb.posts[:0], len(fb.targets))[:len(fb.targets)]
	st.posted.GetMany(fb.targets, fb.posts)
	f.FolloweePosts, f.Snapshots = fb.posts, fb.snaps
	c, _ := st.clicks.Get(keyOf(viewer))
	f.Push, f.Click = st.push, int64(unwords(c))
	u := ops.Unread(f)
	feedBufs.Put(fb)
	return u, ops.DecideTouch(cf, at, time.Duration(ttl))
}

// feedBuf holds a badge read's followees, their snapshots and post
// counts. Reads run side by side under the read lock, so each takes its
// own from feedBufs.
type feedBuf struct {
	targets      []uint64
	snaps, posts []int64
}

var feedBufs = sync.Pool{New: func() any { return new(feedBuf) }}

// touchRec logs what a badge read owed its viewer's record: today's
// activity and, when reset, a cursor restarting at cursor (the newest
// notification when it was logged).
type touchRec struct {
	recHeader
	viewer engine.UserID
	cursor uint64
	reset  bool
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
	if err := e.rlockAs(ctx, uint64(viewer)); err != nil {
		return engine.Unread{}, err
	}
	u, touch := e.st.unread(uint64(viewer), e.now().UnixNano(), e.ttl)
	e.mu.RUnlock()
	if !touch.Needed() {
		return u, nil
	}
	if _, err := e.commitCtx(ctx, &touchRec{viewer: viewer}); err != nil {
		// A read-only engine still answers: what was read is right,
		// only the bookkeeping of the visit is lost.
		if errors.Is(err, engine.ErrUnavailable) {
			return u, nil
		}
		return engine.Unread{}, err
	}
	if err := e.rlockAs(ctx, uint64(viewer)); err != nil {
		return engine.Unread{}, err
	}
	u, _ = e.st.unread(uint64(viewer), e.now().UnixNano(), e.ttl)
	e.mu.RUnlock()
	return u, nil
}

// markReadRec, clickRec and pushRec log MarkRead, ClickRedDot and
// PushRedDot.
type markReadRec struct {
	recHeader
	ops.MarkRead
}

type clickRec struct {
	recHeader
	ops.ClickRedDot
}

type pushRec struct {
	recHeader
	ops.PushRedDot
}

// MarkRead implements engine.Store.
func (e *Engine) MarkRead(ctx context.Context, viewer engine.UserID, kind engine.UnreadKind) error {
	_, err := e.commitChecked(ctx, &markReadRec{MarkRead: ops.MarkRead{Viewer: viewer, Kind: kind}})
	return err
}

// ClickRedDot implements engine.Store.
func (e *Engine) ClickRedDot(ctx context.Context, viewer engine.UserID) error {
	_, err := e.commitChecked(ctx, &clickRec{ClickRedDot: ops.ClickRedDot{Viewer: viewer}})
	return err
}

// PushRedDot implements engine.Store: one timestamp, O(1).
func (e *Engine) PushRedDot(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	_, err := e.commitCtx(ctx, &pushRec{})
	return err
}

// prepareTouch decides the touch at now (ops.DecideTouch): done when the
// cursor is live and today's activity is already recorded; an expired or
// missing cursor restarts at the newest notification.
func (e *Engine) prepareTouch(r *touchRec, now int64) (done bool) {
	u, ok := e.st.seens.Get(keyOf(uint64(r.viewer)))
	t := ops.DecideTouch(cursorFacts(&u, ok), time.Unix(0, now), time.Duration(e.ttl))
	if !t.Needed() {
		return true
	}
	if r.reset = t.ResetCursor; r.reset {
		r.cursor = e.st.newestNotif()
	}
	return false
}

func (st *state) applyTouch(r *touchRec) {
	u := st.seen(uint64(r.viewer))
	u.day = u.day&seenCursor | day(r.time)
	if r.reset {
		u.setCursor(r.cursor)
	}
}

// applyRead clears the badge m names.
func (st *state) applyRead(m ops.ReadMark) {
	u := uint64(m.User)
	switch m.Kind {
	case engine.Mentions, engine.Comments, engine.Likes, engine.Messages:
		if r, ok := st.badges.Ref(keyOf(u)); ok {
			st.setCounter(u, r, counterOf(m.Kind), 0)
		} else {
			st.keepKnown(u)
		}
	case engine.System:
		st.seen(u).setCursor(m.Cursor)
	case engine.Feed:
		st.follows.SetSnaps(u, st.posted.GetMany)
		st.keepKnown(u)
	}
}

// keepKnown gives u an empty visit record (the smaller kind) unless they
// have a badge or a visit record: a badge read makes its user known (the
// Users statistic, and what the sweep may forget) though it leaves
// nothing to count.
func (st *state) keepKnown(u uint64) {
	if !st.hasUserRec(u) {
		st.seen(u)
	}
}

// counterOf is the badgeRec.n index of unread kind k, one of Mentions,
// Comments, Likes and Messages.
func counterOf(k engine.UnreadKind) int { return int(k - engine.Mentions) }

// sweepRec logs a sweep of the cursors expired at its time with the TTL
// then in force.
type sweepRec struct {
	recHeader
	ttl int64
}

// sweepCursors drops the system cursors that expired at now, and the
// badge records left holding nothing. A dropped cursor reads exactly as an
// expired one (ops.CursorLive), so the sweep changes memory, never answers.
func (st *state) sweepCursors(now, ttl int64) {
	var expired []userKey
	at := time.Unix(0, now)
	st.seens.Range(func(k userKey, r seenRec) bool {
		if r.hasCursor() && !ops.CursorLive(cursorFacts(&r, true), at, time.Duration(ttl)) {
			expired = append(expired, k)
		}
		return true
	})
	for _, k := range expired {
		r, _ := st.seens.Ref(k)
		r.day, r.cursor = r.lastDay(), [2]uint32{}
		if b, ok := st.badges.Get(k); ok && b != (badgeRec{}) {
			continue // the badges keep the record, and with it the day
		}
		if _, ok := st.clicks.Get(k); ok {
			continue // so does the click
		}
		st.seens.Delete(k)
		st.badges.Delete(k)
		if !st.known(k.id()) {
			st.nusers--
		}
	}
}

func (st *state) userFields(u uint64, r *userRec) [8]uint64 {
	var f [8]uint64
	if b, ok := st.badges.Get(keyOf(u)); ok {
		for k := range b.n {
			f[k] = uint64(st.counter(u, &b, k))
		}
	}
	f[4], f[5], f[6], f[7] = uint64(r.click), r.cursor, uint64(r.day), uint64(r.flags)
	return f
}

// writeUsers writes USER, one item per user with a badge or a visit
// record or a click: the user's records of the three tables joined.
func writeUsers(e *enc, st *state) {
	item := func(u uint64) {
		r, _ := st.userView(u)
		f := st.userFields(u, &r)
		e.start()
		e.u(u)
		e.masked(f[:])
		e.end()
	}
	st.rangeUserRecs(item)
}

// readUsers reads USER into the badge and visit records and the clicks:
// counters make a badge record, the click a click stamp, the day and the cursor a visit record,
// and an item with neither an empty visit record (keepKnown's).
func readUsers(sr *snapshot.SectionReader, pc *pacer, st *state) error {
	n := 0
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
		if f[6] >= seenCursor || f[7]&^flagCursor != 0 || max(f[0], f[1], f[2], f[3], f[4]) > math.MaxInt64 {
			d.fail("field out of range")
			return
		}
		if st.hasUserRec(u) {
			d.fail(fmt.Sprintf("user %d listed twice", u))
			return
		}
		n++
		if f[5] != 0 || f[6] != 0 || f[7] != 0 || mask == 0 {
			r := st.seens.Upsert(keyOf(u))
			r.day = uint32(f[6])
			if f[7] != 0 {
				r.setCursor(f[5])
			} else {
				r.cursor = words(f[5])
			}
		}
		if f[4] != 0 {
			st.clicks.Put(keyOf(u), words(f[4]))
		}
		if max(f[0], f[1], f[2], f[3]) != 0 {
			r := st.badges.Upsert(keyOf(u))
			for k := range r.n {
				st.setCounter(u, r, k, int64(f[k]))
			}
		}
	})
	if err != nil {
		return err
	}
	return checkLen(sr, n)
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
		CreatedAt: snowflake.Time(n.id),
	}
}

// publishRec logs a system notification with the id it was given.
type publishRec struct {
	recHeader
	ops.Publish
	id uint64
}

// PublishNotification implements engine.Store: one append, O(1). Its
// idempotency keys have no viewer (publishing is an admin act).
func (e *Engine) PublishNotification(ctx context.Context, title, body, idemKey string) (engine.Notification, error) {
	if err := ctx.Err(); err != nil {
		return engine.Notification{}, err
	}
	r := &publishRec{Publish: ops.Publish{Title: title, Body: body, IdemKey: idemKey}}
	if err := r.Check(); err != nil {
		return engine.Notification{}, err
	}
	r.withIdem(0, idemKey, engine.IdemPublish, engine.IdemArgs{Title: title, Body: body})
	id, err := e.commitCtx(ctx, r)
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

// applyPublish appends r's notification to the list.
func (st *state) applyPublish(r *publishRec) {
	off := uint64(len(st.notifText))
	st.notifText = append(append(st.notifText, r.Title...), r.Body...)
	st.notifs = append(st.notifs, notif{id: r.id, time: r.time, off: off,
		titleLen: uint32(len(r.Title)), bodyLen: uint32(len(r.Body))})
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

// The badges' records' encodings (record.go has the format).

// A touch that does not reset the cursor has none to log.
func (r *touchRec) appendTo(b []byte) []byte {
	b = appendFlag(appendID(b, r.viewer), r.reset)
	if r.reset {
		b = binary.AppendUvarint(b, r.cursor)
	}
	return b
}

func (r *touchRec) readFrom(d *decoder) {
	r.viewer, r.reset = engine.UserID(d.id("viewer")), d.flag("reset")
	if r.reset {
		r.cursor = d.uvarint("cursor")
	}
}

func (r *markReadRec) appendTo(b []byte) []byte { return append(appendID(b, r.Viewer), byte(r.Kind)) }

func (r *markReadRec) readFrom(d *decoder) {
	r.Viewer = engine.UserID(d.id("viewer"))
	if k := d.bytes(1, "unread kind"); k != nil {
		if r.Kind = engine.UnreadKind(k[0]); r.Kind < engine.Mentions || r.Kind > engine.Feed {
			d.fail(fmt.Sprintf("unread kind %d", k[0]))
		}
	}
}

func (r *clickRec) appendTo(b []byte) []byte { return appendID(b, r.Viewer) }

func (r *clickRec) readFrom(d *decoder) { r.Viewer = engine.UserID(d.id("viewer")) }

func (r *publishRec) appendTo(b []byte) []byte {
	b = appendIdem(binary.AppendUvarint(b, r.id), &r.recHeader)
	return appendString(appendString(b, r.Title), r.Body)
}

func (r *publishRec) readFrom(d *decoder) {
	r.id = d.id("notification")
	d.idem(&r.recHeader)
	r.Title, r.Body = d.text(true, "title"), d.text(false, "body")
}
