// Package registry owns the post registry: which posts exist and who wrote
// each (post id → author id, 0 for a post imported without its author). A
// like or comment needs the author to bump their unread badge, and every
// post ever made is here, so at scale the registry is as large as the post
// counts and is kept the same way: partitioned by the time a snowflake id
// carries (snowflake.Windows, the same windows as engine/postcounts), recent
// windows in open pointer-free hash tables, windows older than OpenAge
// sealed into sorted bit-packed blocks with an in-memory index of block
// first ids (about 8 bytes per post against ~36 for a general hash
// table, see BenchmarkMemory).
//
// With Options.Dir set, sealed windows past ColdAge, or the oldest while
// MemoryBytes exceeds MemoryBudget, move to files (coldfile.go) of which
// only the block index stays in memory; a lookup reads one block through
// a cold.Cache (Options.Cache, which other stores may share, or one of
// the registry's own). The files are derived data:
// New clears the registry's files from Dir, and the serialized form
// (persist.go) holds every window inline, so it loads without them.
//
// It promises: Get and Put are allocation-free except when an open table
// grows (a cold miss included, in the steady state); a post is never
// forgotten; sealing, cooling and compaction (Plan, Run, Finish) change
// how posts are kept, never what Get answers, and Run works on immutable
// inputs so readers and writers carry on meanwhile; a cold block that
// fails its checksum or header check is an error (wrapping ErrCorrupt),
// never a wrong answer. A Registry is not safe for concurrent use:
// callers lock as the comments of Get, Plan, Run and Finish say (Get,
// GetMany and Range only read and may share a read lock).
package registry

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/tally-dev/tally/engine/bitpack"
	"github.com/tally-dev/tally/engine/cold"
	"github.com/tally-dev/tally/engine/snowflake"
)

// Defaults of Options.
const (
	DefaultWindowMillis   = 86_400_000
	DefaultOpenAge        = 7 * 24 * time.Hour
	DefaultCompactMin     = 1024
	DefaultColdCacheBytes = 16 << 20
)

// Options configure a Registry; the zero value is day windows, the last 7
// days open, no cold tier.
type Options struct {
	// WindowMillis is the window length in milliseconds; 0 means
	// DefaultWindowMillis.
	WindowMillis int64
	// OpenAge: a window stays an open table until it ended this long ago.
	// 0 means DefaultOpenAge; negative seals every window that has ended.
	OpenAge time.Duration
	// CompactMin: posts registered late into a sealed or cold window wait
	// in a small open table until it holds CompactMin posts and an eighth
	// as many as the sealed part. 0 means DefaultCompactMin.
	CompactMin int

	// Dir holds the cold files (rg-<window>-<generation>.win). Empty
	// means no cold tier: ColdAge and MemoryBudget are then ignored. The
	// files are derived data owned by the Registry: New deletes those a
	// previous process left, so Dir must not be shared by two registries
	// (it may be shared with other stores: only names the registry makes
	// are touched).
	Dir string
	// ColdAge: a sealed window that ended this long ago moves to a file.
	// 0 means never by age.
	ColdAge time.Duration
	// MemoryBudget: while MemoryBytes (the registry's own memory, not the
	// cache's) exceeds it, the oldest sealed window moves to a file. 0
	// means no budget.
	MemoryBudget int64
	// Cache is the block cache of the cold files, typically shared with
	// engine/postcounts. Nil means a cache of the registry's own of
	// ColdCacheBytes (0: DefaultColdCacheBytes; below 64 KiB: no caching).
	Cache          *cold.Cache
	ColdCacheBytes int
}

// Registry maps post ids to authors.
type Registry struct {
	opts  Options
	win   snowflake.Windows
	wins  []*window // by number
	los   []uint64  // first id of each window, for the binary search
	live  int
	cache *cold.Cache

	epoch   uint64 // bumped by Load: jobs planned before are void
	nextGen uint64 // names cold files
}

// window is the posts of one time window: open holds what was registered
// since the window was last sealed, frozen what a running Job is folding
// into a new run, and the rest is in sealed (in memory) or cold (a file),
// at most one of them. A post is in at most one of open and sealed/cold,
// except that an open entry overrides a sealed one (an import that gives
// an authorless post its author).
type window struct {
	num      int64
	lo, last uint64
	open     openTable
	frozen   *openTable
	sealed   *run
	cold     *coldFile
	busy     bool
	live     int // distinct posts
}

// ErrCorrupt is wrapped by every error about bytes that are not what the
// registry wrote: a serialized image Load refuses, or a cold block that
// fails its checksum or header check.
var ErrCorrupt = errors.New("registry: corrupt data")

func corrupt(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrCorrupt, fmt.Sprintf(format, args...))
}

// New returns an empty registry. With a Dir, it creates the directory if
// need be and deletes the cold files and temporary files a previous
// process left there.
func New(opts Options) (*Registry, error) {
	if opts.WindowMillis == 0 {
		opts.WindowMillis = DefaultWindowMillis
	}
	if opts.WindowMillis < 1 || opts.WindowMillis > 1<<34 {
		return nil, fmt.Errorf("registry: WindowMillis %d outside [1, 2^34]", opts.WindowMillis)
	}
	if opts.OpenAge == 0 {
		opts.OpenAge = DefaultOpenAge
	}
	if opts.CompactMin <= 0 {
		opts.CompactMin = DefaultCompactMin
	}
	r := &Registry{opts: opts, win: snowflake.Windows{Millis: opts.WindowMillis}}
	if opts.Dir != "" {
		if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
			return nil, fmt.Errorf("registry: %w", err)
		}
		if err := clearDir(opts.Dir); err != nil {
			return nil, err
		}
		r.cache = opts.Cache
		if r.cache == nil {
			n := opts.ColdCacheBytes
			if n == 0 {
				n = DefaultColdCacheBytes
			}
			r.cache = cold.NewCache(max(n, 0))
		}
	}
	return r, nil
}

// find returns the index in r.wins of the window holding id, or -1.
func (r *Registry) find(id uint64) int {
	if len(r.wins) == 0 {
		return -1
	}
	// Windows are usually consecutive (a day each, every day has posts):
	// then the window number gives the index without a search.
	num, _, _ := r.win.Of(id)
	if i := num - r.wins[0].num; i >= 0 && i < int64(len(r.wins)) && r.wins[i].num == num {
		return int(i)
	}
	i := bitpack.LastAtMost(r.los, id)
	if i < 0 || id > r.wins[i].last {
		return -1
	}
	return i
}

// windowFor returns the window holding id, creating it.
func (r *Registry) windowFor(id uint64) *window {
	if i := r.find(id); i >= 0 {
		return r.wins[i]
	}
	num, lo, last := r.win.Of(id)
	w := &window{num: num, lo: lo, last: last}
	i, _ := slices.BinarySearchFunc(r.wins, num, func(x *window, n int64) int { return cmp.Compare(x.num, n) })
	r.wins = slices.Insert(r.wins, i, w)
	r.los = slices.Insert(r.los, i, lo)
	return w
}

// get looks id up in w: open, then frozen, then sealed or cold.
func (w *window) get(id uint64) (uint64, bool, error) {
	if a, ok := w.openGet(id); ok {
		return a, true, nil
	}
	switch {
	case w.sealed != nil:
		a, ok := w.sealed.get(id)
		return a, ok, nil
	case w.cold != nil:
		return w.cold.get(id)
	}
	return 0, false, nil
}

// Get returns id's author and whether id is registered. The error is not
// nil only when id is in a cold window whose block could not be read or
// failed its checks (errors.Is(err, ErrCorrupt) for the latter); the
// answer is then (0, false) and must not be trusted. Get only reads: it
// may run under a read lock shared with other readers.
func (r *Registry) Get(id uint64) (author uint64, ok bool, err error) {
	i := r.find(id)
	if i < 0 {
		return 0, false, nil
	}
	return r.wins[i].get(id)
}

// pageChunk is how many posts GetMany looks up together: a feed page.
const pageChunk = 64

// GetMany looks up a page of posts: authors[i], found[i] for ids[i]. It
// does in three passes what Get does in one, so that the cache misses of
// different posts overlap instead of queueing: first every sealed post's
// block header is loaded, then every record the lookups start from, then
// the lookups finish on lines already fetched. Posts in cold windows are
// answered a block at a time: cached blocks in place, the others read in
// file order, one pread per run of adjacent blocks. On an error (as Get's)
// the page must be treated as failed: some answers are missing.
func (r *Registry) GetMany(ids, authors []uint64, found []bool) error {
	var views [pageChunk]blockView
	var guess [pageChunk]int32
	var keys [pageChunk]uint64
	var blocks [pageChunk]int32
	var wins [pageChunk]int32
	var cold coldPage
	var firstErr error
	for len(ids) > 0 {
		n := min(len(ids), pageChunk)
		var sink byte
		cold.n = 0
		for j, id := range ids[:n] {
			blocks[j] = -1
			i := r.find(id)
			wins[j] = int32(i)
			if i < 0 {
				authors[j], found[j] = 0, false
				continue
			}
			w := r.wins[i]
			if a, ok := w.openGet(id); ok {
				authors[j], found[j] = a, true
				continue
			}
			authors[j], found[j] = 0, false
			if w.sealed != nil {
				if b := w.sealed.blockOf(id); b >= 0 {
					blocks[j] = int32(b)
				}
			} else if w.cold != nil {
				if b := bitpack.LastAtMost(w.cold.firsts, id); b >= 0 {
					cold.add(w.cold, b, j)
				}
			}
		}
		// The loads of each pass are issued in a loop of their own: mixed
		// into the searches around them, a few at most were in flight.
		for j := range n {
			if b := blocks[j]; b >= 0 {
				s := r.wins[wins[j]].sealed
				sink ^= s.data[s.offs[b]]
			}
		}
		for j, id := range ids[:n] {
			if blocks[j] < 0 {
				continue
			}
			s := r.wins[wins[j]].sealed
			k := &views[j]
			k.parse(s.firsts[blocks[j]], s.block(int(blocks[j])))
			x, i, ok := k.guess(id)
			if !ok {
				blocks[j] = -1
				continue
			}
			keys[j], guess[j] = x, int32(i)
		}
		for j := range n {
			if blocks[j] >= 0 {
				sink ^= views[j].touch(int(guess[j]))
			}
		}
		for j := range n {
			if blocks[j] >= 0 {
				authors[j], found[j] = views[j].find(keys[j], int(guess[j]))
			}
		}
		use(sink)
		if cold.n > 0 {
			if err := cold.read(ids, authors, found); err != nil && firstErr == nil {
				firstErr = err
			}
		}
		ids, authors, found = ids[n:], authors[n:], found[n:]
	}
	return firstErr
}

//go:noinline
func use(byte) {}

// openGet looks id up in w's open and frozen tables.
func (w *window) openGet(id uint64) (uint64, bool) {
	if a, ok := w.open.get(id - w.lo); ok {
		return a, true
	}
	if w.frozen != nil {
		return w.frozen.get(id - w.lo)
	}
	return 0, false
}

// Put registers id with author, or changes the author of a registered id,
// and reports whether id is new. Registering into a cold window reads the
// post's block to tell a new post from a known one; if that fails Put
// changes nothing and returns the error (as Get's).
func (r *Registry) Put(id, author uint64) (bool, error) {
	if i := r.find(id); i >= 0 {
		w := r.wins[i]
		old, exists, err := w.get(id)
		if err != nil {
			return false, err
		}
		if exists && old == author {
			return false, nil
		}
		w.open.put(id-w.lo, author)
		if !exists {
			w.live++
			r.live++
		}
		return !exists, nil
	}
	w := r.windowFor(id)
	w.open.put(id-w.lo, author)
	w.live++
	r.live++
	return true, nil
}

// Len returns the number of registered posts.
func (r *Registry) Len() int { return r.live }

// Range calls fn for every registered post in id order until fn returns
// false. It allocates a sorted copy of each window's open entries and
// reads cold windows' files sequentially (not through the cache); a read
// or check failure there stops it with the error.
func (r *Registry) Range(fn func(id, author uint64) bool) error {
	for _, w := range r.wins {
		ok, err := w.each(fn)
		if err != nil || !ok {
			return err
		}
	}
	return nil
}

// overrides returns w's open and frozen entries, key-sorted, open winning.
func (w *window) overrides() []slot {
	over := w.open.sorted()
	if w.frozen != nil {
		over = mergeOver(w.frozen.sorted(), over)
	}
	return over
}

// each visits w's posts in id order; an open or frozen entry overrides a
// sealed one.
func (w *window) each(fn func(id, author uint64) bool) (bool, error) {
	return mergeEach(w.lo, w.overrides(), w.sealed, w.cold, fn)
}

// mergeEach visits the posts of a base (a run, a cold file or neither)
// overlaid with over (sorted keys relative to lo) in id order.
func mergeEach(lo uint64, over []slot, base *run, cf *coldFile, fn func(id, author uint64) bool) (bool, error) {
	i := 0
	emitBefore := func(id uint64) bool {
		for ; i < len(over) && lo+over[i].key < id; i++ {
			if !fn(lo+over[i].key, over[i].author) {
				return false
			}
		}
		return true
	}
	visit := func(id, author uint64) bool {
		if !emitBefore(id) {
			return false
		}
		if i < len(over) && lo+over[i].key == id {
			author = over[i].author
			i++
		}
		return fn(id, author)
	}
	switch {
	case base != nil:
		if !base.each(visit) {
			return false, nil
		}
	case cf != nil:
		ok, err := cf.each(visit)
		if err != nil || !ok {
			return false, err
		}
	}
	return emitBefore(^uint64(0)) && (i == len(over) || fn(lo+over[i].key, over[i].author)), nil
}

// mergeOver merges two key-sorted slot lists; on equal keys b wins.
func mergeOver(a, b []slot) []slot {
	out := make([]slot, 0, len(a)+len(b))
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case j == len(b) || (i < len(a) && a[i].key < b[j].key):
			out = append(out, a[i])
			i++
		case i == len(a) || b[j].key < a[i].key:
			out = append(out, b[j])
			j++
		default:
			out = append(out, b[j])
			i++
			j++
		}
	}
	return out
}

// MemoryBytes is the memory the registry holds: tables, blocks, indexes
// and cold files' block indexes. The cold cache is not counted: it is
// shared, and bounded by its own capacity.
func (r *Registry) MemoryBytes() int {
	n := 24*cap(r.wins) + 8*cap(r.los)
	for _, w := range r.wins {
		n += w.memoryBytes()
	}
	return n
}

func (w *window) memoryBytes() int {
	n := 112 + w.open.memoryBytes()
	if w.frozen != nil {
		n += w.frozen.memoryBytes()
	}
	if w.sealed != nil {
		n += w.sealed.memoryBytes()
	}
	if w.cold != nil {
		n += w.cold.memoryBytes()
	}
	return n
}

// Stats describe how the registry is kept.
type Stats struct {
	Windows, OpenWindows, SealedWindows, ColdWindows int
	OpenPosts, SealedPosts, ColdPosts                int // an overridden sealed or cold post counts twice
	OpenBytes, SealedBytes                           int
	ColdIndexBytes                                   int   // memory of the cold files' block indexes
	ColdFileBytes                                    int64 // their size on disk
}

// Stats reports the current layout.
func (r *Registry) Stats() Stats {
	var s Stats
	s.Windows = len(r.wins)
	for _, w := range r.wins {
		switch {
		case w.sealed != nil:
			s.SealedWindows++
			s.SealedPosts += w.sealed.n
			s.SealedBytes += w.sealed.memoryBytes()
		case w.cold != nil:
			s.ColdWindows++
			s.ColdPosts += w.cold.n
			s.ColdIndexBytes += w.cold.memoryBytes()
			s.ColdFileBytes += w.cold.size
		}
		if w.open.len() > 0 || (w.sealed == nil && w.cold == nil) {
			s.OpenWindows++
		}
		s.OpenPosts += w.open.len()
		s.OpenBytes += w.open.memoryBytes()
		if w.frozen != nil {
			s.OpenPosts += w.frozen.len()
			s.OpenBytes += w.frozen.memoryBytes()
		}
	}
	return s
}
