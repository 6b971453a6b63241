// Package tier owns the time-windowed table: records of a codec's type
// keyed by snowflake post id, partitioned into windows by the time the id
// carries (engine/snowflake.Windows, so a window number names the same
// span of posts in every tier), each window kept in the form its age
// calls for. Codecs plug in (Codec): the post record (PostCodec: the
// author and the five counts of a post in one record) is the first.
//
// A window is one of three forms, a closed sum type (body):
//   - open: a pointer-free open-addressing table of 24-byte slots (the
//     id's offset in the window, the record packed by the codec's slot
//     widths), the rare wider record in an overflow map of pointer-free
//     values;
//   - sealed: an immutable window image in memory (the format below):
//     ids as Elias–Fano lists per block of 128, every column bit-packed
//     per block at the width its values need, wide values as exceptions;
//   - cold: the same image in a file in Options.Dir, with only its block
//     index in memory (16 bytes per block) and blocks read through a
//     bounded block cache (engine/cold.Cache) shared by every tier.
//
// A write to a window that does not take writes in place (sealed, cold,
// or an open table being sealed) goes to the window's delta, an open
// table whose records override the base; compaction folds it back.
//
// It promises:
//   - Get and GetMany answer (exists, record) for any id; every sealing,
//     cooling, compaction, snapshot and reload changes how records are
//     kept, never what they read as (TestModel checks this against a map).
//   - GetMany visits each window once per 128 ids, each sealed block once,
//     reads each uncached cold block with one pread, and does not allocate.
//   - One error contract: bytes that are not what a tier wrote (a cold
//     block failing its CRC or structure, a truncated file, a damaged
//     snapshot) are an error wrapping ErrCorrupt (a *CorruptError naming
//     file and offset where there is one), returned to the caller: never
//     a zero, never a panic, never a wrong record.
//   - Cold files are written once, complete or not at all (cold.Create:
//     temporary file, fsync, rename, fsync of the directory), under a new
//     generation for every rewrite (<prefix>-<window>-<generation>.tier).
//     A replaced file is kept until Collect, which removes the files of
//     the prefix that neither the tier, a running job nor the caller's
//     kept snapshots (keep) name.
//   - WriteTo and Load keep the whole state in a versioned, checksummed
//     image; Load checks every byte before it changes anything, and never
//     panics (FuzzLoad).
//
// # Concurrency
//
// A Tier is not safe for concurrent use; the caller locks, as
// engine/postcounts' callers do, with a sync.RWMutex:
//   - readers (Get, GetMany, Len, MemoryBytes, DiskBytes, Stats, Files,
//     WriteTo) may share the read lock;
//   - writers (Put, AddCounts, SetAuthor, Plan, Finish, Maintain, Load,
//     Collect, Close) need the write lock;
//   - Job.Run needs no lock: it reads only what Plan froze (an open table
//     that takes no more writes, an immutable sealed window or file, a
//     frozen delta), so readers and writers carry on while a window is
//     encoded or a file written; Finish installs the result under the
//     write lock. A job planned before a Load is dropped by Finish.
//
// # Window image (format version 1)
//
// All integers little-endian. The same bytes are a sealed window in
// memory, a window in a snapshot and a cold file.
//
//	window  = header block* index footer
//	header  = "TLYTIER1" | codec tag [4] | cols uint8 | version uint8 (1) | 0 uint16
//	index   = (first id uint64 | block offset uint64)*    one per block, in id order
//	footer  = index offset uint64 | blocks uint64 | records uint64 | min id uint64 |
//	          max id uint64 | CRC32C(index) uint32 | version uint32 (1) | 0 uint32 |
//	          CRC32C of the 52 bytes before it uint32
//	block   = n-1 uint8 | top uint8 | l uint8 | holes uvarint | hiLen uvarint |
//	          cols × (w uint8 | xw uint8 | nexc uvarint) | bit area |
//	          CRC32C(first id as 8 bytes ‖ block bytes) uint32
//
// A block holds 1..256 records in increasing id order (128 when written).
// Its ids are engine/sealed's: the bits that vary within the block, M =
// (2^top-1) &^ holes, are gathered (pext) and stored as an Elias–Fano list
// of differences from the first id (lows of l bits, then hiLen high bits);
// then each column as n values of w bits, the positions (bits.Len(n-1)
// bits each) of the nexc values that need more, and their high bits (xw
// each). The index and footer have engine/sealed's layout, and
// sealed.Index checks and searches the index.
//
// Snapshot images are described in snapshot.go.
package tier
