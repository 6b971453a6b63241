package redisstore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/ops"
	"github.com/tally-dev/tally/engine/snowflake"
)

var errIDClash = errors.New("fresh ids keep colliding: two replicas share a snowflake node")

// CreateGroup implements engine.Store: ops.CreateGroup's joins (the
// viewer first, mapid 1, then the others in the order given) make a group
// under a fresh id.
func (s *Store) CreateGroup(ctx context.Context, viewer engine.UserID, members []engine.UserID) (engine.GroupID, error) {
	op := ops.CreateGroup{Viewer: viewer, Members: members}
	if err := op.Check(); err != nil {
		return 0, err
	}
	var eff ops.Effects
	for range 10 {
		op.Group = engine.GroupID(s.gen.Next())
		eff.Reset()
		op.Decide(&eff)
		args := make([]any, 0, 2*len(eff.Joins))
		for _, j := range eff.Joins {
			if j.Group != op.Group {
				return 0, fmt.Errorf("%w: CreateGroup decided a join of group %d", errBug, j.Group)
			}
			args = append(args, uint64(j.User), uid8(uint64(j.User)))
		}
		g := s.k.group(uint64(op.Group))
		r, err := s.one(ctx, scGroupCreate, []string{g.U, g.M}, args...)
		if err != nil {
			return 0, err
		}
		if num(r) == 1 {
			s.stats.groups.Add(1)
			s.emitAll(ctx, eff.Events)
			return op.Group, nil
		}
	}
	return 0, s.fail(errIDClash)
}

// groupFacts reads what ops needs of a group and of users in it.
func (s *Store) groupFacts(ctx context.Context, g groupKeys, viewer engine.UserID, users []engine.UserID) (ops.GroupFacts, []memberFact, error) {
	args := make([]any, 0, 1+len(users))
	args = append(args, uint64(viewer))
	for _, u := range users {
		args = append(args, uint64(u))
	}
	r, err := s.query(ctx, scGroupFacts, []string{g.U, g.M, g.Q}, args...)
	if err != nil {
		return ops.GroupFacts{}, nil, err
	}
	a := vals(r)
	f := ops.GroupFacts{Exists: num(at(a, 0)) == 1, MapIDs: int(num(at(a, 1)))}
	ms := make([]memberFact, 1+len(users))
	for i := range ms {
		ms[i] = memberFact{mapid: num(at(a, 2+2*i)), quit: num(at(a, 3+2*i))}
	}
	f.Viewer = ms[0].state()
	return f, ms[1:], nil
}

// memberFact is a user's entry in a group as read: mapid (0: never
// joined) and quit bit.
type memberFact struct{ mapid, quit int64 }

func (m memberFact) state() ops.MemberState {
	return ops.MemberState{Joined: m.mapid != 0, Current: m.mapid != 0 && m.quit == 0}
}

// AddGroupMembers implements engine.Store: the group's facts are read,
// ops.AddMembers decides, and the joins are applied if those facts still
// hold (else read and decided again).
func (s *Store) AddGroupMembers(ctx context.Context, viewer engine.UserID, group engine.GroupID, users []engine.UserID) error {
	op := ops.AddMembers{Viewer: viewer, Group: group, Users: users}
	if err := op.Check(); err != nil {
		return err
	}
	g := s.k.group(uint64(group))
	for range 8 {
		f, ms, err := s.groupFacts(ctx, g, viewer, op.Users)
		if err != nil {
			return err
		}
		byUser := make(map[engine.UserID]memberFact, len(op.Users))
		for i, u := range op.Users {
			byUser[u] = ms[i]
		}
		var eff ops.Effects
		if err := op.Decide(f, func(u engine.UserID) ops.MemberState { return byUser[u].state() }, &eff); err != nil {
			return err
		}
		if len(eff.Joins) == 0 {
			return nil
		}
		joins := make(map[engine.UserID]bool, len(eff.Joins))
		for _, j := range eff.Joins {
			if j.Group != group {
				return fmt.Errorf("%w: AddMembers decided a join of group %d", errBug, j.Group)
			}
			joins[j.User] = true
		}
		args := []any{uint64(viewer), f.MapIDs}
		for i, u := range op.Users {
			join := "0"
			if joins[u] {
				join = "1"
			}
			args = append(args, uint64(u), uid8(uint64(u)), ms[i].mapid, ms[i].quit, join)
		}
		r, err := s.one(ctx, scGroupJoin, []string{g.U, g.M, g.Q}, args...)
		if err != nil {
			return err
		}
		if num(r) == 1 {
			s.emitAll(ctx, eff.Events)
			return nil
		}
	}
	return s.fail(errors.New("group keeps changing under AddGroupMembers"))
}

// LeaveGroup implements engine.Store. ops.LeaveGroup decides on the facts
// under which leaving is allowed; the script applies the leave only if
// they hold, reading the group after it in the same step, and otherwise
// returns the real facts, which Decide then judges (unknown group, not a
// current member).
func (s *Store) LeaveGroup(ctx context.Context, viewer engine.UserID, group engine.GroupID) (engine.Group, error) {
	op := ops.LeaveGroup{Viewer: viewer, Group: group}
	if err := op.Check(); err != nil {
		return engine.Group{}, err
	}
	var eff ops.Effects
	assumed := ops.GroupFacts{Exists: true, Viewer: ops.MemberState{Joined: true, Current: true}}
	if err := op.Decide(assumed, &eff); err != nil {
		return engine.Group{}, s.fail(err)
	}
	if len(eff.Leaves) != 1 || eff.Leaves[0] != (ops.Membership{Group: group, User: viewer}) {
		return engine.Group{}, s.fail(fmt.Errorf("redisstore: LeaveGroup decided %+v", eff.Leaves))
	}
	g := s.k.group(uint64(group))
	r, err := s.one(ctx, scGroupLeave, []string{g.U, g.M, g.Q}, uint64(viewer), engine.MaxPageSize)
	if err != nil {
		return engine.Group{}, err
	}
	a := vals(r)
	found := ops.GroupFacts{Exists: num(at(a, 0)) == 1,
		Viewer: memberFact{mapid: num(at(a, 1)), quit: num(at(a, 2))}.state()}
	if found != assumed {
		eff.Reset()
		if err := op.Decide(found, &eff); err != nil {
			return engine.Group{}, err // nothing was applied, nor is due
		}
		return engine.Group{}, s.fail(fmt.Errorf("redisstore: LeaveGroup allowed on %+v, refused by the script", found))
	}
	page, err := s.memberPage(str(at(a, 4)))
	if err != nil {
		return engine.Group{}, err
	}
	s.emitAll(ctx, eff.Events)
	return engine.Group{ID: group, MemberCount: int(num(at(a, 3))), Members: page}, nil
}

// Group implements engine.Store: the member count and the first page.
func (s *Store) Group(ctx context.Context, viewer engine.UserID, group engine.GroupID) (engine.Group, error) {
	count, page, err := s.groupPage(ctx, viewer, group, engine.MaxPageSize, 0)
	if err != nil {
		return engine.Group{}, err
	}
	return engine.Group{ID: group, MemberCount: count, Members: page}, nil
}

// GroupMembers implements engine.Store.
func (s *Store) GroupMembers(ctx context.Context, viewer engine.UserID, group engine.GroupID, first int, after engine.UserID) ([]engine.UserID, error) {
	if err := engine.CheckPage(first); err != nil {
		return nil, err
	}
	_, page, err := s.groupPage(ctx, viewer, group, first, after)
	return page, err
}

// groupPage reads a page of group's members and the facts ops.ViewGroup
// judges the read on in one script (one round trip): the page is
// discarded when ViewGroup refuses.
func (s *Store) groupPage(ctx context.Context, viewer engine.UserID, group engine.GroupID, first int, after engine.UserID) (int, []engine.UserID, error) {
	g := s.k.group(uint64(group))
	r, err := s.query(ctx, scGroupPage, []string{g.U, g.M, g.Q}, uint64(viewer), uint64(after), first)
	if err != nil {
		return 0, nil, err
	}
	a := vals(r)
	f := ops.GroupFacts{Exists: num(at(a, 0)) == 1,
		Viewer: memberFact{mapid: num(at(a, 1)), quit: num(at(a, 2))}.state()}
	if err := ops.ViewGroup(group, f); err != nil {
		return 0, nil, err
	}
	if num(at(a, 5)) < 0 {
		return 0, nil, errBadCursor(after)
	}
	page, err := s.memberPage(str(at(a, 4)))
	if err != nil {
		return 0, nil, err
	}
	return int(num(at(a, 3))), page, nil
}

// memberPage reads the packed uids of a page of members.
func (s *Store) memberPage(packed string) ([]engine.UserID, error) {
	if len(packed)%8 != 0 {
		return nil, s.fail(errCorrupt)
	}
	page := make([]engine.UserID, 0, len(packed)/8)
	for _, u := range members(packed) {
		page = append(page, engine.UserID(u))
	}
	return page, nil
}

func errBadCursor(after engine.UserID) error {
	return invalid("after: user %d was never a member of the group", uint64(after))
}

// SendMessage implements engine.Store. Steps: the message and its receipt
// record in the group's slot (membership checked there, atomically: the
// facts ops.SendMessage needs to allow the send), then the id -> group
// index, then what ops.SendMessage decides for the members (the fan-out
// to the group as it was at send time, the mentions); the first guarded
// by the key's record and the others by markers when an idempotency key
// makes the send retryable (idem.go).
func (s *Store) SendMessage(ctx context.Context, viewer engine.UserID, group engine.GroupID, text string, mentions []engine.UserID, idemKey string) (engine.Message, error) {
	op := ops.SendMessage{Viewer: viewer, Group: group, Text: text, Mentions: mentions, IdemKey: idemKey}
	if err := op.Check(); err != nil {
		return engine.Message{}, err
	}
	mentions = op.Mentions
	var eff ops.Effects
	if group == 0 {
		// No group has id 0: decided without asking Redis.
		return engine.Message{}, op.Decide(ops.GroupFacts{}, notCurrent, &eff)
	}
	g := s.k.group(uint64(group))
	in, err := s.idemBegin(ctx, uint64(viewer), idemKey, strconv.FormatUint(s.gen.Next(), 10), g.tag, engine.IdemSendMessage,
		engine.IdemArgs{Group: group, Mentions: mentions, Text: text})
	if err != nil {
		return engine.Message{}, err
	}
	mid, _ := strconv.ParseUint(in.result, 10, 64)
	if in.done {
		return s.loadMessage(ctx, mid)
	}
	// The message, its receipts and the intent of what follows (the id
	// index, the members' badges) in the group's slot, under in's guard;
	// then the rest (see intents.go).
	id := in.op
	if id == "" {
		id = newIntentID()
	}
	it := intent{kind: intentMessage, viewer: uint64(viewer), post: mid, aux: uint64(group),
		at: s.now().UnixMilli(), mentions: ids64(mentions)}
	desc := it.encode()
	var a []any
	err = s.firstStep(ctx, &in, g.tag, func(gd guard) (string, error) {
		r, err := s.one(ctx, scSend, []string{g.U, g.M, g.Q, g.T, g.R, intentsKey(g.tag), gd.key},
			append([]any{uint64(viewer), mid, text, denseMaxID, id, desc}, gd.args()...)...)
		if err != nil {
			return "", err
		}
		a = vals(r)
		if code := num(at(a, 0)); code < 0 {
			// The step refused: the facts it checks are not those of a
			// send, and nothing was stored.
			f := ops.GroupFacts{Exists: code != -1}
			if err := op.Decide(f, notCurrent, &eff); err != nil {
				s.dropClaim(ctx, in)
				return "", err
			}
			return "", fmt.Errorf("%w: send refused with %d, Decide allows it", errBug, code)
		}
		if num(at(a, 0)) == 2 {
			return str(at(a, 1)), nil
		}
		return "", nil
	})
	if err != nil {
		return engine.Message{}, err
	}
	switch num(at(a, 0)) {
	case 1:
		s.stats.messages.Add(1)
		// The group at send time, as the step saw it. (A retry of a
		// stored message reads it from its receipt record instead, as a
		// sweeper does: members may have changed since.)
		uids := members(str(at(a, 1)))
		quit := str(at(a, 2))
		it.view = &sendView{uids: uids, maxid: len(uids), quit: func(m int) bool { return bitSet(quit, m-1) }}
	case 2:
		// An earlier attempt stored it: finish that attempt's operation.
		mid, _ = strconv.ParseUint(in.result, 10, 64)
		id, it.post = in.op, mid
	}
	maybeCrash(intentMessage)
	if err := s.finishIntent(ctx, g.tag, id, desc, it, true); err != nil {
		return engine.Message{}, err
	}
	if err := s.idemDone(ctx, in); err != nil {
		return engine.Message{}, err
	}
	return engine.Message{ID: engine.MessageID(mid), Group: group, Sender: viewer, Text: text,
		SentAt: snowflake.Time(mid)}, nil
}

// notCurrent stands for the members when a send is refused: Decide
// judges the refusal before it asks about anyone.
func notCurrent(engine.UserID) bool { return false }

// groupsOf looks up the groups of message ids (0 = unknown) in one round
// trip.
func (s *Store) groupsOf(ctx context.Context, ids []uint64) ([]uint64, error) {
	cmds := make([]*redis.StringCmd, len(ids))
	if err := s.read(ctx, func(p redis.Pipeliner) {
		for i, id := range ids {
			b, low := s.k.msgIndex(id)
			cmds[i] = p.HGet(ctx, b, low)
		}
	}); err != nil {
		return nil, err
	}
	out := make([]uint64, len(ids))
	for i, c := range cmds {
		out[i], _ = strconv.ParseUint(c.Val(), 10, 64)
	}
	return out, nil
}

// loadMessage reads a message without a membership check (for a retried
// send, whose sender was a member when it ran).
func (s *Store) loadMessage(ctx context.Context, mid uint64) (engine.Message, error) {
	gids, err := s.groupsOf(ctx, []uint64{mid})
	if err != nil {
		return engine.Message{}, err
	}
	if gids[0] == 0 {
		return engine.Message{}, notFound("message")
	}
	a, err := s.messageGet(ctx, gids[0], 0, mid)
	if err != nil {
		return engine.Message{}, err
	}
	body, ok := at(a, 0).(string)
	if !ok {
		return engine.Message{}, notFound("message")
	}
	return s.body(gids[0], mid, body, str(at(a, 3)))
}

// messageGet runs scMsgGet: message mid of group gid and viewer's
// standing there.
func (s *Store) messageGet(ctx context.Context, gid uint64, viewer engine.UserID, mid uint64) ([]any, error) {
	g := s.k.group(gid)
	r, err := s.query(ctx, scMsgGet, []string{g.M, g.Q, g.T, g.U}, uint64(viewer), mid)
	return vals(r), err
}

func (s *Store) body(gid, mid uint64, b, sender8 string) (engine.Message, error) {
	m, err := decodeBody(gid, mid, b, sender8)
	if err != nil {
		return engine.Message{}, s.fail(err)
	}
	return m, nil
}

// Message implements engine.Store: the id -> group index, then one
// script reading the message and the facts ops.ViewMessage judges the
// read on (the body is discarded when it refuses).
func (s *Store) Message(ctx context.Context, viewer engine.UserID, id engine.MessageID) (engine.Message, error) {
	gid, err := s.groupOf(ctx, id)
	if err != nil {
		return engine.Message{}, err
	}
	if gid == 0 {
		return engine.Message{}, ops.ViewMessage(id, false, ops.MemberState{})
	}
	a, err := s.messageGet(ctx, gid, viewer, uint64(id))
	if err != nil {
		return engine.Message{}, err
	}
	body, exists := at(a, 0).(string)
	viewerIn := memberFact{mapid: num(at(a, 1)), quit: num(at(a, 2))}.state()
	if err := ops.ViewMessage(id, exists, viewerIn); err != nil {
		return engine.Message{}, err
	}
	return s.body(gid, uint64(id), body, str(at(a, 3)))
}

// groupOf is the group message id was sent to (0: unknown message).
func (s *Store) groupOf(ctx context.Context, id engine.MessageID) (uint64, error) {
	if id == 0 {
		return 0, nil
	}
	gids, err := s.groupsOf(ctx, []uint64{uint64(id)})
	if err != nil {
		return 0, err
	}
	return gids[0], nil
}

// MarkMessagesRead implements engine.Store. The facts of every message
// (known, its sender, the viewer's standing in its group now, whether
// the viewer counts for it and has read it) are read in one round trip,
// one script per group computing them from the receipt records;
// ops.MarkMessagesRead decides (an unknown or forbidden id anywhere
// changes nothing); the reads it decides are set in one more round trip.
// Read bits only ever get set, and whom a message counts never changes,
// so the facts cannot go stale in between except by the viewer leaving,
// and a read decided before a leave is one that came first.
func (s *Store) MarkMessagesRead(ctx context.Context, viewer engine.UserID, ids []engine.MessageID) ([]engine.Message, error) {
	op := ops.MarkMessagesRead{Viewer: viewer, Messages: ids}
	if err := op.Check(); err != nil {
		return nil, err
	}
	if len(ids) == 0 {
		return []engine.Message{}, nil
	}
	raw64 := make([]uint64, len(ids))
	for i, id := range ids {
		raw64[i] = uint64(id)
	}
	gids, err := s.groupsOf(ctx, raw64)
	if err != nil {
		return nil, err
	}
	byGroup := map[uint64][]int{} // positions in ids
	var order []uint64
	for i, gid := range gids {
		if gid == 0 {
			continue
		}
		if _, ok := byGroup[gid]; !ok {
			order = append(order, gid)
		}
		byGroup[gid] = append(byGroup[gid], i)
	}
	calls := make([]*call, len(order))
	for i, gid := range order {
		g := s.k.group(gid)
		keys := []string{g.M, g.Q, g.T, g.R}
		args := []any{uint64(viewer)}
		for _, pos := range byGroup[gid] {
			keys = append(keys, g.readKey(raw64[pos]))
			args = append(args, raw64[pos])
		}
		keys = append(keys, g.U)
		calls[i] = script(scReceiptFacts, keys, args...)
	}
	if len(calls) > 0 {
		if err := s.runPipe(ctx, s.rdb, calls, false); err != nil {
			return nil, err
		}
	}
	facts := make([]ops.MessageFacts, len(ids))
	msgs := make([]engine.Message, len(ids))
	mapids := map[uint64]int64{} // the viewer's, per group
	for i, gid := range order {
		a := vals(calls[i].res.Val())
		viewerIn := memberFact{mapid: num(at(a, 0)), quit: num(at(a, 1))}
		mapids[gid] = viewerIn.mapid
		for j, pos := range byGroup[gid] {
			body, ok := at(a, 2+5*j).(string)
			if !ok {
				continue // unknown
			}
			m, err := s.body(gid, raw64[pos], body, str(at(a, 6+5*j)))
			if err != nil {
				return nil, err
			}
			msgs[pos] = m
			maxid, quit, read := num(at(a, 3+5*j)), num(at(a, 4+5*j)), num(at(a, 5+5*j))
			facts[pos] = ops.MessageFacts{
				Exists:  true,
				Sender:  m.Sender,
				Viewer:  viewerIn.state(),
				Counted: ops.Counted(uint32(viewerIn.mapid), uint32(maxid), quit == 1, m.Sender == viewer),
				Read:    read == 1,
			}
		}
	}
	var eff ops.Effects
	if err := op.Decide(facts, &eff); err != nil {
		return nil, err
	}
	if len(eff.Receipts) > 0 {
		marks := map[uint64][]uint64{} // group -> messages
		var morder []uint64
		for _, r := range eff.Receipts {
			pos := slices.Index(ids, r.Message)
			if r.User != viewer || pos < 0 {
				return nil, fmt.Errorf("%w: MarkMessagesRead decided %+v", errBug, r)
			}
			gid := gids[pos]
			if _, ok := marks[gid]; !ok {
				morder = append(morder, gid)
			}
			marks[gid] = append(marks[gid], uint64(r.Message))
		}
		sets := make([]*call, len(morder))
		for i, gid := range morder {
			g := s.k.group(gid)
			keys := []string{g.R}
			args := []any{mapids[gid]}
			for _, mid := range marks[gid] {
				keys = append(keys, g.readKey(mid))
				args = append(args, mid)
			}
			sets[i] = script(scReceiptRead, keys, args...)
		}
		if err := s.exec(ctx, sets...); err != nil {
			return nil, err
		}
	}
	s.emitAll(ctx, eff.Events)
	return msgs, nil
}

// Receipts implements engine.Store.
func (s *Store) Receipts(ctx context.Context, viewer engine.UserID, id engine.MessageID, limit int) (engine.Receipts, error) {
	limit, err := engine.ClampPage(limit)
	if err != nil {
		return engine.Receipts{}, err
	}
	rc, g, _, err := s.senderReceipts(ctx, viewer, id, 0)
	if err != nil {
		return engine.Receipts{}, err
	}
	var out engine.Receipts
	var readers, unreaders []int
	for mapid := 1; mapid <= rc.maxid; mapid++ {
		if !rc.counted(mapid) {
			continue
		}
		// An erased member still counts; no list names them.
		if rc.read(mapid) {
			out.ReadCount++
			if len(readers) < limit && !rc.erased(mapid) {
				readers = append(readers, mapid)
			}
		} else {
			out.UnreadCount++
			if len(unreaders) < limit && !rc.erased(mapid) {
				unreaders = append(unreaders, mapid)
			}
		}
	}
	uids, err := s.mapUIDs(ctx, g, append(readers, unreaders...))
	if err != nil {
		return engine.Receipts{}, err
	}
	out.Readers, out.Unreaders = uids[:len(readers)], uids[len(readers):]
	return out, nil
}

// ReceiptMembers implements engine.Store: the walk starts at after's
// mapid and stops at a full page.
func (s *Store) ReceiptMembers(ctx context.Context, viewer engine.UserID, id engine.MessageID, readers bool, first int, after engine.UserID) ([]engine.UserID, error) {
	if err := engine.CheckPage(first); err != nil {
		return nil, err
	}
	rc, g, from, err := s.senderReceipts(ctx, viewer, id, after)
	if err != nil {
		return nil, err
	}
	var want []int
	for mapid := from + 1; mapid <= rc.maxid && len(want) < first; mapid++ {
		if rc.counted(mapid) && rc.read(mapid) == readers && !rc.erased(mapid) {
			want = append(want, mapid)
		}
	}
	return s.mapUIDs(ctx, g, want)
}

// senderReceipts reads message id's receipt record if ops.ViewReceipts
// lets viewer see it, and the mapid of the user after (0: none). One
// script reads the record with the facts ViewReceipts judges on (the
// record is discarded when it refuses).
func (s *Store) senderReceipts(ctx context.Context, viewer engine.UserID, id engine.MessageID, after engine.UserID) (receipts, groupKeys, int, error) {
	gid, err := s.groupOf(ctx, id)
	if err != nil {
		return receipts{}, groupKeys{}, 0, err
	}
	if gid == 0 {
		return receipts{}, groupKeys{}, 0, ops.ViewReceipts(id, false, false, ops.MemberState{})
	}
	g := s.k.group(gid)
	r, err := s.query(ctx, scRcptGet, []string{g.M, g.Q, g.T, g.R, g.readKey(uint64(id)), g.U, g.X}, uint64(viewer), uint64(id), uint64(after))
	if err != nil {
		return receipts{}, g, 0, err
	}
	a := vals(r)
	body, hasBody := at(a, 0).(string)
	blob, hasRecord := at(a, 1).(string)
	exists := hasBody && hasRecord
	isSender := false
	if exists {
		m, err := s.body(gid, uint64(id), body, str(at(a, 6)))
		if err != nil {
			return receipts{}, g, 0, err
		}
		isSender = m.Sender == viewer
	}
	viewerIn := memberFact{mapid: num(at(a, 4)), quit: num(at(a, 5))}.state()
	if err := ops.ViewReceipts(id, exists, isSender, viewerIn); err != nil {
		return receipts{}, g, 0, err
	}
	from := int(num(at(a, 3)))
	if from < 0 {
		return receipts{}, g, 0, errBadCursor(after)
	}
	rc, err := parseReceipts(blob, str(at(a, 2)))
	if err != nil {
		return receipts{}, g, 0, s.fail(err)
	}
	erased := str(at(a, 7))
	rc.erased = func(m int) bool { return bitSet(erased, m-1) }
	return rc, g, from, nil
}

// mapUIDs maps mapids to user ids: 8 bytes each from the packed member
// string, one pipelined round trip.
func (s *Store) mapUIDs(ctx context.Context, g groupKeys, mapids []int) ([]engine.UserID, error) {
	uids := make([]engine.UserID, len(mapids))
	if len(mapids) == 0 {
		return uids, nil
	}
	cmds := make([]*redis.StringCmd, len(mapids))
	if err := s.read(ctx, func(p redis.Pipeliner) {
		for i, mapid := range mapids {
			cmds[i] = p.GetRange(ctx, g.U, int64(mapid-1)*8, int64(mapid)*8-1)
		}
	}); err != nil {
		return nil, err
	}
	for i, c := range cmds {
		v := c.Val()
		if len(v) != 8 {
			return nil, s.fail(errCorrupt)
		}
		uids[i] = engine.UserID(binary.BigEndian.Uint64([]byte(v)))
	}
	return uids, nil
}

// receipts is a decoded receipt record, and the group's erased members
// (set where read with them).
type receipts struct {
	maxid  int
	quit   func(mapid int) bool
	read   func(mapid int) bool
	erased func(mapid int) bool
}

// counted is ops.Counted for the member with mapid: the record marks
// the sender as quit, so its quit bit covers both.
func (rc receipts) counted(mapid int) bool {
	return ops.Counted(uint32(mapid), uint32(rc.maxid), rc.quit(mapid), false)
}

func parseReceipts(blob, readBits string) (receipts, error) {
	if len(blob) < 4 {
		return receipts{}, errCorrupt
	}
	x := binary.BigEndian.Uint32([]byte(blob[:4]))
	if x < 1<<31 {
		maxid := int(x)
		nb := (maxid + 7) / 8
		if len(blob) != 4+2*nb {
			return receipts{}, errCorrupt
		}
		q, r := blob[4:4+nb], blob[4+nb:]
		return receipts{
			maxid: maxid,
			quit:  func(m int) bool { return bitSet(q, m-1) },
			read:  func(m int) bool { return bitSet(r, m-1) },
		}, nil
	}
	maxid := int(x - 1<<31)
	if len(blob) < 5 {
		return receipts{}, errCorrupt
	}
	rest := blob[5:]
	rc := receipts{maxid: maxid, read: func(m int) bool { return bitSet(readBits, m-1) }}
	if blob[4] == 0 {
		rc.quit = func(m int) bool { return bitSet(rest, m-1) }
		return rc, nil
	}
	if len(rest)%4 != 0 {
		return receipts{}, errCorrupt
	}
	quit := map[int]bool{}
	for i := 0; i < len(rest); i += 4 {
		quit[int(binary.BigEndian.Uint32([]byte(rest[i:i+4])))] = true
	}
	rc.quit = func(m int) bool { return quit[m] }
	return rc, nil
}
