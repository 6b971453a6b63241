package embedded

import (
	"errors"
	"fmt"
	"path/filepath"
	"time"
	"unsafe"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/counters"
	"github.com/tally-dev/tally/engine/follows"
	"github.com/tally-dev/tally/engine/likeset"
	"github.com/tally-dev/tally/engine/postcounts"
	"github.com/tally-dev/tally/engine/registry"
	"github.com/tally-dev/tally/engine/table"
)

// pair keys the (user, post) like and favorite sets and the (group, user)
// membership table.
type pair [2]uint64

func hashU64(k uint64) uint64 { return table.Mix64(k) }
func hashPair(k pair) uint64  { return table.HashPair(k[0], k[1]) }

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
