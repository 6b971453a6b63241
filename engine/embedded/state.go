package embedded

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"path/filepath"
	"slices"
	"sort"
	"time"
	"unsafe"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/counters"
	"github.com/tally-dev/tally/engine/follows"
	"github.com/tally-dev/tally/engine/likeset"
	"github.com/tally-dev/tally/engine/postcounts"
	"github.com/tally-dev/tally/engine/receipts"
	"github.com/tally-dev/tally/engine/registry"
	"github.com/tally-dev/tally/engine/table"
)

// idemKey is a 128-bit hash of (op kind, viewer, idempotency key). The
// record carries the hash rather than the key, which keeps records small
// and makes the key's length irrelevant to the state.
type idemKey [2]uint64

// pair keys the (user, post) like and favorite sets and the (group, user)
// membership table.
type pair [2]uint64

func hashU64(k uint64) uint64   { return table.Mix64(k) }
func hashPair(k pair) uint64    { return table.HashPair(k[0], k[1]) }
func hashIdem(k idemKey) uint64 { return table.HashPair(k[0], k[1]) }

// userRec is one user's badge state, packed (40 bytes, no pointers). The
// four unread counters are 32-bit: nearly every user's are small, but a
// celebrity's unread likes can pass 2^32 in a day and the badge must stay
// exact, so a counter at wideMark holds its value in state.wide instead
// (seed 003's narrow field with an escape to an overflow table).
type userRec struct {
	n      [4]uint32 // unread mentions, comments, likes, messages (nMentions...)
	day    uint32    // last active, in days since the Unix epoch
	flags  uint32
	click  int64  // Unix ns of the last red-dot click; 0: never
	cursor uint64 // last system notification seen, if flagCursor
}

// The counters of userRec.n.
const (
	nMentions = iota
	nComments
	nLikes
	nMessages
)

// wideMark in userRec.n says the counter's value is in state.wide.
const wideMark = math.MaxUint32

// bump adds 1 to unread counter k of user u.
func (st *state) bump(u uint64, k int) {
	r := st.user(u)
	switch {
	case r.n[k] < wideMark-1:
		r.n[k]++
	case r.n[k] == wideMark-1:
		r.n[k] = wideMark
		st.wide.Upsert(u)[k] = wideMark
	default:
		w, _ := st.wide.Ref(u)
		w[k]++
	}
}

// counter returns unread counter k of u, whose record is r.
func (st *state) counter(u uint64, r *userRec, k int) int64 {
	if r.n[k] != wideMark {
		return int64(r.n[k])
	}
	w, _ := st.wide.Get(u)
	return w[k]
}

// setCounter sets unread counter k of u, whose record is r, to v >= 0.
func (st *state) setCounter(u uint64, r *userRec, k int, v int64) {
	if r.n[k] == wideMark {
		w, _ := st.wide.Ref(u)
		if w[k] = 0; *w == [4]int64{} {
			st.wide.Delete(u)
		}
	}
	if v < wideMark {
		r.n[k] = uint32(v)
		return
	}
	r.n[k] = wideMark
	st.wide.Upsert(u)[k] = v
}

// flagCursor: the user has a system cursor. Without one the user is new
// (or was idle long enough to be forgotten) and reads 0 system unread.
const flagCursor = 1

// profile is one user's public counters. Following is not stored: it is
// the length of the user's followee list.
type profile struct {
	posts, followers int64
}

// notif is one system notification; its title and body live in
// state.notifText so that the list holds no pointers.
type notif struct {
	id                uint64
	time              int64
	off               uint64
	titleLen, bodyLen uint32
}

// group maps mapids to users. mapid i+1 belongs to byMap[i] forever;
// leaving only sets the quit bit, so old messages' bitmaps stay readable
// and a returning member gets their old mapid back (seeds/004).
type group struct {
	id      uint64
	byMap   []uint64
	quit    []uint64 // bit i: mapid i+1 has quit
	current int      // members who have not quit
}

func (g *group) hasQuit(mapid uint32) bool {
	i := mapid - 1
	return g.quit[i/64]&(1<<(i%64)) != 0
}

func (g *group) setQuit(mapid uint32, q bool) {
	i := mapid - 1
	if q {
		g.quit[i/64] |= 1 << (i % 64)
	} else {
		g.quit[i/64] &^= 1 << (i % 64)
	}
}

// currentAfter calls fn for the current members with a mapid above after,
// in mapid order, at most limit of them. It walks the quit words, so a
// stretch of members who left costs a word operation per 64 of them.
func (g *group) currentAfter(after uint32, limit int, fn func(u uint64)) {
	n := uint32(len(g.byMap))
	for w := int(after / 64); limit > 0 && w < len(g.quit); w++ {
		x := ^g.quit[w]
		if w == int(after/64) {
			x &^= 1<<(after%64) - 1
		}
		for ; x != 0 && limit > 0; x &= x - 1 {
			i := uint32(w*64 + bits.TrailingZeros64(x)) // mapid i+1
			if i >= n {
				return
			}
			fn(g.byMap[i])
			limit--
		}
	}
}

// quitters yields the mapids that have quit, in order.
func (g *group) quitters(yield func(uint32) bool) {
	for w, word := range g.quit {
		for word != 0 {
			if !yield(uint32(w*64+bits.TrailingZeros64(word)) + 1) {
				return
			}
			word &= word - 1
		}
	}
}

// join gives u the next mapid.
func (g *group) join(u uint64) uint32 {
	g.byMap = append(g.byMap, u)
	if len(g.byMap) > len(g.quit)*64 {
		g.quit = append(g.quit, 0)
	}
	g.current++
	return uint32(len(g.byMap))
}

// message is one group message; its text lives in state.msgText.
type message struct {
	id, group, sender uint64
	time              int64
	off               uint64
	textLen           uint32
	rc                receipts.Receipt
}

type idemVal struct {
	result uint64
	time   int64
	fp     uint64 // engine.IdemFingerprint of the first call; 0: not recorded
}

type idemExpiry struct {
	time int64
	key  idemKey
}

// state is everything the engine knows, changed only by apply. It holds no
// pointers between its parts (ids and slice indices only), so it can be
// serialized and rebuilt. Not safe for concurrent use: the engine locks.
type state struct {
	posts  *registry.Registry // post → author (0: imported without one)
	counts *postcounts.Store
	likes  *likeset.Set // (user, post), tiered by the post's time window
	favs   *likeset.Set
	// err is the first error a tiered store's cold file returned while
	// applying a record (see Engine.commit).
	err error

	users    *table.Table[uint64, userRec]
	wide     *table.Table[uint64, [4]int64] // unread counters past 32 bits (userRec)
	profiles *table.Table[uint64, profile]
	// follows is each viewer's followee list with the followee's post
	// count when the viewer last caught up (the feed snapshot): packed,
	// pointer-free (engine/follows).
	follows *follows.Store
	nusers  int64 // distinct users in users ∪ profiles ∪ follows

	notifs    []notif // sorted by id
	notifText []byte
	push      int64 // Unix ns of the last red-dot push; 0: never

	groups    *table.Table[uint64, uint32] // group → index in groupList
	groupList []group
	members   *table.Table[pair, uint32]   // (group, user) → mapid
	msgs      *table.Table[uint64, uint32] // message → index in msgList
	msgList   []message
	msgText   []byte
	rcBytes   int // receipts' SizeBytes summed, for MemoryBytes

	idem  *table.Table[idemKey, idemVal]
	idemQ []idemExpiry // in time order; idemQ[idemHead:] are live
	// idemHead is where the queue's live part starts.
	idemHead int
}

// newState makes an empty state whose post counts are kept as co says.
func newState(co postcounts.Options) *state {
	return &state{
		posts:    newRegistry(co),
		counts:   newCounts(co),
		likes:    newLikeset(co),
		favs:     newLikeset(co),
		users:    table.New[uint64, userRec](hashU64, 1024),
		wide:     table.New[uint64, [4]int64](hashU64, 8),
		profiles: table.New[uint64, profile](hashU64, 1024),
		follows:  follows.New(0),
		groups:   table.New[uint64, uint32](hashU64, 64),
		members:  table.New[pair, uint32](hashPair, 256),
		msgs:     table.New[uint64, uint32](hashU64, 256),
		idem:     table.New[idemKey, idemVal](hashIdem, 256),
	}
}

// known reports whether u has any state, for the Users statistic.
func (st *state) known(u uint64) bool {
	if _, ok := st.users.Get(u); ok {
		return true
	}
	if _, ok := st.profiles.Get(u); ok {
		return true
	}
	return st.follows.Has(u)
}

// user returns u's badge record, creating it. The pointer is valid until
// the next insert into or delete from st.users.
func (st *state) user(u uint64) *userRec {
	if r, ok := st.users.Ref(u); ok {
		return r
	}
	if !st.known(u) {
		st.nusers++
	}
	return st.users.Upsert(u)
}

// profile returns u's public counters, creating them; valid as user's.
func (st *state) profile(u uint64) *profile {
	if p, ok := st.profiles.Ref(u); ok {
		return p
	}
	if !st.known(u) {
		st.nusers++
	}
	return st.profiles.Upsert(u)
}

func (st *state) postCount(u uint64) int64 {
	p, _ := st.profiles.Get(u)
	return p.posts
}

// newestNotif returns the id of the newest system notification, 0 if none.
func (st *state) newestNotif() uint64 {
	if n := len(st.notifs); n > 0 {
		return st.notifs[n-1].id
	}
	return 0
}

// notifsAfter counts the notifications newer than id: binary search, so a
// badge read costs O(log n) however long the list.
func (st *state) notifsAfter(id uint64) int {
	i := sort.Search(len(st.notifs), func(i int) bool { return st.notifs[i].id > id })
	return len(st.notifs) - i
}

func (st *state) notification(n *notif) engine.Notification {
	t := st.notifText[n.off : n.off+uint64(n.titleLen)+uint64(n.bodyLen)]
	return engine.Notification{
		ID:        engine.NotificationID(n.id),
		Title:     string(t[:n.titleLen]),
		Body:      string(t[n.titleLen:]),
		CreatedAt: nsTime(n.time),
	}
}

func (st *state) group(id uint64) (*group, bool) {
	i, ok := st.groups.Get(id)
	if !ok {
		return nil, false
	}
	return &st.groupList[i], true
}

// memberOf returns u's mapid in g and whether u is a current member.
func (st *state) memberOf(g *group, u uint64) (mapid uint32, current bool) {
	mapid, ok := st.members.Get(pair{g.id, u})
	if !ok {
		return 0, false
	}
	return mapid, !g.hasQuit(mapid)
}

func (st *state) message(id uint64) (*message, bool) {
	i, ok := st.msgs.Get(id)
	if !ok {
		return nil, false
	}
	return &st.msgList[i], true
}

func (st *state) messageOut(m *message) engine.Message {
	return engine.Message{
		ID:     engine.MessageID(m.id),
		Group:  engine.GroupID(m.group),
		Sender: engine.UserID(m.sender),
		Text:   string(st.msgText[m.off : m.off+uint64(m.textLen)]),
		SentAt: nsTime(m.time),
	}
}

// idemLookup returns what the op logged under k recorded, if it is younger
// than engine.IdempotencyTTL at now.
func (st *state) idemLookup(k idemKey, now int64) (idemVal, bool) {
	v, ok := st.idem.Get(k)
	if !ok || engine.IdemExpired(nsTime(v.time), nsTime(now)) {
		return idemVal{}, false
	}
	return v, true
}

// expireIdem forgets idempotency keys older than the TTL at time now. It
// runs at the start of every apply, with the op's own time, so replay
// forgets exactly what the live engine forgot.
func (st *state) expireIdem(now int64) {
	at := nsTime(now)
	q := st.idemQ
	h := st.idemHead
	for h < len(q) && engine.IdemExpired(nsTime(q[h].time), at) {
		// A key re-logged later (after it expired) has a newer time in the
		// table; only the entry this queue slot put there is removed.
		if v, ok := st.idem.Get(q[h].key); ok && v.time == q[h].time {
			st.idem.Delete(q[h].key)
		}
		h++
	}
	// Compact once the dead prefix is the larger half, keeping the queue
	// amortised O(1) per key.
	if h > 1024 && h > len(q)/2 {
		n := copy(q, q[h:])
		q, h = q[:n], 0
	}
	st.idemQ, st.idemHead = q, h
}

// day returns the day number of a Unix-ns time.
func day(ns int64) uint32 { return uint32(ns / nsPerDay) }

const nsPerDay = int64(24 * 60 * 60 * 1e9)

// cursorLive reports whether r's system cursor still counts at now, by
// engine.CursorExpired (r.day is the user's last activity day).
func cursorLive(r *userRec, now, ttl int64) bool {
	return r.flags&flagCursor != 0 &&
		!engine.CursorExpired(time.Unix(0, int64(r.day)*nsPerDay), time.Unix(0, now), time.Duration(ttl))
}

// unread computes viewer's badges at now. It also reports whether the
// viewer needs a touch op: a first visit (set the cursor), a cursor that
// has expired (set it again), or a new day of activity.
func (st *state) unread(viewer uint64, now, ttl int64) (u engine.Unread, touch bool) {
	r, ok := st.users.Get(viewer)
	if ok {
		u.Mentions, u.Comments = st.counter(viewer, &r, nMentions), st.counter(viewer, &r, nComments)
		u.Likes, u.Messages = st.counter(viewer, &r, nLikes), st.counter(viewer, &r, nMessages)
	}
	live := ok && cursorLive(&r, now, ttl)
	if live {
		u.System = int64(st.notifsAfter(r.cursor))
	}
	targets, snaps := st.follows.List(viewer)
	for i, f := range targets {
		// As engine.FeedUnread: a count below the snapshot (an import
		// replaced it) adds nothing rather than subtracting.
		if d := st.postCount(f) - snaps[i]; d > 0 {
			u.Feed += d
		}
	}
	u.RedDot = st.push > r.click
	return u, !live || r.day != day(now)
}

// apply performs o on the state. It is deterministic: the result depends
// only on the state and o, so replaying the log rebuilds the state
// exactly. It never fails; prepare has rejected ops that would. When out
// is non-nil (live commits, not replay) apply appends the events o causes.
func (st *state) apply(o *op, out *[]engine.Event) {
	st.expireIdem(o.time)
	switch o.kind {
	case opCreatePost:
		st.addPost(o.a, o.viewer, out)
	case opLike:
		st.setLike(st.likes, counters.Likes, o, out)
	case opUnlike:
		st.clearLike(st.likes, counters.Likes, o)
	case opFavorite:
		st.setLike(st.favs, counters.Favorites, o, out)
	case opUnfavorite:
		st.clearLike(st.favs, counters.Favorites, o)
	case opComment:
		st.applyComment(o, out)
	case opRepost:
		st.applyRepost(o, out)
	case opViews:
		st.applyViews(o)
	case opFollow:
		// A follow or unfollow that changes nothing records nothing, not
		// even its idempotency key.
		if !st.applyFollow(o, out) {
			return
		}
	case opUnfollow:
		if !st.applyUnfollow(o, out) {
			return
		}
	case opTouch:
		st.applyTouch(o)
	case opMarkRead:
		st.applyMarkRead(o, out)
	case opClickRedDot:
		st.applyClickRedDot(o, out)
	case opPushRedDot:
		st.applyPushRedDot(o, out)
	case opPublish:
		st.applyPublish(o, out)
	case opCreateGroup:
		st.applyCreateGroup(o)
	case opAddMembers:
		st.applyAddMembers(o)
	case opLeaveGroup:
		st.applyLeaveGroup(o)
	case opSendMessage:
		st.applySendMessage(o, out)
	case opMarkMessagesRead:
		st.applyMarkMessagesRead(o, out)
	case opSweepCursors:
		st.sweepCursors(o.time, int64(o.a))
	case opImport:
		st.importRows(o.list, o.time)
	}
	if o.idem != (idemKey{}) {
		st.idem.Put(o.idem, idemVal{result: opResult(o), time: o.time, fp: o.fp})
		st.idemQ = append(st.idemQ, idemExpiry{o.time, o.idem})
	}
}

// opResult is what a retry of o with the same idempotency key returns.
func opResult(o *op) uint64 {
	switch o.kind {
	case opRepost, opSendMessage:
		return o.b
	}
	return o.a
}

// author returns post's author (0: none or unknown). A cold registry
// block that cannot be read is noted in st.err and reads as no author.
func (st *state) author(post uint64) uint64 {
	a, _, err := st.posts.Get(post)
	st.noteErr(err)
	return a
}

func (st *state) noteErr(err error) {
	if err != nil && st.err == nil {
		st.err = err
	}
}

// fault returns the first cold-tier error met while applying records.
func (st *state) fault() error {
	if err := st.counts.Err(); err != nil {
		return err
	}
	return st.err
}

func (st *state) addPost(post, author uint64, out *[]engine.Event) {
	_, err := st.posts.Put(post, author)
	st.noteErr(err)
	st.profile(author).posts++
	if out != nil {
		*out = append(*out, engine.Event{Kind: engine.AuthorPosted, Author: engine.UserID(author)})
	}
}

// setLike adds (viewer, post) to set; the like's count and the author's
// badge move only if it was not there, so one record carries the whole
// de-duplicated effect.
func (st *state) setLike(set *likeset.Set, f counters.Field, o *op, out *[]engine.Event) {
	if !set.Add(o.viewer, o.a) {
		return
	}
	st.counts.Add(o.a, f, 1)
	if f != counters.Likes {
		return
	}
	if a := st.author(o.a); a != 0 && a != o.viewer {
		st.bump(a, nLikes)
		emitUnread(out, []engine.UserID{engine.UserID(a)})
	}
}

func (st *state) clearLike(set *likeset.Set, f counters.Field, o *op) {
	if set.Remove(o.viewer, o.a) {
		st.counts.Add(o.a, f, -1)
	}
}

// mention bumps the unread mentions of users (already normalised) and,
// when collecting events, returns bumped with them appended.
func (st *state) mention(users []uint64, bumped []engine.UserID, collect bool) []engine.UserID {
	for _, u := range users {
		st.bump(u, nMentions)
		if collect {
			bumped = append(bumped, engine.UserID(u))
		}
	}
	return bumped
}

// addMember makes u a current member of g: a returning member gets their
// old mapid back, a new one the next mapid.
func (st *state) addMember(g *group, u uint64) {
	mapid, cur := st.memberOf(g, u)
	switch {
	case cur:
	case mapid != 0:
		g.setQuit(mapid, false)
		g.current++
	default:
		st.members.Put(pair{g.id, u}, g.join(u))
	}
}

func (st *state) applySendMessage(o *op, out *[]engine.Event) {
	g, ok := st.group(o.a)
	if !ok {
		return
	}
	senderMap, _ := st.memberOf(g, o.viewer)
	maxID := uint32(len(g.byMap))
	off := uint64(len(st.msgText))
	st.msgText = append(st.msgText, o.s1...)
	st.msgs.Put(o.b, uint32(len(st.msgList)))
	rc := receipts.New(maxID, senderMap, g.quitters)
	st.rcBytes += rc.SizeBytes()
	st.msgList = append(st.msgList, message{id: o.b, group: o.a, sender: o.viewer, time: o.time,
		off: off, textLen: uint32(len(o.s1)), rc: rc})

	// Every other current member gets +1 message; this is O(members) per
	// message, which groups (unlike followers) can afford.
	var bumped []engine.UserID
	if out != nil {
		bumped = make([]engine.UserID, 0, g.current)
	}
	for i, u := range g.byMap {
		if u == o.viewer || g.hasQuit(uint32(i+1)) {
			continue
		}
		st.bump(u, nMessages)
		if out != nil {
			bumped = append(bumped, engine.UserID(u))
		}
	}
	for _, u := range o.list {
		if _, cur := st.memberOf(g, u); cur {
			st.bump(u, nMentions)
		}
	}
	emitUnread(out, bumped)
}

// sweepCursors drops the system cursors that expired at now, and the
// badge records left holding nothing. A dropped cursor reads exactly as an
// expired one (cursorLive), so the sweep changes memory, never answers.
func (st *state) sweepCursors(now, ttl int64) {
	var expired []uint64
	st.users.Range(func(u uint64, r userRec) bool {
		if r.flags&flagCursor != 0 && !cursorLive(&r, now, ttl) {
			expired = append(expired, u)
		}
		return true
	})
	for _, u := range expired {
		r, _ := st.users.Ref(u)
		r.flags &^= flagCursor
		r.cursor = 0
		if (*r == userRec{day: r.day}) {
			st.users.Delete(u)
			if !st.known(u) {
				st.nusers--
			}
		}
	}
}

// importRows registers the posts of an import record and replaces their
// counts (engine.Importer): the counts in one postcounts.Import and the
// authors in one registry.Import, so that old windows of both are built
// straight into sealed form. at (the record's time) is the clock that
// tells old windows from open ones: it changes the layout, never a value.
func (st *state) importRows(list []uint64, at int64) {
	var reg []registry.Row
	pending := map[uint64]uint64{} // this record's registrations, by post
	st.counts.Import(func(yield func(uint64, engine.Counts) bool) {
		for row := range slices.Chunk(list, importStride) {
			post, author := row[0], row[1]
			c := engine.Counts{Likes: int64(row[2]), Comments: int64(row[3]), Reposts: int64(row[4]),
				Views: int64(row[5]), Favorites: int64(row[6])}
			old, exists := pending[post]
			if !exists {
				var err error
				if old, exists, err = st.posts.Get(post); err != nil {
					st.noteErr(err)
					continue
				}
			}
			switch {
			case !exists && author == 0 && c.IsZero():
				continue
			case !exists || (old == 0 && author != 0):
				pending[post] = author
				reg = append(reg, registry.Row{ID: post, Author: author})
				if author != 0 {
					st.profile(author).posts++
				}
			}
			if !yield(post, c) {
				return
			}
		}
	})
	st.noteErr(st.posts.Import(reg, time.Unix(0, at)))
}

// newCounts makes a post-count store. The options were checked by Open
// (checkCounts), so an error here is a bug.
func newCounts(co postcounts.Options) *postcounts.Store {
	s, err := postcounts.New(co)
	if err != nil {
		panic(fmt.Sprintf("embedded: post-count options: %v", err))
	}
	return s
}

// maintain seals and compacts the state's post counts and registry in
// one go, for a state no reader shares (one rebuilt to be written out).
func (st *state) maintain(now time.Time) error {
	return errors.Join(st.posts.Maintain(now), st.likes.Maintain(now), st.favs.Maintain(now), st.counts.Maintain(now))
}

// newRegistry makes the post registry, windowed, sealed and cooled as the
// counts are; its cold files are in the counts' cold directory (derived
// data, cleared at open), in a folder of their own. The memory budget
// bounds each of the two stores' own bytes. The options were checked by
// Open (checkCounts).
func newRegistry(co postcounts.Options) *registry.Registry {
	ro := registry.Options{WindowMillis: co.WindowMillis, OpenAge: co.OpenAge}
	if co.Dir != "" {
		ro.Dir, ro.ColdAge, ro.MemoryBudget = filepath.Join(co.Dir, "registry"), co.ColdAge, co.MemoryBudget
	}
	r, err := registry.New(ro)
	if err != nil {
		panic(fmt.Sprintf("embedded: registry options: %v", err))
	}
	return r
}

// newLikeset makes a like or favorite set, windowed and sealed as the
// counts are.
func newLikeset(co postcounts.Options) *likeset.Set {
	s, err := likeset.New(likeset.Options{WindowMillis: co.WindowMillis, OpenAge: co.OpenAge})
	if err != nil {
		panic(fmt.Sprintf("embedded: like set options: %v", err))
	}
	return s
}

// Record sizes for MemoryBytes.
const (
	sizeofNotif      = unsafe.Sizeof(notif{})
	sizeofIdemExpiry = unsafe.Sizeof(idemExpiry{})
	sizeofMessage    = unsafe.Sizeof(message{})
)

func emitUnread(out *[]engine.Event, users []engine.UserID) {
	if out != nil && len(users) > 0 {
		*out = append(*out, engine.Event{Kind: engine.UnreadChanged, Users: users})
	}
}

func emitBroadcast(out *[]engine.Event) {
	if out != nil {
		*out = append(*out, engine.Event{Kind: engine.Broadcast})
	}
}

func emitFollows(out *[]engine.Event, o *op) {
	if out != nil {
		*out = append(*out, engine.Event{Kind: engine.FollowsChanged,
			Users: []engine.UserID{engine.UserID(o.viewer)}, Author: engine.UserID(o.a)})
	}
}

func (st *state) applyComment(o *op, out *[]engine.Event) {
	st.counts.Add(o.a, counters.Comments, 1)
	var bumped []engine.UserID
	if a := st.author(o.a); a != 0 && a != o.viewer {
		st.bump(a, nComments)
		bumped = append(bumped, engine.UserID(a))
	}
	emitUnread(out, st.mention(o.list, bumped, out != nil))
}

func (st *state) applyRepost(o *op, out *[]engine.Event) {
	st.counts.Add(o.a, counters.Reposts, 1)
	st.addPost(o.b, o.viewer, out)
	emitUnread(out, st.mention(o.list, nil, out != nil))
}

func (st *state) applyViews(o *op) {
	for _, p := range o.list {
		st.counts.Add(p, counters.Views, 1)
	}
}

// applyFollow reports whether the follow changed anything.
func (st *state) applyFollow(o *op, out *[]engine.Event) bool {
	if st.follows.Contains(o.viewer, o.a) {
		return false
	}
	if !st.known(o.viewer) {
		st.nusers++
	}
	st.follows.Follow(o.viewer, o.a, st.postCount(o.a))
	st.profile(o.a).followers++
	emitFollows(out, o)
	return true
}

// applyUnfollow reports whether the unfollow changed anything.
func (st *state) applyUnfollow(o *op, out *[]engine.Event) bool {
	// An emptied list keeps its viewer (follows.Store.Has), so the
	// user stays known for the Users statistic.
	if !st.follows.Unfollow(o.viewer, o.a) {
		return false
	}
	st.profile(o.a).followers--
	emitFollows(out, o)
	return true
}

func (st *state) applyTouch(o *op) {
	r := st.user(o.viewer)
	r.day = day(o.time)
	if o.b != 0 {
		r.cursor, r.flags = o.a, r.flags|flagCursor
	}
}

func (st *state) applyMarkRead(o *op, out *[]engine.Event) {
	// Not activity (engine.CursorExpired): only a badge read is.
	r := st.user(o.viewer)
	switch engine.UnreadKind(o.a) {
	case engine.Mentions:
		st.setCounter(o.viewer, r, nMentions, 0)
	case engine.Comments:
		st.setCounter(o.viewer, r, nComments, 0)
	case engine.Likes:
		st.setCounter(o.viewer, r, nLikes, 0)
	case engine.Messages:
		st.setCounter(o.viewer, r, nMessages, 0)
	case engine.System:
		r.cursor, r.flags = st.newestNotif(), r.flags|flagCursor
	case engine.Feed:
		st.follows.SetSnaps(o.viewer, st.postCount)
	}
	emitUnread(out, []engine.UserID{engine.UserID(o.viewer)})
}

func (st *state) applyClickRedDot(o *op, out *[]engine.Event) {
	r := st.user(o.viewer)
	r.click = o.time
	emitUnread(out, []engine.UserID{engine.UserID(o.viewer)})
}

func (st *state) applyPushRedDot(o *op, out *[]engine.Event) {
	st.push = o.time
	emitBroadcast(out)
}

func (st *state) applyPublish(o *op, out *[]engine.Event) {
	off := uint64(len(st.notifText))
	st.notifText = append(append(st.notifText, o.s1...), o.s2...)
	st.notifs = append(st.notifs, notif{id: o.a, time: o.time, off: off,
		titleLen: uint32(len(o.s1)), bodyLen: uint32(len(o.s2))})
	emitBroadcast(out)
}

func (st *state) applyCreateGroup(o *op) {
	st.groups.Put(o.a, uint32(len(st.groupList)))
	st.groupList = append(st.groupList, group{id: o.a})
	g := &st.groupList[len(st.groupList)-1]
	st.members.Put(pair{o.a, o.viewer}, g.join(o.viewer))
	for _, u := range o.list {
		st.addMember(g, u)
	}
}

func (st *state) applyAddMembers(o *op) {
	if g, ok := st.group(o.a); ok {
		for _, u := range o.list {
			st.addMember(g, u)
		}
	}
}

func (st *state) applyLeaveGroup(o *op) {
	if g, ok := st.group(o.a); ok {
		if mapid, cur := st.memberOf(g, o.viewer); cur {
			g.setQuit(mapid, true)
			g.current--
		}
	}
}

func (st *state) applyMarkMessagesRead(o *op, out *[]engine.Event) {
	for _, id := range o.list {
		m, ok := st.message(id)
		if !ok {
			continue
		}
		g, _ := st.group(m.group)
		mapid, cur := st.memberOf(g, o.viewer)
		if !cur {
			continue
		}
		size := m.rc.SizeBytes()
		if !m.rc.MarkRead(mapid) {
			continue
		}
		st.rcBytes += m.rc.SizeBytes() - size
		if out != nil {
			*out = append(*out, engine.Event{Kind: engine.ReceiptsChanged,
				Message: engine.MessageID(m.id), Users: []engine.UserID{engine.UserID(m.sender)}})
		}
	}
}
