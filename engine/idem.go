package engine

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"slices"
)

// IdemOp names the mutation an idempotency key was first used for. The
// numbers go into stored fingerprints: never renumber, only append.
type IdemOp uint8

const (
	IdemCreatePost IdemOp = iota + 1
	IdemComment
	IdemRepost
	IdemSendMessage
	IdemPublish
)

// IdemArgs are the arguments of an idempotent mutation that decide what it
// does. Fields a mutation does not take stay zero. Mentions are those the
// backend will apply (after NormalizeMentions); their order does not matter.
type IdemArgs struct {
	Post        PostID    // createPost: the id the client asked for (0: none); comment/repost: the target
	Comment     CommentID // comment: the app's id of the comment (0: none)
	Group       GroupID
	Mentions    []UserID
	Text        string // sendMessage
	Title, Body string // publish
}

// IdemFingerprint summarises what a mutation with an idempotency key was
// asked to do: its kind and every argument that changes its effect. A key
// is remembered with the fingerprint of its first use; a retry must match
// it (CheckIdemReuse). The result is never 0, so that a store can use 0
// for "no fingerprint" and never mistake it for one.
func IdemFingerprint(op IdemOp, a IdemArgs) uint64 {
	h := fnv.New64a()
	var b [8]byte
	u := func(v uint64) {
		binary.LittleEndian.PutUint64(b[:], v)
		h.Write(b[:])
	}
	s := func(v string) {
		u(uint64(len(v)))
		h.Write([]byte(v))
	}
	u(uint64(op))
	u(uint64(a.Post))
	u(uint64(a.Group))
	if a.Comment != 0 {
		// Only when given, so that every other fingerprint stays what
		// it was.
		u(uint64(a.Comment))
	}
	m := slices.Clone(a.Mentions)
	slices.Sort(m)
	m = slices.Compact(m)
	u(uint64(len(m)))
	for _, v := range m {
		u(uint64(v))
	}
	s(a.Text)
	s(a.Title)
	s(a.Body)
	if fp := h.Sum64(); fp != 0 {
		return fp
	}
	return 1
}

// CheckIdemReuse judges a mutation whose idempotency key is already
// recorded with the fingerprint stored: the same fingerprint is a retry
// (answer with the first result); a different one is ErrInvalid.
func CheckIdemReuse(stored, fp uint64) error {
	if stored == fp {
		return nil
	}
	return ErrIdemReused
}

// ErrIdemReused is returned for an idempotency key already used for
// another mutation or with other arguments.
var ErrIdemReused = fmt.Errorf("%w: idempotencyKey was already used for another operation or with other arguments; use a new key for a new operation", ErrInvalid)
