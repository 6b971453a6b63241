package embedded

import (
	"bufio"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/enginetest"
	"github.com/tally-dev/tally/engine/snowflake"
)

// The lifecycle's kill -9 test: as TestKill9DuringSnapshots, a child
// process (this test binary, re-run with TALLY_KILL9L_DIR set) works on a
// data directory while snapshots run every few milliseconds, and the
// parent kills it at random moments. The child runs a burst of erasures
// (each of a user with likes, favorites, comments and follows in both
// directions enough for several steps), post and repost deletes and
// comment deletes, printing each before it tries it and after it is
// acknowledged; the next child retries the last one tried and goes on.
// At the end the directory must show every acknowledged operation, each
// applied once: every count equal to what it counts, an erasure either
// complete or not begun, and `tally check` clean.

const (
	lifePosts   = 1200
	lifeAuthors = 30
	lifeErased  = 6 // users erased by the burst
	lifeStable  = 4 // likers never erased
	lifeFans    = 300
	lifeReposts = 10
)

func lifeEraseUser(k int) engine.UserID  { return engine.UserID(1_000_000 + k) }
func lifeStableUser(k int) engine.UserID { return engine.UserID(100 + k) }
func lifeFan(k int) engine.UserID        { return engine.UserID(5000 + k) }
func lifeReposter(i int) engine.UserID   { return engine.UserID(40 + i) }

// lifeWorldKill9 is the directory the children start from, and the ids
// they need (written beside it, not in it).
type lifeWorldKill9 struct {
	posts    []engine.PostID // posts[i] by author 1 + i%lifeAuthors
	reposts  []engine.PostID // reposts[i] of posts[i] by lifeReposter(i)
	comments []engine.CommentID
	// commentPost[i] is the post comments[i] is on.
	commentPost []engine.PostID
}

func (w *lifeWorldKill9) save(t *testing.T, path string) {
	var b strings.Builder
	line := func(name string, ids []uint64) {
		b.WriteString(name)
		for _, id := range ids {
			b.WriteString(" " + strconv.FormatUint(id, 10))
		}
		b.WriteString("\n")
	}
	line("posts", idsOf(w.posts))
	line("reposts", idsOf(w.reposts))
	line("comments", idsOf(w.comments))
	line("commentPost", idsOf(w.commentPost))
	ok(t, os.WriteFile(path, []byte(b.String()), 0o644))
}

func loadLifeWorld(path string) (*lifeWorldKill9, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	w := &lifeWorldKill9{}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(l)
		var xs []uint64
		for _, s := range f[1:] {
			x, err := strconv.ParseUint(s, 10, 64)
			if err != nil {
				return nil, err
			}
			xs = append(xs, x)
		}
		switch f[0] {
		case "posts":
			w.posts = typed[engine.PostID](xs)
		case "reposts":
			w.reposts = typed[engine.PostID](xs)
		case "comments":
			w.comments = typed[engine.CommentID](xs)
		case "commentPost":
			w.commentPost = typed[engine.PostID](xs)
		}
	}
	return w, nil
}

func idsOf[T ~uint64](xs []T) []uint64 {
	out := make([]uint64, len(xs))
	for i, x := range xs {
		out[i] = uint64(x)
	}
	return out
}

func typed[T ~uint64](xs []uint64) []T {
	out := make([]T, len(xs))
	for i, x := range xs {
		out[i] = T(x)
	}
	return out
}

// lifeOp is one operation of the burst.
type lifeOp struct {
	kind string // erase, delete-post, delete-repost, delete-comment
	i    int
}

// lifeBurst is the burst, in order: each erasure followed by a few
// deletes of each kind.
func lifeBurst() []lifeOp {
	var out []lifeOp
	for k := range lifeErased {
		out = append(out, lifeOp{"erase", k})
		for j := range 20 {
			out = append(out, lifeOp{"delete-post", lifePosts - 1 - (k*20 + j)})
		}
		for j := range lifeReposts / lifeErased {
			out = append(out, lifeOp{"delete-repost", k*(lifeReposts/lifeErased) + j})
		}
		for j := range 3 {
			out = append(out, lifeOp{"delete-comment", k*3 + j})
		}
	}
	return out
}

func (w *lifeWorldKill9) do(e *Engine, op lifeOp) error {
	admin := engine.Actor{User: 1, Privileged: true}
	switch op.kind {
	case "erase":
		return e.EraseUser(bg, lifeEraseUser(op.i))
	case "delete-post":
		return e.DeletePost(bg, admin, w.posts[op.i])
	case "delete-repost":
		return e.DeletePost(bg, engine.Actor{User: lifeReposter(op.i)}, w.reposts[op.i])
	case "delete-comment":
		return e.DeleteComment(bg, admin, w.commentPost[op.i], w.comments[op.i])
	}
	return fmt.Errorf("unknown op %q", op.kind)
}

// TestKill9LifecycleChild is the child; it does nothing in a normal run.
func TestKill9LifecycleChild(t *testing.T) {
	dir := os.Getenv("TALLY_KILL9L_DIR")
	if dir == "" {
		t.Skip("run by TestKill9Lifecycle")
	}
	out := bufio.NewWriter(os.Stdout)
	say := func(format string, args ...any) {
		fmt.Fprintf(out, format+"\n", args...)
		out.Flush()
	}
	w, err := loadLifeWorld(os.Getenv("TALLY_KILL9L_WORLD"))
	if err != nil {
		say("error %v", err)
		os.Exit(3)
	}
	opts := kill9Opts(dir)
	// Warnings go to stderr, which the parent shows when it fails.
	opts.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	e, err := Open(opts)
	if err != nil {
		say("open-error %v", err)
		os.Exit(3)
	}
	if n := e.Stats().Erasures; n > 0 {
		say("resumed %d", n)
	}
	// Steps a little apart, so that kills land between them too.
	setStepGate(e, func() { time.Sleep(time.Millisecond) })
	from, _ := strconv.Atoi(os.Getenv("TALLY_KILL9L_FROM"))
	burst := lifeBurst()
	for i := from; i < len(burst); i++ {
		say("try %d", i)
		if err := w.do(e, burst[i]); err != nil {
			say("error %v", err)
			os.Exit(3)
		}
		say("ack %d", i)
		// The erasure goes on in steps while the burst goes on; now and
		// then the child waits a little so that kills land mid-step too.
		if rand.IntN(4) == 0 {
			time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond)
		}
	}
	if os.Getenv("TALLY_KILL9L_FINAL") != "" {
		waitErasures(t, e)
		ok(t, e.Close())
		say("done")
		return
	}
	select {} // until killed
}

func TestKill9Lifecycle(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	dir := t.TempDir()
	worldFile := filepath.Join(t.TempDir(), "world")
	w := buildLifeWorld(t, dir)
	w.save(t, worldFile)

	burst := lifeBurst()
	tried, acked, resumed := -1, -1, 0
	run := func(final bool, killAfter time.Duration) {
		// The last operation tried and not acknowledged is tried again: a
		// repeat changes nothing, whether or not it was applied.
		env := []string{"TALLY_KILL9L_DIR=" + dir, "TALLY_KILL9L_WORLD=" + worldFile,
			"TALLY_KILL9L_FROM=" + strconv.Itoa(acked+1)}
		if final {
			env = append(env, "TALLY_KILL9L_FINAL=1")
		}
		runKill9Child(t, "TestKill9LifecycleChild", env, final, killAfter, func(_ string, f []string) {
			switch {
			case len(f) == 2 && (f[0] == "try" || f[0] == "ack"):
				i, _ := strconv.Atoi(f[1])
				if f[0] == "try" {
					tried = max(tried, i)
				} else {
					acked = max(acked, i)
				}
			case len(f) == 2 && f[0] == "resumed":
				resumed++
			}
		})
	}
	defer func() { t.Logf("%d restarts resumed an erasure the kill interrupted", resumed) }()
	for r := 0; r < 16 && acked < len(burst)-1; r++ {
		run(false, time.Duration(20+rand.IntN(120))*time.Millisecond)
		t.Logf("round %d: %d of %d operations acknowledged, %d snapshots on disk", r, acked+1, len(burst), len(snapshots(t, dir)))
	}
	run(true, 0)
	if acked != len(burst)-1 {
		t.Fatalf("the final child acknowledged %d of %d operations", acked+1, len(burst))
	}
	if tried != acked {
		t.Fatalf("operation %d tried after the last acknowledged one", tried)
	}

	e := openE(t, durableOpts(dir, nil))
	defer e.Close()
	w.verify(t, e, burst)
	enginetest.CheckClean(t, e)
}

// buildLifeWorld writes the directory the burst starts from.
func buildLifeWorld(t *testing.T, dir string) *lifeWorldKill9 {
	e := openE(t, durableOpts(dir, nil))
	w := &lifeWorldKill9{}
	for i := range lifePosts {
		p, err := e.CreatePost(bg, engine.UserID(1+i%lifeAuthors), 0, "")
		ok(t, err)
		w.posts = append(w.posts, p)
	}
	for i := range lifeReposts {
		r, err := e.Repost(bg, lifeReposter(i), w.posts[i], nil, "")
		ok(t, err)
		w.reposts = append(w.reposts, r)
	}
	likers := []engine.UserID{}
	for k := range lifeErased {
		likers = append(likers, lifeEraseUser(k))
	}
	for k := range lifeStable {
		likers = append(likers, lifeStableUser(k))
	}
	for _, u := range likers {
		for i, p := range w.posts {
			ok(t, e.Like(bg, u, p))
			if i%2 == 0 {
				ok(t, e.Favorite(bg, u, p))
			}
		}
		for a := range lifeAuthors {
			ok(t, e.Follow(bg, u, engine.UserID(1+a)))
		}
	}
	now := time.Now().UnixMilli()
	for k := range lifeErased {
		u := lifeEraseUser(k)
		for f := range lifeFans {
			ok(t, e.Follow(bg, lifeFan(f), u))
		}
		// Comments with ids: the burst deletes some, the erasure takes
		// their writer records.
		for j := range 4 {
			c := engine.CommentID(snowflake.Make(now, 11, uint64(k*4+j)))
			p := w.posts[k*4+j]
			ok(t, e.Comment(bg, u, p, c, nil, ""))
			if j < 3 {
				w.comments = append(w.comments, c)
				w.commentPost = append(w.commentPost, p)
			}
		}
	}
	ok(t, e.Close())
	return w
}

// verify checks the directory after the burst: every operation applied,
// once.
func (w *lifeWorldKill9) verify(t *testing.T, e *Engine, burst []lifeOp) {
	t.Helper()
	deleted := map[engine.PostID]bool{}
	for _, op := range burst {
		switch op.kind {
		case "delete-post":
			deleted[w.posts[op.i]] = true
		case "delete-repost":
			deleted[w.reposts[op.i]] = true
		}
	}
	var infos []engine.PostInfo
	var counts []engine.Counts
	for lo := 0; lo < len(w.posts); lo += engine.MaxIDsPerCall {
		ps := w.posts[lo:min(lo+engine.MaxIDsPerCall, len(w.posts))]
		in, err := e.Posts(bg, ps)
		ok(t, err)
		cs, err := e.Counts(bg, ps)
		ok(t, err)
		infos, counts = append(infos, in...), append(counts, cs...)
	}
	postsBy := map[engine.UserID]int64{}
	for i, p := range w.posts {
		if infos[i].Exists == deleted[p] {
			t.Fatalf("post %d: exists %v, deleted by the burst %v", i, infos[i].Exists, deleted[p])
		}
		if deleted[p] {
			continue
		}
		postsBy[infos[i].Author]++
		// Only the stable likers are left: every erased user's like and
		// favorite went, each once.
		want := engine.Counts{Likes: lifeStable, Views: counts[i].Views}
		if i%2 == 0 {
			want.Favorites = lifeStable
		}
		if i < lifeReposts && !deleted[w.reposts[i]] {
			want.Reposts = 1
		}
		// Each erased user wrote 4 comments with ids on posts 4k..4k+3;
		// the burst deletes the first 3, and erasing the writer leaves
		// the comments counted.
		if i < lifeErased*4 && i%4 == 3 {
			want.Comments = 1
		}
		if counts[i] != want {
			t.Fatalf("post %d: counts %+v, want %+v", i, counts[i], want)
		}
	}
	for k := range lifeErased {
		u := lifeEraseUser(k)
		for lo := 0; lo < len(w.posts); lo += engine.MaxIDsPerCall {
			liked, err := e.Liked(bg, u, w.posts[lo:min(lo+engine.MaxIDsPerCall, len(w.posts))])
			ok(t, err)
			for i, l := range liked {
				if l {
					t.Fatalf("erased user %d still likes post %d", u, lo+i)
				}
			}
		}
		uc, err := e.UserCounts(bg, []engine.UserID{u})
		ok(t, err)
		if uc[0] != (engine.UserCounts{}) {
			t.Fatalf("erased user %d: counts %+v", u, uc[0])
		}
		fs, err := e.Followees(bg, u)
		ok(t, err)
		if len(fs) != 0 {
			t.Fatalf("erased user %d still follows %v", u, fs)
		}
	}
	for a := range lifeAuthors {
		u := engine.UserID(1 + a)
		uc, err := e.UserCounts(bg, []engine.UserID{u})
		ok(t, err)
		if want := (engine.UserCounts{Posts: postsBy[u], Followers: lifeStable}); uc[0] != want {
			t.Fatalf("author %d: %+v, want %+v", u, uc[0], want)
		}
	}
	for f := range lifeFans {
		uc, err := e.UserCounts(bg, []engine.UserID{lifeFan(f)})
		ok(t, err)
		if uc[0].Following != 0 {
			t.Fatalf("fan %d still follows %d users", f, uc[0].Following)
		}
	}
	for i, r := range w.reposts {
		uc, err := e.UserCounts(bg, []engine.UserID{lifeReposter(i)})
		ok(t, err)
		if want := int64(1) - b2i(deleted[r]); uc[0].Posts != want {
			t.Fatalf("reposter %d: %d posts, want %d", i, uc[0].Posts, want)
		}
	}
	if err := e.Like(bg, lifeStableUser(0), w.posts[lifePosts-1]); !errors.Is(err, engine.ErrNotFound) {
		t.Fatalf("a like of a deleted post: %v", err)
	}
}

// setStepGate has the eraser call gate before each step.
func setStepGate(e *Engine, gate func()) { e.stepGate.Store(&gate) }

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
