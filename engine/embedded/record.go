package embedded

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/counters"
	"github.com/tally-dev/tally/engine/ops"
)

// opKind names one kind of log record. The numbers are part of the log
// format: never renumber, only append.
type opKind uint8

const (
	opCreatePost opKind = iota + 1
	opReact
	opUnreact
	opFavorite
	opUnfavorite
	opComment
	opRepost
	opViews
	opFollow
	opUnfollow
	opTouch
	opMarkRead
	opClickRedDot
	opPushRedDot
	opPublish
	opCreateGroup
	opAddMembers
	opLeaveGroup
	opSendMessage
	opMarkMessagesRead
	opSweepCursors
	opImport
	opDeleteComment
	opDeletePost
	opEraseUser
	opEraseStep
	opRecount
	opKinds
	opKindEnd // one past the last kind
)

var opNames = [...]string{
	opCreatePost: "createPost", opReact: "react", opUnreact: "unreact", opFavorite: "favorite",
	opUnfavorite: "unfavorite", opComment: "comment", opRepost: "repost", opViews: "views",
	opFollow: "follow", opUnfollow: "unfollow", opTouch: "touch", opMarkRead: "markRead",
	opClickRedDot: "clickRedDot", opPushRedDot: "pushRedDot", opPublish: "publish",
	opCreateGroup: "createGroup", opAddMembers: "addMembers", opLeaveGroup: "leaveGroup",
	opSendMessage: "sendMessage", opMarkMessagesRead: "markMessagesRead",
	opSweepCursors: "sweepCursors", opImport: "import", opRecount: "recount", opKinds: "kinds",
	opDeleteComment: "deleteComment", opDeletePost: "deletePost", opEraseUser: "eraseUser", opEraseStep: "eraseStep",
}

func (k opKind) String() string {
	if k > 0 && k < opKindEnd {
		return opNames[k]
	}
	return fmt.Sprintf("opKind(%d)", uint8(k))
}

// record is one log record: one of the *…Rec types, each kind's own
// struct, declared in its domain's file. A record carries the engine/ops
// operation it logs (validated by its Check) and every input the engine
// decided before logging it — its time, the ids it made, the idempotency
// key's hash and fingerprint — so that applying the same records to the
// same state always gives the same state.
//
// The write path handles records through type switches (recordInfo,
// prepare, decide, apply, appendRecord), never through interface method
// calls, so that a record built on a Store method's stack stays there.
type record interface{ isRecord() }

// recHeader is what every record carries besides its operation.
type recHeader struct {
	// time is the engine's clock at commit in Unix ns, strictly
	// increasing from one record to the next.
	time int64
	// idem is the hash of the call's idempotency key (zero: none); only
	// the kinds that take a key carry one.
	idem idemKey
	// fp is the engine.IdemFingerprint of the call that carried idem
	// (never 0 with a key).
	fp uint64
}

func (*recHeader) isRecord() {}

// withIdem sets h's idempotency fields for a call carrying key.
func (h *recHeader) withIdem(viewer engine.UserID, key string, ik engine.IdemOp, args engine.IdemArgs) {
	if key == "" {
		return
	}
	h.idem = makeIdemKey(uint64(viewer), key)
	h.fp = engine.IdemFingerprint(ik, args)
}

// recordInfo returns r's header and kind, and its result: what a retry
// with the same idempotency key returns (the id the record made, or the
// post it is about) and, for a kind that makes ids from the engine's
// generator, that id (newID).
func recordInfo(r record) (h *recHeader, kind opKind, result, newID uint64) {
	switch r := r.(type) {
	case *createPostRec:
		return &r.recHeader, opCreatePost, uint64(r.Post), 0
	case *reactRec:
		return &r.recHeader, opReact, uint64(r.Post), 0
	case *unreactRec:
		return &r.recHeader, opUnreact, uint64(r.Post), 0
	case *favoriteRec:
		kind = opFavorite
		if r.Undo {
			kind = opUnfavorite
		}
		return &r.recHeader, kind, uint64(r.Post), 0
	case *commentRec:
		return &r.recHeader, opComment, uint64(r.Post), 0
	case *repostRec:
		return &r.recHeader, opRepost, uint64(r.NewPost), uint64(r.NewPost)
	case *viewsRec:
		return &r.recHeader, opViews, 0, 0
	case *followRec:
		kind = opFollow
		if r.Undo {
			kind = opUnfollow
		}
		return &r.recHeader, kind, uint64(r.Target), 0
	case *touchRec:
		return &r.recHeader, opTouch, r.cursor, 0
	case *markReadRec:
		return &r.recHeader, opMarkRead, uint64(r.Kind), 0
	case *clickRec:
		return &r.recHeader, opClickRedDot, 0, 0
	case *pushRec:
		return &r.recHeader, opPushRedDot, 0, 0
	case *publishRec:
		return &r.recHeader, opPublish, r.id, r.id
	case *createGroupRec:
		return &r.recHeader, opCreateGroup, uint64(r.Group), uint64(r.Group)
	case *addMembersRec:
		return &r.recHeader, opAddMembers, uint64(r.Group), 0
	case *leaveGroupRec:
		return &r.recHeader, opLeaveGroup, uint64(r.Group), 0
	case *sendMessageRec:
		return &r.recHeader, opSendMessage, uint64(r.Message), uint64(r.Message)
	case *markMessagesReadRec:
		return &r.recHeader, opMarkMessagesRead, 0, 0
	case *sweepRec:
		return &r.recHeader, opSweepCursors, uint64(r.ttl), 0
	case *importRec:
		return &r.recHeader, opImport, 0, 0
	case *deleteCommentRec:
		return &r.recHeader, opDeleteComment, uint64(r.Post), 0
	case *deletePostRec:
		return &r.recHeader, opDeletePost, uint64(r.Post), 0
	case *eraseRec:
		return &r.recHeader, opEraseUser, uint64(r.User), 0
	case *eraseStepRec:
		return &r.recHeader, opEraseStep, r.user, 0
	case *recountRec:
		return &r.recHeader, opRecount, 0, 0
	case *kindsRec:
		return &r.recHeader, opKinds, 0, 0
	}
	panic("embedded: unknown record type")
}

// Record format, version 7, the only one this build reads or writes (a
// log of another version is refused whole, engine.FormatError):
//
//	byte 0   version (7)
//	byte 1   kind
//	uvarint  time (Unix ns, non-negative)
//	...      the kind's own fields, in the order its appendTo writes them
//
// Each kind's appendTo and readFrom, in its domain's file, are one pair.
// Ids and counts are uvarints, a flag one byte (0 or 1), a string or id
// list a uvarint length then the bytes or the uvarint ids, and the kinds
// that take an idempotency key have a flag byte saying whether the key
// (16 bytes, LE) and its fingerprint (8 bytes, LE) follow. A like is about 25
// bytes. The log frames and checksums records; a decoder only has to
// reject, without panicking, anything its encoder would not have written:
// an overlong varint, zero where the engine never logs zero, an unknown
// flag bit, a list or string too long, truncation, trailing bytes. Its
// bounds are the format's own, not the product's limits, so that raising
// or lowering a limit never makes a log unreadable.
const recordVersion = 7

// appendRecord appends r's encoding to dst.
func appendRecord(dst []byte, r record) []byte {
	h, kind, _, _ := recordInfo(r)
	dst = append(dst, recordVersion, byte(kind))
	dst = binary.AppendUvarint(dst, uint64(h.time))
	switch r := r.(type) {
	case *createPostRec:
		return r.appendTo(dst)
	case *reactRec:
		return r.appendTo(dst)
	case *unreactRec:
		return r.appendTo(dst)
	case *favoriteRec:
		return r.appendTo(dst)
	case *commentRec:
		return r.appendTo(dst)
	case *repostRec:
		return r.appendTo(dst)
	case *viewsRec:
		return r.appendTo(dst)
	case *followRec:
		return r.appendTo(dst)
	case *touchRec:
		return r.appendTo(dst)
	case *markReadRec:
		return r.appendTo(dst)
	case *clickRec:
		return r.appendTo(dst)
	case *pushRec:
		return dst
	case *publishRec:
		return r.appendTo(dst)
	case *createGroupRec:
		return r.appendTo(dst)
	case *addMembersRec:
		return r.appendTo(dst)
	case *leaveGroupRec:
		return r.appendTo(dst)
	case *sendMessageRec:
		return r.appendTo(dst)
	case *markMessagesReadRec:
		return r.appendTo(dst)
	case *sweepRec:
		return binary.AppendUvarint(dst, uint64(r.ttl))
	case *importRec:
		return r.appendTo(dst)
	case *deleteCommentRec:
		return r.appendTo(dst)
	case *deletePostRec:
		return r.appendTo(dst)
	case *eraseRec:
		return r.appendTo(dst)
	case *eraseStepRec:
		return r.appendTo(dst)
	case *recountRec:
		return r.appendTo(dst)
	case *kindsRec:
		return r.appendTo(dst)
	}
	panic("embedded: unknown record type")
}

// decodeRecord parses one record into a new record. It never panics and
// rejects anything that appendRecord would not have produced.
func decodeRecord(rec []byte) (record, error) {
	var rd recordReader
	return rd.decode(rec)
}

// recordReader decodes records into one record of each kind that it
// reuses, lists included, so that replaying a log does not allocate a
// record per record. What decode returns is valid until its next call.
type recordReader struct {
	createPost       createPostRec
	react            reactRec
	unreact          unreactRec
	kinds            kindsRec
	favorite         favoriteRec
	comment          commentRec
	repost           repostRec
	views            viewsRec
	follow           followRec
	touch            touchRec
	markRead         markReadRec
	click            clickRec
	push             pushRec
	publish          publishRec
	createGroup      createGroupRec
	addMembers       addMembersRec
	leaveGroup       leaveGroupRec
	sendMessage      sendMessageRec
	markMessagesRead markMessagesReadRec
	sweep            sweepRec
	imports          importRec
	deleteComment    deleteCommentRec
	deletePost       deletePostRec
	erase            eraseRec
	eraseStep        eraseStepRec
	recount          recountRec
}

func (rd *recordReader) decode(rec []byte) (record, error) {
	if len(rec) < 2 {
		return nil, fmt.Errorf("%w: %d bytes", errBadRecord, len(rec))
	}
	if rec[0] != recordVersion {
		return nil, &engine.FormatError{Format: "log record", Found: uint64(rec[0]), Want: recordVersion}
	}
	kind := opKind(rec[1])
	d := decoder{b: rec[2:]}
	t := d.uvarint("time")
	if t > math.MaxInt64 {
		d.fail("time out of range")
	}
	h := recHeader{time: int64(t)}
	var r record
	switch kind {
	case opCreatePost:
		x := &rd.createPost
		*x = createPostRec{recHeader: h}
		x.readFrom(&d)
		r = x
	case opReact:
		x := &rd.react
		*x = reactRec{recHeader: h}
		x.readFrom(&d)
		r = x
	case opUnreact:
		x := &rd.unreact
		*x = unreactRec{recHeader: h}
		x.readFrom(&d)
		r = x
	case opKinds:
		x := &rd.kinds
		*x = kindsRec{recHeader: h}
		x.readFrom(&d)
		r = x
	case opFavorite, opUnfavorite:
		x := &rd.favorite
		*x = favoriteRec{recHeader: h}
		x.Undo = kind == opUnfavorite
		x.readFrom(&d)
		r = x
	case opComment:
		x := &rd.comment
		*x = commentRec{recHeader: h, Comment: ops.Comment{Mentions: x.Mentions[:0]}}
		x.readFrom(&d)
		r = x
	case opRepost:
		x := &rd.repost
		*x = repostRec{recHeader: h, Repost: ops.Repost{Mentions: x.Mentions[:0]}}
		x.readFrom(&d)
		r = x
	case opViews:
		x := &rd.views
		*x = viewsRec{recHeader: h, RecordViews: ops.RecordViews{Posts: x.Posts[:0]}}
		x.readFrom(&d)
		r = x
	case opFollow, opUnfollow:
		x := &rd.follow
		*x = followRec{recHeader: h}
		x.Undo = kind == opUnfollow
		x.readFrom(&d)
		r = x
	case opTouch:
		x := &rd.touch
		*x = touchRec{recHeader: h}
		x.readFrom(&d)
		r = x
	case opMarkRead:
		x := &rd.markRead
		*x = markReadRec{recHeader: h}
		x.readFrom(&d)
		r = x
	case opClickRedDot:
		x := &rd.click
		*x = clickRec{recHeader: h}
		x.readFrom(&d)
		r = x
	case opPushRedDot:
		x := &rd.push
		*x = pushRec{recHeader: h}
		r = x
	case opPublish:
		x := &rd.publish
		*x = publishRec{recHeader: h}
		x.readFrom(&d)
		r = x
	case opCreateGroup:
		x := &rd.createGroup
		*x = createGroupRec{recHeader: h, CreateGroup: ops.CreateGroup{Members: x.Members[:0]}}
		x.readFrom(&d)
		r = x
	case opAddMembers:
		x := &rd.addMembers
		*x = addMembersRec{recHeader: h, AddMembers: ops.AddMembers{Users: x.Users[:0]}}
		x.readFrom(&d)
		r = x
	case opLeaveGroup:
		x := &rd.leaveGroup
		*x = leaveGroupRec{recHeader: h}
		x.readFrom(&d)
		r = x
	case opSendMessage:
		x := &rd.sendMessage
		*x = sendMessageRec{recHeader: h, SendMessage: ops.SendMessage{Mentions: x.Mentions[:0]}}
		x.readFrom(&d)
		r = x
	case opMarkMessagesRead:
		x := &rd.markMessagesRead
		*x = markMessagesReadRec{recHeader: h, MarkMessagesRead: ops.MarkMessagesRead{Messages: x.Messages[:0]}}
		x.readFrom(&d)
		r = x
	case opSweepCursors:
		x := &rd.sweep
		*x = sweepRec{recHeader: h}
		if ttl := d.uvarint("cursor TTL"); ttl > math.MaxInt64 {
			d.fail("cursor TTL out of range")
		} else {
			x.ttl = int64(ttl)
		}
		r = x
	case opImport:
		x := &rd.imports
		*x = importRec{recHeader: h, rows: x.rows[:0]}
		x.readFrom(&d)
		r = x
	case opDeleteComment:
		x := &rd.deleteComment
		*x = deleteCommentRec{recHeader: h}
		x.readFrom(&d)
		r = x
	case opDeletePost:
		x := &rd.deletePost
		*x = deletePostRec{recHeader: h}
		x.readFrom(&d)
		r = x
	case opEraseUser:
		x := &rd.erase
		*x = eraseRec{recHeader: h}
		x.readFrom(&d)
		r = x
	case opEraseStep:
		x := &rd.eraseStep
		*x = eraseStepRec{recHeader: h, keys: x.keys[:0], step: x.step}
		x.readFrom(&d)
		r = x
	case opRecount:
		x := &rd.recount
		*x = recountRec{recHeader: h}
		x.readFrom(&d)
		r = x
	default:
		return nil, fmt.Errorf("%w: unknown kind %d", errBadRecord, rec[1])
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail(fmt.Sprintf("%d trailing bytes", len(d.b)))
	}
	if d.err != nil {
		return nil, d.err
	}
	return r, nil
}

// Decode bounds: the format's own, fixed, not the product's limits (an id
// list, an import record's rows, a text).
const (
	maxListLen    = 1 << 16
	maxImportRows = 10000
	maxStringLen  = 1 << 16
)

var errBadRecord = errors.New("embedded: malformed log record")

// decoder reads a record front to back, remembering the first error.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(why string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s", errBadRecord, why)
	}
}

func (d *decoder) uvarint(what string) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("bad varint for " + what)
		return 0
	}
	if n > 1 && d.b[n-1] == 0 {
		// An overlong encoding: appendRecord never writes one, so it is
		// not a record of ours.
		d.fail("overlong varint for " + what)
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) bytes(n uint64, what string) []byte {
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)) {
		d.fail(what + " runs past the end")
		return nil
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v
}

func (d *decoder) str(what string) string {
	n := d.uvarint("string length") // what only in messages: no concatenation per record
	if n > maxStringLen {
		d.fail(what + " too long")
		return ""
	}
	return string(d.bytes(n, what))
}

// Coding helpers shared by the kinds' appendTo and readFrom.

func appendID[T ~uint64](dst []byte, id T) []byte { return binary.AppendUvarint(dst, uint64(id)) }

func appendIDs[T ~uint64](dst []byte, ids []T) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(ids)))
	for _, id := range ids {
		dst = binary.AppendUvarint(dst, uint64(id))
	}
	return dst
}

func appendString(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

func appendFlag(dst []byte, f bool) []byte {
	if f {
		return append(dst, 1)
	}
	return append(dst, 0)
}

// appendIdem writes h's idempotency key and fingerprint, if it has a key.
func appendIdem(dst []byte, h *recHeader) []byte {
	if h.idem == (idemKey{}) {
		return append(dst, 0)
	}
	dst = append(dst, 1)
	dst = binary.LittleEndian.AppendUint64(dst, h.idem[0])
	dst = binary.LittleEndian.AppendUint64(dst, h.idem[1])
	return binary.LittleEndian.AppendUint64(dst, h.fp)
}

// id reads a uvarint that the engine never logs as zero.
func (d *decoder) id(what string) uint64 {
	v := d.uvarint(what)
	if v == 0 && d.err == nil {
		d.fail(what + " is zero")
	}
	return v
}

// count reads a uvarint that fits an int64.
func (d *decoder) count(what string) int64 {
	v := d.uvarint(what)
	if v > math.MaxInt64 {
		d.fail(what + " out of range")
		return 0
	}
	return int64(v)
}

func (d *decoder) flag(what string) bool {
	b := d.bytes(1, what)
	if b == nil {
		return false
	}
	if b[0] > 1 {
		d.fail(fmt.Sprintf("%s is %d", what, b[0]))
	}
	return b[0] == 1
}

// readIDs reads an id list into dst's storage; nonEmpty refuses a list
// of none.
func readIDs[T ~uint64](d *decoder, dst []T, nonEmpty bool, what string) []T {
	dst = dst[:0]
	n := d.uvarint("list length")
	// Each id takes at least a byte: a count beyond what is left is
	// garbage, and checking first keeps a bad count from allocating.
	switch {
	case d.err != nil:
		return dst
	case n == 0 && nonEmpty:
		d.fail("no " + what)
		return dst
	case n > maxListLen || n > uint64(len(d.b)):
		d.fail(what + " list too long")
		return dst
	}
	for range n {
		dst = append(dst, T(d.id(what)))
	}
	return dst
}

// text reads a string; nonEmpty refuses "".
func (d *decoder) text(nonEmpty bool, what string) string {
	s := d.str(what)
	if s == "" && nonEmpty && d.err == nil {
		d.fail(what + " is empty")
	}
	return s
}

// idem reads what appendIdem wrote into h.
func (d *decoder) idem(h *recHeader) {
	if !d.flag("idempotency key flag") {
		return
	}
	k := d.bytes(24, "idempotency key and fingerprint")
	if k == nil {
		return
	}
	h.idem = idemKey{binary.LittleEndian.Uint64(k), binary.LittleEndian.Uint64(k[8:])}
	h.fp = binary.LittleEndian.Uint64(k[16:])
	switch {
	case h.idem == (idemKey{}):
		d.fail("idem key is zero")
	case h.fp == 0:
		d.fail("fingerprint is zero")
	}
}

// kind reads a byte of at most counters.MaxKinds: a reaction kind id, or
// a count of them.
func (d *decoder) kind(what string) uint8 {
	if d.err != nil {
		return 0
	}
	if len(d.b) == 0 {
		d.fail(what + " runs past the end")
		return 0
	}
	v := d.b[0]
	if v > counters.MaxKinds {
		d.fail(what + " out of range")
		return 0
	}
	d.b = d.b[1:]
	return v
}
