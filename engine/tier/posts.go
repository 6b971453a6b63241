package tier

import (
	"fmt"
	"io"
	"time"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/counters"
)

// Post is the record of the post table: who wrote the post (0 for a post
// known without its author), its five counts and its counts of the
// reaction kinds beyond like (like's is Counts.Likes).
type Post struct {
	Author    uint64
	Counts    engine.Counts
	Reactions counters.Reactions
}

// Count returns the post's count of reaction kind k (like: its likes).
func (p *Post) Count(k counters.Kind) int64 {
	if k == counters.Like {
		return p.Counts.Likes
	}
	return p.Reactions.Get(k)
}

// HasCounts reports whether a count of the post, of any kind, is not
// zero.
func (p *Post) HasCounts() bool { return !p.Counts.IsZero() || !p.Reactions.IsZero() }

// AddReaction adds d to the count of kind k within [counters.Floor,
// counters.Ceiling].
func (p *Post) AddReaction(k counters.Kind, d int64) {
	if k == counters.Like {
		p.Counts.Likes = counters.Add(p.Counts.Likes, d)
	} else {
		p.Reactions.Add(k, d)
	}
}

func (p *Post) row() postRow {
	c := &p.Counts
	r := postRow{p.Author, uint64(c.Likes), uint64(c.Comments), uint64(c.Reposts), uint64(c.Views), uint64(c.Favorites)}
	for j, v := range p.Reactions {
		r[fixedCols+j] = uint64(v)
	}
	return r
}

// toPost writes the row as a Post to p.
func (r *postRow) toPost(p *Post) {
	p.Author = r[0]
	p.Counts = engine.Counts{Likes: int64(r[1]), Comments: int64(r[2]), Reposts: int64(r[3]), Views: int64(r[4]), Favorites: int64(r[5])}
	for j := range p.Reactions {
		p.Reactions[j] = int64(r[fixedCols+j])
	}
}

func (r *postRow) post() Post {
	var p Post
	r.toPost(&p)
	return p
}

// Posts is the post table: a Post by post id, one record a post, so that
// a page reads existence, author and counts with one probe a post. Its
// open windows and deltas are row tables (rowtable.go), its images' blocks
// post blocks (postblock.go). It is not safe for concurrent use on its
// own: see the package doc for the locking contract.
type Posts struct {
	table
	layout slotLayout
	kinds  counters.Kinds // kept in the snapshot image (postshape.go)
}

var postTag = [4]byte{'P', 'O', 'S', 'T'}

// NewPosts returns an empty post table.
func NewPosts(opts Options) (*Posts, error) {
	p := &Posts{kinds: counters.NewKinds()}
	if err := p.init(p, imageFormat{tag: postTag, entrySize: postEntrySize, perBlock: maxPostsInBlock}, opts); err != nil {
		return nil, err
	}
	var ok bool
	if p.layout, ok = newSlotLayout(p.win.KeyBits()); !ok {
		return nil, fmt.Errorf("tier: no slot layout for windows of %d ms", p.opts.WindowMillis)
	}
	return p, nil
}

// asRows returns o as the post table's overlay, or nil.
func asRows(o overlay) *rowTable {
	r, _ := o.(*rowTable)
	return r
}

// Get returns the record of id and whether it exists. An error means a
// block that should hold id could not be read or failed its checks: the
// record is then unknown, never reported as absent.
func (p *Posts) Get(id uint64) (Post, bool, error) {
	i := p.find(id)
	if i < 0 {
		return Post{}, false, nil
	}
	var r postRow
	ok, err := p.get(p.wins[i], id, &r)
	if err != nil || !ok {
		return Post{}, false, err
	}
	return r.post(), true, nil
}

// get looks id up in w: delta, frozen, then the body. A deleted post's
// row (deadRow) in an overlay reads as absent.
func (p *Posts) get(w *window, id uint64, r *postRow) (bool, error) {
	key := id - w.lo + 1
	if d := asRows(w.delta); d != nil && d.get(key, &p.layout, r) {
		return !r.dead(), nil
	}
	if f := asRows(w.frozen()); f != nil && f.get(key, &p.layout, r) {
		return !r.dead(), nil
	}
	return p.getBody(w, id, r)
}

// getBody looks id up in w's body.
func (p *Posts) getBody(w *window, id uint64, r *postRow) (bool, error) {
	switch b := w.body.(type) {
	case *rowTable:
		return b.get(id-w.lo+1, &p.layout, r), nil
	case *sealedWindow:
		return getSealed(b, id, r), nil
	case *coldWindow:
		return getCold(b, id, r)
	}
	panic("tier: a post table's window of another shape")
}

// Put stores r as the record of id, creating it or replacing it. On a
// window that does not take writes in place (sealed, cold, being sealed)
// the record goes to the window's delta; Put then needs to know whether
// id is new, which for a cold window can mean a block read: its error is
// returned and nothing is stored.
func (p *Posts) Put(id uint64, r Post) error { return p.put(id, r, unknown) }

// Whether the caller knows that a record exists (put).
const (
	unknown = iota
	absent
	present
)

func knownFrom(exists bool) int {
	if exists {
		return present
	}
	return absent
}

// put is Put for a caller that may know from a Get just before whether
// id exists, sparing a second lookup of a sealed or cold block.
func (p *Posts) put(id uint64, post Post, known int) error {
	w := p.windowFor(id)
	r := post.row()
	key := id - w.lo + 1
	if w.takesWrites() {
		if w.body.(*rowTable).put(key, &p.layout, &r) {
			p.adjust(w, 1)
		}
		return nil
	}
	d := asRows(w.delta)
	isNew := known == absent
	if known == unknown {
		exists, err := p.get(w, id, new(postRow))
		if err != nil {
			return err
		}
		isNew = !exists
	}
	if d == nil {
		d = newRowTable()
		w.delta = d
	}
	d.put(key, &p.layout, &r)
	if isNew {
		p.adjust(w, 1)
	}
	return nil
}

// AddCounts adds d to the counts of post id, field by field, within
// [counters.Floor, counters.Ceiling] (counters.Add), and returns the
// post before and after the change (a zero Post before when it did not
// exist). A post that does not exist is created (with author 0) only
// when the result has a count that is not zero.
func (p *Posts) AddCounts(id uint64, d engine.Counts) (was, is Post, err error) {
	return p.update(id, func(c *Post) {
		c.Counts.Likes = counters.Add(c.Counts.Likes, d.Likes)
		c.Counts.Comments = counters.Add(c.Counts.Comments, d.Comments)
		c.Counts.Reposts = counters.Add(c.Counts.Reposts, d.Reposts)
		c.Counts.Views = counters.Add(c.Counts.Views, d.Views)
		c.Counts.Favorites = counters.Add(c.Counts.Favorites, d.Favorites)
	})
}

// AddReaction adds d to post id's count of kind k (like: its likes)
// within [counters.Floor, counters.Ceiling], as AddCounts does a count.
// A kind not in the table's kinds is an error.
func (p *Posts) AddReaction(id uint64, k counters.Kind, d int64) (was, is Post, err error) {
	if k == counters.NoKind || !p.kinds.Has(k) {
		return Post{}, Post{}, fmt.Errorf("tier: reaction kind id %d is not in the post table's kinds", k)
	}
	return p.update(id, func(c *Post) { c.AddReaction(k, d) })
}

// update applies change to the record of post id: the read-modify-write
// of AddCounts and AddReaction.
func (p *Posts) update(id uint64, change func(*Post)) (was, is Post, err error) {
	old, ok, err := p.Get(id)
	if err != nil {
		return Post{}, Post{}, err
	}
	n := old
	change(&n)
	if n == old && (ok || !n.HasCounts()) {
		return old, old, nil
	}
	if err := p.put(id, n, knownFrom(ok)); err != nil {
		return old, old, err
	}
	return old, n, nil
}

// Delete deletes the record of id and reports whether there was one. An
// open window that takes writes forgets it at once; any other keeps a
// deleted row in its delta, which hides the body's record until the
// window's next rewrite drops both. Like Put it may need a cold block.
func (p *Posts) Delete(id uint64) (bool, error) {
	i := p.find(id)
	if i < 0 {
		return false, nil
	}
	w := p.wins[i]
	key := id - w.lo + 1
	if w.takesWrites() {
		if !w.body.(*rowTable).remove(key, &p.layout) {
			return false, nil
		}
		p.adjust(w, -1)
		return true, nil
	}
	exists, err := p.get(w, id, new(postRow))
	if err != nil || !exists {
		return false, err
	}
	d := asRows(w.delta)
	if d == nil {
		d = newRowTable()
		w.delta = d
	}
	d.put(key, &p.layout, &deadRow)
	p.adjust(w, -1)
	return true, nil
}

// deadRow is a deleted post's row in an overlay: every fixed column all
// ones, which no post's row is (counts fit an int64), and no kind
// counts. It never fits a slot, so it lives in the overlay's overflow
// map.
var deadRow = postRow{^uint64(0), ^uint64(0), ^uint64(0), ^uint64(0), ^uint64(0), ^uint64(0)}

func (r *postRow) dead() bool { return fixedRow(r[:fixedCols]).dead() }

func (r fixedRow) dead() bool { return r == fixedRow(deadRow[:fixedCols]) }

// SetAuthor records the author of post id, creating the post.
func (p *Posts) SetAuthor(id, author uint64) error {
	old, ok, err := p.Get(id)
	if err != nil {
		return err
	}
	if ok && old.Author == author {
		return nil
	}
	old.Author = author
	return p.put(id, old, knownFrom(ok))
}

// Range calls fn for every record in id order until fn returns false. A
// cold window's blocks are read from its file and checked (not through
// the cache); an unreadable one ends the walk with its error. Range only
// reads: it may run under the read lock.
func (p *Posts) Range(fn func(id uint64, r Post) bool) error {
	return walkWindows(len(p.wins), func(i int) error {
		w := p.wins[i]
		return p.merge(w.body, w.lo, []*rowTable{asRows(w.frozen()), asRows(w.delta)}, func(id uint64, r *postRow) error {
			if !fn(id, r.post()) {
				return errStop
			}
			return nil
		})
	})
}

// LoadAnyWindow is Load for an image that may have been written with
// another window length (an operator changed it between runs: only the
// layout depends on it). An image of the table's window length is loaded
// as Load does; another one is loaded into a table of its own windows,
// in memory, and its records imported into this one, which must be
// empty, with now telling old windows (built sealed) from open ones. Its
// cold files, if it names any, must be in the table's Dir.
func (p *Posts) LoadAnyWindow(r io.Reader, now time.Time) error {
	return loadAnyWindow(&p.table, r, NewPosts, func(other *Posts) (err, rangeErr error) {
		p.kinds = other.kinds
		err = p.Import(func(yield func(uint64, Post) bool) { rangeErr = other.Range(yield) }, now)
		return err, rangeErr
	})
}
