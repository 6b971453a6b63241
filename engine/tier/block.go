package tier

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"

	"github.com/tally-dev/tally/engine/bitpack"
	"github.com/tally-dev/tally/engine/sealed"
)

// MaxCols bounds the columns of a record.
const MaxCols = 8

// Row is a record as its codec splits it: up to MaxCols unsigned columns.
type Row [MaxCols]uint64

// MaxBlockRecords bounds the records of one block (a position is a byte).
const MaxBlockRecords = 256

// blockRecords is how many records a block holds when a window is written.
// On the benchmark set (1M posts, authors) 256 against 128 saved 0.1 byte
// a post (a block's header and index entry are about 40 bytes) and made a
// sealed page 5% faster (half the blocks to parse and group); a block is
// then about 2 KiB, still one page of a cold file.
const blockRecords = 256

// shape is the column layout of a codec's records: cols columns, of which
// the first dense are stored for every record and the rest form the
// sparse group, stored only for the records where one of them is not
// zero (a presence bit says which).
type shape struct{ cols, dense int }

func (sh shape) valid() bool {
	return sh.cols >= 1 && sh.cols <= MaxCols && sh.dense >= 0 && sh.dense <= sh.cols
}

// blockEncoder collects up to MaxBlockRecords records and encodes them.
// It is reused from block to block.
type blockEncoder struct {
	sh   shape
	ids  [MaxBlockRecords]uint64
	vals [MaxCols][MaxBlockRecords]uint64
	n    int
	bw   bitpack.Writer
}

func (e *blockEncoder) add(id uint64, r *Row) {
	e.ids[e.n] = id
	for f := range e.sh.cols {
		e.vals[f][e.n] = r[f]
	}
	e.n++
}

// encode appends the encoded block (bytes and CRC) to dst and resets e.
//
//	block = n-1 uint8 | top uint8 | l uint8 | holes uvarint | hiLen uvarint |
//	        k uvarint (records with the sparse group; only if the shape has one) |
//	        cols × (w uint8 | xw uint8 | nexc uvarint) | bit area | CRC32C
func (e *blockEncoder) encode(dst []byte) []byte {
	n := e.n
	ids := e.ids[:n]
	first := ids[0]
	idp := sealed.PlanIDs(ids)
	sh := e.sh
	// The sparse group: which records have it, and its columns squeezed
	// to those records.
	var present [MaxBlockRecords]bool
	k := n
	if sh.dense < sh.cols {
		k = 0
		for i := range n {
			for f := sh.dense; f < sh.cols; f++ {
				if e.vals[f][i] != 0 {
					present[i] = true
				}
			}
			if present[i] {
				for f := sh.dense; f < sh.cols; f++ {
					e.vals[f][k] = e.vals[f][i]
				}
				k++
			}
		}
	}
	var plans [MaxCols]sealed.ColumnPlan
	for f := range sh.cols {
		c := n
		if f >= sh.dense {
			c = k
		}
		plans[f] = sealed.PlanColumn(e.vals[f][:c])
	}

	start := len(dst)
	dst = idp.AppendHeader(dst)
	if sh.dense < sh.cols {
		dst = binary.AppendUvarint(dst, uint64(k))
	}
	for _, p := range plans[:sh.cols] {
		dst = p.AppendHeader(dst)
	}
	e.bw.Buf = dst
	bw := &e.bw
	idp.Put(bw, ids)
	for f, p := range plans[:sh.cols] {
		c := n
		if f >= sh.dense {
			c = k
			if f == sh.dense && k > 0 && k < n {
				for _, b := range present[:n] {
					if b {
						bw.Put(1, 1)
					} else {
						bw.Put(0, 1)
					}
				}
			}
		}
		p.Put(bw, e.vals[f][:c])
	}
	dst = bw.Flush()
	bw.Buf = nil
	dst = le.AppendUint32(dst, sealed.BlockCRC(first, dst[start:]))
	e.n = 0
	return dst
}

// errBlock is the reason every structural check of a block reports.
var errBlock = errors.New("malformed block")

// Block is a parsed view of one encoded block: its header decoded so that
// one record can be found and read without decoding the others. The id
// column is an Elias–Fano list, the value columns fixed width with
// exceptions, so a lookup is O(1) bit reads plus a rank in the presence
// bits. It holds no memory of its own beyond the slice it was parsed from.
type Block struct {
	ids  sealed.IDs // the id column, and the bit area
	sh   shape
	k    int // records with the sparse group
	pres int // bit offset of the presence bits; -1 when k is 0 or n
	f    [MaxCols]sealed.Column
}

// Parse parses the header of block b (its bytes without the CRC), whose
// first id is first and whose records have shape sh, checking that every
// region the header declares fits the block exactly. cap(b) must exceed
// len(b) by BlockSlack. Lookups on a block that passed Parse stay within
// its bytes whatever they hold; Decode checks the contents.
func (k *Block) Parse(first uint64, b []byte, sh shape) error {
	if cap(b)-len(b) < BlockSlack || !sh.valid() {
		return errBlock
	}
	k.sh = sh
	var ok bool
	k.k, k.pres, ok = sealed.ParseBlockHeader(&k.ids, k.f[:sh.cols], first, b, sh.dense, sh.dense < sh.cols, 64)
	if !ok {
		return errBlock
	}
	return nil
}

// Len returns the number of records in the block.
func (k *Block) Len() int { return k.ids.Len() }

// Find returns the position of id in the block.
func (k *Block) Find(id uint64) (int, bool) { return k.ids.Find(id) }

// sparsePos returns record i's position among the records that have the
// sparse group, or -1 when it has none.
func (k *Block) sparsePos(i int) int {
	switch {
	case k.k == k.ids.Len():
		return i
	case k.k == 0:
		return -1
	}
	a := k.ids.Area()
	if bitpack.Bits(a, k.pres+i, 1, 1) == 0 {
		return -1
	}
	r := 0
	p := 0
	for ; p+56 <= i; p += 56 {
		r += bits.OnesCount64(bitpack.Bits56(a, k.pres+p) & (1<<56 - 1))
	}
	return r + bits.OnesCount64(bitpack.Bits56(a, k.pres+p)&bitpack.LowMask(uint(i-p)))
}

// Row reads the record at position i (0 <= i < Len()) into r.
func (k *Block) Row(i int, r *Row) {
	a := k.ids.Area()
	for f := range k.sh.dense {
		r[f] = k.f[f].Value(a, i)
	}
	if k.sh.dense == k.sh.cols {
		return
	}
	j := k.sparsePos(i)
	for f := k.sh.dense; f < k.sh.cols; f++ {
		if j < 0 {
			r[f] = 0
		} else {
			r[f] = k.f[f].Value(a, j)
		}
	}
}

// Decode writes the block's ids and rows to ids[:Len()] and rows[:Len()],
// checking what Parse does not: that ids increase, that the declared
// varying bits vary, that exceptions and presence bits are canonical
// (a record has the sparse group exactly when one of its values there is
// not zero). A block that decodes without error reads back exactly what
// it decodes to. With ids and rows nil it only checks: Verify.
func (k *Block) Decode(ids []uint64, rows []Row) error {
	n := k.ids.Len()
	if err := k.ids.Decode(ids); err != nil {
		return err
	}
	a := k.ids.Area()
	if k.pres >= 0 {
		c := 0
		for p := 0; p < n; p += 56 {
			c += bits.OnesCount64(bitpack.Bits(a, k.pres+p, uint(min(56, n-p)), bitpack.LowMask(uint(min(56, n-p)))))
		}
		if c != k.k {
			return errBlock
		}
	}
	if rows != nil {
		rows = rows[:n]
		clear(rows)
	}
	var nz [MaxBlockRecords]uint64 // OR of each present record's sparse values
	var col [MaxBlockRecords]uint64
	for f := range k.sh.cols {
		if f < k.sh.dense {
			if err := k.f[f].Decode(a, col[:n]); err != nil {
				return err
			}
			for i := range rows {
				rows[i][f] = col[i]
			}
			continue
		}
		// Stored for the k present records only; spread to all n.
		if err := k.f[f].Decode(a, col[:k.k]); err != nil {
			return err
		}
		for i, v := range col[:k.k] {
			nz[i] |= v
		}
		j := 0
		for i := range rows {
			if k.k == n || k.pres >= 0 && bitpack.Bits(a, k.pres+i, 1, 1) == 1 {
				rows[i][f] = col[j]
				j++
			}
		}
	}
	if k.sh.dense < k.sh.cols {
		for _, v := range nz[:k.k] {
			if v == 0 {
				return errBlock // a present record with a zero group
			}
		}
	}
	return nil
}

// lastID returns the block's last id (the block verified).
func (k *Block) lastID() uint64 { return k.ids.Last() }

// Verify checks everything Decode checks, without writing ids or rows:
// what a snapshot's Load runs on every block.
func (k *Block) Verify() error { return k.Decode(nil, nil) }

// checkBlock checks block b — its bytes including the trailing CRC, with
// cap(b) >= len(b)+BlockSlack-4 — whose first id is first: the checksum,
// then the header. That is enough to read it safely.
func checkBlock(first uint64, b []byte, sh shape) error {
	if len(b) < 4 {
		return fmt.Errorf("block of %d bytes: %w", len(b), errBlock)
	}
	body := b[:len(b)-4]
	if got, want := sealed.BlockCRC(first, body), le.Uint32(b[len(b)-4:]); got != want {
		return fmt.Errorf("block checksum mismatch (computed %08x, stored %08x)", got, want)
	}
	var k Block
	return k.Parse(first, body, sh)
}
