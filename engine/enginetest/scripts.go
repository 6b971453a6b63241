package enginetest

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/snowflake"
)

// The rule scripts in testdata/ state API.md's Semantics as operations and
// the answers expected after "----" (cockroachdb/datadriven's format).
// Every file runs on a fresh store of each backend, with a fake clock at
// ClockStart and the default cursor TTL. `go test -rewrite` rewrites the
// expected answers from the backend run (review the diff).
//
// Names: users are numbers; posts, groups, messages and notifications get
// the names the script gives them with as=NAME when made; the name
// "unknown" is an id no store made. Lists are key=(a,b,c).
//
//	post user=1 as=p1 [id=client|bad|NAME] [key=K]   create a post
//	post user=1 n=N                                   create N posts
//	import post=NAME [author=U] [likes=N] [comments=N] [reposts=N] [views=N] [favorites=N] [KIND=N]...
//	                                                  KIND: a reaction kind but like (the
//	                                                  store's ids, ImportKinds); an id of
//	                                                  none with kind-id=K count=N
//	exists NAME...                                    registry entries
//	counts NAME...                                    post counters
//	like|unlike|favorite|unfavorite user=U post=NAME
//	flags user=U post=NAME                            viewerHasLiked / -Favorited
//	react user=U post=NAME kind=K                     reactToPost (kinds: ScriptKinds)
//	unreact user=U post=NAME                          unreactToPost
//	reactions user=U NAME...                          Post.reactions and viewerReaction
//	comment user=U post=NAME [cid=NAME|bad] [mentions=(U,...)] [key=K]
//	                                                  cid names an app comment id,
//	                                                  made on first use
//	delete-comment user=U post=NAME cid=NAME [privileged]
//	delete-post user=U post=NAME [privileged]        privileged: a service or an admin
//	erase user=U                                      eraseUser
//	repost user=U post=NAME as=NAME [mentions=(...)] [key=K]
//	views NAME...
//	follow|unfollow user=U target=U
//	profile user=U                                    postCount, followers, following
//	unread user=U
//	mark-read user=U kind=LIKES
//	click user=U / push
//	publish title=T [body=B] [key=K] as=NAME
//	notifications [first=N] [after=NAME]
//	group user=U members=(U,...) as=NAME             createGroup
//	add-members user=U group=NAME users=(U,...)
//	leave user=U group=NAME                           the group after: memberCount and the first page
//	members user=U group=NAME
//	group-info user=U group=NAME                      memberCount and the first page
//	members-page user=U group=NAME [first=N] [after=U]
//	receipt-page user=U msg=NAME list=readers|unreaders [first=N] [after=U]
//	send user=U group=NAME text=T [mentions=(...)] [key=K] as=NAME
//	message user=U msg=NAME
//	read-messages user=U msgs=(NAME,...)
//	receipts user=U msg=NAME [limit=N]
//	advance DURATION                                  e.g. 31d, 25h, 1s
//	restart                                           reopen a durable store (else nothing)

func testdataDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "testdata")
}

// RunScripts runs every rule script on b.
func RunScripts(t *testing.T, b Backend) {
	runScripts(t, b, func(t *testing.T, cfg Config) (compared, func() (engine.Store, error)) {
		return b.Open(t, cfg)
	})
}

func runScripts(t *testing.T, b Backend, open func(t *testing.T, cfg Config) (compared, func() (engine.Store, error))) {
	datadriven.Walk(t, testdataDir(), func(t *testing.T, path string) {
		clk := NewClock()
		s, restart := open(t, Config{Now: clk.Now, Reactions: ScriptKinds})
		sc := &script{s: s, restart: restart, clk: clk, names: map[string]uint64{}, byID: map[uint64]string{}}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			return sc.run(t, d)
		})
	})
}

type script struct {
	s       compared
	restart func() (engine.Store, error)
	clk     *Clock
	names   map[string]uint64
	byID    map[uint64]string
	seq     uint64
}

func (sc *script) name(id uint64) string {
	if n, ok := sc.byID[id]; ok {
		return n
	}
	return "#" + strconv.FormatUint(id, 10)
}

// bind gives a new id its name; an id already named answers that name.
func (sc *script) bind(as string, id uint64) string {
	if n, ok := sc.byID[id]; ok {
		return n
	}
	if as == "" {
		as = "#" + strconv.FormatUint(id, 10)
	}
	sc.names[as], sc.byID[id] = id, as
	return as
}

// commentID is the comment id named by cid (0: none), made the first time
// the name is used: a snowflake of the clock's time, as an app would make
// it. cid=bad is no snowflake of a plausible time.
func (sc *script) commentID(t *testing.T, d *datadriven.TestData) engine.CommentID {
	name := str(d, "cid")
	switch name {
	case "":
		return 0
	case "bad":
		return 12345
	}
	if id, ok := sc.names[name]; ok {
		return engine.CommentID(id)
	}
	sc.seq++
	id := snowflake.Make(sc.clk.Now().UnixMilli(), 999, sc.seq)
	sc.bind(name, id)
	return engine.CommentID(id)
}

func (sc *script) unknown() uint64 {
	sc.seq++
	return snowflake.Make(sc.clk.Now().UnixMilli(), 1001, sc.seq)
}

func (sc *script) id(t *testing.T, name string) uint64 {
	if name == "unknown" {
		return sc.unknown()
	}
	id, ok := sc.names[name]
	if !ok {
		t.Fatalf("no %q named yet", name)
	}
	return id
}

func str(d *datadriven.TestData, key string) string {
	if a, ok := d.Arg(key); ok && len(a.Vals) > 0 {
		return a.Vals[0]
	}
	return ""
}

func num(t *testing.T, d *datadriven.TestData, key string, def int64) int64 {
	s := str(d, key)
	if s == "" {
		return def
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatalf("%s=%q: %v", key, s, err)
	}
	return n
}

func userArg(t *testing.T, d *datadriven.TestData, key string) engine.UserID {
	return engine.UserID(num(t, d, key, 0))
}

func userList(t *testing.T, d *datadriven.TestData, key string) []engine.UserID {
	a, _ := d.Arg(key)
	out := []engine.UserID{}
	for _, v := range a.Vals {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("%s: %q: %v", key, v, err)
		}
		out = append(out, engine.UserID(n))
	}
	return out
}

func (sc *script) idList(t *testing.T, d *datadriven.TestData, key string) []uint64 {
	a, _ := d.Arg(key)
	out := []uint64{}
	for _, v := range a.Vals {
		out = append(out, sc.id(t, v))
	}
	return out
}

// bare lists the arguments given without a value (views p1 p2).
func (sc *script) bare(t *testing.T, d *datadriven.TestData) []uint64 {
	var out []uint64
	for _, a := range d.CmdArgs {
		if len(a.Vals) == 0 {
			out = append(out, sc.id(t, a.Key))
		}
	}
	return out
}

func result(err error) string {
	if err != nil {
		return errClass(err)
	}
	return "ok"
}

func convert[T ~uint64](ids []uint64) []T {
	out := make([]T, len(ids))
	for i, id := range ids {
		out[i] = T(id)
	}
	return out
}

func userNames(us []engine.UserID) string {
	s := make([]string, len(us))
	for i, u := range us {
		s[i] = strconv.FormatUint(uint64(u), 10)
	}
	if len(s) == 0 {
		return "(none)"
	}
	return strings.Join(s, " ")
}

// parseDuration accepts Go durations and a "d" suffix for days.
func parseDuration(t *testing.T, s string) time.Duration {
	if n, ok := strings.CutSuffix(s, "d"); ok {
		days, err := strconv.Atoi(n)
		if err != nil {
			t.Fatalf("duration %q: %v", s, err)
		}
		return time.Duration(days) * 24 * time.Hour
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		t.Fatalf("duration %q: %v", s, err)
	}
	return d
}

func (sc *script) run(t *testing.T, d *datadriven.TestData) string {
	// Every command happens at its own millisecond, as requests do.
	sc.clk.Advance(time.Millisecond)
	s := sc.s
	u := userArg(t, d, "user")
	switch d.Cmd {
	case "advance":
		if len(d.CmdArgs) != 1 {
			t.Fatal("advance DURATION")
		}
		sc.clk.Advance(parseDuration(t, d.CmdArgs[0].Key))
		return sc.clk.Now().Format(time.RFC3339)
	case "restart":
		if sc.restart == nil {
			return "ok"
		}
		next, err := sc.restart()
		if err != nil {
			t.Fatalf("restart: %v", err)
		}
		sc.s = next
		return "ok"
	case "post":
		if n := num(t, d, "n", 0); n > 0 {
			for range n {
				if _, err := s.CreatePost(ctx, u, 0, ""); err != nil {
					return errClass(err)
				}
			}
			return fmt.Sprintf("%d posts", n)
		}
		var id uint64
		switch v := str(d, "id"); v {
		case "":
		case "client":
			sc.seq++
			id = snowflake.Make(sc.clk.Now().UnixMilli(), 1000, sc.seq)
		case "bad":
			id = 12345
		default:
			id = sc.id(t, v)
		}
		p, err := s.CreatePost(ctx, u, engine.PostID(id), str(d, "key"))
		if err != nil {
			return errClass(err)
		}
		return sc.bind(str(d, "as"), uint64(p))
	case "import":
		name := str(d, "post")
		id, ok := sc.names[name]
		if !ok {
			id = snowflake.Make(sc.clk.Now().Add(-time.Hour).UnixMilli(), 1002, sc.seq)
			sc.seq++
		}
		row := engine.ImportRow{Post: engine.PostID(id), Author: userArg(t, d, "author"), Counts: engine.Counts{
			Likes: num(t, d, "likes", 0), Comments: num(t, d, "comments", 0), Reposts: num(t, d, "reposts", 0),
			Views: num(t, d, "views", 0), Favorites: num(t, d, "favorites", 0)}}
		im, ok := s.(engine.Importer)
		if !ok {
			t.Fatal("the backend has no Import")
		}
		kinds := im.ImportKinds()
		for _, name := range ScriptKinds {
			if v := num(t, d, name, 0); v != 0 && name != "like" {
				row.Reactions[kinds.ID(name)-2] = v
			}
		}
		if k := num(t, d, "kind-id", 0); k != 0 {
			row.Reactions[k-2] = num(t, d, "count", 0)
		}
		if err := im.Import(ctx, []engine.ImportRow{row}); err != nil {
			return errClass(err)
		}
		sc.bind(name, id)
		return "ok"
	case "exists":
		ids := sc.bare(t, d)
		infos, err := s.Posts(ctx, convert[engine.PostID](ids))
		if err != nil {
			return errClass(err)
		}
		var b strings.Builder
		for i, in := range infos {
			switch {
			case !in.Exists:
				fmt.Fprintf(&b, "%s: unknown\n", d.CmdArgs[i].Key)
			case in.Author == 0:
				fmt.Fprintf(&b, "%s: no author\n", d.CmdArgs[i].Key)
			default:
				fmt.Fprintf(&b, "%s: by %d\n", d.CmdArgs[i].Key, in.Author)
			}
		}
		return b.String()
	case "counts":
		ids := sc.bare(t, d)
		cs, err := s.Counts(ctx, convert[engine.PostID](ids))
		if err != nil {
			return errClass(err)
		}
		var b strings.Builder
		for i, c := range cs {
			fmt.Fprintf(&b, "%s: likes=%d comments=%d reposts=%d views=%d favorites=%d\n",
				d.CmdArgs[i].Key, c.Likes, c.Comments, c.Reposts, c.Views, c.Favorites)
		}
		return b.String()
	case "like", "unlike", "favorite", "unfavorite":
		fn := map[string]func(c ctxT, v engine.UserID, p engine.PostID) error{
			"like": s.Like, "unlike": s.Unlike, "favorite": s.Favorite, "unfavorite": s.Unfavorite}[d.Cmd]
		return result(fn(ctx, u, engine.PostID(sc.id(t, str(d, "post")))))
	case "react":
		return result(s.ReactToPost(ctx, u, engine.PostID(sc.id(t, str(d, "post"))), str(d, "kind")))
	case "unreact":
		return result(s.UnreactToPost(ctx, u, engine.PostID(sc.id(t, str(d, "post")))))
	case "reactions":
		var ps []uint64
		for _, a := range d.CmdArgs {
			if a.Key != "user" {
				ps = append(ps, sc.id(t, a.Key))
			}
		}
		out := make([]engine.PostView, len(ps))
		if err := s.Page(ctx, u, convert[engine.PostID](ps), engine.PageWant{Reactions: true, ViewerReaction: true}, out); err != nil {
			return errClass(err)
		}
		var b strings.Builder
		for i, v := range out {
			fmt.Fprintf(&b, "%s:", sc.name(ps[i]))
			for j, k := range s.ReactionKinds() {
				fmt.Fprintf(&b, " %s=%d", k, v.Reactions.Count[j])
			}
			viewer := v.ViewerReaction
			if viewer == "" {
				viewer = "none"
			}
			fmt.Fprintf(&b, " viewer=%s\n", viewer)
		}
		return b.String()
	case "flags":
		p := []engine.PostID{engine.PostID(sc.id(t, str(d, "post")))}
		l, err := s.Liked(ctx, u, p)
		if err != nil {
			return errClass(err)
		}
		f, err := s.Favorited(ctx, u, p)
		if err != nil {
			return errClass(err)
		}
		return fmt.Sprintf("liked=%v favorited=%v", l[0], f[0])
	case "comment":
		return result(s.Comment(ctx, u, engine.PostID(sc.id(t, str(d, "post"))), sc.commentID(t, d), userList(t, d, "mentions"), str(d, "key")))
	case "delete-comment":
		a := engine.Actor{User: u, Privileged: d.HasArg("privileged")}
		return result(s.DeleteComment(ctx, a, engine.PostID(sc.id(t, str(d, "post"))), sc.commentID(t, d)))
	case "delete-post":
		a := engine.Actor{User: u, Privileged: d.HasArg("privileged")}
		return result(s.DeletePost(ctx, a, engine.PostID(sc.id(t, str(d, "post")))))
	case "erase":
		return result(s.EraseUser(ctx, u))
	case "repost":
		p, err := s.Repost(ctx, u, engine.PostID(sc.id(t, str(d, "post"))), userList(t, d, "mentions"), str(d, "key"))
		if err != nil {
			return errClass(err)
		}
		return sc.bind(str(d, "as"), uint64(p))
	case "views":
		return result(s.RecordViews(ctx, convert[engine.PostID](sc.bare(t, d))))
	case "follow":
		return result(s.Follow(ctx, u, userArg(t, d, "target")))
	case "unfollow":
		return result(s.Unfollow(ctx, u, userArg(t, d, "target")))
	case "profile":
		c, err := s.UserCounts(ctx, []engine.UserID{u})
		if err != nil {
			return errClass(err)
		}
		return fmt.Sprintf("posts=%d followers=%d following=%d", c[0].Posts, c[0].Followers, c[0].Following)
	case "unread":
		n, err := s.Unread(ctx, u)
		if err != nil {
			return errClass(err)
		}
		return fmt.Sprintf("mentions=%d comments=%d likes=%d messages=%d system=%d feed=%d total=%d redDot=%v",
			n.Mentions, n.Comments, n.Likes, n.Messages, n.System, n.Feed, n.Total(), n.RedDot)
	case "mark-read":
		kinds := map[string]engine.UnreadKind{"MENTIONS": engine.Mentions, "COMMENTS": engine.Comments,
			"LIKES": engine.Likes, "MESSAGES": engine.Messages, "SYSTEM": engine.System, "FEED": engine.Feed}
		k, ok := kinds[str(d, "kind")]
		if !ok {
			k = engine.UnreadKind(num(t, d, "kind", 0))
		}
		return result(s.MarkRead(ctx, u, k))
	case "click":
		return result(s.ClickRedDot(ctx, u))
	case "push":
		return result(s.PushRedDot(ctx))
	case "publish":
		n, err := s.PublishNotification(ctx, str(d, "title"), str(d, "body"), str(d, "key"))
		if err != nil {
			return errClass(err)
		}
		return fmt.Sprintf("%s %q %q", sc.bind(str(d, "as"), uint64(n.ID)), n.Title, n.Body)
	case "notifications":
		var after uint64
		if a := str(d, "after"); a != "" {
			after = sc.id(t, a)
		}
		ns, err := s.Notifications(ctx, int(num(t, d, "first", 20)), engine.NotificationID(after))
		if err != nil {
			return errClass(err)
		}
		out := make([]string, len(ns))
		for i, n := range ns {
			out[i] = sc.name(uint64(n.ID))
		}
		if len(out) == 0 {
			return "(none)"
		}
		return strings.Join(out, " ")
	case "group":
		g, err := s.CreateGroup(ctx, u, userList(t, d, "members"))
		if err != nil {
			return errClass(err)
		}
		return sc.bind(str(d, "as"), uint64(g))
	case "add-members":
		return result(s.AddGroupMembers(ctx, u, engine.GroupID(sc.id(t, str(d, "group"))), userList(t, d, "users")))
	case "leave":
		g, err := s.LeaveGroup(ctx, u, engine.GroupID(sc.id(t, str(d, "group"))))
		if err != nil {
			return errClass(err)
		}
		return fmt.Sprintf("count=%d first page: %s", g.MemberCount, userNames(g.Members))
	case "members":
		g, err := s.Group(ctx, u, engine.GroupID(sc.id(t, str(d, "group"))))
		if err != nil {
			return errClass(err)
		}
		return userNames(g.Members)
	case "group-info":
		g, err := s.Group(ctx, u, engine.GroupID(sc.id(t, str(d, "group"))))
		if err != nil {
			return errClass(err)
		}
		return fmt.Sprintf("count=%d first page: %s", g.MemberCount, userNames(g.Members))
	case "members-page":
		ms, err := s.GroupMembers(ctx, u, engine.GroupID(sc.id(t, str(d, "group"))), int(num(t, d, "first", engine.DefaultMemberPageSize)), userArg(t, d, "after"))
		if err != nil {
			return errClass(err)
		}
		return userNames(ms)
	case "receipt-page":
		ms, err := s.ReceiptMembers(ctx, u, engine.MessageID(sc.id(t, str(d, "msg"))), str(d, "list") != "unreaders",
			int(num(t, d, "first", engine.DefaultMemberPageSize)), userArg(t, d, "after"))
		if err != nil {
			return errClass(err)
		}
		return userNames(ms)
	case "send":
		m, err := s.SendMessage(ctx, u, engine.GroupID(sc.id(t, str(d, "group"))), str(d, "text"), userList(t, d, "mentions"), str(d, "key"))
		if err != nil {
			return errClass(err)
		}
		return fmt.Sprintf("%s from %d in %s: %q", sc.bind(str(d, "as"), uint64(m.ID)), m.Sender, sc.name(uint64(m.Group)), m.Text)
	case "message":
		m, err := s.Message(ctx, u, engine.MessageID(sc.id(t, str(d, "msg"))))
		if err != nil {
			return errClass(err)
		}
		return fmt.Sprintf("%s from %d in %s: %q", sc.name(uint64(m.ID)), m.Sender, sc.name(uint64(m.Group)), m.Text)
	case "read-messages":
		ms, err := s.MarkMessagesRead(ctx, u, convert[engine.MessageID](sc.idList(t, d, "msgs")))
		if err != nil {
			return errClass(err)
		}
		out := make([]string, len(ms))
		for i, m := range ms {
			out[i] = sc.name(uint64(m.ID))
		}
		return "ok " + strings.Join(out, " ")
	case "receipts":
		r, err := s.Receipts(ctx, u, engine.MessageID(sc.id(t, str(d, "msg"))), int(num(t, d, "limit", 10)))
		if err != nil {
			return errClass(err)
		}
		return fmt.Sprintf("read=%d unread=%d readers=%s unreaders=%s", r.ReadCount, r.UnreadCount, userNames(r.Readers), userNames(r.Unreaders))
	}
	t.Fatalf("unknown command %q", d.Cmd)
	return ""
}

// ctxT shortens the signature of the four flag mutations.
type ctxT = context.Context
