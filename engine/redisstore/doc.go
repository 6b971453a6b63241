// Package redisstore is engine.Store on Redis: a single redis-server for
// small deployments, Redis Cluster for large ones (detected at Open), with
// any number of stateless tally replicas in front. It owns the Redis key
// layout, the Lua scripts that make each step atomic, and the pub/sub fan
// out of events between replicas. It promises the same behaviour as the
// embedded engine — engine/enginetest runs unchanged against both — and
// that every Redis failure surfaces within its caller's deadline as an
// error wrapping engine.ErrUnavailable, named per shard and cause in logs
// and metrics, after which the client recovers by itself. What survives
// the loss of a Redis node is docs/redis-durability.md's to say.
//
// # Rules
//
// No product rule is decided here: every mutation is an engine/ops
// operation. Its Check validates the call; the facts its Decide needs
// (does the post exist, who wrote it, was it liked, is the viewer a
// member, ...) are read from Redis, either by the script of the first
// step, which returns them, or by a pipelined read or read-only script;
// Decide, in Go, turns them into ops.Effects; the effects are applied by
// scripts that take them as arguments (which counter, which delta, which
// users, which cursor value). A script may apply what it is told, read
// facts atomically and return them, and check that a fact Go decided on
// still holds, refusing otherwise (compare-and-set: Go then decides
// again on the facts found). Where one round trip must both check and
// apply (a like: the set changes and the count with it), Go decides
// first on the facts under which the operation changes something, the
// script applies those effects only if the facts hold and returns the
// real ones, and Go decides again on them for the rest (a like's badge
// depends on the author the step returned). Reads follow the same rules
// (ops.Unread, ops.Counted, ops.CursorLive); who may read a group, a
// message or its receipts is judged by ops.ViewGroup, ViewMessage and
// ViewReceipts on facts the read's script returns together with the
// data (the viewer's standing, whether the message exists, its sender),
// so that a read stays one round trip and Go discards the data when the
// rule refuses. Import's rows are checked by ops.CheckImport. The
// conformance suite (engine/enginetest) holds this backend and the
// embedded engine to the same answers.
//
// # Key layout
//
// P is Options.KeyPrefix; {…} is the hash tag (one slot); numbers in key
// names are base 36. Post and message ids are bucketed by snowflake time
// window w = id>>(22+PostWindowBits) and sub-bucket s = hash(id) mod
// PostFanout, so the newest (hottest) posts spread over PostFanout slots;
// the field is the id's low 22+PostWindowBits bits. Users are bucketed by
// uid>>UserBucketBits, field uid mod 2^UserBucketBits (Instagram's
// technique, docs/seeds.md#seed-001).
//
//	P{p<w>.<s>}            hash  low -> post record: [n|0x80 if the post's
//	                             k<low> hash may exist][author, n bytes BE]
//	                             [varint views likes comments reposts favorites
//	                             unidentified (comments sent without an id),
//	                             then reaction kinds 2..16 by kind id]
//	                             trailing zero counts omitted: an uncounted post
//	                             costs its author only (registry = counts), a
//	                             post with likes only no byte for kinds;
//	                             0xff alone: a deleted post (its id stays taken)
//	P{p<w>.<s>}l<low>       set   likers of one post (intset): the reaction like
//	P{p<w>.<s>}k<low>       hash  uid -> kind id of the post's reactions of the
//	                             other kinds (none for a post with likes only;
//	                             a user is in l or k, never both); a page
//	                             reads it only where the record has 0x80
//	P{p<w>.<s>}f<low>       set   favoriters of one post
//	P{p<w>.<s>}c<low>       set   the post's counted comment ids (intset):
//	                             comments = its size + unidentified
//	P{p<w>.<s>}d<low>       set   the post's deleted comment ids (never
//	                             counted again)
//	P{p<w>.<s>}R            hash  low -> a repost's original post id
//	P{u<b>}                hash  low -> user record: varints posts followers
//	                             following mentions comments likes messages
//	                             cursor(seq+1) clicked-stamp active-seconds
//	                             posts-deleted
//	P{u<b>}F<uid>          hash  followee -> post count at snapshot
//	P{u<b>}W<uid>          set   comment ids uid wrote (who may delete them)
//	P{u<b>}e<uid>          str   uid is being erased (erase.go), with a TTL
//	P{u<b>}i<uid>:<key>    str   idempotency claim of a key: 'p'|'d' + its
//	                             record + the hash tag of the record's slot
//	                             (idem.go)
//	P{…}i<hash>            str   idempotency record, in the slot of the
//	                             operation's first step and written with it:
//	                             result + '#' + fingerprint + '@' + store
//	                             clock's unix ns; forgotten after 24h by that
//	                             time, 25h PX (idem.go)
//	P{p<w>.<s>}I, P{g<gid>}I hash intent id -> pending cross-slot
//	                             operation (intents.go); empty unless a
//	                             process died
//	P{…}o<op><step>         str  marker: step of op applied here, 25h
//	P{g<gid>}U             str   packed member uids, 8 bytes per mapid
//	P{g<gid>}M             hash  uid -> mapid
//	P{g<gid>}Q             str   quit bitmap (bit mapid-1)
//	P{g<gid>}T             hash  mid -> [sender's mapid u32][text]
//	P{g<gid>}X             str   erased members' bitmap (bit mapid-1)
//	P{g<gid>}R             hash  mid -> receipts {maxid u32, quitbits, readbits}
//	P{g<gid>}r<mid>        str   read bitmap of a large group's message
//	P{m<w>.<s>}            hash  message low bits -> group id
//	P{s}n, P{s}x           list + hash: shared notifications, id -> seq
//	P{s}r                  str   red-dot push stamp (ms, strictly increasing)
//	P{s}i:<key>            str   publish idempotency record (id + '@' +
//	                             unix ns, as above; users.go)
//	P{s}format             str   the keyspace's format version (format.go)
//	P{s}kinds              str   reaction kinds table, "id=name,..." (absent:
//	                             like alone; reactions.go)
//	P{s}imported           hash  lo, hi: the span of post ids imports wrote
//	                             counts for, as 20-digit decimals (check.go)
//	P{s}node, P{s}st       str, hash: snowflake node allocation, stats
//	P{s}sweep              str   lock: one replica sweeps expired cursors
//	P{s}erase, P{s}erc<uid> hash: user erasures under way, uid -> intent;
//	                             master address -> scan cursor (erase.go)
//	P{rl<uid>}, P{ws<uid>}  str, zset: a user's rate limit and open sockets
//	P{e<i>}                channel: event shard i (SPUBLISH/SSUBSCRIBE)
//
// The keyspace carries its layout's version in P{s}format (format.go),
// set when a Store first opens an empty keyspace. Open refuses a keyspace
// of any other version, or one holding keys but no marker, with an
// *engine.FormatError: Tally has never been released, so a build reads
// exactly the layout it writes.
//
// # Server settings
//
// Buckets only pay off while Redis keeps them in the listpack encoding:
//
//	hash-max-listpack-entries 1024   # a bucket holds up to ~1,000 posts/users
//	hash-max-listpack-value   64     # records are at most 55 bytes
//	appendonly yes                   # a node keeps its data across its restart
//	appendfsync everysec             # always adds nothing across a failover
//	cluster-require-full-coverage no # other shards serve while one fails over
//
// An acknowledged write survives the loss of its master only with
// WaitReplicas (and two replicas per master, so that a promoted master
// still has one to acknowledge): a promoted replica has what it received,
// fsynced or not. docs/redis-durability.md states the promise for each
// deployment.
//
// With the defaults (1.02 s windows × 16 sub-buckets) a bucket holds about
// 64 posts per 1,000 posts/s of traffic; choose PostWindowBits/PostFanout
// so that buckets stay under hash-max-listpack-entries at peak rate.
//
// Packing posts into bucket hashes is what keeps Redis's memory per post
// near the embedded engine's, where a key or a hash per post pays Redis's
// per-key overhead for every post (TestMemoryPerPost measures the three
// layouts; docs/performance.md has the figures). Likers and favoriters
// are per-post intsets: their per-key overhead is the price of
// server-side de-duplication.
//
// # Atomicity and crashes
//
// Every multi-key step is one Lua script over one slot (see scripts.go).
// Reads of a page are one pipelined round trip each (go-redis splits a
// pipeline per cluster node and runs the parts in parallel).
// Operations that touch several slots (a like or other first reaction:
// the post, then the author's badge) run their steps in an order where a crash in between can only
// leave a later effect unapplied, never apply one twice. Steps of
// an operation with an idempotency key are each guarded in their own slot
// (the first by the key's record, the others by markers named by the
// operation), so the client's retry completes the operation exactly
// once. A like, a comment, a new post, a repost and a message also record,
// atomically with their first step and in its slot (the post's or the
// group's), an intent recording the operation, from which ops re-derives
// what is left; the operation finishes and
// deletes it, and if its process dies first a sweeper in every replica
// (sweepIntents, every IntentSweepInterval, one replica at a time)
// finishes it, its steps guarded by the same markers: applied exactly
// once either way. intents.go has the protocol; an Import chunk has one
// intent of its own for its authors' post counts (importintents.go). A
// post's delete records one too (deletes.go); a user's erasure, a walk of
// the keyspace in bounded steps, records its own, with its progress, and
// is finished by a sweeper like the others (erase.go).
// A keyed operation's record lives in the slot of its first step and is
// written by that step's script, so a failover keeps or loses the two
// together, and a retry applies the step again only if it was lost
// (idem.go). Writes go through a client with go-redis retries off (a
// script whose reply was lost may have run); only MOVED/ASK replies,
// which prove the command did not run, are re-sent, to the node they
// name.
//
// # Checks
//
// Store.Check (`tally check -redis`, check.go) recounts the derived
// counts of a live keyspace from what they count, in bounded steps:
// counts kept in the slot of what they count (likes, favorites,
// following) atomically, by a script per bucket or user; counts kept
// apart (followers, post counts), which a failover can leave disagreeing
// with their slots, by a scan between two reads of the user records.
// Repairs are scripts that re-check and set atomically, or
// compare-and-set.
//
// # Faults
//
// Every call is bounded by its caller's deadline (the server gives a
// request one for all its calls) and by short dial and read timeouts
// (250ms, 1s); dials and writes are not retried, and every Redis error
// becomes engine.ErrUnavailable (its cause via Cause). On a cluster a
// failure also triggers a slot-map reload, so a promoted replica is found
// as soon as it is announced. With WaitReplicas a write is acknowledged
// only after WAIT confirms it on that many replicas (a write the replicas
// did not confirm is reported unavailable, though the master may have
// applied it: retrying is safe for keyed operations, by their records,
// and for likes, favorites and follows, by their sets). A shard that
// cannot take writes (its master silent, its replicas not acknowledging)
// has them fail at once, unsent, until a probe finds it able again
// (health.go).
package redisstore
