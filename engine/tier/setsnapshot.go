package tier

import (
	"cmp"
	"fmt"
	"io"
	"slices"

	"github.com/tally-dev/tally/engine/bitpack"
)

// A set's snapshot image (WriteTo, Load) is framed as a post table's
// (snapshot.go: header, body, CRC32C of the body); its body is
//
//	body    = tag [4] | 0 uint8 | 0 uint8 (no columns) | windows uvarint | window*
//	window  = num varint | pairs uvarint | kind uint8 | base | adds | dels
//	base    = open:   pairs
//	          sealed: length uvarint | set window image
//	          cold:   name length uvarint | name | file size uvarint
//	adds    = pairs   the delta's added pairs (absent from the base)
//	dels    = pairs   its tombstones (present in the base)
//	pairs   = count uvarint | (post id - window start uvarint | user uvarint)*  in (post, user) order

// WriteTo writes the set's image to w: every window's pairs or bytes, and
// the names of the cold files, which must outlive the image (Collect's
// keep). Call it under the read lock; it does not change the set.
func (s *Set) WriteTo(w io.Writer) (int64, error) {
	return writeImage(w, s.opts.WindowMillis, s.nextGen, s.writeBody)
}

func (s *Set) writeBody(w io.Writer) error {
	bw := newBodyWriter(w, s.tag, setShape, len(s.wins))
	list := func(ps []pk) error {
		slices.SortFunc(ps, cmpPK)
		bw.uvarint(uint64(len(ps)))
		for _, q := range ps {
			bw.uvarint(q.k)
			bw.uvarint(q.u)
			if err := bw.spill(); err != nil {
				return err
			}
		}
		return nil
	}
	for _, win := range s.wins {
		bw.window(win.num, win.n, win.body.kind())
		switch b := win.body.(type) {
		case *setOpen:
			if err := list(b.t.pairs(nil)); err != nil {
				return err
			}
		case *setSealed:
			if err := bw.image(b.s.data); err != nil {
				return err
			}
		case *setCold:
			bw.file(&b.f.coldBase)
		}
		adds, dels := win.deltaPairs()
		if err := list(adds); err != nil {
			return err
		}
		if err := list(dels); err != nil {
			return err
		}
	}
	return bw.flush()
}

// deltaPairs returns the window's frozen and live deltas as one delta
// over its body: the additions and the tombstones.
func (w *setWindow) deltaPairs() (adds, dels []pk) {
	fr, lv := w.frozen, w.live
	if fr == nil {
		fr = &delta{}
	}
	if lv == nil {
		lv = &delta{}
	}
	keep := func(dst []pk, from, unless *pairTable) []pk {
		from.each(func(u, k uint64) bool {
			if !unless.has(u, k) {
				dst = append(dst, pk{k, u})
			}
			return true
		})
		return dst
	}
	adds = keep(keep(nil, fr.adds, lv.dels), lv.adds, fr.dels)
	dels = keep(keep(nil, fr.dels, lv.adds), lv.dels, fr.adds)
	return adds, dels
}

// Load replaces the set's state with the image r holds (from WriteTo),
// opening the cold files it names in Options.Dir. It reads the whole
// image and checks its checksum, then every window (sealed windows block
// by block; cold files' headers, footers and indexes; that every
// addition is absent from its window and every tombstone present, which
// reads the cold blocks they fall in), and changes nothing unless all of
// it is sound. It never panics, whatever r holds. Jobs planned before
// Load are dropped by Finish. Call it under the write lock.
func (s *Set) Load(r io.Reader) error {
	data, nextGen, err := readImage(r, s.opts.WindowMillis)
	if err != nil {
		return err
	}
	wins, n, err := s.parse(data)
	if err != nil {
		s.dropWindows(wins, false)
		return err
	}
	s.dropWindows(s.wins, true)
	s.wins, s.n = wins, n
	s.los = s.los[:0]
	for _, w := range wins {
		s.los = append(s.los, w.lo)
		if b, ok := w.body.(*setSealed); ok {
			b.s.installed = true
		}
	}
	s.nextGen = max(s.nextGen, nextGen)
	s.jobs = 0
	s.epoch++
	s.trim()
	return nil
}

// dropWindows frees the windows' sealed bodies and closes their files,
// or (retire) leaves the files to Collect, since a kept snapshot may
// still name them.
func (s *Set) dropWindows(wins []*setWindow, retire bool) {
	for _, w := range wins {
		switch b := w.body.(type) {
		case *setCold:
			if retire {
				s.obsolete = append(s.obsolete, &b.f.coldBase)
			} else {
				b.f.close()
			}
		case *setSealed:
			// A running job's input stays readable: the arena never
			// rewrites a region.
			b.s.release(&s.arena)
		}
	}
}

func (s *Set) parse(data []byte) (wins []*setWindow, total int, err error) {
	rd := bitpack.Reader{B: data, Corrupt: ErrCorrupt}
	fail := func(format string, args ...any) ([]*setWindow, int, error) {
		return wins, 0, fmt.Errorf("%w: snapshot: %s", ErrCorrupt, fmt.Sprintf(format, args...))
	}
	nw, err := parseBodyHead(&rd, s.tag, setShape)
	if err != nil {
		return wins, 0, err
	}
	// readPairs reads a pair list of window w into a table (nil when
	// empty), checking order and range.
	readPairs := func(w *setWindow) *pairTable {
		n := rd.Uvarint()
		if rd.Err != nil || n > uint64(len(rd.B)) {
			if rd.Err == nil {
				rd.Err = fmt.Errorf("%w: snapshot: %d pairs in %d bytes", ErrCorrupt, n, len(rd.B))
			}
			return nil
		}
		if n == 0 {
			return nil
		}
		t := newPairTable(s.keyBits, int(n))
		var prev pk
		for i := range n {
			q := pk{rd.Uvarint(), rd.Uvarint()}
			if rd.Err != nil {
				return nil
			}
			if (i > 0 && cmpPK(q, prev) <= 0) || q.k > w.last-w.lo {
				rd.Err = fmt.Errorf("%w: snapshot: window %d: pair out of order or range", ErrCorrupt, w.num)
				return nil
			}
			prev = q
			t.add(q.u, q.k)
		}
		return t
	}
	lastNum := int64(-1)
	for range nw {
		num, n, kind, err := parseWindowHead(&rd, s.win, lastNum)
		if err != nil {
			return wins, 0, err
		}
		lastNum = num
		lo, last := s.win.Start(num), s.win.Last(num)
		w := &setWindow{num: num, lo: lo, last: last}
		base := 0
		switch kind {
		case Open:
			t := readPairs(w)
			if t == nil {
				t = newPairTable(s.keyBits, 0)
			}
			w.body, base = &setOpen{t}, t.len()
		case Sealed:
			raw := rd.Bytes(rd.Uvarint())
			if rd.Err != nil {
				return wins, 0, rd.Err
			}
			seg, err := newPairSegment(&s.arena, raw, s.tag, true)
			if err != nil {
				return wins, 0, fmt.Errorf("snapshot: window %d: %w", num, err)
			}
			w.body, base = &setSealed{seg}, seg.idx.pairs
			wins = append(wins, w) // freed on failure
			if seg.idx.pairs > 0 && (seg.idx.minPost < lo || seg.idx.maxPost > last) {
				return fail("window %d holds posts outside it", num)
			}
			wins = wins[:len(wins)-1]
		case Cold:
			name, size, err := parseFileRef(&rd, s.opts, num)
			if err != nil {
				return wins, 0, err
			}
			f, err := openPairCold(s.opts.Dir, name, s.tag, s.cache)
			if err != nil {
				return wins, 0, err
			}
			w.body = &setCold{f}
			wins = append(wins, w) // closed on failure
			if uint64(f.size) != size {
				return fail("file %s is %d bytes, the snapshot says %d", name, f.size, size)
			}
			if f.idx.pairs > 0 && (f.idx.minPost < lo || f.idx.maxPost > last) {
				return fail("file %s holds posts outside window %d", name, num)
			}
			wins = wins[:len(wins)-1]
			base = f.idx.pairs
		default:
			return fail("window %d of kind %d", num, kind)
		}
		wins = append(wins, w)
		adds, dels := readPairs(w), readPairs(w)
		if rd.Err != nil {
			return wins, 0, rd.Err
		}
		// Every addition absent from the base, every tombstone present.
		var bad error
		check := func(t *pairTable, want bool) {
			t.each(func(u, k uint64) bool {
				has, err := w.baseHas(u, lo+k)
				switch {
				case err != nil:
					bad = err
				case has != want:
					bad = fmt.Errorf("%w: snapshot: window %d: a delta pair contradicts its base", ErrCorrupt, num)
				}
				return bad == nil
			})
		}
		if check(adds, false); bad == nil {
			check(dels, true)
		}
		if bad != nil {
			return wins, 0, bad
		}
		count := base + adds.len() - dels.len()
		if uint64(count) != n {
			return fail("window %d: %d pairs, the snapshot says %d", num, count, n)
		}
		if ob, ok := w.body.(*setOpen); ok {
			// An open table a job was sealing when the image was taken:
			// its delta goes back into it.
			adds.each(func(u, k uint64) bool { ob.t.add(u, k); return true })
			dels.each(func(u, k uint64) bool { ob.t.remove(u, k); return true })
		} else if adds != nil || dels != nil {
			w.live = &delta{adds: adds, dels: dels}
		}
		w.n = count
		total += count
	}
	if rd.Err != nil {
		return wins, 0, rd.Err
	}
	if len(rd.B) != 0 {
		return fail("%d bytes after the last window", len(rd.B))
	}
	slices.SortFunc(wins, func(a, b *setWindow) int { return cmp.Compare(a.num, b.num) })
	return wins, total, nil
}
