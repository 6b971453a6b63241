package embedded

import (
	"encoding/binary"
)

// The version-1 encoder, kept to test that version-1 records still
// decode (the engine writes version 2 only).

// appendV1 appends o's encoding to dst.
func appendV1(dst []byte, o *v1op) []byte {
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

// toV1 is fromV1's inverse: r as a version-1 record.
func toV1(r record) v1op {
	h, kind, _, _ := recordInfo(r)
	o := v1op{kind: kind, time: h.time, idem: h.idem, fp: h.fp}
	switch r := r.(type) {
	case *createPostRec:
		o.viewer, o.a = uint64(r.Viewer), uint64(r.Post)
	case *likeRec:
		o.viewer, o.a = uint64(r.Viewer), uint64(r.Post)
	case *favoriteRec:
		o.viewer, o.a = uint64(r.Viewer), uint64(r.Post)
	case *commentRec:
		o.viewer, o.a, o.list = uint64(r.Viewer), uint64(r.Post), ids(r.Mentions)
	case *repostRec:
		o.viewer, o.a, o.b, o.list = uint64(r.Viewer), uint64(r.Post), uint64(r.NewPost), ids(r.Mentions)
	case *viewsRec:
		o.list = ids(r.Posts)
	case *followRec:
		o.viewer, o.a = uint64(r.Viewer), uint64(r.Target)
	case *touchRec:
		o.viewer, o.a = uint64(r.viewer), r.cursor
		if r.reset {
			o.b = 1
		}
	case *markReadRec:
		o.viewer, o.a = uint64(r.Viewer), uint64(r.Kind)
	case *clickRec:
		o.viewer = uint64(r.Viewer)
	case *pushRec:
	case *publishRec:
		o.a, o.s1, o.s2 = r.id, r.Title, r.Body
	case *createGroupRec:
		o.viewer, o.a, o.list = uint64(r.Viewer), uint64(r.Group), ids(r.Members)
	case *addMembersRec:
		o.viewer, o.a, o.list = uint64(r.Viewer), uint64(r.Group), ids(r.Users)
	case *leaveGroupRec:
		o.viewer, o.a = uint64(r.Viewer), uint64(r.Group)
	case *sendMessageRec:
		o.viewer, o.a, o.b, o.list, o.s1 = uint64(r.Viewer), uint64(r.Group), uint64(r.Message), ids(r.Mentions), r.Text
	case *markMessagesReadRec:
		o.viewer, o.list = uint64(r.Viewer), ids(r.Messages)
	case *sweepRec:
		o.a = uint64(r.ttl)
	case *importRec:
		o.list = make([]uint64, 0, len(r.rows)*importStride)
		for _, row := range r.rows {
			c := row.Counts
			o.list = append(o.list, uint64(row.Post), uint64(row.Author), uint64(c.Likes), uint64(c.Comments),
				uint64(c.Reposts), uint64(c.Views), uint64(c.Favorites))
		}
	}
	return o
}
