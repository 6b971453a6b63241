package redisstore

import "github.com/redis/go-redis/v9"

// The scripts of the content lifecycle: deleting a comment or a post,
// and the steps of a user's erasure (erase.go). Like every script here
// they apply what Go decided with engine/ops, each in one slot, checking
// that the facts it was decided on still hold.
var (
	// The delete ops.DeleteComment decided on a live comment id: the id
	// moves from counted to deleted and the count deltas are applied,
	// only if the post exists and the id is still counted. KEYS bucket,
	// comment ids, deleted comment ids; ARGV floor, ceiling, low, comment id, then (count
	// index, delta) pairs. {-1} no post; {0, head} the id is no longer
	// counted (nothing applied); {1, head, zero-transition}.
	scCommentDelete = newScript(`
local lo, hi = tonumber(ARGV[1]), tonumber(ARGV[2])
local rec = redis.call('HGET', KEYS[1], ARGV[3])
if not rec or rec == TOMB then return {-1} end
local head = author(rec)
if redis.call('SREM', KEYS[2], ARGV[4]) == 0 then return {0, head} end
redis.call('SADD', KEYS[3], ARGV[4])
return {1, head, recount(KEYS[1], ARGV[3], rec, 5, lo, hi)}`)

	// The delete ops.DeletePost decided (an Unregistration): the record
	// becomes a tombstone, so the id stays taken and reads as unknown, and
	// its like, favorite and comment-id sets, its reactors hash and its
	// repost entry go —
	// only if the record still has the head (author) Go decided on. The
	// intent of what follows (the author's count, the original's
	// reposts) is recorded with it. KEYS bucket, likers, favoriters,
	// comment ids, deleted comment ids, reposts, intents, reactors; ARGV
	// low, head, intent id, intent
	// ('' = none). {-1} no post; {0} deleted already; {2, head} the head
	// changed (Go decides again); {1, 1 if its counts were not all zero}.
	scPostDelete = newScript(`
local rec = redis.call('HGET', KEYS[1], ARGV[1])
if not rec then return {-1} end
if rec == TOMB then return {0} end
local head = author(rec)
if head ~= ARGV[2] then return {2, head} end
redis.call('HSET', KEYS[1], ARGV[1], TOMB)
redis.call('UNLINK', KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[8])
redis.call('HDEL', KEYS[6], ARGV[1])
if ARGV[4] ~= '' then redis.call('HSET', KEYS[7], ARGV[3], ARGV[4]) end
if #rec > #head then return {1, 1} end
return {1, 0}`)

	// An erasure step's removal of a like, reaction or favorite
	// (ops.ErasureStep: a flag found set): the user leaves the set (a
	// reaction of a kind other than like, ARGV[5] its kind id: the
	// reactors hash, if the reaction is still of that kind) and, only if
	// they were in it and the post exists, the count deltas Go decided
	// are applied (the record's REACTED cleared when the reactors hash's
	// last field went). KEYS bucket, set or reactors hash; ARGV floor,
	// ceiling, low, user, kind id ('' for a set), then (count index,
	// delta) pairs. {removed, zero-transition}.
	scEraseFlag = newScript(`
local lo, hi = tonumber(ARGV[1]), tonumber(ARGV[2])
if ARGV[5] == '' then
  if redis.call('SREM', KEYS[2], ARGV[4]) == 0 then return {0, 0} end
else
  if redis.call('HGET', KEYS[2], ARGV[4]) ~= ARGV[5] then return {0, 0} end
  redis.call('HDEL', KEYS[2], ARGV[4])
end
local rec = redis.call('HGET', KEYS[1], ARGV[3])
if not rec or rec == TOMB then return {1, 0} end
if ARGV[5] ~= '' and redis.call('EXISTS', KEYS[2]) == 0 then rec = withReacted(rec, false) end
return {1, recount(KEYS[1], ARGV[3], rec, 6, lo, hi)}`)

	// The posts of one bucket whose head is ARGV[1] (by that author):
	// the facts of an erasure step (read only). KEYS bucket. Their lows.
	scAuthored = newScript(`
local out = {}
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  local rec = all[i + 1]
  if rec ~= TOMB and author(rec) == ARGV[1] then out[#out + 1] = all[i] end
end
return out`)

	// The posts ops.ErasureStep decided lose their author (Unauthors):
	// each record whose head is still ARGV[1] gets head ARGV[2] (its
	// REACTED kept). KEYS
	// bucket; ARGV old head, new head, lows. Returns how many changed.
	scUnauthor = newScript(`
local n = 0
for i = 3, #ARGV do
  local rec = redis.call('HGET', KEYS[1], ARGV[i])
  if rec and rec ~= TOMB then
    if author(rec) == ARGV[1] then
      redis.call('HSET', KEYS[1], ARGV[i], withReacted(ARGV[2] .. string.sub(rec, hlen(rec) + 1), reacted(rec)))
      n = n + 1
    end
  end
end
return n`)

	// A group forgets an erased member (ops.ErasureStep's GroupErasures):
	// the uid leaves the uid -> mapid hash, its 8 bytes in the packed
	// member list are zeroed (so no list, and no message it sent, names
	// it), and its mapid is marked quit (never current again: messages
	// sent from now on do not count it) and erased (the receipts already
	// recorded still count it, but no reader list names it). A user who
	// is added again gets a new mapid. KEYS U, M, Q, X; ARGV uid. The
	// mapid it had (0: none).
	scGroupErase = newScript(`
local m = redis.call('HGET', KEYS[2], ARGV[1])
if not m then return 0 end
m = tonumber(m)
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('SETRANGE', KEYS[1], (m - 1) * 8, string.rep('\0', 8))
redis.call('SETBIT', KEYS[3], m - 1, 1)
redis.call('SETBIT', KEYS[4], m - 1, 1)
return m`)

	// The start of an erasure (ops.Erasure, not Done) in the user's slot:
	// the user's record (badges, cursor, red-dot click, post and follow
	// counts) goes, and the user is marked as being erased until ARGV[3]
	// ms from now (renewed while the erasure runs). KEYS bucket, marker;
	// ARGV low, erasure id, marker ttl. 1 if a record went.
	scEraseStart = newScript(`
redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
return redis.call('HDEL', KEYS[1], ARGV[1])`)

	// The end of an erasure (ops.Erasure, Done) in the user's slot: the
	// record again (badges bumped while the erasure ran), the comment ids
	// the user wrote, the followee list and the marker go — unless a
	// follow edge is left (one made while the erasure ran), which Go
	// removes first, with its followee's count. KEYS bucket, marker,
	// written, followees; ARGV low. {-1} edges left; {1 if a record went}.
	scEraseEnd = newScript(`
if redis.call('HLEN', KEYS[4]) > 0 then return {-1} end
local n = redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('DEL', KEYS[2], KEYS[3], KEYS[4])
return {n}`)

	// Erasure intents (erase.go), in the system slot. Begin records
	// ARGV[2] for user ARGV[1] unless an erasure of theirs is recorded,
	// whose value it returns. KEYS erasures. The value found, or false.
	scErasureBegin = newScript(`
local v = redis.call('HGET', KEYS[1], ARGV[1])
if v then return v end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return false`)

	// Saves an erasure's progress (its value ARGV[3], and master ARGV[4]'s
	// scan cursor ARGV[5] unless ARGV[4] is '') if the erasure recorded
	// is still the one with id ARGV[2]. KEYS erasures, cursors; ARGV uid,
	// id, value, master, cursor. 1 saved; 0 the erasure is over.
	scErasureSave = newScript(`
local v = redis.call('HGET', KEYS[1], ARGV[1])
if not v or string.sub(v, 1, #ARGV[2] + 1) ~= ARGV[2] .. '|' then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
if ARGV[4] ~= '' then redis.call('HSET', KEYS[2], ARGV[4], ARGV[5]) end
return 1`)

	// Deletes the erasure of user ARGV[1] with id ARGV[2], and its
	// cursors. KEYS erasures, cursors. 1 deleted; 0 not there.
	scErasureDone = newScript(`
local v = redis.call('HGET', KEYS[1], ARGV[1])
if not v or string.sub(v, 1, #ARGV[2] + 1) ~= ARGV[2] .. '|' then return 0 end
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('DEL', KEYS[2])
return 1`)
)

var lifecycleScripts = []*redis.Script{
	scCommentDelete, scPostDelete, scEraseFlag, scAuthored, scUnauthor, scGroupErase,
	scEraseStart, scEraseEnd, scErasureBegin, scErasureSave, scErasureDone,
}
