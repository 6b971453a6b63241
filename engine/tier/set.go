package tier

import (
	"fmt"
	"io"
	"slices"
	"time"
)

// Set is a set of (user, post) pairs — who liked, or favorited, which
// post — in the post table's windows (the post id's), so that a post's
// counts and its likers seal and cool together. Its open windows and
// the tables of its deltas are pair tables (pairtable.go), its images'
// blocks pair blocks (pairblock.go). Like the post table it is not safe
// for concurrent use on its own.
type Set struct {
	table
	keyBits uint // of a post id's offset in its window
	// blockLimit is the pairs per sealed block; 0 means blockPairs.
	// Tests make it small so that windows have many blocks.
	blockLimit int
}

// pairDelta is a set's overlay over a window's body: added holds pairs
// (user, key) absent below it, removed pairs present below it that are
// taken out. Either table may be nil.
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

// bodyHas reports whether the window's body holds (u, post). A cold
// body may need a block read, which may fail.
func (s *Set) bodyHas(w *window, u, post uint64) (bool, error) {
	switch b := w.body.(type) {
	case *pairTable:
		return b.has(u, post-w.lo), nil
	case *sealedWindow:
		return sealedHas(b, post, u), nil
	case *coldWindow:
		return coldHas(b, post, u)
	}
	panic("tier: a set's window of another shape")
}

// below reports whether (u, post) is in the view under the delta: the
// body with the frozen delta over it.
func (s *Set) below(w *window, u, post uint64) (bool, error) {
	if d := asPairs(w.frozen()); d != nil {
		k := post - w.lo
		if d.added.has(u, k) {
			return true, nil
		}
		if d.removed.has(u, k) {
			return false, nil
		}
	}
	return s.bodyHas(w, u, post)
}

// overlaid answers for (u, k) from the deltas alone when they decide it.
func overlaid(w *window, u, k uint64) (has, decided bool) {
	for _, o := range [2]overlay{w.delta, w.frozen()} {
		d := asPairs(o)
		if d == nil {
			continue
		}
		if d.added.has(u, k) {
			return true, true
		}
		if d.removed.has(u, k) {
			return false, true
		}
	}
	return false, false
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

// Add adds (user, post) and reports whether it was absent. A write to an
// open window is one probe and a store; to a sealed or cold window (or
// one being sealed) it goes to the window's delta and reads the body
// first, since the delta records only changes: a cold block that cannot
// be read is then an error wrapping ErrCorrupt, and nothing is stored.
// It allocates only when a table grows or a window is created.
func (s *Set) Add(user, post uint64) (bool, error) {
	w := s.windowFor(post)
	if forgotten(w, post) {
		return false, nil
	}
	k := post - w.lo
	if w.takesWrites() {
		if !w.body.(*pairTable).add(user, k) {
			return false, nil
		}
		s.adjust(w, 1)
		return true, nil
	}
	if d := asPairs(w.delta); d != nil {
		if d.added.has(user, k) {
			return false, nil
		}
		if d.removed.remove(user, k) {
			s.adjust(w, 1)
			return true, nil
		}
	}
	if has, err := s.below(w, user, post); has || err != nil {
		return false, err
	}
	s.tableOf(&deltaOf(w).added).add(user, k)
	s.adjust(w, 1)
	return true, nil
}

// Remove removes (user, post) and reports whether it was present; like
// Add, it may need a cold block, and stores nothing when that fails.
func (s *Set) Remove(user, post uint64) (bool, error) {
	i := s.find(post)
	if i < 0 {
		return false, nil
	}
	w := s.wins[i]
	if forgotten(w, post) {
		return false, nil
	}
	k := post - w.lo
	if w.takesWrites() {
		if !w.body.(*pairTable).remove(user, k) {
			return false, nil
		}
		s.adjust(w, -1)
		return true, nil
	}
	if d := asPairs(w.delta); d != nil {
		if d.added.remove(user, k) {
			s.adjust(w, -1)
			return true, nil
		}
		if d.removed.has(user, k) {
			return false, nil
		}
	}
	if has, err := s.below(w, user, post); !has || err != nil {
		return false, err
	}
	s.tableOf(&deltaOf(w).removed).add(user, k)
	s.adjust(w, -1)
	return true, nil
}

// Forget forgets every pair of post (a deleted post's likers): reads
// leave them out from now on, Add and Remove of them change nothing and
// report false, and the next rewrite of the post's window, which Plan
// makes due, drops them from memory, snapshots and files (an open
// window's at its sealing).
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
		if !w.body.(*pairTable).remove(user, k) {
			return false
		}
		s.adjust(w, -1)
		return true
	}
	if d := asPairs(w.delta); d != nil {
		if d.added.remove(user, k) {
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

// Has reports whether (user, post) is in the set. It does not allocate
// and writes nothing but the block cache; an unreadable cold block is an
// error wrapping ErrCorrupt, never a false.
func (s *Set) Has(user, post uint64) (bool, error) {
	i := s.find(post)
	if i < 0 {
		return false, nil
	}
	w := s.wins[i]
	if forgotten(w, post) {
		return false, nil
	}
	if w.delta != nil || w.job != nil {
		if has, ok := overlaid(w, user, post-w.lo); ok {
			return has, nil
		}
	}
	return s.bodyHas(w, user, post)
}

// setChunk is how many posts HasMany orders at a time: a byte each for
// their positions, on the stack.
const setChunk = 256

// HasMany sets out[i] to whether (user, posts[i]) is in the set; out must
// be at least as long as posts. It is the feed-page read: the posts are
// visited in id order, so each window is found once and each sealed or
// cold block parsed once however many of the page's posts it holds (a
// cold block is read with one pread when it is not cached). It does not
// allocate. An error (an unreadable cold block) leaves out incomplete:
// the caller must not serve it.
func (s *Set) HasMany(user uint64, posts []uint64, out []bool) error {
	out = out[:len(posts)]
	for len(posts) > 0 {
		n := min(len(posts), setChunk)
		if err := s.hasChunk(user, posts[:n], out[:n]); err != nil {
			return err
		}
		posts, out = posts[n:], out[n:]
	}
	return nil
}

func (s *Set) hasChunk(user uint64, posts []uint64, out []bool) error {
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
			out[o[j]] = false
			j++
			continue
		}
		w := s.wins[wi]
		e := j + 1
		for e < len(o) && posts[o[e]] >= w.lo && posts[o[e]] <= w.last {
			e++
		}
		if err := hasWindow(w, user, posts, o[j:e], out, run[:0], &sc); err != nil {
			return err
		}
		j = e
	}
	return nil
}

// hasWindow answers the positions o (in post order) whose posts are in
// window w.
func hasWindow(w *window, user uint64, posts []uint64, o []uint8, out []bool, run []uint8, sc **scratch) error {
	overlay := w.delta != nil || w.job != nil
	var idx *blockIndex
	switch b := w.body.(type) {
	case *pairTable:
		for _, i := range o {
			if forgotten(w, posts[i]) {
				out[i] = false
				continue
			}
			k := posts[i] - w.lo
			if overlay {
				if has, ok := overlaid(w, user, k); ok {
					out[i] = has
					continue
				}
			}
			out[i] = b.has(user, k)
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
				out[i] = ok && k.has(posts[i], user)
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
			out[i] = false
			continue
		}
		if overlay {
			if has, ok := overlaid(w, user, post-w.lo); ok {
				out[i] = has
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
			out[i] = false
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

// sealedHas reports whether a sealed window holds (post, user).
func sealedHas(s *sealedWindow, post, user uint64) bool {
	b := s.idx.findPair(post, user)
	if b < 0 {
		return false
	}
	firstPost, firstUser := s.idx.firstPair(b)
	blk := s.block(b)
	var k pairBlock
	if k.parse(firstPost, firstUser, blk[:len(blk)-4]) != nil {
		return false // checked when built or loaded
	}
	return k.has(post, user)
}

// coldHas reports whether a cold window holds (post, user); an
// unreadable block is an error.
func coldHas(f *coldWindow, post, user uint64) (bool, error) {
	b := f.idx.findPair(post, user)
	if b < 0 {
		return false, nil
	}
	firstPost, firstUser := f.idx.firstPair(b)
	var sc *scratch
	found := false
	err := f.view(b, &sc, func(blk []byte) error { return checkPairBlock(firstPost, firstUser, blk) }, func(blk []byte) {
		var k pairBlock
		if k.parse(firstPost, firstUser, blk[:len(blk)-4]) == nil {
			found = k.has(post, user)
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

// Range calls fn for every pair until fn returns false: window by window
// in time order, within a window in (post, user) order. A cold window's
// blocks are read from its file and checked (not through the cache); an
// unreadable one ends the walk with its error. fn must not modify the
// set.
func (s *Set) Range(fn func(user, post uint64) bool) error {
	return walkWindows(len(s.wins), func(i int) error {
		w := s.wins[i]
		return s.merge(w.body, w.lo, w.frozen(), w.delta, func(post, user uint64) error {
			if forgotten(w, post) {
				return nil
			}
			if !fn(user, post) {
				return errStop
			}
			return nil
		})
	})
}

// LoadAnyWindow is Load for a set image of any window length, as
// Posts.LoadAnyWindow; an image of another length is rebuilt through
// LoadPairs into s, which must be empty.
func (s *Set) LoadAnyWindow(r io.Reader, now time.Time) error {
	return loadAnyWindow(&s.table, r, func(opts Options) (*Set, error) { return NewSet(string(s.image.tag[:]), opts) },
		func(other *Set) (err, rangeErr error) {
			err = s.LoadPairs(func(yield func(uint64, uint64) bool) { rangeErr = other.Range(yield) }, now)
			return err, rangeErr
		})
}
