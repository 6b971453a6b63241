package tier

import (
	"sort"

	"github.com/tally-dev/tally/engine/counters"
)

// A Scan looks for the records of one user in one window — a set's pairs
// of user, the posts whose author is user — for a caller that must visit
// the whole table without holding its lock for long (the erasure of a
// user, which may have a million likes spread over every window). Like a
// Job it is planned under the write lock, run with no lock and finished
// under the write lock:
//
//   - Plan picks the first window holding ids at or after from. An open
//     window's table is held: it takes no writes in place (they go to the
//     window's delta, as while a job seals it) and no job is planned on
//     it, so Run may read it. A sealed or cold window is immutable
//     anyway; Run reads a copy of its body's header, so that the arena
//     may move the window meanwhile.
//   - Run reads the body from from on: a held open table whole, sealed or
//     cold blocks until limit records have been read, stopping at a block
//     boundary. It finds candidates; it changes nothing.
//   - Finish adds the window's deltas' candidates once its body is read
//     to the end, releases the hold (folding the delta written meanwhile
//     back into the open table) and returns the candidates and the id to
//     plan the next scan from. A window whose body was replaced meanwhile
//     (a job finished, a Load) is read again from the same from.
//
// Candidates are ids where a record of the user was seen: the caller
// checks each against the table under its lock before acting on it
// (Has, Get), as it would any other fact. The cursor is a position in
// the table's key order, not in how its windows are kept, so a caller may
// persist it and resume after a restart.
type Scan struct {
	t      *table
	w      *window
	body   body // w's body when planned, or a copy of its header
	orig   body // w.body when planned
	epoch  uint64
	held   bool
	user   uint64
	from   Cursor
	limit  int
	found  []uint64
	next   Cursor
	err    error
	ran    bool
	closed bool
}

// Cursor is a position in a table's key order: a post id and, in a set,
// a user (the pairs of one hot post span many blocks). The zero Cursor is
// the start of the table.
type Cursor struct {
	Post, User uint64
}

// atOrBefore reports whether c is at or before (post, user).
func (c Cursor) atOrBefore(post, user uint64) bool {
	return c.Post < post || (c.Post == post && c.User <= user)
}

// planScan plans a scan of the first window holding ids >= from.Post;
// with no such window the scan is empty and Finish reports done.
func (t *table) planScan(user uint64, from Cursor, limit int) *Scan {
	sc := &Scan{t: t, user: user, from: from, limit: max(limit, 1), epoch: t.epoch}
	i := sort.Search(len(t.wins), func(i int) bool { return t.wins[i].last >= from.Post })
	if i == len(t.wins) {
		return sc
	}
	w := t.wins[i]
	sc.w, sc.orig = w, w.body
	if from.Post < w.lo {
		sc.from = Cursor{Post: w.lo}
	}
	switch b := w.body.(type) {
	case *sealedWindow:
		cp := *b
		sc.body = &cp
	case *coldWindow:
		cp := *b
		sc.body = &cp
	default:
		sc.body = b
		if w.job == nil || w.job.hold {
			// A job's base is immutable already; otherwise hold it. A
			// View's hold (view.go) may end before the scan does.
			w.lifeOf().held++
			sc.held = true
		}
	}
	return sc
}

// Run reads the planned body for the user's records, with no lock.
func (sc *Scan) Run() error {
	if sc.ran || sc.w == nil {
		return sc.err
	}
	sc.ran = true
	sc.next, sc.err = sc.t.shape.scanBody(sc.body, sc.w.lo, sc.w.last, sc.from, sc.limit, sc.user, &sc.found)
	return sc.err
}

// Finish ends the scan under the write lock: it returns the candidates
// (sorted, each once), the cursor to plan the next scan from, and done
// when no window holds ids at or after it. A scan of a window whose body
// was replaced while it ran returns what it found, the same from and no
// error (the run may have read a file Collect closed): the window is read
// again. An error (an unreadable cold block) is returned
// with the same from, to be retried.
func (sc *Scan) Finish() (found []uint64, next Cursor, done bool, err error) {
	t, w := sc.t, sc.w
	if sc.closed {
		return nil, sc.from, false, nil
	}
	sc.closed = true
	if w == nil {
		return nil, sc.from, true, nil
	}
	replaced := sc.epoch != t.epoch || w.body != sc.orig || t.find(w.lo) < 0 || t.wins[t.find(w.lo)] != w
	next = sc.next
	if sc.err != nil || replaced || !sc.ran {
		next = sc.from
	} else if next.Post > w.last {
		// The body is read to its end: the writes over it are next.
		for _, o := range [2]overlay{w.delta, w.frozen()} {
			if o != nil {
				t.shape.scanOverlay(o, w.lo, sc.user, &sc.found)
			}
		}
	}
	if sc.held {
		w.life.held--
		if w.life.held == 0 && w.job == nil && w.delta != nil && w.body.kind() == Open {
			t.shape.foldInto(w.body, w.delta)
			w.delta = nil
			w.life.scrub = false
		}
		w.tidyLife()
	}
	found = sc.found
	sort.Slice(found, func(i, j int) bool { return found[i] < found[j] })
	k := 0
	for i, id := range found {
		if i == 0 || id != found[k-1] {
			found[k] = id
			k++
		}
	}
	found = found[:k]
	if replaced {
		return found, next, false, nil
	}
	done = sort.Search(len(t.wins), func(i int) bool { return t.wins[i].last >= next.Post }) == len(t.wins)
	return found, next, done, sc.err
}

// PlanScan plans a scan for user's pairs (Scan) in the first window
// holding posts >= from.Post, reading up to limit pairs of a sealed or
// cold body. Call it, and Finish, under the write lock; Run with none.
func (s *Set) PlanScan(user uint64, from Cursor, limit int) *Scan {
	return s.planScan(user, from, limit)
}

// PlanScan plans a scan for the posts whose author is user (Scan) in the
// first window holding posts >= from.Post, reading up to limit posts of
// a sealed or cold body.
func (p *Posts) PlanScan(user uint64, from Cursor, limit int) *Scan {
	return p.planScan(user, from, limit)
}

// scanBody and scanOverlay for a set: the posts of user's pairs.

func (s *Set) scanBody(b body, lo, last uint64, from Cursor, limit int, user uint64, found *[]uint64) (Cursor, error) {
	end := Cursor{Post: last + 1}
	if t, ok := b.(*pairTable); ok {
		t.each(func(u, k uint64, _ counters.Kind) bool {
			if u == user && from.atOrBefore(lo+k, u) {
				*found = append(*found, lo+k)
			}
			return true
		})
		return end, nil
	}
	sc := new(pairScratch)
	next := end
	read := 0
	var idx *blockIndex
	switch b := b.(type) {
	case *sealedWindow:
		idx = &b.idx
	case *coldWindow:
		idx = &b.idx
	}
	// The last block whose first pair is at most from holds from.
	start := sort.Search(idx.blocks, func(i int) bool {
		p, u := idx.firstPair(i)
		return from.atOrBefore(p, u) && (p != from.Post || u != from.User)
	}) - 1
	err := eachBlockFrom(b, max(start, 0), func(x *blockIndex, file string, i int, blk []byte) error {
		if read >= limit {
			p, u := x.firstPair(i)
			next = Cursor{p, u}
			return errStop
		}
		c, err := decodeCheckedPairBlock(x, file, i, blk, sc)
		if err != nil {
			return err
		}
		read += c
		for _, q := range sc.pairs[:c] {
			if q.user == user && from.atOrBefore(q.post, q.user) {
				*found = append(*found, q.post)
			}
		}
		return nil
	})
	if err == errStop {
		err = nil
	}
	return next, err
}

func (s *Set) scanOverlay(o overlay, lo, user uint64, found *[]uint64) {
	if d := asPairs(o); d != nil {
		d.added.each(func(u, k uint64, _ counters.Kind) bool {
			if u == user {
				*found = append(*found, lo+k)
			}
			return true
		})
	}
}

// scanBody and scanOverlay for the post table: the posts whose author is
// user.

func (p *Posts) scanBody(b body, lo, last uint64, from Cursor, limit int, user uint64, found *[]uint64) (Cursor, error) {
	end := Cursor{Post: last + 1}
	if t, ok := b.(*rowTable); ok {
		var r postRow
		for _, s := range t.slots {
			key := s.low & p.layout.keyMask
			if key == 0 || lo+key-1 < from.Post {
				continue
			}
			t.get(key, &p.layout, &r)
			if r[0] == user {
				*found = append(*found, lo+key-1)
			}
		}
		return end, nil
	}
	ids, rs := make([]uint64, maxPostsInBlock), make([]postRow, maxPostsInBlock)
	next := end
	read := 0
	var idx *blockIndex
	switch b := b.(type) {
	case *sealedWindow:
		idx = &b.idx
	case *coldWindow:
		idx = &b.idx
	}
	start := max(sort.Search(idx.blocks, func(i int) bool { return idx.firstID(i) > from.Post })-1, 0)
	err := eachBlockFrom(b, start, func(x *blockIndex, file string, i int, blk []byte) error {
		if read >= limit {
			next = Cursor{Post: x.firstID(i)}
			return errStop
		}
		k, err := decodeCheckedPostBlock(x, file, i, blk, ids, rs)
		if err != nil {
			return err
		}
		read += k.len()
		for j := range k.len() {
			if rs[j][0] == user && ids[j] >= from.Post {
				*found = append(*found, ids[j])
			}
		}
		return nil
	})
	if err == errStop {
		err = nil
	}
	return next, err
}

func (p *Posts) scanOverlay(o overlay, lo, user uint64, found *[]uint64) {
	d := asRows(o)
	if d == nil {
		return
	}
	var r postRow
	for _, key := range d.sorted(&p.layout) {
		if d.get(key, &p.layout, &r); !r.dead() && r[0] == user {
			*found = append(*found, lo+key-1)
		}
	}
}
