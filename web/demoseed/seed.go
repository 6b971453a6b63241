// Package demoseed owns the demo world: a small, believable social app
// (eight named users, follows, a feed of posts with long-tailed counts and
// reactions of every kind the deployment has, a group chat with history and read receipts, system notifications and a
// red-dot push) written into a store through engine.Store, so that
// GraphiQL and the demo client have something to show at once.
//
// Tally stores counts, not content. The names, post texts and group name
// live in the Summary that Seed returns, which `tally demo-seed` saves next
// to the data (Save) and the demo client reads back (Load): it plays the
// part of the app's own content service. A store that already holds data
// is fine to seed; a data directory is seeded once (SeedDir).
package demoseed

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/snowflake"
)

// ID is an id serialised as a decimal JSON string: snowflake ids do not
// fit a JavaScript number.
type ID uint64

func (id ID) MarshalText() ([]byte, error) { return strconv.AppendUint(nil, uint64(id), 10), nil }

func (id *ID) UnmarshalText(b []byte) error {
	v, err := strconv.ParseUint(string(b), 10, 64)
	if err != nil {
		return fmt.Errorf("demoseed: bad id %q", b)
	}
	*id = ID(v)
	return nil
}

func (id ID) String() string { return strconv.FormatUint(uint64(id), 10) }

// User is a named demo user.
type User struct {
	ID     ID     `json:"id"`
	Name   string `json:"name"`
	Handle string `json:"handle"`
}

// Post is a post of the demo feed. A repost has RepostOf set and shows the
// original's text.
type Post struct {
	ID       ID     `json:"id"`
	Author   ID     `json:"author"`
	Text     string `json:"text,omitempty"`
	RepostOf ID     `json:"repostOf,omitempty"`
}

// Group is a demo group chat.
type Group struct {
	ID      ID     `json:"id"`
	Name    string `json:"name"`
	Members []ID   `json:"members"`
}

// Message is a group message of the demo chat, oldest first.
type Message struct {
	ID    ID `json:"id"`
	Group ID `json:"group"`
}

// Summary is the demo world: what the app knows about the ids Tally
// counts. Posts and Messages are oldest first.
type Summary struct {
	Users         []User    `json:"users"`
	Posts         []Post    `json:"posts"`
	Groups        []Group   `json:"groups"`
	Messages      []Message `json:"messages"`
	Notifications []ID      `json:"notifications"`
}

// String describes the world in one line, for the seeding command.
func (s Summary) String() string {
	reposts := 0
	for _, p := range s.Posts {
		if p.RepostOf != 0 {
			reposts++
		}
	}
	group := "no group"
	if len(s.Groups) > 0 {
		g := s.Groups[0]
		group = fmt.Sprintf("group %q (id %d, %d members)", g.Name, g.ID, len(g.Members))
	}
	return fmt.Sprintf("%d users, %d posts and %d reposts, %s with %d messages, %d system notifications",
		len(s.Users), len(s.Posts)-reposts, reposts, group, len(s.Messages), len(s.Notifications))
}

// FileName is the name of the saved Summary inside a data directory.
const FileName = "demo-world.json"

// Save writes s to dir/FileName atomically.
func (s Summary) Save(dir string) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, FileName+".tmp*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), filepath.Join(dir, FileName))
}

// Load reads the Summary saved in dir. A directory without one yields
// os.ErrNotExist (test with errors.Is).
func Load(dir string) (Summary, error) {
	var s Summary
	b, err := os.ReadFile(filepath.Join(dir, FileName))
	if err != nil {
		return s, err
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return s, fmt.Errorf("demoseed: %s: %w", FileName, err)
	}
	return s, nil
}

// Seed writes the demo world into s and returns its Summary. The store
// may already hold data (the README's first query writes some): the
// world's posts get ids of their own snowflake node (seedNode), its group
// and messages fresh ids, and the cast's existing state only gains what
// the world adds. Seeding twice makes a second world; SeedDir seeds a
// data directory once.
func Seed(ctx context.Context, s engine.Store) (Summary, error) {
	now := time.Now()
	w := seeder{ctx: ctx, s: s, now: now, run: strconv.FormatInt(now.UnixNano(), 36)}
	steps := []func() error{w.users, w.follows, w.posts, w.reactions, w.otherKinds, w.group, w.broadcasts}
	for _, step := range steps {
		if err := step(); err != nil {
			return Summary{}, err
		}
	}
	return w.sum, nil
}

// SeedDir seeds s and saves the Summary in dir, once: when dir already
// holds a saved world, it changes nothing and returns that world with
// already set.
func SeedDir(ctx context.Context, s engine.Store, dir string) (sum Summary, already bool, err error) {
	sum, err = Load(dir)
	switch {
	case err == nil:
		return sum, true, nil
	case !errors.Is(err, os.ErrNotExist):
		return Summary{}, false, fmt.Errorf("%w (move the file aside to seed again)", err)
	}
	sum, err = Seed(ctx, s)
	if err != nil {
		return Summary{}, false, err
	}
	return sum, false, sum.Save(dir)
}

type seeder struct {
	ctx context.Context
	s   engine.Store
	now time.Time
	// run tells this seed's idempotency keys from an earlier, interrupted
	// seed's: a key reused for other arguments is an error.
	run string
	sum Summary
	ids []engine.PostID // ids of posts[i]
}

// key is the idempotency key of this seed's i-th step of a kind.
func (w *seeder) key(kind string, i int) string {
	return "demo-seed-" + w.run + "-" + kind + "-" + strconv.Itoa(i)
}

// users registers the cast, so that their system-notification cursors
// start before the seeded notifications (a new user's system unread is 0).
func (w *seeder) users() error {
	w.sum.Users = append([]User(nil), Cast...)
	for _, u := range Cast {
		if _, err := w.s.Unread(w.ctx, engine.UserID(u.ID)); err != nil {
			return fmt.Errorf("demoseed: register user %d: %w", u.ID, err)
		}
	}
	return nil
}

// follows comes before the posts, so that posts by followees show up in
// the feed badge.
func (w *seeder) follows() error {
	for _, u := range Cast {
		for _, t := range follows[uint64(u.ID)] {
			if err := w.s.Follow(w.ctx, engine.UserID(u.ID), engine.UserID(t)); err != nil {
				return fmt.Errorf("demoseed: %d follows %d: %w", u.ID, t, err)
			}
		}
	}
	return nil
}

// seedNode is the snowflake node of the seeded post ids, kept apart from
// the node a server mints ids on.
const seedNode = 1000

func (w *seeder) posts() error {
	for i, p := range posts {
		at := w.now.Add(-time.Duration(p.ageMin) * time.Minute)
		id := engine.PostID(snowflake.Make(at.UnixMilli(), seedNode, uint64(i)))
		got, err := w.s.CreatePost(w.ctx, engine.UserID(p.author), id, w.key("post", i))
		if err != nil {
			return fmt.Errorf("demoseed: post %d (id %d, snowflake node %d, which a server given -node %d would share): %w",
				i, id, seedNode, seedNode, err)
		}
		w.ids = append(w.ids, got)
		w.sum.Posts = append(w.sum.Posts, Post{ID: ID(got), Author: ID(p.author), Text: p.text})
	}
	return nil
}

// castLikers are the cast members who like post i: the author's followers
// on alternate posts, so every user has posts they have not liked yet.
func castLikers(i int, author uint64) []uint64 {
	var out []uint64
	for _, u := range Cast {
		f := uint64(u.ID)
		if f != author && (f+uint64(i))%2 == 0 && contains(follows[f], author) {
			out = append(out, f)
		}
	}
	return out
}

func contains(list []uint64, v uint64) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

// reactions makes every count real: likes, comments, reposts, favorites
// and views come through the same calls a client makes, from the cast
// first and then from the anonymous audience.
func (w *seeder) reactions() error {
	var jobs []func() error
	audience := func(n int) engine.UserID { return engine.UserID(audienceBase + n) }
	for i, p := range posts {
		id := w.ids[i]
		likers := castLikers(i, p.author)
		for n := 0; n < p.likes; n++ {
			u := audience(n)
			if n < len(likers) {
				u = engine.UserID(likers[n])
			}
			jobs = append(jobs, func() error { return w.s.Like(w.ctx, u, id) })
		}
		for n := 0; n < p.favs; n++ {
			u := audience(n)
			jobs = append(jobs, func() error { return w.s.Favorite(w.ctx, u, id) })
		}
		for n := 0; n < p.comments; n++ {
			u := audience(n % 40)
			jobs = append(jobs, func() error { return w.s.Comment(w.ctx, u, id, 0, nil, "") })
		}
		for n := 0; n < p.reposts; n++ {
			u := audience(n)
			jobs = append(jobs, func() error { _, err := w.s.Repost(w.ctx, u, id, nil, ""); return err })
		}
	}
	if err := w.parallel(jobs); err != nil {
		return err
	}
	for _, c := range commentMentions {
		ms := make([]engine.UserID, len(c.users))
		for k, u := range c.users {
			ms[k] = engine.UserID(u)
		}
		if err := w.s.Comment(w.ctx, engine.UserID(c.by), w.ids[c.post], 0, ms, ""); err != nil {
			return fmt.Errorf("demoseed: comment: %w", err)
		}
	}
	for _, r := range castReposts {
		id, err := w.s.Repost(w.ctx, engine.UserID(r.by), w.ids[r.post], nil, "")
		if err != nil {
			return fmt.Errorf("demoseed: repost: %w", err)
		}
		w.sum.Posts = append(w.sum.Posts, Post{ID: ID(id), Author: ID(r.by), RepostOf: ID(w.ids[r.post])})
	}
	return w.views()
}

// otherKinds gives the posts reactions of the deployment's kinds other
// than like (Store.ReactionKinds), so that the demo's reaction picker
// shows counts of several kinds at once; a like-only deployment gets
// none. They come from audience users past the post's likers, so every
// like stays a like and counts.likes is the same whatever the kinds.
func (w *seeder) otherKinds() error {
	var others []string
	for _, k := range w.s.ReactionKinds() {
		if k != "like" {
			others = append(others, k)
		}
	}
	if len(others) == 0 {
		return nil
	}
	var jobs []func() error
	for i, p := range posts {
		id := w.ids[i]
		next := p.likes // the first audience user past the likers
		for rank := range others {
			n := otherKindCount(p.likes, rank)
			// Which kind a post gets most of turns with the post, so
			// the feed does not show one ranking everywhere.
			kind := others[(rank+i)%len(others)]
			for range n {
				u := engine.UserID(audienceBase + next)
				next++
				jobs = append(jobs, func() error { return w.s.ReactToPost(w.ctx, u, id, kind) })
			}
		}
	}
	for _, r := range castReactions {
		kind := others[r.rank%len(others)]
		jobs = append(jobs, func() error { return w.s.ReactToPost(w.ctx, engine.UserID(r.by), w.ids[r.post], kind) })
	}
	return w.parallel(jobs)
}

// otherKindCount is how many reactions of the rank-th most common kind
// but like a post with likes likes gets: a shrinking share, as people
// like far more often than they pick anything else.
func otherKindCount(likes, rank int) int {
	return likes * 3 / (10 << rank)
}

// views records each post's views in rounds: every round is one
// RecordViews call over the posts that still need views, as a client
// reports the cards it showed.
func (w *seeder) views() error {
	maxViews := 0
	for _, p := range posts {
		maxViews = max(maxViews, p.views)
	}
	jobs := make([]func() error, 0, maxViews)
	for round := 0; round < maxViews; round++ {
		var batch []engine.PostID
		for i, p := range posts {
			if round < p.views {
				batch = append(batch, w.ids[i])
			}
		}
		jobs = append(jobs, func() error { return w.s.RecordViews(w.ctx, batch) })
	}
	return w.parallel(jobs)
}

// parallel runs jobs on a few workers (a durable store commits concurrent
// writes together) and returns the first error.
func (w *seeder) parallel(jobs []func() error) error {
	const workers = 16
	var (
		wg    sync.WaitGroup
		next  = make(chan func() error)
		once  sync.Once
		first error
	)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for job := range next {
				if err := job(); err != nil {
					once.Do(func() { first = err })
				}
			}
		}()
	}
	for _, job := range jobs {
		if w.ctx.Err() != nil {
			break
		}
		next <- job
	}
	close(next)
	wg.Wait()
	if first == nil {
		first = w.ctx.Err()
	}
	if first != nil {
		return fmt.Errorf("demoseed: reactions: %w", first)
	}
	return nil
}

// group creates the group chat, its history and who read what.
func (w *seeder) group() error {
	owner := engine.UserID(groupMembers[0])
	var others []engine.UserID
	for _, m := range groupMembers[1:] {
		others = append(others, engine.UserID(m))
	}
	gid, err := w.s.CreateGroup(w.ctx, owner, others)
	if err != nil {
		return fmt.Errorf("demoseed: create group: %w", err)
	}
	g := Group{ID: ID(gid), Name: GroupName}
	for _, m := range groupMembers {
		g.Members = append(g.Members, ID(m))
	}
	w.sum.Groups = append(w.sum.Groups, g)
	for i, c := range chat {
		var ms []engine.UserID
		for _, m := range c.mentions {
			ms = append(ms, engine.UserID(m))
		}
		msg, err := w.s.SendMessage(w.ctx, engine.UserID(c.from), gid, c.text, ms, w.key("msg", i))
		if err != nil {
			return fmt.Errorf("demoseed: message %d: %w", i, err)
		}
		w.sum.Messages = append(w.sum.Messages, Message{ID: ID(msg.ID), Group: ID(gid)})
		for _, r := range c.readBy {
			if _, err := w.s.MarkMessagesRead(w.ctx, engine.UserID(r), []engine.MessageID{msg.ID}); err != nil {
				return fmt.Errorf("demoseed: read message %d: %w", i, err)
			}
		}
	}
	return nil
}

// broadcasts publishes the system notifications and a red-dot push.
func (w *seeder) broadcasts() error {
	for i, n := range notifications {
		got, err := w.s.PublishNotification(w.ctx, n.title, n.body, w.key("note", i))
		if err != nil {
			return fmt.Errorf("demoseed: notification: %w", err)
		}
		w.sum.Notifications = append(w.sum.Notifications, ID(got.ID))
	}
	if err := w.s.PushRedDot(w.ctx); err != nil {
		return fmt.Errorf("demoseed: red dot: %w", err)
	}
	return nil
}
