package embedded

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/tally-dev/tally/bench/datagen"
	"github.com/tally-dev/tally/engine"
)

// BenchmarkReactionPage reads the same 50-post pages through Engine.Page
// as a feed without reactions does (counts and viewerHasLiked) and as one
// with them (reactions { kind count } and viewerReaction), from an engine
// with six kinds: bench/datagen's posts with authors (200k), a third of
// them reacted to by the viewer (mostly like, some of the other kinds),
// every tenth with a love and a haha of others; the last 7 days open,
// the rest sealed. The ratio of the two is the cost of reactions on a
// page.
//
//	go test ./engine/embedded -run '^$' -bench ReactionPage
func BenchmarkReactionPage(b *testing.B) {
	const n, viewer = 200_000, engine.UserID(7)
	kinds := []string{"like", "love", "haha", "wow", "sad", "angry"}
	e, err := Open(Options{Now: func() time.Time { return datagen.DefaultEnd }, SweepInterval: -1, MaintainInterval: -1,
		Reactions: kinds, Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	g := datagen.New(datagen.Config{N: n, Seed: 1})
	a := datagen.NewAuthors(datagen.AuthorConfig{Seed: 1})
	var ids []engine.PostID
	rows := make([]engine.ImportRow, 0, MaxImportBatch)
	for {
		id, c, ok := g.Next()
		if ok {
			ids = append(ids, engine.PostID(id))
			rows = append(rows, engine.ImportRow{Post: engine.PostID(id), Author: a.Next(), Counts: c})
		}
		if len(rows) == cap(rows) || !ok && len(rows) > 0 {
			if err := e.Import(bg, rows); err != nil {
				b.Fatal(err)
			}
			rows = rows[:0]
		}
		if !ok {
			break
		}
	}
	slices.Sort(ids)
	for i, p := range ids {
		var err error
		switch {
		case i%3 == 0 && i%5 == 0:
			err = e.ReactToPost(bg, viewer, p, kinds[1+i%5])
		case i%3 == 0:
			err = e.Like(bg, viewer, p)
		}
		if err == nil && i%10 == 0 {
			err = e.ReactToPost(bg, 8, p, "love")
			if err == nil {
				err = e.ReactToPost(bg, 9, p, "haha")
			}
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	e.maintain()
	sealed, open := sealedAndOpenPages(ids, 7)
	out := make([]engine.PostView, 50)
	for _, c := range []struct {
		name  string
		pages [][]engine.PostID
	}{{"sealed", sealed}, {"open", open}} {
		for _, w := range []struct {
			name string
			want engine.PageWant
		}{
			{"counts+liked", engine.PageWant{Counts: true, Liked: true}},
			{"reactions+viewer", engine.PageWant{Reactions: true, ViewerReaction: true}},
		} {
			b.Run(fmt.Sprintf("%s/%s", c.name, w.name), func(b *testing.B) {
				if len(c.pages) == 0 {
					b.Skip("no pages")
				}
				i := 0
				for b.Loop() {
					if err := e.Page(bg, viewer, c.pages[i%len(c.pages)], w.want, out); err != nil {
						b.Fatal(err)
					}
					i++
				}
			})
		}
	}
}
