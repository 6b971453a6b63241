package tier

import (
	"math/bits"

	"github.com/tally-dev/tally/engine/bitpack"
	"github.com/tally-dev/tally/engine/counters"
	hashtable "github.com/tally-dev/tally/engine/table"
)

// pairTable is a set's open window, and a delta's added or removed pairs:
// a set of (user, key) pairs, key being the post id minus the window's
// first id, each with its reaction kind, in a flat byte slice of
// fixed-size slots. It holds no pointers, so the GC never scans it.
//
// A slot is the pair packed into 96 or 128 bits: lo = (key+1) | user<<kw,
// hi = user>>(64-kw) | (kind-1)<<(hi's bits - kb), kw being the key's
// width plus one and kb the kind bits the table's kinds need (0 while
// every pair is a like, so that a set of likes or favorites stores no
// kind; the first kind that needs more rewrites the table, once per
// width). key+1 is never 0, so lo == 0 marks an empty slot and no
// control bytes are needed. With day windows kw is 50, so while every
// user id is below 2^(46-kb) a slot is 12 bytes (narrow); the first
// larger user id rewrites the table with 16-byte slots (wide), once.
// engine/table's Table[pair, struct{}] spends 17 bytes a slot (16 of
// key, one control byte).
//
// Collisions are resolved by linear probing with backward-shift deletion:
// no tombstones, so a long run of likes and unlikes never degrades probes
// or forces a rehash; a probe walks adjacent slots (five or four to a cache
// line), which is what makes control bytes unnecessary. The load stays
// between 1/2 and 3/4 (growth by 3/2; the home slot is chosen by
// multiply-shift, which works for any capacity), so a miss — the common
// answer of a feed page — reads 2.5 to 8.5 slots, one or two cache lines.
type pairTable struct {
	b      []byte
	n      int // slots
	stride int // 12 (narrow) or 16 (wide)
	kw     uint
	kb     uint   // kind bits, at the top of hi
	kshift uint   // where the kind starts in hi: its bits less kb
	umask  uint64 // hi's user bits
	live   int
}

func (t *pairTable) kind() Kind   { return Open }
func (t *pairTable) records() int { return t.len() }

const (
	pairNarrow   = 12
	pairWide     = 16
	pairMinSlots = 8
)

func newPairTable(keyBits uint, hint int) *pairTable {
	t := &pairTable{stride: pairNarrow, kw: keyBits + 1}
	t.setKindBits(0)
	if hint > 0 {
		t.alloc(pairSlotsFor(hint), pairNarrow)
	}
	return t
}

// pairSlotsFor returns a capacity that holds n pairs under the 3/4 load limit.
func pairSlotsFor(n int) int { return max(pairMinSlots, n+n/3+1) }

func (t *pairTable) alloc(n, stride int) {
	t.b = make([]byte, n*stride)
	t.n, t.stride, t.live = n, stride, 0
	t.setKindBits(t.kb)
}

// setKindBits sets kb and what depends on it and the stride.
func (t *pairTable) setKindBits(kb uint) {
	t.kb = kb
	t.kshift = uint(8*(t.stride-8)) - kb
	t.umask = bitpack.LowMask(t.kshift)
}

// fits reports whether a slot of the table holds user u and kind k.
func (t *pairTable) fits(u uint64, k counters.Kind) bool {
	return uint(bits.Len8(uint8(k-1))) <= t.kb && (t.stride == pairWide || u>>(96-t.kw-t.kb) == 0)
}

func (t *pairTable) pack(u, k uint64, kind counters.Kind) (lo, hi uint64) {
	return (k + 1) | u<<t.kw, u>>(64-t.kw) | uint64(kind-1)<<t.kshift
}

func (t *pairTable) unpack(lo, hi uint64) (u, k uint64, kind counters.Kind) {
	return lo>>t.kw | (hi&t.umask)<<(64-t.kw), lo&bitpack.LowMask(t.kw) - 1, counters.Kind(hi>>t.kshift) + 1
}

func (t *pairTable) slot(i int) (lo, hi uint64) {
	p := i * t.stride
	s := t.b[p : p+t.stride]
	lo = le.Uint64(s)
	if t.stride == pairNarrow {
		return lo, uint64(le.Uint32(s[8:]))
	}
	return lo, le.Uint64(s[8:])
}

func (t *pairTable) setSlot(i int, lo, hi uint64) {
	p := i * t.stride
	s := t.b[p : p+t.stride]
	le.PutUint64(s, lo)
	if t.stride == pairNarrow {
		le.PutUint32(s[8:], uint32(hi))
	} else {
		le.PutUint64(s[8:], hi)
	}
}

// home is the first slot probed for (u, k): multiply-shift of the pair's
// hash onto [0, n).
func (t *pairTable) home(u, k uint64) int {
	h, _ := bits.Mul64(hashtable.HashPair(u, k), uint64(t.n))
	return int(h)
}

// find returns the slot of (u, k), or the empty slot that ends its probe
// sequence and false. u must fit the table's slots.
func (t *pairTable) find(u, k uint64) (int, bool) {
	lo, hi := t.pack(u, k, counters.Like)
	i := t.home(u, k)
	for {
		l, h := t.slot(i)
		if l == lo && h&t.umask == hi {
			return i, true
		}
		if l == 0 {
			return i, false
		}
		if i++; i == t.n {
			i = 0
		}
	}
}

// kindOf returns the kind of (u, k), counters.NoKind when the table does
// not hold it. It does not allocate and writes nothing, so readers may
// call it concurrently.
func (t *pairTable) kindOf(u, k uint64) counters.Kind {
	if t == nil || t.live == 0 {
		return counters.NoKind
	}
	if t.stride == pairNarrow && u>>(96-t.kw-t.kb) != 0 {
		return counters.NoKind // does not fit a narrow slot, so was never added
	}
	i, ok := t.find(u, k)
	if !ok {
		return counters.NoKind
	}
	_, h := t.slot(i)
	return counters.Kind(h>>t.kshift) + 1
}

// has reports whether (u, k) is in the table.
func (t *pairTable) has(u, k uint64) bool { return t.kindOf(u, k) != counters.NoKind }

// add inserts (u, k) as a like and reports whether it was absent; a pair
// the table holds keeps its kind.
func (t *pairTable) add(u, k uint64) bool {
	return t.insert(u, k, counters.Like, false) == counters.NoKind
}

// put stores (u, k) with kind (not NoKind) and returns the kind it had,
// NoKind when it was absent.
func (t *pairTable) put(u, k uint64, kind counters.Kind) counters.Kind {
	return t.insert(u, k, kind, true)
}

// insert adds (u, k) with kind, or, when the table holds it and replace
// is set, changes its kind; it returns the kind the pair had.
func (t *pairTable) insert(u, k uint64, kind counters.Kind, replace bool) counters.Kind {
	if t.n == 0 {
		t.alloc(pairMinSlots, pairNarrow)
	}
	if !t.fits(u, kind) {
		kb := max(t.kb, uint(bits.Len8(uint8(kind-1))))
		stride := t.stride
		if u>>(96-t.kw-kb) != 0 || (kb > t.kb && !t.usersFit(kb)) {
			stride = pairWide
		}
		t.rebuild(t.n, stride, kb)
	}
	i, ok := t.find(u, k)
	if ok {
		lo, hi := t.slot(i)
		was := counters.Kind(hi>>t.kshift) + 1
		if replace && was != kind {
			t.setSlot(i, lo, hi&t.umask|uint64(kind-1)<<t.kshift)
		}
		return was
	}
	if (t.live+1)*4 > t.n*3 {
		t.rebuild(t.n+t.n/2, t.stride, t.kb)
		i, _ = t.find(u, k)
	}
	lo, hi := t.pack(u, k, kind)
	t.setSlot(i, lo, hi)
	t.live++
	return counters.NoKind
}

// remove deletes (u, k) and returns the kind it had, NoKind when it was
// absent. The entries after it in its run move back to fill the gap when
// their probe sequence allows, so that every lookup still stops at the
// first empty slot.
func (t *pairTable) remove(u, k uint64) counters.Kind {
	if t == nil || t.live == 0 || (t.stride == pairNarrow && u>>(96-t.kw-t.kb) != 0) {
		return counters.NoKind
	}
	i, ok := t.find(u, k)
	if !ok {
		return counters.NoKind
	}
	_, h0 := t.slot(i)
	was := counters.Kind(h0>>t.kshift) + 1
	j := i
	for {
		if j++; j == t.n {
			j = 0
		}
		lo, hi := t.slot(j)
		if lo == 0 {
			break
		}
		hu, hk, _ := t.unpack(lo, hi)
		h := t.home(hu, hk)
		if !homeBetween(i, h, j) {
			t.setSlot(i, lo, hi)
			i = j
		}
	}
	t.setSlot(i, 0, 0)
	t.live--
	return was
}

// usersFit reports whether the users of a narrow table would fit its
// slots with kb kind bits.
func (t *pairTable) usersFit(kb uint) bool {
	if t.stride == pairWide {
		return true
	}
	return t.each(func(u, _ uint64, _ counters.Kind) bool { return u>>(96-t.kw-kb) == 0 })
}

// rebuild moves every pair into a table of n slots of the given stride
// and kind bits.
func (t *pairTable) rebuild(n, stride int, kb uint) {
	old := *t
	t.kb = kb
	t.alloc(max(n, pairSlotsFor(old.live)), stride)
	for i := range old.n {
		lo, hi := old.slot(i)
		if lo == 0 {
			continue
		}
		u, k, kind := old.unpack(lo, hi)
		j, _ := t.find(u, k)
		lo, hi = t.pack(u, k, kind)
		t.setSlot(j, lo, hi)
		t.live++
	}
}

func (t *pairTable) len() int {
	if t == nil {
		return 0
	}
	return t.live
}

// each calls fn for every pair in slot order until fn returns false, and
// reports whether it went to the end.
func (t *pairTable) each(fn func(u, k uint64, kind counters.Kind) bool) bool {
	if t == nil {
		return true
	}
	for i := range t.n {
		lo, hi := t.slot(i)
		if lo == 0 {
			continue
		}
		if !fn(t.unpack(lo, hi)) {
			return false
		}
	}
	return true
}

// pairs appends the table's pairs to dst (unsorted).
func (t *pairTable) pairs(dst []pair) []pair {
	t.each(func(u, k uint64, kind counters.Kind) bool {
		dst = append(dst, pair{post: k, user: u, kind: kind})
		return true
	})
	return dst
}

func (t *pairTable) memoryBytes() int {
	if t == nil {
		return 0
	}
	return cap(t.b)
}
