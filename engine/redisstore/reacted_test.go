package redisstore_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/redisstore"
	"github.com/tally-dev/tally/engine/redisstore/redistest"
)

// The reacted bit of a post record (codec.go's reactedBit) is what a page
// reads the reactors hash by: it must be set whenever the hash exists,
// whatever else rewrites the record, and cleared when the hash goes.

// reacted reads a post's reacted bit and reactors hash, and the page.
type reacted struct {
	t   *testing.T
	rdb redis.UniversalClient
	s   *redisstore.Store
}

func newReacted(t *testing.T, addrs []string, kinds ...string) reacted {
	s := open(t, redisstore.Options{Addrs: addrs, KeyPrefix: prefix(), Reactions: append([]string{"like"}, kinds...)})
	return reacted{t, rawClient(t, addrs), s}
}

// page is post as a page of viewer's reads it.
func (r reacted) page(viewer engine.UserID, post engine.PostID) engine.PostView {
	r.t.Helper()
	out := make([]engine.PostView, 1)
	must(r.t, r.s.Page(bg, viewer, []engine.PostID{post}, engine.PageWant{Counts: true, Reactions: true, ViewerReaction: true}, out))
	return out[0]
}

// want fails unless post's reacted bit and reactors hash are both bit
// and a page of viewer's reads reaction on post.
func (r reacted) want(post engine.PostID, bit bool, viewer engine.UserID, reaction, when string) {
	r.t.Helper()
	key, field := r.s.PostField(post)
	rec, err := r.rdb.HGet(bg, key, field).Result()
	must(r.t, err)
	n, err := r.rdb.Exists(bg, r.s.ReactorsKey(post)).Result()
	must(r.t, err)
	gotBit := rec != "\xff" && rec[0]&redisstore.ReactedBit != 0
	if gotBit != bit || (n == 1) != bit {
		r.t.Fatalf("%s: reacted bit %v, reactors hash %v; want both %v", when, gotBit, n == 1, bit)
	}
	if got := r.page(viewer, post).ViewerReaction; got != reaction {
		r.t.Fatalf("%s: user %d's page reads %q, want %q", when, viewer, got, reaction)
	}
}

// TestImportKeepsReacted: an import replaces a post's counts, its kinds'
// included, and leaves who reacted as it was; the page still reads the
// viewer's kind (TestClockedSingle's seed 1795765568445543411, shrunk),
// and the bit goes with the hash's last field.
func TestImportKeepsReacted(t *testing.T) {
	addr, _ := redistest.StartSingle(t)
	r := newReacted(t, []string{addr}, "angry", "sad")
	s := r.s
	post, err := s.CreatePost(bg, 1, 0, "")
	must(t, err)
	r.want(post, false, 2, "", "a new post")
	must(t, s.Like(bg, 3, post))
	r.want(post, false, 3, "like", "a like")

	must(t, s.ReactToPost(bg, 2, post, "angry"))
	r.want(post, true, 2, "angry", "an angry reaction")
	must(t, s.Import(bg, []engine.ImportRow{{Post: post, Author: 1, Counts: engine.Counts{Views: 5}}}))
	r.want(post, true, 2, "angry", "an import of the post without angry")
	if v := r.page(3, post); v.ViewerReaction != "like" || v.Counts != (engine.Counts{Views: 5}) || v.Reactions.Count[1] != 0 {
		t.Fatalf("page after the import: %+v, want like, the imported counts and no angry count", v)
	}
	must(t, s.UnreactToPost(bg, 2, post))
	r.want(post, false, 2, "", "the only reaction of a kind undone")

	// Two reactors: the bit stays while either is in the hash, and goes
	// with a switch to like as with an unreaction.
	must(t, s.ReactToPost(bg, 2, post, "sad"))
	must(t, s.ReactToPost(bg, 4, post, "angry"))
	must(t, s.ReactToPost(bg, 4, post, "sad")) // a switch between kinds
	must(t, s.Import(bg, []engine.ImportRow{{Post: post, Author: 1}}))
	r.want(post, true, 2, "sad", "two reactors, an import of zero counts")
	must(t, s.UnreactToPost(bg, 2, post))
	r.want(post, true, 4, "sad", "one of two reactors gone")
	must(t, s.Like(bg, 4, post))
	r.want(post, false, 4, "like", "the last reactor switched to like")

	// An import that gives a post known without an author one keeps the
	// bit too (the row's head replaces the record's).
	orphan, err := s.CreatePost(bg, 5, 0, "")
	must(t, err)
	must(t, s.ReactToPost(bg, 6, orphan, "angry"))
	must(t, s.EraseUser(bg, 5))
	r.want(orphan, true, 6, "angry", "the author erased")
	must(t, s.Import(bg, []engine.ImportRow{{Post: orphan, Author: 7, Counts: engine.Counts{Likes: 2}}}))
	r.want(orphan, true, 6, "angry", "an import giving the post an author")
	if infos, err := s.Posts(bg, []engine.PostID{orphan}); err != nil || infos[0] != (engine.PostInfo{Exists: true, Author: 7}) {
		t.Fatalf("the post after the import: %+v %v", infos, err)
	}
}

// TestReactedThroughLifecycle: erasing a reactor clears the bit with the
// hash's last field (and the page answers none), erasing the author keeps
// it, and deleting the post leaves neither the bit nor the hash.
func TestReactedThroughLifecycle(t *testing.T) {
	addr, _ := redistest.StartSingle(t)
	r := newReacted(t, []string{addr}, "angry")
	s := r.s
	post, err := s.CreatePost(bg, 1, 0, "")
	must(t, err)
	must(t, s.ReactToPost(bg, 2, post, "angry"))
	must(t, s.ReactToPost(bg, 3, post, "angry"))
	must(t, s.Like(bg, 4, post))

	must(t, s.EraseUser(bg, 2))
	r.want(post, true, 3, "angry", "one of two reactors erased")
	must(t, s.EraseUser(bg, 1))
	r.want(post, true, 3, "angry", "the author erased")
	must(t, s.EraseUser(bg, 3))
	r.want(post, false, 3, "", "the last reactor erased")

	other, err := s.CreatePost(bg, 8, 0, "")
	must(t, err)
	must(t, s.ReactToPost(bg, 9, other, "angry"))
	r.want(other, true, 9, "angry", "a reaction")
	must(t, s.DeletePost(bg, engine.Actor{User: 8}, other))
	r.want(other, false, 9, "", "the post deleted")
	key, field := s.PostField(other)
	if rec, err := r.rdb.HGet(bg, key, field).Result(); err != nil || rec != "\xff" {
		t.Fatalf("the deleted post's record: %q %v, want the tombstone", rec, err)
	}
}

// testCheckReacted: a check reports a reactors hash whose record lacks the
// bit (a reaction no page shows) and a bit without a hash, and a repair
// sets the bit to whether the hash exists.
func testCheckReacted(t *testing.T, addrs []string) {
	r := newReacted(t, addrs, "angry")
	s := r.s
	hidden, err := s.CreatePost(bg, 1, 0, "")
	must(t, err)
	spare, err := s.CreatePost(bg, 1, 0, "")
	must(t, err)
	must(t, s.ReactToPost(bg, 2, hidden, "angry"))
	if lines, res := checkLines(t, s, false); len(lines) != 0 || res.Tally(engine.CheckReacted).Checked != 2 {
		t.Fatalf("a fresh keyspace: %v %+v", lines, res.Tally(engine.CheckReacted))
	}
	for _, post := range []engine.PostID{hidden, spare} {
		key, field := s.PostField(post)
		rec, err := r.rdb.HGet(bg, key, field).Result()
		must(t, err)
		must(t, r.rdb.HSet(bg, key, field, string([]byte{rec[0] ^ redisstore.ReactedBit})+rec[1:]).Err())
	}
	if got := r.page(2, hidden).ViewerReaction; got != "" {
		t.Fatalf("the page read a hash its record does not mark: %q", got)
	}
	want := []string{fmt.Sprintf("post.reacted %d 0->1", hidden), fmt.Sprintf("post.reacted %d 1->0", spare)}
	slices.Sort(want)
	for _, repair := range []bool{false, true} {
		lines, _ := checkLines(t, s, repair)
		if len(lines) != 2 || !strings.HasPrefix(lines[0], want[0]+fmt.Sprintf(" repaired=%v", repair)) || !strings.HasPrefix(lines[1], want[1]+fmt.Sprintf(" repaired=%v", repair)) {
			t.Fatalf("check (repair %v) found:\n%s\nwant:\n%s", repair, strings.Join(lines, "\n"), strings.Join(want, "\n"))
		}
	}
	if lines, _ := checkLines(t, s, false); len(lines) != 0 {
		t.Fatalf("drifts after repair:\n%s", strings.Join(lines, "\n"))
	}
	r.want(hidden, true, 2, "angry", "repaired")
	r.want(spare, false, 2, "", "repaired")
}
