package demoseed

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/embedded"
)

func seeded(t *testing.T) (engine.Store, Summary) {
	t.Helper()
	s, err := embedded.Open(embedded.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	sum, err := Seed(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	return s, sum
}

func TestSeedWorld(t *testing.T) {
	ctx := context.Background()
	s, sum := seeded(t)

	if len(sum.Users) != 8 || len(sum.Posts) != len(posts)+len(castReposts) || len(sum.Groups) != 1 ||
		len(sum.Messages) != len(chat) || len(sum.Notifications) != len(notifications) {
		t.Fatalf("summary sizes: %d users, %d posts, %d groups, %d messages, %d notifications",
			len(sum.Users), len(sum.Posts), len(sum.Groups), len(sum.Messages), len(sum.Notifications))
	}

	// The summary's posts are Tally's posts, by the authors it names.
	ids := make([]engine.PostID, len(sum.Posts))
	for i, p := range sum.Posts {
		ids[i] = engine.PostID(p.ID)
	}
	infos, err := s.Posts(ctx, ids)
	if err != nil {
		t.Fatal(err)
	}
	for i, in := range infos {
		if !in.Exists || in.Author != engine.UserID(sum.Posts[i].Author) {
			t.Errorf("post %d: registry says %+v, summary says author %d", i, in, sum.Posts[i].Author)
		}
	}

	// Counts are what the calls made them: the most travelled post.
	counts, err := s.Counts(ctx, ids[:len(posts)])
	if err != nil {
		t.Fatal(err)
	}
	const hotIndex = 9
	hot := posts[hotIndex]
	want := engine.Counts{Likes: int64(hot.likes), Views: int64(hot.views), Favorites: int64(hot.favs),
		Comments: int64(hot.comments), Reposts: int64(hot.reposts)}
	for _, c := range commentMentions {
		if c.post == hotIndex {
			want.Comments++
		}
	}
	for _, r := range castReposts {
		if r.post == hotIndex {
			want.Reposts++
		}
	}
	if counts[9] != want {
		t.Errorf("hot post counts = %+v, want %+v", counts[9], want)
	}
	// A long tail: the top post has far more likes than the median one,
	// and every post has more views than likes.
	likes := make([]int64, len(counts))
	for i, c := range counts {
		likes[i] = c.Likes
		if c.Views <= c.Likes {
			t.Errorf("post %d: %d views, %d likes", i, c.Views, c.Likes)
		}
	}
	slices.Sort(likes)
	if top, median := likes[len(likes)-1], likes[len(likes)/2]; top < 50*median {
		t.Errorf("likes are not long-tailed: top %d, median %d", top, median)
	}

	// Ana (3) has liked none of Maya's (1) posts, so the browser test has
	// one to like; Leo (2) has liked them.
	var mayas []engine.PostID
	for i, p := range sum.Posts {
		if p.Author == 1 && p.RepostOf == 0 {
			mayas = append(mayas, ids[i])
		}
	}
	for user, wantLiked := range map[engine.UserID]bool{3: false, 2: true} {
		liked, err := s.Liked(ctx, user, mayas)
		if err != nil {
			t.Fatal(err)
		}
		for i, l := range liked {
			if l != wantLiked {
				t.Errorf("user %d liked Maya's post %d: %v", user, i, l)
			}
		}
	}

	// Badges: Maya was mentioned, liked, commented on, sees both system
	// notifications and the red dot, and her followees posted.
	u, err := s.Unread(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if u.Mentions < 3 || u.Likes == 0 || u.Comments == 0 || u.System != int64(len(notifications)) || !u.RedDot || u.Feed == 0 {
		t.Errorf("Maya's badges: %+v", u)
	}
	if u, _ := s.Unread(ctx, 2); u.Messages == 0 || u.Mentions == 0 {
		t.Errorf("Leo's badges: %+v (want group messages and a mention)", u)
	}

	// The group chat and its receipts.
	g := sum.Groups[0]
	grp, err := s.Group(ctx, 1, engine.GroupID(g.ID))
	if err != nil || len(grp.Members) != len(groupMembers) {
		t.Fatalf("group: %+v, %v", grp, err)
	}
	first, err := s.Receipts(ctx, 1, engine.MessageID(sum.Messages[0].ID), 10)
	if err != nil || first.ReadCount != 4 || first.UnreadCount != 0 {
		t.Errorf("first message receipts: %+v, %v", first, err)
	}
	last, err := s.Receipts(ctx, 1, engine.MessageID(sum.Messages[len(chat)-1].ID), 10)
	if err != nil || last.ReadCount != 0 || last.UnreadCount != 4 {
		t.Errorf("last message receipts: %+v, %v", last, err)
	}
	notes, err := s.Notifications(ctx, 10, 0)
	if err != nil || len(notes) != len(notifications) || notes[0].ID != engine.NotificationID(sum.Notifications[1]) {
		t.Errorf("notifications: %+v, %v", notes, err)
	}
}

// On a deployment with several reaction kinds, posts get reactions of
// several kinds (the demo's picker shows them), likes stay what the
// like-only world has, and the cast's picks are theirs.
func TestSeedReactionKinds(t *testing.T) {
	ctx := context.Background()
	kinds := []string{"like", "love", "haha", "wow", "sad", "angry"}
	s, err := embedded.Open(embedded.Options{Reactions: kinds})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	sum, err := Seed(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]engine.PostID, len(posts))
	for i := range posts {
		ids[i] = engine.PostID(sum.Posts[i].ID)
	}
	out := make([]engine.PostView, len(ids))
	if err := s.Page(ctx, 1, ids, engine.PageWant{Counts: true, Reactions: true, ViewerReaction: true}, out); err != nil {
		t.Fatal(err)
	}
	severalKinds := 0
	for i, v := range out {
		if v.Counts.Likes != int64(posts[i].likes) || v.Reactions.Count[0] != v.Counts.Likes {
			t.Errorf("post %d: %d likes, reaction like %d, want %d", i, v.Counts.Likes, v.Reactions.Count[0], posts[i].likes)
		}
		var others int64
		kindsUsed := 0
		for k := 1; k < len(kinds); k++ {
			others += v.Reactions.Count[k]
			if v.Reactions.Count[k] > 0 {
				kindsUsed++
			}
		}
		want := int64(0)
		for rank := range len(kinds) - 1 {
			want += int64(otherKindCount(posts[i].likes, rank))
		}
		for _, r := range castReactions {
			if r.post == i {
				want++
			}
		}
		if others != want {
			t.Errorf("post %d: %d reactions of kinds but like, want %d", i, others, want)
		}
		if kindsUsed >= 3 {
			severalKinds++
		}
	}
	if severalKinds < 5 {
		t.Errorf("only %d posts have reactions of three kinds or more", severalKinds)
	}
	for _, r := range castReactions {
		one := make([]engine.PostView, 1)
		if err := s.Page(ctx, engine.UserID(r.by), ids[r.post:r.post+1], engine.PageWant{ViewerReaction: true}, one); err != nil {
			t.Fatal(err)
		}
		if want := kinds[1+r.rank]; one[0].ViewerReaction != want {
			t.Errorf("user %d's reaction on post %d = %q, want %q", r.by, r.post, one[0].ViewerReaction, want)
		}
	}

}

// The README's flow: the first query wrote to the store (a post by the
// admin, user 1, liked by user 2), then demo-seed runs on the same data
// directory. The seed succeeds, leaves that post as it was, and a second
// demo-seed changes nothing.
func TestSeedDirNonEmptyAndOnce(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	open := func() engine.Store {
		s, err := embedded.Open(embedded.Options{Dir: dir})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s := open()
	mine, err := s.CreatePost(ctx, 1, 0, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Like(ctx, 2, mine); err != nil {
		t.Fatal(err)
	}
	sum, already, err := SeedDir(ctx, s, dir)
	if err != nil || already {
		t.Fatalf("SeedDir on a store the README's query wrote to: already=%v, %v", already, err)
	}
	if len(sum.Posts) != len(posts)+len(castReposts) {
		t.Fatalf("seeded %d posts", len(sum.Posts))
	}
	for _, p := range sum.Posts {
		if engine.PostID(p.ID) == mine {
			t.Fatalf("the world claims the README's post %d", mine)
		}
	}
	c, err := s.Counts(ctx, []engine.PostID{mine})
	if err != nil || c[0] != (engine.Counts{Likes: 1}) {
		t.Errorf("the README's post after seeding: %+v, %v", c, err)
	}
	stats := s.Stats()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = open()
	defer s.Close()
	again, already, err := SeedDir(ctx, s, dir)
	if err != nil || !already || len(again.Posts) != len(sum.Posts) || again.Posts[0] != sum.Posts[0] {
		t.Fatalf("second SeedDir: already=%v, %d posts, %v", already, len(again.Posts), err)
	}
	if after := s.Stats(); after.Posts != stats.Posts || after.Groups != stats.Groups || after.Notifications != stats.Notifications {
		t.Errorf("a second demo-seed changed the store: %+v → %+v", stats, after)
	}

	// A damaged world file is reported, not overwritten by a new world.
	if err := os.WriteFile(filepath.Join(dir, FileName), []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := SeedDir(ctx, s, dir); err == nil || !strings.Contains(err.Error(), FileName) {
		t.Errorf("SeedDir over a damaged world file: %v", err)
	}
	if after := s.Stats(); after.Posts != stats.Posts {
		t.Errorf("SeedDir over a damaged world file seeded anyway")
	}
}

// Seeding a store twice (without a data directory to remember the first)
// makes a second, separate world rather than failing on reused keys.
func TestSeedTwiceIntoOneStore(t *testing.T) {
	s, first := seeded(t)
	second, err := Seed(context.Background(), s)
	if err != nil {
		t.Fatalf("second Seed: %v", err)
	}
	if second.Groups[0].ID == first.Groups[0].ID || second.Messages[0].ID == first.Messages[0].ID ||
		second.Notifications[0] == first.Notifications[0] {
		t.Errorf("the second world reuses the first's ids: %v / %v", first, second)
	}
}

func TestSaveLoad(t *testing.T) {
	dir := t.TempDir()
	if _, err := Load(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Load of an empty dir: %v", err)
	}
	in := Summary{
		Users:         Cast,
		Posts:         []Post{{ID: 1<<63 + 5, Author: 2, Text: "big id"}, {ID: 7, Author: 3, RepostOf: 1<<63 + 5}},
		Groups:        []Group{{ID: 9, Name: "G", Members: []ID{1, 2}}},
		Messages:      []Message{{ID: 11, Group: 9}},
		Notifications: []ID{13},
	}
	if err := in.Save(dir); err != nil {
		t.Fatal(err)
	}
	out, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(out.Posts, in.Posts) || out.Groups[0].Name != "G" || !slices.Equal(out.Groups[0].Members, in.Groups[0].Members) ||
		!slices.Equal(out.Messages, in.Messages) || !slices.Equal(out.Notifications, in.Notifications) || !slices.Equal(out.Users, in.Users) {
		t.Errorf("round trip: %+v != %+v", out, in)
	}
}
