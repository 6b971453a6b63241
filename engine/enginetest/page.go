package enginetest

import (
	"errors"
	"testing"

	"github.com/tally-dev/tally/engine"
)

// testPage: Page reads what Posts, Counts, Liked and Favorited read, for
// every combination of wants, for a signed-in and an anonymous viewer, with
// unknown ids and repeats in the page; bad ids are refused as by the parts.
func testPage(t *testing.T, s engine.Store) {
	const author, viewer engine.UserID = 7, 8
	liked1, plain, favd := newPost(t, s, author), newPost(t, s, author), newPost(t, s, author)
	ok(t, s.Like(bg, viewer, liked1))
	ok(t, s.Favorite(bg, viewer, favd))
	ok(t, s.Comment(bg, viewer, plain, 0, nil, ""))
	ok(t, s.RecordViews(bg, []engine.PostID{liked1, plain, plain}))
	unknown := clientPostID()
	page := []engine.PostID{liked1, unknown, plain, favd, liked1}

	for _, who := range []engine.UserID{viewer, 0} {
		infos, err := s.Posts(bg, page)
		ok(t, err)
		cnts, err := s.Counts(bg, page)
		ok(t, err)
		lks, err := s.Liked(bg, who, page)
		ok(t, err)
		favs, err := s.Favorited(bg, who, page)
		ok(t, err)
		for mask := range 8 {
			want := engine.PageWant{Counts: mask&1 != 0, Liked: mask&2 != 0, Favorited: mask&4 != 0}
			out := make([]engine.PostView, len(page))
			for i := range out {
				out[i].Liked = true // Page must overwrite what the caller's buffer held
			}
			ok(t, s.Page(bg, who, page, want, out))
			for i, v := range out {
				exp := engine.PostView{PostInfo: infos[i]}
				if want.Counts {
					exp.Counts = cnts[i]
				}
				exp.Liked = want.Liked && lks[i]
				exp.Favorited = want.Favorited && favs[i]
				if v != exp {
					t.Fatalf("viewer %d, want %+v: post %d = %+v, want %+v", who, want, page[i], v, exp)
				}
			}
		}
	}
	all := engine.PageWant{Counts: true, Liked: true, Favorited: true}
	if err := s.Page(bg, viewer, []engine.PostID{liked1, 0}, all, make([]engine.PostView, 2)); !errors.Is(err, engine.ErrInvalid) {
		t.Fatalf("Page with id 0: %v, want ErrInvalid", err)
	}
	tooMany := make([]engine.PostID, engine.MaxIDsPerCall+1)
	for i := range tooMany {
		tooMany[i] = liked1
	}
	if err := s.Page(bg, viewer, tooMany, all, make([]engine.PostView, len(tooMany))); !errors.Is(err, engine.ErrInvalid) {
		t.Fatalf("Page of %d ids: %v, want ErrInvalid", len(tooMany), err)
	}
	if err := s.Page(bg, viewer, []engine.PostID{liked1}, all, nil); !errors.Is(err, engine.ErrInvalid) {
		t.Fatalf("Page into a short buffer: %v, want ErrInvalid", err)
	}
	ok(t, s.Page(bg, viewer, nil, all, nil))
}
