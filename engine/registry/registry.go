// Package registry owns the post registry: which posts exist and who wrote
// each (post id → author id, 0 for a post imported without its author). A
// like or comment needs the author to bump their unread badge, and every
// post ever made is here, so at scale the registry is as large as the post
// counts and is kept the same way: partitioned by the time a snowflake id
// carries (snowflake.Windows, the same windows as engine/postcounts), recent
// windows in open pointer-free hash tables, windows older than OpenAge
// sealed into sorted bit-packed blocks with an in-memory index of block
// first ids (about 7–8 bytes per post against ~44 for a general hash
// table, see BenchmarkMemory).
//
// It promises: Get and Put are allocation-free except when an open table
// grows; a post is never forgotten; sealing and compaction (Plan, Run,
// Finish) change how posts are kept, never what Get answers, and Run works
// on immutable inputs so readers and writers carry on meanwhile. A
// Registry is not safe for concurrent use: callers lock as the comments of
// Plan, Run and Finish say.
package registry

import (
	"fmt"
	"slices"
	"time"

	"github.com/tally-dev/tally/engine/snowflake"
)

// Defaults of Options.
const (
	DefaultWindowMillis = 86_400_000
	DefaultOpenAge      = 7 * 24 * time.Hour
	DefaultCompactMin   = 1024
)

// Options configure a Registry; the zero value is day windows, the last 7
// days open.
type Options struct {
	// WindowMillis is the window length in milliseconds; 0 means
	// DefaultWindowMillis.
	WindowMillis int64
	// OpenAge: a window stays an open table until it ended this long ago.
	// 0 means DefaultOpenAge; negative seals every window that has ended.
	OpenAge time.Duration
	// CompactMin: posts registered late into a sealed window wait in a
	// small open table until it holds CompactMin posts and an eighth as
	// many as the sealed part. 0 means DefaultCompactMin.
	CompactMin int
}

// Registry maps post ids to authors.
type Registry struct {
	opts Options
	win  snowflake.Windows
	wins []*window // by number
	los  []uint64  // first id of each window, for the binary search
	live int
}

// window is the posts of one time window: open holds what was registered
// since the window was last sealed, frozen what a running Job is folding
// into a new run, sealed the rest. A post is in at most one of open and
// sealed, except that an open entry overrides a sealed one (an import that
// gives an authorless post its author).
type window struct {
	num      int64
	lo, last uint64
	open     openTable
	frozen   *openTable
	sealed   *run
	busy     bool
}

// New returns an empty registry.
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
	return &Registry{opts: opts, win: snowflake.Windows{Millis: opts.WindowMillis}}, nil
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
	i := lastAtMost(r.los, id)
	if i < 0 || id > r.wins[i].last {
		return -1
	}
	return i
}

// lastAtMost returns the index of the last element of the sorted s that is
// <= x, or -1.
func lastAtMost(s []uint64, x uint64) int {
	if len(s) == 0 || s[0] > x {
		return -1
	}
	base, n := 0, len(s)
	for n > 1 {
		half := n >> 1
		if s[base+half] <= x {
			base += half
		}
		n -= half
	}
	return base
}

// windowFor returns the window holding id, creating it.
func (r *Registry) windowFor(id uint64) *window {
	if i := r.find(id); i >= 0 {
		return r.wins[i]
	}
	num, lo, last := r.win.Of(id)
	w := &window{num: num, lo: lo, last: last}
	i, _ := slices.BinarySearchFunc(r.wins, num, func(x *window, n int64) int {
		switch {
		case x.num < n:
			return -1
		case x.num > n:
			return 1
		}
		return 0
	})
	r.wins = slices.Insert(r.wins, i, w)
	r.los = slices.Insert(r.los, i, lo)
	return w
}

// get looks id up in w: open, then frozen, then sealed.
func (w *window) get(id uint64) (uint64, bool) {
	if a, ok := w.openGet(id); ok {
		return a, true
	}
	if w.sealed != nil {
		return w.sealed.get(id)
	}
	return 0, false
}

// Get returns id's author and whether id is registered.
func (r *Registry) Get(id uint64) (author uint64, ok bool) {
	i := r.find(id)
	if i < 0 {
		return 0, false
	}
	return r.wins[i].get(id)
}

// pageChunk is how many posts GetMany looks up together: a feed page.
const pageChunk = 64

// GetMany looks up a page of posts: authors[i], found[i] for ids[i]. It
// does in three passes what Get does in one, so that the cache misses of
// different posts overlap instead of queueing: first every sealed post's
// block header is loaded, then every record the lookups start from, then
// the lookups finish on lines already fetched.
func (r *Registry) GetMany(ids, authors []uint64, found []bool) {
	var views [pageChunk]blockView
	var guess [pageChunk]int32
	var keys [pageChunk]uint64
	var blocks [pageChunk]int32
	var wins [pageChunk]int32
	for len(ids) > 0 {
		n := min(len(ids), pageChunk)
		var sink byte
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
					sink ^= w.sealed.data[w.sealed.offs[b]]
				}
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
			sink ^= k.touch(i)
		}
		for j := range n {
			if blocks[j] >= 0 {
				authors[j], found[j] = views[j].find(keys[j], int(guess[j]))
			}
		}
		use(sink)
		ids, authors, found = ids[n:], authors[n:], found[n:]
	}
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
// and reports whether id is new.
func (r *Registry) Put(id, author uint64) bool {
	w := r.windowFor(id)
	old, exists := w.get(id)
	if exists && old == author {
		return false
	}
	w.open.put(id-w.lo, author)
	if !exists {
		r.live++
	}
	return !exists
}

// Len returns the number of registered posts.
func (r *Registry) Len() int { return r.live }

// Range calls fn for every registered post in id order until fn returns
// false. It allocates a sorted copy of each window's open entries.
func (r *Registry) Range(fn func(id, author uint64) bool) {
	for _, w := range r.wins {
		if !w.each(fn) {
			return
		}
	}
}

// each visits w's posts in id order; an open or frozen entry overrides a
// sealed one.
func (w *window) each(fn func(id, author uint64) bool) bool {
	over := w.open.sorted()
	if w.frozen != nil {
		over = mergeOver(w.frozen.sorted(), over)
	}
	i := 0
	emitBefore := func(id uint64) bool {
		for ; i < len(over) && w.lo+over[i].key < id; i++ {
			if !fn(w.lo+over[i].key, over[i].author) {
				return false
			}
		}
		return true
	}
	if w.sealed != nil {
		ok := w.sealed.each(func(id, author uint64) bool {
			if !emitBefore(id) {
				return false
			}
			if i < len(over) && w.lo+over[i].key == id {
				author = over[i].author
				i++
			}
			return fn(id, author)
		})
		if !ok {
			return false
		}
	}
	return emitBefore(^uint64(0)) && (i == len(over) || fn(w.lo+over[i].key, over[i].author))
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

// MemoryBytes is the memory the registry holds: tables, blocks and
// indexes.
func (r *Registry) MemoryBytes() int {
	n := 24*cap(r.wins) + 8*cap(r.los)
	for _, w := range r.wins {
		n += w.memoryBytes()
	}
	return n
}

func (w *window) memoryBytes() int {
	n := 96 + w.open.memoryBytes()
	if w.frozen != nil {
		n += w.frozen.memoryBytes()
	}
	if w.sealed != nil {
		n += w.sealed.memoryBytes()
	}
	return n
}

// Stats describe how the registry is kept.
type Stats struct {
	Windows, OpenWindows, SealedWindows int
	OpenPosts, SealedPosts              int // an overridden sealed post counts in both
	OpenBytes, SealedBytes              int
}

// Stats reports the current layout.
func (r *Registry) Stats() Stats {
	var s Stats
	s.Windows = len(r.wins)
	for _, w := range r.wins {
		if w.sealed != nil {
			s.SealedWindows++
			s.SealedPosts += w.sealed.n
			s.SealedBytes += w.sealed.memoryBytes()
		}
		if w.open.len() > 0 || w.sealed == nil {
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
