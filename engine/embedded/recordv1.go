package embedded

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/ops"
)

// v1op is a record in format version 1, which every version before the
// typed records wrote: one struct whose generic fields mean, per kind,
//
//	createPost       viewer, a = post, idem
//	like ... unfav   viewer, a = post
//	comment          viewer, a = post, list = mentions, idem
//	repost           viewer, a = original post, b = new post, list = mentions, idem
//	views            list = posts (known when logged)
//	follow/unfollow  viewer, a = target
//	touch            viewer, a = system cursor, b = 1 if the cursor is (re)set
//	markRead         viewer, a = engine.UnreadKind
//	clickRedDot      viewer
//	pushRedDot       -
//	publish          a = notification, s1 = title, s2 = body, idem
//	createGroup      viewer, a = group, list = other members
//	addMembers       viewer, a = group, list = users not current members
//	leaveGroup       viewer, a = group
//	sendMessage      viewer, a = group, b = message, list = mentions, s1 = text, idem
//	markMessagesRead viewer, list = messages
//	sweepCursors     a = cursor TTL in ns
//	import           list = rows of importStride: post, author, 5 counts
//
// and time, the record's time. It is only read now (fromV1 turns it into
// its typed record), so that logs written before version 2 replay
// unchanged.
type v1op struct {
	kind   opKind
	time   int64
	viewer uint64
	a, b   uint64
	idem   idemKey
	list   []uint64
	s1, s2 string
	fp     uint64
}

// importStride is the number of list entries per imported row.
const importStride = 7

// Record format, version 1:
//
//	byte 0   version (1)
//	byte 1   kind
//	byte 2   field mask: which optional fields follow (bits in field order)
//	uvarint  time (Unix ns, non-negative)
//	uvarint  viewer                  if maskViewer
//	uvarint  a                       if maskA
//	uvarint  b                       if maskB
//	16 bytes idem key, little-endian if maskIdem
//	uvarint  n, then n uvarints      if maskList
//	uvarint  len, then len bytes     if maskS1
//	uvarint  len, then len bytes     if maskS2
//	8 bytes  fingerprint, LE         if maskFP (records before it lack the bit)
//
// Zero-valued fields are left out, so a like is about 25 bytes. The log
// frames and checksums records; this layer only has to reject anything it
// did not write without panicking.
const opVersion = 1

const (
	maskViewer = 1 << iota
	maskA
	maskB
	maskIdem
	maskList
	maskS1
	maskS2
	maskFP
	maskAll = 1<<iota - 1
)

// decodeV1 parses one version-1 record. It never panics and rejects
// anything that the version-1 encoder (appendV1, now in a test file)
// would not have produced from some record: unknown version or kind,
// unknown mask bits, zero where the mask promises non-zero, truncation and
// trailing bytes.
func decodeV1(rec []byte) (v1op, error) {
	var o v1op
	if len(rec) < 3 {
		return o, fmt.Errorf("%w: %d bytes", errBadRecord, len(rec))
	}
	if rec[0] != opVersion {
		return o, fmt.Errorf("%w: version %d, want %d", errBadRecord, rec[0], opVersion)
	}
	o.kind = opKind(rec[1])
	if o.kind == 0 || o.kind >= opKindEnd {
		return o, fmt.Errorf("%w: unknown kind %d", errBadRecord, rec[1])
	}
	mask := rec[2]
	if mask&^maskAll != 0 {
		return o, fmt.Errorf("%w: unknown field mask %#x", errBadRecord, mask)
	}
	d := decoder{b: rec[3:]}
	t := d.uvarint("time")
	if t > math.MaxInt64 {
		d.fail("time out of range")
	}
	o.time = int64(t)
	nonZero := func(bit byte, what string) uint64 {
		if mask&bit == 0 {
			return 0
		}
		v := d.uvarint(what)
		if v == 0 && d.err == nil {
			d.fail(what + " is zero")
		}
		return v
	}
	o.viewer = nonZero(maskViewer, "viewer")
	o.a = nonZero(maskA, "a")
	o.b = nonZero(maskB, "b")
	if mask&maskIdem != 0 {
		if k := d.bytes(16, "idem key"); k != nil {
			o.idem = idemKey{binary.LittleEndian.Uint64(k), binary.LittleEndian.Uint64(k[8:])}
			if o.idem == (idemKey{}) {
				d.fail("idem key is zero")
			}
		}
	}
	if mask&maskList != 0 {
		n := d.uvarint("list length")
		// Each entry takes at least a byte: a length beyond what is left is
		// garbage, and checking first keeps a bad length from allocating.
		switch {
		case d.err != nil:
		case n == 0:
			d.fail("list is empty")
		case n > maxListLen || n > uint64(len(d.b)):
			d.fail("list too long")
		default:
			o.list = make([]uint64, n)
			for i := range o.list {
				o.list[i] = d.uvarint("list entry")
			}
		}
		if o.kind == opImport && len(o.list)%importStride != 0 {
			d.fail("import list not a whole number of rows")
		}
	}
	if mask&maskS1 != 0 {
		if o.s1 = d.str("s1"); o.s1 == "" && d.err == nil {
			d.fail("s1 is empty")
		}
	}
	if mask&maskS2 != 0 {
		if o.s2 = d.str("s2"); o.s2 == "" && d.err == nil {
			d.fail("s2 is empty")
		}
	}
	if mask&maskFP != 0 {
		if k := d.bytes(8, "fingerprint"); k != nil {
			if o.fp = binary.LittleEndian.Uint64(k); o.fp == 0 {
				d.fail("fingerprint is zero")
			}
		}
		if mask&maskIdem == 0 && d.err == nil {
			d.fail("fingerprint without an idem key")
		}
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail(fmt.Sprintf("%d trailing bytes", len(d.b)))
	}
	if d.err != nil {
		return v1op{}, d.err
	}
	return o, nil
}

// v1Fields are the fields each kind's version-1 records carry.
var v1Fields = [opKindEnd]struct {
	viewer, a, b, idem, list, s1, s2 bool
}{
	opCreatePost:       {viewer: true, a: true, idem: true},
	opLike:             {viewer: true, a: true},
	opUnlike:           {viewer: true, a: true},
	opFavorite:         {viewer: true, a: true},
	opUnfavorite:       {viewer: true, a: true},
	opComment:          {viewer: true, a: true, idem: true, list: true},
	opRepost:           {viewer: true, a: true, b: true, idem: true, list: true},
	opViews:            {list: true},
	opFollow:           {viewer: true, a: true},
	opUnfollow:         {viewer: true, a: true},
	opTouch:            {viewer: true, a: true, b: true},
	opMarkRead:         {viewer: true, a: true},
	opClickRedDot:      {viewer: true},
	opPushRedDot:       {},
	opPublish:          {a: true, idem: true, s1: true, s2: true},
	opCreateGroup:      {viewer: true, a: true, list: true},
	opAddMembers:       {viewer: true, a: true, list: true},
	opLeaveGroup:       {viewer: true, a: true},
	opSendMessage:      {viewer: true, a: true, b: true, idem: true, list: true, s1: true},
	opMarkMessagesRead: {viewer: true, list: true},
	opSweepCursors:     {a: true},
	opImport:           {list: true},
}

// fromV1 turns a version-1 record into its typed record. It refuses what
// no engine logged — a field the kind never carried, a zero id where
// every engine since the first set one (the viewer, the post, the group,
// the ids it made, list entries), an empty list or text — and a value the
// typed record cannot hold, so that whatever it accepts converts back
// (toV1) to the same record and has a version-2 encoding.
func fromV1(o *v1op) (record, error) {
	f := v1Fields[o.kind]
	switch {
	case !f.viewer && o.viewer != 0, !f.a && o.a != 0, !f.b && o.b != 0,
		!f.idem && o.idem != (idemKey{}), !f.list && len(o.list) > 0,
		!f.s1 && o.s1 != "", !f.s2 && o.s2 != "":
		return nil, fmt.Errorf("%w: a field %v records do not have", errBadRecord, o.kind)
	case f.viewer && o.viewer == 0:
		return nil, fmt.Errorf("%w: %v without a viewer", errBadRecord, o.kind)
	case f.a && o.a == 0 && o.kind != opTouch && o.kind != opSweepCursors,
		f.b && o.b == 0 && o.kind != opTouch:
		return nil, fmt.Errorf("%w: %v without an id", errBadRecord, o.kind)
	case f.s1 && o.s1 == "":
		return nil, fmt.Errorf("%w: %v without a text", errBadRecord, o.kind)
	}
	switch o.kind {
	case opViews, opAddMembers, opMarkMessagesRead, opImport:
		if len(o.list) == 0 {
			return nil, fmt.Errorf("%w: %v of nothing", errBadRecord, o.kind)
		}
	}
	if o.kind != opImport && slices.Contains(o.list, 0) {
		return nil, fmt.Errorf("%w: id 0 in a %v list", errBadRecord, o.kind)
	}
	h := recHeader{time: o.time, idem: o.idem, fp: o.fp}
	v := engine.UserID(o.viewer)
	switch o.kind {
	case opCreatePost:
		return &createPostRec{h, ops.CreatePost{Viewer: v, Post: engine.PostID(o.a)}}, nil
	case opLike, opUnlike:
		return &likeRec{h, ops.Like{Viewer: v, Post: engine.PostID(o.a), Undo: o.kind == opUnlike}}, nil
	case opFavorite, opUnfavorite:
		return &favoriteRec{h, ops.Favorite{Viewer: v, Post: engine.PostID(o.a), Undo: o.kind == opUnfavorite}}, nil
	case opComment:
		return &commentRec{h, ops.Comment{Viewer: v, Post: engine.PostID(o.a), Mentions: idsAs[engine.UserID](o.list)}}, nil
	case opRepost:
		return &repostRec{h, ops.Repost{Viewer: v, Post: engine.PostID(o.a), NewPost: engine.PostID(o.b),
			Mentions: idsAs[engine.UserID](o.list)}}, nil
	case opViews:
		return &viewsRec{h, ops.RecordViews{Posts: idsAs[engine.PostID](o.list)}}, nil
	case opFollow, opUnfollow:
		return &followRec{h, ops.Follow{Viewer: v, Target: engine.UserID(o.a), Undo: o.kind == opUnfollow}}, nil
	case opTouch:
		if o.b > 1 || o.b == 0 && o.a != 0 {
			return nil, fmt.Errorf("%w: touch reset flag %d, cursor %d", errBadRecord, o.b, o.a)
		}
		return &touchRec{recHeader: h, viewer: v, cursor: o.a, reset: o.b == 1}, nil
	case opMarkRead:
		if o.a < uint64(engine.Mentions) || o.a > uint64(engine.Feed) {
			return nil, fmt.Errorf("%w: unread kind %d", errBadRecord, o.a)
		}
		return &markReadRec{h, ops.MarkRead{Viewer: v, Kind: engine.UnreadKind(o.a)}}, nil
	case opClickRedDot:
		return &clickRec{h, ops.ClickRedDot{Viewer: v}}, nil
	case opPushRedDot:
		return &pushRec{recHeader: h}, nil
	case opPublish:
		return &publishRec{h, ops.Publish{Title: o.s1, Body: o.s2}, o.a}, nil
	case opCreateGroup:
		return &createGroupRec{h, ops.CreateGroup{Viewer: v, Group: engine.GroupID(o.a), Members: idsAs[engine.UserID](o.list)}}, nil
	case opAddMembers:
		return &addMembersRec{h, ops.AddMembers{Viewer: v, Group: engine.GroupID(o.a), Users: idsAs[engine.UserID](o.list)}}, nil
	case opLeaveGroup:
		return &leaveGroupRec{recHeader: h, LeaveGroup: ops.LeaveGroup{Viewer: v, Group: engine.GroupID(o.a)}}, nil
	case opSendMessage:
		return &sendMessageRec{h, ops.SendMessage{Viewer: v, Group: engine.GroupID(o.a), Message: engine.MessageID(o.b),
			Text: o.s1, Mentions: idsAs[engine.UserID](o.list)}}, nil
	case opMarkMessagesRead:
		return &markMessagesReadRec{h, ops.MarkMessagesRead{Viewer: v, Messages: idsAs[engine.MessageID](o.list)}}, nil
	case opSweepCursors:
		if o.a > math.MaxInt64 {
			return nil, fmt.Errorf("%w: cursor TTL out of range", errBadRecord)
		}
		return &sweepRec{recHeader: h, ttl: int64(o.a)}, nil
	case opImport:
		rows := make([]engine.ImportRow, 0, len(o.list)/importStride)
		for row := range slices.Chunk(o.list, importStride) {
			if row[0] == 0 || max(row[2], row[3], row[4], row[5], row[6]) > math.MaxInt64 {
				return nil, fmt.Errorf("%w: import row of post 0 or a count out of range", errBadRecord)
			}
			rows = append(rows, engine.ImportRow{Post: engine.PostID(row[0]), Author: engine.UserID(row[1]),
				Counts: engine.Counts{Likes: int64(row[2]), Comments: int64(row[3]), Reposts: int64(row[4]),
					Views: int64(row[5]), Favorites: int64(row[6])}})
		}
		return &importRec{recHeader: h, rows: rows}, nil
	}
	return nil, fmt.Errorf("%w: unknown kind %d", errBadRecord, o.kind)
}

// idsAs converts a record's []uint64 to typed ids (nil stays nil).
func idsAs[T ~uint64](in []uint64) []T {
	if in == nil {
		return nil
	}
	out := make([]T, len(in))
	for i, v := range in {
		out[i] = T(v)
	}
	return out
}
