package likeset

import (
	"cmp"
	"fmt"
	"slices"
	"time"
	"unsafe"

	"github.com/tally-dev/tally/engine/bitpack"
	"github.com/tally-dev/tally/engine/snowflake"
)

// Defaults of Options: the same windows and ages as engine/postcounts, so
// a post's counts and its likers are sealed together.
const (
	DefaultWindowMillis = 86_400_000
	DefaultOpenAge      = 7 * 24 * time.Hour
	DefaultCompactMin   = 1024
	// MaxWindowMillis keeps a key (post id minus its window's first id)
	// within 56 bits, as in engine/postcounts.
	MaxWindowMillis = 1 << 34
)

// Options configure a Set. The zero value is usable: day windows, the last
// 7 days open.
type Options struct {
	// WindowMillis is the length of a time window in milliseconds, 1 to
	// MaxWindowMillis, aligned on the Unix epoch. 0 means
	// DefaultWindowMillis.
	WindowMillis int64
	// OpenAge: a window stays an open table until it ended this long ago;
	// then Maintain seals it. 0 means DefaultOpenAge; negative seals every
	// window that has ended.
	OpenAge time.Duration
	// CompactMin: a sealed window's delta is folded into it once it holds
	// at least CompactMin pairs (added ones and tombstones) and at least
	// an eighth as many as the window. 0 means DefaultCompactMin.
	CompactMin int
}

func (o Options) withDefaults() (Options, error) {
	if o.WindowMillis == 0 {
		o.WindowMillis = DefaultWindowMillis
	}
	if o.WindowMillis < 1 || o.WindowMillis > MaxWindowMillis {
		return o, fmt.Errorf("likeset: WindowMillis %d outside [1, %d]", o.WindowMillis, int64(MaxWindowMillis))
	}
	if o.OpenAge == 0 {
		o.OpenAge = DefaultOpenAge
	}
	if o.CompactMin <= 0 {
		o.CompactMin = DefaultCompactMin
	}
	return o, nil
}

// delta is a layer of changes over what lies below it: adds holds pairs
// absent below, dels pairs present below that are removed. Either table
// may be nil.
type delta struct {
	adds, dels *pairTable
}

func (d *delta) len() int { return d.adds.len() + d.dels.len() }

func (d *delta) memoryBytes() int {
	if d == nil {
		return 0
	}
	return d.adds.memoryBytes() + d.dels.memoryBytes()
}

// window is the pairs of the posts of one time window. Its base is an
// open table or a sealed window (exactly one is set); frozen is a delta
// a running job is folding into the base, read-only; live is the delta of
// the writes since. A window's view is base, then frozen, then live.
type window struct {
	num      int64
	lo, last uint64 // the window's post ids are [lo, last]; a key is id - lo

	open   *pairTable // writable unless busy
	sealed *sealedWin
	frozen *delta
	live   *delta
	busy   bool // a job reads open, sealed or frozen
	n      int  // pairs in the view
}

// Set is a set of (user, post) pairs partitioned into time windows by the
// timestamp of the post id. See the package doc.
type Set struct {
	opts    Options
	keyBits uint
	win     snowflake.Windows
	wins    []*window // by window number
	los     []uint64  // wins[i].lo, searched without touching the windows
	n       int
	jobs    int
	// blockLimit is the pairs per sealed block; 0 means blockPairs. Tests
	// make it small so that windows have many blocks.
	blockLimit int
}

// New returns an empty set.
func New(opts Options) (*Set, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	win := snowflake.Windows{Millis: o.WindowMillis}
	return &Set{opts: o, keyBits: win.KeyBits(), win: win}, nil
}

// windowOf returns the number and id range of the window holding post id,
// as engine/postcounts cuts them.
func (s *Set) windowOf(id uint64) (num int64, lo, last uint64) {
	return s.win.Of(id)
}

// end returns the Unix millisecond at which window w ends.
func (s *Set) end(w *window) int64 { return (w.num + 1) * s.opts.WindowMillis }

// find returns the index in s.wins of the window holding post, or -1.
func (s *Set) find(post uint64) int {
	i := bitpack.LastAtMost(s.los, post)
	if i < 0 || post > s.wins[i].last {
		return -1
	}
	return i
}

// create adds an empty open window holding post and returns it.
func (s *Set) create(post uint64) *window {
	num, lo, last := s.windowOf(post)
	w := &window{num: num, lo: lo, last: last, open: newPairTable(s.keyBits, 0)}
	s.insertWindow(w)
	return w
}

func (s *Set) insertWindow(w *window) {
	i, _ := slices.BinarySearchFunc(s.wins, w.num, func(x *window, n int64) int { return cmp.Compare(x.num, n) })
	s.wins = slices.Insert(s.wins, i, w)
	s.los = slices.Insert(s.los, i, w.lo)
}

func (s *Set) removeWindow(w *window) {
	for i, x := range s.wins {
		if x == w {
			s.wins = slices.Delete(s.wins, i, i+1)
			s.los = slices.Delete(s.los, i, i+1)
			return
		}
	}
}

// baseHas reports whether the window's base holds (u, k).
func (w *window) baseHas(u, k uint64) bool {
	if w.open != nil {
		return w.open.has(u, k)
	}
	if w.sealed != nil {
		return w.sealed.has(k, u)
	}
	return false
}

// below reports whether (u, k) is in the view under the live delta: the
// base with the frozen delta over it.
func (w *window) below(u, k uint64) bool {
	if d := w.frozen; d != nil {
		if d.adds.has(u, k) {
			return true
		}
		if d.dels.has(u, k) {
			return false
		}
	}
	return w.baseHas(u, k)
}

// overlay answers for (u, k) from the deltas alone when they decide it.
func (w *window) overlay(u, k uint64) (has, decided bool) {
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

func (w *window) has(u, k uint64) bool {
	if w.live != nil || w.frozen != nil {
		if has, ok := w.overlay(u, k); ok {
			return has
		}
	}
	return w.baseHas(u, k)
}

// writable reports whether writes go straight to the base.
func (w *window) writable() bool { return w.open != nil && !w.busy }

func (s *Set) liveDelta(w *window) *delta {
	if w.live == nil {
		w.live = &delta{}
	}
	return w.live
}

func (d *delta) table(t **pairTable, keyBits uint) *pairTable {
	if *t == nil {
		*t = newPairTable(keyBits, 0)
	}
	return *t
}

// Add adds (user, post) and reports whether it was absent. A write to an
// open window is one probe and a store; to a sealed window (or one being
// sealed) it also reads the base, since the delta records only changes.
// It allocates only when a table grows or a window is created.
func (s *Set) Add(user, post uint64) bool {
	i := s.find(post)
	var w *window
	if i < 0 {
		w = s.create(post)
	} else {
		w = s.wins[i]
	}
	k := post - w.lo
	if w.writable() {
		if !w.open.add(user, k) {
			return false
		}
		s.adjust(w, 1)
		return true
	}
	if d := w.live; d != nil {
		if d.adds.has(user, k) {
			return false
		}
		if d.dels.remove(user, k) {
			s.adjust(w, 1)
			return true
		}
	}
	if w.below(user, k) {
		return false
	}
	d := s.liveDelta(w)
	d.table(&d.adds, s.keyBits).add(user, k)
	s.adjust(w, 1)
	return true
}

// Remove removes (user, post) and reports whether it was present.
func (s *Set) Remove(user, post uint64) bool {
	i := s.find(post)
	if i < 0 {
		return false
	}
	w := s.wins[i]
	k := post - w.lo
	if w.writable() {
		if !w.open.remove(user, k) {
			return false
		}
		s.adjust(w, -1)
		return true
	}
	if d := w.live; d != nil {
		if d.adds.remove(user, k) {
			s.adjust(w, -1)
			return true
		}
		if d.dels.has(user, k) {
			return false
		}
	}
	if !w.below(user, k) {
		return false
	}
	d := s.liveDelta(w)
	d.table(&d.dels, s.keyBits).add(user, k)
	s.adjust(w, -1)
	return true
}

func (s *Set) adjust(w *window, n int) {
	w.n += n
	s.n += n
}

// Has reports whether (user, post) is in the set. It does not allocate.
func (s *Set) Has(user, post uint64) bool {
	i := s.find(post)
	if i < 0 {
		return false
	}
	w := s.wins[i]
	return w.has(user, post-w.lo)
}

// chunk is how many posts HasMany orders at a time: a byte each for their
// positions, on the stack.
const chunk = 256

// HasMany sets out[i] to whether (user, posts[i]) is in the set; out must
// be at least as long as posts. It is the feed-page read: the posts are
// visited in id order, so each window is found once and each sealed block
// parsed once however many of the page's posts it holds. It does not
// allocate.
func (s *Set) HasMany(user uint64, posts []uint64, out []bool) {
	out = out[:len(posts)]
	for len(posts) > 0 {
		n := min(len(posts), chunk)
		s.hasChunk(user, posts[:n], out[:n])
		posts, out = posts[n:], out[n:]
	}
}

func (s *Set) hasChunk(user uint64, posts []uint64, out []bool) {
	var ord [chunk]uint8
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
	lo, last := uint64(1), uint64(0) // id range of window w; empty at first
	var w *window
	var blk block
	cur := -1 // block of w.sealed parsed into blk
	for _, i := range o {
		post := posts[i]
		if post < lo || post > last {
			w, cur = nil, -1
			lo, last = 1, 0
			if wi := s.find(post); wi >= 0 {
				w = s.wins[wi]
				lo, last = w.lo, w.last
			}
		}
		if w == nil {
			out[i] = false
			continue
		}
		k := post - w.lo
		if w.live != nil || w.frozen != nil {
			if has, ok := w.overlay(user, k); ok {
				out[i] = has
				continue
			}
		}
		switch {
		case w.open != nil:
			out[i] = w.open.has(user, k)
		case w.sealed != nil:
			b := w.sealed.find(k, user)
			if b < 0 {
				out[i] = false
				continue
			}
			if b != cur {
				w.sealed.block(b, &blk)
				cur = b
			}
			out[i] = blk.has(k, user)
		default:
			out[i] = false
		}
	}
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
// in time order; within a sealed window in post order, within an open one
// in no particular order. fn must not modify the set.
func (s *Set) Range(fn func(user, post uint64) bool) {
	for _, w := range s.wins {
		if !w.each(func(u, k uint64) bool { return fn(u, w.lo+k) }) {
			return
		}
	}
}

// each calls fn(u, k) for every pair of w's view: base pairs no delta
// removed, the frozen delta's additions the live one did not remove, the
// live delta's additions. The invariants of delta (adds absent below,
// dels present below) make these disjoint.
func (w *window) each(fn func(u, k uint64) bool) bool {
	fr, lv := w.frozen, w.live
	if fr == nil {
		fr = &delta{}
	}
	if lv == nil {
		lv = &delta{}
	}
	ok := true
	visit := func(u, k uint64) bool {
		if fr.dels.has(u, k) || lv.dels.has(u, k) {
			return true
		}
		ok = fn(u, k)
		return ok
	}
	if w.open != nil {
		w.open.each(visit)
	} else if w.sealed != nil {
		w.sealed.each(func(k, u uint64) bool { return visit(u, k) })
	}
	if !ok {
		return false
	}
	fr.adds.each(func(u, k uint64) bool {
		if !lv.dels.has(u, k) {
			ok = fn(u, k)
		}
		return ok
	})
	if !ok {
		return false
	}
	return lv.adds.each(fn)
}

var windowBytes = int(unsafe.Sizeof(window{}))

func (w *window) memoryBytes() int {
	return windowBytes + w.open.memoryBytes() + w.sealed.memoryBytes() + w.frozen.memoryBytes() + w.live.memoryBytes()
}

// MemoryBytes returns the bytes the set holds: tables, sealed windows and
// their indexes, deltas and the window list.
func (s *Set) MemoryBytes() int {
	n := int(unsafe.Sizeof(*s)) + 8*cap(s.wins) + 8*cap(s.los)
	for _, w := range s.wins {
		n += w.memoryBytes()
	}
	return n
}

// Stats describe where the set's pairs and bytes are.
type Stats struct {
	Pairs                             int
	OpenWindows, OpenPairs, OpenBytes int // windows being sealed included
	SealedWindows, SealedPairs        int // base pairs
	SealedBytes, SealedBlocks         int
	DeltaPairs, DeltaBytes            int // added pairs and tombstones, frozen ones included
	MemoryBytes                       int
	Jobs                              int // planned and not finished
}

// Stats returns the set's figures.
func (s *Set) Stats() Stats {
	st := Stats{Pairs: s.n, MemoryBytes: s.MemoryBytes(), Jobs: s.jobs}
	for _, w := range s.wins {
		if w.open != nil {
			st.OpenWindows++
			st.OpenPairs += w.open.len()
			st.OpenBytes += w.open.memoryBytes()
		}
		if w.sealed != nil {
			st.SealedWindows++
			st.SealedPairs += w.sealed.pairs
			st.SealedBytes += w.sealed.memoryBytes()
			st.SealedBlocks += w.sealed.blocks()
		}
		for _, d := range []*delta{w.frozen, w.live} {
			if d != nil {
				st.DeltaPairs += d.len()
				st.DeltaBytes += d.memoryBytes()
			}
		}
	}
	return st
}
