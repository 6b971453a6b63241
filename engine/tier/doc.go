// Package tier owns the windowed tables of the embedded engine: the post
// table (Posts: a post's author, five counts and reaction counts by post
// id) and the pair sets (Set: who reacted to, or favorited, which post,
// with the reaction's kind). Both are one table
// (table.go) of time windows cut by the post id (engine/snowflake.Windows,
// so one window number names the same span of posts in every table, and
// a post's counts and its likers seal and cool together), each window
// kept in the form its age calls for, with the record shape plugged in:
// what a window's open table, delta and blocks hold.
//
// A window is in one of three forms, its body:
//   - open: the shape's pointer-free hash table — the post table's row table
//     (rowtable.go: the id's offset and the record packed into 16 bytes,
//     the rare wider record in an overflow map of pointer-free values,
//     the counts of reaction kinds beyond like in a side table of the
//     posts that have one), a set's pair table (pairtable.go: 12 or 16
//     bytes a pair, the kind in bits the slot spares, linear probing with
//     backward-shift deletion, so likes and unlikes leave no tombstones);
//   - sealed: the window's image (image.go) in memory, in an arena
//     (arena.go) that packs images without the heap's size-class slack;
//   - cold: the same image in a file in Options.Dir, with only its block
//     index in memory, blocks read through a bounded block cache
//     (internal/blockcache: CLOCK over segments, no pointer per block)
//     that tables share.
//
// A write that the body does not take in place (sealed, cold, or an open
// table a job is sealing) goes to the window's delta: a row table whose
// records override the body's, or a set's added and removed pairs. Jobs
// (maintain.go) seal open windows past OpenAge, move sealed windows past
// ColdAge, or the oldest while MemoryBytes exceeds MemoryBudget, to
// files, and fold large deltas back; one policy for every table.
//
// The image of a window is the same bytes in memory, in a snapshot and in
// a cold file: a header naming the table, blocks each under a CRC32C that
// also covers the block's first key, an index of the blocks' first keys,
// a checksummed footer (image.go). A post block (postblock.go) holds up
// to 256 posts: the ids as an Elias–Fano list of their varying bits, the
// author column and the counts (only for posts that have one) packed per
// block at the width their values need, a column per reaction kind only
// for the kinds the block's posts have. A pair block (pairblock.go)
// holds up to 1024 (post, user) pairs as two Elias–Fano lists (both
// blocks' lists: eflist.go; their bit-level reads and writes:
// engine/bitpack), and a kind column only when a pair's kind is not
// like. A snapshot (snapshot.go) starts with the post table's kinds
// table, then lists each window's open entries, image or file, then its
// delta. A View (view.go) is the table as Capture found it, for a
// snapshot written while the table takes writes: it shares the sealed and
// cold windows, which never change, and holds every window as a rewriting
// job does (its delta frozen, writes going to a fresh one) until Release;
// its image inlines the cold files, so it stands alone.
//
// # Reactions
//
// A deployment's reaction kinds (counters.Kind: like is kind 1, always;
// at most counters.MaxKinds) are counted in the post table and held, per
// (user, post), by one set: a set of likes is a reaction set all of
// whose pairs are likes, and costs what it did before kinds; a kind no
// post has costs no post anything. What the engine calls, under its
// lock (the read lock for reads):
//   - Posts.SetKinds(kinds) after Load: the deployment's kinds
//     (counters.ParseKinds) reconciled with the kinds table the image
//     kept (new kinds get ids; a kind left out whose reactions are still
//     counted is a *counters.KindInUseError naming it and its count).
//     Posts.Kinds maps names to ids and back; Posts.KindTotals is the
//     count of each kind over every post (for that refusal and for
//     checks).
//   - React: was := Set.React(user, post, kind), then, when was !=
//     kind, Posts.AddReaction(post, was, -1) (unless was is NoKind: a
//     first reaction, which is what counts toward the author's unread
//     likes) and Posts.AddReaction(post, kind, 1): one count moves from
//     the old kind to the new. Unreact: was := Set.Unreact(user, post),
//     then Posts.AddReaction(post, was, -1) when was is not NoKind. All
//     under one write lock, so no reader sees a reaction counted twice
//     or not at all.
//   - A page: Posts.GetMany gives each post's counts with Post.Reactions
//     (Post.Count(kind) reads any kind, like included) and Set.KindsOf
//     the viewer's kind per post (NoKind: none), each one visit per
//     window, without allocating.
//   - Set.Add, Remove, Has and HasMany keep their meaning for a set of
//     likes or favorites (a like, membership of any kind); RangeKinds and
//     LoadReactions carry the kinds where Range and LoadPairs do not.
//
// Records also go away, for the engine's deletes and erasures:
// Posts.Delete removes a post (an overlay keeps a deleted row until the
// window's rewrite); Set.Forget forgets a deleted post's pairs, which
// reads leave out at once and the window's next rewrite drops; Scrub
// marks a window whose removed records must not outlive its next rewrite
// in memory, snapshots or files; a Scan (scan.go) finds one user's pairs,
// or posts, window by window with no lock held while it reads.
//
// It promises:
//   - A read answers from the window's delta, a running job's frozen
//     delta, then its body; every sealing, cooling, compaction, snapshot
//     and reload changes how records are kept, never what they read as
//     (TestModel and TestSetModel check it against a map through all of
//     them).
//   - Posts.GetMany and Set.KindsOf (and HasMany), a page's reads, visit
//     each window once, each sealed or cold block once however many of
//     the page's posts it holds, read each uncached cold block with one
//     pread, and do not allocate (TestGetManyAllocs,
//     TestSetHasManyAllocs).
//   - One error contract: bytes that are not what a table wrote — a cold
//     block failing its CRC or structure, a truncated file, a damaged
//     snapshot — are an error wrapping ErrCorrupt (a *CorruptError with
//     the file and offset where there is one), returned to the caller;
//     never a zero, never a panic, never a wrong record. A write that
//     needs such a block (a delta records only changes, so it reads the
//     body first) fails the same way and stores nothing.
//   - Cold files are written once, complete or not at all (createFile:
//     temporary file, fsync, rename, fsync of the directory; a new table
//     removes what a crash left, TestCrashDuringCreate), and a
//     rewrite of a window gets a new generation
//     (<Prefix>-<window>-<generation>.tier; a new table never reuses a
//     generation found in Dir). A replaced file stays until Collect,
//     which deletes the prefix's files that neither the table, a running
//     job nor the caller's kept snapshots (keep) name.
//   - WriteTo and Load keep the whole state in a versioned, checksummed
//     image; Load checks every byte, every sealed block, the cold files'
//     headers, footers and indexes and every delta against its window
//     before it changes anything, and never panics whatever it reads
//     (FuzzLoad, FuzzSetLoad). Every format carries its version, and an
//     image of another version or another table is refused.
//
// # Concurrency
//
// A table is not safe for concurrent use; the caller locks with a
// sync.RWMutex:
//   - readers (Get, GetMany, Has, HasMany, KindOf, KindsOf, Range,
//     RangeKinds, Kinds, KindTotals, Len, MemoryBytes, CacheBytes,
//     DiskBytes, Stats, Files, VerifyFiles, WriteTo) may share the read
//     lock;
//   - writers (Put, AddCounts, AddReaction, SetAuthor,
//     SetKinds, PutKinds, Import, Add, Remove, React, Unreact, LoadPairs,
//     LoadReactions, Plan, Finish, Maintain, Load, Collect, Capture,
//     Release, Close) need the write lock;
//   - View.WriteTo needs no lock: it reads only what Capture froze
//     (TestViewConcurrent runs it beside writers under -race);
//   - Job.Run needs no lock: it reads only what Plan froze (an open table
//     that takes no more writes, an immutable sealed window or file, a
//     frozen delta), so readers and writers carry on while a window is
//     encoded or a file written; Finish installs the result under the
//     write lock. A job planned before a Load is dropped by Finish.
//     TestConcurrentJobs and TestSetConcurrentJobs run all of this at
//     once under -race. PlanWork and the Work and Maintainer interfaces
//     let one maintenance loop serve every table.
package tier
