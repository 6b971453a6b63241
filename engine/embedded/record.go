package embedded

import (
	"fmt"

	"github.com/tally-dev/tally/engine"
)

// opKind names one kind of log record. The numbers are part of the log
// format: never renumber, only append.
type opKind uint8

const (
	opCreatePost opKind = iota + 1
	opLike
	opUnlike
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
	opKindEnd // one past the last kind
)

var opNames = [...]string{
	opCreatePost: "createPost", opLike: "like", opUnlike: "unlike", opFavorite: "favorite",
	opUnfavorite: "unfavorite", opComment: "comment", opRepost: "repost", opViews: "views",
	opFollow: "follow", opUnfollow: "unfollow", opTouch: "touch", opMarkRead: "markRead",
	opClickRedDot: "clickRedDot", opPushRedDot: "pushRedDot", opPublish: "publish",
	opCreateGroup: "createGroup", opAddMembers: "addMembers", opLeaveGroup: "leaveGroup",
	opSendMessage: "sendMessage", opMarkMessagesRead: "markMessagesRead",
	opSweepCursors: "sweepCursors", opImport: "import",
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
	// fp is the engine.IdemFingerprint of the call that carried idem (0
	// in records written before fingerprints were logged).
	fp uint64
	// legacyIdem is idem as older versions hashed it (scoped by kind); it
	// is looked up, never logged, so a retry of a call made before an
	// upgrade still finds its result.
	legacyIdem idemKey
}

func (*recHeader) isRecord() {}

// withIdem sets h's idempotency fields for a call of kind carrying key.
func (h *recHeader) withIdem(kind opKind, viewer engine.UserID, key string, ik engine.IdemOp, args engine.IdemArgs) {
	if key == "" {
		return
	}
	h.idem = makeIdemKey(uint64(viewer), key)
	h.legacyIdem = legacyIdemKey(kind, uint64(viewer), key)
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
	case *likeRec:
		kind = opLike
		if r.Undo {
			kind = opUnlike
		}
		return &r.recHeader, kind, uint64(r.Post), 0
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
	}
	panic("embedded: unknown record type")
}

// appendRecord appends r's encoding to dst.
func appendRecord(dst []byte, r record) []byte {
	o := toV1(r)
	return appendV1(dst, &o)
}

// decodeRecord parses one record. It never panics and rejects anything
// that appendRecord would not have produced.
func decodeRecord(rec []byte) (record, error) {
	o, err := decodeV1(rec)
	if err != nil {
		return nil, err
	}
	return fromV1(&o)
}
