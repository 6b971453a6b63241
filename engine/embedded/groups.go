package embedded

import (
	"context"
	"fmt"
	"math/bits"
	"slices"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/ops"
	"github.com/tally-dev/tally/engine/receipts"
	"github.com/tally-dev/tally/engine/snapshot"
	"github.com/tally-dev/tally/engine/snowflake"
)

// group maps mapids to users. mapid i+1 belongs to byMap[i] forever;
// leaving only sets the quit bit, so old messages' bitmaps stay readable
// and a returning member gets their old mapid back (docs/seeds.md#seed-004).
type group struct {
	id      uint64
	byMap   []uint64
	quit    []uint64 // bit i: mapid i+1 has quit
	current int      // members who have not quit
}

func (g *group) hasQuit(mapid uint32) bool {
	i := mapid - 1
	return g.quit[i/64]&(1<<(i%64)) != 0
}

func (g *group) setQuit(mapid uint32, q bool) {
	i := mapid - 1
	if q {
		g.quit[i/64] |= 1 << (i % 64)
	} else {
		g.quit[i/64] &^= 1 << (i % 64)
	}
}

// currentAfter calls fn for the current members with a mapid above after,
// in mapid order, at most limit of them. It walks the quit words, so a
// stretch of members who left costs a word operation per 64 of them.
func (g *group) currentAfter(after uint32, limit int, fn func(u uint64)) {
	n := uint32(len(g.byMap))
	for w := int(after / 64); limit > 0 && w < len(g.quit); w++ {
		x := ^g.quit[w]
		if w == int(after/64) {
			x &^= 1<<(after%64) - 1
		}
		for ; x != 0 && limit > 0; x &= x - 1 {
			i := uint32(w*64 + bits.TrailingZeros64(x)) // mapid i+1
			if i >= n {
				return
			}
			fn(g.byMap[i])
			limit--
		}
	}
}

// quitters yields the mapids that have quit, in order.
func (g *group) quitters(yield func(uint32) bool) {
	for w, word := range g.quit {
		for word != 0 {
			if !yield(uint32(w*64+bits.TrailingZeros64(word)) + 1) {
				return
			}
			word &= word - 1
		}
	}
}

// join gives u the next mapid.
func (g *group) join(u uint64) uint32 {
	g.byMap = append(g.byMap, u)
	if len(g.byMap) > len(g.quit)*64 {
		g.quit = append(g.quit, 0)
	}
	g.current++
	return uint32(len(g.byMap))
}

// message is one group message; its text lives in state.msgText.
type message struct {
	id, group, sender uint64
	time              int64
	off               uint64
	textLen           uint32
	rc                receipts.Receipt
}

func (st *state) group(id uint64) (*group, bool) {
	i, ok := st.groups.Get(id)
	if !ok {
		return nil, false
	}
	if st.held != nil {
		if g := st.held.groups[i]; g != nil {
			return g, true
		}
	}
	return &st.groupList[i], true
}

// groupMut returns group id to be changed. While a snapshot's cut shares
// groupList (st.held), a group it holds is changed in a copy of its own,
// which the cut's thaw writes back: the cut reads it as it was.
func (st *state) groupMut(id uint64) (*group, bool) {
	g, ok := st.group(id)
	if !ok || st.held == nil {
		return g, ok
	}
	i, _ := st.groups.Get(id)
	if int(i) >= len(st.held.st.groupList) || st.held.groups[i] != nil {
		return g, true
	}
	c := *g
	c.byMap = slices.Clip(c.byMap) // a join appends to a new array
	c.quit = slices.Clone(c.quit)
	st.held.groups[i] = &c
	return &c, true
}

// memberOf returns u's mapid in g and whether u is a current member.
func (st *state) memberOf(g *group, u uint64) (mapid uint32, current bool) {
	mapid, ok := st.members.Get(pair{g.id, u})
	if !ok {
		return 0, false
	}
	return mapid, !g.hasQuit(mapid)
}

func (st *state) message(id uint64) (*message, bool) {
	i, ok := st.msgs.Get(id)
	if !ok {
		return nil, false
	}
	if st.held != nil {
		if m := st.held.msgs[i]; m != nil {
			return m, true
		}
	}
	return &st.msgList[i], true
}

// messageMut is message for a change, as groupMut is for groups.
func (st *state) messageMut(id uint64) (*message, bool) {
	m, ok := st.message(id)
	if !ok || st.held == nil {
		return m, ok
	}
	i, _ := st.msgs.Get(id)
	if int(i) >= len(st.held.st.msgList) || st.held.msgs[i] != nil {
		return m, true
	}
	c := *m
	c.rc = m.rc.Clone()
	st.held.msgs[i] = &c
	return &c, true
}

func (st *state) messageOut(m *message) engine.Message {
	return engine.Message{
		ID:     engine.MessageID(m.id),
		Group:  engine.GroupID(m.group),
		Sender: engine.UserID(st.maskAuthor(m.sender)),
		Text:   string(st.msgText[m.off : m.off+uint64(m.textLen)]),
		SentAt: snowflake.Time(m.id),
	}
}

// memberGroup returns group id if viewer may see it (ops.ViewGroup).
func (e *Engine) memberGroup(id, viewer uint64) (*group, error) {
	f, g := e.st.groupFacts(engine.GroupID(id), engine.UserID(viewer))
	if err := ops.ViewGroup(engine.GroupID(id), f); err != nil {
		return nil, err
	}
	return g, nil
}

// createGroupRec logs a new group, with the id it was given;
// addMembersRec the users an AddGroupMembers made current members;
// leaveGroupRec a member leaving.
type createGroupRec struct {
	recHeader
	ops.CreateGroup
}

type addMembersRec struct {
	recHeader
	ops.AddMembers
}

type leaveGroupRec struct {
	recHeader
	ops.LeaveGroup
	// after, when set (LeaveGroup, not replay), receives the group as
	// its remaining members see it, read in the commit of the leave.
	after *engine.Group
}

// CreateGroup implements engine.Store.
func (e *Engine) CreateGroup(ctx context.Context, viewer engine.UserID, members []engine.UserID) (engine.GroupID, error) {
	id, err := e.commitChecked(ctx, &createGroupRec{CreateGroup: ops.CreateGroup{Viewer: viewer, Members: members}})
	return engine.GroupID(id), err
}

// AddGroupMembers implements engine.Store.
func (e *Engine) AddGroupMembers(ctx context.Context, viewer engine.UserID, g engine.GroupID, us []engine.UserID) error {
	_, err := e.commitChecked(ctx, &addMembersRec{AddMembers: ops.AddMembers{Viewer: viewer, Group: g, Users: us}})
	return err
}

// LeaveGroup implements engine.Store.
func (e *Engine) LeaveGroup(ctx context.Context, viewer engine.UserID, g engine.GroupID) (engine.Group, error) {
	if err := ctx.Err(); err != nil {
		return engine.Group{}, err
	}
	var after engine.Group
	r := &leaveGroupRec{LeaveGroup: ops.LeaveGroup{Viewer: viewer, Group: g}, after: &after}
	if err := r.Check(); err != nil {
		return engine.Group{}, err
	}
	if _, err := e.commitCtx(ctx, r); err != nil {
		return engine.Group{}, err
	}
	return after, nil
}

// Group implements engine.Store.
func (e *Engine) Group(ctx context.Context, viewer engine.UserID, id engine.GroupID) (engine.Group, error) {
	if err := ctx.Err(); err != nil {
		return engine.Group{}, err
	}
	if err := e.rlockAs(ctx, uint64(viewer)); err != nil {
		return engine.Group{}, err
	}
	defer e.mu.RUnlock()
	g, err := e.memberGroup(uint64(id), uint64(viewer))
	if err != nil {
		return engine.Group{}, err
	}
	return e.st.view(g, id, 0), nil
}

// view is g as Group reads it: how many current members it has and the
// first page of them. without, when not 0, is a current member left out
// of both: the one whose leave is being committed.
func (st *state) view(g *group, id engine.GroupID, without uint64) engine.Group {
	out := engine.Group{ID: id, MemberCount: g.current}
	if without != 0 {
		out.MemberCount--
	}
	for _, x := range st.erasing {
		if mapid, ok := st.members.Get(pair{g.id, x.user}); ok && !g.hasQuit(mapid) {
			out.MemberCount-- // a user being erased is no member (lifecycle.go)
		}
	}
	out.Members = make([]engine.UserID, 0, min(out.MemberCount, engine.MaxPageSize))
	st.currentAfter(g, 0, engine.MaxPageSize, without, func(u uint64) {
		out.Members = append(out.Members, engine.UserID(u))
	})
	return out
}

// currentAfter is g.currentAfter for a reader: at most limit current
// members, leaving out without (when not 0) and users being erased.
func (st *state) currentAfter(g *group, after uint32, limit int, without uint64, fn func(u uint64)) {
	if without == 0 && len(st.erasing) == 0 {
		g.currentAfter(after, limit, fn)
		return
	}
	n := 0
	g.currentAfter(after, len(g.byMap), func(u uint64) {
		if n < limit && u != without && !st.isErasing(u) {
			fn(u)
			n++
		}
	})
}

// GroupMembers implements engine.Store.
func (e *Engine) GroupMembers(ctx context.Context, viewer engine.UserID, id engine.GroupID, first int, after engine.UserID) ([]engine.UserID, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := engine.CheckPage(first); err != nil {
		return nil, err
	}
	if err := e.rlockAs(ctx, uint64(viewer)); err != nil {
		return nil, err
	}
	defer e.mu.RUnlock()
	g, err := e.memberGroup(uint64(id), uint64(viewer))
	if err != nil {
		return nil, err
	}
	from, err := e.cursorMapID(g, after)
	if err != nil {
		return nil, err
	}
	out := make([]engine.UserID, 0, min(first, g.current))
	e.st.currentAfter(g, from, first, 0, func(u uint64) { out = append(out, engine.UserID(u)) })
	return out, nil
}

// namedPage pages a receipt's list (ReadersAfter or UnreadersAfter of
// it) after mapid after, calling add for at most limit members: an erased
// member, or one being erased, still counts but no list names them, so
// the page reads on past them.
func (st *state) namedPage(g *group, list func(after uint32, limit int, fn func(mapid uint32)), after uint32, limit int, add func(u uint64)) {
	for got := 0; got < limit; {
		want, seen := limit-got, 0
		list(after, want, func(mapid uint32) {
			seen++
			after = mapid
			if u := g.byMap[mapid-1]; u != 0 && !st.isErasing(u) {
				add(u)
				got++
			}
		})
		if seen < want {
			return // the list ended
		}
	}
}

// cursorMapID is the mapid of the user a page starts after (0: none).
func (e *Engine) cursorMapID(g *group, after engine.UserID) (uint32, error) {
	if after == 0 {
		return 0, nil
	}
	mapid, _ := e.st.memberOf(g, uint64(after))
	if mapid == 0 || e.st.isErasing(uint64(after)) {
		return 0, errBadCursor(after)
	}
	return mapid, nil
}

func errBadCursor(after engine.UserID) error {
	return fmt.Errorf("%w: after: user %d was never a member of the group", engine.ErrInvalid, uint64(after))
}

// sendMessageRec logs a message, with the id it was given.
type sendMessageRec struct {
	recHeader
	ops.SendMessage
}

// SendMessage implements engine.Store.
func (e *Engine) SendMessage(ctx context.Context, viewer engine.UserID, g engine.GroupID, text string, mentions []engine.UserID, idemKey string) (engine.Message, error) {
	if err := ctx.Err(); err != nil {
		return engine.Message{}, err
	}
	r := &sendMessageRec{SendMessage: ops.SendMessage{Viewer: viewer, Group: g, Text: text, Mentions: mentions, IdemKey: idemKey}}
	if err := r.Check(); err != nil {
		return engine.Message{}, err
	}
	r.withIdem(viewer, idemKey, engine.IdemSendMessage,
		engine.IdemArgs{Group: g, Mentions: r.Mentions, Text: text})
	id, err := e.commitCtx(ctx, r)
	if err != nil {
		return engine.Message{}, err
	}
	e.mu.RLock()
	defer e.mu.RUnlock()
	msg, _ := e.st.message(id)
	return e.st.messageOut(msg), nil
}

// memberMessage returns message id if viewer may see it
// (ops.ViewMessage). Caller holds mu.
func (e *Engine) memberMessage(id, viewer uint64) (*message, error) {
	m, ok := e.st.message(id)
	var standing ops.MemberState
	if ok {
		g, _ := e.st.group(m.group)
		standing = e.st.memberState(g, engine.UserID(viewer))
	}
	if err := ops.ViewMessage(engine.MessageID(id), ok, standing); err != nil {
		return nil, err
	}
	return m, nil
}

// Message implements engine.Store.
func (e *Engine) Message(ctx context.Context, viewer engine.UserID, id engine.MessageID) (engine.Message, error) {
	if err := ctx.Err(); err != nil {
		return engine.Message{}, err
	}
	if err := e.rlockAs(ctx, uint64(viewer)); err != nil {
		return engine.Message{}, err
	}
	defer e.mu.RUnlock()
	m, err := e.memberMessage(uint64(id), uint64(viewer))
	if err != nil {
		return engine.Message{}, err
	}
	return e.st.messageOut(m), nil
}

// markMessagesReadRec logs the messages a MarkMessagesRead marked read.
type markMessagesReadRec struct {
	recHeader
	ops.MarkMessagesRead
}

// MarkMessagesRead implements engine.Store.
func (e *Engine) MarkMessagesRead(ctx context.Context, viewer engine.UserID, ms []engine.MessageID) ([]engine.Message, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	r := &markMessagesReadRec{MarkMessagesRead: ops.MarkMessagesRead{Viewer: viewer, Messages: ms}}
	if err := r.Check(); err != nil {
		return nil, err
	}
	if len(ms) == 0 {
		return []engine.Message{}, nil
	}
	if _, err := e.commitCtx(ctx, r); err != nil {
		return nil, err
	}
	out := make([]engine.Message, len(ms))
	e.mu.RLock()
	defer e.mu.RUnlock()
	for i, id := range ms {
		m, _ := e.st.message(uint64(id))
		out[i] = e.st.messageOut(m)
	}
	return out, nil
}

// Receipts implements engine.Store.
func (e *Engine) Receipts(ctx context.Context, viewer engine.UserID, id engine.MessageID, limit int) (engine.Receipts, error) {
	if err := ctx.Err(); err != nil {
		return engine.Receipts{}, err
	}
	limit, err := engine.ClampPage(limit)
	if err != nil {
		return engine.Receipts{}, err
	}
	if err := e.rlockAs(ctx, uint64(viewer)); err != nil {
		return engine.Receipts{}, err
	}
	defer e.mu.RUnlock()
	m, g, err := e.senderMessage(id, viewer)
	if err != nil {
		return engine.Receipts{}, err
	}
	var r engine.Receipts
	r.ReadCount, r.UnreadCount = m.rc.Counts()
	if limit > 0 {
		r.Readers = make([]engine.UserID, 0, min(limit, r.ReadCount))
		e.st.namedPage(g, m.rc.ReadersAfter, 0, limit, func(u uint64) { r.Readers = append(r.Readers, engine.UserID(u)) })
		r.Unreaders = make([]engine.UserID, 0, min(limit, r.UnreadCount))
		e.st.namedPage(g, m.rc.UnreadersAfter, 0, limit, func(u uint64) { r.Unreaders = append(r.Unreaders, engine.UserID(u)) })
	}
	return r, nil
}

// ReceiptMembers implements engine.Store.
func (e *Engine) ReceiptMembers(ctx context.Context, viewer engine.UserID, id engine.MessageID, readers bool, first int, after engine.UserID) ([]engine.UserID, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := engine.CheckPage(first); err != nil {
		return nil, err
	}
	if err := e.rlockAs(ctx, uint64(viewer)); err != nil {
		return nil, err
	}
	defer e.mu.RUnlock()
	m, g, err := e.senderMessage(id, viewer)
	if err != nil {
		return nil, err
	}
	from, err := e.cursorMapID(g, after)
	if err != nil {
		return nil, err
	}
	out := make([]engine.UserID, 0, first)
	list := m.rc.UnreadersAfter
	if readers {
		list = m.rc.ReadersAfter
	}
	e.st.namedPage(g, list, from, first, func(u uint64) { out = append(out, engine.UserID(u)) })
	return out, nil
}

// senderMessage returns message id and its group if viewer may see its
// receipts (ops.ViewReceipts). Caller holds mu.
func (e *Engine) senderMessage(id engine.MessageID, viewer engine.UserID) (*message, *group, error) {
	m, ok := e.st.message(uint64(id))
	var g *group
	var standing ops.MemberState
	if ok {
		g, _ = e.st.group(m.group)
		standing = e.st.memberState(g, viewer)
	}
	if err := ops.ViewReceipts(id, ok, ok && m.sender == uint64(viewer), standing); err != nil {
		return nil, nil, err
	}
	return m, g, nil
}

// memberState is u's standing in g; a user being erased has none
// (lifecycle.go).
func (st *state) memberState(g *group, u engine.UserID) ops.MemberState {
	if st.isErasing(uint64(u)) {
		return ops.MemberState{}
	}
	mapid, cur := st.memberOf(g, uint64(u))
	return ops.MemberState{Joined: mapid != 0, Current: cur}
}

// groupFacts are what a group operation by viewer reads of group id; g is
// nil when there is no such group.
func (st *state) groupFacts(id engine.GroupID, viewer engine.UserID) (ops.GroupFacts, *group) {
	g, ok := st.group(uint64(id))
	if !ok {
		return ops.GroupFacts{}, nil
	}
	return ops.GroupFacts{Exists: true, Viewer: st.memberState(g, viewer), MapIDs: len(g.byMap)}, g
}

func (st *state) groupTaken(id uint64) bool { _, ok := st.groups.Get(id); return ok }

func (st *state) messageTaken(id uint64) bool { _, ok := st.msgs.Get(id); return ok }

func (st *state) decideAddMembers(r *addMembersRec) error {
	f, g := st.groupFacts(r.Group, r.Viewer)
	return r.Decide(f, func(u engine.UserID) ops.MemberState { return st.memberState(g, u) }, &st.eff)
}

func (st *state) decideLeaveGroup(r *leaveGroupRec) error {
	f, g := st.groupFacts(r.Group, r.Viewer)
	if err := r.Decide(f, &st.eff); err != nil {
		return err
	}
	if r.after != nil {
		// The commit applies this leave, and nothing else, under the
		// lock it decides under: the group after it is the group now
		// without the viewer.
		*r.after = st.view(g, r.Group, uint64(r.Viewer))
	}
	return nil
}

func (st *state) decideSendMessage(r *sendMessageRec) error {
	f, g := st.groupFacts(r.Group, r.Viewer)
	return r.Decide(f, func(u engine.UserID) bool { return st.memberState(g, u).Current }, &st.eff)
}

func (st *state) decideMarkMessagesRead(r *markMessagesReadRec) error {
	facts := st.msgFacts[:0]
	for _, id := range r.Messages {
		m, ok := st.message(uint64(id))
		if !ok {
			facts = append(facts, ops.MessageFacts{})
			continue
		}
		g, _ := st.group(m.group)
		mapid, cur := st.memberOf(g, uint64(r.Viewer))
		counted := counted(m, mapid, r.Viewer)
		facts = append(facts, ops.MessageFacts{Exists: true, Sender: engine.UserID(m.sender),
			Viewer:  ops.MemberState{Joined: mapid != 0, Current: cur},
			Counted: counted, Read: counted && m.rc.IsRead(mapid)})
	}
	st.msgFacts = facts
	return r.Decide(facts, &st.eff)
}

// counted applies ops.Counted to member mapid (user u) of message m. The
// receipt keeps, from the time m was sent, its last mapid and which
// mapids it leaves out (the sender and those who had quit).
func counted(m *message, mapid uint32, u engine.UserID) bool {
	sender := uint64(u) == m.sender
	inRange := mapid >= 1 && mapid <= m.rc.MaxID()
	quitAtSend := inRange && !sender && !m.rc.Counted(mapid)
	return ops.Counted(mapid, m.rc.MaxID(), quitAtSend, sender)
}

// newGroup makes the empty group r creates; its members join as effects.
func (st *state) newGroup(r *createGroupRec) {
	st.groups.Put(uint64(r.Group), uint32(len(st.groupList)))
	st.groupList = append(st.groupList, group{id: uint64(r.Group)})
}

// addMember makes u a current member of group id: a returning member gets
// their old mapid back, a new one the next mapid.
func (st *state) addMember(id engine.GroupID, u engine.UserID) {
	g, ok := st.groupMut(uint64(id))
	if !ok {
		return
	}
	mapid, cur := st.memberOf(g, uint64(u))
	switch {
	case cur:
	case mapid != 0:
		g.setQuit(mapid, false)
		g.current++
	default:
		st.members.Put(pair{g.id, uint64(u)}, g.join(uint64(u)))
	}
}

// removeMember marks u quit in group id, keeping their mapid.
func (st *state) removeMember(id engine.GroupID, u engine.UserID) {
	if g, ok := st.groupMut(uint64(id)); ok {
		if mapid, cur := st.memberOf(g, uint64(u)); cur {
			g.setQuit(mapid, true)
			g.current--
		}
	}
}

// storeMessage keeps r's message, with its receipt counting the group's
// members as they are now.
func (st *state) storeMessage(r *sendMessageRec) {
	g, ok := st.group(uint64(r.Group))
	if !ok {
		return
	}
	senderMap, _ := st.memberOf(g, uint64(r.Viewer))
	off := uint64(len(st.msgText))
	st.msgText = append(st.msgText, r.Text...)
	st.msgs.Put(uint64(r.Message), uint32(len(st.msgList)))
	quit := g.quitters
	if len(st.erasing) > 0 {
		// A user being erased is no member: not counted, as one who left.
		quit = func(yield func(uint32) bool) {
			for m := range g.quitters {
				if !yield(m) {
					return
				}
			}
			for _, x := range st.erasing {
				if m, ok := st.members.Get(pair{g.id, x.user}); ok && !g.hasQuit(m) && !yield(m) {
					return
				}
			}
		}
	}
	rc := receipts.New(uint32(len(g.byMap)), senderMap, quit)
	st.rcBytes += rc.SizeBytes()
	st.msgList = append(st.msgList, message{id: uint64(r.Message), group: uint64(r.Group), sender: uint64(r.Viewer),
		time: r.time, off: off, textLen: uint32(len(r.Text)), rc: rc})
}

// fanout bumps unread f.Kind of every current member of f.Group but
// f.Except: O(members) per message, which groups (unlike followers) can
// afford. With out set it tells them in one event.
func (st *state) fanout(f ops.Fanout, out *[]engine.Event) {
	g, ok := st.group(uint64(f.Group))
	if !ok {
		return
	}
	var told []engine.UserID
	if out != nil {
		told = make([]engine.UserID, 0, g.current)
	}
	k := counterOf(f.Kind)
	for i, u := range g.byMap {
		if u == uint64(f.Except) || g.hasQuit(uint32(i+1)) || st.isErasing(u) {
			continue
		}
		st.bump(u, k)
		if out != nil {
			told = append(told, engine.UserID(u))
		}
	}
	if out != nil && len(told) > 0 {
		*out = append(*out, engine.Event{Kind: engine.UnreadChanged, Users: told})
	}
}

// markReceipt marks message r.Message read by r.User.
func (st *state) markReceipt(r ops.ReceiptRead) {
	m, ok := st.messageMut(uint64(r.Message))
	if !ok {
		return
	}
	g, _ := st.group(m.group)
	mapid, _ := st.memberOf(g, uint64(r.User))
	size := m.rc.SizeBytes()
	if m.rc.MarkRead(mapid) {
		st.rcBytes += m.rc.SizeBytes() - size
	}
}
func writeGroups(e *enc, st *state) {
	for i := range st.groupList {
		g := &st.groupList[i]
		e.start()
		e.u(g.id)
		e.u(uint64(len(g.byMap)))
		for _, u := range g.byMap {
			e.u(u)
		}
		for _, q := range g.quit[:(len(g.byMap)+63)/64] {
			e.u(q)
		}
		e.end()
	}
}

func readGroups(sr *snapshot.SectionReader, pc *pacer, st *state) error {
	err := eachItem(sr, pc, func(d *dec) {
		id := d.u("group")
		n := d.u("members")
		if d.err != "" {
			return
		}
		if n == 0 || n > engine.MaxGroupMembers || n > uint64(len(d.b)) {
			d.fail("bad member count")
			return
		}
		if _, dup := st.groups.Get(id); dup {
			d.fail(fmt.Sprintf("group %d listed twice", id))
			return
		}
		g := group{id: id, byMap: make([]uint64, n), quit: make([]uint64, (n+63)/64)}
		for i := range g.byMap {
			g.byMap[i] = d.u("member")
		}
		for i := range g.quit {
			g.quit[i] = d.u("quit word")
		}
		if d.err != "" {
			return
		}
		if tail := n % 64; tail != 0 && g.quit[len(g.quit)-1]>>tail != 0 {
			d.fail("quit bits past the last member")
			return
		}
		quit := 0
		for _, w := range g.quit {
			quit += bits.OnesCount64(w)
		}
		g.current = int(n) - quit
		for i, u := range g.byMap {
			if u == 0 {
				// An erased member's mapid: it names nobody and stays
				// quit.
				if !g.hasQuit(uint32(i + 1)) {
					d.fail(fmt.Sprintf("group %d: an erased member's mapid %d is not quit", id, i+1))
					return
				}
				continue
			}
			k := pair{id, u}
			if _, dup := st.members.Get(k); dup {
				d.fail(fmt.Sprintf("user %d twice in group %d", u, id))
				return
			}
			st.members.Put(k, uint32(i+1))
		}
		st.groups.Put(id, uint32(len(st.groupList)))
		st.groupList = append(st.groupList, g)
	})
	if err != nil {
		return err
	}
	return checkLen(sr, st.groups.Len())
}

func writeMsgs(e *enc, st *state) {
	for i := range st.msgList {
		m := &st.msgList[i]
		e.start()
		e.u(m.id)
		e.u(m.group)
		e.u(m.sender)
		e.v(m.time)
		e.str(st.msgText[m.off : m.off+uint64(m.textLen)])
		var err error
		if e.scratch, err = m.rc.AppendBinary(e.scratch[:0]); err != nil {
			panic(err) // appending to a slice cannot fail
		}
		e.str(e.scratch)
		e.end()
	}
}

func readMsgs(sr *snapshot.SectionReader, pc *pacer, st *state) error {
	err := eachItem(sr, pc, func(d *dec) {
		id := d.u("message")
		gid := d.u("group")
		sender := d.u("sender")
		t := d.nonNeg(d.v("time"), "time")
		text := d.bytes(maxStringLen, "text")
		rcb := d.bytes(snapshot.MaxChunkBytes, "receipt")
		if d.err != "" {
			return
		}
		g, ok := st.group(gid)
		if !ok {
			d.fail(fmt.Sprintf("message %d of unknown group %d", id, gid))
			return
		}
		if _, dup := st.msgs.Get(id); dup {
			d.fail(fmt.Sprintf("message %d listed twice", id))
			return
		}
		var rc receipts.Receipt
		if err := rc.UnmarshalBinary(rcb); err != nil {
			d.fail(fmt.Sprintf("message %d: %v", id, err))
			return
		}
		if rc.MaxID() > uint32(len(g.byMap)) {
			d.fail(fmt.Sprintf("message %d counts mapids past its group's members", id))
			return
		}
		off := uint64(len(st.msgText))
		st.msgText = append(st.msgText, text...)
		st.msgs.Put(id, uint32(len(st.msgList)))
		st.rcBytes += rc.SizeBytes()
		st.msgList = append(st.msgList, message{id: id, group: gid, sender: sender, time: t,
			off: off, textLen: uint32(len(text)), rc: rc})
	})
	if err != nil {
		return err
	}
	return checkLen(sr, st.msgs.Len())
}

// The groups' records' encodings (record.go has the format).

func (r *createGroupRec) appendTo(b []byte) []byte {
	return appendIDs(appendID(appendID(b, r.Viewer), r.Group), r.Members)
}

func (r *createGroupRec) readFrom(d *decoder) {
	r.Viewer, r.Group = engine.UserID(d.id("viewer")), engine.GroupID(d.id("group"))
	r.Members = readIDs(d, r.Members, false, "member")
}

func (r *addMembersRec) appendTo(b []byte) []byte {
	return appendIDs(appendID(appendID(b, r.Viewer), r.Group), r.Users)
}

func (r *addMembersRec) readFrom(d *decoder) {
	r.Viewer, r.Group = engine.UserID(d.id("viewer")), engine.GroupID(d.id("group"))
	r.Users = readIDs(d, r.Users, true, "user")
}

func (r *leaveGroupRec) appendTo(b []byte) []byte { return appendID(appendID(b, r.Viewer), r.Group) }

func (r *leaveGroupRec) readFrom(d *decoder) {
	r.Viewer, r.Group = engine.UserID(d.id("viewer")), engine.GroupID(d.id("group"))
}

func (r *sendMessageRec) appendTo(b []byte) []byte {
	b = appendID(appendID(appendID(b, r.Viewer), r.Group), r.Message)
	b = appendIdem(b, &r.recHeader)
	return appendIDs(appendString(b, r.Text), r.Mentions)
}

func (r *sendMessageRec) readFrom(d *decoder) {
	r.Viewer, r.Group = engine.UserID(d.id("viewer")), engine.GroupID(d.id("group"))
	r.Message = engine.MessageID(d.id("message"))
	d.idem(&r.recHeader)
	r.Text = d.text(true, "text")
	r.Mentions = readIDs(d, r.Mentions, false, "mention")
}

func (r *markMessagesReadRec) appendTo(b []byte) []byte {
	return appendIDs(appendID(b, r.Viewer), r.Messages)
}

func (r *markMessagesReadRec) readFrom(d *decoder) {
	r.Viewer = engine.UserID(d.id("viewer"))
	r.Messages = readIDs(d, r.Messages, true, "message")
}
