package redisstore

import (
	"encoding/binary"
	"errors"
	"unicode/utf8"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/counters"
	"github.com/tally-dev/tally/engine/ops"
	"github.com/tally-dev/tally/engine/snowflake"
)

// Records are packed byte strings so that one listpack entry holds a whole
// post or user (Redis spends ~70 bytes on a key; a listpack entry costs its
// bytes plus one or two). Numbers are unsigned LEB128 varints, trailing
// zeros dropped, so zero costs nothing and small counts one byte. The Lua
// scripts read and write the same format with doubles, exact to 2^53.

var errCorrupt = errors.New("redisstore: corrupt record")

// Post record: [len|reacted][author big-endian, len bytes][varints views, likes,
// comments, reposts, favorites, unidentified, then the counts of reaction
// kinds 2 to counters.MaxKinds by kind id (like's is likes)]. Trailing
// zeros are dropped, so a post without reactions other than likes is the
// record it was before kinds existed, and one with a kind pays a byte per
// kind id below it. The author is kept as
// opaque bytes because a user id may need all 64 bits, which Lua numbers
// cannot hold. Unidentified is not a count anyone reads: it is the part
// of comments that was sent without a comment id, so that comments is
// exactly the post's counted ids plus it (what tally check recounts);
// it costs nothing on a post whose comments all have ids. The first
// byte's top bit (reactedBit) says whether the post's reactors hash may
// exist (below).
const (
	pViews = iota + 1 // Lua (1-based) indexes of the counts
	pLikes
	pComments
	pReposts
	pFavorites
	pUnidentified
)

// pKind is the Lua index of the count of reaction kind k (2 to
// counters.MaxKinds) in a post record.
func pKind(k counters.Kind) int { return pUnidentified + int(k) - 1 }

// postFields is the number of counts a post record holds at most.
const postFields = pUnidentified + counters.MaxKinds - 1

func postHead(author uint64) string {
	var b [9]byte
	n := 0
	for v := author; v != 0; v >>= 8 {
		n++
	}
	b[0] = byte(n)
	for i := range n {
		b[1+i] = byte(author >> (8 * (n - 1 - i)))
	}
	return string(b[:1+n])
}

// reactedBit, set in a post record's first byte beside the author's
// length, says that the post's reactors hash may exist: a page reads the
// viewer's field of that hash only on a post whose record has it, so a
// page of posts no one gave a kind other than like costs what a page of
// counts costs. The reaction scripts set it when they write a field of
// the hash and clear it when the hash's last field goes; every script
// that rewrites a record keeps it, an import (which replaces the counts,
// not who reacted) included. The counts cannot stand in for it: an
// import may leave a post counting no kind but like while its hash still
// holds reactions.
const reactedBit = 0x80

// headLen is the length of a (non-tombstone) post record's head.
func headLen(rec string) int { return 1 + int(rec[0]&^reactedBit) }

// reacted reports whether a post record (not a tombstone) has reactedBit.
func reacted(rec string) bool { return rec[0]&reactedBit != 0 }

// authorHead is a post record's head without reactedBit: the head
// postHead makes of its author, which the scripts compare heads with.
func authorHead(rec string) string {
	if !reacted(rec) {
		return rec[:headLen(rec)]
	}
	return string([]byte{rec[0] &^ reactedBit}) + rec[1:headLen(rec)]
}

// decodeHead reads the author from a record head (as returned by scripts)
// or a whole record.
func decodeHead(h string) (uint64, error) {
	if len(h) == 0 || h[0]&^reactedBit > 8 || headLen(h) > len(h) {
		return 0, errCorrupt
	}
	var a uint64
	for i := 1; i < headLen(h); i++ {
		a = a<<8 | uint64(h[i])
	}
	return a, nil
}

// tombstone is the record of a deleted post (DeletePost): its id stays
// taken, and every read and script treats it as no post. A record's first
// byte is otherwise its author's length, at most 8, with reactedBit.
const tombstone = "\xff"

// recordState reads what a post record (as HGET returns it; "" for none)
// says of the post: known, deleted (a tombstone), or neither.
func recordState(rec string) (exists, deleted bool) {
	return rec != "" && rec != tombstone, rec == tombstone
}

// postFactsOf reads ops.PostFacts from a post record.
func postFactsOf(rec string) (ops.PostFacts, error) {
	exists, deleted := recordState(rec)
	if !exists {
		return ops.PostFacts{Deleted: deleted}, nil
	}
	author, err := decodeHead(rec)
	if err != nil {
		return ops.PostFacts{}, err
	}
	return ops.PostFacts{Exists: true, Author: engine.UserID(author)}, nil
}

func decodePost(rec string) (author uint64, c engine.Counts, err error) {
	author, c, _, err = decodeReactions(rec)
	return author, c, err
}

// decodeReactions reads a post record's author, counts and counts of the
// reaction kinds other than like.
func decodeReactions(rec string) (author uint64, c engine.Counts, r counters.Reactions, err error) {
	if author, err = decodeHead(rec); err != nil {
		return 0, c, r, err
	}
	var v [postFields]int64
	if err := decodeVarints(rec[headLen(rec):], v[:]); err != nil {
		return 0, c, r, err
	}
	c.Views, c.Likes, c.Comments, c.Reposts, c.Favorites = v[0], v[1], v[2], v[3], v[4]
	copy(r[:], v[pUnidentified:])
	return author, c, r, nil
}

// encodeCounts packs counts and the reactions of kinds other than like in
// record order (no comment counted without an id), trailing zeros
// dropped.
func encodeCounts(c engine.Counts, r *counters.Reactions) string {
	v := make([]int64, 0, postFields)
	v = append(v, c.Views, c.Likes, c.Comments, c.Reposts, c.Favorites, 0)
	if r != nil {
		v = append(v, r[:]...)
	}
	for len(v) > 0 && v[len(v)-1] == 0 {
		v = v[:len(v)-1]
	}
	var b []byte
	for _, x := range v {
		b = binary.AppendUvarint(b, uint64(x))
	}
	return string(b)
}

// User record fields (Lua indexes).
const (
	uPosts = iota + 1
	uFollowers
	uFollowing
	uMentions
	uComments
	uLikes
	uMessages
	uCursor    // seq of the last system notification seen + 1; 0 = no cursor yet
	uClick     // red-dot stamp the user last clicked
	uActive    // unix seconds of last badge activity, for cursor expiry
	uDeleted   // posts deleted (DeletePost): the post count shown is uPosts − uDeleted
	userFields = uDeleted
)

type userRec [userFields]int64

func decodeUser(rec string) (userRec, error) {
	var u userRec
	return u, decodeVarints(rec, u[:])
}

func (u *userRec) get(field int) int64 { return u[field-1] }

func (u *userRec) set(field int, v int64) { u[field-1] = v }

// encode packs u as the scripts' enc does (trailing zeros dropped), so
// that a record Go decided compares equal to one Lua wrote.
func (u *userRec) encode() string {
	n := len(u)
	for n > 0 && u[n-1] == 0 {
		n--
	}
	var b []byte
	for _, v := range u[:n] {
		b = binary.AppendUvarint(b, uint64(v))
	}
	return string(b)
}

func decodeVarints(s string, out []int64) error {
	b := []byte(s)
	for i := 0; len(b) > 0; i++ {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			return errCorrupt
		}
		if i < len(out) {
			out[i] = int64(v)
		}
		b = b[n:]
	}
	return nil
}

// Notification payload: [8 id][uvarint len title][title][body].
func encodeNotif(n engine.Notification) string {
	b := binary.BigEndian.AppendUint64(nil, uint64(n.ID))
	b = binary.AppendUvarint(b, uint64(len(n.Title)))
	b = append(b, n.Title...)
	b = append(b, n.Body...)
	return string(b)
}

func decodeNotif(s string) (engine.Notification, error) {
	if len(s) < 9 {
		return engine.Notification{}, errCorrupt
	}
	id := binary.BigEndian.Uint64([]byte(s[:8]))
	tl, n := binary.Uvarint([]byte(s[8:]))
	if n <= 0 || uint64(len(s)-8-n) < tl {
		return engine.Notification{}, errCorrupt
	}
	rest := s[8+n:]
	return engine.Notification{
		ID:        engine.NotificationID(id),
		Title:     rest[:tl],
		Body:      rest[tl:],
		CreatedAt: snowflake.Time(id),
	}, nil
}

// Message body (group hash T): [4 sender's mapid][text]. The sender is
// named by their place in the group, whose uid the packed member list U
// holds: erasing a member zeroes that place, and every message they sent
// loses its sender at once. Scripts that read a body return the sender's
// 8 packed bytes from U beside it (sender8).
func decodeBody(gid, mid uint64, body, sender8 string) (engine.Message, error) {
	if len(body) < 4 || len(sender8) != 8 || !utf8.ValidString(body[4:]) {
		return engine.Message{}, errCorrupt
	}
	return engine.Message{
		ID:     engine.MessageID(mid),
		Group:  engine.GroupID(gid),
		Sender: engine.UserID(binary.BigEndian.Uint64([]byte(sender8))),
		Text:   body[4:],
		SentAt: snowflake.Time(mid),
	}, nil
}

func uid8(u uint64) string { return string(binary.BigEndian.AppendUint64(nil, u)) }

// members decodes a group's packed mapid -> uid string (mapid = index+1).
func members(packed string) []uint64 {
	out := make([]uint64, len(packed)/8)
	for i := range out {
		out[i] = binary.BigEndian.Uint64([]byte(packed[8*i : 8*i+8]))
	}
	return out
}

// bitSet reports bit i (0-based, Redis SETBIT order: MSB first) of s.
func bitSet(s string, i int) bool {
	if i/8 >= len(s) {
		return false
	}
	return s[i/8]&(0x80>>(i%8)) != 0
}
