// Package refmodel is a reference model of engine.Store: plain maps and
// slices, no packing, no log, no concurrency tricks, written from API.md's
// Semantics section and the Store interface's doc comments rather than
// from either backend. It owns nothing but the answer a correct store
// gives; the metamorphic test in engine/enginetest runs the same random
// workload on it and on each backend and compares every answer.
//
// Ids it makes are snowflakes from its clock on node ModelNode, so they
// sort like a backend's ids made at the same clock time but never equal
// them; callers compare ids through their own mapping.
//
// Events (Subscribe) are not modelled: Subscribe delivers nothing. Stats
// reports zero.
package refmodel

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/counters"
	"github.com/tally-dev/tally/engine/snowflake"
)

// ModelNode is the snowflake node of ids the model makes.
const ModelNode = 1022

// Model is an in-memory engine.Store. Every method takes one lock, so
// each call is atomic.
type Model struct {
	mu        sync.Mutex
	now       func() time.Time
	cursorTTL time.Duration
	lastMs    int64
	seq       uint64

	posts    map[engine.PostID]*post
	deleted  map[engine.PostID]bool          // posts deleted: never known again
	repostOf map[engine.PostID]engine.PostID // repost → original
	kinds    []string                        // the deployment's reaction kinds, like among them
	kindIDs  counters.Kinds                  // their ids, for import rows (ImportKinds)
	reacts   map[pair]string                 // a user's reaction on a post, by kind name
	favs     map[pair]bool
	// comments are the counted comment ids of each post: true while
	// counted, false once deleted (known, and never counted again).
	comments map[engine.PostID]map[engine.CommentID]bool
	writers  map[wrote]bool // who wrote which counted comment id
	users    map[engine.UserID]*user
	follows  map[engine.UserID]map[engine.UserID]int64 // viewer → followee → snapshot
	notifs   []engine.Notification                     // oldest first
	pushes   int64                                     // red-dot pushes so far
	groups   map[engine.GroupID]*group
	messages map[engine.MessageID]*message
	idem     map[idemKey]idemRec
}

type pair struct {
	u engine.UserID
	p engine.PostID
}

type wrote struct {
	u engine.UserID
	c engine.CommentID
}

type post struct {
	author engine.UserID
	counts engine.Counts
	kinds  map[string]int64 // counts of the reaction kinds other than like
}

// addReaction adds d to the post's count of kind, never below zero (an
// import may have set likes below the reactions the model holds).
func (p *post) addReaction(kind string, d int64) {
	if kind == "like" {
		p.counts.Likes = max(0, p.counts.Likes+d)
		return
	}
	if p.kinds == nil {
		p.kinds = map[string]int64{}
	}
	p.kinds[kind] = max(0, p.kinds[kind]+d)
}

// user holds posts, the posts the user has made, and deleted, those
// deleted since: postCount is posts − deleted, while followers' feed
// badges count posts made (a post made after a delete is still new).
type user struct {
	posts, deleted, followers, following int64
	mentions, comments, likes, messages  int64
	hasCursor                            bool
	cursor                               int // notifications seen: len(notifs) when set
	lastSeen                             time.Time
	clickedPushes                        int64 // pushes counted when last clicked
}

type group struct {
	byMap []engine.UserID // mapid−1 → user; 0 once the user was erased
	mapid map[engine.UserID]int
	quit  map[engine.UserID]bool
	gone  map[int]bool // mapids of erased users: never current again
}

type message struct {
	engine.Message
	maxid     int
	senderMap int          // the sender's mapid, never counted
	quit      map[int]bool // mapids quit (or erased) at send time
	read      map[int]bool
}

type idemKey struct {
	viewer engine.UserID // 0 for PublishNotification
	key    string
}

type idemRec struct {
	fp     uint64
	at     time.Time
	post   engine.PostID
	msg    engine.Message
	notif  engine.Notification
	hasAny bool
}

// New returns an empty model reading time from now (nil: time.Now),
// dropping system cursors idle for cursorTTL (0: engine.DefaultCursorTTL),
// with the reaction kinds reactions (nil: like alone).
func New(now func() time.Time, cursorTTL time.Duration, reactions []string) *Model {
	if now == nil {
		now = time.Now
	}
	if cursorTTL <= 0 {
		cursorTTL = engine.DefaultCursorTTL
	}
	if reactions == nil {
		reactions = []string{"like"}
	}
	// A fresh table reconciled with the kinds: ids given in order, as a
	// new store gives them. Nothing is left out of it, so nothing is
	// totalled.
	ids, err := counters.NewKinds().Reconcile(reactions, nil)
	if err != nil {
		panic(fmt.Sprintf("refmodel: reaction kinds %q: %v", reactions, err))
	}
	return &Model{
		now: now, cursorTTL: cursorTTL, kinds: reactions, kindIDs: ids, reacts: map[pair]string{},
		posts: map[engine.PostID]*post{}, deleted: map[engine.PostID]bool{}, repostOf: map[engine.PostID]engine.PostID{},
		favs:     map[pair]bool{},
		comments: map[engine.PostID]map[engine.CommentID]bool{}, writers: map[wrote]bool{},
		users: map[engine.UserID]*user{}, follows: map[engine.UserID]map[engine.UserID]int64{},
		groups: map[engine.GroupID]*group{}, messages: map[engine.MessageID]*message{},
		idem: map[idemKey]idemRec{},
	}
}

var (
	_ engine.Store    = (*Model)(nil)
	_ engine.Importer = (*Model)(nil)
)

func (m *Model) nextID() uint64 {
	ms := m.now().UnixMilli()
	if ms <= m.lastMs {
		if m.seq++; m.seq >= 1<<12 {
			m.lastMs++
			m.seq = 0
		}
		ms = m.lastMs
	} else {
		m.lastMs, m.seq = ms, 0
	}
	return snowflake.Make(ms, ModelNode, m.seq)
}

func (m *Model) user(u engine.UserID) *user {
	r := m.users[u]
	if r == nil {
		r = &user{}
		m.users[u] = r
	}
	return r
}

// postsMade is what followers' feed badges count: posts made, deleted or
// not.
func (m *Model) postsMade(u engine.UserID) int64 {
	if r := m.users[u]; r != nil {
		return r.posts
	}
	return 0
}

// lookupIdem returns the live record of (viewer, key), if any, after
// checking its fingerprint against fp.
func (m *Model) lookupIdem(viewer engine.UserID, key string, fp uint64) (idemRec, bool, error) {
	if key == "" {
		return idemRec{}, false, nil
	}
	r, ok := m.idem[idemKey{viewer, key}]
	if !ok || engine.IdemExpired(r.at, m.now()) {
		return idemRec{}, false, nil
	}
	if err := engine.CheckIdemReuse(r.fp, fp); err != nil {
		return idemRec{}, false, err
	}
	return r, true, nil
}

func (m *Model) recordIdem(viewer engine.UserID, key string, r idemRec) {
	if key != "" {
		r.at = m.now()
		m.idem[idemKey{viewer, key}] = r
	}
}

func invalid(format string, a ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{engine.ErrInvalid}, a...)...)
}

// CreatePost implements engine.Store.
func (m *Model) CreatePost(_ context.Context, viewer engine.UserID, id engine.PostID, idemKey string) (engine.PostID, error) {
	if err := engine.CheckViewer(viewer); err != nil {
		return 0, err
	}
	if err := engine.CheckIdemKey(idemKey); err != nil {
		return 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if id != 0 {
		if err := engine.CheckPostID(id, m.now()); err != nil {
			return 0, err
		}
	}
	fp := engine.IdemFingerprint(engine.IdemCreatePost, engine.IdemArgs{Post: id})
	if r, ok, err := m.lookupIdem(viewer, idemKey, fp); err != nil || ok {
		return r.post, err
	}
	if id == 0 {
		id = engine.PostID(m.nextID())
	} else if _, exists := m.posts[id]; exists || m.deleted[id] {
		return 0, invalid("post %d exists or was deleted", id)
	}
	m.addPost(viewer, id)
	m.recordIdem(viewer, idemKey, idemRec{fp: fp, post: id})
	return id, nil
}

func (m *Model) addPost(author engine.UserID, id engine.PostID) {
	m.posts[id] = &post{author: author}
	m.user(author).posts++
}

// Posts implements engine.Store.
func (m *Model) Posts(_ context.Context, ids []engine.PostID) ([]engine.PostInfo, error) {
	if err := engine.CheckIDs(ids); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]engine.PostInfo, len(ids))
	for i, id := range ids {
		if p := m.posts[id]; p != nil {
			out[i] = engine.PostInfo{Exists: true, Author: p.author}
		}
	}
	return out, nil
}

// Page implements engine.Store.
func (m *Model) Page(_ context.Context, viewer engine.UserID, ids []engine.PostID, want engine.PageWant, out []engine.PostView) error {
	if err := engine.CheckIDs(ids); err != nil {
		return err
	}
	if len(out) != len(ids) {
		return invalid("out has %d entries for %d ids", len(out), len(ids))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, id := range ids {
		v := engine.PostView{}
		if p := m.posts[id]; p != nil {
			v.PostInfo = engine.PostInfo{Exists: true, Author: p.author}
			if want.Counts {
				v.Counts = p.counts
			}
			if want.Reactions {
				for i, k := range m.kinds {
					if k == "like" {
						v.Reactions.Count[i] = p.counts.Likes
					} else {
						v.Reactions.Count[i] = p.kinds[k]
					}
				}
			}
		}
		if viewer != 0 {
			if want.ViewerReaction {
				v.ViewerReaction = m.reacts[pair{viewer, id}]
			}
			v.Liked = want.Liked && m.reacts[pair{viewer, id}] == "like"
			v.Favorited = want.Favorited && m.favs[pair{viewer, id}]
		}
		out[i] = v
	}
	return nil
}

// Counts implements engine.Store.
func (m *Model) Counts(_ context.Context, ids []engine.PostID) ([]engine.Counts, error) {
	if err := engine.CheckIDs(ids); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]engine.Counts, len(ids))
	for i, id := range ids {
		if p := m.posts[id]; p != nil {
			out[i] = p.counts
		}
	}
	return out, nil
}

func (m *Model) flags(viewer engine.UserID, ids []engine.PostID, set map[pair]bool) ([]bool, error) {
	if err := engine.CheckIDs(ids); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]bool, len(ids))
	for i, id := range ids {
		out[i] = viewer != 0 && set[pair{viewer, id}]
	}
	return out, nil
}

// Liked implements engine.Store.
func (m *Model) Liked(_ context.Context, viewer engine.UserID, ids []engine.PostID) ([]bool, error) {
	if err := engine.CheckIDs(ids); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]bool, len(ids))
	for i, id := range ids {
		out[i] = viewer != 0 && m.reacts[pair{viewer, id}] == "like"
	}
	return out, nil
}

// Favorited implements engine.Store.
func (m *Model) Favorited(_ context.Context, viewer engine.UserID, ids []engine.PostID) ([]bool, error) {
	return m.flags(viewer, ids, m.favs)
}

// toggle sets or clears (viewer, id) in set; it reports the post and
// whether anything changed.
func (m *Model) toggle(viewer engine.UserID, id engine.PostID, set map[pair]bool, on bool) (*post, bool, error) {
	if err := engine.CheckViewer(viewer); err != nil {
		return nil, false, err
	}
	p := m.posts[id]
	if p == nil {
		return nil, false, fmt.Errorf("%w: post %d", engine.ErrNotFound, id)
	}
	k := pair{viewer, id}
	if set[k] == on {
		return p, false, nil
	}
	if on {
		set[k] = true
	} else {
		delete(set, k)
	}
	return p, true, nil
}

// Like implements engine.Store: the reaction like.
func (m *Model) Like(ctx context.Context, viewer engine.UserID, id engine.PostID) error {
	return m.ReactToPost(ctx, viewer, id, "like")
}

// Unlike implements engine.Store: it removes a like, not another kind.
func (m *Model) Unlike(_ context.Context, viewer engine.UserID, id engine.PostID) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.unreact(viewer, id, "like")
}

// ReactionKinds implements engine.Store.
func (m *Model) ReactionKinds() []string { return m.kinds }

// ReactToPost implements engine.Store.
func (m *Model) ReactToPost(_ context.Context, viewer engine.UserID, id engine.PostID, kind string) error {
	if err := engine.CheckViewer(viewer); err != nil {
		return err
	}
	if !slices.Contains(m.kinds, kind) {
		return invalid("unknown reaction kind %q", kind)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.posts[id]
	if p == nil {
		return fmt.Errorf("%w: post %d", engine.ErrNotFound, id)
	}
	k := pair{viewer, id}
	was := m.reacts[k]
	if was == kind {
		return nil
	}
	m.reacts[k] = kind
	if was != "" {
		p.addReaction(was, -1)
	} else if p.author != 0 && p.author != viewer {
		m.user(p.author).likes++
	}
	p.addReaction(kind, 1)
	return nil
}

// UnreactToPost implements engine.Store.
func (m *Model) UnreactToPost(_ context.Context, viewer engine.UserID, id engine.PostID) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.unreact(viewer, id, "")
}

// unreact removes viewer's reaction on id, when it is of kind only (""
// any kind).
func (m *Model) unreact(viewer engine.UserID, id engine.PostID, only string) error {
	if err := engine.CheckViewer(viewer); err != nil {
		return err
	}
	p := m.posts[id]
	if p == nil {
		return fmt.Errorf("%w: post %d", engine.ErrNotFound, id)
	}
	k := pair{viewer, id}
	was := m.reacts[k]
	if was == "" || (only != "" && was != only) {
		return nil
	}
	delete(m.reacts, k)
	p.addReaction(was, -1)
	return nil
}

// Favorite implements engine.Store.
func (m *Model) Favorite(_ context.Context, viewer engine.UserID, id engine.PostID) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	p, changed, err := m.toggle(viewer, id, m.favs, true)
	if changed {
		p.counts.Favorites++
	}
	return err
}

// Unfavorite implements engine.Store.
func (m *Model) Unfavorite(_ context.Context, viewer engine.UserID, id engine.PostID) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	p, changed, err := m.toggle(viewer, id, m.favs, false)
	if changed && p.counts.Favorites > 0 { // an import may have set it below the set's size
		p.counts.Favorites--
	}
	return err
}

// Comment implements engine.Store.
func (m *Model) Comment(_ context.Context, viewer engine.UserID, id engine.PostID, comment engine.CommentID, mentions []engine.UserID, idemKey string) error {
	if err := engine.CheckViewer(viewer); err != nil {
		return err
	}
	if id == 0 {
		return invalid("post id 0")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if comment != 0 {
		if err := engine.CheckCommentID(comment, m.now()); err != nil {
			return err
		}
	}
	ms, err := engine.NormalizeMentions(viewer, mentions)
	if err != nil {
		return err
	}
	if err := engine.CheckIdemKey(idemKey); err != nil {
		return err
	}
	fp := engine.IdemFingerprint(engine.IdemComment, engine.IdemArgs{Post: id, Comment: comment, Mentions: ms})
	if _, ok, err := m.lookupIdem(viewer, idemKey, fp); err != nil || ok {
		return err
	}
	p := m.posts[id]
	if p == nil {
		return fmt.Errorf("%w: post %d", engine.ErrNotFound, id)
	}
	if comment != 0 {
		if _, known := m.comments[id][comment]; known {
			return nil // counted once, whoever sends it again
		}
		if m.comments[id] == nil {
			m.comments[id] = map[engine.CommentID]bool{}
		}
		m.comments[id][comment] = true
		m.writers[wrote{viewer, comment}] = true
	}
	p.counts.Comments++
	if p.author != 0 && p.author != viewer {
		m.user(p.author).comments++
	}
	for _, u := range ms {
		m.user(u).mentions++
	}
	m.recordIdem(viewer, idemKey, idemRec{fp: fp})
	return nil
}

// Repost implements engine.Store.
func (m *Model) Repost(_ context.Context, viewer engine.UserID, id engine.PostID, mentions []engine.UserID, idemKey string) (engine.PostID, error) {
	if err := engine.CheckViewer(viewer); err != nil {
		return 0, err
	}
	ms, err := engine.NormalizeMentions(viewer, mentions)
	if err != nil {
		return 0, err
	}
	if err := engine.CheckIdemKey(idemKey); err != nil {
		return 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	fp := engine.IdemFingerprint(engine.IdemRepost, engine.IdemArgs{Post: id, Mentions: ms})
	if r, ok, err := m.lookupIdem(viewer, idemKey, fp); err != nil || ok {
		return r.post, err
	}
	p := m.posts[id]
	if p == nil {
		return 0, fmt.Errorf("%w: post %d", engine.ErrNotFound, id)
	}
	p.counts.Reposts++
	nid := engine.PostID(m.nextID())
	m.addPost(viewer, nid)
	m.repostOf[nid] = id
	for _, u := range ms {
		m.user(u).mentions++
	}
	m.recordIdem(viewer, idemKey, idemRec{fp: fp, post: nid})
	return nid, nil
}

// RecordViews implements engine.Store.
func (m *Model) RecordViews(_ context.Context, ids []engine.PostID) error {
	if err := engine.CheckIDs(ids); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, id := range ids {
		if p := m.posts[id]; p != nil {
			p.counts.Views++
		}
	}
	return nil
}

// UserCounts implements engine.Store.
func (m *Model) UserCounts(_ context.Context, ids []engine.UserID) ([]engine.UserCounts, error) {
	if err := engine.CheckIDs(ids); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]engine.UserCounts, len(ids))
	for i, u := range ids {
		if r := m.users[u]; r != nil {
			out[i] = engine.UserCounts{Posts: max(r.posts-r.deleted, 0), Followers: r.followers, Following: r.following}
		}
	}
	return out, nil
}

// Follow implements engine.Store.
func (m *Model) Follow(_ context.Context, viewer, target engine.UserID) error {
	if err := checkPair(viewer, target); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	fs := m.follows[viewer]
	if fs == nil {
		fs = map[engine.UserID]int64{}
		m.follows[viewer] = fs
	}
	if _, ok := fs[target]; ok {
		return nil
	}
	fs[target] = m.postsMade(target)
	m.user(viewer).following++
	m.user(target).followers++
	return nil
}

// Unfollow implements engine.Store.
func (m *Model) Unfollow(_ context.Context, viewer, target engine.UserID) error {
	if err := checkPair(viewer, target); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.follows[viewer][target]; !ok {
		return nil
	}
	delete(m.follows[viewer], target)
	m.user(viewer).following--
	m.user(target).followers--
	return nil
}

func checkPair(viewer, target engine.UserID) error {
	if err := engine.CheckViewer(viewer); err != nil {
		return err
	}
	if target == 0 {
		return invalid("user id 0")
	}
	if target == viewer {
		return invalid("following oneself")
	}
	return nil
}

// Followees implements engine.Store.
func (m *Model) Followees(_ context.Context, viewer engine.UserID) ([]engine.UserID, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]engine.UserID, 0, len(m.follows[viewer]))
	for u := range m.follows[viewer] {
		out = append(out, u)
	}
	slices.Sort(out)
	return out, nil
}

// Unread implements engine.Store. A first read, or one after the cursor
// expired (engine.CursorExpired), starts the cursor at the newest
// notification; every read is activity.
func (m *Model) Unread(_ context.Context, viewer engine.UserID) (engine.Unread, error) {
	if err := engine.CheckViewer(viewer); err != nil {
		return engine.Unread{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	r := m.user(viewer)
	if !r.hasCursor || engine.CursorExpired(r.lastSeen, now, m.cursorTTL) {
		r.hasCursor, r.cursor = true, len(m.notifs)
	}
	r.lastSeen = now
	u := engine.Unread{
		Mentions: r.mentions, Comments: r.comments, Likes: r.likes, Messages: r.messages,
		System: int64(len(m.notifs) - r.cursor),
		RedDot: m.pushes > r.clickedPushes,
	}
	var cur, snap []int64
	for f, s := range m.follows[viewer] {
		cur = append(cur, m.postsMade(f))
		snap = append(snap, s)
	}
	u.Feed = engine.FeedUnread(cur, snap)
	return u, nil
}

// MarkRead implements engine.Store.
func (m *Model) MarkRead(_ context.Context, viewer engine.UserID, kind engine.UnreadKind) error {
	if err := engine.CheckViewer(viewer); err != nil {
		return err
	}
	if kind < engine.Mentions || kind > engine.Feed {
		return invalid("unknown unread kind %d", kind)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.user(viewer)
	switch kind {
	case engine.Mentions:
		r.mentions = 0
	case engine.Comments:
		r.comments = 0
	case engine.Likes:
		r.likes = 0
	case engine.Messages:
		r.messages = 0
	case engine.System:
		r.hasCursor, r.cursor = true, len(m.notifs)
	case engine.Feed:
		for f := range m.follows[viewer] {
			m.follows[viewer][f] = m.postsMade(f)
		}
	}
	return nil
}

// ClickRedDot implements engine.Store.
func (m *Model) ClickRedDot(_ context.Context, viewer engine.UserID) error {
	if err := engine.CheckViewer(viewer); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.user(viewer).clickedPushes = m.pushes
	return nil
}

// PushRedDot implements engine.Store.
func (m *Model) PushRedDot(context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.pushes++
	return nil
}

// PublishNotification implements engine.Store.
func (m *Model) PublishNotification(_ context.Context, title, body, idemKey string) (engine.Notification, error) {
	if err := engine.CheckNotification(title, body); err != nil {
		return engine.Notification{}, err
	}
	if err := engine.CheckIdemKey(idemKey); err != nil {
		return engine.Notification{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	fp := engine.IdemFingerprint(engine.IdemPublish, engine.IdemArgs{Title: title, Body: body})
	if r, ok, err := m.lookupIdem(0, idemKey, fp); err != nil || ok {
		return r.notif, err
	}
	id := m.nextID()
	n := engine.Notification{ID: engine.NotificationID(id), Title: title, Body: body, CreatedAt: snowflake.Time(id)}
	m.notifs = append(m.notifs, n)
	m.recordIdem(0, idemKey, idemRec{fp: fp, notif: n})
	return n, nil
}

// Notifications implements engine.Store.
func (m *Model) Notifications(_ context.Context, first int, after engine.NotificationID) ([]engine.Notification, error) {
	first, err := engine.ClampPage(first)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	out := []engine.Notification{}
	for i := len(m.notifs) - 1; i >= 0 && len(out) < first; i-- {
		if after != 0 && m.notifs[i].ID >= after {
			continue
		}
		out = append(out, m.notifs[i])
	}
	return out, nil
}

func newGroup() *group {
	return &group{mapid: map[engine.UserID]int{}, quit: map[engine.UserID]bool{}, gone: map[int]bool{}}
}

func (g *group) join(u engine.UserID) {
	if _, ok := g.mapid[u]; ok {
		delete(g.quit, u)
		return
	}
	g.byMap = append(g.byMap, u)
	g.mapid[u] = len(g.byMap)
}

func (g *group) isMember(u engine.UserID) bool {
	_, ok := g.mapid[u]
	return ok && !g.quit[u]
}

func (g *group) members() []engine.UserID {
	out := []engine.UserID{}
	for _, u := range g.byMap {
		if u != 0 && !g.quit[u] {
			out = append(out, u)
		}
	}
	return out
}

// memberGroup returns the group for a member, or the error for anyone else.
func (m *Model) memberGroup(viewer engine.UserID, id engine.GroupID) (*group, error) {
	g := m.groups[id]
	if g == nil {
		return nil, fmt.Errorf("%w: group %d", engine.ErrNotFound, id)
	}
	if !g.isMember(viewer) {
		return nil, fmt.Errorf("%w: not a member", engine.ErrForbidden)
	}
	return g, nil
}

// CreateGroup implements engine.Store.
func (m *Model) CreateGroup(_ context.Context, viewer engine.UserID, members []engine.UserID) (engine.GroupID, error) {
	if err := engine.CheckViewer(viewer); err != nil {
		return 0, err
	}
	us, err := engine.NormalizeUsers(members)
	if err != nil {
		return 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	g := newGroup()
	g.join(viewer)
	for _, u := range us {
		g.join(u)
	}
	id := engine.GroupID(m.nextID())
	m.groups[id] = g
	return id, nil
}

// AddGroupMembers implements engine.Store.
func (m *Model) AddGroupMembers(_ context.Context, viewer engine.UserID, id engine.GroupID, users []engine.UserID) error {
	if err := engine.CheckViewer(viewer); err != nil {
		return err
	}
	us, err := engine.NormalizeUsers(users)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	g, err := m.memberGroup(viewer, id)
	if err != nil {
		return err
	}
	for _, u := range us {
		g.join(u)
	}
	return nil
}

// LeaveGroup implements engine.Store: only a current member leaves
// (anyone else, one who left already included, is ErrForbidden), and
// gets the group as it is once they have left.
func (m *Model) LeaveGroup(_ context.Context, viewer engine.UserID, id engine.GroupID) (engine.Group, error) {
	if err := engine.CheckViewer(viewer); err != nil {
		return engine.Group{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	g, err := m.memberGroup(viewer, id)
	if err != nil {
		return engine.Group{}, err
	}
	g.quit[viewer] = true
	return g.view(id), nil
}

// Group implements engine.Store.
func (m *Model) Group(_ context.Context, viewer engine.UserID, id engine.GroupID) (engine.Group, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	g, err := m.memberGroup(viewer, id)
	if err != nil {
		return engine.Group{}, err
	}
	return g.view(id), nil
}

// view is the group as Group reads it: its current members' count and
// first page.
func (g *group) view(id engine.GroupID) engine.Group {
	ms := g.members()
	return engine.Group{ID: id, MemberCount: len(ms), Members: ms[:min(len(ms), engine.MaxPageSize)]}
}

// GroupMembers implements engine.Store.
func (m *Model) GroupMembers(_ context.Context, viewer engine.UserID, id engine.GroupID, first int, after engine.UserID) ([]engine.UserID, error) {
	if err := engine.CheckPage(first); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	g, err := m.memberGroup(viewer, id)
	if err != nil {
		return nil, err
	}
	from, err := g.cursor(after)
	if err != nil {
		return nil, err
	}
	out := []engine.UserID{}
	for mapid := from + 1; mapid <= len(g.byMap) && len(out) < first; mapid++ {
		if u := g.byMap[mapid-1]; u != 0 && !g.quit[u] {
			out = append(out, u)
		}
	}
	return out, nil
}

// cursor is the mapid of the user a page starts after (0: from the
// first); a user who never joined is ErrInvalid.
func (g *group) cursor(after engine.UserID) (int, error) {
	if after == 0 {
		return 0, nil
	}
	mapid, ok := g.mapid[after]
	if !ok {
		return 0, invalid("user %d never joined the group", after)
	}
	return mapid, nil
}

// Joined lists everyone who ever joined group id, in mapid order (for a
// workload generator choosing page cursors).
func (m *Model) Joined(id engine.GroupID) []engine.UserID {
	m.mu.Lock()
	defer m.mu.Unlock()
	if g := m.groups[id]; g != nil {
		return slices.Clone(g.byMap)
	}
	return nil
}

// SendMessage implements engine.Store.
func (m *Model) SendMessage(_ context.Context, viewer engine.UserID, id engine.GroupID, text string, mentions []engine.UserID, idemKey string) (engine.Message, error) {
	if err := engine.CheckViewer(viewer); err != nil {
		return engine.Message{}, err
	}
	if err := engine.CheckText(text); err != nil {
		return engine.Message{}, err
	}
	ms, err := engine.NormalizeMentions(viewer, mentions)
	if err != nil {
		return engine.Message{}, err
	}
	if err := engine.CheckIdemKey(idemKey); err != nil {
		return engine.Message{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	fp := engine.IdemFingerprint(engine.IdemSendMessage, engine.IdemArgs{Group: id, Text: text, Mentions: ms})
	if r, ok, err := m.lookupIdem(viewer, idemKey, fp); err != nil || ok {
		return r.msg, err
	}
	g, err := m.memberGroup(viewer, id)
	if err != nil {
		return engine.Message{}, err
	}
	mid := m.nextID()
	msg := &message{
		Message: engine.Message{ID: engine.MessageID(mid), Group: id, Sender: viewer, Text: text, SentAt: snowflake.Time(mid)},
		maxid:   len(g.byMap), senderMap: g.mapid[viewer], quit: map[int]bool{}, read: map[int]bool{},
	}
	for u := range g.quit {
		msg.quit[g.mapid[u]] = true
	}
	for mapid := range g.gone {
		msg.quit[mapid] = true
	}
	m.messages[msg.ID] = msg
	for _, u := range g.members() {
		if u != viewer {
			m.user(u).messages++
		}
	}
	for _, u := range ms {
		if g.isMember(u) {
			m.user(u).mentions++
		}
	}
	m.recordIdem(viewer, idemKey, idemRec{fp: fp, msg: msg.Message})
	return msg.Message, nil
}

// MessageInfo returns message id whoever asks (for a workload generator).
func (m *Model) MessageInfo(id engine.MessageID) (engine.Message, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if msg := m.messages[id]; msg != nil {
		return msg.Message, nil
	}
	return engine.Message{}, fmt.Errorf("%w: message %d", engine.ErrNotFound, id)
}

// Message implements engine.Store.
func (m *Model) Message(_ context.Context, viewer engine.UserID, id engine.MessageID) (engine.Message, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	msg, _, err := m.memberMessage(viewer, id)
	if err != nil {
		return engine.Message{}, err
	}
	return msg.Message, nil
}

func (m *Model) memberMessage(viewer engine.UserID, id engine.MessageID) (*message, *group, error) {
	msg := m.messages[id]
	if msg == nil {
		return nil, nil, fmt.Errorf("%w: message %d", engine.ErrNotFound, id)
	}
	g, err := m.memberGroup(viewer, msg.Group)
	return msg, g, err
}

// MarkMessagesRead implements engine.Store: all or nothing.
func (m *Model) MarkMessagesRead(_ context.Context, viewer engine.UserID, ids []engine.MessageID) ([]engine.Message, error) {
	if err := engine.CheckViewer(viewer); err != nil {
		return nil, err
	}
	if err := engine.CheckIDs(ids); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]engine.Message, len(ids))
	for _, id := range ids {
		if m.messages[id] == nil {
			// Unknown before forbidden, wherever it is in the list:
			// an unknown id hides nothing.
			return nil, fmt.Errorf("%w: message %d", engine.ErrNotFound, id)
		}
	}
	for i, id := range ids {
		msg, _, err := m.memberMessage(viewer, id)
		if err != nil {
			return nil, err
		}
		out[i] = msg.Message
	}
	for _, id := range ids {
		msg := m.messages[id]
		msg.read[m.groups[msg.Group].mapid[viewer]] = true
	}
	return out, nil
}

// senderMessage returns a message for its sender while a member.
func (m *Model) senderMessage(viewer engine.UserID, id engine.MessageID) (*message, *group, error) {
	msg := m.messages[id]
	if msg == nil {
		return nil, nil, fmt.Errorf("%w: message %d", engine.ErrNotFound, id)
	}
	g := m.groups[msg.Group]
	if msg.Sender != viewer || !g.isMember(viewer) {
		return nil, nil, fmt.Errorf("%w: only the sender, while a member, sees read receipts", engine.ErrForbidden)
	}
	return msg, g, nil
}

// counted reports whether mapid counts in msg's receipts.
func (msg *message) counted(mapid int) bool {
	return mapid <= msg.maxid && mapid != msg.senderMap && !msg.quit[mapid]
}

// ReceiptMembers implements engine.Store.
func (m *Model) ReceiptMembers(_ context.Context, viewer engine.UserID, id engine.MessageID, readers bool, first int, after engine.UserID) ([]engine.UserID, error) {
	if err := engine.CheckPage(first); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	msg, g, err := m.senderMessage(viewer, id)
	if err != nil {
		return nil, err
	}
	from, err := g.cursor(after)
	if err != nil {
		return nil, err
	}
	out := []engine.UserID{}
	for mapid := from + 1; mapid <= msg.maxid && len(out) < first; mapid++ {
		// An erased member still counts, but no list names them.
		if u := g.byMap[mapid-1]; u != 0 && msg.counted(mapid) && msg.read[mapid] == readers {
			out = append(out, u)
		}
	}
	return out, nil
}

// Receipts implements engine.Store.
func (m *Model) Receipts(_ context.Context, viewer engine.UserID, id engine.MessageID, limit int) (engine.Receipts, error) {
	limit, err := engine.ClampPage(limit)
	if err != nil {
		return engine.Receipts{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	msg, g, err := m.senderMessage(viewer, id)
	if err != nil {
		return engine.Receipts{}, err
	}
	var r engine.Receipts
	for mapid := 1; mapid <= msg.maxid; mapid++ {
		if !msg.counted(mapid) {
			continue
		}
		u := g.byMap[mapid-1]
		if msg.read[mapid] {
			r.ReadCount++
			if u != 0 && len(r.Readers) < limit {
				r.Readers = append(r.Readers, u)
			}
		} else {
			r.UnreadCount++
			if u != 0 && len(r.Unreaders) < limit {
				r.Unreaders = append(r.Unreaders, u)
			}
		}
	}
	return r, nil
}

// ImportKinds implements engine.Importer.
func (m *Model) ImportKinds() counters.Kinds { return m.kindIDs }

// Import implements engine.Importer: a row registers an unknown post when
// it has an author or a non-zero count (a reaction kind's too), and
// replaces the counts of every post it names, each reaction kind's
// included (a known post imported with zeros reads zeros). Reactions
// themselves are not imported: who reacted stays as it was.
func (m *Model) Import(_ context.Context, rows []engine.ImportRow) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, row := range rows {
		c := row.Counts
		if row.Post == 0 {
			return invalid("post id 0")
		}
		if min(c.Likes, c.Comments, c.Reposts, c.Views, c.Favorites) < 0 {
			return invalid("post %d has a negative count", row.Post)
		}
		for j, v := range row.Reactions {
			if v < 0 || v > 0 && m.kindIDs.Name(counters.Kind(j+2)) == "" {
				return invalid("post %d: count %d of reaction kind id %d", row.Post, v, j+2)
			}
		}
	}
	for _, row := range rows {
		if m.deleted[row.Post] {
			continue // a deleted post stays deleted
		}
		p := m.posts[row.Post]
		if p == nil {
			if row.Author == 0 && row.Counts.IsZero() && row.Reactions.IsZero() {
				continue // nothing says this post exists
			}
			p = &post{}
			m.posts[row.Post] = p
		}
		if p.author == 0 && row.Author != 0 {
			// A post known without its author learns it from the
			// first import that names one.
			p.author = row.Author
			m.user(row.Author).posts++
		}
		p.counts = row.Counts
		p.kinds = nil
		for j, v := range row.Reactions {
			if v != 0 {
				p.addReaction(m.kindIDs.Name(counters.Kind(j+2)), v)
			}
		}
	}
	return nil
}

// Subscribe implements engine.Store: the model has no events.
func (m *Model) Subscribe(func(engine.Event)) (cancel func()) { return func() {} }

// Ready implements engine.Store.
func (m *Model) Ready(context.Context) error { return nil }

// Stats implements engine.Store: not modelled.
func (m *Model) Stats() engine.Stats { return engine.Stats{} }

// Close implements engine.Store.
func (m *Model) Close() error { return nil }

func actorCheck(a engine.Actor) error { return engine.CheckViewer(a.User) }

// DeleteComment implements engine.Store.
func (m *Model) DeleteComment(_ context.Context, actor engine.Actor, id engine.PostID, comment engine.CommentID) error {
	if err := actorCheck(actor); err != nil {
		return err
	}
	if id == 0 || comment == 0 {
		return invalid("post and comment ids must not be 0")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.posts[id]
	if p == nil {
		return fmt.Errorf("%w: post %d", engine.ErrNotFound, id)
	}
	live, known := m.comments[id][comment]
	if !known {
		return fmt.Errorf("%w: comment %d", engine.ErrNotFound, comment)
	}
	owner := actor.Privileged || m.writers[wrote{actor.User, comment}] || (p.author != 0 && p.author == actor.User)
	if !owner {
		return fmt.Errorf("%w: not the comment's writer or the post's author", engine.ErrForbidden)
	}
	if !live {
		return nil
	}
	m.comments[id][comment] = false
	if p.counts.Comments > 0 { // an import may have set it below the ids counted
		p.counts.Comments--
	}
	return nil
}

// DeletePost implements engine.Store.
func (m *Model) DeletePost(_ context.Context, actor engine.Actor, id engine.PostID) error {
	if err := actorCheck(actor); err != nil {
		return err
	}
	if id == 0 {
		return invalid("post id 0")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.deleted[id] {
		return nil
	}
	p := m.posts[id]
	if p == nil {
		return fmt.Errorf("%w: post %d", engine.ErrNotFound, id)
	}
	if !actor.Privileged && (p.author == 0 || p.author != actor.User) {
		return fmt.Errorf("%w: not the post's author", engine.ErrForbidden)
	}
	delete(m.posts, id)
	m.deleted[id] = true
	if p.author != 0 {
		m.user(p.author).deleted++
	}
	if orig, ok := m.repostOf[id]; ok {
		if o := m.posts[orig]; o != nil && o.counts.Reposts > 0 {
			o.counts.Reposts--
		}
	}
	for k := range m.reacts {
		if k.p == id {
			delete(m.reacts, k)
		}
	}
	for k := range m.favs {
		if k.p == id {
			delete(m.favs, k)
		}
	}
	delete(m.comments, id)
	return nil
}

// EraseUser implements engine.Store, all at once.
func (m *Model) EraseUser(_ context.Context, u engine.UserID) error {
	if err := engine.CheckViewer(u); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for k, kind := range m.reacts {
		if k.u == u {
			delete(m.reacts, k)
			if p := m.posts[k.p]; p != nil {
				p.addReaction(kind, -1)
			}
		}
	}
	for k := range m.favs {
		if k.u == u {
			delete(m.favs, k)
			if p := m.posts[k.p]; p != nil && p.counts.Favorites > 0 {
				p.counts.Favorites--
			}
		}
	}
	for k := range m.writers {
		if k.u == u {
			delete(m.writers, k)
		}
	}
	for t := range m.follows[u] {
		m.user(t).followers--
	}
	delete(m.follows, u)
	for v, fs := range m.follows {
		if _, ok := fs[u]; ok {
			delete(fs, u)
			m.user(v).following--
		}
	}
	for _, p := range m.posts {
		if p.author == u {
			p.author = 0
		}
	}
	for _, msg := range m.messages {
		if msg.Sender == u {
			msg.Sender = 0
		}
	}
	for _, g := range m.groups {
		mapid, ok := g.mapid[u]
		if !ok {
			continue
		}
		g.byMap[mapid-1] = 0
		g.gone[mapid] = true
		delete(g.mapid, u)
		delete(g.quit, u)
	}
	for k := range m.idem {
		if k.viewer == u {
			delete(m.idem, k)
		}
	}
	delete(m.users, u)
	return nil
}
