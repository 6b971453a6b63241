package sealed

import (
	"errors"
	"fmt"
	"hash/crc32"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/bitpack"
)

// MaxBlockPosts bounds the posts of one block: exception indices and the
// per-block arrays of the encoder and decoder are sized by it.
const MaxBlockPosts = 256

const numFields = 5

// castagnoli is served by the CPU's CRC32C instruction.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// BlockCRC is the CRC32C of the block's first id (8 bytes, little-endian;
// it is kept in the index, not the block) followed by the block's bytes,
// so a block paired with the wrong index entry fails the check just as a
// damaged one does. The first 8 bytes go through the table by hand: a
// slice of a local array passed to crc32 would escape to the heap.
func BlockCRC(first uint64, b []byte) uint32 {
	crc := ^uint32(0)
	for i := range 8 {
		crc = castagnoli[byte(crc)^byte(first>>(8*i))] ^ crc>>8
	}
	return crc32.Update(^crc, castagnoli, b)
}

// fieldOf returns field f of c as an unsigned value; c's fields are
// non-negative here.
func fieldOf(c *engine.Counts, f int) uint64 {
	switch f {
	case 0:
		return uint64(c.Likes)
	case 1:
		return uint64(c.Comments)
	case 2:
		return uint64(c.Reposts)
	case 3:
		return uint64(c.Views)
	}
	return uint64(c.Favorites)
}

func setField(c *engine.Counts, f int, v uint64) {
	switch f {
	case 0:
		c.Likes = int64(v)
	case 1:
		c.Comments = int64(v)
	case 2:
		c.Reposts = int64(v)
	case 3:
		c.Views = int64(v)
	default:
		c.Favorites = int64(v)
	}
}

// blockEncoder collects up to MaxBlockPosts posts and encodes them. It is
// reused from block to block; its arrays make it a few KiB, so it lives in
// the Writer rather than on the stack.
type blockEncoder struct {
	ids  [MaxBlockPosts]uint64
	vals [numFields][MaxBlockPosts]uint64
	n    int
	bw   bitpack.Writer
}

func (e *blockEncoder) add(id uint64, c *engine.Counts) {
	e.ids[e.n] = id
	for f := range numFields {
		e.vals[f][e.n] = fieldOf(c, f)
	}
	e.n++
}

// encode appends the encoded block (bytes and CRC) to dst and resets e.
func (e *blockEncoder) encode(dst []byte) []byte {
	n := e.n
	ids := e.ids[:n]
	first := ids[0]
	idp := PlanIDs(ids)
	var plans [numFields]ColumnPlan
	for f := range numFields {
		plans[f] = PlanColumn(e.vals[f][:n])
	}

	start := len(dst)
	dst = idp.AppendHeader(dst)
	for _, p := range plans {
		dst = p.AppendHeader(dst)
	}

	e.bw.Buf = dst
	bw := &e.bw
	idp.Put(bw, ids)
	for f, p := range plans {
		p.Put(bw, e.vals[f][:n])
	}
	dst = bw.Flush()
	bw.Buf = nil
	dst = le.AppendUint32(dst, BlockCRC(first, dst[start:]))
	e.n = 0
	return dst
}

// errBlock is the reason every structural check of a block reports; the
// caller adds where the block is.
var errBlock = errors.New("malformed block")

var errSlack = errors.New("sealed: block slice without BlockSlack bytes of capacity past its end")

// Block is a parsed view of one encoded block: its header decoded so that
// one post can be found and read without decoding the others. The id
// column is an Elias–Fano list (a lookup is a select on the high bits and
// a compare of one or two low parts), the count columns are fixed width
// with exceptions, so a lookup costs O(1) bit reads, not a decode of the
// block up to the key.
//
// A Block holds no memory of its own beyond the slice it was parsed from.
type Block struct {
	ids IDs
	f   [numFields]Column
}

// ParseBlock parses the header of block b (its bytes without the trailing
// CRC) whose first id is first, checking that every region the header
// declares fits the block exactly. cap(b) must exceed len(b) by at least
// BlockSlack. It does not check the CRC (see VerifyBlock) or the contents
// of the regions; lookups on a block that passed ParseBlock stay within
// its bytes whatever they hold.
func ParseBlock(first uint64, b []byte) (Block, error) {
	var k Block
	err := k.Parse(first, b)
	return k, err
}

// Parse is ParseBlock into k, which a multi-get reuses from block to block
// (a Block is a few hundred bytes).
func (k *Block) Parse(first uint64, b []byte) error {
	if cap(b)-len(b) < BlockSlack {
		return errSlack
	}
	if _, _, ok := ParseBlockHeader(&k.ids, k.f[:], first, b, numFields, false, 63); !ok {
		return errBlock // (63: a count is at most math.MaxInt64)
	}
	return nil
}

// Len returns the number of posts in the block.
func (k *Block) Len() int { return k.ids.n }

// Find returns the position of id in the block.
func (k *Block) Find(id uint64) (int, bool) { return k.ids.Find(id) }

// highLines notes for ld the lines of the block's high bits, base being
// where its bit area starts in the window.
func (k *Block) highLines(base int, ld *loads) {
	if d := &k.ids; d.hiLen > 0 {
		ld.add(uint64(base+d.hi>>3), uint64(base+(d.hi+d.hiLen-1)>>3))
	}
}

// fieldLines notes for ld the lines post i's counts are read from: its
// value in each column, and each field's exceptions. align is where the
// window's bytes start in their cache line; a line already noted for the
// post is not noted again.
func (k *Block) fieldLines(base, align, i int, ld *loads) {
	last := -1
	note := func(bit int) {
		o := base + bit>>3
		if l := (align + o) >> 6; l != last {
			last = l
			ld.add1(uint64(o))
		}
	}
	for f := range k.f {
		fv := &k.f[f]
		if fv.w > 0 {
			note(fv.vals + i*fv.w)
		}
		if fv.nexc > 0 {
			note(fv.idx)
			note(fv.exc + fv.nexc*fv.xw - 1)
		}
	}
}

// lowLines notes for ld the lines of the low parts of elements j and j+1
// (a bucket holds one or two elements on average).
func (k *Block) lowLines(base, j int, ld *loads) {
	d := &k.ids
	if d.l == 0 || j < 0 {
		return
	}
	last := d.low + (d.n-1)*d.l // end of the low parts
	ld.add(uint64(base+(d.low+j*d.l)>>3), uint64(base+(min(d.low+(j+2)*d.l, last)-1)>>3))
}

// Counts returns the counts of the post at position i (0 <= i < Len()).
func (k *Block) Counts(i int) engine.Counts {
	return engine.Counts{
		Likes:     int64(k.f[0].Value(k.ids.area, i)),
		Comments:  int64(k.f[1].Value(k.ids.area, i)),
		Reposts:   int64(k.f[2].Value(k.ids.area, i)),
		Views:     int64(k.f[3].Value(k.ids.area, i)),
		Favorites: int64(k.f[4].Value(k.ids.area, i)),
	}
}

// Decode writes the block's ids and counts to ids[:Len()] and
// counts[:Len()], checking everything ParseBlock does not: that ids
// increase, that exceptions are canonical, that no count exceeds
// math.MaxInt64 and that no post is all zeros. A block that decodes
// without error reads back exactly what it decodes to.
func (k *Block) Decode(ids []uint64, counts []engine.Counts) error {
	n := k.ids.n
	counts = counts[:n]
	if err := k.ids.Decode(ids); err != nil {
		return err
	}
	var col [MaxBlockPosts]uint64
	for f := range numFields {
		if err := k.f[f].Decode(k.ids.area, col[:n]); err != nil {
			return err
		}
		for i, v := range col[:n] {
			setField(&counts[i], f, v)
		}
	}
	// No value is negative: Parse keeps w+xw <= 63.
	for i := range counts {
		if counts[i].IsZero() {
			return errBlock // zeros are never stored
		}
	}
	return nil
}

// CheckBlock checks block b — its bytes including the trailing CRC, with
// cap(b) >= len(b)+BlockSlack-4 — whose first id is first: its checksum
// and its header (ParseBlock). That is enough to read it safely: the
// checksum catches damage, and a block that parses keeps every lookup
// within its bytes. It is what the cold tier runs on each block it reads.
func CheckBlock(first uint64, b []byte) error {
	if len(b) < 4 {
		return fmt.Errorf("block of %d bytes: %w", len(b), errBlock)
	}
	body := b[:len(b)-4]
	if got, want := BlockCRC(first, body), le.Uint32(b[len(b)-4:]); got != want {
		return fmt.Errorf("block checksum mismatch (computed %08x, stored %08x)", got, want)
	}
	var k Block
	return k.Parse(first, body)
}

// VerifyBlock is CheckBlock plus a full decode that checks the block's
// contents (Decode). The scratch slices must hold MaxBlockPosts entries.
func VerifyBlock(first uint64, b []byte, scratchIDs []uint64, scratchCounts []engine.Counts) error {
	if err := CheckBlock(first, b); err != nil {
		return err
	}
	k, _ := ParseBlock(first, b[:len(b)-4])
	return k.Decode(scratchIDs, scratchCounts)
}
