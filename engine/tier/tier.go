package tier

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"time"
	"unsafe"

	"github.com/tally-dev/tally/engine/cold"
	"github.com/tally-dev/tally/engine/snowflake"
)

// Codec says what a record of a tier is: how it splits into unsigned
// columns (the form every window stores) and how many bits each column
// gets in an open table's slot. Split and Join take and return values, so
// that a lookup's rows stay on its stack.
type Codec[R any] interface {
	// Tag names the record layout in window images and snapshots; a tier
	// refuses bytes written under another tag.
	Tag() [4]byte
	// Cols is the number of columns, 1..MaxCols.
	Cols() int
	// DenseCols is how many of the first columns every record stores;
	// the others form a sparse group, stored in a sealed window only for
	// the records where one of them is not zero (a presence bit each),
	// so that a record whose group is all zeros costs only its dense
	// columns. DenseCols() == Cols() means no sparse group.
	DenseCols() int
	// SlotWidths is the bits of each column in an open table's slot,
	// given the bits the slot leaves for them (77 for day windows, less
	// for longer ones; at least 62); they must sum to at most bits. A
	// record with a wider value is kept in the table's overflow map, at
	// about 96 bytes.
	SlotWidths(bits int) [MaxCols]uint8
	Split(r R) Row
	Join(row Row) R
}

// plainRecords is implemented by a codec whose record type is exactly
// its columns in order, each a 64-bit integer (the post record: author,
// then the five counts): the tier then copies words instead of calling
// Join on reads. New checks the record's size.
type plainRecords interface{ PlainRecords() bool }

// Defaults of Options.
const (
	DefaultWindowMillis   = 86_400_000
	DefaultOpenAge        = 7 * 24 * time.Hour
	DefaultCompactMin     = 1024
	DefaultColdCacheBytes = 16 << 20
)

// Options configure a Tier; the zero value is day windows, the last 7
// days open, everything older sealed in memory, no cold tier.
type Options struct {
	// WindowMillis is the window length; 0 means DefaultWindowMillis.
	WindowMillis int64
	// OpenAge: a window stays an open table until it ended this long
	// ago; 0 means DefaultOpenAge, negative seals every ended window.
	OpenAge time.Duration
	// CompactMin: a sealed or cold window's delta is folded back once it
	// holds CompactMin records and an eighth as many as the window; 0
	// means DefaultCompactMin.
	CompactMin int
	// Dir holds the cold files (<Prefix>-<window>-<generation>.tier).
	// Empty means no cold tier (ColdAge and MemoryBudget are ignored).
	Dir string
	// Prefix names this tier's files in Dir, which other tiers may share
	// under other prefixes. Empty means the codec's tag.
	Prefix string
	// ColdAge: a sealed window that ended this long ago moves to a file;
	// 0 means never by age.
	ColdAge time.Duration
	// MemoryBudget: while MemoryBytes exceeds it, Plan moves the oldest
	// sealed windows to files. 0 means no budget.
	MemoryBudget int64
	// Cache is the block cache of the cold files, shareable between
	// tiers; nil means one of ColdCacheBytes (0: DefaultColdCacheBytes).
	Cache          *cold.Cache
	ColdCacheBytes int
}

// Tier is a time-windowed table of records of type R keyed by snowflake
// id. It is not safe for concurrent use on its own: see the package doc
// for the locking contract.
type Tier[R any] struct {
	codec  Codec[R]
	tag    [4]byte
	cols   int
	sh     shape
	layout slotLayout
	plain  bool // R is its columns, one 64-bit word each (plainRecords)
	opts   Options
	win    snowflake.Windows

	wins []*window // by number
	live int

	epoch uint64 // bumped by Load: jobs planned before it are void
	coldStore
	arena arena // the bytes of sealed windows
}

// window is one time window. body is the form it is kept in — the sum
// type of open, sealed and cold; delta holds records written to it while
// body does not take writes (sealed, cold, or an open table a job is
// sealing), overriding body's; frozen is the delta a running job is
// folding back, read between the two.
type window struct {
	num      int64
	lo, last uint64
	body     body
	delta    *openTable
	frozen   *openTable
	busy     bool // a job is planned on it
	n        int  // records
}

// body is the form a window's base records are kept in: *openBody,
// *sealedBody or *coldBody, and nothing else.
type body interface{ kind() Kind }

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

type openBody struct{ t *openTable }
type sealedBody struct{ s *segment }
type coldBody struct{ f *coldFile }

func (*openBody) kind() Kind   { return Open }
func (*sealedBody) kind() Kind { return Sealed }
func (*coldBody) kind() Kind   { return Cold }

// New returns an empty tier of codec's records.
func New[R any](codec Codec[R], opts Options) (*Tier[R], error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	cols := codec.Cols()
	sh := shape{cols, codec.DenseCols()}
	if !sh.valid() {
		return nil, fmt.Errorf("tier: codec has %d columns of which %d dense, want 1..%d", cols, sh.dense, MaxCols)
	}
	win := snowflake.Windows{Millis: opts.WindowMillis}
	vb := valueBits(win.KeyBits())
	layout, ok := newSlotLayout(cols, win.KeyBits(), codec.SlotWidths(vb))
	if !ok {
		return nil, fmt.Errorf("tier: codec's slot widths %v do not fit %d bits", codec.SlotWidths(vb), vb)
	}
	t := &Tier[R]{codec: codec, tag: codec.Tag(), cols: cols, sh: sh, layout: layout, opts: opts, win: win}
	if p, ok := codec.(plainRecords); ok && p.PlainRecords() {
		var zero R
		if unsafe.Sizeof(zero) != uintptr(8*cols) || unsafe.Alignof(zero) != 8 {
			return nil, fmt.Errorf("tier: codec says its %d-byte records are %d words", unsafe.Sizeof(zero), cols)
		}
		t.plain = true
	}
	if t.opts.Prefix == "" {
		t.opts.Prefix = string(bytesTrim(t.tag[:]))
	}
	if err := t.openStore(t.opts); err != nil {
		return nil, err
	}
	return t, nil
}

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

func bytesTrim(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == 0 || b[len(b)-1] == ' ') {
		b = b[:len(b)-1]
	}
	return b
}

// find returns the index in t.wins of the window holding id, or -1.
func (t *Tier[R]) find(id uint64) int {
	if len(t.wins) == 0 {
		return -1
	}
	num, _, _ := t.win.Of(id)
	// Windows are usually consecutive: the number gives the index.
	if i := num - t.wins[0].num; i >= 0 && i < int64(len(t.wins)) && t.wins[i].num == num {
		return int(i)
	}
	i, ok := slices.BinarySearchFunc(t.wins, num, func(w *window, n int64) int { return cmp.Compare(w.num, n) })
	if !ok {
		return -1
	}
	return i
}

func (t *Tier[R]) windowFor(id uint64) *window {
	if i := t.find(id); i >= 0 {
		return t.wins[i]
	}
	num, lo, last := t.win.Of(id)
	w := &window{num: num, lo: lo, last: last, body: &openBody{newOpenTable()}}
	i, _ := slices.BinarySearchFunc(t.wins, num, func(w *window, n int64) int { return cmp.Compare(w.num, n) })
	t.wins = slices.Insert(t.wins, i, w)
	return w
}

// Get returns the record of id and whether it exists. An error means a
// block that should hold id could not be read or failed its checks: the
// record is then unknown, never reported as absent.
func (t *Tier[R]) Get(id uint64) (R, bool, error) {
	var zero R
	i := t.find(id)
	if i < 0 {
		return zero, false, nil
	}
	var row Row
	ok, err := t.wins[i].get(&t.layout, id, &row)
	if err != nil || !ok {
		return zero, false, err
	}
	return t.codec.Join(row), true, nil
}

// get looks id up in w: delta, frozen, then the body.
func (w *window) get(l *slotLayout, id uint64, row *Row) (bool, error) {
	key := id - w.lo + 1
	if w.delta != nil && w.delta.get(key, l, row) {
		return true, nil
	}
	if w.frozen != nil && w.frozen.get(key, l, row) {
		return true, nil
	}
	switch b := w.body.(type) {
	case *openBody:
		return b.t.get(key, l, row), nil
	case *sealedBody:
		return b.s.get(id, row), nil
	case *coldBody:
		return b.f.get(id, row)
	}
	panic("tier: unknown window body")
}

// Put stores r as the record of id, creating it or replacing it. On a
// window that does not take writes in place (sealed, cold, being sealed)
// the record goes to the window's delta; Put then needs to know whether
// id is new, which for a cold window can mean a block read: its error is
// returned and nothing is stored.
func (t *Tier[R]) Put(id uint64, r R) error { return t.put(id, r, unknown) }

// Whether the caller knows that a record exists (put).
const (
	unknown = iota
	absent
	present
)

// put is Put for a caller that may know from a Get just before whether
// id exists, sparing a second lookup of a sealed or cold block.
func (t *Tier[R]) put(id uint64, r R, known int) error {
	w := t.windowFor(id)
	row := t.codec.Split(r)
	key := id - w.lo + 1
	if b, ok := w.body.(*openBody); ok && !w.busy {
		if b.t.put(key, &t.layout, &row) {
			w.n++
			t.live++
		}
		return nil
	}
	isNew := known == absent
	if known == unknown && (w.delta == nil || !w.delta.has(key, &t.layout)) {
		var scratch Row
		exists := w.frozen != nil && w.frozen.has(key, &t.layout)
		if !exists {
			var err error
			switch b := w.body.(type) {
			case *openBody:
				exists = b.t.has(key, &t.layout)
			case *sealedBody:
				exists = b.s.get(id, &scratch)
			case *coldBody:
				exists, err = b.f.get(id, &scratch)
			}
			if err != nil {
				return err
			}
		}
		isNew = !exists
	}
	if w.delta == nil {
		w.delta = newOpenTable()
	}
	w.delta.put(key, &t.layout, &row)
	if isNew {
		w.n++
		t.live++
	}
	return nil
}

// Len returns the number of records.
func (t *Tier[R]) Len() int { return t.live }

// MemoryBytes is the tier's own memory: open tables, deltas, sealed
// windows, cold files' indexes; the block cache, a fixed budget shared
// between tiers, is not counted (CacheBytes).
func (t *Tier[R]) MemoryBytes() int64 {
	var n int64
	for _, w := range t.wins {
		n += int64(w.memoryBytes())
		if b, ok := w.body.(*sealedBody); ok {
			n -= int64(b.s.sizeBytes()) // counted in the arena's chunks
		}
	}
	return n + int64(cap(t.wins))*8 + t.arena.size()
}

func (w *window) memoryBytes() int {
	n := 96 // the window itself and its body's header
	if w.delta != nil {
		n += w.delta.sizeBytes()
	}
	if w.frozen != nil {
		n += w.frozen.sizeBytes()
	}
	switch b := w.body.(type) {
	case *openBody:
		n += b.t.sizeBytes()
	case *sealedBody:
		n += b.s.sizeBytes()
	case *coldBody:
		n += b.f.memoryBytes()
	}
	return n
}

// CacheBytes is the memory the block cache holds (0 without a cold tier).
func (t *Tier[R]) CacheBytes() int64 { return t.cacheBytes() }

// DiskBytes is the size of the cold files in use.
func (t *Tier[R]) DiskBytes() int64 {
	var n int64
	for _, w := range t.wins {
		if b, ok := w.body.(*coldBody); ok {
			n += b.f.size
		}
	}
	return n
}

// WindowStat describes one window (Stats).
type WindowStat struct {
	Num     int64
	Kind    Kind
	Records int
	Delta   int // records in the delta (and a running job's frozen one)
	Bytes   int // memory
	File    string
}

// Stats describes every window, oldest first.
func (t *Tier[R]) Stats() []WindowStat {
	out := make([]WindowStat, 0, len(t.wins))
	for _, w := range t.wins {
		s := WindowStat{Num: w.num, Kind: w.body.kind(), Records: w.n, Bytes: w.memoryBytes()}
		if w.delta != nil {
			s.Delta += w.delta.n
		}
		if w.frozen != nil {
			s.Delta += w.frozen.n
		}
		if b, ok := w.body.(*coldBody); ok {
			s.File = b.f.name
		}
		out = append(out, s)
	}
	return out
}

// Files returns the names of the cold files the tier uses (a snapshot
// written now needs them).
func (t *Tier[R]) Files() []string {
	var out []string
	for _, w := range t.wins {
		if b, ok := w.body.(*coldBody); ok {
			out = append(out, b.f.name)
		}
	}
	return out
}

// Close closes the cold files. The tier is unusable afterwards.
func (t *Tier[R]) Close() error {
	var errs []error
	for _, w := range t.wins {
		if b, ok := w.body.(*coldBody); ok {
			errs = append(errs, b.f.close())
		}
	}
	errs = append(errs, t.closeObsolete())
	t.wins = nil
	return errors.Join(errs...)
}
