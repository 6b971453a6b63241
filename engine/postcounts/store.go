package postcounts

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"sync"
	"time"
	"unsafe"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/bitpack"
	"github.com/tally-dev/tally/engine/cold"
	"github.com/tally-dev/tally/engine/counters"
	"github.com/tally-dev/tally/engine/sealed"
	"github.com/tally-dev/tally/engine/snowflake"
)

// Field names one of the five counters of a post; it is counters.Field,
// so that the engine's call sites compile against either table.
type Field = counters.Field

// The fields, in the order of engine.Counts.
const (
	Likes     = counters.Likes
	Comments  = counters.Comments
	Reposts   = counters.Reposts
	Views     = counters.Views
	Favorites = counters.Favorites
	NumFields = counters.NumFields
)

// Defaults of Options.
const (
	DefaultWindowMillis   = 86_400_000
	DefaultOpenAge        = 7 * 24 * time.Hour
	DefaultColdCacheBytes = 64 << 20
	DefaultCompactMin     = 1024
	// MaxWindowMillis keeps the key of a window within 56 bits, leaving
	// views at least 8 bits of a record.
	MaxWindowMillis = 1 << 34
)

// Options configure a Store. The zero value is usable: day windows, the
// last 7 days open, no cold tier.
type Options struct {
	// WindowMillis is the length of a time window in milliseconds, 1 to
	// MaxWindowMillis; windows are aligned on the Unix epoch, so day
	// windows are UTC days. 0 means DefaultWindowMillis.
	WindowMillis int64
	// OpenAge: a window stays an open table until it ended this long ago,
	// then Maintain seals it. 0 means DefaultOpenAge; negative seals every
	// window that has ended.
	OpenAge time.Duration
	// ColdAge: a sealed window that ended this long ago moves to a file in
	// Dir. 0 means never by age.
	ColdAge time.Duration
	// MemoryBudget: while MemoryBytes (the cold cache counted at its
	// bound once a window is cold) exceeds it, Maintain moves the oldest
	// sealed windows to files in Dir, then folds the largest deltas into
	// their files. 0 means no budget.
	MemoryBudget int64
	// Dir holds the cold files. Empty means no cold tier (ColdAge and
	// MemoryBudget are then ignored). The Store owns the files it writes
	// there (RemoveUnreferenced deletes those no state refers to), so a
	// directory must not be shared by two stores.
	Dir string
	// ColdCacheBytes bounds the block cache shared by the cold files; 0
	// means DefaultColdCacheBytes, negative disables the cache (every cold
	// read is a pread; for tests and benchmarks).
	ColdCacheBytes int
	// CompactMin: a sealed or cold window is compacted when its delta
	// holds at least CompactMin posts and at least an eighth as many as
	// the window. 0 means DefaultCompactMin.
	CompactMin int
	// Sealed tunes the encoding of sealed windows.
	Sealed sealed.Options
	// Now is the clock Import uses to tell old windows from open ones;
	// nil means time.Now. Maintain and Plan take the time as an argument.
	Now func() time.Time
}

func (o Options) withDefaults() (Options, error) {
	if o.WindowMillis == 0 {
		o.WindowMillis = DefaultWindowMillis
	}
	if o.WindowMillis < 1 || o.WindowMillis > MaxWindowMillis {
		return o, fmt.Errorf("postcounts: WindowMillis %d outside [1, %d]", o.WindowMillis, int64(MaxWindowMillis))
	}
	if o.OpenAge == 0 {
		o.OpenAge = DefaultOpenAge
	}
	if o.ColdCacheBytes == 0 {
		o.ColdCacheBytes = DefaultColdCacheBytes
	}
	if o.CompactMin <= 0 {
		o.CompactMin = DefaultCompactMin
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o, nil
}

// window is one time window: a base (an open table, a sealed window in
// memory or a cold file), possibly a frozen delta a running job is
// folding into the base, and the delta of the writes since.
type window struct {
	num      int64
	lo, last uint64 // the window's ids are [lo, last]; a key is id - lo

	// Exactly one of open, sealed and cold is set. open is writable
	// unless busy; when busy (being sealed) it is read-only and writes go
	// to delta.
	open     *narrow
	sealed   *sealed.Window
	cold     *cold.File
	coldPath string

	// frozen is a delta a job is folding into the base; read-only.
	frozen *narrow
	// delta holds signed changes over base+frozen, each field keeping
	// base+frozen+delta within [0, MaxInt64] as cold.Merge requires.
	delta *narrow
	busy  bool // a job reads open, sealed, cold or frozen
	live  int  // posts whose counts are not all zero
}

// Store maps post ids to their five counts, partitioned into time windows
// by the timestamp the ids carry. See the package doc.
type Store struct {
	opts  Options
	lay   *layout // of every narrow table's records
	cache *cold.Cache

	wins []*window // by window number
	los  []uint64  // wins[i].lo, searched without touching the windows
	live int

	epoch   uint64 // bumped by Load: jobs from before are void
	nextGen uint64 // names cold files
	jobs    map[*window]*Job
	// writing holds the files running jobs are writing, which
	// RemoveUnreferenced must leave alone.
	writing map[string]bool

	errMu sync.Mutex
	err   error // first cold read error (sticky)
}

// New returns an empty store.
func New(opts Options) (*Store, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	keyBits := uint(snowflake.TimeShift + bits.Len64(uint64(o.WindowMillis-1)))
	s := &Store{
		opts:    o,
		lay:     newLayout(keyBits),
		jobs:    map[*window]*Job{},
		writing: map[string]bool{},
	}
	if o.Dir != "" {
		s.cache = cold.NewCache(max(o.ColdCacheBytes, 0))
		if _, err := cold.CleanTemp(o.Dir); err != nil {
			return nil, fmt.Errorf("postcounts: %w", err)
		}
		if err := s.scanGen(); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// windowOf returns the number and id range of the window holding id.
func (s *Store) windowOf(id uint64) (num int64, lo, last uint64) {
	w := s.opts.WindowMillis
	num = (int64(id>>snowflake.TimeShift) + snowflake.TwitterEpoch) / w
	return num, s.rawStart(num), s.rawLast(num)
}

// rawStart is the first id of window num (0 for the window holding the
// snowflake epoch).
func (s *Store) rawStart(num int64) uint64 {
	ms := num*s.opts.WindowMillis - snowflake.TwitterEpoch
	if ms <= 0 {
		return 0
	}
	return uint64(ms) << snowflake.TimeShift
}

// rawLast is the last id of window num.
func (s *Store) rawLast(num int64) uint64 {
	ms := (num+1)*s.opts.WindowMillis - snowflake.TwitterEpoch
	if ms >= 1<<(64-snowflake.TimeShift) {
		return math.MaxUint64
	}
	return uint64(ms)<<snowflake.TimeShift - 1
}

// maxWindow is the number of the window of the largest id.
func (s *Store) maxWindow() int64 {
	n, _, _ := s.windowOf(^uint64(0))
	return n
}

// find returns the index in s.wins of the window holding id, or -1.
func (s *Store) find(id uint64) int {
	i := bitpack.LastAtMost(s.los, id)
	if i < 0 || id > s.wins[i].last {
		return -1
	}
	return i
}

// create adds the open window holding id and returns its index.
func (s *Store) create(id uint64) int {
	num, lo, last := s.windowOf(id)
	w := &window{num: num, lo: lo, last: last, open: newNarrow(s.lay, false)}
	return s.insertWindow(w)
}

func (s *Store) insertWindow(w *window) int {
	i, _ := slices.BinarySearchFunc(s.wins, w.num, func(x *window, n int64) int {
		switch {
		case x.num < n:
			return -1
		case x.num > n:
			return 1
		}
		return 0
	})
	s.wins = slices.Insert(s.wins, i, w)
	s.los = slices.Insert(s.los, i, w.lo)
	return i
}

func (s *Store) removeWindow(w *window) {
	for i, x := range s.wins {
		if x == w {
			s.wins = slices.Delete(s.wins, i, i+1)
			s.los = slices.Delete(s.los, i, i+1)
			return
		}
	}
}

func fromCounts(c engine.Counts) vals {
	return vals{c.Likes, c.Comments, c.Reposts, c.Views, c.Favorites}
}

// asVals views c as vals: the same five int64s in the same order.
func asVals(c *engine.Counts) *vals { return (*vals)(unsafe.Pointer(c)) }

func toCounts(v vals) engine.Counts {
	return engine.Counts{Likes: v[0], Comments: v[1], Reposts: v[2], Views: v[3], Favorites: v[4]}
}

func sum(a, d vals) vals {
	for f := range a {
		a[f] = clampAdd(a[f], d[f])
	}
	return a
}

// overlay adds w's frozen and live deltas for key k to base counts c.
func (w *window) overlay(k uint64, c vals) vals {
	if w.frozen != nil {
		if d, ok := w.frozen.get(k); ok {
			c = sum(c, d)
		}
	}
	if w.delta != nil {
		if d, ok := w.delta.get(k); ok {
			c = sum(c, d)
		}
	}
	return c
}

// base returns the counts of id in w's base and frozen delta: what w.delta
// is relative to.
func (s *Store) base(w *window, id uint64) (vals, error) {
	var v vals
	switch {
	case w.open != nil:
		v, _ = w.open.get(id - w.lo)
	case w.sealed != nil:
		v = fromCounts(w.sealed.Get(id))
	case w.cold != nil:
		c, err := w.cold.Get(id)
		if err != nil {
			return vals{}, err
		}
		v = fromCounts(c)
	}
	if w.frozen != nil {
		if d, ok := w.frozen.get(id - w.lo); ok {
			v = sum(v, d)
		}
	}
	return v, nil
}

// noteErr keeps the first error of a cold read; readers call it
// concurrently.
func (s *Store) noteErr(err error) {
	s.errMu.Lock()
	if s.err == nil {
		s.err = err
	}
	s.errMu.Unlock()
}

// Err returns the first error a cold file returned to a read or write,
// if any. The post's counts read as zeros when it happened, and a write
// that needed them was not applied: the engine should treat it as fatal
// (a damaged cold file), as a failed log append is.
func (s *Store) Err() error {
	s.errMu.Lock()
	defer s.errMu.Unlock()
	return s.err
}

// Get returns the counts of post id; a post the store does not hold reads
// as zeros.
func (s *Store) Get(id uint64) engine.Counts {
	i := s.find(id)
	if i < 0 {
		return engine.Counts{}
	}
	w := s.wins[i]
	k := id - w.lo
	var v vals
	switch {
	case w.open != nil:
		v, _ = w.open.get(k)
	case w.sealed != nil:
		v = fromCounts(w.sealed.Get(id))
	case w.cold != nil:
		c, err := w.cold.Get(id)
		if err != nil {
			s.noteErr(err)
			return engine.Counts{}
		}
		v = fromCounts(c)
	}
	return toCounts(w.overlay(k, v))
}

// chunk is how many ids GetMany handles at a time: one bit each in a
// uint64 mask, and stack arrays that stay small.
const chunk = 64

// GetMany stores the counts of ids[i] in out[i]; out must be at least as
// long as ids. It is the feed-page read. Ids in open windows cost one
// probe each, all probes issued before any record is decoded so that
// their cache misses overlap; the ids of each sealed or cold window go to
// that window in one call, which visits each block once (a cold window:
// one pread per run of uncached blocks). It does not allocate.
func (s *Store) GetMany(ids []uint64, out []engine.Counts) {
	out = out[:len(ids)]
	for len(ids) > 0 {
		n := min(len(ids), chunk)
		s.getChunk(ids[:n], out[:n])
		ids, out = ids[n:], out[n:]
	}
}

func (s *Store) getChunk(ids []uint64, out []engine.Counts) {
	var wins [chunk]int32
	var recs [chunk]rec
	var probed, rest uint64          // ids in open windows; ids in sealed or cold ones
	lo, last := uint64(1), uint64(0) // range of window cur; empty at first
	cur := int32(-1)
	for i, id := range ids {
		if id < lo || id > last {
			cur = int32(s.find(id))
			lo, last = 1, 0
			if cur >= 0 {
				lo, last = s.wins[cur].lo, s.wins[cur].last
			}
		}
		wins[i] = cur
		if cur < 0 {
			out[i] = engine.Counts{}
			continue
		}
		w := s.wins[cur]
		if w.open != nil {
			recs[i] = w.open.raw(id - w.lo)
			probed |= 1 << i
		} else {
			rest |= 1 << i
		}
	}
	for m := probed; m != 0; m &= m - 1 {
		i := bits.TrailingZeros64(m)
		w := s.wins[wins[i]]
		k := ids[i] - w.lo
		v := asVals(&out[i])
		w.open.decodeTo(k, &recs[i], v)
		if w.frozen != nil || w.delta != nil {
			*v = w.overlay(k, *v)
		}
	}
	if rest != 0 && rest == 1<<len(ids)-1 && wins[0] == wins[len(ids)-1] && s.oneWindow(wins[:len(ids)]) {
		// A page from one sealed or cold window, the common case: no
		// gathering and scattering.
		s.readBase(s.wins[wins[0]], ids, out)
		return
	}
	for rest != 0 {
		wi := wins[bits.TrailingZeros64(rest)]
		w := s.wins[wi]
		var sub [chunk]uint64
		var pos [chunk]uint8
		var got [chunk]engine.Counts
		n := 0
		for m := rest; m != 0; m &= m - 1 {
			i := bits.TrailingZeros64(m)
			if wins[i] == wi {
				sub[n], pos[n] = ids[i], uint8(i)
				n++
				rest &^= 1 << i
			}
		}
		s.readBase(w, sub[:n], got[:n])
		for j := range n {
			out[pos[j]] = got[j]
		}
	}
}

func (s *Store) oneWindow(wins []int32) bool {
	for _, w := range wins {
		if w != wins[0] {
			return false
		}
	}
	return true
}

// readBase reads ids, all in sealed or cold window w, into out: the
// window's base in one call, then the deltas.
func (s *Store) readBase(w *window, ids []uint64, out []engine.Counts) {
	if w.sealed != nil {
		w.sealed.GetMany(ids, out)
	} else if w.cold != nil {
		if err := w.cold.GetMany(ids, out); err != nil {
			s.noteErr(err)
			clear(out)
		}
	}
	if w.frozen != nil || w.delta != nil {
		for j, id := range ids {
			out[j] = toCounts(w.overlay(id-w.lo, fromCounts(out[j])))
		}
	}
}

// Add adds delta to field f of post id and returns the new value. The
// result saturates at math.MaxInt64 and clamps at 0. f must be valid.
// A write to an open window is a probe and a store; a write to a sealed or
// cold one also reads the post's base counts (for a cold window, a block
// from the cache or the disk), since the clamps are applied per write.
func (s *Store) Add(id uint64, f Field, delta int64) int64 {
	i := s.find(id)
	if i < 0 {
		if delta <= 0 {
			return 0 // zeros are not stored
		}
		i = s.create(id)
	}
	w := s.wins[i]
	k := id - w.lo
	if w.open != nil && !w.busy {
		n := w.open.live
		v := w.open.add(k, f, delta)
		s.adjust(w, w.open.live-n)
		return v
	}
	b, err := s.base(w, id)
	if err != nil {
		s.noteErr(err)
		return 0
	}
	var d vals
	if w.delta != nil {
		d, _ = w.delta.get(k)
	}
	cur := b[f] + d[f]
	v := clampAdd(cur, delta)
	if v == cur {
		return cur
	}
	nd := d
	nd[f] = v - b[f]
	s.putDelta(w, k, b, d, nd)
	return v
}

// putDelta replaces the delta of key k from d to nd over base counts b,
// keeping the window's count of live posts.
func (s *Store) putDelta(w *window, k uint64, b, d, nd vals) {
	if w.delta == nil {
		w.delta = newNarrow(s.lay, true)
	}
	w.delta.put(k, &nd)
	was := add(b, d) != (vals{})
	is := add(b, nd) != (vals{})
	switch {
	case was && !is:
		s.adjust(w, -1)
	case !was && is:
		s.adjust(w, 1)
	}
}

// add returns b+d field by field; callers keep the sums in range.
func add(b, d vals) vals {
	for f := range b {
		b[f] += d[f]
	}
	return b
}

func (s *Store) adjust(w *window, n int) {
	w.live += n
	s.live += n
}

// Set replaces the five counts of post id, as an import does. Negative
// counts are stored as 0; all-zero counts delete the post.
func (s *Store) Set(id uint64, c engine.Counts) {
	v := fromCounts(c)
	for f := range v {
		v[f] = max(v[f], 0)
	}
	i := s.find(id)
	if i < 0 {
		if v == (vals{}) {
			return
		}
		i = s.create(id)
	}
	w := s.wins[i]
	k := id - w.lo
	if w.open != nil && !w.busy {
		n := w.open.live
		w.open.put(k, &v)
		s.adjust(w, w.open.live-n)
		return
	}
	b, err := s.base(w, id)
	if err != nil {
		s.noteErr(err)
		return
	}
	var d vals
	if w.delta != nil {
		d, _ = w.delta.get(k)
	}
	var nd vals
	for f := range v {
		nd[f] = v[f] - b[f] // both in [0, MaxInt64]: no overflow
	}
	if nd == d {
		return
	}
	s.putDelta(w, k, b, d, nd)
}

// Len returns the number of posts with at least one non-zero count.
func (s *Store) Len() int { return s.live }

// errStop ends a merge early when Range's fn returns false.
var errStop = errors.New("postcounts: stopped")

// Range calls fn for every post with a non-zero count, window by window in
// time order (in unspecified order within an open window), until fn
// returns false. fn must not modify the store. Reading a cold window
// reads its whole file.
func (s *Store) Range(fn func(id uint64, c engine.Counts) bool) {
	for _, w := range s.wins {
		if !s.rangeWindow(w, fn) {
			return
		}
	}
}

func (s *Store) rangeWindow(w *window, fn func(id uint64, c engine.Counts) bool) bool {
	if w.open != nil {
		more := true
		w.open.each(func(k uint64, v vals) bool {
			if w.frozen != nil || w.delta != nil {
				v = w.overlay(k, v)
			}
			if v != (vals{}) {
				more = fn(w.lo+k, toCounts(v))
			}
			return more
		})
		if !more || w.delta == nil {
			return more
		}
		// Posts that only the delta has (the window is being sealed).
		w.delta.each(func(k uint64, d vals) bool {
			if _, ok := w.open.find(k); !ok {
				more = fn(w.lo+k, toCounts(sum(vals{}, d)))
			}
			return more
		})
		return more
	}
	more := true
	err := cold.Merge(sinkFunc(func(id uint64, c engine.Counts) error {
		if c.IsZero() {
			return nil
		}
		if more = fn(id, c); !more {
			return errStop
		}
		return nil
	}), w.source(), s.deltaSource(w))
	if err != nil && !errors.Is(err, errStop) {
		s.noteErr(err)
	}
	return more
}

// sinkFunc adapts a function to cold.Sink.
type sinkFunc func(id uint64, c engine.Counts) error

func (f sinkFunc) Add(id uint64, c engine.Counts) error { return f(id, c) }

// source returns w's sealed or cold base as a cold.Source, or nil.
func (w *window) source() cold.Source {
	switch {
	case w.sealed != nil:
		return w.sealed.Iter()
	case w.cold != nil:
		return w.cold.Iter()
	}
	return nil
}

// deltaSource returns w's frozen and live deltas, summed, in id order.
func (s *Store) deltaSource(w *window) cold.Source {
	return newKeySource(combine(w.frozen, w.delta, s.lay), w.lo)
}

// combine returns a delta table equal to a+b (either may be nil): a
// copy, so that the caller may keep it while the store changes.
func combine(a, b *narrow, lay *layout) *narrow {
	switch {
	case a == nil && b == nil:
		return newNarrow(lay, true)
	case a == nil:
		return b.clone()
	}
	out := a.clone()
	if b != nil {
		b.each(func(k uint64, d vals) bool {
			v, _ := out.get(k)
			v = add(v, d)
			out.put(k, &v)
			return true
		})
	}
	return out
}

// cacheBytes is what the cold cache has allocated so far: it grows as
// cold blocks are read, up to ColdCacheBytes.
func (s *Store) cacheBytes() int {
	if s.cache == nil {
		return 0
	}
	return s.cache.SizeBytes()
}

// MemoryBytes returns the bytes the store holds: open tables, deltas,
// sealed windows, the block indexes of cold files and the cold cache.
func (s *Store) MemoryBytes() int {
	n := s.cacheBytes() + cap(s.wins)*8 + cap(s.los)*8
	for _, w := range s.wins {
		n += w.memoryBytes()
	}
	return n
}

var windowBytes = int(unsafe.Sizeof(window{}))

func (w *window) memoryBytes() int {
	n := windowBytes
	for _, t := range []*narrow{w.open, w.frozen, w.delta} {
		if t != nil {
			n += t.memoryBytes()
		}
	}
	if w.sealed != nil {
		n += w.sealed.SizeBytes()
	}
	if w.cold != nil {
		n += w.cold.MemoryBytes() + len(w.coldPath)
	}
	return n
}

// Stats describe where the store's posts and bytes are.
type Stats struct {
	Posts                      int // non-zero posts (Len)
	OpenWindows, OpenPosts     int // open tables (windows being sealed included)
	OpenBytes                  int
	SealedWindows, SealedPosts int // in-memory sealed windows (base posts)
	SealedBytes                int
	ColdWindows, ColdPosts     int // cold files (base posts)
	ColdIndexBytes             int // block indexes in memory
	ColdFileBytes              int64
	DeltaPosts, DeltaBytes     int // deltas over sealed and cold windows (frozen ones included)
	OverflowPosts              int // posts with a field in an overflow table
	CacheBytes                 int
	MemoryBytes                int
	Jobs                       int // running
	ColdCache                  cold.CacheStats
	WindowMillis               int64
}

// Stats returns the store's figures.
func (s *Store) Stats() Stats {
	st := Stats{Posts: s.live, CacheBytes: s.cacheBytes(), MemoryBytes: s.MemoryBytes(), Jobs: len(s.jobs),
		WindowMillis: s.opts.WindowMillis}
	if s.cache != nil {
		st.ColdCache = s.cache.Stats()
	}
	for _, w := range s.wins {
		switch {
		case w.open != nil:
			st.OpenWindows++
			st.OpenPosts += w.open.len()
			st.OpenBytes += w.open.memoryBytes()
			st.OverflowPosts += w.open.overflowed()
		case w.sealed != nil:
			st.SealedWindows++
			st.SealedPosts += w.sealed.Len()
			st.SealedBytes += w.sealed.SizeBytes()
		case w.cold != nil:
			st.ColdWindows++
			st.ColdPosts += w.cold.Len()
			st.ColdIndexBytes += w.cold.MemoryBytes()
			st.ColdFileBytes += w.cold.Size()
		}
		for _, t := range []*narrow{w.frozen, w.delta} {
			if t != nil {
				st.DeltaPosts += t.len()
				st.DeltaBytes += t.memoryBytes()
				st.OverflowPosts += t.overflowed()
			}
		}
	}
	return st
}
