// Package countertable is the open-addressing post-count table that the
// tiered store (engine/postcounts) replaced, kept as the peer the
// benchmarks compare the store against (engine/postcounts, engine/sealed,
// engine/cold, bench/redispeers). No production code uses it.
//
// It maps post id -> the five counters of engine.Counts, packed as seed
// 003 describes. Each post is one record of five uint32 fields in a
// pointer-free open-addressing table; a field whose value does not fit is
// escaped (0xFFFFFFFF, seed 003's 0xFFFF trick at 32 bits) to a small
// overflow table of full int64 values.
//
// It promises: counts are exact from 0 to math.MaxInt64 (additions
// saturate there; subtractions clamp at 0, because a count that goes
// negative is a bug the user would see); a post whose five counts are all
// zero is not stored at all; Get, GetMany and Add do not allocate unless
// the table must grow. A Table is not safe for concurrent use: callers
// lock (and shard).
package countertable

import (
	"math"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/counters"
	"github.com/tally-dev/tally/engine/table"
)

// escape in a narrow field means "look in the overflow table". Values up
// to escape-1 are stored inline, so the escape itself is never ambiguous.
const escape = math.MaxUint32

// record is one post's counters. 20 bytes beside the key: most counts are
// small, and the rare ones past 4 billion cost an extra 48-byte overflow
// entry instead of widening every record.
type record [counters.NumFields]uint32

// key is a post id split into 32-bit halves. With a uint64 key the 28-byte
// slot would be padded to 32 for 8-byte alignment; two uint32s align to 4,
// so a slot is 28 bytes and a table 12% smaller.
type key [2]uint32

func keyOf(id uint64) key  { return key{uint32(id), uint32(id >> 32)} }
func (k key) id() uint64   { return uint64(k[0]) | uint64(k[1])<<32 }
func hashKey(k key) uint64 { return table.Mix64(k.id()) }

// wide holds the true values of a post's escaped fields; its other fields
// are 0, so a wide entry with all fields 0 is dropped.
type wide [counters.NumFields]int64

// Table maps post ids to their counts.
type Table struct {
	narrow *table.Table[key, record]
	wide   *table.Table[uint64, wide]
}

// New returns a table sized for capacityHint posts with non-zero counts.
func New(capacityHint int) *Table {
	return &Table{
		narrow: table.New[key, record](hashKey, capacityHint),
		wide:   table.New[uint64, wide](table.Mix64, 0),
	}
}

// Get returns the counts of post id; a post the table does not hold reads
// as zeros.
func (t *Table) Get(id uint64) engine.Counts {
	r, ok := t.narrow.Get(keyOf(id))
	if !ok {
		return engine.Counts{}
	}
	return t.decode(id, &r)
}

// GetMany stores the counts of ids[i] in out[i]. out must be at least as
// long as ids. It is the feed-page read: one probe per post.
func (t *Table) GetMany(ids []uint64, out []engine.Counts) {
	out = out[:len(ids)]
	// Probing in a tight loop first and decoding after lets the CPU keep
	// many of a page's cache misses in flight at once; interleaving the
	// decode makes each iteration too long for that (2-3x slower measured
	// on a 1M-post table).
	var recs [64]record
	for len(ids) > 0 {
		n := min(len(ids), len(recs))
		for i, id := range ids[:n] {
			recs[i], _ = t.narrow.Get(keyOf(id)) // a miss reads as the zero record
		}
		for i := range n {
			out[i] = t.decode(ids[i], &recs[i])
		}
		ids, out = ids[n:], out[n:]
	}
}

// Add adds delta to field f of post id and returns the new value. The
// result saturates at math.MaxInt64 and clamps at 0. f must be valid.
func (t *Table) Add(id uint64, f counters.Field, delta int64) int64 {
	p, ok := t.narrow.Ref(keyOf(id))
	if !ok {
		if delta <= 0 {
			return 0 // zeros are not stored
		}
		t.store(id, t.narrow.Upsert(keyOf(id)), f, delta)
		return delta
	}
	cur := t.field(id, p, f)
	v := addClamped(cur, delta)
	if v == cur {
		return cur
	}
	t.store(id, p, f, v)
	if *p == (record{}) {
		t.narrow.Delete(keyOf(id))
	}
	return v
}

func addClamped(cur, delta int64) int64 {
	switch {
	case delta > 0 && cur > math.MaxInt64-delta:
		return math.MaxInt64
	case cur+delta < 0: // cur >= 0, so this cannot overflow
		return 0
	}
	return cur + delta
}

// Set replaces the five counts of post id, as an import does. Negative
// counts are stored as 0; all-zero counts delete the post.
func (t *Table) Set(id uint64, c engine.Counts) {
	v := fromCounts(c)
	for i := range v {
		v[i] = max(v[i], 0)
	}
	if v == (wide{}) {
		if t.narrow.Delete(keyOf(id)) {
			t.wide.Delete(id)
		}
		return
	}
	p := t.narrow.Upsert(keyOf(id))
	for i, x := range v {
		t.store(id, p, counters.Field(i), x)
	}
}

// Len returns the number of posts with at least one non-zero count.
func (t *Table) Len() int { return t.narrow.Len() }

// Range calls fn for every stored post in unspecified order until fn
// returns false. fn must not modify the table.
func (t *Table) Range(fn func(id uint64, c engine.Counts) bool) {
	t.narrow.Range(func(k key, r record) bool {
		return fn(k.id(), t.decode(k.id(), &r))
	})
}

// MemoryBytes returns the bytes held by the table's backing arrays.
func (t *Table) MemoryBytes() int {
	return t.narrow.MemoryBytes() + t.wide.MemoryBytes()
}

// field returns the value of field f of the record p of post id.
func (t *Table) field(id uint64, p *record, f counters.Field) int64 {
	if p[f] != escape {
		return int64(p[f])
	}
	w, _ := t.wide.Get(id)
	return w[f]
}

func (t *Table) decode(id uint64, r *record) engine.Counts {
	var v wide
	escaped := false
	for i, x := range r {
		v[i] = int64(x)
		escaped = escaped || x == escape
	}
	if escaped {
		w, _ := t.wide.Get(id)
		for i, x := range r {
			if x == escape {
				v[i] = w[i]
			}
		}
	}
	return toCounts(v)
}

// store sets field f of record p (post id) to v >= 0, moving the field into
// or out of the overflow table as v crosses the escape value.
func (t *Table) store(id uint64, p *record, f counters.Field, v int64) {
	if v < escape {
		if p[f] == escape {
			w, _ := t.wide.Ref(id)
			w[f] = 0
			if *w == (wide{}) {
				t.wide.Delete(id)
			}
		}
		p[f] = uint32(v)
		return
	}
	t.wide.Upsert(id)[f] = v
	p[f] = escape
}

func fromCounts(c engine.Counts) wide {
	return wide{c.Likes, c.Comments, c.Reposts, c.Views, c.Favorites}
}

func toCounts(v wide) engine.Counts {
	return engine.Counts{Likes: v[0], Comments: v[1], Reposts: v[2], Views: v[3], Favorites: v[4]}
}
