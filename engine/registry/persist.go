package registry

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"time"

	"github.com/tally-dev/tally/engine/bitpack"
)

// The serialized form of a registry (format version 1), written by
// WriteTo and read by Load. Fixed-size integers are little-endian;
// uvarint is encoding/binary's.
//
//	image  = header window*
//	header = "TLYREGST" | version uint32 (1) | reserved uint32 (0) |
//	         window millis uint64 | windows uint64 | posts uint64 |
//	         CRC32C of the 40 bytes before it uint32
//	window = body length uint64 | body | CRC32C(body) uint32
//	body   = number uvarint | posts uvarint | blocks uvarint |
//	         [blocks > 0: run posts uvarint |
//	                      blocks × (first gap uvarint, length uvarint) |
//	                      the blocks' bytes, back to back] |
//	         open uvarint | open × (key gap uvarint, author uvarint)
//
// Windows come in increasing number, each with its distinct posts. The
// blocks are the run's (run's format) whether the window is sealed in
// memory or cold: a cold file's blocks are copied in, so the image needs
// no file and a load installs runs without re-encoding them. A block's
// first gap is its first id minus the window's first id (first block) or
// minus the previous block's first id, minus one; the open entries (open
// and frozen tables merged, an entry overriding the run's post of the
// same id) are key-sorted and their gap is key minus the previous key
// minus one (the first: the key itself), a key being id minus the
// window's first id.
//
// Load trusts nothing: each window's checksum is checked before it is
// parsed, then every block completely (checkBlock: header bounds, keys
// increasing, ids in the window, blocks in order), the open keys
// increasing within the window, and the posts counts against what was
// parsed; so that a lookup on loaded data stays in bounds and answers as
// Range does even if a bug wrote garbage under a valid checksum. The form
// is self-delimiting: Load reads exactly the bytes WriteTo wrote.
const (
	persistMagic   = "TLYREGST"
	persistVersion = 1
	headerBytes    = bitpack.HeaderBytes
	// maxBody bounds a window's declared size before any of it is read.
	maxBody = 1 << 40
)

// A Snapshot is a point-in-time copy of a Registry that can be written
// with no lock held: open entries are copied (sorted), runs are shared
// (immutable), cold files are held open (a compaction that supersedes
// one deletes it only after the snapshot's Close).
type Snapshot struct {
	windowMillis int64
	posts        int
	wins         []snapWindow
}

type snapWindow struct {
	num, live int
	lo        uint64
	sealed    *run
	cold      *coldFile
	over      []slot
}

// Snapshot copies the registry's state. It only reads: it may run under a
// read lock shared with Get. The snapshot must be Closed.
func (r *Registry) Snapshot() *Snapshot {
	p := &Snapshot{windowMillis: r.opts.WindowMillis, posts: r.live, wins: make([]snapWindow, 0, len(r.wins))}
	for _, w := range r.wins {
		sw := snapWindow{num: int(w.num), live: w.live, lo: w.lo, sealed: w.sealed, cold: w.cold, over: w.overrides()}
		if sw.cold != nil {
			sw.cold.acquire()
		}
		p.wins = append(p.wins, sw)
	}
	return p
}

// Close lets go of the cold files the snapshot holds.
func (p *Snapshot) Close() {
	for i := range p.wins {
		if cf := p.wins[i].cold; cf != nil {
			cf.release()
			p.wins[i].cold = nil
		}
	}
}

// WriteTo writes the registry's state (Snapshot, WriteTo, Close) to w; it
// needs the access Get needs for its whole length.
func (r *Registry) WriteTo(w io.Writer) (int64, error) {
	p := r.Snapshot()
	defer p.Close()
	return p.WriteTo(w)
}

// WriteTo writes the snapshot in the format documented above. A cold
// block that fails its checks stops it with an error wrapping ErrCorrupt:
// the image is never written from damaged data.
func (p *Snapshot) WriteTo(w io.Writer) (int64, error) {
	cw := bitpack.NewImageWriter(w)
	cw.Write(bitpack.AppendHeader(nil, persistMagic, persistVersion, [3]uint64{uint64(p.windowMillis), uint64(len(p.wins)), uint64(p.posts)}))
	var head, tail []byte
	for i := range p.wins {
		sw := &p.wins[i]
		head = binary.AppendUvarint(head[:0], uint64(sw.num))
		head = binary.AppendUvarint(head, uint64(sw.live))
		var dataLen uint64
		switch {
		case sw.sealed != nil:
			s := sw.sealed
			head = binary.AppendUvarint(head, uint64(len(s.firsts)))
			head = binary.AppendUvarint(head, uint64(s.n))
			for b, first := range s.firsts {
				head = appendFirst(head, b, first, sw.lo, s.firsts)
				head = binary.AppendUvarint(head, uint64(len(s.block(b))))
			}
			dataLen = uint64(len(s.data))
		case sw.cold != nil:
			cf := sw.cold
			head = binary.AppendUvarint(head, uint64(len(cf.firsts)))
			head = binary.AppendUvarint(head, uint64(cf.n))
			for b, first := range cf.firsts {
				head = appendFirst(head, b, first, sw.lo, cf.firsts)
				n := cf.offs[b+1] - cf.offs[b] - 4
				head = binary.AppendUvarint(head, n)
				dataLen += n
			}
		default:
			head = binary.AppendUvarint(head, 0)
		}
		tail = binary.AppendUvarint(tail[:0], uint64(len(sw.over)))
		for k, s := range sw.over {
			gap := s.key
			if k > 0 {
				gap = s.key - sw.over[k-1].key - 1
			}
			tail = binary.AppendUvarint(binary.AppendUvarint(tail, gap), s.author)
		}
		var n [8]byte
		cw.Write(le.AppendUint64(n[:0], uint64(len(head))+dataLen+uint64(len(tail))))
		crc := crc32.Checksum(head, castagnoli)
		cw.Write(head)
		switch {
		case sw.sealed != nil:
			crc = crc32.Update(crc, castagnoli, sw.sealed.data)
			cw.Write(sw.sealed.data)
		case sw.cold != nil:
			_, err := sw.cold.blocks(func(_ uint64, blk []byte) bool {
				crc = crc32.Update(crc, castagnoli, blk)
				cw.Write(blk)
				return cw.Err == nil
			})
			if err != nil {
				cw.Fail(err)
			}
		}
		crc = crc32.Update(crc, castagnoli, tail)
		cw.Write(tail)
		cw.Write(le.AppendUint32(n[:0], crc))
	}
	return cw.Finish("registry")
}

// appendFirst appends block b's first gap (see the format).
func appendFirst(dst []byte, b int, first, lo uint64, firsts []uint64) []byte {
	if b == 0 {
		return binary.AppendUvarint(dst, first-lo)
	}
	return binary.AppendUvarint(dst, first-firsts[b-1]-1)
}

// Load replaces the registry's contents with an image WriteTo wrote,
// reading exactly its bytes from rd. Every byte is checked (see the
// format); on any error the registry is left as it was and the error
// wraps ErrCorrupt, or is the reader's. An image of another window size
// (the operator changed it) loads into an empty registry only,
// re-partitioned through a Loader at now; with the same window size now
// is not used, and open windows past OpenAge are sealed by the next Plan.
// Load needs the same exclusive access as Put; jobs planned before it are
// discarded by their Finish.
func (r *Registry) Load(rd io.Reader, now time.Time) error {
	var hdr [headerBytes]byte
	if _, err := io.ReadFull(rd, hdr[:]); err != nil {
		return readErr("header", err)
	}
	f, err := bitpack.ParseHeader(hdr[:], persistMagic, "registry image", persistVersion, ErrCorrupt)
	if err != nil {
		return err
	}
	wm, nwin, posts := int64(f[0]), f[1], f[2]
	if wm < 1 || wm > 1<<34 {
		return corrupt("window size %d ms", wm)
	}
	if wm == r.opts.WindowMillis {
		ld, err := r.loadWindows(rd, nwin, posts)
		if err != nil {
			return err
		}
		for _, w := range r.wins {
			if w.cold != nil {
				w.cold.release()
			}
		}
		r.wins, r.los, r.live = ld.wins, ld.los, ld.live
		r.epoch++
		return nil
	}
	if r.live > 0 || len(r.wins) > 0 {
		return fmt.Errorf("registry: Load of an image with %d ms windows (this registry's: %d) needs an empty registry", wm, r.opts.WindowMillis)
	}
	tmp, err := New(Options{WindowMillis: wm, OpenAge: -1})
	if err != nil {
		return err
	}
	ld, err := tmp.loadWindows(rd, nwin, posts)
	if err != nil {
		return err
	}
	tmp.wins, tmp.los, tmp.live = ld.wins, ld.los, ld.live
	l := r.NewLoader(now)
	tmp.Range(func(id, author uint64) bool { // in memory: cannot fail
		l.Add(id, author)
		return true
	})
	l.Close()
	r.epoch++
	return nil
}

// readErr reports a failed read of the image (bitpack.ReadErr).
func readErr(what string, err error) error { return bitpack.ReadErr(ErrCorrupt, "registry", what, err) }

// loaded is the windows of an image being loaded, installed only once all
// of them passed.
type loaded struct {
	wins []*window
	los  []uint64
	live int
}

func (r *Registry) loadWindows(rd io.Reader, nwin, posts uint64) (*loaded, error) {
	ld := &loaded{}
	for i := uint64(0); i < nwin; i++ {
		var n [8]byte
		if _, err := io.ReadFull(rd, n[:]); err != nil {
			return nil, readErr(fmt.Sprintf("window %d of %d", i, nwin), err)
		}
		size := le.Uint64(n[:])
		if size > maxBody {
			return nil, corrupt("window %d claims %d bytes", i, size)
		}
		body, err := readBody(rd, size)
		if err != nil {
			return nil, readErr(fmt.Sprintf("window %d of %d", i, nwin), err)
		}
		if _, err := io.ReadFull(rd, n[:4]); err != nil {
			return nil, readErr(fmt.Sprintf("window %d of %d", i, nwin), err)
		}
		if got, want := crc32.Checksum(body, castagnoli), le.Uint32(n[:]); got != want {
			return nil, corrupt("window %d checksum mismatch (computed %08x, stored %08x)", i, got, want)
		}
		var prev *window
		if len(ld.wins) > 0 {
			prev = ld.wins[len(ld.wins)-1]
		}
		w, err := r.parseWindow(body, prev)
		if err != nil {
			return nil, fmt.Errorf("registry: window %d of %d: %w", i, nwin, err)
		}
		ld.wins = append(ld.wins, w)
		ld.los = append(ld.los, w.lo)
		ld.live += w.live
	}
	if uint64(ld.live) != posts {
		return nil, corrupt("image holds %d posts, its header says %d", ld.live, posts)
	}
	return ld, nil
}

// readBody reads n bytes into a slice with bitpack.Slack bytes of spare
// capacity (the runs loaded from it keep it). It starts small and doubles
// as bytes arrive, so a corrupt length fails at the end of the stream,
// not in an allocation.
func readBody(rd io.Reader, n uint64) ([]byte, error) {
	b := make([]byte, 0, min(n, 64<<10)+bitpack.Slack)
	for uint64(len(b)) < n {
		if cap(b)-len(b) <= bitpack.Slack {
			nb := make([]byte, len(b), min(n, 2*uint64(len(b)))+bitpack.Slack)
			copy(nb, b)
			b = nb
		}
		k := min(n-uint64(len(b)), uint64(cap(b)-len(b)-bitpack.Slack))
		if _, err := io.ReadFull(rd, b[len(b):uint64(len(b))+k]); err != nil {
			return nil, err
		}
		b = b[:uint64(len(b))+k]
	}
	return b, nil
}

// parseWindow parses and checks one window body; prev is the window
// before it in the image, or nil.
func (r *Registry) parseWindow(body []byte, prev *window) (*window, error) {
	rd := &bitpack.Reader{B: body, Corrupt: ErrCorrupt}
	num := rd.Uvarint()
	posts := rd.Uvarint()
	nb := rd.Uvarint()
	if rd.Err != nil {
		return nil, rd.Err
	}
	minNum, _, _ := r.win.Of(0)
	maxNum, _, _ := r.win.Of(^uint64(0))
	if num < uint64(minNum) || num > uint64(maxNum) {
		return nil, corrupt("window number %d outside the id space", num)
	}
	if prev != nil && int64(num) <= prev.num {
		return nil, corrupt("window %d after window %d", num, prev.num)
	}
	w := &window{num: int64(num), lo: r.win.Start(int64(num)), last: r.win.Last(int64(num))}
	// An index entry takes at least 2 bytes and a block 6: this bounds
	// what a corrupt count makes us allocate.
	if nb > uint64(len(rd.B))/8 {
		return nil, corrupt("%d blocks in %d bytes", nb, len(rd.B))
	}
	if nb > 0 {
		s := &run{n: int(rd.Uvarint()), firsts: make([]uint64, nb), offs: make([]uint64, nb)}
		var off uint64
		for b := range s.firsts {
			gap, size := rd.Uvarint(), rd.Uvarint()
			if rd.Err != nil {
				return nil, rd.Err
			}
			first := w.lo + gap
			if b > 0 {
				first = s.firsts[b-1] + gap + 1
				if first <= s.firsts[b-1] {
					return nil, corrupt("block %d's first id overflows", b)
				}
			}
			if first < w.lo || first > w.last {
				return nil, corrupt("block %d's first id %d outside the window [%d, %d]", b, first, w.lo, w.last)
			}
			if size > uint64(len(rd.B)) || off+size > uint64(len(rd.B)) {
				return nil, corrupt("block %d of %d bytes runs past the window", b, size)
			}
			s.firsts[b], s.offs[b] = first, off
			off += size
		}
		// The blocks stay in the body, whose spare capacity is their slack.
		s.data = rd.B[:off]
		rd.B = rd.B[off:]
		n, prevID := 0, uint64(0)
		for b, first := range s.firsts {
			k, lastID, err := checkBlock(first, s.block(b), w.lo, w.last, prevID, b > 0)
			if err != nil {
				return nil, corrupt("block %d: %v", b, err)
			}
			n += k
			prevID = lastID
		}
		if n != s.n {
			return nil, corrupt("run holds %d posts, says %d", n, s.n)
		}
		w.sealed = s
		w.live = n
	}
	nopen := rd.Uvarint()
	if rd.Err != nil {
		return nil, rd.Err
	}
	if nopen > uint64(len(rd.B))/2 {
		return nil, corrupt("%d open entries in %d bytes", nopen, len(rd.B))
	}
	var key uint64
	for i := uint64(0); i < nopen; i++ {
		gap, author := rd.Uvarint(), rd.Uvarint()
		if rd.Err != nil {
			return nil, rd.Err
		}
		next := gap
		if i > 0 {
			next = key + gap + 1
			if next <= key {
				return nil, corrupt("open key overflows")
			}
		}
		key = next
		if key > w.last-w.lo {
			return nil, corrupt("open key %d outside a window whose last key is %d", key, w.last-w.lo)
		}
		w.open.put(key, author)
		if w.sealed == nil {
			w.live++
		} else if _, over := w.sealed.get(w.lo + key); !over {
			w.live++
		}
	}
	if len(rd.B) != 0 {
		return nil, corrupt("%d bytes after the window's open entries", len(rd.B))
	}
	if w.live == 0 || uint64(w.live) != posts {
		return nil, corrupt("window holds %d posts, says %d", w.live, posts)
	}
	return w, nil
}
