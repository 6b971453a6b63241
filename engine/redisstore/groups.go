package redisstore

import (
	"context"
	"encoding/binary"
	"errors"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/tally-dev/tally/engine"
)

var errIDClash = errors.New("fresh ids keep colliding: two replicas share a snowflake node")

// CreateGroup implements engine.Store. The viewer gets mapid 1, the others
// the next mapids in the order given.
func (s *Store) CreateGroup(ctx context.Context, viewer engine.UserID, members []engine.UserID) (engine.GroupID, error) {
	if err := checkUser(viewer); err != nil {
		return 0, err
	}
	users, err := engine.NormalizeUsers(members)
	if err != nil {
		return 0, err
	}
	args := []any{uint64(viewer), uid8(uint64(viewer))}
	for _, u := range users {
		if u != viewer {
			args = append(args, uint64(u), uid8(uint64(u)))
		}
	}
	for range 10 {
		gid := s.gen.Next()
		g := s.k.group(gid)
		r, err := s.one(ctx, scGroupCreate, []string{g.U, g.M}, args...)
		if err != nil {
			return 0, err
		}
		if num(r) == 1 {
			s.stats.groups.Add(1)
			return engine.GroupID(gid), nil
		}
	}
	return 0, s.fail(errIDClash)
}

func groupCode(code int64) error {
	switch code {
	case -1:
		return notFound("group")
	case -2:
		return forbidden("not a member of the group")
	case -3:
		return invalid("a group has at most %d members", engine.MaxGroupMembers)
	}
	return nil
}

// AddGroupMembers implements engine.Store.
func (s *Store) AddGroupMembers(ctx context.Context, viewer engine.UserID, group engine.GroupID, users []engine.UserID) error {
	if err := checkUser(viewer); err != nil {
		return err
	}
	users, err := engine.NormalizeUsers(users)
	if err != nil {
		return err
	}
	g := s.k.group(uint64(group))
	args := []any{uint64(viewer), engine.MaxGroupMembers}
	for _, u := range users {
		args = append(args, uint64(u), uid8(uint64(u)))
	}
	r, err := s.one(ctx, scGroupAdd, []string{g.U, g.M, g.Q}, args...)
	if err != nil {
		return err
	}
	return groupCode(num(r))
}

// LeaveGroup implements engine.Store. Leaving again is a no-op; the mapid
// is kept for a rejoin.
func (s *Store) LeaveGroup(ctx context.Context, viewer engine.UserID, group engine.GroupID) error {
	if err := checkUser(viewer); err != nil {
		return err
	}
	g := s.k.group(uint64(group))
	r, err := s.one(ctx, scGroupLeave, []string{g.U, g.M, g.Q}, uint64(viewer))
	if err != nil {
		return err
	}
	return groupCode(num(r))
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

func (s *Store) groupPage(ctx context.Context, viewer engine.UserID, group engine.GroupID, first int, after engine.UserID) (int, []engine.UserID, error) {
	g := s.k.group(uint64(group))
	r, err := s.query(ctx, scGroupPage, []string{g.U, g.M, g.Q}, uint64(viewer), uint64(after), first)
	if err != nil {
		return 0, nil, err
	}
	a := vals(r)
	switch code := num(at(a, 0)); code {
	case -4:
		return 0, nil, errBadCursor(after)
	default:
		if err := groupCode(code); err != nil {
			return 0, nil, err
		}
	}
	packed := str(at(a, 2))
	if len(packed)%8 != 0 {
		return 0, nil, s.fail(errCorrupt)
	}
	page := make([]engine.UserID, 0, len(packed)/8)
	for _, u := range members(packed) {
		page = append(page, engine.UserID(u))
	}
	return int(num(at(a, 1))), page, nil
}

func errBadCursor(after engine.UserID) error {
	return invalid("after: user %d was never a member of the group", uint64(after))
}

// SendMessage implements engine.Store. Steps: the message and its receipt
// record in the group's slot (membership checked there, atomically), then
// the id -> group index, then the members' badges; each guarded by a
// marker when an idempotency key makes the send retryable.
func (s *Store) SendMessage(ctx context.Context, viewer engine.UserID, group engine.GroupID, text string, mentions []engine.UserID, idemKey string) (engine.Message, error) {
	if err := checkUser(viewer); err != nil {
		return engine.Message{}, err
	}
	if err := engine.CheckText(text); err != nil {
		return engine.Message{}, err
	}
	mentions, err := engine.NormalizeMentions(viewer, mentions)
	if err != nil {
		return engine.Message{}, err
	}
	if err := engine.CheckIdemKey(idemKey); err != nil {
		return engine.Message{}, err
	}
	if group == 0 {
		return engine.Message{}, notFound("group")
	}
	mid := s.gen.Next()
	in, err := s.idemBegin(ctx, uint64(viewer), kindMessage, idemKey, strconv.FormatUint(mid, 10), engine.IdemSendMessage,
		engine.IdemArgs{Group: group, Mentions: mentions, Text: text})
	if err != nil {
		return engine.Message{}, err
	}
	if in.key != "" {
		mid, _ = strconv.ParseUint(in.result, 10, 64)
		if in.done {
			return s.loadMessage(ctx, mid)
		}
	}
	// The message, its receipts and the intent of what follows (the id
	// index, the members' badges) in the group's slot; then the rest (see
	// intents.go).
	id := in.op
	if id == "" {
		id = newIntentID()
	}
	it := intent{kind: intentMessage, viewer: uint64(viewer), post: mid, aux: uint64(group),
		at: s.now().UnixMilli(), mentions: ids64(mentions)}
	desc := it.encode()
	g := s.k.group(uint64(group))
	r, err := s.one(ctx, scSend, []string{g.U, g.M, g.Q, g.T, g.R, intentsKey(g.tag)},
		uint64(viewer), mid, encodeBody(uint64(viewer), text), denseMaxID, id, desc)
	if err != nil {
		return engine.Message{}, err
	}
	a := vals(r)
	code := num(at(a, 0))
	if err := groupCode(code); err != nil {
		s.idemAbort(ctx, in)
		return engine.Message{}, err
	}
	if code == 1 {
		s.stats.messages.Add(1)
	}
	maybeCrash(intentMessage)
	if code == 1 {
		// The group at send time, as the step saw it. (A retry of a
		// stored message reads it from its receipt record instead, as a
		// sweeper does: members may have changed since.)
		uids := members(str(at(a, 1)))
		quit := str(at(a, 2))
		it.view = &sendView{uids: uids, maxid: len(uids), quit: func(m int) bool { return bitSet(quit, m-1) }}
	}
	if err := s.finishIntent(ctx, g.tag, id, desc, it, true); err != nil {
		return engine.Message{}, err
	}
	if err := s.idemDone(ctx, in); err != nil {
		return engine.Message{}, err
	}
	return decodeBody(uint64(group), mid, encodeBody(uint64(viewer), text))
}

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
	body, err := s.rdb.HGet(ctx, s.k.group(gids[0]).T, strconv.FormatUint(mid, 10)).Result()
	if err == redis.Nil {
		return engine.Message{}, notFound("message")
	}
	if err != nil {
		return engine.Message{}, s.fail(err)
	}
	return s.body(gids[0], mid, body)
}

func (s *Store) body(gid, mid uint64, b string) (engine.Message, error) {
	m, err := decodeBody(gid, mid, b)
	if err != nil {
		return engine.Message{}, s.fail(err)
	}
	return m, nil
}

// Message implements engine.Store.
func (s *Store) Message(ctx context.Context, viewer engine.UserID, id engine.MessageID) (engine.Message, error) {
	if id == 0 {
		return engine.Message{}, notFound("message")
	}
	gids, err := s.groupsOf(ctx, []uint64{uint64(id)})
	if err != nil {
		return engine.Message{}, err
	}
	if gids[0] == 0 {
		return engine.Message{}, notFound("message")
	}
	g := s.k.group(gids[0])
	r, err := s.query(ctx, scMsgGet, []string{g.M, g.Q, g.T}, uint64(viewer), uint64(id))
	if err != nil {
		return engine.Message{}, err
	}
	a := vals(r)
	switch num(at(a, 0)) {
	case -1:
		return engine.Message{}, notFound("message")
	case -2:
		return engine.Message{}, forbidden("not a member of the message's group")
	}
	return s.body(gids[0], uint64(id), str(at(a, 1)))
}

// MarkMessagesRead implements engine.Store. Messages of one group are
// checked and marked by one script; when they span groups, every group is
// checked first so that a forbidden or unknown id changes nothing.
func (s *Store) MarkMessagesRead(ctx context.Context, viewer engine.UserID, ids []engine.MessageID) ([]engine.Message, error) {
	if err := checkUser(viewer); err != nil {
		return nil, err
	}
	if err := engine.CheckIDs(ids); err != nil {
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
	byGroup := map[uint64][]uint64{}
	var order []uint64
	for i, gid := range gids {
		if gid == 0 {
			return nil, notFound("message")
		}
		if _, ok := byGroup[gid]; !ok {
			order = append(order, gid)
		}
		byGroup[gid] = append(byGroup[gid], raw64[i])
	}
	mk := func(gid uint64, check bool) *call {
		g := s.k.group(gid)
		keys := []string{g.M, g.Q, g.T, g.R}
		flag := "0"
		if check {
			flag = "1"
		}
		args := []any{uint64(viewer), flag}
		for _, mid := range byGroup[gid] {
			keys = append(keys, g.readKey(mid))
			args = append(args, mid)
		}
		return script(scMarkRead, keys, args...)
	}
	verdict := func(c *call) error {
		switch num(at(vals(c.res.Val()), 0)) {
		case -1:
			return notFound("message")
		case -2:
			return forbidden("not a member of the message's group")
		}
		return nil
	}
	if len(order) > 1 {
		checks := make([]*call, len(order))
		for i, gid := range order {
			checks[i] = mk(gid, true)
		}
		if err := s.exec(ctx, checks...); err != nil {
			return nil, err
		}
		for _, c := range checks {
			if err := verdict(c); err != nil {
				return nil, err
			}
		}
	}
	calls := make([]*call, len(order))
	for i, gid := range order {
		calls[i] = mk(gid, false)
	}
	if err := s.exec(ctx, calls...); err != nil {
		return nil, err
	}
	msgs := map[uint64]engine.Message{}
	var changed []uint64
	for i, gid := range order {
		if err := verdict(calls[i]); err != nil {
			return nil, err
		}
		a := vals(calls[i].res.Val())
		for j, mid := range byGroup[gid] {
			if num(at(a, 1+2*j)) == 1 {
				changed = append(changed, mid)
			}
			m, err := s.body(gid, mid, str(at(a, 2+2*j)))
			if err != nil {
				return nil, err
			}
			msgs[mid] = m
		}
	}
	out := make([]engine.Message, len(ids))
	for i, id := range raw64 {
		out[i] = msgs[id]
	}
	for _, mid := range changed {
		s.emit(ctx, engine.Event{Kind: engine.ReceiptsChanged, Message: engine.MessageID(mid)})
	}
	return out, nil
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
		if rc.quit(mapid) {
			continue
		}
		if rc.read(mapid) {
			out.ReadCount++
			if len(readers) < limit {
				readers = append(readers, mapid)
			}
		} else {
			out.UnreadCount++
			if len(unreaders) < limit {
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
		if !rc.quit(mapid) && rc.read(mapid) == readers {
			want = append(want, mapid)
		}
	}
	return s.mapUIDs(ctx, g, want)
}

// senderReceipts reads message id's receipt record for its sender, while a
// member of the group, and the mapid of the user after (0: none).
func (s *Store) senderReceipts(ctx context.Context, viewer engine.UserID, id engine.MessageID, after engine.UserID) (receipts, groupKeys, int, error) {
	if id == 0 {
		return receipts{}, groupKeys{}, 0, notFound("message")
	}
	gids, err := s.groupsOf(ctx, []uint64{uint64(id)})
	if err != nil {
		return receipts{}, groupKeys{}, 0, err
	}
	if gids[0] == 0 {
		return receipts{}, groupKeys{}, 0, notFound("message")
	}
	g := s.k.group(gids[0])
	r, err := s.query(ctx, scRcptGet, []string{g.M, g.Q, g.T, g.R, g.readKey(uint64(id))}, uint64(viewer), uint64(id), uint64(after))
	if err != nil {
		return receipts{}, g, 0, err
	}
	a := vals(r)
	switch num(at(a, 0)) {
	case -1:
		return receipts{}, g, 0, notFound("message")
	case -2:
		return receipts{}, g, 0, forbidden("only the sender sees read receipts, while a member of the group")
	}
	m, err := s.body(gids[0], uint64(id), str(at(a, 1)))
	if err != nil {
		return receipts{}, g, 0, err
	}
	if m.Sender != viewer {
		return receipts{}, g, 0, forbidden("only the sender sees read receipts")
	}
	from := int(num(at(a, 4)))
	if from < 0 {
		return receipts{}, g, 0, errBadCursor(after)
	}
	rc, err := parseReceipts(str(at(a, 2)), str(at(a, 3)))
	if err != nil {
		return receipts{}, g, 0, s.fail(err)
	}
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

// receipts is a decoded receipt record.
type receipts struct {
	maxid int
	quit  func(mapid int) bool
	read  func(mapid int) bool
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
