package redisstore

import "github.com/redis/go-redis/v9"

// Every multi-key step runs as one Lua script over keys of one hash slot,
// so it is atomic on a single node and on Redis Cluster alike. Scripts
// decide no product rule: those live in engine/ops, and Go decides them
// (see the package doc). A script applies the effects Go passes as
// arguments, reads facts atomically and returns them, and checks that the
// facts an effect was decided on still hold, refusing it otherwise (a
// "facts changed" reply: Go reads, or takes the facts returned, and
// decides again). Scripts report facts and refusals as return codes,
// never as Redis errors, so that a Redis error always means "the store is
// unavailable".
//
// Guards make a step of a keyed operation (and every later step of a
// cross-slot one) idempotent: the step's script looks for its guard key
// in the step's own slot, skips the step when it is there, and otherwise
// applies the step and sets the guard in the same script, so that the
// guard and the step's effect are replicated, lost and kept together. A
// later step's guard is a marker "<tag>o<op><step>" ('1'); a keyed
// operation's first step keeps its idempotency record as its guard
// (posts.go), so a retry finds it wherever the operation's effect went.
//
// Counting scripts (those that add deltas to a record: add and bump
// below) take counters.Floor and counters.Ceiling as their first two
// arguments: a count stays within them whatever the deltas, and
// engine/counters is the one place that says what they are.

// prelude is shared by all scripts: the varint record codec (the same
// format as codec.go; Lua numbers are doubles, exact to 2^53) and helpers.
// TOMB is a deleted post's record (codec.go's tombstone), which every
// script reads as no post. A post record's first byte is its author's
// length plus REACTED when its reactors hash may exist (codec.go's
// reactedBit): hlen(rec) is the length of its head, author(rec) the head
// without REACTED (what postHead makes, which heads are compared with),
// reacted(rec) whether it has REACTED and withReacted(rec, on) the record
// with it set or cleared; every script that rewrites a record keeps the
// bit unless it changes the reactors hash.
// recount(bucket, low, rec, from, lo, hi)
// applies the (count index, delta) pairs of ARGV from index from on to
// post record rec, field low of bucket, within lo..hi, writes it, and
// returns whether the post went from all-zero counts to some or back
// (tr); bykind(reactors) counts a reactors hash's fields by kind id;
// sender8(U, body) is the packed uid of a message body's sender
// (codec.go).
// current(U, Q, i, n, want) packs the uids of at most want current members
// of a group of n mapids from mapid i+1 on: it reads the packed member
// list U and the quit bitmap Q in chunks, skipping whole bytes of members
// who left, so a page costs its own length (plus leavers in between), not
// the group's size.
const prelude = `
local TOMB = '\255'
local REACTED = 128
local function hlen(rec) return string.byte(rec, 1) % REACTED + 1 end
local function author(rec)
  local L = hlen(rec)
  return string.char(L - 1) .. string.sub(rec, 2, L)
end
local function reacted(rec) return string.byte(rec, 1) >= REACTED end
local function withReacted(rec, on)
  local b = string.byte(rec, 1) % REACTED
  if on then b = b + REACTED end
  return string.char(b) .. string.sub(rec, 2)
end
local function dec(s, from)
  local t, n, v, m = {}, 0, 0, 1
  for i = from or 1, #s do
    local c = string.byte(s, i)
    if c >= 128 then
      v = v + (c - 128) * m
      m = m * 128
    else
      n = n + 1
      t[n] = v + c * m
      v, m = 0, 1
    end
  end
  return t, n
end
local function enc(t, n)
  while n > 0 and (t[n] or 0) == 0 do n = n - 1 end
  local out = {}
  for i = 1, n do
    local v = t[i] or 0
    while v >= 128 do
      out[#out + 1] = string.char(v % 128 + 128)
      v = math.floor(v / 128)
    end
    out[#out + 1] = string.char(v)
  end
  return table.concat(out)
end
local function add(t, n, idx, d, lo, hi)
  for i = n + 1, idx do t[i] = 0 end
  if idx > n then n = idx end
  local v = t[idx] + d
  if v < lo then v = lo elseif v > hi then v = hi end
  t[idx] = v
  return n
end
local function mark(key, ttl)
  if ttl == 0 then return true end
  return redis.call('SET', key, '1', 'NX', 'PX', ttl) ~= false
end
-- A guard (ARGV ttl, value, expired at 'from'): the value found when the
-- step was applied already (a value equal to expired, one Go judged
-- forgotten, counts as absent), else false. ttl 0: no guard.
local function guarded(key, from)
  if tonumber(ARGV[from]) == 0 then return false end
  local v = redis.call('GET', key)
  if v and v ~= ARGV[from + 2] then return v end
  return false
end
local function guard(key, from)
  local ttl = tonumber(ARGV[from])
  if ttl > 0 then redis.call('SET', key, ARGV[from + 1], 'PX', ttl) end
end
local function write(key, field, before, after)
  if after == before then return 0 end
  if after == '' then
    redis.call('HDEL', key, field)
    return -1
  end
  redis.call('HSET', key, field, after)
  if before == '' then return 1 end
  return 0
end
local function bump(key, field, idx, d, lo, hi)
  local rec = redis.call('HGET', key, field) or ''
  local t, n = dec(rec)
  n = add(t, n, idx, d, lo, hi)
  return write(key, field, rec, enc(t, n))
end
local function tr(before, after)
  if before == '' and after ~= '' then return 1 end
  if before ~= '' and after == '' then return -1 end
  return 0
end
local function recount(bucket, low, rec, from, lo, hi, last)
  local L = hlen(rec)
  local t, n = dec(rec, L + 1)
  local before = enc(t, n)
  for i = from, last or #ARGV, 2 do n = add(t, n, tonumber(ARGV[i]), tonumber(ARGV[i + 1]), lo, hi) end
  local after = enc(t, n)
  redis.call('HSET', bucket, low, string.sub(rec, 1, L) .. after)
  return tr(before, after)
end
local function bykind(reactors)
  local n = {}
  for _, k in ipairs(redis.call('HVALS', reactors)) do n[k] = (n[k] or 0) + 1 end
  return n
end
local function u32(x)
  return string.char(math.floor(x / 16777216) % 256, math.floor(x / 65536) % 256,
    math.floor(x / 256) % 256, x % 256)
end
local function rd32(s, i)
  local a, b, c, d = string.byte(s, i, i + 3)
  return ((a * 256 + b) * 256 + c) * 256 + d
end
local function sender8(U, body)
  local m = rd32(body, 1)
  return redis.call('GETRANGE', U, (m - 1) * 8, m * 8 - 1)
end
local function member(M, Q, uid)
  local m = redis.call('HGET', M, uid)
  if not m then return nil, false end
  m = tonumber(m)
  return m, redis.call('GETBIT', Q, m - 1) == 0
end
local function current(U, Q, i, n, want)
  local out = {}
  while #out < want and i < n do
    local last = math.min(i + 512, n) - 1
    local qb = math.floor(i / 8)
    local qs = redis.call('GETRANGE', Q, qb, math.floor(last / 8))
    local u = redis.call('GETRANGE', U, i * 8, last * 8 + 7)
    local j = i
    while j <= last and #out < want do
      local off = j - qb * 8
      local byte = string.byte(qs, math.floor(off / 8) + 1) or 0
      if byte == 255 and off % 8 == 0 then
        j = j + 8
      else
        if bit.band(byte, bit.rshift(128, off % 8)) == 0 then
          out[#out + 1] = string.sub(u, (j - i) * 8 + 1, (j - i) * 8 + 8)
        end
        j = j + 1
      end
    end
    i = j
  end
  return table.concat(out)
end
`

// scriptSource is each script's source, which loadScripts sends with
// SCRIPT LOAD. (redis.Script.Load, given a pipeline, takes the reply it
// has not received yet, an empty digest, for the script's hash: every
// call then paid a NOSCRIPT round trip and an EVAL of the whole source.)
var scriptSource = map[*redis.Script]string{}

func newScript(body string) *redis.Script {
	src := prelude + body
	sc := redis.NewScript(src)
	scriptSource[sc] = src
	return sc
}

var (
	// A post's registry entry, under its guard, and a repost's original.
	// KEYS bucket, guard, intents, reposts; ARGV guard (ttl, value,
	// expired), low, head, intent id, intent ('' = none; see intents.go),
	// original ('' = not a repost). {1} created, {0} the id is taken (a
	// post's, or a deleted post's), {2, guard found} already applied by
	// this operation.
	scPostCreate = newScript(`
local found = guarded(KEYS[2], 1)
if found then return {2, found} end
if redis.call('HSETNX', KEYS[1], ARGV[4], ARGV[5]) == 0 then return {0} end
guard(KEYS[2], 1)
if ARGV[7] ~= '' then redis.call('HSET', KEYS[3], ARGV[6], ARGV[7]) end
if ARGV[8] ~= '' then redis.call('HSET', KEYS[4], ARGV[4], ARGV[8]) end
return {1}`)

	// Deletes intent ARGV[1] if it still holds ARGV[2]. KEYS intents.
	// 1 deleted, 0 not (claimed by a sweeper, or gone).
	scIntentDone = newScript(`
if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then return 0 end
redis.call('HDEL', KEYS[1], ARGV[1])
return 1`)

	// Claims intent ARGV[1]: ARGV[2] -> ARGV[3] if unchanged. KEYS
	// intents. 1 claimed, 0 not.
	scIntentClaim = newScript(`
if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
return 1`)

	// A reaction (like and unlike among them): the viewer's kind on the
	// post is read (the likers set, else the reactors hash; 0: none) and
	// the row Go decided for that kind is applied: the membership moves
	// to the row's kind (-1: nothing changes; 0: none), its (count index,
	// delta) pairs are applied in the same step, and the intent is
	// recorded when the row says so. The record's REACTED is set when the
	// viewer's kind goes into the reactors hash and cleared when the
	// hash's last field leaves it. KEYS bucket, likers, reactors,
	// intents; ARGV floor, ceiling, low, user, intent id, intent, then
	// rows (was, to, records the intent 0|1, pairs, then the pairs).
	// {-1} unknown post; {-2, head, was} no row for the kind found;
	// {0, head, was} nothing changed; {1, head, was, zero-transition}.
	scPostReact = newScript(`
local lo, hi = tonumber(ARGV[1]), tonumber(ARGV[2])
local rec = redis.call('HGET', KEYS[1], ARGV[3])
if not rec or rec == TOMB then return {-1} end
local head = author(rec)
local user = ARGV[4]
local was = 0
if redis.call('SISMEMBER', KEYS[2], user) == 1 then was = 1
else was = tonumber(redis.call('HGET', KEYS[3], user) or '0') end
local i = 7
while i <= #ARGV do
  local n = tonumber(ARGV[i + 3])
  if tonumber(ARGV[i]) == was then
    local to = tonumber(ARGV[i + 1])
    if to < 0 then return {0, head, was} end
    if was == 1 then redis.call('SREM', KEYS[2], user)
    elseif was > 1 then redis.call('HDEL', KEYS[3], user) end
    if to == 1 then redis.call('SADD', KEYS[2], user)
    elseif to > 1 then redis.call('HSET', KEYS[3], user, to) end
    if to > 1 then rec = withReacted(rec, true)
    elseif was > 1 and redis.call('EXISTS', KEYS[3]) == 0 then rec = withReacted(rec, false) end
    if ARGV[i + 2] == '1' and ARGV[6] ~= '' then redis.call('HSET', KEYS[4], ARGV[5], ARGV[6]) end
    return {1, head, was, recount(KEYS[1], ARGV[3], rec, i + 4, lo, hi, i + 3 + 2 * n)}
  end
  i = i + 4 + 2 * n
end
return {-2, head, was}`)

	// Sets the kinds table KEYS[1] to ARGV[2] if it still holds ARGV[1]
	// ('' = absent). 1 set, 0 not.
	scKindsSet = newScript(`
if (redis.call('GET', KEYS[1]) or '') ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[2])
return 1`)

	// Favorite: the viewer's flag changes (SADD, or SREM with ARGV[5]
	// 'rem') and, only if the set changed (the fact ops.Favorite.Decide
	// was given: the flag was not yet in the wanted state), the count
	// deltas Go decided are applied with it. KEYS bucket, set; ARGV
	// floor, ceiling, low, user, 'add'|'rem', then (count index, delta)
	// pairs. {-1} unknown post; {0, head, 0} the set did not change,
	// nothing applied; {1, head, zero-transition}.
	scPostFlag = newScript(`
local lo, hi = tonumber(ARGV[1]), tonumber(ARGV[2])
local rec = redis.call('HGET', KEYS[1], ARGV[3])
if not rec or rec == TOMB then return {-1} end
local changed
if ARGV[5] == 'add' then changed = redis.call('SADD', KEYS[2], ARGV[4])
else changed = redis.call('SREM', KEYS[2], ARGV[4]) end
local head = author(rec)
if changed == 0 then return {0, head, 0} end
return {1, head, recount(KEYS[1], ARGV[3], rec, 6, lo, hi)}`)

	// Count deltas Go decided on a post that exists (the fact its Decide
	// was given), once per operation (its guard), and the intent of what
	// follows. A comment with an id (ARGV[9], '' = none) is counted only
	// if the id is not known on the post (counted, or counted and
	// deleted: the fact ops.Comment decided on), and is then added to
	// the post's counted ids. KEYS bucket, guard, intents, comment ids,
	// deleted comment ids;
	// ARGV floor, ceiling, guard (ttl, value, expired), low, intent id,
	// intent ('' = none), comment id, then (count index, delta) pairs.
	// Results as scPostFlag, {0, head, 0, guard found} when this
	// operation applied them already, and {3, head} when the comment id
	// is known (nothing applied).
	scPostCount = newScript(`
local lo, hi = tonumber(ARGV[1]), tonumber(ARGV[2])
local rec = redis.call('HGET', KEYS[1], ARGV[6])
if not rec or rec == TOMB then return {-1} end
local head = author(rec)
local found = guarded(KEYS[2], 3)
if found then return {0, head, 0, found} end
if ARGV[9] ~= '' then
  if redis.call('SISMEMBER', KEYS[4], ARGV[9]) == 1 or redis.call('SISMEMBER', KEYS[5], ARGV[9]) == 1 then
    return {3, head}
  end
  redis.call('SADD', KEYS[4], ARGV[9])
end
guard(KEYS[2], 3)
if ARGV[8] ~= '' then redis.call('HSET', KEYS[3], ARGV[7], ARGV[8]) end
return {1, head, recount(KEYS[1], ARGV[6], rec, 10, lo, hi)}`)

	// Count deltas on posts of one bucket, each applied only where the
	// post exists (the fact ops.RecordViews.Decide was given: an unknown
	// post is skipped, as Decide skips it). KEYS bucket; ARGV floor,
	// ceiling, then (low, count index, delta) triples. Returns how many
	// posts went from all-zero to counted.
	scPostCounts = newScript(`
local lo, hi = tonumber(ARGV[1]), tonumber(ARGV[2])
local trs = 0
for i = 3, #ARGV, 3 do
  local rec = redis.call('HGET', KEYS[1], ARGV[i])
  if rec and rec ~= TOMB then
    local L = hlen(rec)
    local t, n = dec(rec, L + 1)
    local before = enc(t, n)
    n = add(t, n, tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2]), lo, hi)
    local after = enc(t, n)
    trs = trs + tr(before, after)
    redis.call('HSET', KEYS[1], ARGV[i], string.sub(rec, 1, L) .. after)
  end
end
return trs`)

	// Counter deltas on user records of one bucket. KEYS bucket, marker;
	// ARGV floor, ceiling, marker-ttl, then (low, field, delta) triples.
	// {applied, users+-}.
	scUserBump = newScript(`
local lo, hi = tonumber(ARGV[1]), tonumber(ARGV[2])
if not mark(KEYS[2], tonumber(ARGV[3])) then return {0, 0} end
local users = 0
for i = 4, #ARGV, 3 do
  users = users + bump(KEYS[1], ARGV[i], tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2]), lo, hi)
end
return {1, users}`)

	// A follow edge Go decided (ops.Follow): added with its snapshot
	// ('add') or removed ('rem'), with the viewer's following count, if
	// the edge is still absent (present) as Decide assumed; otherwise
	// nothing (then Decide, on the real fact, changes nothing either).
	// KEYS user bucket, followees; ARGV floor, ceiling, low, target,
	// 'add'|'rem', snapshot. {changed, users+-}.
	scFollow = newScript(`
local d = 1
if ARGV[5] == 'add' then
  if redis.call('HSETNX', KEYS[2], ARGV[4], ARGV[6]) == 0 then return {0, 0} end
else
  if redis.call('HDEL', KEYS[2], ARGV[4]) == 0 then return {0, 0} end
  d = -1
end
return {1, bump(KEYS[1], ARGV[3], 3, d, tonumber(ARGV[1]), tonumber(ARGV[2]))}`)

	// Compare-and-set on fields of user records: each row's fields are
	// set to the values Go decided if they still hold the values it
	// decided on (a cursor touch, ops.DecideTouch; a cursor dropped by the
	// sweep, ops.CursorLive). Only those fields are compared, so badge
	// bumps in between (a popular user's record changes all the time) do
	// not make the write fail. KEYS bucket; ARGV (low, nfields, then
	// (field, expected, new) per field) rows. {users+-, then per row: 1
	// written | 0 and the record found}.
	scUserCAS = newScript(`
local out, users = {0}, 0
local i = 1
while i <= #ARGV do
  local low, nf = ARGV[i], tonumber(ARGV[i + 1])
  local rec = redis.call('HGET', KEYS[1], low) or ''
  local t, n = dec(rec)
  local ok = true
  for j = 0, nf - 1 do
    local f = tonumber(ARGV[i + 2 + 3 * j])
    if (t[f] or 0) ~= tonumber(ARGV[i + 3 + 3 * j]) then ok = false end
  end
  if ok then
    for j = 0, nf - 1 do
      local f = tonumber(ARGV[i + 2 + 3 * j])
      for k = n + 1, f do t[k] = 0 end
      if f > n then n = f end
      t[f] = tonumber(ARGV[i + 4 + 3 * j])
    end
    users = users + write(KEYS[1], low, rec, enc(t, n))
    out[#out + 1] = 1
    out[#out + 1] = ''
  else
    out[#out + 1] = 0
    out[#out + 1] = rec
  end
  i = i + 2 + 3 * nf
end
out[1] = users
return out`)

	// Sets one field of a user record ('set'), or raises it ('max': a
	// click's stamp, which only grows, is not lowered by a slower click).
	// KEYS bucket; ARGV low, field, value, mode. Returns users+-.
	scSetField = newScript(`
local rec = redis.call('HGET', KEYS[1], ARGV[1]) or ''
local t, n = dec(rec)
local idx = tonumber(ARGV[2])
for i = n + 1, idx do t[i] = 0 end
if idx > n then n = idx end
local v = tonumber(ARGV[3])
if ARGV[4] == 'max' and t[idx] > v then v = t[idx] end
t[idx] = v
return write(KEYS[1], ARGV[1], rec, enc(t, n))`)

	// Refreshes the feed snapshot of followees still followed.
	// KEYS followees; ARGV (target, count) pairs.
	scSnapshot = newScript(`
for i = 1, #ARGV, 2 do
  if redis.call('HEXISTS', KEYS[1], ARGV[i]) == 1 then
    redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
  end
end
return 1`)

	// The red-dot push stamp Go decided (ops.PushRedDot), set if the
	// stamp is still the one it decided from. KEYS stamp; ARGV expected
	// ('' for none), new. {1} | {0, stamp found}.
	scPush = newScript(`
local cur = redis.call('GET', KEYS[1]) or ''
if cur ~= ARGV[1] then return {0, cur} end
redis.call('SET', KEYS[1], ARGV[2])
return {1}`)

	// The claim of (viewer, key) in the viewer's slot (posts.go), reserved
	// now unless there is one. A claim equal to ARGV[3] (one the caller
	// judged expired by the store's clock) is replaced. KEYS claim; ARGV
	// value, ttl ms, expired value ('' for none). Returns the existing
	// value or false.
	scIdemBegin = newScript(`
local v = redis.call('GET', KEYS[1])
if v and v ~= ARGV[3] then return v end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return false`)

	// Appends a notification to the shared list (O(1) in users).
	// KEYS list, id index, idem key; ARGV id, payload, idem ttl (0: none),
	// idem record ("<id>@<unix ns>"), expired record (replaced as if
	// absent; "" for none). {1, id, payload} published; {0, record,
	// payload} a retry; {-1} id clash.
	scPublish = newScript(`
local ttl = tonumber(ARGV[3])
if ttl > 0 then
  local v = redis.call('GET', KEYS[3])
  if v and v ~= ARGV[5] then
    local seq = redis.call('HGET', KEYS[2], string.match(v, '^[^@]*'))
    return {0, v, redis.call('LINDEX', KEYS[1], tonumber(seq) - 1)}
  end
end
if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 1 then return {-1} end
local seq = redis.call('RPUSH', KEYS[1], ARGV[2])
redis.call('HSET', KEYS[2], ARGV[1], seq)
if ttl > 0 then redis.call('SET', KEYS[3], ARGV[4], 'PX', ttl) end
return {1, ARGV[1], ARGV[2]}`)

	// A page of the shared list, oldest first: the first entries older
	// than the id after ('0' = from the newest). A known id is found by the
	// index; an unknown one by binary search over the list (ordered by id),
	// comparing ids as two 32-bit halves of the payloads' big-endian prefix
	// since Lua numbers hold 53 bits. KEYS list, index; ARGV first, after
	// (decimal), after (8 bytes big-endian).
	scNotifs = newScript(`
local last
if ARGV[2] == '0' then
  last = redis.call('LLEN', KEYS[1]) - 1
else
  local seq = redis.call('HGET', KEYS[2], ARGV[2])
  if seq then
    last = tonumber(seq) - 2
  else
    local ah, al = rd32(ARGV[3], 1), rd32(ARGV[3], 5)
    local lo, hi = 0, redis.call('LLEN', KEYS[1])
    while lo < hi do
      local mid = math.floor((lo + hi) / 2)
      local e = redis.call('LINDEX', KEYS[1], mid)
      local eh, el = rd32(e, 1), rd32(e, 5)
      if eh < ah or (eh == ah and el < al) then lo = mid + 1 else hi = mid end
    end
    last = lo - 1
  end
end
local first = tonumber(ARGV[1])
if last < 0 or first <= 0 then return {} end
local start = last - first + 1
if start < 0 then start = 0 end
return redis.call('LRANGE', KEYS[1], start, last)`)

	// Groups. U is the packed mapid -> uid string (8 bytes per member),
	// M the uid -> mapid hash, Q the quit bitmap (bit mapid-1).

	// KEYS U, M; ARGV (uid, uid8) pairs in mapid order. 0: id taken.
	scGroupCreate = newScript(`
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local buf = {}
for i = 1, #ARGV, 2 do
  redis.call('HSET', KEYS[2], ARGV[i], (i + 1) / 2)
  buf[#buf + 1] = ARGV[i + 1]
end
redis.call('SET', KEYS[1], table.concat(buf))
return 1`)

	// A group's facts for ops (GroupFacts, MemberState): whether it
	// exists, how many mapids it gave out, and per user their mapid (0:
	// never joined) and quit bit. KEYS U, M, Q; ARGV uids.
	// {exists, mapids, mapid1, quit1, mapid2, quit2, ...}.
	scGroupFacts = newScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return {0, 0} end
local out = {1, redis.call('STRLEN', KEYS[1]) / 8}
for i = 1, #ARGV do
  local m = redis.call('HGET', KEYS[2], ARGV[i])
  if m then
    out[#out + 1] = tonumber(m)
    out[#out + 1] = redis.call('GETBIT', KEYS[3], m - 1)
  else
    out[#out + 1] = 0
    out[#out + 1] = 0
  end
end
return out`)

	// The joins ops.AddMembers decided, if the facts it decided on still
	// hold (compare-and-set): the group has as many mapids, the viewer is
	// still current, each user listed still has the mapid and quit bit it
	// had. A join gives a new member the next mapid and a returning one
	// their quit bit cleared. KEYS U, M, Q; ARGV viewer, mapids, then
	// (uid, uid8, mapid, quit, join 0|1) per user. 1 applied, 0 the facts
	// changed (Go reads and decides again).
	scGroupJoin = newScript(`
local n = redis.call('STRLEN', KEYS[1]) / 8
if n ~= tonumber(ARGV[2]) then return 0 end
local m, cur = member(KEYS[2], KEYS[3], ARGV[1])
if not cur then return 0 end
for i = 3, #ARGV, 5 do
  local x = tonumber(redis.call('HGET', KEYS[2], ARGV[i]) or '0')
  if x ~= tonumber(ARGV[i + 2]) then return 0 end
  if x > 0 and redis.call('GETBIT', KEYS[3], x - 1) ~= tonumber(ARGV[i + 3]) then return 0 end
end
for i = 3, #ARGV, 5 do
  if ARGV[i + 4] == '1' then
    local x = tonumber(ARGV[i + 2])
    if x > 0 then
      redis.call('SETBIT', KEYS[3], x - 1, 0)
    else
      n = n + 1
      redis.call('HSET', KEYS[2], ARGV[i], n)
      redis.call('APPEND', KEYS[1], ARGV[i + 1])
    end
  end
end
return 1`)

	// The leave ops.LeaveGroup decided on the facts that allow it (the
	// group exists, the viewer joined and is current): the viewer is
	// marked quit, keeping the mapid, only if they hold, and the group is
	// read as its remaining members see it in the same step: the count of
	// current members and the first page of them. KEYS U, M, Q; ARGV
	// viewer, page size. {exists, mapid (0: never joined), quit before,
	// count, packed uids} (the last two only when the leave was applied).
	scGroupLeave = newScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return {0, 0, 0} end
local m = redis.call('HGET', KEYS[2], ARGV[1])
if not m then return {1, 0, 0} end
m = tonumber(m)
if redis.call('SETBIT', KEYS[3], m - 1, 1) == 1 then return {1, m, 1} end
local n = redis.call('STRLEN', KEYS[1]) / 8
return {1, m, 0, n - redis.call('BITCOUNT', KEYS[3]), current(KEYS[1], KEYS[3], 0, n, tonumber(ARGV[2]))}`)

	// One page of a group's current members, with the facts ops.ViewGroup
	// judges the read on: whether the group exists and the viewer's
	// mapid (0: never joined) and quit bit. The page is read whatever
	// the facts say, so that the read stays one round trip; Go discards
	// it when ViewGroup refuses (a refused viewer costs one page of
	// reading, bounded by ARGV[3]). The page holds the members after the
	// user ARGV[2] ('0': from the first), at most ARGV[3] (current, in the
	// prelude), and the count is of current members.
	// KEYS U, M, Q; ARGV viewer, after, first.
	// {exists, mapid, quit, count, packed uids, after's mapid (-1: after
	// never joined, and no page)}; {0, 0, 0} for an unknown group.
	scGroupPage = newScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return {0, 0, 0} end
local m = tonumber(redis.call('HGET', KEYS[2], ARGV[1]) or '0')
local q = 0
if m > 0 then q = redis.call('GETBIT', KEYS[3], m - 1) end
local n = redis.call('STRLEN', KEYS[1]) / 8
local count = n - redis.call('BITCOUNT', KEYS[3])
local i = 0
if ARGV[2] ~= '0' then
  local a = redis.call('HGET', KEYS[2], ARGV[2])
  if not a then return {1, m, q, count, '', -1} end
  i = tonumber(a)
end
return {1, m, q, count, current(KEYS[1], KEYS[3], i, n, tonumber(ARGV[3])), i}`)

	// Stores a message and its receipts record {maxid, quitbits, readbits}
	// (docs/seeds.md#seed-004): the group as it is at send time, the facts ops.Counted
	// and the fan-out (ops.Fanout) are later decided on. The sender's bit
	// is set in quitbits, so Go need not look up who sent it to see that
	// they are not counted. The send is refused unless the facts
	// ops.SendMessage allows it on hold (the group exists, the sender is
	// a current member); Go decides on the facts the refusal reports.
	// Small groups keep both
	// bitmaps in one hash field (54 bytes for 200 members); large groups
	// (maxid > ARGV[4]) keep the smaller of a quit bitmap or a sorted list
	// of quit mapids, and read bits in their own key set with SETBIT, so a
	// read costs O(1) whatever the group's size. The header's top bit tells
	// the two apart.
	// A keyed send's guard (its idempotency record) is looked at first:
	// a send that happened stays sent whoever has left the group since.
	// The body names the sender by mapid (codec.go).
	// KEYS U, M, Q, T, R, intents, guard; ARGV sender, mid, text, dense
	// max, intent id, intent ('' = none), guard (ttl, value, expired).
	// {created, U, Q} | {2, guard found} | {-1} unknown group | {-2} not a
	// member.
	scSend = newScript(`
local found = guarded(KEYS[7], 7)
if found then return {2, found} end
if redis.call('EXISTS', KEYS[1]) == 0 then return {-1} end
local m, cur = member(KEYS[2], KEYS[3], ARGV[1])
if not cur then return {-2} end
local U = redis.call('GET', KEYS[1])
local Q = redis.call('GET', KEYS[3]) or ''
if redis.call('HSETNX', KEYS[4], ARGV[2], u32(m) .. ARGV[3]) == 0 then return {0, U, Q} end
local maxid = #U / 8
local nb = math.ceil(maxid / 8)
local q = string.sub(Q, 1, nb)
q = q .. string.rep('\0', nb - #q)
local bi = math.floor((m - 1) / 8) + 1
q = string.sub(q, 1, bi - 1) .. string.char(bit.bor(string.byte(q, bi), bit.rshift(128, (m - 1) % 8))) .. string.sub(q, bi + 1)
local blob
if maxid <= tonumber(ARGV[4]) then
  blob = u32(maxid) .. q .. string.rep('\0', nb)
else
  local cnt = 1
  if #Q > 0 then cnt = cnt + redis.call('BITCOUNT', KEYS[3], 0, nb - 1) end
  if cnt * 4 < nb then
    local list, pos, sent = {}, 0, false
    while pos < maxid do
      local p = -1
      if #Q > 0 then p = redis.call('BITPOS', KEYS[3], 1, pos, maxid - 1, 'BIT') end
      if p < 0 then break end
      if not sent and m - 1 < p then list[#list + 1] = u32(m); sent = true end
      list[#list + 1] = u32(p + 1)
      pos = p + 1
    end
    if not sent then list[#list + 1] = u32(m) end
    blob = u32(maxid + 2147483648) .. '\1' .. table.concat(list)
  else
    blob = u32(maxid + 2147483648) .. '\0' .. q
  end
end
redis.call('HSET', KEYS[5], ARGV[2], blob)
if ARGV[6] ~= '' then redis.call('HSET', KEYS[6], ARGV[5], ARGV[6]) end
guard(KEYS[7], 7)
return {1, U, Q}`)

	// The facts ops.MarkMessagesRead decides on, for messages of one
	// group, computed from each message's receipt record in O(1) (O(log n)
	// for a large group's quit list) so that Go need not fetch it: the
	// viewer's mapid (0: never joined) and quit bit now, then per message
	// its body (false: unknown), its maxid, the viewer's bits in its
	// record: quit at send (the sender's is set too) and read, and its
	// sender's packed uid. KEYS M, Q, T, R, then one read key per
	// message, then U; ARGV viewer, mids.
	// {mapid, quit, body1, maxid1, quit1, read1, sender1, body2, ...}.
	scReceiptFacts = newScript(`
local function quitLarge(blob, m)
  if string.byte(blob, 5) == 0 then
    return bit.band(string.byte(blob, 6 + math.floor((m - 1) / 8)), bit.rshift(128, (m - 1) % 8)) ~= 0
  end
  local lo, hi = 0, (#blob - 5) / 4 - 1
  while lo <= hi do
    local mid = math.floor((lo + hi) / 2)
    local v = rd32(blob, 6 + 4 * mid)
    if v == m then return true elseif v < m then lo = mid + 1 else hi = mid - 1 end
  end
  return false
end
local m = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
local q = 0
if m > 0 then q = redis.call('GETBIT', KEYS[2], m - 1) end
local out = {m, q}
local b0 = math.floor((m - 1) / 8)
local mask = bit.rshift(128, (m - 1) % 8)
for i = 2, #ARGV do
  local body = redis.call('HGET', KEYS[3], ARGV[i])
  local blob = redis.call('HGET', KEYS[4], ARGV[i])
  local maxid, quit, read = 0, 0, 0
  if body and blob then
    local x = rd32(blob, 1)
    if x < 2147483648 then
      maxid = x
      if m > 0 and m <= x then
        if bit.band(string.byte(blob, 5 + b0), mask) ~= 0 then quit = 1 end
        if bit.band(string.byte(blob, 5 + math.ceil(x / 8) + b0), mask) ~= 0 then read = 1 end
      end
    else
      maxid = x - 2147483648
      if m > 0 and m <= maxid then
        if quitLarge(blob, m) then quit = 1 end
        read = redis.call('GETBIT', KEYS[i + 3], m - 1)
      end
    end
  end
  out[#out + 1] = body or false
  out[#out + 1] = maxid
  out[#out + 1] = quit
  out[#out + 1] = read
  if body then out[#out + 1] = sender8(KEYS[#KEYS], body) else out[#out + 1] = '' end
end
return out`)

	// The receipts ops.MarkMessagesRead decided: mapid's read bit set in
	// each message's record (a large group's in its read key), within
	// the members the record covers. KEYS R, then one read key per
	// message; ARGV mapid, mids. Per message 1 set, 0 already set.
	scReceiptRead = newScript(`
local m = tonumber(ARGV[1])
local b0 = math.floor((m - 1) / 8)
local mask = bit.rshift(128, (m - 1) % 8)
local out = {}
for i = 2, #ARGV do
  local changed = 0
  local blob = redis.call('HGET', KEYS[1], ARGV[i])
  if blob then
    local x = rd32(blob, 1)
    if x < 2147483648 then
      if m <= x then
        local ri = 5 + math.ceil(x / 8) + b0
        local rb = string.byte(blob, ri)
        if bit.band(rb, mask) == 0 then
          redis.call('HSET', KEYS[1], ARGV[i],
            string.sub(blob, 1, ri - 1) .. string.char(bit.bor(rb, mask)) .. string.sub(blob, ri + 1))
          changed = 1
        end
      end
    elseif m <= x - 2147483648 then
      if redis.call('SETBIT', KEYS[i], m - 1, 1) == 0 then changed = 1 end
    end
  end
  out[#out + 1] = changed
end
return out`)

	// Import: Go decided each row (ops.DecideImport) from the records it
	// read; this writes the rows in order while each post's head (exists,
	// author) is still the one Go read, and stops at the first row whose
	// post changed meanwhile (Go reads and decides the rest again). KEYS
	// bucket; ARGV (low, expected head or '' for no record, new record)
	// triples, the head compared and the new record's made without
	// REACTED, which is kept as the record has it: an import replaces a
	// post's counts (its counts of every reaction kind included), not who
	// reacted. {rows written, counted-posts delta}.
	scImportRows = newScript(`
local counted = 0
for i = 1, #ARGV, 3 do
  local rec = redis.call('HGET', KEYS[1], ARGV[i]) or ''
  local head, keep = rec, false
  if rec ~= '' and rec ~= TOMB then head, keep = author(rec), reacted(rec) end
  if head ~= ARGV[i + 1] then return {(i - 1) / 3, counted} end
  local new = ARGV[i + 2]
  counted = counted + tr(string.sub(rec, #head + 1), string.sub(new, hlen(new) + 1))
  if keep then new = withReacted(new, true) end
  redis.call('HSET', KEYS[1], ARGV[i], new)
end
return {#ARGV / 3, counted}`)

	// A message with the facts ops.ViewMessage judges the read on: the
	// body (false: unknown message) and the viewer's mapid in its group
	// (0: never joined) and quit bit. The body is returned whatever the
	// viewer's standing, so that the read stays one round trip; Go
	// discards it when ViewMessage refuses. KEYS M, Q, T, U; ARGV
	// viewer, mid. {body or false, mapid, quit, sender's packed uid}.
	scMsgGet = newScript(`
local body = redis.call('HGET', KEYS[3], ARGV[2])
local m = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
local q = 0
if m > 0 then q = redis.call('GETBIT', KEYS[2], m - 1) end
local s = ''
if body then s = sender8(KEYS[4], body) end
return {body or false, m, q, s}`)

	// A message's receipts with the facts ops.ViewReceipts judges the
	// read on: the body (false: unknown; Go reads the sender from it) and
	// the viewer's mapid in the group (0: never joined) and quit bit.
	// The receipt record is returned whatever the facts say, so that the
	// read stays one round trip; Go discards it when ViewReceipts
	// refuses. Also the mapid of the user ARGV[3] a page starts after
	// ('0': none, 0); the sender's packed uid; the group's erased
	// mapids, which stay counted and are never listed. KEYS M, Q, T, R,
	// read bitmap, U, X; ARGV viewer, mid, after. {body or false, receipt
	// record or false, read bitmap or false, after's mapid (-1: after
	// never joined), mapid, quit, sender's packed uid, erased bitmap or
	// false}.
	scRcptGet = newScript(`
local body = redis.call('HGET', KEYS[3], ARGV[2])
local blob = redis.call('HGET', KEYS[4], ARGV[2])
local m = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
local q = 0
if m > 0 then q = redis.call('GETBIT', KEYS[2], m - 1) end
local from = 0
if ARGV[3] ~= '0' then
  local a = redis.call('HGET', KEYS[1], ARGV[3])
  if a then from = tonumber(a) else from = -1 end
end
local s = ''
if body then s = sender8(KEYS[6], body) end
return {body or false, blob or false, redis.call('GET', KEYS[5]), from, m, q, s, redis.call('GET', KEYS[7])}`)
)

// The checks' scripts (check.go).
var (
	// Recounts one post bucket's set-backed counts: each post's count
	// field against SCARD of its set (the bucket, a part naming the set,
	// the post's low bits: in the bucket's slot), or for a reaction kind
	// the fields of that kind in its reactors hash, plus a field of the
	// record (0: none), and tallies the posts' authors. Posts whose low
	// bits are in [lo, hi] hold imported counts: their authors count,
	// their sets are not compared. Deleted posts (tombstones) have neither
	// author nor counts. A post whose record has REACTED is checked to
	// have its reactors hash (ARGV[3] the part naming it), and listed if
	// not (a hash without the bit is found from the hash:
	// scCheckReacted). KEYS bucket; ARGV lo, hi, reactors
	// part, then (count index, set part, plus index, kind id or '') per
	// check. {{head, posts}..., {low, check number (1-based), stored,
	// recounted}..., checked, skipped, {low of a bit without a hash}...}.
	scCheckPosts = newScript(`
local lo, hi = tonumber(ARGV[1]), tonumber(ARGV[2])
local all = redis.call('HGETALL', KEYS[1])
local authors, drifts, unreacted = {}, {}, {}
local checked, skipped = 0, 0
for i = 1, #all, 2 do
  local low, rec = all[i], all[i + 1]
  if rec ~= TOMB then
    local head = author(rec)
    if #head > 1 then authors[head] = (authors[head] or 0) + 1 end
    if reacted(rec) and redis.call('EXISTS', KEYS[1] .. ARGV[3] .. low) == 0 then
      unreacted[#unreacted + 1] = low
    end
  end
  local n = tonumber(low)
  if rec == TOMB then
  elseif n >= lo and n <= hi then
    skipped = skipped + 1
  else
    checked = checked + 1
    local t = dec(rec, hlen(rec) + 1)
    local kinds
    for j = 4, #ARGV, 4 do
      local stored = t[tonumber(ARGV[j])] or 0
      local card
      if ARGV[j + 3] == '' then
        card = redis.call('SCARD', KEYS[1] .. ARGV[j + 1] .. low)
      else
        if not kinds then kinds = bykind(KEYS[1] .. ARGV[j + 1] .. low) end
        card = kinds[ARGV[j + 3]] or 0
      end
      if ARGV[j + 2] ~= '0' then card = card + (t[tonumber(ARGV[j + 2])] or 0) end
      if stored ~= card then
        drifts[#drifts + 1] = low
        drifts[#drifts + 1] = j / 4
        drifts[#drifts + 1] = stored
        drifts[#drifts + 1] = card
      end
    end
  end
end
local heads = {}
for head, n in pairs(authors) do
  heads[#heads + 1] = head
  heads[#heads + 1] = n
end
return {heads, drifts, checked, skipped, unreacted}`)

	// Sets one post's count to its set's cardinality (a reactors hash's
	// fields of kind ARGV[4], when not '') plus a field of the record (0:
	// none), both read here. KEYS bucket, set; ARGV low, count index, plus
	// index, kind. {-1} no such post; {0, stored, recounted} no
	// drift now; {1, stored, recounted, zero-transition}.
	scRecountPost = newScript(`
local rec = redis.call('HGET', KEYS[1], ARGV[1])
if not rec or rec == TOMB then return {-1} end
local L = hlen(rec)
local t, n = dec(rec, L + 1)
local idx = tonumber(ARGV[2])
local stored = t[idx] or 0
local card
if ARGV[4] == '' then card = redis.call('SCARD', KEYS[2])
else card = bykind(KEYS[2])[ARGV[4]] or 0 end
if ARGV[3] ~= '0' then card = card + (t[tonumber(ARGV[3])] or 0) end
if stored == card then return {0, stored, card} end
local before = enc(t, n)
for i = n + 1, idx do t[i] = 0 end
if idx > n then n = idx end
t[idx] = card
local after = enc(t, n)
redis.call('HSET', KEYS[1], ARGV[1], string.sub(rec, 1, L) .. after)
return {1, stored, card, tr(before, after)}`)

	// The posts of one bucket among lows whose reactors hash (ARGV[1] the
	// part naming it) exists while their record lacks REACTED: a page
	// would not read the viewer's reaction there. KEYS bucket; ARGV part,
	// lows. Their lows.
	scCheckReacted = newScript(`
local out = {}
for i = 2, #ARGV do
  local rec = redis.call('HGET', KEYS[1], ARGV[i])
  if rec and rec ~= TOMB and not reacted(rec) and redis.call('EXISTS', KEYS[1] .. ARGV[1] .. ARGV[i]) == 1 then
    out[#out + 1] = ARGV[i]
  end
end
return out`)

	// Sets a post's REACTED to whether its reactors hash exists, both read
	// here (a check's repair). KEYS bucket, reactors; ARGV low. {-1} no
	// such post; {0, exists} right now; {1, exists} set.
	scSetReacted = newScript(`
local rec = redis.call('HGET', KEYS[1], ARGV[1])
if not rec or rec == TOMB then return {-1} end
local has = redis.call('EXISTS', KEYS[2])
if reacted(rec) == (has == 1) then return {0, has} end
redis.call('HSET', KEYS[1], ARGV[1], withReacted(rec, has == 1))
return {1, has}`)

	// Compares a user-record field with the length of a hash in the
	// user's slot and, with ARGV repair '1', sets it to that length. KEYS
	// user bucket, hash; ARGV low, field, repair. {stored, length,
	// repaired, users+-}.
	scCheckUserHash = newScript(`
local rec = redis.call('HGET', KEYS[1], ARGV[1]) or ''
local t, n = dec(rec)
local f = tonumber(ARGV[2])
local stored = t[f] or 0
local len = redis.call('HLEN', KEYS[2])
if stored == len or ARGV[3] ~= '1' then return {stored, len, 0, 0} end
for i = n + 1, f do t[i] = 0 end
if f > n then n = f end
t[f] = len
return {stored, len, 1, write(KEYS[1], ARGV[1], rec, enc(t, n))}`)

	// Widens the import span to hold ARGV lo..hi. Ids are 20-digit
	// strings compared by their halves (Lua numbers hold 53 bits, and
	// Lua compares strings by the locale). KEYS span.
	scWidenSpan = newScript(`
local function less(a, b)
  local ah, bh = tonumber(string.sub(a, 1, 10)), tonumber(string.sub(b, 1, 10))
  return ah < bh or ah == bh and tonumber(string.sub(a, 11)) < tonumber(string.sub(b, 11))
end
local lo, hi = ARGV[1], ARGV[2]
local cur = redis.call('HMGET', KEYS[1], 'lo', 'hi')
if cur[1] and less(cur[1], lo) then lo = cur[1] end
if cur[2] and less(hi, cur[2]) then hi = cur[2] end
redis.call('HSET', KEYS[1], 'lo', lo, 'hi', hi)
return 1`)
)

var allScripts = append([]*redis.Script{
	scPostCreate, scPostReact, scKindsSet, scPostFlag, scPostCount, scPostCounts, scUserBump, scFollow, scUserCAS,
	scSetField, scSnapshot, scPush, scIdemBegin, scIntentDone, scIntentClaim, scPublish, scNotifs, scGroupCreate, scGroupFacts, scGroupJoin,
	scGroupLeave, scGroupPage, scSend, scReceiptFacts, scReceiptRead, scMsgGet, scRcptGet, scImportRows,
	scCheckPosts, scRecountPost, scCheckReacted, scSetReacted, scCheckUserHash, scWidenSpan,
}, lifecycleScripts...)
