package tier

import (
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/tally-dev/tally/engine/counters"
)

// Set is a set of (user, post) pairs — who liked, reacted to, or
// favorited which post — each holding the user's reaction kind (a set
// of likes or favorites holds counters.Like alone and stores no kind),
// in the post table's windows (the post id's), so that a post's counts
// and its reactions seal and cool together. Its open windows and the
// tables of its deltas are pair tables (pairtable.go), its images'
// blocks pair blocks (pairblock.go). Like the post table it is not safe
// for concurrent use on its own.
type Set struct {
	table
	keyBits uint // of a post id's offset in its window
	// blockLimit is the pairs per sealed block; 0 means blockPairs.
	// Tests make it small so that windows have many blocks.
	blockLimit int
}

// pairDelta is a set's overlay over a window's body (the view below it):
// removed holds pairs present below that are taken out, added pairs with
// their kinds that are in the view over it and absent from the view
// below once removed is taken out. A pair in both is one whose kind
// changed. Either table may be nil.
type pairDelta struct {
	added, removed *pairTable
}

func (d *pairDelta) len() int         { return d.added.len() + d.removed.len() }
func (d *pairDelta) memoryBytes() int { return d.added.memoryBytes() + d.removed.memoryBytes() }

// asPairs returns o as a set's overlay, or nil.
func asPairs(o overlay) *pairDelta {
	d, _ := o.(*pairDelta)
	return d
}

// NewSet returns an empty set whose windows carry tag (4 bytes, e.g.
// "LIKE", "FAVS": a window or snapshot of another tag is refused) and
// whose files in Options.Dir are named by Options.Prefix (the tag when
// empty).
func NewSet(tag string, opts Options) (*Set, error) {
	if len(tag) != 4 {
		return nil, fmt.Errorf("tier: set tag %q is not 4 bytes", tag)
	}
	s := &Set{}
	if err := s.init(s, imageFormat{tag: [4]byte([]byte(tag)), entrySize: pairEntrySize, perBlock: maxBlockPairs}, opts); err != nil {
		return nil, err
	}
	s.keyBits = s.win.KeyBits()
	return s, nil
}

// bodyKind returns the kind of (u, post) in the window's body,
// counters.NoKind when it does not hold it. A cold body may need a block
// read, which may fail.
func (s *Set) bodyKind(w *window, u, post uint64) (counters.Kind, error) {
	switch b := w.body.(type) {
	case *pairTable:
		return b.kindOf(u, post-w.lo), nil
	case *sealedWindow:
		return sealedKind(b, post, u), nil
	case *coldWindow:
		return coldKind(b, post, u)
	}
	panic("tier: a set's window of another shape")
}

// below returns the kind of (u, post) in the view under the delta: the
// body with the frozen delta over it.
func (s *Set) below(w *window, u, post uint64) (counters.Kind, error) {
	if d := asPairs(w.frozen()); d != nil {
		k := post - w.lo
		if kind := d.added.kindOf(u, k); kind != counters.NoKind {
			return kind, nil
		}
		if d.removed.has(u, k) {
			return counters.NoKind, nil
		}
	}
	return s.bodyKind(w, u, post)
}

// overlaid answers for (u, k) from the deltas alone when they decide it.
func overlaid(w *window, u, k uint64) (kind counters.Kind, decided bool) {
	for _, o := range [2]overlay{w.delta, w.frozen()} {
		d := asPairs(o)
		if d == nil {
			continue
		}
		if kind := d.added.kindOf(u, k); kind != counters.NoKind {
			return kind, true
		}
		if d.removed.has(u, k) {
			return counters.NoKind, true
		}
	}
	return counters.NoKind, false
}

// deltaOf returns w's delta, adding an empty one.
func deltaOf(w *window) *pairDelta {
	d := asPairs(w.delta)
	if d == nil {
		d = &pairDelta{}
		w.delta = d
	}
	return d
}

// tableOf returns *t, creating an empty table.
func (s *Set) tableOf(t **pairTable) *pairTable {
	if *t == nil {
		*t = newPairTable(s.keyBits, 0)
	}
	return *t
}

// checkKind refuses a kind outside [1, MaxKinds].
func checkKind(kind counters.Kind) error {
	if kind == counters.NoKind || kind > counters.MaxKinds {
		return fmt.Errorf("tier: reaction kind id %d outside [1, %d]", kind, counters.MaxKinds)
	}
	return nil
}

// React sets the kind of (user, post) — the user's one reaction to the
// post — adding the pair when absent, and returns the kind it had
// (counters.NoKind when it was absent): the caller moves one count from
// that kind to the new one (Posts.AddReaction on each) under the same lock. A
// write to an open window is one probe and a store; to a sealed or cold
// window (or one being sealed) it goes to the window's delta and reads
// the body first, since the delta records only changes: a cold block
// that cannot be read is then an error wrapping ErrCorrupt, and nothing
// is stored. Switching kinds costs what a like costs. It allocates only
// when a table grows or a window is created.
func (s *Set) React(user, post uint64, kind counters.Kind) (counters.Kind, error) {
	if err := checkKind(kind); err != nil {
		return counters.NoKind, err
	}
	return s.set(user, post, kind, true)
}

// Add adds (user, post) as a like and reports whether it was absent; a
// pair the set holds keeps its kind. It is React for a set of likes or
// favorites, with React's costs.
func (s *Set) Add(user, post uint64) (bool, error) {
	was, err := s.set(user, post, counters.Like, false)
	return was == counters.NoKind && err == nil, err
}

// set adds (user, post) with kind, or when present and replace is set
// changes its kind, and returns the kind it had.
func (s *Set) set(user, post uint64, kind counters.Kind, replace bool) (counters.Kind, error) {
	w := s.windowFor(post)
	if forgotten(w, post) {
		return counters.NoKind, nil
	}
	k := post - w.lo
	if w.takesWrites() {
		was := w.body.(*pairTable).insert(user, k, kind, replace)
		if was == counters.NoKind {
			s.adjust(w, 1)
		}
		return was, nil
	}
	if d := asPairs(w.delta); d != nil {
		if was := d.added.kindOf(user, k); was != counters.NoKind {
			if replace {
				d.added.put(user, k, kind)
			}
			return was, nil
		}
		if d.removed.has(user, k) { // present below, taken out
			s.tableOf(&d.added).put(user, k, kind)
			s.adjust(w, 1)
			return counters.NoKind, nil
		}
	}
	was, err := s.below(w, user, post)
	if err != nil || was == kind || (was != counters.NoKind && !replace) {
		return was, err
	}
	d := deltaOf(w)
	if was != counters.NoKind {
		s.tableOf(&d.removed).add(user, k) // the pair below, whose kind changes
	} else {
		s.adjust(w, 1)
	}
	s.tableOf(&d.added).put(user, k, kind)
	return was, nil
}

// Unreact removes (user, post) and returns the kind it had
// (counters.NoKind when it was absent); like React, it may need a cold
// block, and stores nothing when that fails.
func (s *Set) Unreact(user, post uint64) (counters.Kind, error) {
	i := s.find(post)
	if i < 0 {
		return counters.NoKind, nil
	}
	w := s.wins[i]
	if forgotten(w, post) {
		return counters.NoKind, nil
	}
	k := post - w.lo
	if w.takesWrites() {
		was := w.body.(*pairTable).remove(user, k)
		if was != counters.NoKind {
			s.adjust(w, -1)
		}
		return was, nil
	}
	if d := asPairs(w.delta); d != nil {
		if was := d.added.remove(user, k); was != counters.NoKind {
			s.adjust(w, -1) // a pair below whose kind changed stays removed
			return was, nil
		}
		if d.removed.has(user, k) {
			return counters.NoKind, nil
		}
	}
	was, err := s.below(w, user, post)
	if err != nil || was == counters.NoKind {
		return counters.NoKind, err
	}
	s.tableOf(&deltaOf(w).removed).add(user, k)
	s.adjust(w, -1)
	return was, nil
}

// Forget forgets every pair of post (a deleted post's reactions): reads
// leave them out from now on, writes of them (React, Add, Unreact,
// Remove) change nothing and report no pair, and the next rewrite of the
// post's window, which Plan makes due, drops them from memory, snapshots
// and files (an open window's at its sealing).
func (s *Set) Forget(post uint64) {
	w := s.windowFor(post)
	if j, found := slices.BinarySearch(w.forgot(), post); !found {
		l := w.lifeOf()
		l.forgot = slices.Insert(l.forgot, j, post)
	}
}

// Purge takes (user, post) out of an open window when post's pairs are
// forgotten (Forget) and reports whether it was there. Reads already
// leave such a pair out, and the rewrite Forget makes due drops it from a
// sealed or cold window; but an open window is rewritten only when it is
// sealed, and an erased user's pair must not reach a snapshot before
// then. A window that takes no writes in place (a view, a scan or a job
// holds it) gets the removal in its delta, as Remove does.
func (s *Set) Purge(user, post uint64) bool {
	i := s.find(post)
	if i < 0 {
		return false
	}
	w := s.wins[i]
	if w.body.kind() != Open || !forgotten(w, post) {
		return false
	}
	k := post - w.lo
	if w.takesWrites() {
		if w.body.(*pairTable).remove(user, k) == counters.NoKind {
			return false
		}
		s.adjust(w, -1)
		return true
	}
	if d := asPairs(w.delta); d != nil {
		if d.added.remove(user, k) != counters.NoKind {
			s.adjust(w, -1)
			return true
		}
		if d.removed.has(user, k) {
			return false
		}
	}
	if !w.body.(*pairTable).has(user, k) {
		return false
	}
	s.tableOf(&deltaOf(w).removed).add(user, k)
	s.adjust(w, -1)
	return true
}

// forgotten reports whether post's pairs are forgotten in w.
func forgotten(w *window, post uint64) bool {
	forgot := w.forgot()
	if len(forgot) == 0 {
		return false
	}
	_, found := slices.BinarySearch(forgot, post)
	return found
}

// Remove removes (user, post) and reports whether it was present: Unreact
// for a set of likes or favorites.
func (s *Set) Remove(user, post uint64) (bool, error) {
	was, err := s.Unreact(user, post)
	return was != counters.NoKind, err
}

// KindOf returns the kind of (user, post), counters.NoKind when the set
// does not hold it. It does not allocate and writes nothing but the
// block cache; an unreadable cold block is an error wrapping ErrCorrupt,
// never a NoKind.
func (s *Set) KindOf(user, post uint64) (counters.Kind, error) {
	i := s.find(post)
	if i < 0 {
		return counters.NoKind, nil
	}
	w := s.wins[i]
	if forgotten(w, post) {
		return counters.NoKind, nil
	}
	if w.delta != nil || w.job != nil {
		if kind, ok := overlaid(w, user, post-w.lo); ok {
			return kind, nil
		}
	}
	return s.bodyKind(w, user, post)
}

// Has reports whether (user, post) is in the set, of any kind: KindOf.
func (s *Set) Has(user, post uint64) (bool, error) {
	kind, err := s.KindOf(user, post)
	return kind != counters.NoKind, err
}

// setChunk is how many posts KindsOf orders at a time: a byte each for
// their positions, on the stack.
const setChunk = 256

// KindsOf sets out[i] to the kind of (user, posts[i]), counters.NoKind
// when the set does not hold it (the viewer's reaction to each post of a
// page); out must be at least as long as posts. It is the feed-page read:
// the posts are visited in id order, so each window is found once and
// each sealed or cold block parsed once however many of the page's posts
// it holds (a cold block is read with one pread when it is not cached).
// It does not allocate. An error (an unreadable cold block) leaves out
// incomplete: the caller must not serve it.
func (s *Set) KindsOf(user uint64, posts []uint64, out []counters.Kind) error {
	out = out[:len(posts)]
	for len(posts) > 0 {
		n := min(len(posts), setChunk)
		if err := s.kindChunk(user, posts[:n], out[:n]); err != nil {
			return err
		}
		posts, out = posts[n:], out[n:]
	}
	return nil
}

// HasMany sets out[i] to whether (user, posts[i]) is in the set, of any
// kind: KindsOf for a set of likes or favorites, at the same cost.
func (s *Set) HasMany(user uint64, posts []uint64, out []bool) error {
	var kinds [setChunk]counters.Kind
	out = out[:len(posts)]
	for len(posts) > 0 {
		n := min(len(posts), setChunk)
		if err := s.kindChunk(user, posts[:n], kinds[:n]); err != nil {
			return err
		}
		for i, kind := range kinds[:n] {
			out[i] = kind != counters.NoKind
		}
		posts, out = posts[n:], out[n:]
	}
	return nil
}

func (s *Set) kindChunk(user uint64, posts []uint64, out []counters.Kind) error {
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
	// answered together: run holds them.
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
			out[o[j]] = counters.NoKind
			j++
			continue
		}
		w := s.wins[wi]
		e := j + 1
		for e < len(o) && posts[o[e]] >= w.lo && posts[o[e]] <= w.last {
			e++
		}
		if err := kindWindow(w, user, posts, o[j:e], out, run[:0], &sc); err != nil {
			return err
		}
		j = e
	}
	return nil
}

// kindWindow answers the positions o (in post order) whose posts are in
// window w.
func kindWindow(w *window, user uint64, posts []uint64, o []uint8, out []counters.Kind, run []uint8, sc **scratch) error {
	overlay := w.delta != nil || w.job != nil
	var idx *blockIndex
	switch b := w.body.(type) {
	case *pairTable:
		for _, i := range o {
			if forgotten(w, posts[i]) {
				out[i] = counters.NoKind
				continue
			}
			k := posts[i] - w.lo
			if overlay {
				if kind, ok := overlaid(w, user, k); ok {
					out[i] = kind
					continue
				}
			}
			out[i] = b.kindOf(user, k)
		}
		return nil
	case *sealedWindow:
		idx = &b.idx
	case *coldWindow:
		idx = &b.idx
	}
	cur := -1
	flush := func() error {
		if len(run) == 0 {
			return nil
		}
		firstPost, firstUser := idx.firstPair(cur)
		answer := func(blk []byte) {
			var k pairBlock
			ok := k.parse(firstPost, firstUser, blk[:len(blk)-4]) == nil // checked when built, loaded or read
			for _, i := range run {
				out[i] = counters.NoKind
				if ok {
					out[i] = k.kindOf(posts[i], user)
				}
			}
		}
		switch b := w.body.(type) {
		case *sealedWindow:
			answer(b.block(cur))
		case *coldWindow:
			check := func(blk []byte) error { return checkPairBlock(firstPost, firstUser, blk) }
			if err := b.view(cur, sc, check, answer); err != nil {
				return err
			}
		}
		run = run[:0]
		return nil
	}
	for _, i := range o {
		post := posts[i]
		if forgotten(w, post) {
			out[i] = counters.NoKind
			continue
		}
		if overlay {
			if kind, ok := overlaid(w, user, post-w.lo); ok {
				out[i] = kind
				continue
			}
		}
		var b int
		if cur >= 0 {
			b = idx.findPairFrom(cur, post, user)
		} else {
			b = idx.findPair(post, user)
		}
		if b < 0 {
			out[i] = counters.NoKind
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

// sealedKind returns the kind of (post, user) in a sealed window.
func sealedKind(s *sealedWindow, post, user uint64) counters.Kind {
	b := s.idx.findPair(post, user)
	if b < 0 {
		return counters.NoKind
	}
	firstPost, firstUser := s.idx.firstPair(b)
	blk := s.block(b)
	var k pairBlock
	if k.parse(firstPost, firstUser, blk[:len(blk)-4]) != nil {
		return counters.NoKind // checked when built or loaded
	}
	return k.kindOf(post, user)
}

// coldKind returns the kind of (post, user) in a cold window; an
// unreadable block is an error.
func coldKind(f *coldWindow, post, user uint64) (counters.Kind, error) {
	b := f.idx.findPair(post, user)
	if b < 0 {
		return counters.NoKind, nil
	}
	firstPost, firstUser := f.idx.firstPair(b)
	var sc *scratch
	found := counters.NoKind
	err := f.view(b, &sc, func(blk []byte) error { return checkPairBlock(firstPost, firstUser, blk) }, func(blk []byte) {
		var k pairBlock
		if k.parse(firstPost, firstUser, blk[:len(blk)-4]) == nil {
			found = k.kindOf(post, user)
		}
	})
	if sc != nil {
		scratchPool.Put(sc)
	}
	return found, err
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

// RangeKinds calls fn for every pair with its kind until fn returns
// false: window by window in time order, within a window in (post, user)
// order. A cold window's blocks are read from its file and checked (not
// through the cache); an unreadable one ends the walk with its error. fn
// must not modify the set.
func (s *Set) RangeKinds(fn func(user, post uint64, kind counters.Kind) bool) error {
	return walkWindows(len(s.wins), func(i int) error {
		w := s.wins[i]
		return s.merge(w.body, w.lo, w.frozen(), w.delta, func(q pair) error {
			if forgotten(w, q.post) {
				return nil
			}
			if !fn(q.user, q.post, q.kind) {
				return errStop
			}
			return nil
		})
	})
}

// Range is RangeKinds without the kinds.
func (s *Set) Range(fn func(user, post uint64) bool) error {
	return s.RangeKinds(func(user, post uint64, _ counters.Kind) bool { return fn(user, post) })
}

// LoadAnyWindow is Load for a set image of any window length, as
// Posts.LoadAnyWindow; an image of another length is rebuilt through
// LoadReactions into s, which must be empty.
func (s *Set) LoadAnyWindow(r io.Reader, now time.Time) error {
	return loadAnyWindow(&s.table, r, func(opts Options) (*Set, error) { return NewSet(string(s.image.tag[:]), opts) },
		func(other *Set) (err, rangeErr error) {
			err = s.LoadReactions(func(yield func(Reaction) bool) {
				rangeErr = other.RangeKinds(func(user, post uint64, kind counters.Kind) bool {
					return yield(Reaction{User: user, Post: post, Kind: kind})
				})
			}, now)
			return err, rangeErr
		})
}
