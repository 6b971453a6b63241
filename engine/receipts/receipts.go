// Package receipts owns the read-receipt state of one group message:
// {maxid, readbits, quitbits} over the group's mapids, as API.md describes.
// Members with mapid 1..maxid are counted unless they had quit when the
// message was sent or are its sender; counted members become readers as
// they mark the message read.
//
// It promises: a message in a 200-member group costs 54 encoded bytes (two
// 25-byte bitmaps plus header and maxid); a message in a huge group with
// few readers costs tens of bytes, because each message picks, by size,
// plain bitmaps or Roaring bitmaps, and moves to plain bitmaps once reads
// make those smaller; the encoding is versioned and UnmarshalBinary rejects
// anything it did not write without panicking. A Receipt is not safe for
// concurrent use: callers lock.
package receipts

import (
	"encoding/binary"
	"errors"
	"fmt"
	"iter"
	"math/bits"
	"slices"

	"github.com/RoaringBitmap/roaring/v2"
)

// Encoding: version byte, form byte, uvarint maxid, then
//
//	plain:   readbits, excludedbits: ceil(maxid/8) bytes each, mapid m at
//	         bit (m-1)%8 of byte (m-1)/8
//	roaring: uvarint length of the readers bitmap, the readers bitmap, the
//	         excluded bitmap, both in Roaring's portable format without run
//	         containers
//
// The excluded set is quitbits plus the sender: one bitmap holds every
// member the message does not count, so a 200-member group needs no
// separate field for the sender.
const (
	version     = 1
	formPlain   = 0
	formRoaring = 1
)

// roaringOverhead approximates what two roaring.Bitmaps cost in memory
// beyond their encoded size (headers, container slices and interfaces).
// Roaring is chosen only when it wins by more than that, so small groups
// always use plain bitmaps: one allocation, no pointers inside.
const roaringOverhead = 256

// Receipt is one message's receipt state. The zero Receipt counts nobody.
type Receipt struct {
	maxID    uint32
	read     uint32 // readers
	excluded uint32 // mapids in 1..maxID not counted
	// bits is the plain form: readbits then excludedbits.
	bits []byte
	// sp is the Roaring form; when set, bits is nil.
	sp *sparse
}

type sparse struct {
	read, excluded roaring.Bitmap
}

// New returns the receipt of a message sent by mapid sender in a group
// whose largest mapid is maxID. quit yields the mapids of members who had
// quit at send time, in any order; duplicates, 0 and mapids above maxID
// are ignored, and quit may be nil. (An iterator rather than a slice lets
// the group table yield its quit flags without building a list.)
func New(maxID, sender uint32, quit iter.Seq[uint32]) Receipt {
	r := Receipt{maxID: maxID}
	n := plainLen(maxID)
	if 2*n <= roaringOverhead {
		r.bits = make([]byte, 2*n)
		r.exclude(sender)
		if quit != nil {
			for m := range quit {
				r.exclude(m)
			}
		}
		return r
	}
	sp := &sparse{}
	if r.inRange(sender) {
		sp.excluded.Add(sender)
	}
	if quit != nil {
		for m := range quit {
			if r.inRange(m) {
				sp.excluded.Add(m)
			}
		}
	}
	r.excluded = uint32(sp.excluded.GetCardinality())
	r.sp = sp
	if !r.sparseWins() {
		r.toPlain()
	}
	return r
}

func plainLen(maxID uint32) int { return int((uint64(maxID) + 7) / 8) }

func (r *Receipt) inRange(m uint32) bool { return m >= 1 && m <= r.maxID }

// exclude adds m to the plain excluded bitmap.
func (r *Receipt) exclude(m uint32) {
	if !r.inRange(m) {
		return
	}
	ex := r.bits[len(r.bits)/2:]
	i, b := (m-1)/8, byte(1)<<((m-1)%8)
	if ex[i]&b == 0 {
		ex[i] |= b
		r.excluded++
	}
}

func (r *Receipt) roaringSize() int {
	return int(r.sp.read.GetSerializedSizeInBytes() + r.sp.excluded.GetSerializedSizeInBytes())
}

// sparseWins reports whether the Roaring form is still the cheaper one.
func (r *Receipt) sparseWins() bool {
	return r.roaringSize()+roaringOverhead < 2*plainLen(r.maxID)
}

// toPlain converts the Roaring form to plain bitmaps.
func (r *Receipt) toPlain() {
	n := plainLen(r.maxID)
	r.bits = make([]byte, 2*n)
	set := func(dst []byte, rb *roaring.Bitmap) {
		it := rb.Iterator()
		for it.HasNext() {
			m := it.Next() - 1
			dst[m/8] |= 1 << (m % 8)
		}
	}
	set(r.bits[:n], &r.sp.read)
	set(r.bits[n:], &r.sp.excluded)
	r.sp = nil
}

// Clone returns a receipt equal to r that shares no memory with it, so
// that one can change while the other is read (a snapshot reading a
// message's receipt while a member marks it read).
func (r *Receipt) Clone() Receipt {
	c := *r
	c.bits = slices.Clone(r.bits)
	if r.sp != nil {
		c.sp = &sparse{read: *r.sp.read.Clone(), excluded: *r.sp.excluded.Clone()}
	}
	return c
}

// MaxID returns the largest mapid the message counts.
func (r *Receipt) MaxID() uint32 { return r.maxID }

// Counted reports whether the message counts member mapid: mapid is in
// 1..maxid, had not quit at send time and is not the sender.
func (r *Receipt) Counted(mapid uint32) bool {
	if !r.inRange(mapid) {
		return false
	}
	if r.sp != nil {
		return !r.sp.excluded.Contains(mapid)
	}
	return !bit(r.bits[len(r.bits)/2:], mapid)
}

// IsRead reports whether mapid has read the message.
func (r *Receipt) IsRead(mapid uint32) bool {
	if !r.inRange(mapid) {
		return false
	}
	if r.sp != nil {
		return r.sp.read.Contains(mapid)
	}
	return bit(r.bits[:len(r.bits)/2], mapid)
}

func bit(b []byte, m uint32) bool {
	m--
	return b[m/8]&(1<<(m%8)) != 0
}

// MarkRead records that mapid read the message. It changes nothing, and
// returns false, for a member the message does not count or one who
// already read it.
func (r *Receipt) MarkRead(mapid uint32) (changed bool) {
	if !r.Counted(mapid) {
		return false
	}
	if r.sp != nil {
		if !r.sp.read.CheckedAdd(mapid) {
			return false
		}
		r.read++
		// Reads only ever grow the Roaring form, never the plain one, so
		// once plain is smaller the message stays plain.
		if !r.sparseWins() {
			r.toPlain()
		}
		return true
	}
	m := mapid - 1
	rd := r.bits[:len(r.bits)/2]
	if rd[m/8]&(1<<(m%8)) != 0 {
		return false
	}
	rd[m/8] |= 1 << (m % 8)
	r.read++
	return true
}

// Counts returns how many counted members have and have not read the
// message.
func (r *Receipt) Counts() (read, unread int) {
	return int(r.read), int(r.maxID) - int(r.excluded) - int(r.read)
}

// Readers calls fn for the readers in ascending mapid order, at most limit
// of them.
func (r *Receipt) Readers(limit int, fn func(mapid uint32)) { r.ReadersAfter(0, limit, fn) }

// ReadersAfter is Readers from the first mapid above after: one page of a
// long list, found without walking the pages before it (the Roaring form
// seeks; the plain form starts at after's word).
func (r *Receipt) ReadersAfter(after uint32, limit int, fn func(mapid uint32)) {
	if limit <= 0 || after >= r.maxID {
		return
	}
	if r.sp != nil {
		it := r.sp.read.Iterator()
		it.AdvanceIfNeeded(after + 1)
		for ; limit > 0 && it.HasNext(); limit-- {
			fn(it.Next())
		}
		return
	}
	n := len(r.bits) / 2
	walk(r.bits[:n], nil, r.maxID, after, limit, fn)
}

// Unreaders calls fn for the counted members who have not read the
// message, in ascending mapid order, at most limit of them.
func (r *Receipt) Unreaders(limit int, fn func(mapid uint32)) { r.UnreadersAfter(0, limit, fn) }

// UnreadersAfter is Unreaders from the first mapid above after.
func (r *Receipt) UnreadersAfter(after uint32, limit int, fn func(mapid uint32)) {
	if limit <= 0 || after >= r.maxID {
		return
	}
	if r.sp != nil {
		r.sp.unreaders(r.maxID, after, limit, fn)
		return
	}
	n := len(r.bits) / 2
	walk(r.bits[:n], r.bits[n:], r.maxID, after, limit, fn)
}

// unreaders is Unreaders for the Roaring form. It rebuilds plain bitmaps
// one 4096-mapid window at a time on the stack and walks their gaps a word
// at a time, so a long stretch of readers or excluded members costs a few
// word operations per 64 mapids rather than a bitmap lookup per mapid. It
// starts at the window holding after+1.
func (sp *sparse) unreaders(maxID, after uint32, limit int, fn func(uint32)) {
	const window = 4096
	var seen [window / 64]uint64
	ri, ei := sp.read.Iterator(), sp.excluded.Iterator()
	first := 1 + uint64(after)/window*window
	ri.AdvanceIfNeeded(uint32(first))
	ei.AdvanceIfNeeded(uint32(first))
	fill := func(it roaring.IntPeekable, base, end uint64) {
		for it.HasNext() {
			v := uint64(it.PeekNext())
			if v >= end {
				return
			}
			it.Next()
			off := v - base
			seen[off/64] |= 1 << (off % 64)
		}
	}
	for base := first; base <= uint64(maxID); base += window {
		clear(seen[:])
		fill(ri, base, base+window)
		fill(ei, base, base+window)
		for w, x := range seen {
			for x = ^x; x != 0; x &= x - 1 {
				m := base + uint64(w)*64 + uint64(bits.TrailingZeros64(x))
				if m > uint64(maxID) || limit <= 0 {
					return
				}
				if m <= uint64(after) {
					continue
				}
				fn(uint32(m))
				limit--
			}
		}
	}
}

// walk calls fn for the mapids above after whose bit is set in set (or,
// when skip is not nil, clear in both set and skip), ascending, at most
// limit of them. It starts at the word holding after+1.
func walk(set, skip []byte, maxID, after uint32, limit int, fn func(uint32)) {
	start := int(after/64) * 8
	for i := start; i < len(set) && limit > 0; i += 8 {
		w, s := word(set[i:]), uint64(0)
		if skip != nil {
			s = word(skip[i:])
			w = ^(w | s)
		}
		if i == start {
			w &^= 1<<(after%64) - 1 // mapids up to after
		}
		for w != 0 && limit > 0 {
			m := uint64(i)*8 + uint64(bits.TrailingZeros64(w)) + 1
			if m > uint64(maxID) {
				return
			}
			fn(uint32(m))
			limit--
			w &= w - 1
		}
	}
}

// word reads up to 8 bytes of b as a little-endian word, so bit j of the
// word is bit j%8 of byte j/8.
func word(b []byte) uint64 {
	if len(b) >= 8 {
		return binary.LittleEndian.Uint64(b)
	}
	var w uint64
	for j, x := range b {
		w |= uint64(x) << (8 * j)
	}
	return w
}

// SizeBytes returns the encoded size of the receipt, which is what storing
// it costs.
func (r *Receipt) SizeBytes() int {
	n := 2 + uvarintLen(uint64(r.maxID))
	if r.sp == nil {
		return n + 2*plainLen(r.maxID)
	}
	rs := int(r.sp.read.GetSerializedSizeInBytes())
	return n + uvarintLen(uint64(rs)) + rs + int(r.sp.excluded.GetSerializedSizeInBytes())
}

func uvarintLen(x uint64) int {
	n := 1
	for ; x >= 0x80; x >>= 7 {
		n++
	}
	return n
}

// MarshalBinary encodes the receipt.
func (r *Receipt) MarshalBinary() ([]byte, error) {
	return r.AppendBinary(make([]byte, 0, r.SizeBytes()))
}

// AppendBinary appends the encoding of the receipt to dst, so a caller can
// pack many receipts into one buffer.
func (r *Receipt) AppendBinary(dst []byte) ([]byte, error) {
	if r.sp == nil {
		dst = append(dst, version, formPlain)
		dst = binary.AppendUvarint(dst, uint64(r.maxID))
		if r.bits == nil { // zero Receipt, or maxID 0
			return append(dst, make([]byte, 2*plainLen(r.maxID))...), nil
		}
		return append(dst, r.bits...), nil
	}
	dst = append(dst, version, formRoaring)
	dst = binary.AppendUvarint(dst, uint64(r.maxID))
	dst = binary.AppendUvarint(dst, r.sp.read.GetSerializedSizeInBytes())
	w := appender{dst}
	if _, err := r.sp.read.WriteTo(&w); err != nil {
		return nil, err
	}
	if _, err := r.sp.excluded.WriteTo(&w); err != nil {
		return nil, err
	}
	return w.b, nil
}

type appender struct{ b []byte }

func (a *appender) Write(p []byte) (int, error) {
	a.b = append(a.b, p...)
	return len(p), nil
}

var errCorrupt = errors.New("receipts: corrupt encoding")

// UnmarshalBinary decodes data written by MarshalBinary, replacing r. It
// copies what it keeps. Data that is not a consistent receipt (unknown
// version or form, wrong length, bits beyond maxid, a reader who is also
// excluded, a malformed bitmap) is an error and leaves r unchanged.
func (r *Receipt) UnmarshalBinary(data []byte) error {
	if len(data) < 3 {
		return errCorrupt
	}
	if data[0] != version {
		return fmt.Errorf("receipts: unknown encoding version %d", data[0])
	}
	form := data[1]
	maxID, k := binary.Uvarint(data[2:])
	if k <= 0 || maxID > 1<<32-1 {
		return errCorrupt
	}
	rest := data[2+k:]
	out := Receipt{maxID: uint32(maxID)}
	switch form {
	case formPlain:
		n := plainLen(out.maxID)
		if len(rest) != 2*n {
			return errCorrupt
		}
		rd, ex := rest[:n], rest[n:]
		for i := range n {
			if rd[i]&ex[i] != 0 {
				return errCorrupt
			}
			out.read += uint32(bits.OnesCount8(rd[i]))
			out.excluded += uint32(bits.OnesCount8(ex[i]))
		}
		if tail := maxID % 8; tail != 0 && (rd[n-1]|ex[n-1])>>tail != 0 {
			return errCorrupt
		}
		out.bits = append([]byte(nil), rest...)
	case formRoaring:
		rl, k := binary.Uvarint(rest)
		if k <= 0 || rl > uint64(len(rest)-k) {
			return errCorrupt
		}
		rest = rest[k:]
		sp := &sparse{}
		if err := readBitmap(&sp.read, rest[:rl], out.maxID); err != nil {
			return err
		}
		if err := readBitmap(&sp.excluded, rest[rl:], out.maxID); err != nil {
			return err
		}
		if sp.read.Intersects(&sp.excluded) {
			return errCorrupt
		}
		out.read = uint32(sp.read.GetCardinality())
		out.excluded = uint32(sp.excluded.GetCardinality())
		out.sp = sp
	default:
		return fmt.Errorf("receipts: unknown encoding form %d", form)
	}
	*r = out
	return nil
}

// readBitmap decodes exactly b into rb and checks that it holds mapids in
// 1..maxID only.
func readBitmap(rb *roaring.Bitmap, b []byte, maxID uint32) error {
	p, err := rb.FromBuffer(b)
	if err != nil || p != int64(len(b)) {
		return errCorrupt
	}
	// We never write run containers; refusing them also keeps Validate
	// linear (it checks runs pairwise).
	if rb.HasRunCompression() || rb.Validate() != nil {
		return errCorrupt
	}
	if !rb.IsEmpty() && (rb.Minimum() == 0 || rb.Maximum() > maxID) {
		return errCorrupt
	}
	// FromBuffer aliases b, which belongs to the caller.
	rb.CloneCopyOnWriteContainers()
	return nil
}
