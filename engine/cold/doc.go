// Package cold owns the cold tier: sealed windows (engine/sealed) kept in
// files, one file per window, with only their block index in memory and
// a bounded block cache shared by all of them; and the compaction that
// folds a window's hot delta back into a new window (Merge).
//
// A file's bytes are exactly a sealed window's (sealed.Window's
// MarshalBinary, documented in engine/sealed): header, blocks, index,
// footer, each block under its own CRC32C.
//
// It promises:
//   - A file appears at its path complete or not at all: Create writes a
//     temporary file in the same directory, fsyncs it, renames it into
//     place and fsyncs the directory. CleanTemp removes what a crash left.
//   - Open reads the header, footer and index (three reads) and checks
//     their checksums; memory per open file is 16 bytes per block of 128
//     posts, about 0.13 bytes per post.
//   - A lookup reads each block it needs at most once: GetMany finds the
//     blocks of all its ids, serves the cached ones in place and fetches
//     the others in one pass in file order, one pread per run of adjacent
//     blocks (up to 128 KiB), then caches them.
//   - Every block read from disk has its checksum and header checked
//     before any count is read from it or it is cached: a damaged block is
//     a *sealed.CorruptError (errors.Is(err, sealed.ErrCorrupt)) naming the
//     file and the block's offset, never wrong counts. FileIter and Verify
//     also check every block's contents.
//   - The Cache never holds more than its capacity in bytes and holds no
//     per-entry pointers (see Cache).
//   - Merge is a pure function of a base window and a delta; the engine
//     runs it in the background and swaps the result in.
//
// Not here: deciding which windows go cold and when (the engine's memory
// budget and age policy), the hot delta table itself (an open table in
// the engine), and snapshots, which list the cold files they cover.
package cold
