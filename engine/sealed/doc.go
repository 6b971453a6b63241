// Package sealed owns the sealed window: an immutable, sorted, compact
// encoding of one time window's post counts (post id → engine.Counts),
// and its byte format, which is the same in memory and on disk (the cold
// tier, engine/cold, stores these bytes in files and reads them a block at
// a time).
//
// It promises:
//   - Only posts with a non-zero count are stored; any other id reads as
//     zeros. Counts are exact from 0 to math.MaxInt64.
//   - Get and GetMany do not allocate and touch one block per distinct
//     block of the ids asked for; a lookup never decodes the block up to
//     the key: it costs a search of the block index, a parse of the block
//     header and O(1) bit reads (see Block). Out of cache, GetMany pays the
//     memory latency a few times per page rather than several times per
//     id: on a window of a few blocks it first loads every line of the
//     blocks it needs; on a larger one (searchMinBlocks) it reads in
//     passes over all the ids, each loading only the lines the next needs
//     (index, header, high bits, low parts, counts), so that the misses of
//     different ids overlap. Such a window keeps an in-memory two-level
//     search over its blocks' first ids (Index.buildSearch, about 4.3
//     bytes per block, counted in SizeBytes); it is not part of the format.
//   - Every block carries a CRC32C; the index and the footer carry their
//     own. Unmarshal verifies all of them and the structure of every block,
//     so a Window never returns wrong counts and never panics, whatever
//     bytes it was given; damage is reported as a *CorruptError (wrapping
//     ErrCorrupt) with the offset of the bad part.
//   - A Window is immutable and safe for concurrent use.
//
// engine/tier's windows code their blocks with this package's parts rather
// than copies of them: the block header (ParseBlockHeader), the id column
// (IDPlan, IDs), the value columns (ColumnPlan, Column), the block CRC
// (BlockCRC), the index and footer (AppendIndexFooter,
// ParseFooterVersion, Index, BlockRun, TouchBlocks). A change to any of
// them changes both formats; the fuzz seeds and format tests of both
// packages hold their bytes.
//
// # Why this encoding
//
// Within a window the ids share their high bits, and Twitter-layout ids
// carry a 12-bit sequence number whose high bits are almost always zero. A
// block stores its ids as an Elias–Fano list of the differences from its
// first id after squeezing out the bits that are constant within the
// block (the shared prefix, and the never-used sequence bits): about
// log2(gap)+2 bits per id, near the entropy of uniformly scattered ids,
// with random access. Each count field is stored column-wise at a width
// chosen per block, with the values that do not fit kept as exceptions
// (index + high bits): views ≫ likes get different widths, a field that is
// zero everywhere costs nothing, a lone celebrity post costs one exception
// instead of widening the column.
//
// Measured on the issue-4 generator (bench/datagen, 1M posts, seed 1, one
// window per day, 399,713 non-zero posts; BenchmarkEncodings and the note
// in alt_test.go): this format 6.42 bytes per stored post, all included
// (block headers, CRCs, index, footers), and 5.94 at 10M posts, where ids
// are denser (BenchmarkMemory with TALLY_BENCH_N=10000000); the textbook layout (uvarint id
// deltas, a presence byte, uvarint counts) 9.11, or 8.09 with the constant
// id bits squeezed out. Compression does not pay on top of this format:
// per block, flate (BestCompression) gave 6.50, zstd
// (klauspost/compress, SpeedBestCompression) 6.54, snappy 6.46, and zstd
// over a whole window 6.43 — the bits are already near their entropy, so
// no compressor is used (zstd brings the varint layout to 7.52 only). The
// zstd and snappy figures come from a scratch program outside this module,
// which does not depend on klauspost/compress; flate's is BenchmarkEncodings.
//
// # Byte layout (format version 1)
//
// All integers are little-endian; uvarint is encoding/binary's.
//
//	window  = header block* index footer
//	header  = "TLYSEALD" (8) | version uint32 (1) | reserved uint32 (0)
//	index   = entry*            one per block, in id order
//	entry   = first id uint64 | block offset uint64 (from the window start)
//	footer  = index offset uint64 | blocks uint64 | posts uint64 |
//	          min id uint64 | max id uint64 | index CRC32C uint32 |
//	          version uint32 (1) | reserved uint32 (0) |
//	          CRC32C of the 52 bytes before it uint32           (56 bytes)
//
// Block i occupies [offset_i, offset_{i+1}) (the last one ends at the index
// offset). A block holds n = 1..256 posts in increasing id order:
//
//	block   = n-1 uint8 | top uint8 | l uint8 | holes uvarint |
//	          hiLen uvarint | 5 × (w uint8 | xw uint8 | nexc uvarint) |
//	          bit area | CRC32C(first id as 8 bytes ‖ block bytes) uint32
//
// The varying mask of the block is M = (2^top - 1) &^ holes: the id bits
// that differ between the block's posts (the others equal those of the
// first id, which is kept in the index entry). Post j > 0 is stored as
// x_j = pext(id_j, M) - pext(id_0, M) > 0 (pext, bitpack.Pext, gathers the
// bits selected by M). The bit area is read LSB-first from the first byte,
// and holds, with no padding between them:
//
//	lows    (n-1) × l bits      x_j mod 2^l, j = 1..n-1
//	highs   hiLen bits          bit (x_j >> l) + (j-1) set for j = 1..n-1
//	field f, for f = likes, comments, reposts, views, favorites:
//	  vals  n × w bits          v_i mod 2^w
//	  idx   nexc × iw bits      positions i with v_i >= 2^w, increasing
//	  exc   nexc × xw bits      v_i >> w for those positions (non-zero)
//
// where iw = bits.Len(n-1). The area ends with zero bits to a whole byte.
// Canonical form, checked by Unmarshal: M's top bit is set and M is exactly
// the bits that vary; l <= 63; w+xw <= 63; nexc = 0 exactly when xw = 0;
// every value <= math.MaxInt64; no post has five zero counts; the last bit
// of highs is set; ids increase within and across blocks.
package sealed
