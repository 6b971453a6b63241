package tier

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"slices"

	"github.com/tally-dev/tally/engine/bitpack"
)

// The snapshot image (WriteTo, Load):
//
//	image   = header body CRC32C(body) uint32
//	header  = bitpack image header: "TLYTIERS" | version 1 | body length |
//	          window millis | next file generation | CRC32C   (44 bytes)
//	body    = tag [4] | cols uint8 | dense uint8 | windows uvarint | window*
//	window  = num varint | records uvarint | kind uint8 | base | overlay
//	base    = open:   rows
//	          sealed: length uvarint | window image
//	          cold:   name length uvarint | name | file size uvarint
//	overlay = rows      the delta (and a running job's frozen delta)
//	rows    = count uvarint | (id offset + 1 uvarint | cols × uvarint)*  in id order
const (
	snapMagic   = "TLYTIERS"
	snapVersion = 1
)

// WriteTo writes the tier's image to w: every window's records or bytes,
// and the names of the cold files, which must outlive the image (Collect's
// keep). Call it under the read lock; it does not change the tier.
func (t *Tier[R]) WriteTo(w io.Writer) (int64, error) {
	return writeImage(w, t.opts.WindowMillis, t.nextGen, t.writeBody)
}

// writeImage writes a snapshot image (the header, the body writeBody
// writes, its CRC32C): a post table's or a set's. writeBody is called
// twice, to count the body's bytes and then to write them.
func writeImage(w io.Writer, millis int64, nextGen uint64, writeBody func(io.Writer) error) (int64, error) {
	var cnt countWriter
	if err := writeBody(&cnt); err != nil {
		return 0, err
	}
	iw := bitpack.NewImageWriter(w)
	iw.Write(bitpack.AppendHeader(nil, snapMagic, snapVersion, [3]uint64{uint64(cnt.n), uint64(millis), nextGen}))
	crc := crc32.New(castagnoli)
	if err := writeBody(&teeWriter{iw: iw, h: crc}); err != nil {
		iw.Fail(err)
	}
	iw.Write(le.AppendUint32(nil, crc.Sum32()))
	return iw.Finish("tier")
}

type countWriter struct{ n int64 }

func (c *countWriter) Write(b []byte) (int, error) { c.n += int64(len(b)); return len(b), nil }

type teeWriter struct {
	iw *bitpack.ImageWriter
	h  hash.Hash32
}

func (t *teeWriter) Write(b []byte) (int, error) {
	t.h.Write(b)
	t.iw.Write(b)
	return len(b), t.iw.Err
}

func (t *Tier[R]) writeBody(w io.Writer) error {
	buf := make([]byte, 0, 64<<10)
	flush := func() error {
		_, err := w.Write(buf)
		buf = buf[:0]
		return err
	}
	buf = append(buf, t.tag[:]...)
	buf = append(buf, byte(t.sh.cols), byte(t.sh.dense))
	buf = binary.AppendUvarint(buf, uint64(len(t.wins)))
	var row Row
	rows := func(tables ...*openTable) error {
		// The union of tables, the later overriding the earlier.
		var keys []uint64
		for _, tb := range tables {
			if tb != nil {
				keys = append(keys, tb.sorted(&t.layout)...)
			}
		}
		slices.Sort(keys)
		keys = slices.Compact(keys)
		buf = binary.AppendUvarint(buf, uint64(len(keys)))
		for _, k := range keys {
			for i := len(tables) - 1; i >= 0; i-- {
				if tables[i] != nil && tables[i].get(k, &t.layout, &row) {
					break
				}
			}
			buf = binary.AppendUvarint(buf, k)
			for f := range t.cols {
				buf = binary.AppendUvarint(buf, row[f])
			}
			if len(buf) >= 60<<10 {
				if err := flush(); err != nil {
					return err
				}
			}
		}
		return nil
	}
	for _, win := range t.wins {
		buf = binary.AppendVarint(buf, win.num)
		buf = binary.AppendUvarint(buf, uint64(win.n))
		buf = append(buf, byte(win.body.kind()))
		switch b := win.body.(type) {
		case *openBody:
			if err := rows(b.t); err != nil {
				return err
			}
		case *sealedBody:
			buf = binary.AppendUvarint(buf, uint64(len(b.s.data)))
			if err := flush(); err != nil {
				return err
			}
			if _, err := w.Write(b.s.data); err != nil {
				return err
			}
		case *coldBody:
			buf = binary.AppendUvarint(buf, uint64(len(b.f.name)))
			buf = append(buf, b.f.name...)
			buf = binary.AppendUvarint(buf, uint64(b.f.size))
		}
		if err := rows(win.frozen, win.delta); err != nil {
			return err
		}
	}
	return flush()
}

// maxImage bounds the body length a header may declare (1 TiB): beyond
// it the header is garbage, and Load does not try to read it.
const maxImage = 1 << 40

// Load replaces the tier's state with the image r holds (from WriteTo),
// opening the cold files it names in Options.Dir. It reads the whole
// image and checks its checksum, then every window (sealed windows block
// by block; cold files' headers, footers and indexes), and changes
// nothing unless all of it is sound. It never panics, whatever r holds.
// Jobs planned before Load are dropped by Finish. Call it under the write
// lock.
func (t *Tier[R]) Load(r io.Reader) error {
	data, nextGen, err := readImage(r, t.opts.WindowMillis)
	if err != nil {
		return err
	}
	st, err := t.parse(data)
	if err != nil {
		for _, w := range st.wins {
			switch b := w.body.(type) {
			case *coldBody:
				b.f.close()
			case *sealedBody:
				b.s.release(&t.arena)
			}
		}
		return err
	}
	for _, w := range t.wins {
		switch b := w.body.(type) {
		case *coldBody:
			t.obsolete = append(t.obsolete, &b.f.coldBase)
		case *sealedBody:
			b.s.release(&t.arena)
		}
	}
	t.wins, t.live = st.wins, st.live
	for _, w := range t.wins {
		if b, ok := w.body.(*sealedBody); ok {
			b.s.installed = true
		}
	}
	t.nextGen = max(t.nextGen, nextGen)
	t.epoch++
	t.trim()
	return nil
}

// readImage reads a snapshot image of a table of windows of millis ms
// and checks its header and checksum; it returns the body and the next
// file generation the image records.
func readImage(r io.Reader, millis int64) (body []byte, nextGen uint64, err error) {
	var hdr [bitpack.HeaderBytes]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, 0, bitpack.ReadErr(ErrCorrupt, "tier", "snapshot header", err)
	}
	f, err := bitpack.ParseHeader(hdr[:], snapMagic, "tier snapshot", snapVersion, ErrCorrupt)
	if err != nil {
		return nil, 0, err
	}
	bodyLen, imgMillis, nextGen := f[0], int64(f[1]), f[2]
	if bodyLen > maxImage {
		return nil, 0, fmt.Errorf("%w: snapshot body of %d bytes", ErrCorrupt, bodyLen)
	}
	if imgMillis != millis {
		return nil, 0, fmt.Errorf("tier: snapshot has windows of %d ms, this tier %d", imgMillis, millis)
	}
	var buf bytes.Buffer
	if n, err := io.CopyN(&buf, r, int64(bodyLen)+4); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, 0, fmt.Errorf("%w: snapshot truncated: %d of %d bytes", ErrCorrupt, n, bodyLen+4)
		}
		return nil, 0, fmt.Errorf("tier: read snapshot: %w", err)
	}
	b := buf.Bytes()
	data, sum := b[:bodyLen], le.Uint32(b[bodyLen:])
	if got := crc32.Checksum(data, castagnoli); got != sum {
		return nil, 0, fmt.Errorf("%w: snapshot checksum mismatch (computed %08x, stored %08x)", ErrCorrupt, got, sum)
	}
	return data, nextGen, nil
}

type loaded struct {
	wins []*window
	live int
}

func (t *Tier[R]) parse(data []byte) (st loaded, err error) {
	rd := bitpack.Reader{B: data, Corrupt: ErrCorrupt}
	fail := func(format string, args ...any) (loaded, error) {
		return st, fmt.Errorf("%w: snapshot: %s", ErrCorrupt, fmt.Sprintf(format, args...))
	}
	if tag := rd.Bytes(4); rd.Err == nil && [4]byte(tag) != t.tag {
		return fail("codec %q, this tier's is %q", tag, t.tag[:])
	}
	if c, d := rd.Byte(), rd.Byte(); rd.Err == nil && (int(c) != t.sh.cols || int(d) != t.sh.dense) {
		return fail("%d columns (%d dense), the codec has %d (%d)", c, d, t.sh.cols, t.sh.dense)
	}
	nw := rd.Uvarint()
	if rd.Err == nil && nw > uint64(len(rd.B)) {
		return fail("%d windows in %d bytes", nw, len(rd.B))
	}
	var row Row
	readRows := func(w *window) *openTable {
		n := rd.Uvarint()
		if rd.Err != nil || n > uint64(len(rd.B)) {
			if rd.Err == nil {
				rd.Err = fmt.Errorf("%w: snapshot: %d rows in %d bytes", ErrCorrupt, n, len(rd.B))
			}
			return nil
		}
		if n == 0 {
			return nil
		}
		tb := &openTable{}
		size, shift := sizeFor(int(n))
		tb.slots, tb.shift = make([]oslot, size), shift
		var prev uint64
		for i := range n {
			k := rd.Uvarint()
			for f := range t.cols {
				row[f] = rd.Uvarint()
			}
			if rd.Err != nil {
				return nil
			}
			if k == 0 || (i > 0 && k <= prev) || k-1 > w.last-w.lo {
				rd.Err = fmt.Errorf("%w: snapshot: window %d: row key %d out of order or range", ErrCorrupt, w.num, k)
				return nil
			}
			prev = k
			tb.put(k, &t.layout, &row)
		}
		return tb
	}
	lastNum := int64(0)
	for i := range nw {
		num := rd.Varint()
		n := rd.Uvarint()
		kind := Kind(rd.Byte())
		if rd.Err != nil {
			return st, rd.Err
		}
		if i > 0 && num <= lastNum {
			return fail("window %d after %d", num, lastNum)
		}
		lastNum = num
		lo, last := t.win.Start(num), t.win.Last(num)
		if num < 0 || t.win.End(num) <= 0 || lo > last {
			return fail("window number %d", num)
		}
		w := &window{num: num, lo: lo, last: last}
		base := 0
		switch kind {
		case Open:
			tb := readRows(w)
			if tb == nil {
				tb = newOpenTable()
			}
			w.body, base = &openBody{tb}, tb.n
		case Sealed:
			sz := rd.Uvarint()
			raw := rd.Bytes(sz)
			if rd.Err != nil {
				return st, rd.Err
			}
			s, err := newSegment(&t.arena, raw, t.tag, t.sh, true)
			if err != nil {
				return st, fmt.Errorf("snapshot: window %d: %w", num, err)
			}
			w.body, base = &sealedBody{s}, s.idx.Posts()
			if s.idx.Posts() > 0 && (s.idx.MinID() < lo || s.idx.MaxID() > last) {
				s.release(&t.arena)
				return fail("window %d holds ids outside it", num)
			}
		case Cold:
			name := string(rd.Bytes(rd.Uvarint()))
			size := rd.Uvarint()
			if rd.Err != nil {
				return st, rd.Err
			}
			if fnum, _, ok := parseFileName(t.opts.Prefix, name); !ok || fnum != num {
				return fail("window %d: file name %q", num, name)
			}
			if t.opts.Dir == "" {
				return fail("window %d is in file %s, and the tier has no Dir", num, name)
			}
			cf, err := openCold(t.opts.Dir, name, t.tag, t.sh, t.cache)
			if err != nil {
				return st, err
			}
			w.body = &coldBody{cf}
			st.wins = append(st.wins, w) // closed on failure
			if uint64(cf.size) != size {
				return fail("file %s is %d bytes, the snapshot says %d", name, cf.size, size)
			}
			if cf.idx.Posts() > 0 && (cf.idx.MinID() < lo || cf.idx.MaxID() > last) {
				return fail("file %s holds ids outside window %d", name, num)
			}
			st.wins = st.wins[:len(st.wins)-1]
			base = cf.idx.Posts()
		default:
			return fail("window %d of kind %d", num, kind)
		}
		st.wins = append(st.wins, w)
		w.delta = readRows(w)
		if rd.Err != nil {
			return st, rd.Err
		}
		if ob, ok := w.body.(*openBody); ok && w.delta != nil {
			// An open table a job was sealing when the image was taken:
			// its delta goes back into it.
			for _, k := range w.delta.sorted(&t.layout) {
				w.delta.get(k, &t.layout, &row)
				ob.t.put(k, &t.layout, &row)
			}
			w.delta, base = nil, ob.t.n
		}
		// The records: the base's and the delta's that are new.
		total := base
		if w.delta != nil {
			for _, k := range w.delta.sorted(&t.layout) {
				var scratch Row
				var ok bool
				var err error
				switch b := w.body.(type) {
				case *sealedBody:
					ok = b.s.get(w.lo+k-1, &scratch)
				case *coldBody:
					ok, err = b.f.get(w.lo+k-1, &scratch)
				}
				if err != nil {
					return st, err
				}
				if !ok {
					total++
				}
			}
		}
		if uint64(total) != n {
			return fail("window %d: %d records, the snapshot says %d", num, total, n)
		}
		w.n = total
		st.live += total
	}
	if rd.Err != nil {
		return st, rd.Err
	}
	if len(rd.B) != 0 {
		return fail("%d bytes after the last window", len(rd.B))
	}
	slices.SortFunc(st.wins, func(a, b *window) int { return cmp.Compare(a.num, b.num) })
	return st, nil
}
