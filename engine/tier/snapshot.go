package tier

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"slices"

	"github.com/tally-dev/tally/engine/bitpack"
	"github.com/tally-dev/tally/engine/snowflake"
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
	bw := newBodyWriter(w, t.tag, t.sh, len(t.wins))
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
		bw.uvarint(uint64(len(keys)))
		for _, k := range keys {
			for i := len(tables) - 1; i >= 0; i-- {
				if tables[i] != nil && tables[i].get(k, &t.layout, &row) {
					break
				}
			}
			bw.uvarint(k)
			for f := range t.cols {
				bw.uvarint(row[f])
			}
			if err := bw.spill(); err != nil {
				return err
			}
		}
		return nil
	}
	for _, win := range t.wins {
		bw.window(win.num, win.n, win.body.kind())
		switch b := win.body.(type) {
		case *openBody:
			if err := rows(b.t); err != nil {
				return err
			}
		case *sealedBody:
			if err := bw.image(b.s.data); err != nil {
				return err
			}
		case *coldBody:
			bw.file(&b.f.coldBase)
		}
		if err := rows(win.frozen, win.delta); err != nil {
			return err
		}
	}
	return bw.flush()
}

// bodyWriter writes a snapshot body, a post table's or a set's, in
// pieces of about 64 KiB: its head, then for each window its head, its
// base and its overlay.
type bodyWriter struct {
	w   io.Writer
	buf []byte
}

func newBodyWriter(w io.Writer, tag [4]byte, sh shape, windows int) *bodyWriter {
	bw := &bodyWriter{w: w, buf: make([]byte, 0, 64<<10)}
	bw.buf = append(bw.buf, tag[:]...)
	bw.buf = append(bw.buf, byte(sh.cols), byte(sh.dense))
	bw.uvarint(uint64(windows))
	return bw
}

func (bw *bodyWriter) uvarint(x uint64) { bw.buf = binary.AppendUvarint(bw.buf, x) }

func (bw *bodyWriter) flush() error {
	_, err := bw.w.Write(bw.buf)
	bw.buf = bw.buf[:0]
	return err
}

// spill flushes once the buffer holds 60 KiB.
func (bw *bodyWriter) spill() error {
	if len(bw.buf) >= 60<<10 {
		return bw.flush()
	}
	return nil
}

// window writes a window's head: number, records, form.
func (bw *bodyWriter) window(num int64, n int, k Kind) {
	bw.buf = binary.AppendVarint(bw.buf, num)
	bw.uvarint(uint64(n))
	bw.buf = append(bw.buf, byte(k))
}

// image writes a sealed window's image, its length first.
func (bw *bodyWriter) image(data []byte) error {
	bw.uvarint(uint64(len(data)))
	if err := bw.flush(); err != nil {
		return err
	}
	_, err := bw.w.Write(data)
	return err
}

// file writes a cold window's file name and size.
func (bw *bodyWriter) file(f *coldBase) {
	bw.uvarint(uint64(len(f.name)))
	bw.buf = append(bw.buf, f.name...)
	bw.uvarint(uint64(f.size))
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
	b, n, err := readBody(r, bodyLen+4)
	if err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, 0, fmt.Errorf("%w: snapshot truncated: %d of %d bytes", ErrCorrupt, n, bodyLen+4)
		}
		return nil, 0, fmt.Errorf("tier: read snapshot: %w", err)
	}
	data, sum := b[:bodyLen], le.Uint32(b[bodyLen:])
	if got := crc32.Checksum(data, castagnoli); got != sum {
		return nil, 0, fmt.Errorf("%w: snapshot checksum mismatch (computed %08x, stored %08x)", ErrCorrupt, got, sum)
	}
	return data, nextGen, nil
}

// exactBody is the largest body readBody allocates whole.
const exactBody = 1 << 31

// readBody reads the n bytes of an image body into one slice, allocated
// whole when n is at most exactBody (the header, checksummed, vouches for
// it; a byte buffer doubling its way there cost recovery three times the
// page faults and copies of the body), grown by doubling from there on, so
// that a length no stream holds costs at most twice what r holds. It
// returns how many bytes it read.
func readBody(r io.Reader, n uint64) ([]byte, uint64, error) {
	b := make([]byte, min(n, exactBody))
	for read := uint64(0); ; {
		m, err := io.ReadFull(r, b[read:])
		read += uint64(m)
		if err != nil {
			return nil, read, err
		}
		if read == n {
			return b, n, nil
		}
		b = append(b, make([]byte, min(n-read, uint64(len(b))))...)
	}
}

// parseBodyHead reads a snapshot body's head — tag, shape, windows — and
// checks it against the table's.
func parseBodyHead(rd *bitpack.Reader, tag [4]byte, sh shape) (windows uint64, err error) {
	if got := rd.Bytes(4); rd.Err == nil && [4]byte(got) != tag {
		return 0, fmt.Errorf("%w: snapshot: tag %q, this table's is %q", ErrCorrupt, got, tag[:])
	}
	if c, d := rd.Byte(), rd.Byte(); rd.Err == nil && (int(c) != sh.cols || int(d) != sh.dense) {
		return 0, fmt.Errorf("%w: snapshot: %d columns (%d dense), the table has %d (%d)", ErrCorrupt, c, d, sh.cols, sh.dense)
	}
	nw := rd.Uvarint()
	if rd.Err == nil && nw > uint64(len(rd.B)) {
		return 0, fmt.Errorf("%w: snapshot: %d windows in %d bytes", ErrCorrupt, nw, len(rd.B))
	}
	return nw, rd.Err
}

// parseWindowHead reads a window's head — number, records, form — and
// checks that the number follows prev (-1 for the first) and names a
// window of win.
func parseWindowHead(rd *bitpack.Reader, win snowflake.Windows, prev int64) (num int64, n uint64, kind Kind, err error) {
	num = rd.Varint()
	n = rd.Uvarint()
	kind = Kind(rd.Byte())
	switch {
	case rd.Err != nil:
		return 0, 0, 0, rd.Err
	case prev >= 0 && num <= prev:
		return 0, 0, 0, fmt.Errorf("%w: snapshot: window %d after %d", ErrCorrupt, num, prev)
	case num < 0 || win.End(num) <= 0 || win.Start(num) > win.Last(num):
		return 0, 0, 0, fmt.Errorf("%w: snapshot: window number %d", ErrCorrupt, num)
	}
	return num, n, kind, nil
}

// parseFileRef reads a cold window's file name and size and checks that
// the name is one of opts' prefix for window num, in a table with a Dir.
func parseFileRef(rd *bitpack.Reader, opts Options, num int64) (name string, size uint64, err error) {
	name = string(rd.Bytes(rd.Uvarint()))
	size = rd.Uvarint()
	if rd.Err != nil {
		return "", 0, rd.Err
	}
	if fnum, _, ok := parseFileName(opts.Prefix, name); !ok || fnum != num {
		return "", 0, fmt.Errorf("%w: snapshot: window %d: file name %q", ErrCorrupt, num, name)
	}
	if opts.Dir == "" {
		return "", 0, fmt.Errorf("%w: snapshot: window %d is in file %s, and the table has no Dir", ErrCorrupt, num, name)
	}
	return name, size, nil
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
	nw, err := parseBodyHead(&rd, t.tag, t.sh)
	if err != nil {
		return st, err
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
	lastNum := int64(-1)
	for range nw {
		num, n, kind, err := parseWindowHead(&rd, t.win, lastNum)
		if err != nil {
			return st, err
		}
		lastNum = num
		lo, last := t.win.Start(num), t.win.Last(num)
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
			name, size, err := parseFileRef(&rd, t.opts, num)
			if err != nil {
				return st, err
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
