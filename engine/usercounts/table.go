// Package usercounts owns Tally's per-user counts (a user's posts, or
// followers): a map from any uint64 user id to an exact int64 count >= 0,
// built for counts that are read far more often than they change (every
// badge poll reads each followee's post count).
//
// Most users live in a packed part, sorted by id, in 64-byte lines: a
// line holds its first id, its widths, and a record per user (id minus
// the first id, and count, each at the line's own bit width), as many as
// fit; a radix array over the id range finds a user's line, so a lookup
// loads a radix entry and one line (packed.go says why): a few bytes a
// user, a fraction of a hash table's slot and load slack (docs/performance.md,
// "Per-user records: a user costs what they use", has the figures). Writes go to an overlay (a hash table with a
// Bloom filter in front, whose tombstones shadow deleted users, and a
// sorted tail for users above all others, such as a snapshot load's) and
// are folded into a new packed part by a job of the caller's maintenance
// loop (tier.Maintainer): planned under the write lock, which freezes the
// overlay and starts a fresh one; run with no lock while readers and
// writers go on, since it reads only the frozen overlay and the old
// packed part, which nothing modifies; finished under the write lock,
// which installs the new part.
//
// It promises: Get and Has see every write at once; Len is exact; Range
// visits users in increasing id order; counts are exact up to MaxInt64;
// the big slices hold no pointers, so the garbage collector does not scan
// them. A Table is not safe for concurrent use: callers hold a read lock
// to read and a write lock to write, plan or finish a fold.
package usercounts

import (
	"fmt"
	"math"
	"math/bits"
	"time"

	"github.com/tally-dev/tally/engine/tier"
)

// Table maps users to counts >= 0. The zero Table is not usable; call New.
type Table struct {
	packed *packed
	live   *overlay // this overlay's writes win over frozen and packed
	frozen *overlay // the overlay a fold job is folding, or nil
	n      int      // users with a count
	// maxID is >= every id any layer holds (tombstones included) when
	// hasMax: a new user above it can go to the live overlay's tail.
	maxID  uint64
	hasMax bool
	job    *foldJob // the fold job out, or nil
	// held says frozen is Freeze's, not a fold job's: no fold is planned
	// until Thaw.
	held bool
	gen  uint64 // bumped by Compact: a job planned before is stale
	// minFold is the smallest overlay that makes a fold due (tests lower it).
	minFold int
}

var _ tier.Maintainer = (*Table)(nil)

// New returns an empty table. capacityHint, the users expected, sizes the
// first overlay's tail: a load (Set in increasing id order, then Compact)
// appends every user to it, and Compact drops it.
func New(capacityHint int) *Table {
	o := newOverlay()
	o.tail = make([]entry, 0, min(max(capacityHint, 0), 1<<24))
	return &Table{packed: emptyPacked, live: o, minFold: 4096}
}

// Get returns u's count and whether u has an entry.
func (t *Table) Get(u uint64) (int64, bool) {
	if v, ok, decided := t.live.get(u); decided {
		return v, ok
	}
	return t.below(u)
}

// batchLen is how many lookups GetMany keeps in flight: its first pass
// finds each one's line (loading the line's first word, so the line
// itself) with nothing waiting on the previous lookup, and the CPU
// overlaps those misses; its second pass searches lines now in cache.
const batchLen = 32

// GetMany sets out[i] to us[i]'s count, 0 for a user without one (out
// must be at least as long as us). It answers as Get would, faster than
// a Get per user when they are many (a badge poll's followees).
func (t *Table) GetMany(us []uint64, out []int64) {
	out = out[:len(us)]
	var (
		lines  [batchLen]int
		firsts [batchLen]uint64
		held   [batchLen]bool // decided by an overlay: out holds the answer
	)
	for start := 0; start < len(us); start += batchLen {
		batch := us[start:min(start+batchLen, len(us))]
		for j, u := range batch {
			held[j] = false
			if v, _, decided := t.live.get(u); decided {
				out[start+j], held[j] = v, true
				continue
			}
			if t.frozen != nil {
				if v, _, decided := t.frozen.get(u); decided {
					out[start+j], held[j] = v, true
					continue
				}
			}
			lines[j], firsts[j] = t.packed.block(u)
		}
		for j, u := range batch {
			if !held[j] {
				out[start+j], _ = t.packed.search(u, lines[j], firsts[j])
			}
		}
	}
}

// below looks u up under the live overlay: the frozen one, then packed.
func (t *Table) below(u uint64) (int64, bool) {
	if t.frozen != nil {
		if v, ok, decided := t.frozen.get(u); decided {
			return v, ok
		}
	}
	return t.packed.get(u)
}

// Has reports whether u has an entry (a count, possibly 0).
func (t *Table) Has(u uint64) bool {
	_, ok := t.Get(u)
	return ok
}

// Len returns the number of users with an entry.
func (t *Table) Len() int { return t.n }

// Add adds d to u's count, creating u's entry, and reports whether it
// created it (callers that track who is known need no Has before it). The
// result must be >= 0 (and not overflow int64): otherwise Add panics and
// leaves the count as it was, since a negative count is a caller's
// bookkeeping bug that a stored value would hide.
func (t *Table) Add(u uint64, d int64) (created bool) {
	before := t.n
	t.add(u, d)
	return t.n > before
}

func (t *Table) add(u uint64, d int64) {
	o := t.live
	if o.inTail(u) {
		cur, _, _ := o.get(u)
		t.store(u, checkedSum(u, cur, d))
		return
	}
	if p, ok := o.ref(u); ok {
		if *p < 0 { // a tombstone: u has no count
			*p = checkedSum(u, 0, d)
			t.n++
			return
		}
		*p = checkedSum(u, *p, d)
		return
	}
	// One lookup below, whose answer says where the new entry goes.
	cur, below := t.below(u)
	v := checkedSum(u, cur, d)
	switch {
	case below:
		o.put(u, v)
	case !t.hasMax || u > t.maxID:
		o.appendTail(u, v)
		t.n++
		t.maxID, t.hasMax = u, true
	default:
		o.put(u, v)
		t.n++
	}
}

func checkedSum(u uint64, cur, d int64) int64 {
	v := cur + d
	if v < 0 || (d > 0 && v < cur) {
		panic(fmt.Sprintf("usercounts: user %d's count %d + %d is not a count >= 0", u, cur, d))
	}
	return v
}

// Set sets u's count to v >= 0, creating u's entry; a negative v panics.
func (t *Table) Set(u uint64, v int64) {
	if v < 0 {
		panic(fmt.Sprintf("usercounts: user %d's count set to %d < 0", u, v))
	}
	t.store(u, v)
}

// store makes v >= 0 u's count in the live overlay, keeping n.
func (t *Table) store(u uint64, v int64) {
	o := t.live
	if n := len(o.tail); n > 0 && u > o.tail[n-1].id {
		o.appendTail(u, v) // a load's every Set
		t.n++
		t.maxID = u
		return
	}
	if o.inTail(u) {
		i, found := o.tailIndex(u)
		switch {
		case found:
			if o.tail[i].v < 0 {
				t.n++
			}
			o.tail[i].v = v
		case i == len(o.tail):
			o.appendTail(u, v)
			t.n++
			t.maxID = u
		default:
			// u falls between two tail users: it is in no layer (the
			// tail's promise), and goes to m once the tail starts above it.
			o.spillTail(i)
			o.put(u, v)
			t.n++
		}
		return
	}
	if p, ok := o.ref(u); ok {
		if *p < 0 {
			t.n++
		}
		*p = v
		return
	}
	if !t.hasMax || u > t.maxID {
		o.appendTail(u, v)
		t.n++
		t.maxID, t.hasMax = u, true
		return
	}
	if _, ok := t.below(u); !ok {
		t.n++
	}
	o.put(u, v)
}

// Delete removes u's entry, if any.
func (t *Table) Delete(u uint64) {
	o := t.live
	if o.inTail(u) {
		// A tail user is in no layer below: a tombstone in place is
		// enough, and the fold drops it.
		if i, found := o.tailIndex(u); found && o.tail[i].v >= 0 {
			o.tail[i].v = tombstone
			t.n--
		}
		return
	}
	if p, ok := o.ref(u); ok {
		if *p < 0 {
			return
		}
		t.n--
		if _, below := t.below(u); below {
			*p = tombstone
		} else {
			o.m.Delete(u)
		}
		return
	}
	if _, below := t.below(u); below {
		o.put(u, tombstone)
		t.n--
	}
}

// Range calls fn for every entry in increasing id order until fn returns
// false. fn must not modify the table. Range sorts the overlays' entries
// into a new slice, so it allocates in proportion to them.
func (t *Table) Range(fn func(u uint64, v int64) bool) {
	var frozen []entry
	if t.frozen != nil {
		frozen = t.frozen.sorted()
	}
	merge(t.packed, frozen, t.live.sorted(), fn)
}

// merge calls fn, in increasing id order, for every user with a count in
// p overlaid with frozen and then live (entries in id order, tombstones
// included), until fn returns false.
func merge(p *packed, frozen, live []entry, fn func(u uint64, v int64) bool) {
	var it packedIter
	it.init(p)
	i, j := 0, 0
	for {
		pid, pv, pok := it.peek()
		id, have := pid, pok
		if i < len(frozen) && (!have || frozen[i].id < id) {
			id, have = frozen[i].id, true
		}
		if j < len(live) && (!have || live[j].id < id) {
			id, have = live[j].id, true
		}
		if !have {
			return
		}
		v := int64(tombstone)
		if pok && pid == id {
			v = pv
			it.next()
		}
		if i < len(frozen) && frozen[i].id == id {
			v = frozen[i].v
			i++
		}
		if j < len(live) && live[j].id == id {
			v = live[j].v
			j++
		}
		if v >= 0 && !fn(id, v) {
			return
		}
	}
}

// fold returns p overlaid with frozen and live as a new packed part.
func fold(p *packed, frozen, live []entry) *packed {
	var perLine float64
	switch n := len(frozen) + len(live); {
	case p.n > 0:
		perLine = float64(p.n) / float64(len(p.firsts)) * 0.95
	case n > 1:
		// A first fold (a load): a record takes about the bits of the
		// mean gap between ids, plus some for the line's spread and
		// the count.
		lo, hi := uint64(math.MaxUint64), uint64(0)
		for _, es := range [][]entry{frozen, live} {
			if len(es) > 0 {
				lo, hi = min(lo, es[0].id), max(hi, es[len(es)-1].id)
			}
		}
		perLine = float64(lineBits-firstCount) / float64(bits.Len64((hi-lo)/uint64(n))+12)
	default:
		perLine = 1
	}
	bd := newBuilder(p.n+len(frozen)+len(live), perLine)
	// merge without its callback and per-entry peek: a fold's time is
	// this loop's (and the overlay's sort).
	up := overlaid(frozen, live)
	var it packedIter
	it.init(p)
	j := 0
	for it.b < len(p.firsts) {
		it.decode()
		for i, id := range it.ids[:it.l] {
			for j < len(up) && up[j].id < id {
				if up[j].v >= 0 {
					bd.add(up[j].id, up[j].v)
				}
				j++
			}
			if j < len(up) && up[j].id == id {
				if up[j].v >= 0 {
					bd.add(id, up[j].v)
				}
				j++
				continue
			}
			bd.add(id, it.vals[i])
		}
	}
	for _, e := range up[j:] {
		if e.v >= 0 {
			bd.add(e.id, e.v)
		}
	}
	return bd.finish()
}

// overlaid returns the entries of lower and upper (each in id order) in
// id order, upper's winning a tie.
func overlaid(lower, upper []entry) []entry {
	if len(lower) == 0 {
		return upper
	}
	if len(upper) == 0 {
		return lower
	}
	out := make([]entry, 0, len(lower)+len(upper))
	i, j := 0, 0
	for i < len(lower) && j < len(upper) {
		switch a, b := lower[i].id, upper[j].id; {
		case a < b:
			out = append(out, lower[i])
			i++
		case a > b:
			out = append(out, upper[j])
			j++
		default:
			out = append(out, upper[j])
			i++
			j++
		}
	}
	out = append(out, lower[i:]...)
	return append(out, upper[j:]...)
}

// MemoryBytes is the size of everything the table holds: the packed
// part and both overlays. A fold job's new packed part is counted once
// it is installed.
func (t *Table) MemoryBytes() int64 {
	b := t.packed.memoryBytes() + t.live.memoryBytes()
	if t.frozen != nil {
		b += t.frozen.memoryBytes()
	}
	return b
}

// Compact folds both overlays into the packed part now. Call it under the
// write lock, e.g. after a load; a fold job still out is then stale and
// its Finish installs nothing.
func (t *Table) Compact() {
	if t.frozen == nil && t.live.size() == 0 {
		return
	}
	var frozen []entry
	if t.frozen != nil {
		frozen = t.frozen.sorted()
	}
	t.packed = fold(t.packed, frozen, t.live.sorted())
	t.frozen, t.live, t.job = nil, newOverlay(), nil
	t.gen++
	t.resetMax()
}

// resetMax sets maxID from what the layers hold, once the overlays are
// folded: deleted users no longer count.
func (t *Table) resetMax() {
	t.maxID, t.hasMax = 0, t.packed.n > 0
	if t.hasMax {
		t.maxID = t.packed.maxID()
	}
}

// foldThreshold is the live overlay's size that makes a fold due: a
// sixteenth of the packed users, so that a fold's O(packed) rewrite costs
// each write it absorbs about 16 entries' decoding and encoding, and the
// overlay (17 bytes a slot at up to 3/4 load) stays under ~1.5 bytes per
// packed user; at least 4096, so that a small table does not fold on
// every tick.
func (t *Table) foldThreshold() int { return max(t.minFold, t.packed.n/16) }

// Unfolded returns how many entries wait in the live overlay and how many
// are packed, for a caller that folds on a schedule of its own (an
// import, whose writes outrun maintenance). Call it under a read lock.
func (t *Table) Unfolded() (overlay, packed int) { return t.live.size(), t.packed.n }

// PlanWork implements tier.Maintainer: when the live overlay has reached
// the fold threshold and no job is out, it freezes the overlay (writes go
// to a fresh one) and returns the job that folds it. Call it under the
// write lock.
func (t *Table) PlanWork(now time.Time) []tier.Work {
	if t.job != nil || t.held || t.live.size() < t.foldThreshold() {
		return nil
	}
	j := &foldJob{t: t, gen: t.gen, base: t.packed, frozen: t.live,
		what: fmt.Sprintf("fold %d user counts into %d packed", t.live.size(), t.packed.n)}
	t.frozen, t.live, t.job = t.live, newOverlay(), j
	return []tier.Work{j}
}

// Collect implements tier.Maintainer: a Table has no files.
func (t *Table) Collect(keep []string) error { return nil }

// Files implements tier.Maintainer: a Table has no files.
func (t *Table) Files() []string { return nil }

// foldJob folds a frozen overlay into a new packed part.
type foldJob struct {
	t      *Table
	gen    uint64
	base   *packed  // t.packed when planned
	frozen *overlay // t.frozen when planned
	out    *packed
	what   string
	done   bool // finished: a second Finish does nothing
}

// Run builds the new packed part. It needs no lock: it reads only base
// and frozen, which the table no longer modifies.
func (j *foldJob) Run() error {
	j.out = fold(j.base, j.frozen.sorted(), nil)
	return nil
}

// Finish installs the new packed part and drops the frozen overlay;
// call it under the write lock. A job that Compact made stale installs
// nothing; one finished without Run folds here, under the lock, so that
// the frozen overlay never outlives its job.
func (j *foldJob) Finish() error {
	t := j.t
	if j.done {
		return nil
	}
	j.done = true
	if t.job == j {
		t.job = nil
	}
	if j.gen != t.gen {
		j.base, j.frozen, j.out = nil, nil, nil
		return nil
	}
	if j.out == nil {
		j.out = fold(j.base, j.frozen.sorted(), nil)
	}
	t.packed, t.frozen = j.out, nil
	j.base, j.frozen, j.out = nil, nil, nil
	return nil
}

// What names the job for the maintenance loop's log.
func (j *foldJob) What() string { return j.what }
