package redisstore_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/enginetest"
	"github.com/tally-dev/tally/engine/redisstore"
	"github.com/tally-dev/tally/engine/redisstore/redistest"
	"github.com/tally-dev/tally/engine/snowflake"
)

// TestIntentChild is not a test on its own: the crash tests re-execute
// the test binary with TALLY_INTENT_CHILD set, and this runs one
// operation (or one sweep) in that separate process against their Redis.
func TestIntentChild(t *testing.T) {
	mode := os.Getenv("TALLY_INTENT_CHILD")
	if mode == "" {
		t.Skip("run by the intent crash tests in a child process")
	}
	opts := redisstore.Options{
		Addrs: strings.Split(os.Getenv("TALLY_INTENT_ADDRS"), ","), KeyPrefix: os.Getenv("TALLY_INTENT_PREFIX"),
		SweepInterval: -1, IntentSweepInterval: -1, ReadTimeout: 5 * time.Second,
		Reactions: []string{"like", "love"},
	}
	arg := func(name string) uint64 {
		v, err := strconv.ParseUint(os.Getenv(name), 10, 64)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return v
	}
	if mode == "sweep" {
		// A later process: its clock is past the intents' grace period.
		opts.Now = func() time.Time { return time.Now().Add(time.Minute) }
	}
	s, err := redisstore.Open(bg, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	viewer := engine.UserID(arg("TALLY_INTENT_VIEWER"))
	switch mode {
	case "like":
		err = s.Like(bg, viewer, engine.PostID(arg("TALLY_INTENT_POST")))
	case "react":
		err = s.ReactToPost(bg, viewer, engine.PostID(arg("TALLY_INTENT_POST")), "love")
	case "comment":
		err = s.Comment(bg, viewer, engine.PostID(arg("TALLY_INTENT_POST")), 0, []engine.UserID{81, 82}, os.Getenv("TALLY_INTENT_KEY"))
	case "post":
		_, err = s.CreatePost(bg, viewer, 0, "")
	case "repost":
		_, err = s.Repost(bg, viewer, engine.PostID(arg("TALLY_INTENT_POST")), []engine.UserID{81}, "")
	case "message":
		_, err = s.SendMessage(bg, viewer, engine.GroupID(arg("TALLY_INTENT_GROUP")), "hi @82", []engine.UserID{82, 99}, "")
	case "import":
		err = s.Import(bg, importCrashRows(int64(arg("TALLY_INTENT_T0")), viewer))
	case "erase":
		err = s.EraseUser(bg, viewer)
	case "deletes":
		// A burst of deletes ("<post>:<comment id>:<post to delete>"):
		// a comment, then a post, every acknowledged one reported.
		for _, d := range strings.Split(os.Getenv("TALLY_INTENT_DELETES"), ",") {
			var post, cid, del uint64
			fmt.Sscanf(d, "%d:%d:%d", &post, &cid, &del)
			actor := engine.Actor{User: viewer, Privileged: true}
			if err = s.DeleteComment(bg, actor, engine.PostID(post), engine.CommentID(cid)); err != nil {
				break
			}
			fmt.Printf("deleted comment %d\n", cid)
			if err = s.DeletePost(bg, actor, engine.PostID(del)); err != nil {
				break
			}
			fmt.Printf("deleted post %d\n", del)
		}
	case "sweep":
		var n int
		n, err = s.SweepIntents(bg)
		fmt.Printf("finished %d intents\n", n)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// child runs TestIntentChild in a new process and returns its output and
// whether SIGKILL ended it.
func child(t *testing.T, addrs []string, prefix, mode string, env ...string) (string, bool) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestIntentChild$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), "TALLY_INTENT_CHILD="+mode, "TALLY_INTENT_ADDRS="+strings.Join(addrs, ","),
		"TALLY_INTENT_PREFIX="+prefix)
	cmd.Env = append(cmd.Env, env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
		return out.String(), true
	}
	if err != nil {
		t.Fatalf("child %s: %v\n%s", mode, err, out.String())
	}
	return out.String(), false
}

// TestIntentKill9 kills a process with SIGKILL between the first step
// of a like, a comment, a new post, a repost (the post's slot) and a
// message (the group's slot) and the next (the users' slots, the new
// post's, the message index), checks that the crash left exactly the first step
// applied, and that a fresh process's sweep finishes each operation
// exactly once: counts and badges exact, a second sweep changes nothing.
func TestIntentKill9(t *testing.T) {
	if !redistest.Available() {
		t.Skip("redis-server not installed")
	}
	addr, _ := redistest.StartSingle(t)
	runIntentKill9(t, []string{addr})
}

func TestIntentKill9Cluster(t *testing.T) {
	if !redistest.Available() {
		t.Skip("redis-server not installed")
	}
	c := redistest.StartCluster(t, 3, 0)
	runIntentKill9(t, c.Addrs())
}

func runIntentKill9(t *testing.T, addrs []string) {
	p := prefix()
	s := open(t, redisstore.Options{Addrs: addrs, KeyPrefix: p, IntentSweepInterval: -1})
	const author, liker, commenter, poster = 70, 71, 72, 73
	for _, u := range []engine.UserID{author, liker, commenter, poster, 81, 82, 83} {
		if _, err := s.Unread(bg, u); err != nil {
			t.Fatal(err)
		}
	}
	post, err := s.CreatePost(bg, author, 0, "")
	must(t, err)
	pid := strconv.FormatUint(uint64(post), 10)
	crash := func(mode, kind string, env ...string) {
		t.Helper()
		out, killed := child(t, addrs, p, mode, append(env, "TALLY_REDIS_CRASH_AFTER_STEP1="+kind)...)
		if !killed {
			t.Fatalf("%s: the child was not killed between the steps:\n%s", mode, out)
		}
	}
	unread := func(u engine.UserID) engine.Unread {
		t.Helper()
		n, err := s.Unread(bg, u)
		must(t, err)
		return n
	}
	counts := func() engine.Counts {
		t.Helper()
		c, err := s.Counts(bg, []engine.PostID{post})
		must(t, err)
		return c[0]
	}
	posts := func(u engine.UserID) int64 {
		t.Helper()
		c, err := s.UserCounts(bg, []engine.UserID{u})
		must(t, err)
		return c[0].Posts
	}

	crash("like", "like", "TALLY_INTENT_VIEWER="+strconv.Itoa(liker), "TALLY_INTENT_POST="+pid)
	// The author's own like leaves an intent too (the step does not know
	// the author is the liker; ops.ReactToPost decides that): its finish bumps
	// nobody.
	crash("like", "like", "TALLY_INTENT_VIEWER="+strconv.Itoa(author), "TALLY_INTENT_POST="+pid)
	crash("comment", "comment", "TALLY_INTENT_VIEWER="+strconv.Itoa(commenter), "TALLY_INTENT_POST="+pid)
	crash("post", "post", "TALLY_INTENT_VIEWER="+strconv.Itoa(poster))
	// A repost by poster mentioning 81; a message by author to a group of
	// author, 81, 82 and (left before the message) 83, mentioning 82 and
	// 99 (not a member).
	crash("repost", "repost", "TALLY_INTENT_VIEWER="+strconv.Itoa(poster), "TALLY_INTENT_POST="+pid)
	g, err := s.CreateGroup(bg, author, []engine.UserID{81, 82, 83})
	must(t, err)
	_, err = s.LeaveGroup(bg, 83, g)
	must(t, err)
	crash("message", "message", "TALLY_INTENT_VIEWER="+strconv.Itoa(author), "TALLY_INTENT_GROUP="+strconv.FormatUint(uint64(g), 10))

	// Exactly the first steps: counted, registered; no badge, no count.
	if c := counts(); c.Likes != 2 || c.Comments != 1 || c.Reposts != 1 {
		t.Fatalf("after the crashes: %+v, want 2 likes, 1 comment and 1 repost counted", c)
	}
	if n := unread(author); n.Likes != 0 || n.Comments != 0 {
		t.Fatalf("the author's badges moved before any sweep: %+v", n)
	}
	for _, u := range []engine.UserID{81, 82} {
		if n := unread(u); n.Mentions != 0 || n.Messages != 0 {
			t.Fatalf("user %d's badges moved before any sweep: %+v", u, n)
		}
	}
	if n := posts(poster); n != 0 {
		t.Fatalf("poster's count = %d before any sweep", n)
	}
	// A retried like changes nothing by itself (it finds itself counted).
	must(t, s.Like(bg, liker, post))
	if n := unread(author); n.Likes != 0 {
		t.Fatalf("a retried like bumped the badge: %+v", n)
	}
	// A live sweep leaves intents younger than the grace period alone.
	if n, err := s.SweepIntents(bg); err != nil || n != 0 {
		t.Fatalf("an immediate sweep finished %d intents (%v), want 0", n, err)
	}
	// A check sees the poster's post (and the repost, if its step that
	// registers the new post ran) registered and their count not yet
	// bumped, and leaves it to the intents: unsettled, not a drift that a
	// repair and the sweeper would both count.
	if lines, _ := checkLines(t, s, false); len(lines) != 1 ||
		!strings.HasPrefix(lines[0], fmt.Sprintf("user.posts %d 0->", poster)) || !strings.HasSuffix(lines[0], "repaired=false unsettled=true") {
		t.Fatalf("check with intents pending: %v", lines)
	}

	out, killed := child(t, addrs, p, "sweep", "TALLY_INTENT_VIEWER=0")
	if killed || !strings.Contains(out, "finished 6 intents") {
		t.Fatalf("the sweeping process:\n%s", out)
	}
	check := func() {
		t.Helper()
		if c := counts(); c.Likes != 2 || c.Comments != 1 {
			t.Fatalf("counts %+v, want 2 likes and 1 comment", c)
		}
		if n := unread(author); n.Likes != 1 || n.Comments != 1 {
			t.Fatalf("author's badges = %+v, want 1 like and 1 comment", n)
		}
		// 81: the comment's and the repost's mentions, one message;
		// 82: the comment's and the message's mentions, one message;
		// 83 left before the message: nothing.
		want := map[engine.UserID]engine.Unread{81: {Mentions: 2, Messages: 1}, 82: {Mentions: 2, Messages: 1}, 83: {}}
		for u, w := range want {
			if n := unread(u); n.Mentions != w.Mentions || n.Messages != w.Messages {
				t.Fatalf("user %d: %+v, want %d mentions and %d messages", u, n, w.Mentions, w.Messages)
			}
		}
		if n := posts(poster); n != 2 {
			t.Fatalf("poster's count = %d, want 2 (a post and a repost)", n)
		}
		if c := counts(); c.Reposts != 1 {
			t.Fatalf("reposts = %d, want 1", c.Reposts)
		}
	}
	check()
	out, _ = child(t, addrs, p, "sweep", "TALLY_INTENT_VIEWER=0")
	if !strings.Contains(out, "finished 0 intents") {
		t.Fatalf("a second sweep:\n%s", out)
	}
	check()

	// With an idempotency key, the client's retry and the sweeper agree
	// on the operation: whichever comes first applies, the other nothing.
	crash("comment", "comment", "TALLY_INTENT_VIEWER="+strconv.Itoa(commenter), "TALLY_INTENT_POST="+pid, "TALLY_INTENT_KEY=k1")
	must(t, s.Comment(bg, commenter, post, 0, []engine.UserID{81, 82}, "k1"))
	out, _ = child(t, addrs, p, "sweep", "TALLY_INTENT_VIEWER=0")
	// The retry's own finish deletes the intent when it recorded the same
	// value (the crash and the retry fell in one millisecond); otherwise
	// the sweeper finishes it, and its markers make that change nothing.
	if !strings.Contains(out, "finished 1 intents") && !strings.Contains(out, "finished 0 intents") {
		t.Fatalf("sweep after a retried keyed comment:\n%s", out)
	}
	if c := counts(); c.Comments != 2 {
		t.Fatalf("comments = %d, want 2", c.Comments)
	}
	if n := unread(author); n.Comments != 2 {
		t.Fatalf("author's comments = %d, want 2", n.Comments)
	}
	if n := unread(81); n.Mentions != 3 {
		t.Fatalf("mentions = %d, want 3", n.Mentions)
	}

	// A first reaction of another kind killed between its steps: the love
	// is counted with its step, the author's badge by the sweeper, once;
	// a switch to like after it moves the count and bumps nothing.
	const reactor = 74
	crash("react", "like", "TALLY_INTENT_VIEWER="+strconv.Itoa(reactor), "TALLY_INTENT_POST="+pid)
	kinds := open(t, redisstore.Options{Addrs: addrs, KeyPrefix: p, IntentSweepInterval: -1, Reactions: []string{"like", "love"}})
	reactions := func() string {
		t.Helper()
		out := make([]engine.PostView, 1)
		must(t, kinds.Page(bg, reactor, []engine.PostID{post}, engine.PageWant{Reactions: true, ViewerReaction: true}, out))
		return fmt.Sprintf("like=%d love=%d viewer=%s", out[0].Reactions.Count[0], out[0].Reactions.Count[1], out[0].ViewerReaction)
	}
	if got := reactions(); got != "like=2 love=1 viewer=love" || unread(author).Likes != 1 {
		t.Fatalf("after the crashed reaction: %s, author's likes %d", got, unread(author).Likes)
	}
	must(t, kinds.ReactToPost(bg, reactor, post, "love")) // a retry finds itself counted
	if out, _ := child(t, addrs, p, "sweep", "TALLY_INTENT_VIEWER=0"); !strings.Contains(out, "finished 1 intents") {
		t.Fatalf("sweep after a crashed reaction:\n%s", out)
	}
	if n := unread(author); n.Likes != 2 {
		t.Fatalf("author's likes = %d after the reaction's sweep, want 2", n.Likes)
	}
	must(t, kinds.Like(bg, reactor, post))
	if got := reactions(); got != "like=3 love=0 viewer=like" || unread(author).Likes != 2 {
		t.Fatalf("after the switch: %s, author's likes %d", got, unread(author).Likes)
	}
	enginetest.CheckClean(t, kinds)
}

// TestIntentSweepRacesLiveOperations: a sweeper whose clock is past every
// intent's grace period sweeps in a loop while likes, comments and
// messages run: whichever finishes an operation, its effects apply once.
func TestIntentSweepRacesLiveOperations(t *testing.T) {
	if !redistest.Available() {
		t.Skip("redis-server not installed")
	}
	addr, _ := redistest.StartSingle(t)
	p := prefix()
	live := open(t, redisstore.Options{Addrs: []string{addr}, KeyPrefix: p, IntentSweepInterval: -1})
	sweeper := open(t, redisstore.Options{Addrs: []string{addr}, KeyPrefix: p, IntentSweepInterval: -1,
		Now: func() time.Time { return time.Now().Add(time.Minute) }})
	const author, mentioned = 1, 2
	for _, u := range []engine.UserID{author, mentioned} {
		if _, err := live.Unread(bg, u); err != nil {
			t.Fatal(err)
		}
	}
	post, err := live.CreatePost(bg, author, 0, "")
	must(t, err)
	g, err := live.CreateGroup(bg, author, []engine.UserID{mentioned})
	must(t, err)
	// Keys that hold client text and end like an intent hash's name are
	// not taken for one (they are strings: a sweep over them would fail).
	_, err = live.PublishNotification(bg, "t", "b", "k}I")
	must(t, err)
	_, err = live.CreatePost(bg, 9, 0, "k}I")
	must(t, err)
	if _, err := sweeper.SweepIntents(bg); err != nil {
		t.Fatalf("a sweep next to idempotency records named like intents: %v", err)
	}
	stop := make(chan struct{})
	swept := make(chan int)
	go func() {
		total := 0
		for {
			select {
			case <-stop:
				swept <- total
				return
			default:
			}
			n, err := sweeper.SweepIntents(bg)
			if err != nil {
				t.Error(err)
			}
			total += n
		}
	}()
	const n = 300
	errs := make(chan error, 3)
	go func() {
		for i := range n {
			if err := live.Like(bg, engine.UserID(100+i), post); err != nil {
				errs <- err
				return
			}
		}
		errs <- nil
	}()
	go func() {
		for i := range n {
			if err := live.Comment(bg, engine.UserID(1000+i), post, 0, []engine.UserID{mentioned}, ""); err != nil {
				errs <- err
				return
			}
		}
		errs <- nil
	}()
	go func() {
		for range n {
			if _, err := live.SendMessage(bg, author, g, "x", []engine.UserID{mentioned}, ""); err != nil {
				errs <- err
				return
			}
		}
		errs <- nil
	}()
	for range 3 {
		must(t, <-errs)
	}
	close(stop)
	total := <-swept
	if _, err := sweeper.SweepIntents(bg); err != nil {
		t.Fatal(err)
	}
	a, err := live.Unread(bg, author)
	must(t, err)
	m, err := live.Unread(bg, mentioned)
	must(t, err)
	if a.Likes != n || a.Comments != n || m.Mentions != 2*n || m.Messages != n {
		t.Fatalf("author %+v, mentioned %+v; want %d likes and comments, %d mentions and %d messages (sweeps finished %d)",
			a, m, n, 2*n, n, total)
	}
	t.Logf("the racing sweeper finished %d of %d operations", total, 3*n)
}

// importCrashRows are the rows the import crash test imports: 12 posts 5 s
// apart (over several buckets), by authors first, first+1 and first+2 in
// turn, a row repeating the first post, and a post with counts and no
// author.
func importCrashRows(t0 int64, first engine.UserID) []engine.ImportRow {
	var rows []engine.ImportRow
	for i := range 12 {
		rows = append(rows, engine.ImportRow{Post: engine.PostID(snowflake.Make(t0+int64(i)*5000, 1, 0)),
			Author: first + engine.UserID(i%3), Counts: engine.Counts{Likes: int64(i)}})
	}
	rows = append(rows, rows[0],
		engine.ImportRow{Post: engine.PostID(snowflake.Make(t0+99_000, 1, 0)), Counts: engine.Counts{Views: 5}})
	return rows
}

// TestImportKill9 kills an import between its two steps (the posts'
// records, then their authors' post counts), with its intent pending (the
// records written, not yet recorded as written) and exact: the posts are
// registered and no count moved; a rerun of the import cannot mend that
// (it finds the posts known), but the intent can: a later process's sweep
// brings every author's count to what a whole import gives, once.
func TestImportKill9(t *testing.T) {
	if !redistest.Available() {
		t.Skip("redis-server not installed")
	}
	addr, _ := redistest.StartSingle(t)
	runImportKill9(t, []string{addr})
}

func TestImportKill9Cluster(t *testing.T) {
	if !redistest.Available() {
		t.Skip("redis-server not installed")
	}
	c := redistest.StartCluster(t, 3, 0)
	runImportKill9(t, c.Addrs())
}

func runImportKill9(t *testing.T, addrs []string) {
	p := prefix()
	s := open(t, redisstore.Options{Addrs: addrs, KeyPrefix: p, IntentSweepInterval: -1})
	for i, kind := range []string{"import", "import-exact"} {
		t.Run(kind, func(t *testing.T) {
			first := engine.UserID(91 + 3*i)
			importKill9(t, addrs, p, s, kind, time.Now().Add(-time.Duration(i+1)*time.Hour).UnixMilli(), first)
		})
	}
}

func importKill9(t *testing.T, addrs []string, p string, s *redisstore.Store, kind string, t0 int64, first engine.UserID) {
	rows := importCrashRows(t0, first)
	authors := []engine.UserID{first, first + 1, first + 2}
	postCounts := func() []int64 {
		t.Helper()
		uc, err := s.UserCounts(bg, authors)
		must(t, err)
		return []int64{uc[0].Posts, uc[1].Posts, uc[2].Posts}
	}
	out, killed := child(t, addrs, p, "import", "TALLY_INTENT_VIEWER="+strconv.FormatUint(uint64(first), 10),
		"TALLY_INTENT_T0="+strconv.FormatInt(t0, 10), "TALLY_REDIS_CRASH_AFTER_STEP1="+kind)
	if !killed {
		t.Fatalf("the importing child was not killed between the steps:\n%s", out)
	}
	infos, err := s.Posts(bg, []engine.PostID{rows[0].Post, rows[11].Post})
	must(t, err)
	if !infos[0].Exists || !infos[1].Exists || infos[1].Author != first+2 {
		t.Fatalf("the first step did not register the posts: %+v", infos)
	}
	if got := postCounts(); got[0] != 0 || got[1] != 0 || got[2] != 0 {
		t.Fatalf("post counts %v moved before any sweep", got)
	}
	must(t, s.Import(bg, rows))
	if got := postCounts(); got[0] != 0 || got[1] != 0 || got[2] != 0 {
		t.Fatalf("a rerun moved post counts to %v: it finds the posts known", got)
	}
	if n, err := s.SweepIntents(bg); err != nil || n != 0 {
		t.Fatalf("an immediate sweep finished %d intents (%v), want 0", n, err)
	}
	out, killed = child(t, addrs, p, "sweep", "TALLY_INTENT_VIEWER=0")
	if killed || !strings.Contains(out, "finished 1 intents") {
		t.Fatalf("the sweeping process:\n%s", out)
	}
	if got := postCounts(); got[0] != 4 || got[1] != 4 || got[2] != 4 {
		t.Fatalf("post counts after the sweep %v, want 4 each", got)
	}
	out, _ = child(t, addrs, p, "sweep", "TALLY_INTENT_VIEWER=0")
	if !strings.Contains(out, "finished 0 intents") {
		t.Fatalf("a second sweep:\n%s", out)
	}
	if got := postCounts(); got[0] != 4 || got[1] != 4 || got[2] != 4 {
		t.Fatalf("post counts after a second sweep %v, want 4 each", got)
	}
	enginetest.CheckClean(t, s)
}
