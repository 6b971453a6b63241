package redisstore

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"math/bits"
	"strconv"
	"strings"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/snowflake"
)

// keyspace builds every key name. Each name starts with the prefix and then
// a hash tag {...}: all keys one atomic step touches share a tag, so they
// share a slot on Redis Cluster. The prefix is outside the tag (it must not
// contain braces), so distinct prefixes never change which keys group.
type keyspace struct {
	p string // prefix

	winShift uint   // bits below a post bucket's time window (node+seq+window bits)
	subBits  uint   // log2 of the sub-buckets per window
	lowMask  uint64 // the id bits kept as the hash field
	userBits uint   // users per user bucket = 1<<userBits
}

func newKeyspace(prefix string, windowBits, fanout, userBits int) keyspace {
	shift := uint(snowflake.TimeShift + windowBits)
	return keyspace{
		p:        prefix,
		winShift: shift,
		subBits:  uint(bits.TrailingZeros(uint(fanout))),
		lowMask:  1<<shift - 1,
		userBits: uint(userBits),
	}
}

// idBucket places a snowflake id (post or message) in a bucket: the id's
// time window, spread over 2^subBits sub-buckets by a multiplicative hash
// so that the posts of the current second (the hottest ones, docs/seeds.md#seed-000)
// land on many slots and nodes instead of one. The field inside the bucket
// is the id's bits below the window, a small integer listpack stores in
// 4–5 bytes.
func (k keyspace) idBucket(kind byte, id uint64) (tag string, low string) {
	w := id >> k.winShift
	sub := uint64(0)
	if k.subBits > 0 {
		sub = (id * 0x9E3779B97F4A7C15) >> (64 - k.subBits)
	}
	b := make([]byte, 0, len(k.p)+24)
	b = append(b, k.p...)
	b = append(b, '{', kind)
	b = strconv.AppendUint(b, w, 36)
	b = append(b, '.')
	b = strconv.AppendUint(b, sub, 36)
	b = append(b, '}')
	return string(b), strconv.FormatUint(id&k.lowMask, 10)
}

// postOf is the id of the post with field low in the bucket whose hash
// tag holds inner ("p<window>.<sub>"): its window's bits, then low.
func (k keyspace) postOf(inner, low string) (engine.PostID, bool) {
	w, _, ok := strings.Cut(strings.TrimPrefix(inner, "p"), ".")
	win, err1 := strconv.ParseUint(w, 36, 64)
	l, err2 := strconv.ParseUint(low, 10, 64)
	if !ok || !strings.HasPrefix(inner, "p") || err1 != nil || err2 != nil || l > k.lowMask {
		return 0, false
	}
	return engine.PostID(win<<k.winShift | l), true
}

// Post keys. The bucket hash maps low bits -> packed post record; likers
// and favoriters are one set per post, in the post's slot, so that de-dup
// and count change in one script.
func (k keyspace) post(id uint64) (bucket, low string) { return k.idBucket('p', id) }
func likersKey(bucket, low string) string              { return bucket + "l" + low }

// reactorsKey is a post's hash of the users whose reaction is a kind
// other than like: uid -> kind id. Likes stay in the likers set (an
// intset, the cheapest membership Redis has), so a post with likes only
// has no such hash; a user is in at most one of the two.
func reactorsKey(bucket, low string) string { return bucket + "k" + low }
func favsKey(bucket, low string) string     { return bucket + "f" + low }

// commentsKey is the set of a post's counted comment ids, and
// uncountedKey the set of its deleted ones (known, and never counted
// again): the post's comment count is the first set's size plus the
// comments counted without an id (pUnidentified), which is what tally
// check recounts. Snowflakes are integers, so both sets are intsets.
func commentsKey(bucket, low string) string  { return bucket + "c" + low }
func uncountedKey(bucket, low string) string { return bucket + "d" + low }

// repostsKey is a bucket's hash of reposts: low -> the original's id,
// which loses a repost when the repost is deleted.
func repostsKey(bucket string) string { return bucket + "R" }

// Message index: bucket hash of message id low bits -> group id.
func (k keyspace) msgIndex(id uint64) (bucket, low string) { return k.idBucket('m', id) }

// User keys. Users are bucketed by id (Instagram's technique: ids are
// dense, so uid>>10 puts ~1,024 users in one listpack hash).
func (k keyspace) user(uid uint64) (bucket, low string) {
	b := make([]byte, 0, len(k.p)+20)
	b = append(b, k.p...)
	b = append(b, "{u"...)
	b = strconv.AppendUint(b, uid>>k.userBits, 36)
	b = append(b, '}')
	return string(b), strconv.FormatUint(uid&(1<<k.userBits-1), 10)
}

// followees is uid's followee -> snapshot hash, in uid's slot.
func (k keyspace) followees(uid uint64) string {
	bucket, _ := k.user(uid)
	return bucket + "F" + strconv.FormatUint(uid, 10)
}

// written is the set of comment ids uid wrote and Tally counted: what
// lets the writer delete them (DeleteComment), in uid's slot.
func (k keyspace) written(uid uint64) string {
	bucket, _ := k.user(uid)
	return bucket + "W" + strconv.FormatUint(uid, 10)
}

// erasing marks uid as being erased (erase.go), in uid's slot: a follow
// of or by uid waits until it is gone.
func (k keyspace) erasing(uid uint64) string {
	bucket, _ := k.user(uid)
	return bucket + "e" + strconv.FormatUint(uid, 10)
}

// limiter and socketCap are uid's rate-limit and open-socket keys (limiter.go,
// wscap.go), each a slot of its own.
func (k keyspace) limiter(uid uint64) string {
	return k.p + "{rl" + strconv.FormatUint(uid, 36) + "}"
}

func (k keyspace) socketCap(uid uint64) string {
	return k.p + "{ws" + strconv.FormatUint(uid, 36) + "}"
}

// idemClaim is the claim of uid's idempotency key, in uid's slot (idem.go).
func (k keyspace) idemClaim(uid uint64, key string) string {
	bucket, _ := k.user(uid)
	return bucket + "i" + strconv.FormatUint(uid, 10) + ":" + key
}

// idemRecord is the record of uid's idempotency key in the slot of tag,
// where the operation's first step applies (idem.go). Hashed, so that no
// client text reaches a post's or group's key names (the intent sweep's
// SCAN pattern relies on it).
func (k keyspace) idemRecord(tag string, uid uint64, key string) string {
	return tag + "i" + hashID(uid, 0, key)
}

// Group keys, all under the group's tag.
// X is the bitmap of erased members' mapids (bit mapid-1): they stay
// counted in the receipts recorded, and no list names them.
type groupKeys struct{ tag, U, M, Q, T, R, X string }

func (k keyspace) group(gid uint64) groupKeys {
	tag := k.p + "{g" + strconv.FormatUint(gid, 36) + "}"
	return groupKeys{tag: tag, U: tag + "U", M: tag + "M", Q: tag + "Q", T: tag + "T", R: tag + "R", X: tag + "X"}
}

// readKey holds the read bitmap of one message of a large group.
func (g groupKeys) readKey(mid uint64) string { return g.tag + "r" + strconv.FormatUint(mid, 36) }

// System keys: the shared notification list, its id index, the red-dot
// push stamp, publish idempotency, node allocation, stats and the
// keyspace's format marker. One slot: they are few and small, and a
// broadcast touches only them.
func (k keyspace) sys() string        { return k.p + "{s}" }
func (k keyspace) notifList() string  { return k.sys() + "n" }
func (k keyspace) notifIndex() string { return k.sys() + "x" }
func (k keyspace) redDot() string     { return k.sys() + "r" }
func (k keyspace) nodeSeq() string    { return k.sys() + "node" }
func (k keyspace) stats() string      { return k.sys() + "st" }
func (k keyspace) format() string     { return k.sys() + "format" }

// kinds is the keyspace's reaction kinds table (reactions.go).
func (k keyspace) kinds() string { return k.sys() + "kinds" }

// imported holds the span of post ids imports wrote counts for (check.go).
func (k keyspace) imported() string { return k.sys() + "imported" }

// importIntents holds the intents of the import chunks in flight, one
// field per chunk (importintents.go).
func (k keyspace) importIntents() string { return k.sys() + "imp" }

// erasures holds the user erasures under way, uid -> their intent, and
// erasureCursors(uid) each master's scan cursor of one (erase.go).
func (k keyspace) erasures() string { return k.sys() + "erase" }
func (k keyspace) erasureCursors(uid uint64) string {
	return k.sys() + "erc" + strconv.FormatUint(uid, 10)
}
func (k keyspace) sysIdem(key string) string {
	return k.sys() + "i:" + key
}

// event channel shard i.
func (k keyspace) channel(i int) string { return k.p + "{e" + strconv.Itoa(i) + "}" }

// marker is the "operation op already applied here" key in tag's slot.
func marker(tag, op string) string { return tag + "o" + op }

// opID names an idempotent operation: who, which key, and when the
// operation began (unix ns by the store's clock), so a key used again
// after it expired names a new operation whose steps no marker of the old
// one skips.
func opID(uid uint64, key string, at int64) string { return hashID(uid, at, key) }

// hashID is a short name for (uid, at, key) whatever the client's key
// looks like.
func hashID(uid uint64, at int64, key string) string {
	h := sha256.New()
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uid)
	binary.BigEndian.PutUint64(b[8:], uint64(at))
	h.Write(b[:])
	h.Write([]byte(key))
	return base64.RawURLEncoding.EncodeToString(h.Sum(nil)[:15])
}
