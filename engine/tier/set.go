package tier

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"unsafe"

	"github.com/tally-dev/tally/engine/bitpack"
	"github.com/tally-dev/tally/engine/snowflake"
)

// Set is a set of (user, post) pairs — who liked, or favorited, which
// post — partitioned into time windows by the post's id exactly as a
// post table's records are (same Options, same windows), each window
// open, sealed or cold as its age calls for. See the package doc's set
// section. Like a Tier it is not safe for concurrent use on its own.
type Set struct {
	tag     [4]byte
	opts    Options
	win     snowflake.Windows
	keyBits uint

	wins []*setWindow // by number
	los  []uint64     // wins[i].lo, searched without touching the windows
	n    int
	jobs int // planned and not finished

	epoch uint64 // bumped by Load: jobs planned before it are void
	coldStore
	arena arena

	// blockLimit is the pairs per sealed block; 0 means blockPairs.
	// Tests make it small so that windows have many blocks.
	blockLimit int
}

// setWindow is one time window of a set. body is its form (setOpen,
// setSealed or setCold); live is the delta of the writes that did not go
// into body in place; frozen is the delta a running job is folding back,
// read between body and live.
type setWindow struct {
	num      int64
	lo, last uint64 // the window's post ids are [lo, last]; a key is id - lo
	body     body
	frozen   *delta
	live     *delta
	busy     bool // a job is planned on it
	n        int  // pairs in the view
}

type setOpen struct{ t *pairTable }
type setSealed struct{ s *pairSegment }
type setCold struct{ f *pairCold }

func (*setOpen) kind() Kind   { return Open }
func (*setSealed) kind() Kind { return Sealed }
func (*setCold) kind() Kind   { return Cold }

// delta is a layer of changes over what lies below it: adds holds pairs
// (user, key) absent below, dels pairs present below that are removed.
// Either table may be nil.
type delta struct {
	adds, dels *pairTable
}

func (d *delta) len() int {
	if d == nil {
		return 0
	}
	return d.adds.len() + d.dels.len()
}

func (d *delta) memoryBytes() int {
	if d == nil {
		return 0
	}
	return d.adds.memoryBytes() + d.dels.memoryBytes()
}

func (d *delta) table(t **pairTable, keyBits uint) *pairTable {
	if *t == nil {
		*t = newPairTable(keyBits, 0)
	}
	return *t
}

// NewSet returns an empty set whose windows carry tag (4 bytes, e.g.
// "LIKE", "FAVS": a window or snapshot of another tag is refused) and
// whose files in Options.Dir are named by Options.Prefix (the tag when
// empty).
func NewSet(tag string, opts Options) (*Set, error) {
	if len(tag) != 4 {
		return nil, fmt.Errorf("tier: set tag %q is not 4 bytes", tag)
	}
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if opts.Prefix == "" {
		opts.Prefix = string(bytesTrim([]byte(tag)))
	}
	win := snowflake.Windows{Millis: opts.WindowMillis}
	s := &Set{tag: [4]byte([]byte(tag)), opts: opts, win: win, keyBits: win.KeyBits()}
	if err := s.openStore(opts); err != nil {
		return nil, err
	}
	return s, nil
}

// find returns the index in s.wins of the window holding post, or -1.
func (s *Set) find(post uint64) int {
	i := bitpack.LastAtMost(s.los, post)
	if i < 0 || post > s.wins[i].last {
		return -1
	}
	return i
}

// create adds an empty open window holding post and returns it.
func (s *Set) create(post uint64) *setWindow {
	num, lo, last := s.win.Of(post)
	w := &setWindow{num: num, lo: lo, last: last, body: &setOpen{newPairTable(s.keyBits, 0)}}
	s.insertWindow(w)
	return w
}

func (s *Set) insertWindow(w *setWindow) {
	i, _ := slices.BinarySearchFunc(s.wins, w.num, func(x *setWindow, n int64) int { return cmp.Compare(x.num, n) })
	s.wins = slices.Insert(s.wins, i, w)
	s.los = slices.Insert(s.los, i, w.lo)
}

func (s *Set) removeWindow(w *setWindow) {
	if i := slices.Index(s.wins, w); i >= 0 {
		s.wins = slices.Delete(s.wins, i, i+1)
		s.los = slices.Delete(s.los, i, i+1)
	}
}

// baseHas reports whether the window's body holds (u, post). A cold
// body may need a block read, which may fail.
func (w *setWindow) baseHas(u, post uint64) (bool, error) {
	switch b := w.body.(type) {
	case *setOpen:
		return b.t.has(u, post-w.lo), nil
	case *setSealed:
		return b.s.has(post, u), nil
	case *setCold:
		return b.f.has(post, u)
	}
	panic("tier: unknown set window body")
}

// below reports whether (u, post) is in the view under the live delta:
// the body with the frozen delta over it.
func (w *setWindow) below(u, post uint64) (bool, error) {
	if d := w.frozen; d != nil {
		k := post - w.lo
		if d.adds.has(u, k) {
			return true, nil
		}
		if d.dels.has(u, k) {
			return false, nil
		}
	}
	return w.baseHas(u, post)
}

// overlay answers for (u, k) from the deltas alone when they decide it.
func (w *setWindow) overlay(u, k uint64) (has, decided bool) {
	for _, d := range [2]*delta{w.live, w.frozen} {
		if d == nil {
			continue
		}
		if d.adds.has(u, k) {
			return true, true
		}
		if d.dels.has(u, k) {
			return false, true
		}
	}
	return false, false
}

// writable returns the open table that takes writes in place, or nil.
func (w *setWindow) writable() *pairTable {
	if b, ok := w.body.(*setOpen); ok && !w.busy {
		return b.t
	}
	return nil
}

func (w *setWindow) liveDelta() *delta {
	if w.live == nil {
		w.live = &delta{}
	}
	return w.live
}

// Add adds (user, post) and reports whether it was absent. A write to an
// open window is one probe and a store; to a sealed or cold window (or
// one being sealed) it goes to the window's delta and reads the body
// first, since the delta records only changes: a cold block that cannot
// be read is then an error wrapping ErrCorrupt, and nothing is stored.
// It allocates only when a table grows or a window is created.
func (s *Set) Add(user, post uint64) (bool, error) {
	i := s.find(post)
	var w *setWindow
	if i < 0 {
		w = s.create(post)
	} else {
		w = s.wins[i]
	}
	k := post - w.lo
	if t := w.writable(); t != nil {
		if !t.add(user, k) {
			return false, nil
		}
		s.adjust(w, 1)
		return true, nil
	}
	if d := w.live; d != nil {
		if d.adds.has(user, k) {
			return false, nil
		}
		if d.dels.remove(user, k) {
			s.adjust(w, 1)
			return true, nil
		}
	}
	if has, err := w.below(user, post); has || err != nil {
		return false, err
	}
	d := w.liveDelta()
	d.table(&d.adds, s.keyBits).add(user, k)
	s.adjust(w, 1)
	return true, nil
}

// Remove removes (user, post) and reports whether it was present; like
// Add, it may need a cold block, and stores nothing when that fails.
func (s *Set) Remove(user, post uint64) (bool, error) {
	i := s.find(post)
	if i < 0 {
		return false, nil
	}
	w := s.wins[i]
	k := post - w.lo
	if t := w.writable(); t != nil {
		if !t.remove(user, k) {
			return false, nil
		}
		s.adjust(w, -1)
		return true, nil
	}
	if d := w.live; d != nil {
		if d.adds.remove(user, k) {
			s.adjust(w, -1)
			return true, nil
		}
		if d.dels.has(user, k) {
			return false, nil
		}
	}
	if has, err := w.below(user, post); !has || err != nil {
		return false, err
	}
	d := w.liveDelta()
	d.table(&d.dels, s.keyBits).add(user, k)
	s.adjust(w, -1)
	return true, nil
}

func (s *Set) adjust(w *setWindow, n int) {
	w.n += n
	s.n += n
}

// Has reports whether (user, post) is in the set. It does not allocate
// and writes nothing but the block cache; an unreadable cold block is an
// error wrapping ErrCorrupt, never a false.
func (s *Set) Has(user, post uint64) (bool, error) {
	i := s.find(post)
	if i < 0 {
		return false, nil
	}
	w := s.wins[i]
	if w.live != nil || w.frozen != nil {
		if has, ok := w.overlay(user, post-w.lo); ok {
			return has, nil
		}
	}
	return w.baseHas(user, post)
}

// setChunk is how many posts HasMany orders at a time: a byte each for
// their positions, on the stack.
const setChunk = 256

// HasMany sets out[i] to whether (user, posts[i]) is in the set; out must
// be at least as long as posts. It is the feed-page read: the posts are
// visited in id order, so each window is found once and each sealed or
// cold block parsed once however many of the page's posts it holds (a
// cold block is read with one pread when it is not cached). It does not
// allocate. An error (an unreadable cold block) leaves out incomplete:
// the caller must not serve it.
func (s *Set) HasMany(user uint64, posts []uint64, out []bool) error {
	out = out[:len(posts)]
	for len(posts) > 0 {
		n := min(len(posts), setChunk)
		if err := s.hasChunk(user, posts[:n], out[:n]); err != nil {
			return err
		}
		posts, out = posts[n:], out[n:]
	}
	return nil
}

func (s *Set) hasChunk(user uint64, posts []uint64, out []bool) error {
	var ord [setChunk]uint8
	o := ord[:len(posts)]
	asc, desc := true, true
	for i := range o {
		o[i] = uint8(i)
		if i > 0 {
			asc = asc && posts[i-1] <= posts[i]
			desc = desc && posts[i-1] >= posts[i]
		}
	}
	switch {
	case asc:
	case desc: // a feed page, newest first
		slices.Reverse(o)
	default:
		sortByPost(o, posts)
	}
	// Runs of positions whose posts share a window and a block are
	// answered together: run holds them, blk the block they need.
	var run [setChunk]uint8
	var sc *scratch
	defer func() {
		if sc != nil {
			scratchPool.Put(sc)
		}
	}()
	for j := 0; j < len(o); {
		post := posts[o[j]]
		wi := s.find(post)
		if wi < 0 {
			out[o[j]] = false
			j++
			continue
		}
		w := s.wins[wi]
		e := j + 1
		for e < len(o) && posts[o[e]] >= w.lo && posts[o[e]] <= w.last {
			e++
		}
		if err := s.hasWindow(w, user, posts, o[j:e], out, run[:0], &sc); err != nil {
			return err
		}
		j = e
	}
	return nil
}

// hasWindow answers the positions o (in post order) whose posts are in
// window w.
func (s *Set) hasWindow(w *setWindow, user uint64, posts []uint64, o []uint8, out []bool, run []uint8, sc **scratch) error {
	overlaid := w.live != nil || w.frozen != nil
	var idx *pairIndex
	switch b := w.body.(type) {
	case *setOpen:
		for _, i := range o {
			k := posts[i] - w.lo
			if overlaid {
				if has, ok := w.overlay(user, k); ok {
					out[i] = has
					continue
				}
			}
			out[i] = b.t.has(user, k)
		}
		return nil
	case *setSealed:
		idx = &b.s.idx
	case *setCold:
		idx = &b.f.idx
	}
	cur := -1
	flush := func() error {
		if len(run) == 0 {
			return nil
		}
		answer := func(p, u uint64, body []byte) {
			var k pairBlock
			ok := k.parse(p, u, body) == nil // checked when built, loaded or read
			for _, i := range run {
				out[i] = ok && k.has(posts[i], user)
			}
		}
		switch b := w.body.(type) {
		case *setSealed:
			answer(b.s.blockBody(cur))
		case *setCold:
			if err := b.f.view(cur, sc, answer); err != nil {
				return err
			}
		}
		run = run[:0]
		return nil
	}
	for _, i := range o {
		post := posts[i]
		if overlaid {
			if has, ok := w.overlay(user, post-w.lo); ok {
				out[i] = has
				continue
			}
		}
		var b int
		if cur >= 0 {
			b = idx.findFrom(cur, post, user)
		} else {
			b = idx.find(post, user)
		}
		if b < 0 {
			out[i] = false
			continue
		}
		if b != cur {
			if err := flush(); err != nil {
				return err
			}
			cur = b
		}
		run = append(run, i)
	}
	return flush()
}

// sortByPost sorts positions by their posts: an insertion sort, which is
// what a page of a few dozen mostly ordered ids wants, and which does not
// allocate.
func sortByPost(o []uint8, posts []uint64) {
	for i := 1; i < len(o); i++ {
		x := o[i]
		j := i
		for ; j > 0 && posts[o[j-1]] > posts[x]; j-- {
			o[j] = o[j-1]
		}
		o[j] = x
	}
}

// Len returns the number of pairs.
func (s *Set) Len() int { return s.n }

// Range calls fn for every pair until fn returns false: window by window
// in time order; within a sealed or cold window in post order, within an
// open one in no particular order. A cold window's blocks are read from
// its file and checked (not through the cache); an unreadable one ends
// the walk with its error. fn must not modify the set.
func (s *Set) Range(fn func(user, post uint64) bool) error {
	return walkWindows(len(s.wins), func(i int) error {
		return s.wins[i].each(func(post, u uint64) error {
			if !fn(u, post) {
				return errStop
			}
			return nil
		})
	})
}

// each passes every pair (post, user) of w's view to fn: body pairs no
// delta removed, the frozen delta's additions the live one did not
// remove, the live delta's additions. The invariants of delta (adds
// absent below, dels present below) make these disjoint.
func (w *setWindow) each(fn func(post, u uint64) error) error {
	fr, lv := w.frozen, w.live
	if fr == nil {
		fr = &delta{}
	}
	if lv == nil {
		lv = &delta{}
	}
	err := eachBody(w.body, w.lo, func(post, u uint64) error {
		k := post - w.lo
		if fr.dels.has(u, k) || lv.dels.has(u, k) {
			return nil
		}
		return fn(post, u)
	})
	if err != nil {
		return err
	}
	fr.adds.each(func(u, k uint64) bool {
		if !lv.dels.has(u, k) {
			err = fn(w.lo+k, u)
		}
		return err == nil
	})
	if err != nil {
		return err
	}
	lv.adds.each(func(u, k uint64) bool {
		err = fn(w.lo+k, u)
		return err == nil
	})
	return err
}

// eachBody passes the pairs (post, user) of a window body to fn: an open
// table's in slot order, a sealed or cold window's in pair order, a cold
// one's blocks read from the file and fully checked, not cached.
func eachBody(b body, lo uint64, fn func(post, user uint64) error) error {
	switch b := b.(type) {
	case *setOpen:
		var err error
		b.t.each(func(u, k uint64) bool {
			err = fn(lo+k, u)
			return err == nil
		})
		return err
	case *setSealed:
		return eachPairBlock(&b.s.idx, "", func(i int) ([]byte, error) {
			_, _, off, end := b.s.idx.block(i)
			return b.s.data[off:end], nil
		}, fn)
	case *setCold:
		var buf []byte
		return eachPairBlock(&b.f.idx, b.f.name, func(i int) ([]byte, error) {
			_, _, off, end := b.f.idx.block(i)
			return b.f.readRaw(off, end, &buf)
		}, fn)
	}
	return errors.New("tier: unknown set window body")
}

var setWindowBytes = int(unsafe.Sizeof(setWindow{})) + 16 // and its body's header

func (w *setWindow) memoryBytes() int {
	n := setWindowBytes + w.frozen.memoryBytes() + w.live.memoryBytes()
	switch b := w.body.(type) {
	case *setOpen:
		n += b.t.memoryBytes()
	case *setSealed:
		n += b.s.sizeBytes()
	case *setCold:
		n += b.f.memoryBytes()
	}
	return n
}

// MemoryBytes is the set's own memory: open tables, deltas, sealed
// windows (the arena's chunks), cold windows' indexes and the window
// list; the block cache, shared between tables, is not counted
// (CacheBytes).
func (s *Set) MemoryBytes() int64 {
	n := int64(unsafe.Sizeof(*s)) + 8*int64(cap(s.wins)+cap(s.los))
	for _, w := range s.wins {
		n += int64(w.memoryBytes())
		if b, ok := w.body.(*setSealed); ok {
			n -= int64(b.s.sizeBytes()) // counted in the arena's chunks
		}
	}
	return n + s.arena.size()
}

// CacheBytes is the memory the block cache holds (0 without a cold tier;
// a cache shared with other tables counts their blocks too).
func (s *Set) CacheBytes() int64 { return s.cacheBytes() }

// DiskBytes is the size of the cold files in use.
func (s *Set) DiskBytes() int64 {
	var n int64
	for _, w := range s.wins {
		if b, ok := w.body.(*setCold); ok {
			n += b.f.size
		}
	}
	return n
}

// SetStats describe where a set's pairs and bytes are.
type SetStats struct {
	Pairs                             int
	OpenWindows, OpenPairs, OpenBytes int // windows being sealed included
	SealedWindows, SealedPairs        int // body pairs
	SealedBytes, SealedBlocks         int
	ColdWindows, ColdPairs            int
	ColdIndexBytes                    int
	DiskBytes                         int64
	DeltaPairs, DeltaBytes            int // added pairs and tombstones, frozen ones included
	MemoryBytes                       int64
	Jobs                              int // planned and not finished
}

// Stats returns the set's figures.
func (s *Set) Stats() SetStats {
	st := SetStats{Pairs: s.n, MemoryBytes: s.MemoryBytes(), DiskBytes: s.DiskBytes(), Jobs: s.jobs}
	for _, w := range s.wins {
		switch b := w.body.(type) {
		case *setOpen:
			st.OpenWindows++
			st.OpenPairs += b.t.len()
			st.OpenBytes += b.t.memoryBytes()
		case *setSealed:
			st.SealedWindows++
			st.SealedPairs += b.s.idx.pairs
			st.SealedBytes += b.s.sizeBytes()
			st.SealedBlocks += b.s.idx.blocks
		case *setCold:
			st.ColdWindows++
			st.ColdPairs += b.f.idx.pairs
			st.ColdIndexBytes += b.f.memoryBytes()
		}
		st.DeltaPairs += w.frozen.len() + w.live.len()
		st.DeltaBytes += w.frozen.memoryBytes() + w.live.memoryBytes()
	}
	return st
}

// WindowStats describes every window, oldest first, as Tier.Stats does
// (Records and Delta count pairs).
func (s *Set) WindowStats() []WindowStat {
	out := make([]WindowStat, 0, len(s.wins))
	for _, w := range s.wins {
		st := WindowStat{Num: w.num, Kind: w.body.kind(), Records: w.n, Delta: w.frozen.len() + w.live.len(), Bytes: w.memoryBytes()}
		if b, ok := w.body.(*setCold); ok {
			st.File = b.f.name
		}
		out = append(out, st)
	}
	return out
}

// Files returns the names of the cold files the set uses (a snapshot
// written now needs them).
func (s *Set) Files() []string {
	var out []string
	for _, w := range s.wins {
		if b, ok := w.body.(*setCold); ok {
			out = append(out, b.f.name)
		}
	}
	return out
}

// VerifyFiles reads every block of every cold file the set uses and
// checks it (checksum, structure, contents, pair order, the footer's
// totals): a scrub that finds damage before a read does. It only reads:
// it may run under the read lock.
func (s *Set) VerifyFiles() error {
	for _, w := range s.wins {
		if b, ok := w.body.(*setCold); ok {
			var buf []byte
			f := b.f
			if err := verifyPairBlocks(&f.idx, f.name, func(i int) ([]byte, error) {
				_, _, off, end := f.idx.block(i)
				return f.readRaw(off, end, &buf)
			}); err != nil {
				return err
			}
		}
	}
	return nil
}

// Close closes the cold files. The set is unusable afterwards.
func (s *Set) Close() error {
	var errs []error
	for _, w := range s.wins {
		if b, ok := w.body.(*setCold); ok {
			errs = append(errs, b.f.close())
		}
	}
	errs = append(errs, s.closeObsolete())
	s.wins, s.los = nil, nil
	return errors.Join(errs...)
}

// A set is maintained by the same loop as a post table.
var _ Maintainer = (*Set)(nil)
