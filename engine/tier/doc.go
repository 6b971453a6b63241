// Package tier owns the time-windowed table: records of a codec's type
// keyed by snowflake id, partitioned into windows by the time the id
// carries (engine/snowflake.Windows, so a window number names the same
// span of posts in every tier), each window kept in the form its age
// calls for. A Codec says what a record is; the post record (PostCodec:
// the author and the five counts of a post, one record, so a page reads
// existence, author and counts with one probe per post) is the first.
// A Set (set.go) is the same table for (user, post) pairs, the like and
// favorite sets: windows by the post's id, the same Options, forms, jobs,
// files, cache, snapshot framing and error contract (its own section
// below).
//
// A window is one of three forms, a closed sum type (body):
//   - open: a pointer-free open-addressing table of 24-byte slots (the
//     id's offset in its window, then the record packed by the codec's
//     SlotWidths), the rare record that does not fit in an overflow map
//     of pointer-free values;
//   - sealed: an immutable window image in memory (the format below),
//     its bytes in a shared arena (arena.go) packed without the heap's
//     size-class slack;
//   - cold: the same image in a file in Options.Dir, with only its block
//     index in memory (16 bytes per block of 128 records) and blocks read
//     through a bounded block cache (engine/cold.Cache) that tiers share.
//
// A write to a window that does not take writes in place (sealed, cold,
// or an open table being sealed) goes to the window's delta, an open
// table whose records override the base. Jobs fold deltas back, seal
// open windows past OpenAge, and move sealed windows past ColdAge, or the
// oldest while MemoryBytes exceeds MemoryBudget, to files.
//
// It promises:
//   - Get and GetMany answer (exists, record) for any id, and every
//     sealing, cooling, compaction, snapshot and reload changes how
//     records are kept, never what they read as (TestModel checks it
//     against a map through all of them).
//   - GetMany visits each window once per 128 ids and each sealed block
//     once, reads each uncached cold block with one pread, and does not
//     allocate (TestGetManyAllocs).
//   - One error contract: bytes that are not what a tier wrote — a cold
//     block failing its CRC or structure, a truncated file, a damaged
//     snapshot — are an error wrapping ErrCorrupt (a *CorruptError with
//     the file and offset where there is one), returned to the caller;
//     never a zero, never a panic, never a wrong record. A write that
//     needs such a block fails the same way and stores nothing.
//   - Cold files are written once, complete or not at all (cold.Create:
//     temporary file, fsync, rename, fsync of the directory), and a
//     rewrite of a window gets a new generation
//     (<Prefix>-<window>-<generation>.tier; a new Tier never reuses a
//     generation found in Dir). A replaced file stays until Collect,
//     which deletes the prefix's files that neither the tier, a running
//     job nor the caller's kept snapshots (keep) name.
//   - WriteTo and Load keep the whole state in a versioned, checksummed
//     image (snapshot.go); Load checks every byte, and the cold files'
//     headers, footers and indexes, before it changes anything, and never
//     panics whatever it reads (FuzzLoad).
//
// # Concurrency
//
// A Tier is not safe for concurrent use; the caller locks with a
// sync.RWMutex, exactly as engine/postcounts' callers do:
//   - readers (Get, GetMany, Range, Len, MemoryBytes, CacheBytes,
//     DiskBytes, Stats, Files, VerifyFiles, WriteTo) may share the read
//     lock;
//   - writers (Put, AddCounts, SetAuthor, Import, Plan, Finish, Maintain,
//     Load, Collect, Close) need the write lock;
//   - Job.Run needs no lock: it reads only what Plan froze (an open table
//     that takes no more writes, an immutable sealed window or file, a
//     frozen delta), so readers and writers carry on while a window is
//     encoded or a file written; Finish installs the result under the
//     write lock. A job planned before a Load is dropped by Finish.
//     TestConcurrentJobs runs all of this at once under -race. PlanWork
//     and the Work and Maintainer interfaces let one maintenance loop
//     serve tiers of different record types, and sets.
//
// A Set follows the same contract: Has, HasMany, Range, Len and the
// figures are readers; Add, Remove, LoadPairs, Plan, Finish, Maintain,
// Load, Collect and Close writers; SetJob.Run needs no lock
// (TestSetConcurrentJobs).
//
// # Window image (format version 1)
//
// All integers little-endian. The same bytes are a sealed window in
// memory, a window in a snapshot, and a cold file.
//
//	window  = header block* index footer
//	header  = "TLYTIER1" | codec tag [4] | cols uint8 | version uint8 (1) | dense uint8 | 0 uint8
//	index   = (first id uint64 | block offset uint64)*    one per block, in id order
//	footer  = index offset uint64 | blocks uint64 | records uint64 | min id uint64 |
//	          max id uint64 | CRC32C(index) uint32 | version uint32 (1) | 0 uint32 |
//	          CRC32C of the 52 bytes before it uint32
//	block   = n-1 uint8 | top uint8 | l uint8 | holes uvarint | hiLen uvarint |
//	          [k uvarint, when the codec has a sparse group] |
//	          cols × (w uint8 | xw uint8 | nexc uvarint) | bit area |
//	          CRC32C(first id as 8 bytes ‖ block bytes) uint32
//
// A block holds 1..256 records in increasing id order (128 when written).
// Its ids are engine/sealed's: the id bits that vary within the block,
// M = (2^top-1) &^ holes, are gathered (pext) and stored as an
// Elias–Fano list of differences from the first id (n-1 lows of l bits,
// then hiLen high bits), about log2 of the gap plus two bits an id. Then,
// LSB-first with no padding, each column: its values at w bits, the
// positions of the nexc values that need more (bits.Len(count-1) bits
// each) and their high bits (xw each). The first dense columns (the
// post's author) hold a value for every record; the others form the
// sparse group (the post's counts), which holds values only for the k
// records where one of them is not zero, preceded, when 0 < k < n, by n
// presence bits: a post with no counts costs one bit more than its id
// and author, and a block with no counts at all costs their headers only.
// The index and footer have engine/sealed's layout; sealed.Index checks
// and searches the index. The code is engine/sealed's too: the id column
// is sealed.IDs, each value column a sealed.Column, the block CRC
// sealed.BlockCRC; this package adds the shape, the sparse group and its
// presence bits.
//
// # Measured
//
// bench/datagen with authors (seed 1: ids uniform over 365 days, 60% of
// posts without counts, long-tailed counts; authors log-normal over 1M
// users, so every post is in the table), day windows, the clock at the
// set's end; live Go heap after GC in bytes per post, N = 1M / 10M
// (BenchmarkMemory): the default policy (7 days open) 7.97 / 7.29; the
// last day open 7.70 / 7.08; all sealed 7.63 / 7.05; all open 24.2 /
// 19.3; sealed windows in files 0.77 / 0.46 in memory and 7.34 / 6.90 on
// disk. postcounts and registry holding the same posts take 11.0 / 9.8
// under their default policy, and 9.7 / 9.1 on disk. A sealed post at 1M (BenchmarkLayout): id
// 3.85 bytes, author 2.50, counts 0.80 and presence bit 0.13, block
// headers, CRCs and index 0.19.
//
// A 50-post page from sealed windows, each page's posts from one day
// (BenchmarkGetPage, 1M, interleaved with the peer on one thread): 0.52x
// the CPU time of postcounts.GetMany and registry.GetMany together, which
// read the same answers (7.4 against 14.1 µs), and 1.25x that of
// postcounts.GetMany alone, which reads no author (6.4 against 5.1 µs; in
// cache, the same four pages over and over, 1.5x: the gap is CPU work,
// six columns and 2.5x as many records a window, more than memory). From
// open windows 0.55x the peers; cold with every block cached 0.63x; cold
// without a cache (a pread a block, served by the OS page cache) 0.70x.
// At 10M: 0.71x the peers, 1.5x postcounts alone (15.1 against 10.2 µs).
//
// A late like (AddCounts on a sealed post, into its window's delta, with
// Maintain every 4096 writes; BenchmarkAddLike, 1M) costs 0.43x the CPU
// time of postcounts.Add doing the same.
//
// Recovery (BenchmarkLoad, default policy): Load of the table's image,
// every block verified, 19 ms at 1M and 241 ms at 10M, 0.7x and 0.43x the
// Loads of postcounts' and registry's images; the image is 7.6 / 7.2
// bytes a post against their 9.9 / 9.3.
//
// # Pair sets (Set)
//
// A Set holds (user, post) pairs in the post table's windows (the post
// id's), so a post's counts and its likers seal and cool together.
// NewSet takes a 4-byte tag ("LIKE", "FAVS") that names its window
// images, snapshots and, by default, its files; a window of another tag
// is refused.
//   - open: a pointer-free pair table (setopen.go): a slot packs the user
//     and the post id's offset in its window into 12 bytes while user ids
//     are below 2^46 (day windows), 16 after; linear probing with
//     backward-shift deletion, so likes and unlikes leave no tombstones.
//   - sealed: a set window image (setwindow.go) in the set's arena.
//   - cold: the same image in a file, only its index in memory (24 bytes
//     a block of up to 512 pairs), blocks through the shared block cache.
//
// A like or unlike on a sealed or cold window (or one being sealed) goes
// to the window's delta: added pairs and tombstones, two open tables
// overlaid on reads; it reads the body first (the delta records only
// changes), so on a cold window it may need a block, and an unreadable
// one fails the write, storing nothing. Jobs fold deltas back, seal, and
// move windows to files exactly as for a post table (one policy,
// planDue); LoadPairs builds the windows past OpenAge sealed straight
// from a pair list.
//
// The set window image is this package's framing with a set's index and
// blocks:
//
//	header  = "TLYTIER1" | tag [4] | 0 uint8 (no columns) | version uint8 (1) | 0 uint8 | 0 uint8
//	index   = (first post uint64 | first user uint64 | block offset uint64)*
//	footer  = the post table's footer layout, counting pairs; min and max are posts
//	block   = n-1 uvarint | p-1 uvarint | ktop uint8 | kholes uvarint | kl uint8 |
//	          khi uvarint | umin uvarint | ub uint8 | xl uint8 | xhi uvarint |
//	          bit area | CRC32C(first post ‖ first user ‖ block bytes) uint32
//
// A block holds n pairs of p posts in (post, user) order, its first pair
// in the index (24-byte entries: a hot post's likers span blocks, so a
// block is found by its first pair, not its first id). Its post ids,
// after squeezing out the bits constant in the block (pext over
// M = (2^ktop-1) &^ kholes), are an Elias–Fano list of differences from
// the first; its pairs one Elias–Fano list of x = post index<<ub |
// (user - umin). A one-like post costs its id's bits and one user's; a
// hot post's likers about 2 + log2(gap between likers) bits each. A
// lookup parses the block's header and does two Elias–Fano searches,
// without decoding the block. The snapshot body (setsnapshot.go) lists
// each window's pairs (open), image (sealed) or file (cold), then its
// delta's additions and tombstones; Load checks that every addition is
// absent from its window and every tombstone present.
//
// Measured on engine/likeset's data set (bench/datagen, 1M posts over 365
// days with datagen's long-tailed like counts: 5,316,559 likes by users
// uniform over 10M; day windows; the clock at the set's end), live Go
// heap after GC per like (BenchmarkSetMemory, engine/likeset, since
// removed, in the same run): every window open 19.95 (likeset 19.95); the
// default policy (7 days open) 1.98 (likeset 2.05, 0.97x); every window
// sealed 1.87 (1.92, 0.97x; sealed windows 1.83 bytes a like with
// headers, index, footers and block CRCs); every window cold 0.093 in
// memory (the indexes and window list) and 1.83 on disk. At 10M posts
// (60,545,883 likes): default 1.80 (likeset 1.82, 0.99x), sealed 1.62
// (1.63, 0.99x), cold 0.053 in memory and 1.61 on disk. A 50-post page, a
// viewer's likes among 50 consecutive liked posts, newest first
// (BenchmarkSetHasMany, each policy turn about with likeset's on one
// thread, CPU time a page; 2 noisy cores, -count 2), at 1M / 10M posts:
// sealed 0.91x / 0.92-0.93x likeset's sealed (5.6-5.7 against 6.2-6.3 µs
// at 1M); cold through the 16 MiB block cache 0.92x / 0.92-0.93x; cold
// without a cache, a pread a block from the OS page cache, 1.14-1.16x /
// 1.12-1.13x; open 1.04x likeset's open at 1M. A page walks its posts in
// id order and stays in a block while the next block's first pair is
// above its pair (findFrom), so it searches the index once per block,
// not once per post.
//
// Recovery (BenchmarkSetLoad, default policy, 1M): Load of the
// set's image, every block verified, 39 ms, 0.16x LoadPairs of the same
// pairs (245 ms); the image is 1.88 bytes a like. A late like on a
// sealed window (BenchmarkSetLateLike, 3M likes each, Maintain every
// 4096) 882 ns, likeset's 848 (1.04x).
package tier
