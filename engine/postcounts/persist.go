package postcounts

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"os"
	"path/filepath"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/bitpack"
	"github.com/tally-dev/tally/engine/cold"
	"github.com/tally-dev/tally/engine/sealed"
)

// The serialized form of a store (format version 1), written by WriteTo
// and read by Load. All fixed-size integers are little-endian; uvarint
// and varint are encoding/binary's.
//
//	store   = header window*
//	header  = "TLYPOSTC" | version uint32 (1) | reserved uint32 (0) |
//	          window millis uint64 | next file generation uint64 |
//	          windows uint64 | CRC32C of the 40 bytes before it uint32
//	window  = body length uint64 | body | CRC32C(body) uint32
//	body    = number uvarint | kind uint8 | base | delta
//	base    = kind 1 (open):   n uvarint, n × (key uvarint, 5 × count uvarint)
//	          kind 2 (sealed): length uvarint, the sealed window's bytes
//	          kind 3 (cold):   name length uvarint, file name (base name),
//	                           file size uvarint, posts uvarint
//	delta   = n uvarint, n × (key uvarint, 5 × count varint)
//
// Windows come in increasing number; a key is the id minus the first id
// of its window; counts are in engine.Counts order. The bytes of a window
// are checksummed before any of them is parsed, and a sealed window's own
// checksums are checked again (sealed.Unmarshal); a cold file is opened
// and checked against its size, posts and id range. The format is
// self-delimiting, so a caller may embed it in a larger stream: Load
// reads exactly the bytes WriteTo wrote.
const (
	persistMagic   = "TLYPOSTC"
	persistVersion = 1
	headerBytes    = bitpack.HeaderBytes

	kindOpen   = 1
	kindSealed = 2
	kindCold   = 3

	// maxBody bounds a window's declared size: a corrupt length must not
	// make Load try to read terabytes before it notices.
	maxBody = 1 << 40
)

// ErrCorrupt is wrapped by every error about bytes that are not a valid
// serialized store.
var ErrCorrupt = errors.New("postcounts: corrupt snapshot")

func corrupt(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrCorrupt, fmt.Sprintf(format, args...))
}

var (
	castagnoli = crc32.MakeTable(crc32.Castagnoli)
	le         = binary.LittleEndian
)

// A Snapshot is a point-in-time copy of a Store that can be written with
// no lock held: the open tables and deltas are copied (flat slices, so
// a memcpy), the sealed windows are shared (they are immutable) and the
// cold files are listed by path. The files must be kept (see
// RemoveUnreferenced) until the snapshot written from it is no longer
// needed.
type Snapshot struct {
	windowMillis int64
	nextGen      uint64
	wins         []snapWindow
	inline       bool
}

// SelfContained makes WriteTo copy each cold window's file into the
// output as a sealed window (the bytes of a cold file are those of a
// sealed window), so that the output loads without the files: for
// snapshots kept apart from the store's directory. It returns p.
func (p *Snapshot) SelfContained() *Snapshot {
	p.inline = true
	return p
}

type snapWindow struct {
	num       int64
	open      *narrow
	sealed    *sealed.Window
	coldPath  string
	coldSize  int64
	coldPosts int
	delta     *narrow // frozen + live, or nil
}

// Snapshot copies the store's state. It only reads the store: it may run
// under a read lock, concurrently with other readers and running jobs.
func (s *Store) Snapshot() *Snapshot {
	p := &Snapshot{windowMillis: s.opts.WindowMillis, nextGen: s.nextGen, wins: make([]snapWindow, 0, len(s.wins))}
	for _, w := range s.wins {
		sw := snapWindow{num: w.num, sealed: w.sealed}
		switch {
		case w.open != nil:
			sw.open = w.open.clone()
		case w.cold != nil:
			sw.coldPath, sw.coldSize, sw.coldPosts = w.coldPath, w.cold.Size(), w.cold.Len()
		}
		if w.frozen != nil || w.delta != nil {
			sw.delta = combine(w.frozen, w.delta, s.lay)
		}
		p.wins = append(p.wins, sw)
	}
	return p
}

// Files returns the paths of the cold files the snapshot lists.
func (p *Snapshot) Files() []string {
	var fs []string
	for _, w := range p.wins {
		if w.coldPath != "" {
			fs = append(fs, w.coldPath)
		}
	}
	return fs
}

// WriteTo writes the store's state (see Snapshot) to w.
func (s *Store) WriteTo(w io.Writer) (int64, error) { return s.Snapshot().WriteTo(w) }

// WriteTo writes the snapshot in the format documented above.
func (p *Snapshot) WriteTo(w io.Writer) (int64, error) {
	cw := bitpack.NewImageWriter(w)
	var hdr []byte
	hdr = bitpack.AppendHeader(hdr, persistMagic, persistVersion, [3]uint64{uint64(p.windowMillis), p.nextGen, uint64(len(p.wins))})
	cw.Write(hdr)
	var head, tail []byte
	for i := range p.wins {
		sw := &p.wins[i]
		head = binary.AppendUvarint(head[:0], uint64(sw.num))
		var mid []byte
		switch {
		case sw.open != nil:
			head = append(head, kindOpen)
			head = appendEntries(head, sw.open, false)
		case sw.sealed != nil:
			head = append(head, kindSealed)
			mid = sw.sealed.Bytes()
			head = binary.AppendUvarint(head, uint64(len(mid)))
		case p.inline:
			b, err := os.ReadFile(sw.coldPath)
			if err == nil && int64(len(b)) != sw.coldSize {
				err = fmt.Errorf("%s has %d bytes, the store knows %d", sw.coldPath, len(b), sw.coldSize)
			}
			if err != nil {
				cw.Fail(err)
				return cw.Finish("postcounts")
			}
			head = append(head, kindSealed)
			mid = b
			head = binary.AppendUvarint(head, uint64(len(mid)))
		default:
			head = append(head, kindCold)
			name := filepath.Base(sw.coldPath)
			head = binary.AppendUvarint(head, uint64(len(name)))
			head = append(head, name...)
			head = binary.AppendUvarint(head, uint64(sw.coldSize))
			head = binary.AppendUvarint(head, uint64(sw.coldPosts))
		}
		tail = tail[:0]
		if sw.delta != nil {
			tail = appendEntries(tail, sw.delta, true)
		} else {
			tail = binary.AppendUvarint(tail, 0)
		}
		var n [8]byte
		le.PutUint64(n[:], uint64(len(head)+len(mid)+len(tail)))
		crc := crc32.Update(crc32.Update(crc32.Checksum(head, castagnoli), castagnoli, mid), castagnoli, tail)
		cw.Write(n[:])
		cw.Write(head)
		cw.Write(mid)
		cw.Write(tail)
		cw.Write(le.AppendUint32(n[:0], crc))
	}
	return cw.Finish("postcounts")
}

func appendEntries(dst []byte, t *narrow, signed bool) []byte {
	dst = binary.AppendUvarint(dst, uint64(t.len()))
	t.each(func(k uint64, v vals) bool {
		dst = binary.AppendUvarint(dst, k)
		for _, x := range v {
			if signed {
				dst = binary.AppendVarint(dst, x)
			} else {
				dst = binary.AppendUvarint(dst, uint64(x))
			}
		}
		return true
	})
	return dst
}

// Load replaces the store's contents with a state WriteTo wrote, reading
// exactly those bytes from r. Cold files are looked up by name in dir
// ("" means Options.Dir). A snapshot of another window size loads into an
// empty store only, re-partitioned through Import.
// Every byte is checked (see the format); on any error the store is left
// as it was and the error wraps ErrCorrupt, or is the I/O or cold-file
// error that stopped it. Load needs the same exclusive access as Add;
// jobs planned before it are discarded by Finish.
func (s *Store) Load(r io.Reader, dir string) error {
	if dir == "" {
		dir = s.opts.Dir
	}
	var hdr [headerBytes]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return readErr("header", err)
	}
	f, err := bitpack.ParseHeader(hdr[:], persistMagic, "post-count snapshot", persistVersion, ErrCorrupt)
	if err != nil {
		return err
	}
	nextGen, nwin := f[1], f[2]
	if wm := int64(f[0]); wm != s.opts.WindowMillis {
		return s.loadResized(r, dir, wm, nwin)
	}
	return s.loadWindows(r, dir, nextGen, nwin)
}

// loadResized loads a snapshot whose windows are not the store's (the
// operator changed the window size): into a store of its own window
// size, from which the counts are imported, re-partitioned.
func (s *Store) loadResized(r io.Reader, dir string, wm int64, nwin uint64) error {
	if wm < 1 || wm > MaxWindowMillis {
		return corrupt("window size %d ms", wm)
	}
	if s.live > 0 || len(s.wins) > 0 {
		return errors.New("postcounts: Load of a snapshot with other windows needs an empty store")
	}
	o := s.opts
	o.WindowMillis, o.Dir = wm, ""
	tmp, err := New(o)
	if err != nil {
		return err
	}
	if err := tmp.loadWindows(r, dir, 0, nwin); err != nil {
		return err
	}
	return s.Import(func(yield func(uint64, engine.Counts) bool) {
		tmp.Range(func(id uint64, c engine.Counts) bool { return yield(id, c) })
	})
}

func (s *Store) loadWindows(r io.Reader, dir string, nextGen, nwin uint64) error {
	ld := &loader{s: s, dir: dir}
	var body bytes.Buffer
	for i := uint64(0); i < nwin; i++ {
		var n [8]byte
		if _, err := io.ReadFull(r, n[:]); err != nil {
			ld.close()
			return readErr(fmt.Sprintf("window %d of %d", i, nwin), err)
		}
		size := le.Uint64(n[:])
		if size > maxBody {
			ld.close()
			return corrupt("window %d claims %d bytes", i, size)
		}
		body.Reset()
		// CopyN grows the buffer as bytes arrive: a corrupt length fails
		// at the end of the stream, not in an allocation.
		if _, err := io.CopyN(&body, r, int64(size)); err != nil {
			ld.close()
			return readErr(fmt.Sprintf("window %d of %d", i, nwin), err)
		}
		if _, err := io.ReadFull(r, n[:4]); err != nil {
			ld.close()
			return readErr(fmt.Sprintf("window %d of %d", i, nwin), err)
		}
		if got, want := crc32.Checksum(body.Bytes(), castagnoli), le.Uint32(n[:]); got != want {
			ld.close()
			return corrupt("window %d checksum mismatch (computed %08x, stored %08x)", i, got, want)
		}
		// The sealed bytes are kept by the window: the body is not reused.
		b := body.Bytes()
		body = bytes.Buffer{}
		if err := ld.window(b); err != nil {
			ld.close()
			return fmt.Errorf("postcounts: window %d of %d: %w", i, nwin, err)
		}
	}
	s.Close()
	s.wins, s.los, s.live = ld.wins, ld.los, ld.live
	s.epoch++
	s.nextGen = max(s.nextGen, nextGen)
	if s.opts.Dir != "" {
		return s.scanGen()
	}
	return nil
}

// readErr reports a failed read of the image (bitpack.ReadErr).
func readErr(what string, err error) error {
	return bitpack.ReadErr(ErrCorrupt, "postcounts", what, err)
}

// loader builds the windows of a snapshot being loaded.
type loader struct {
	s    *Store
	dir  string
	wins []*window
	los  []uint64
	live int
}

func (ld *loader) close() {
	for _, w := range ld.wins {
		if w.cold != nil {
			w.cold.Close()
		}
	}
}

// window parses one window body and appends the window.
func (ld *loader) window(b []byte) error {
	s := ld.s
	r := &bitpack.Reader{B: b, Corrupt: ErrCorrupt}
	num := r.Uvarint()
	if r.Err != nil {
		return r.Err
	}
	if minNum, _, _ := s.windowOf(0); num < uint64(minNum) || num > uint64(s.maxWindow()) {
		return corrupt("window number %d outside the id space", num)
	}
	if n := len(ld.wins); n > 0 && int64(num) <= ld.wins[n-1].num {
		return corrupt("window %d after window %d", num, ld.wins[n-1].num)
	}
	w := &window{num: int64(num), lo: s.rawStart(int64(num)), last: s.rawLast(int64(num))}
	switch kind := r.Byte(); kind {
	case kindOpen:
		w.open = newNarrow(s.lay, false)
		if err := ld.entries(r, w, w.open, false); err != nil {
			return err
		}
	case kindSealed:
		data := r.Bytes(r.Uvarint())
		if r.Err != nil {
			return r.Err
		}
		sw, err := sealed.Unmarshal(data)
		if err != nil {
			return err
		}
		if x := sw.Index(); x.Posts() > 0 && (x.MinID() < w.lo || x.MaxID() > w.last) {
			return corrupt("sealed window holds ids [%d, %d] outside its window [%d, %d]", x.MinID(), x.MaxID(), w.lo, w.last)
		}
		w.sealed = sw
	case kindCold:
		name := string(r.Bytes(r.Uvarint()))
		size, posts := r.Uvarint(), r.Uvarint()
		if r.Err != nil {
			return r.Err
		}
		if g, ok := parseColdName(name); !ok || coldName(int64(num), g) != name {
			return corrupt("cold file name %q is not one of window %d's", name, num)
		}
		path := filepath.Join(ld.dir, name)
		f, err := cold.Open(path, s.cache)
		if err != nil {
			return err
		}
		x := f.Index()
		if uint64(f.Size()) != size || uint64(f.Len()) != posts || (x.Posts() > 0 && (x.MinID() < w.lo || x.MaxID() > w.last)) {
			f.Close()
			return fmt.Errorf("%w: cold file %s is not the one the snapshot lists (%d bytes, %d posts; want %d, %d)",
				ErrCorrupt, path, f.Size(), f.Len(), size, posts)
		}
		w.cold, w.coldPath = f, path
	default:
		if r.Err != nil {
			return r.Err
		}
		return corrupt("unknown window kind %d", kind)
	}
	// Append before the delta so that close() releases a cold file if the
	// delta is bad.
	ld.wins = append(ld.wins, w)
	ld.los = append(ld.los, w.lo)
	delta := newNarrow(s.lay, true)
	if err := ld.entries(r, w, delta, true); err != nil {
		return err
	}
	if len(r.B) != 0 {
		return corrupt("%d bytes after the window's delta", len(r.B))
	}
	w.live = baseLen(w)
	var err error
	delta.each(func(k uint64, d vals) bool {
		var b vals
		if b, err = s.base(w, w.lo+k); err != nil {
			return false
		}
		for f := range b {
			if d[f] < -b[f] || d[f] > math.MaxInt64-b[f] {
				err = corrupt("delta %d of post %d takes count %d out of range", d[f], w.lo+k, b[f])
				return false
			}
		}
		nv := add(b, d)
		if w.open != nil {
			w.open.put(k, &nv)
			return true
		}
		was, is := b != (vals{}), nv != (vals{})
		switch {
		case was && !is:
			w.live--
		case !was && is:
			w.live++
		}
		return true
	})
	if err != nil {
		return err
	}
	if w.open != nil {
		w.live = w.open.len()
	} else if delta.len() > 0 {
		w.delta = delta
	}
	ld.live += w.live
	return nil
}

// entries reads a list of posts into t, checking keys and counts.
func (ld *loader) entries(r *bitpack.Reader, w *window, t *narrow, signed bool) error {
	n := r.Uvarint()
	maxKey := w.last - w.lo
	// Size the table once: an entry takes at least 6 bytes, which bounds
	// what a corrupt n can make us allocate.
	if hint := min(n, uint64(len(r.B)/6)); hint > 0 && t.len() == 0 {
		t.rehash(int(hint))
	}
	for i := uint64(0); i < n && r.Err == nil; i++ {
		k := r.Uvarint()
		var v vals
		for f := range v {
			if signed {
				v[f] = r.Varint()
			} else {
				x := r.Uvarint()
				if x > math.MaxInt64 {
					return corrupt("count %d out of range", x)
				}
				v[f] = int64(x)
			}
		}
		if r.Err != nil {
			break
		}
		switch {
		case k > maxKey:
			return corrupt("key %d outside a window whose last key is %d", k, maxKey)
		case v == vals{}:
			return corrupt("post %d stored with zero counts", w.lo+k)
		}
		if _, dup := t.find(k); dup {
			return corrupt("post %d listed twice", w.lo+k)
		}
		t.put(k, &v)
	}
	return r.Err
}
