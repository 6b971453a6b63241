// Package snapshot owns the snapshot files of the embedded engine's data
// directory: their byte format, how they are written (atomically, with
// checksums), read back (verifying every byte), listed, pruned and moved
// aside. It owns the files named snap-*.snap, snap-*.snap.tmp,
// snap-*.snap.prune and snap-*.snap.corrupt in a directory and nothing else in it, so the log's
// segments (package wal) live beside them.
//
// The payload of a snapshot is opaque here: the engine writes named
// sections of items (package embedded decides what an item is), this
// package frames them into checksummed chunks and gives them back chunk by
// chunk. A snapshot records the index of the last log record it covers.
//
// # Promises
//
//   - A file named snap-<index>.snap was completely written and fsynced
//     before it got that name (write to .tmp, fsync, rename, fsync the
//     directory), so a crash never leaves a partial snapshot under a final
//     name; leftover .tmp files are garbage that RemoveTemp deletes.
//   - Prune never leaves a shortened snapshot under a snapshot's name: a
//     file is renamed to .prune (and the directory fsynced) before it is
//     freed a step at a time, and a leftover .prune file is garbage that
//     RemoveTemp deletes.
//   - Every byte of a snapshot is covered by a CRC32C checksum: the
//     header, each chunk (payload, framing and the snapshot's index), the
//     section directory and the footer. A file that is truncated, has a
//     flipped bit anywhere, or mixes chunks of two snapshots is reported as
//     a *CorruptError naming the file and the offset of the first bad part;
//     nothing is ever handed out from a chunk that does not verify.
//   - A reader refuses every format version but this build's with a
//     *VersionError (a header whose checksum verifies is a snapshot of
//     another version, not damage).
//   - Chunks are bounded (MaxChunkBytes), so reading a damaged length never
//     allocates more than that, and readers and writers hold one chunk in
//     memory at a time per section, whatever the snapshot's size.
//   - A File's writes are written back every WritebackBytes while the
//     snapshot is written (sync_file_range on Linux, fdatasync elsewhere),
//     so the final fsync is short and does not stall the log's fsyncs
//     behind the whole file's dirty pages on the same disk.
//
// # File format
//
// All integers are little-endian; CRC32C is CRC-32 with the Castagnoli
// polynomial. Offsets are from the start of the file.
//
// Header, 24 bytes:
//
//	offset  size  field
//	0       8     magic "TALLYSNP"
//	8       4     format version, uint32 (1)
//	12      8     index: the last log record the snapshot covers, uint64
//	20      4     CRC32C of bytes 0..20
//
// Then the sections, one after the other in the order they were written,
// each a run of zero or more chunks. A chunk is a 16-byte header and its
// payload, with no padding:
//
//	offset  size  field
//	0       4     section tag (four ASCII bytes, e.g. "PTBL")
//	4       4     payload length n, uint32 (at most MaxChunkBytes)
//	8       4     chunk sequence number, uint32: 0 for the file's first
//	              chunk, then 1, 2, ... across every section
//	12      4     CRC32C of payload ‖ bytes 0..12 ‖ the header's index
//	16      n     payload: whole items (an item never spans two chunks)
//
// The checksum covers the sequence number and the snapshot's index, so a
// chunk that is moved, duplicated, or copied from another snapshot fails
// the check. After the sections comes one directory chunk (tag "DIR\x00",
// the next sequence number) whose payload is:
//
//	uvarint  number of sections
//	per section, in file order:
//	  4 bytes  tag
//	  uvarint  items written to the section
//	  uvarint  offset of its first chunk
//	  uvarint  number of chunks
//	  uvarint  bytes its chunks take, headers included
//
// and the file ends with a 24-byte footer:
//
//	offset  size  field
//	0       8     offset of the directory chunk, uint64
//	8       4     number of chunks in the file, directory included, uint32
//	12      8     magic "TALLYEND"
//	20      4     CRC32C of bytes 0..20 ‖ the header's index
//
// The sections must tile the file exactly: the first starts right after
// the header, each starts where the previous ends, the directory follows
// the last one and the footer follows the directory. A reader checks the
// header, the footer and the directory when it opens a file (the footer is
// what proves the file was written to the end), and each chunk when it is
// read. When the footer does not verify, the reader walks the chunks from
// the start to name the first bad one, so a truncated file is reported at
// the offset where it was cut.
package snapshot
