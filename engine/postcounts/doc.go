// Package postcounts owns the post-count store of the embedded engine:
// post id → the five counts of engine.Counts, partitioned into time
// windows by the millisecond timestamp a snowflake id carries, each
// window kept in the form its age calls for. It replaced the single
// open-addressing table (kept as bench/countertable, the benchmarks' peer)
// and offers a superset of its API (Get, GetMany, Add, Set, Len, Range,
// MemoryBytes).
//
//   - Open windows (the recent ones, Options.OpenAge) are pointer-free
//     open-addressing tables of 12-byte records: the id minus the window's
//     first id (22 bits of node and sequence below the millisecond offset
//     in the window: 49 bits for a day) and five narrow counters, views in
//     the rest of that 64-bit word, likes 10 bits, comments 8, reposts 7,
//     favorites 7 in a third 32-bit word; a value that does not fit
//     escapes (all ones) to a small overflow table of int64s. Groups of
//     eight records share a control word (fingerprints, probed eight at a
//     time); the load stays between 0.7 and 7/8, so a post costs 15 to 19
//     bytes with the slack.
//   - Sealed windows are engine/sealed windows (about 6 bytes a post),
//     cold windows the same bytes in a file in Options.Dir (engine/cold),
//     with only the block index in memory and a shared, bounded block
//     cache. A write to a sealed or cold post goes to the window's delta,
//     a narrow table of signed changes overlaid on reads.
//   - Maintenance (Plan, Job.Run, Finish; or Maintain for all at once)
//     seals windows past OpenAge, moves sealed windows past ColdAge or
//     beyond MemoryBudget to files, and folds large deltas back
//     (cold.Merge), writing new windows and files off the read path.
//
// It promises:
//   - Counts are exact from 0 to math.MaxInt64: additions saturate there,
//     subtractions clamp at 0, per write, as countertable.Table does; reading
//     base + delta gives the same answer before and after any sealing,
//     compaction or move (the delta keeps each field of base + delta
//     within [0, MaxInt64], which is when cold.Merge agrees).
//   - A post whose counts are all zero is not stored: not in an open
//     table, not in a sealed window or file, not in a delta, except that
//     a sealed post brought to zero keeps its base entry (and a delta
//     cancelling it) until its window is next compacted.
//   - Get and GetMany on open and in-memory sealed windows do not
//     allocate; GetMany probes each sealed or cold window once per call,
//     and a cold window with one pread per run of uncached blocks.
//     Add and Set do not allocate unless a table grows.
//   - A cold read that fails (a damaged file) reads as zeros and is kept
//     in Err; it never panics and never returns wrong counts.
//   - WriteTo/Snapshot and Load keep the whole state (open tables, deltas,
//     sealed windows' bytes, the names of the cold files) in a versioned,
//     checksummed format; Load checks every byte and never panics.
//
// # Concurrency
//
// A Store is not safe for concurrent use; the caller locks, as the engine
// does with a sync.RWMutex:
//   - readers (Get, GetMany, Len, Range, MemoryBytes, Stats, Files, Err,
//     Snapshot, WriteTo) may run concurrently with each other under the
//     read lock — none of them writes to the store;
//   - writers (Add, Set, Import, Plan, Finish, Maintain, Load,
//     RemoveUnreferenced, Close) need the write lock;
//   - Job.Run needs no lock: it may run concurrently with any method,
//     since it reads only what Plan froze (an open table that now takes
//     no writes, an immutable sealed window or file, a frozen delta). The
//     engine plans a job under the write lock, releases it, runs the job,
//     and takes the lock again only to Finish: readers never wait for a
//     window to be encoded or a file to be written.
//
// # Measured
//
// On bench/datagen (seed 1, day windows, the clock at the data set's end;
// BenchmarkMemory, live Go heap after GC, N = 1M / 10M): open tables
// 19.1 / 17.4 bytes per stored post (17.7 / 16.6 by MemoryBytes; 0.15% of
// posts overflow), against 76 / 61 for countertable.Table; all windows sealed
// 7.4 / 6.2; the default policy (7 days open, the rest sealed) 7.6 / 6.4,
// that is 3.0 / 2.6 bytes per post overall, zero posts included; the
// sealed windows in files 1.0 / 0.5 in memory (the cache aside) and 6.3 /
// 5.8 on disk. A 50-post page (BenchmarkGetPage, 1M): 2.1 µs from open
// windows, 0.36x countertable.Table's time on the same pages; from sealed
// windows the time of engine/sealed plus 2%. Under a garbage-making
// goroutine (BenchmarkGCLatency) the p99 of a page is within noise of the
// p99 with no GC at all at 1M, 10M and 100M posts resident, and the GC's
// share of the CPU falls as the store grows (12%, 4%, 0.4%): the GC has
// nothing of the store to scan.
//
// # Cold files and snapshots
//
// Each cold file is written once under a new name (pc-<window>-<gen>.win)
// and never changed, so a snapshot that lists it (Files, Snapshot.Files)
// stays loadable for as long as the file is kept. Files superseded by a
// compaction are not deleted by the store on its own: the engine calls
// RemoveUnreferenced with the files of the snapshots it still keeps.
package postcounts
