package tier

import (
	"math"

	"github.com/tally-dev/tally/engine"
)

// Post is the record of the post table: who wrote the post (0 for a post
// known without its author) and its five counts.
type Post struct {
	Author uint64
	Counts engine.Counts
}

// PostCodec is the post record's codec: six columns, the author then
// likes, comments, reposts, views and favorites. In a sealed window the
// author is a dense column and the counts a sparse group: each column is
// packed per block at the width its values need, with the rare wide value
// as an exception, and the counts are stored only for the posts that have
// one (a presence bit per post), so a post with an author and no counts
// costs its id (Elias–Fano, about log2 of the gap to the next post plus 2
// bits), its author's bits and one bit. In an open table a post is a
// 16-byte slot (the id's offset in its window, then SlotWidths); a post
// with a wider value goes to the table's overflow map.
type PostCodec struct{}

var postTag = [4]byte{'P', 'O', 'S', 'T'}

func (PostCodec) Tag() [4]byte { return postTag }
func (PostCodec) Cols() int    { return 6 }

// DenseCols: the author is stored for every post, the counts only for
// posts with a non-zero count.
func (PostCodec) DenseCols() int { return 1 }

// SlotWidths: in day windows 32 bits of author, 12 of likes, 8 of
// comments, 6 of reposts, 14 of views and 5 of favorites (0.1% of the
// benchmark set's posts overflow); longer windows take the bits from the
// author, shorter ones give them to it.
func (PostCodec) SlotWidths(bits int) [MaxCols]uint8 {
	author := min(64, max(0, 32+bits-77))
	return [MaxCols]uint8{uint8(author), 12, 8, 6, 14, 5}
}

// PlainRecords: a Post is its six columns in order, each 64 bits (the
// counts' int64s are the columns' uint64s, bit for bit).
func (PostCodec) PlainRecords() bool { return true }

func (PostCodec) Split(p Post) Row {
	c := &p.Counts
	return Row{p.Author, uint64(c.Likes), uint64(c.Comments), uint64(c.Reposts), uint64(c.Views), uint64(c.Favorites)}
}

func (PostCodec) Join(r Row) Post {
	return Post{Author: r[0], Counts: engine.Counts{
		Likes: int64(r[1]), Comments: int64(r[2]), Reposts: int64(r[3]), Views: int64(r[4]), Favorites: int64(r[5]),
	}}
}

// Posts is the post table.
type Posts = Tier[Post]

// NewPosts returns an empty post table.
func NewPosts(opts Options) (*Posts, error) { return New[Post](PostCodec{}, opts) }

// AddCounts adds d to the counts of post id, field by field, saturating at
// math.MaxInt64 and clamping at 0 per field as engine/postcounts does, and
// returns the post before and after the change (a zero Post before when
// it did not exist). A post that does not exist is created (with author
// 0) only when the result has a non-zero count.
func AddCounts(t *Posts, id uint64, d engine.Counts) (was, is Post, err error) {
	p, ok, err := t.Get(id)
	if err != nil {
		return Post{}, Post{}, err
	}
	n := p
	c := &n.Counts
	c.Likes = clampAdd(c.Likes, d.Likes)
	c.Comments = clampAdd(c.Comments, d.Comments)
	c.Reposts = clampAdd(c.Reposts, d.Reposts)
	c.Views = clampAdd(c.Views, d.Views)
	c.Favorites = clampAdd(c.Favorites, d.Favorites)
	if n == p && (ok || n.Counts.IsZero()) {
		return p, p, nil
	}
	if err := t.put(id, n, knownFrom(ok)); err != nil {
		return p, p, err
	}
	return p, n, nil
}

// SetAuthor records the author of post id, creating the post.
func SetAuthor(t *Posts, id, author uint64) error {
	p, ok, err := t.Get(id)
	if err != nil {
		return err
	}
	if ok && p.Author == author {
		return nil
	}
	p.Author = author
	return t.put(id, p, knownFrom(ok))
}

func clampAdd(cur, d int64) int64 {
	switch {
	case d > 0 && cur > math.MaxInt64-d:
		return math.MaxInt64
	case cur+d < 0:
		return 0
	}
	return cur + d
}

func knownFrom(exists bool) int {
	if exists {
		return present
	}
	return absent
}
