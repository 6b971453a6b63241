// Package likeset owns a set of (user, post) pairs — who liked, or
// favorited, which post — for the embedded engine, partitioned into time
// windows by the timestamp of the post's snowflake id exactly as
// engine/postcounts partitions post counts (same WindowMillis, same window
// boundaries), each window kept in the form its age calls for. It replaced
// the engine's table.Table[pair, struct{}] like and favorite sets (about
// 39 bytes a like; 2 in sealed windows here) and answers the same
// questions: is (user, post) there (Has), which posts of a feed page has
// the viewer liked (HasMany), add, remove, count, and every pair for a
// snapshot.
//
//   - Open windows (the recent ones, Options.OpenAge) are pointer-free
//     hash tables of pairs (open.go): a slot packs the user and the post
//     id minus the window's first id (49 bits with day windows) into 12
//     bytes while user ids are below 2^46, 16 bytes otherwise; linear
//     probing with backward-shift deletion, so likes and unlikes leave no
//     tombstones.
//   - Sealed windows (block.go, sealed.go) are immutable byte slices of
//     blocks of up to 512 pairs in (post, user) order: the block's post
//     keys as an Elias–Fano list after squeezing out the bits constant in
//     the block, and all its pairs as one Elias–Fano list of
//     x = post index<<ub | (user - smallest user). A one-like post costs
//     its key (its id's information within the window) and one user id;
//     a hot post's likers cost about 2 + log2(gap between likers) bits
//     each. An index of block first pairs (24 bytes a block) finds the
//     block; a lookup parses the block's header and does two Elias–Fano
//     searches, without decoding the block.
//   - A like or unlike on a sealed window (or on one being sealed or
//     compacted) goes to the window's delta: added pairs and tombstones,
//     two small open tables overlaid on reads, folded back into the
//     window by compaction once they hold CompactMin pairs and an eighth
//     of the window.
//   - Maintenance (Plan, Job.Run, Finish; or Maintain for all three)
//     seals windows past OpenAge and compacts deltas, encoding off the
//     read path; Load builds old windows sealed straight from a snapshot's
//     pairs.
//
// It promises:
//   - Set semantics, exactly: Add reports whether the pair was absent,
//     Remove whether it was present, and Has, HasMany, Len and Range give
//     the same answers before and after any sealing, compaction or Load of
//     the same pairs. Every uint64 user and post id works (ids that are not
//     snowflakes fall in the windows their high bits name).
//   - Nothing of the bulk data holds a Go pointer: tables and sealed
//     windows are []byte and []uint64; the GC scans only the per-window
//     headers (one per window, a few hundred for a year of day windows).
//   - Has and HasMany do not allocate and write nothing. HasMany visits a
//     page's posts in id order (a newest-first page is reversed, anything
//     else insertion-sorted, on the stack), so each window is found once
//     and each sealed block's header parsed once per page.
//   - Add and Remove allocate only when a table grows or a window or
//     delta is created.
//
// # Concurrency
//
// A Set is not safe for concurrent use; the caller locks, as the engine
// does with a sync.RWMutex:
//   - readers (Has, HasMany, Len, Range, MemoryBytes, Stats) may run
//     concurrently with each other under the read lock;
//   - writers (Add, Remove, Plan, Finish, Maintain, Load) need the write
//     lock;
//   - Job.Run needs no lock and may run concurrently with any method: it
//     reads only what Plan froze (an open table that takes no more writes,
//     an immutable sealed window, a frozen delta). Plan the job under the
//     write lock, release it, Run, take the lock again to Finish: readers
//     and writers never wait for a window to be sorted and encoded.
//
// # Measured
//
// On the data set of bench_test.go (bench/datagen's 1M posts over 365
// days, each with datagen's long-tailed like count: 5,316,559 likes, users
// uniform over 10M; day windows; clock at the data set's end), live Go
// heap after GC per like (BenchmarkMemory): the engine's
// table.Table[pair, struct{}] 39.5 bytes (its slot of a [2]uint64 key and
// a struct{} value is padded from 16 to 24 bytes, plus a control byte,
// at 0.63 load); every window open 20.0 (0.51x); the default policy (7
// days open, the rest sealed) 2.05 (0.052x); every window sealed 1.92
// (0.049x; sealed windows alone 1.83 by MemoryBytes). A 50-post page, a
// viewer's likes among 50 consecutive liked posts (BenchmarkHasMany, 2
// noisy cores, -count 3): every window open 11.3-13.4 µs, sealed 9.9-12.3
// µs, the table peer 7.5-8.3 µs: the peer answers a miss from its dense
// control bytes, while an open slot or a sealed block is a cache miss of
// its own; the pages are misses but for at most one post. Blocks of 512
// pairs (BenchmarkBlockPairs): 128 cost 1.99 bytes a like, 256 1.87, 512
// and 1024 1.83, page times equal within noise.
package likeset
