package embedded

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// opKind names one kind of state change. The numbers are part of the log
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

// op is one state change: everything apply needs, with every
// non-deterministic input (the time, generated ids, the TTL in force)
// decided before it is logged, so that applying the same ops to the same
// state always gives the same state. The fields are generic; what each
// means per kind:
//
//	createPost       viewer, a = post
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
// Every op also carries time, the engine's clock at commit in Unix ns,
// strictly increasing from one op to the next.
type op struct {
	kind   opKind
	time   int64
	viewer uint64
	a, b   uint64
	idem   idemKey
	list   []uint64
	s1, s2 string
	// fp is the engine.IdemFingerprint of the call that carried idem (0
	// in records written before fingerprints were logged).
	fp uint64
	// legacyIdem is idem as older versions hashed it (scoped by kind); it
	// is looked up, never logged, so a retry of a call made before an
	// upgrade still finds its result.
	legacyIdem idemKey
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

// Decode bounds. The largest legitimate list is an import batch.
const (
	maxListLen   = MaxImportBatch * importStride
	maxStringLen = 1 << 16
)

var errBadRecord = errors.New("embedded: malformed op record")

// appendOp appends o's encoding to dst.
func appendOp(dst []byte, o *op) []byte {
	var mask byte
	if o.viewer != 0 {
		mask |= maskViewer
	}
	if o.a != 0 {
		mask |= maskA
	}
	if o.b != 0 {
		mask |= maskB
	}
	if o.idem != (idemKey{}) {
		mask |= maskIdem
	}
	if len(o.list) > 0 {
		mask |= maskList
	}
	if o.s1 != "" {
		mask |= maskS1
	}
	if o.s2 != "" {
		mask |= maskS2
	}
	if o.fp != 0 {
		mask |= maskFP
	}
	dst = append(dst, opVersion, byte(o.kind), mask)
	dst = binary.AppendUvarint(dst, uint64(o.time))
	if mask&maskViewer != 0 {
		dst = binary.AppendUvarint(dst, o.viewer)
	}
	if mask&maskA != 0 {
		dst = binary.AppendUvarint(dst, o.a)
	}
	if mask&maskB != 0 {
		dst = binary.AppendUvarint(dst, o.b)
	}
	if mask&maskIdem != 0 {
		dst = binary.LittleEndian.AppendUint64(dst, o.idem[0])
		dst = binary.LittleEndian.AppendUint64(dst, o.idem[1])
	}
	if mask&maskList != 0 {
		dst = binary.AppendUvarint(dst, uint64(len(o.list)))
		for _, v := range o.list {
			dst = binary.AppendUvarint(dst, v)
		}
	}
	if mask&maskS1 != 0 {
		dst = binary.AppendUvarint(dst, uint64(len(o.s1)))
		dst = append(dst, o.s1...)
	}
	if mask&maskS2 != 0 {
		dst = binary.AppendUvarint(dst, uint64(len(o.s2)))
		dst = append(dst, o.s2...)
	}
	if mask&maskFP != 0 {
		dst = binary.LittleEndian.AppendUint64(dst, o.fp)
	}
	return dst
}

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
		// An overlong encoding: appendOp never writes one, so it is not a
		// record of ours.
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
	n := d.uvarint(what + " length")
	if n > maxStringLen {
		d.fail(what + " too long")
		return ""
	}
	return string(d.bytes(n, what))
}

// decodeOp parses one record. It never panics and rejects anything that
// appendOp would not have produced from some op: unknown version or kind,
// unknown mask bits, zero where the mask promises non-zero, truncation and
// trailing bytes.
func decodeOp(rec []byte) (op, error) {
	var o op
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
		return op{}, d.err
	}
	return o, nil
}
