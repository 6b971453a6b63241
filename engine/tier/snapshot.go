package tier

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"slices"
)

// The snapshot image of a table (WriteTo, Load), the post table's and a
// set's alike. All integers little-endian; uvarint and varint are
// encoding/binary's.
//
//	image   = header body CRC32C(body) uint32
//	header  = "TLYTIERS" | version uint32 (4) | 0 uint32 | body length uint64 |
//	          window millis uint64 | next file generation uint64 |
//	          CRC32C of the 40 bytes before it uint32                        (44 bytes)
//	body    = tag [4] | head | windows uvarint | window*                     windows in time order
//	head    = the shape's own state: the post table's kinds, nothing for a set
//	window  = num varint | records uvarint | kind uint8 | flags uint8 | forgot | base | overlay
//	flags   = bit 0: the window waits for the rewrite Scrub asked for
//	forgot  = count uvarint | (post id - window start, then the gap to the previous, uvarint)*
//	          the set's forgotten posts (Set.Forget), increasing
//	base    = open:   the shape's open entries
//	          sealed: length uvarint | window image
//	          cold:   name length uvarint | name | file size uvarint
//	overlay = the shape's overlay entries (the delta, and a running job's frozen one under it)
//
// The post table's entries (postshape.go) are rows, a set's (setshape.go)
// pairs, in the order their tables hold them, not sorted (which would
// cost a sorted copy of each open window to write).
const (
	snapMagic       = "TLYTIERS"
	snapVersion     = 5
	snapHeaderBytes = 44
)

// flagScrub marks a window waiting for its Scrub rewrite.
const flagScrub = 1

// maxImage bounds the body length a header may declare (1 TiB): beyond
// it the header is garbage, and Load does not try to read it.
const maxImage = 1 << 40

// WriteTo writes the table's image to w: every window's records or bytes,
// and the names of the cold files, which must outlive the image (Collect's
// keep). Call it under the read lock; it does not change the table. A
// snapshot that must stand alone, taken while the table takes writes, is
// a View's WriteTo (view.go).
func (t *table) WriteTo(w io.Writer) (int64, error) {
	wins := make([]windowImage, len(t.wins))
	for i, win := range t.wins {
		wins[i] = windowImage{num: win.num, lo: win.lo, n: win.n, body: win.body, frozen: win.frozen(), delta: win.delta,
			scrub: win.scrubbed(), forgot: win.forgot()}
	}
	return t.writeImageOf(w, t.shape.head(), wins, t.nextGen, false)
}

// windowImage is what an image holds of one window: its number and
// start, its records, its body and the overlays over it (either may be
// nil), and its erasure state: whether it waits for a Scrub rewrite, and
// a set's forgotten posts.
type windowImage struct {
	num           int64
	lo            uint64
	n             int
	body          body
	frozen, delta overlay
	scrub         bool
	forgot        []uint64
}

// writeImageOf writes the image of head and wins, windows of t in time
// order, with nextGen as the next file generation. With inline, a cold window is
// written as a sealed one, its file's bytes copied in (and its blocks'
// checksums checked on the way), so the image needs no file; otherwise by
// its name. The body is written twice, once to count its bytes for the
// header (a cold window's bytes are not read for that).
func (t *table) writeImageOf(w io.Writer, head func(*snapshotWriter), wins []windowImage, nextGen uint64, inline bool) (int64, error) {
	var cnt countWriter
	if err := t.writeBody(&cnt, head, wins, inline, true); err != nil {
		return 0, err
	}
	// The body comes in pieces of tens of KiB and more, which a bufio
	// writes through; it only gathers the small ones (header, window
	// headers between blocks).
	out := &imageOut{w: bufio.NewWriterSize(w, 16<<10)}
	out.write(appendSnapHeader(nil, [3]uint64{uint64(cnt.n), uint64(t.opts.WindowMillis), nextGen}))
	crc := crc32.New(castagnoli)
	if err := t.writeBody(&teeWriter{out: out, h: crc}, head, wins, inline, false); err != nil && out.err == nil {
		out.err = err
	}
	out.write(le.AppendUint32(nil, crc.Sum32()))
	if out.err == nil {
		out.err = out.w.Flush()
	}
	if out.err != nil {
		return out.n, fmt.Errorf("tier: write snapshot: %w", out.err)
	}
	return out.n, nil
}

func appendSnapHeader(dst []byte, fields [3]uint64) []byte {
	start := len(dst)
	dst = append(dst, snapMagic...)
	dst = le.AppendUint32(dst, snapVersion)
	dst = le.AppendUint32(dst, 0)
	for _, x := range fields {
		dst = le.AppendUint64(dst, x)
	}
	return le.AppendUint32(dst, crc32.Checksum(dst[start:], castagnoli))
}

// parseSnapHeader checks a snapshot header and returns its body length,
// window length and next file generation.
func parseSnapHeader(h []byte) (bodyLen uint64, millis int64, nextGen uint64, err error) {
	fail := func(format string, args ...any) (uint64, int64, uint64, error) {
		return 0, 0, 0, fmt.Errorf("%w: snapshot: %s", ErrCorrupt, fmt.Sprintf(format, args...))
	}
	switch {
	case len(h) < snapHeaderBytes || string(h[:8]) != snapMagic:
		return fail("not a tier snapshot (bad magic)")
	case crc32.Checksum(h[:40], castagnoli) != le.Uint32(h[40:]):
		return fail("header checksum mismatch (computed %08x, stored %08x)", crc32.Checksum(h[:40], castagnoli), le.Uint32(h[40:]))
	case le.Uint32(h[8:]) != snapVersion:
		return fail("format version %d, this build reads %d", le.Uint32(h[8:]), snapVersion)
	case le.Uint32(h[12:]) != 0:
		return fail("reserved header bytes are not zero")
	}
	return le.Uint64(h[16:]), int64(le.Uint64(h[24:])), le.Uint64(h[32:]), nil
}

// readSnapHeader reads and checks the header of the image r holds.
func readSnapHeader(r io.Reader) (hdr [snapHeaderBytes]byte, bodyLen uint64, millis int64, nextGen uint64, err error) {
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return hdr, 0, 0, 0, fmt.Errorf("%w: snapshot header: truncated: %w", ErrCorrupt, io.ErrUnexpectedEOF)
		}
		return hdr, 0, 0, 0, fmt.Errorf("tier: read snapshot header: %w", err)
	}
	bodyLen, millis, nextGen, err = parseSnapHeader(hdr[:])
	return hdr, bodyLen, millis, nextGen, err
}

// imageOut writes an image through a buffer, counting the bytes and
// keeping the first error, so that WriteTo checks once at the end.
type imageOut struct {
	w   *bufio.Writer
	n   int64
	err error
}

func (o *imageOut) write(b []byte) {
	if o.err != nil {
		return
	}
	n, err := o.w.Write(b)
	o.n += int64(n)
	o.err = err
}

type countWriter struct{ n int64 }

func (c *countWriter) Write(b []byte) (int, error) { c.n += int64(len(b)); return len(b), nil }

type teeWriter struct {
	out *imageOut
	h   hash.Hash32
}

func (t *teeWriter) Write(b []byte) (int, error) {
	t.h.Write(b)
	t.out.write(b)
	return len(b), t.out.err
}

// writeBody writes the body of the image of wins (see writeImageOf);
// counting says w only counts bytes, so a cold window inlined need not be
// read.
func (t *table) writeBody(w io.Writer, head func(*snapshotWriter), wins []windowImage, inline, counting bool) error {
	sw := &snapshotWriter{w: w, buf: make([]byte, 0, 64<<10)}
	sw.buf = append(sw.buf, t.image.tag[:]...)
	head(sw)
	sw.uvarint(uint64(len(wins)))
	for _, win := range wins {
		sw.buf = binary.AppendVarint(sw.buf, win.num)
		sw.uvarint(uint64(win.n))
		kind := win.body.kind()
		if kind == Cold && inline {
			kind = Sealed // its file's bytes are copied in
		}
		sw.buf = append(sw.buf, byte(kind))
		var flags byte
		if win.scrub {
			flags |= flagScrub
		}
		sw.buf = append(sw.buf, flags)
		sw.uvarint(uint64(len(win.forgot)))
		prev := win.lo
		for _, p := range win.forgot {
			sw.uvarint(p - prev)
			prev = p
		}
		switch b := win.body.(type) {
		case *sealedWindow:
			sw.uvarint(uint64(len(b.data)))
			if err := sw.flush(); err != nil {
				return err
			}
			if _, err := sw.w.Write(b.data); err != nil {
				return err
			}
		case *coldWindow:
			if !inline {
				sw.uvarint(uint64(len(b.name)))
				sw.buf = append(sw.buf, b.name...)
				sw.uvarint(uint64(b.size))
				break
			}
			sw.uvarint(uint64(b.size))
			if err := sw.flush(); err != nil {
				return err
			}
			if counting {
				sw.w.(*countWriter).n += b.size
				break
			}
			if err := t.copyCold(sw.w, b, &sw.cold); err != nil {
				return err
			}
		default:
			if err := t.shape.writeOpen(sw, b); err != nil {
				return err
			}
		}
		if err := t.shape.writeOverlay(sw, win.frozen, win.delta); err != nil {
			return err
		}
	}
	return sw.flush()
}

// snapshotWriter writes a snapshot body in pieces of about 64 KiB.
type snapshotWriter struct {
	w   io.Writer
	buf []byte
	// cold is copyCold's buffer, one for all the cold windows: most
	// windows of a table long in service are cold, and a buffer each
	// would be garbage the writers' collections pay for.
	cold []byte
}

func (sw *snapshotWriter) uvarint(x uint64) { sw.buf = binary.AppendUvarint(sw.buf, x) }

func (sw *snapshotWriter) flush() error {
	_, err := sw.w.Write(sw.buf)
	sw.buf = sw.buf[:0]
	return err
}

// spill flushes once the buffer holds 60 KiB: an entry writer calls it
// after each entry.
func (sw *snapshotWriter) spill() error {
	if len(sw.buf) >= 60<<10 {
		return sw.flush()
	}
	return nil
}

// snapshotReader decodes a snapshot body: every read is bounds-checked,
// and the first failure sticks in err (wrapping ErrCorrupt), so a parser
// reads on and checks once at the end.
type snapshotReader struct {
	b   []byte
	err error
}

func (sr *snapshotReader) fail(format string, args ...any) {
	if sr.err == nil {
		sr.err = fmt.Errorf("%w: snapshot: %s", ErrCorrupt, fmt.Sprintf(format, args...))
	}
}

func (sr *snapshotReader) uvarint() uint64 {
	if sr.err != nil {
		return 0
	}
	v, n := binary.Uvarint(sr.b)
	if n <= 0 {
		sr.fail("bad uvarint")
		return 0
	}
	sr.b = sr.b[n:]
	return v
}

func (sr *snapshotReader) varint() int64 {
	if sr.err != nil {
		return 0
	}
	v, n := binary.Varint(sr.b)
	if n <= 0 {
		sr.fail("bad varint")
		return 0
	}
	sr.b = sr.b[n:]
	return v
}

// bytes reads n bytes, aliasing the body.
func (sr *snapshotReader) bytes(n uint64) []byte {
	if sr.err != nil {
		return nil
	}
	if n > uint64(len(sr.b)) {
		sr.fail("%d bytes declared, %d left", n, len(sr.b))
		return nil
	}
	b := sr.b[:n]
	sr.b = sr.b[n:]
	return b
}

func (sr *snapshotReader) byte() byte {
	b := sr.bytes(1)
	if b == nil {
		return 0
	}
	return b[0]
}

// count reads an entry count, which cannot exceed the bytes left.
func (sr *snapshotReader) count(what string) uint64 {
	n := sr.uvarint()
	if sr.err == nil && n > uint64(len(sr.b)) {
		sr.fail("%d %s in %d bytes", n, what, len(sr.b))
		return 0
	}
	return n
}

// Load replaces the table's state with the image r holds (from WriteTo),
// opening the cold files it names in Options.Dir. It reads the whole
// image and checks its checksum, then every window (sealed windows block
// by block; cold files' headers, footers and indexes; each delta against
// its window), and changes nothing unless all of it is sound. It never
// panics, whatever r holds. Jobs planned before Load are dropped by
// Finish. Call it under the write lock.
func (t *table) Load(r io.Reader) error {
	if t.view != nil {
		return errors.New("tier: Load while a view is out")
	}
	data, nextGen, err := t.readImage(r)
	if err != nil {
		return err
	}
	wins, n, install, err := t.parse(data)
	if err != nil {
		for _, w := range wins {
			switch b := w.body.(type) {
			case *coldWindow:
				b.close()
			case *sealedWindow:
				b.release(&t.arena)
			}
		}
		return err
	}
	for _, w := range t.wins {
		t.retire(w.body)
	}
	t.wins, t.n = wins, n
	t.los = t.los[:0]
	for _, w := range wins {
		t.los = append(t.los, w.lo)
		if s, ok := w.body.(*sealedWindow); ok {
			s.installed = true
		}
	}
	if install != nil {
		install()
	}
	t.nextGen = max(t.nextGen, nextGen)
	t.jobs = 0
	t.epoch++
	t.trim()
	return nil
}

// readImage reads a snapshot image of a table of t's windows and checks
// its header and checksum; it returns the body and the next file
// generation the image records.
func (t *table) readImage(r io.Reader) (body []byte, nextGen uint64, err error) {
	_, bodyLen, millis, nextGen, err := readSnapHeader(r)
	if err != nil {
		return nil, 0, err
	}
	if bodyLen > maxImage {
		return nil, 0, fmt.Errorf("%w: snapshot body of %d bytes", ErrCorrupt, bodyLen)
	}
	if millis != t.opts.WindowMillis {
		return nil, 0, fmt.Errorf("tier: snapshot has windows of %d ms, this table %d", millis, t.opts.WindowMillis)
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
// it; a buffer doubling its way there costs recovery page faults and
// copies of the body several times over), grown by doubling from there
// on, so that a length no stream holds costs at most twice what r holds.
// It returns how many bytes it read.
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

// parse decodes a snapshot body into windows, their record total and
// what installs the shape's head. On failure the windows it returns hold
// what it opened (files, arena regions), for the caller to free.
func (t *table) parse(data []byte) (wins []*window, total int, install func(), err error) {
	sr := &snapshotReader{b: data}
	fail := func(format string, args ...any) ([]*window, int, func(), error) {
		return wins, 0, nil, fmt.Errorf("%w: snapshot: %s", ErrCorrupt, fmt.Sprintf(format, args...))
	}
	if tag := sr.bytes(4); sr.err == nil && [4]byte(tag) != t.image.tag {
		return fail("a table of %q, this one's is %q", tag, t.image.tag[:])
	}
	install = t.shape.readHead(sr)
	nw := sr.count("windows")
	lastNum := int64(-1)
	for range nw {
		num, n, kind := sr.varint(), sr.uvarint(), Kind(sr.byte())
		switch {
		case sr.err != nil:
			return wins, 0, nil, sr.err
		case lastNum >= 0 && num <= lastNum:
			return fail("window %d after %d", num, lastNum)
		case num < 0 || t.win.End(num) <= 0 || t.win.Start(num) > t.win.Last(num):
			return fail("window number %d", num)
		}
		lastNum = num
		w := &window{num: num, lo: t.win.Start(num), last: t.win.Last(num)}
		flags := sr.byte()
		nf := sr.count("forgotten posts")
		if sr.err == nil && flags&^flagScrub != 0 {
			return fail("window %d: flags %#x", num, flags)
		}
		w.setScrub(flags&flagScrub != 0)
		for i, prev := uint64(0), w.lo; i < nf && sr.err == nil; i++ {
			p := prev + sr.uvarint()
			if p < prev || p > w.last || (i > 0 && p == prev) {
				return fail("window %d: forgotten post out of order or range", num)
			}
			w.lifeOf().forgot = append(w.lifeOf().forgot, p)
			prev = p
		}
		if sr.err != nil {
			return wins, 0, nil, sr.err
		}
		switch kind {
		case Open:
			w.body = t.shape.readOpen(sr, w)
			if sr.err != nil {
				return wins, 0, nil, sr.err
			}
		case Sealed:
			raw := sr.bytes(sr.uvarint())
			if sr.err != nil {
				return wins, 0, nil, sr.err
			}
			s, err := t.newSealed(raw, true)
			if err != nil {
				return wins, 0, nil, fmt.Errorf("snapshot: window %d: %w", num, err)
			}
			w.body = s
			wins = append(wins, w) // freed on failure
			if s.idx.records > 0 && (s.idx.minID < w.lo || s.idx.maxID > w.last) {
				return fail("window %d holds ids outside it", num)
			}
			wins = wins[:len(wins)-1]
		case Cold:
			name := string(sr.bytes(sr.uvarint()))
			size := sr.uvarint()
			if sr.err != nil {
				return wins, 0, nil, sr.err
			}
			if fnum, _, ok := parseFileName(t.opts.Prefix, name); !ok || fnum != num {
				return fail("window %d: file name %q", num, name)
			}
			if t.opts.Dir == "" {
				return fail("window %d is in file %s, and the table has no Dir", num, name)
			}
			f, err := t.openCold(name)
			if err != nil {
				return wins, 0, nil, err
			}
			w.body = f
			wins = append(wins, w) // closed on failure
			if uint64(f.size) != size {
				return fail("file %s is %d bytes, the snapshot says %d", name, f.size, size)
			}
			if f.idx.records > 0 && (f.idx.minID < w.lo || f.idx.maxID > w.last) {
				return fail("file %s holds ids outside window %d", name, num)
			}
			wins = wins[:len(wins)-1]
		default:
			return fail("window %d of kind %d", num, kind)
		}
		wins = append(wins, w)
		o, records, err := t.shape.readOverlay(sr, w)
		if err != nil {
			return wins, 0, nil, err
		}
		if uint64(records) != n {
			return fail("window %d: %d records, the snapshot says %d", num, records, n)
		}
		if o != nil && w.body.kind() == Open {
			// An open table a job was sealing when the image was
			// taken: its delta goes back into it.
			t.shape.foldInto(w.body, o)
			o = nil
		}
		w.delta, w.n = o, records
		total += records
	}
	if sr.err != nil {
		return wins, 0, nil, sr.err
	}
	if len(sr.b) != 0 {
		return fail("%d bytes after the last window", len(sr.b))
	}
	slices.SortFunc(wins, func(a, b *window) int { return cmp.Compare(a.num, b.num) })
	return wins, total, install, nil
}

// loadAnyWindow is LoadAnyWindow for a table of either shape: an image
// of t's window length is loaded as Load does; another one, t being
// empty, is loaded into a table of the image's windows (newOther, with
// options that move no window anywhere) and fill copies its records
// into t.
func loadAnyWindow[T interface {
	Load(io.Reader) error
	Close() error
}](t *table, r io.Reader, newOther func(Options) (T, error), fill func(T) (err, rangeErr error)) error {
	hdr, _, millis, _, err := readSnapHeader(r)
	if err != nil {
		return err
	}
	whole := io.MultiReader(bytes.NewReader(hdr[:]), r)
	switch {
	case millis == t.opts.WindowMillis:
		return t.Load(whole)
	case millis < 1 || millis > 1<<34:
		return fmt.Errorf("%w: snapshot has windows of %d ms", ErrCorrupt, millis)
	case len(t.wins) != 0:
		return fmt.Errorf("tier: an image of %d ms windows loads only into an empty table of %d ms windows", millis, t.opts.WindowMillis)
	}
	opts := t.opts
	opts.WindowMillis, opts.MemoryBudget, opts.ColdAge = millis, 0, 0
	other, err := newOther(opts)
	if err != nil {
		return err
	}
	defer other.Close()
	if err := other.Load(whole); err != nil {
		return err
	}
	return errors.Join(fill(other))
}
