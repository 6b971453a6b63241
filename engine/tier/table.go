package tier

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"time"
	"unsafe"

	"github.com/tally-dev/tally/engine/snowflake"
	"github.com/tally-dev/tally/engine/tier/internal/blockcache"
)

// Defaults of Options.
const (
	DefaultWindowMillis   = 86_400_000
	DefaultOpenAge        = 7 * 24 * time.Hour
	DefaultCompactMin     = 64
	DefaultColdCacheBytes = 4 << 20
)

// Options configure a table, the post table or a pair set alike; the zero
// value is day windows, the last 7 days open, everything older sealed in
// memory, no cold tier.
type Options struct {
	// WindowMillis is the window length; 0 means DefaultWindowMillis.
	WindowMillis int64
	// OpenAge: a window stays an open table until it ended this long
	// ago; 0 means DefaultOpenAge, negative seals every ended window.
	OpenAge time.Duration
	// CompactMin: a sealed or cold window's delta is folded back once it
	// holds CompactMin records and an eighth as many as the window; 0
	// means DefaultCompactMin. The eighth is what bounds a large window's
	// rewrites; CompactMin bounds a small window's, whose rewrite is a few
	// KiB, so it is small: a delta is a hash table, several times the
	// bytes of the blocks it folds into, and writes spread over many
	// windows (likes on old posts of a mostly cold server) hold a delta
	// in every one of them.
	CompactMin int
	// Dir holds the cold files (<Prefix>-<window>-<generation>.tier).
	// Empty means no cold tier (ColdAge and MemoryBudget are ignored).
	Dir string
	// Derived says the caller clears Dir at every start and rebuilds its
	// files from its own durable state, so a file need not survive a
	// crash: a job writes its file with no fsync (of the file or of the
	// directory), which would only hold the caller's own fsyncs (a log's)
	// behind it on the same disk. A file is still complete under its name
	// or absent (written under a temporary name, then renamed), and every
	// block is checked when read.
	Derived bool
	// Prefix names this table's files in Dir, which other tables may
	// share under other prefixes. Empty means the table's tag.
	Prefix string
	// ColdAge: a sealed window that ended this long ago moves to a file;
	// 0 means never by age.
	ColdAge time.Duration
	// MemoryBudget: while MemoryBytes exceeds it, Plan moves the oldest
	// sealed windows to files. 0 means no budget.
	MemoryBudget int64
	// Cache is the block cache of the cold files, shareable between
	// tables; nil means one of ColdCacheBytes (0: DefaultColdCacheBytes).
	Cache          *Cache
	ColdCacheBytes int
}

// Cache is the block cache of cold files (engine/tier/internal/blockcache):
// a fixed budget of bytes, never exceeded, that the tables of an engine
// share.
type Cache = blockcache.Cache

// NewCache returns a block cache that holds at most capacityBytes of
// memory, allocated as blocks are cached; below 64 KiB it caches nothing.
func NewCache(capacityBytes int) *Cache { return blockcache.NewCache(capacityBytes) }

// withDefaults fills in the zero fields of opts and checks WindowMillis.
func (opts Options) withDefaults() (Options, error) {
	if opts.WindowMillis == 0 {
		opts.WindowMillis = DefaultWindowMillis
	}
	if opts.WindowMillis < 1 || opts.WindowMillis > 1<<34 {
		return opts, fmt.Errorf("tier: WindowMillis %d outside [1, 2^34]", opts.WindowMillis)
	}
	if opts.OpenAge == 0 {
		opts.OpenAge = DefaultOpenAge
	}
	if opts.CompactMin <= 0 {
		opts.CompactMin = DefaultCompactMin
	}
	return opts, nil
}

// table is the windowed core that the post table and the pair sets are:
// windows by number, each in one of its forms with a delta over it, the
// maintenance policy and its jobs, the snapshot image, the cold files and
// the arena of sealed windows. What a record is, it leaves to its shape.
type table struct {
	shape recordShape // the table that embeds this one
	image imageFormat
	opts  Options
	win   snowflake.Windows

	wins []*window // by number
	los  []uint64  // wins[i].lo, searched without touching the windows
	n    int       // records
	jobs int       // planned and not finished

	epoch uint64 // bumped by Load: jobs planned before it are void
	view  *View  // the view Capture gave out, until Release; nil: none
	coldStore
	arena arena // the bytes of sealed windows
}

// recordShape is what a table's records are, implemented by *Posts (a
// post's author and counts by post id) and *Set ((user, post) pairs): the
// open table of a window and its delta, the blocks of its image, and
// their entries in a snapshot. The core calls it for the cold paths
// (jobs, snapshots, checks); the hot paths are the shapes' own.
type recordShape interface {
	// newOpen returns an empty open table for a window.
	newOpen() body
	// writeImage writes the image of the window starting at lo whose
	// records are base's overlaid by fold (nil: none), in key order,
	// leaving out the forgotten posts drop (sorted; sets only).
	writeImage(w io.Writer, base body, lo uint64, fold overlay, drop []uint64) error
	// dropped settles window w after a rewrite left out the forgotten
	// posts drop: its delta forgets them too and its count is redone.
	dropped(w *window, drop []uint64)
	// scanBody appends to found the ids at or after from of body b
	// (window [lo, last]) whose record is user's (scan.go), reading a
	// sealed or cold body from the block holding from until limit records
	// are read; it returns where the next scan starts (last+1 when the
	// body is read to its end). scanOverlay does the same for an
	// overlay's records, all of them.
	scanBody(b body, lo, last uint64, from Cursor, limit int, user uint64, found *[]uint64) (next Cursor, err error)
	scanOverlay(o overlay, lo, user uint64, found *[]uint64)
	// verifyBlocks reads every block of a sealed or cold body and checks
	// it as far as its contents, the key order across blocks and the
	// footer's totals.
	verifyBlocks(b body) error
	// checkBlock checks block i of an image with index x (its bytes and
	// CRC) as a read from a file does: its checksum and header.
	checkBlock(x *blockIndex, i int, blk []byte) error
	// foldInto writes an overlay into the open table it lies over.
	foldInto(open body, o overlay)
	// compose returns the overlay equal to lower with upper over it
	// (either may be nil), reusing their tables: what a failed job
	// leaves of its frozen delta and the writes since.
	compose(lower, upper overlay) overlay
	// head returns what writes what the shape keeps besides its windows
	// (the post table's kinds), as it is now, at the start of a snapshot
	// image (a View takes it at Capture); readHead
	// reads it back and returns what installs it, which Load calls once
	// the whole image is sound (nil: nothing to install).
	head() func(sw *snapshotWriter)
	readHead(sr *snapshotReader) func()
	// writeOpen and writeOverlay write a window's open table and its
	// overlays (frozen, then delta over it; either may be nil) as
	// snapshot entries; readOpen and readOverlay read them back into
	// window w, readOverlay returning how many records w's view holds
	// and checking the overlay against w's body.
	writeOpen(sw *snapshotWriter, open body) error
	writeOverlay(sw *snapshotWriter, frozen, delta overlay) error
	readOpen(sr *snapshotReader, w *window) body
	readOverlay(sr *snapshotReader, w *window) (o overlay, records int, err error)
}

// window is one time window. body is the form its base records are kept
// in; delta holds the writes that body does not take in place (sealed,
// cold, or an open table a job is sealing), overriding it; job is the
// job planned on it, whose frozen delta (the one it folds back) is read
// between the two.
type window struct {
	num      int64
	lo, last uint64 // the window's ids are [lo, last]
	body     body
	delta    overlay // nil: none
	job      *Job    // nil: none
	n        int     // records in the view
	// life is nil but while the window's records are being erased or
	// forgotten: most windows never are, and a pointer costs each window
	// less than the fields would.
	life *windowLife
}

// windowLife is what a window holds while its records are being erased
// or forgotten.
type windowLife struct {
	// held counts the scans (scan.go) reading an open body without the
	// lock: while held, the body takes no writes in place (they go to
	// the delta, folded back when the last scan finishes) and no job is
	// planned on the window.
	held int
	// scrub: the window's body or delta holds what a caller removed and
	// wants gone from memory, snapshots and files (Scrub): the next Plan
	// rewrites the window whatever its delta's size.
	scrub bool
	// forgot are the posts of a set's window whose pairs are forgotten
	// (Set.Forget), sorted: reads leave them out, and the window's next
	// rewrite drops them.
	forgot []uint64
}

func (w *window) lifeOf() *windowLife {
	if w.life == nil {
		w.life = new(windowLife)
	}
	return w.life
}

// tidyLife drops a life that holds nothing any more.
func (w *window) tidyLife() {
	if l := w.life; l != nil && l.held == 0 && !l.scrub && len(l.forgot) == 0 {
		w.life = nil
	}
}

func (w *window) held() bool { return w.life != nil && w.life.held > 0 }

func (w *window) scrubbed() bool { return w.life != nil && w.life.scrub }

func (w *window) forgot() []uint64 {
	if w.life == nil {
		return nil
	}
	return w.life.forgot
}

func (w *window) setScrub(scrub bool) {
	if scrub {
		w.lifeOf().scrub = true
	} else if w.life != nil {
		w.life.scrub = false
		w.tidyLife()
	}
}

// frozen returns the delta the window's job is folding back, or nil.
func (w *window) frozen() overlay {
	if w.job == nil {
		return nil
	}
	return w.job.fold
}

// body is the form a window's base records are kept in: the shape's open
// table, a *sealedWindow or a *coldWindow, and nothing else.
type body interface {
	kind() Kind
	records() int
	memoryBytes() int
}

// overlay is a window's delta, a layer of writes over its body: the post
// table's rows (*rowTable), a set's additions and tombstones
// (*pairDelta).
type overlay interface {
	len() int
	memoryBytes() int
}

// Kind names a window's form.
type Kind uint8

const (
	Open Kind = iota
	Sealed
	Cold
)

func (k Kind) String() string {
	switch k {
	case Open:
		return "open"
	case Sealed:
		return "sealed"
	case Cold:
		return "cold"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// init prepares an empty table of shape's records, its images framed as
// format says.
func (t *table) init(shape recordShape, format imageFormat, opts Options) error {
	opts, err := opts.withDefaults()
	if err != nil {
		return err
	}
	if opts.Prefix == "" {
		opts.Prefix = string(trimTag(format.tag))
	}
	t.shape, t.image, t.opts = shape, format, opts
	t.win = snowflake.Windows{Millis: opts.WindowMillis}
	return t.openStore(opts)
}

// trimTag is a tag without its trailing spaces or zeros: a file prefix.
func trimTag(tag [4]byte) []byte {
	b := tag[:]
	for len(b) > 0 && (b[len(b)-1] == 0 || b[len(b)-1] == ' ') {
		b = b[:len(b)-1]
	}
	return b
}

// find returns the index in t.wins of the window holding id, or -1.
func (t *table) find(id uint64) int {
	i := lastAtMost(t.los, id)
	if i < 0 || id > t.wins[i].last {
		return -1
	}
	return i
}

// windowFor returns the window holding id, adding an empty open one.
func (t *table) windowFor(id uint64) *window {
	if i := t.find(id); i >= 0 {
		return t.wins[i]
	}
	num, lo, last := t.win.Of(id)
	w := &window{num: num, lo: lo, last: last, body: t.shape.newOpen()}
	t.insertWindow(w)
	return w
}

func (t *table) insertWindow(w *window) {
	i, _ := slices.BinarySearchFunc(t.wins, w.num, func(x *window, n int64) int { return cmp.Compare(x.num, n) })
	t.wins = slices.Insert(t.wins, i, w)
	t.los = slices.Insert(t.los, i, w.lo)
}

func (t *table) removeWindow(w *window) {
	if i := slices.Index(t.wins, w); i >= 0 {
		t.wins = slices.Delete(t.wins, i, i+1)
		t.los = slices.Delete(t.los, i, i+1)
	}
}

// lastAtMost returns the index of the last element of the sorted s that
// is <= x, or -1: the search of a list of first keys (windows, blocks)
// for the entry that would hold x.
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

// adjust counts n more records (fewer when negative) in w.
func (t *table) adjust(w *window, n int) {
	w.n += n
	t.n += n
}

// Scrub marks the window of id for a rewrite at the next Plan, whatever
// its delta holds: the caller removed records (Set.Remove, Posts.SetAuthor,
// Posts.Delete) that must not outlive it in memory, in snapshots or in
// cold files — an erased user's. A window that took the change in place
// (an open table) needs none.
func (t *table) Scrub(id uint64) {
	if i := t.find(id); i >= 0 && !t.wins[i].takesWrites() {
		t.wins[i].setScrub(true)
	}
}

// Scrubbing reports how many windows wait for a rewrite that drops
// records still in their bytes: one Scrub asked for, or a set's
// forgotten posts (Forget), whose pairs may name an erased user too.
func (t *table) Scrubbing() int {
	n := 0
	for _, w := range t.wins {
		if w.scrubbed() || (len(w.forgot()) > 0 && w.body.kind() != Open) {
			n++
		}
	}
	return n
}

// takesWrites reports whether w's body takes writes in place: an open
// table that no job is sealing and no scan is reading.
func (w *window) takesWrites() bool { return w.body.kind() == Open && w.job == nil && !w.held() }

// Len returns the number of records.
func (t *table) Len() int { return t.n }

var windowBytes = int(unsafe.Sizeof(window{})) + 16 // and its body's header

func (w *window) memoryBytes() int {
	n := windowBytes + w.body.memoryBytes()
	for _, o := range [2]overlay{w.delta, w.frozen()} {
		if o != nil {
			n += o.memoryBytes()
		}
	}
	return n
}

// deltaLen is the number of entries in w's overlays.
func (w *window) deltaLen() int {
	n := 0
	for _, o := range [2]overlay{w.delta, w.frozen()} {
		if o != nil {
			n += o.len()
		}
	}
	return n
}

// MemoryBytes is the table's own memory: open tables, deltas, sealed
// windows (the arena's chunks), cold windows' indexes and the window
// list; the block cache, a fixed budget shared between tables, is not
// counted (CacheBytes).
func (t *table) MemoryBytes() int64 {
	n := int64(unsafe.Sizeof(*t)) + 8*int64(cap(t.wins)+cap(t.los))
	for _, w := range t.wins {
		n += int64(w.memoryBytes())
		if s, ok := w.body.(*sealedWindow); ok {
			n -= int64(s.memoryBytes()) // counted in the arena's chunks
		}
	}
	return n + t.arena.size()
}

// CacheBytes is the memory the block cache holds (0 without a cold tier;
// a cache shared with other tables counts their blocks too).
func (t *table) CacheBytes() int64 { return t.cacheBytes() }

// DiskBytes is the size of the cold files in use.
func (t *table) DiskBytes() int64 {
	var n int64
	for _, w := range t.wins {
		if f, ok := w.body.(*coldWindow); ok {
			n += f.size
		}
	}
	return n
}

// WindowStat describes one window (Stats).
type WindowStat struct {
	Num     int64
	Kind    Kind
	Records int // records in the window, its delta applied
	Delta   int // entries in the delta (and a running job's frozen one)
	Bytes   int // memory
	File    string
}

// Stats describes every window, oldest first.
func (t *table) Stats() []WindowStat {
	out := make([]WindowStat, 0, len(t.wins))
	for _, w := range t.wins {
		s := WindowStat{Num: w.num, Kind: w.body.kind(), Records: w.n, Delta: w.deltaLen(), Bytes: w.memoryBytes()}
		if f, ok := w.body.(*coldWindow); ok {
			s.File = f.name
		}
		out = append(out, s)
	}
	return out
}

// Files returns the names of the cold files the table uses (a snapshot
// written now needs them).
func (t *table) Files() []string {
	var out []string
	for _, w := range t.wins {
		if f, ok := w.body.(*coldWindow); ok {
			out = append(out, f.name)
		}
	}
	return out
}

// VerifyFiles reads every block of every cold file the table uses and
// checks it as Load checks a sealed window (checksum, structure,
// contents, key order, the footer's totals): a scrub that finds damage
// before a read does. It only reads: it may run under the read lock.
func (t *table) VerifyFiles() error {
	for _, w := range t.wins {
		if w.body.kind() == Cold {
			if err := t.shape.verifyBlocks(w.body); err != nil {
				return err
			}
		}
	}
	return nil
}

// Close closes the cold files. The table is unusable afterwards.
func (t *table) Close() error {
	var errs []error
	for _, w := range t.wins {
		if f, ok := w.body.(*coldWindow); ok {
			errs = append(errs, f.close())
		}
	}
	errs = append(errs, t.closeObsolete())
	t.wins, t.los = nil, nil
	return errors.Join(errs...)
}

// retire lets go of a body a window no longer has: a sealed window's
// region goes back to the arena (a job or reader still holding it is
// unaffected: the arena never rewrites a region), a cold file waits for
// Collect, since a kept snapshot may still name it.
func (t *table) retire(b body) {
	switch b := b.(type) {
	case *sealedWindow:
		b.release(&t.arena)
	case *coldWindow:
		t.obsolete = append(t.obsolete, b)
	}
}

// walkWindows calls walk for windows 0 to n-1 until it fails; errStop
// ends the walk without an error (a Range whose fn returned false).
func walkWindows(n int, walk func(i int) error) error {
	for i := range n {
		if err := walk(i); err != nil {
			if err == errStop {
				return nil
			}
			return err
		}
	}
	return nil
}

// errStop ends a Range early.
var errStop = errors.New("stop")

// eachBlock calls fn with every block of a sealed or cold body in order,
// its bytes with the CRC and BlockSlack bytes of capacity past them; a
// cold body's blocks are read from its file (not through the cache) and
// not checked. file is the cold file's name, empty for a sealed window.
func eachBlock(b body, fn func(idx *blockIndex, file string, i int, blk []byte) error) error {
	return eachBlockFrom(b, 0, fn)
}

// eachBlockFrom is eachBlock from block first on.
func eachBlockFrom(b body, first int, fn func(idx *blockIndex, file string, i int, blk []byte) error) error {
	switch b := b.(type) {
	case *sealedWindow:
		for i := first; i < b.idx.blocks; i++ {
			if err := fn(&b.idx, "", i, b.block(i)); err != nil {
				return err
			}
			if i%256 == 255 {
				// A snapshot's background load checks every block; a
				// pause every few hundred keeps a request handler from
				// waiting a whole scheduler slice behind it.
				runtime.Gosched()
			}
		}
	case *coldWindow:
		var buf []byte
		for i := first; i < b.idx.blocks; i++ {
			off, end := b.idx.span(i)
			blk, err := b.readRaw(off, end, &buf)
			if err != nil {
				return err
			}
			if err := fn(&b.idx, b.name, i, blk); err != nil {
				return err
			}
		}
	}
	return nil
}
