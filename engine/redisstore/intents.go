package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/counters"
	"github.com/tally-dev/tally/engine/ops"
)

// Intents: no operation is left half-applied by a crash.
//
// A like, a comment, a new post, a repost or a group message changes
// several slots: the post's (the de-duplicated count, the registry) or the
// group's (the message and its receipts), then the users' (the author's
// badge, the mentioned users', the author's post count, the members'
// message badges), and for a repost the new post's, for a message the id
// index. A tally process
// killed between the two used to leave the first applied and the second
// never: a retried like finds itself counted and changes nothing.
//
// Now the first step's script also writes an intent into its own slot,
// atomically with the effect: field <id> of the hash "<slot tag>I",
// value "<kind>|<viewer>|<post>|<unix ms>|<mentions>[|<aux>]". The intent
// records the operation (kind is its engine/ops type); what is left to
// do is re-derived from it by that operation's Decide, on the facts in
// the same slot (the post's author, which never changes; a message's
// group as its receipt record saw it at send time), so the operation and
// a sweeper finishing it apply the same effects. An operation writes an
// intent when its effects may reach beyond the first step's slot (Go
// asks Decide, before the step, under facts where they would); one whose
// real facts leave nothing to do there (a self-like) has it simply
// deleted. Finishing an intent applies
// the user-slot effects, each user bucket guarded by the marker
// "<user bucket>o<id>b" (so a second finisher skips what a first one
// did), then deletes the intent with a compare-and-delete in its slot.
// The operation that wrote the intent finishes it at once, so an
// acknowledged operation has every effect applied; an operation killed
// after its first step leaves the intent behind, and a sweeper finishes it:
// every replica runs sweepIntents every IntentSweepInterval (one at a time,
// by a lock), which SCANs each master for intent hashes and finishes the
// intents older than intentGrace.
//
// A sweeper first claims an intent (its value becomes "c<unix ms>|<value>"
// if unchanged), so the operation that wrote it, finding its value
// changed, leaves the rest to the claimer. The markers of an operation
// whose own finish deleted its intent unclaimed are deleted at once (no
// one else can hold that intent); a claimed intent's markers stay for
// markerTTL, which covers a claimer paused mid-finish and a second
// claimer after claimTimeout. A claimer paused longer than markerTTL is
// the limit of this scheme.
const (
	intentGrace  = 2 * time.Second
	claimTimeout = 30 * time.Second
)

// intentKinds.
const (
	intentLike    = 'l'
	intentComment = 'c' // aux: the app's comment id, if any
	intentPost    = 'p'
	intentRepost  = 'r' // post: the original; aux: the new post
	intentMessage = 'm' // post: the message; aux: its group
	intentDelete  = 'd' // a deleted post; viewer: its author; aux: a repost's original
	// An Import chunk's authors' post counts (see importintents.go):
	// the rows it registered, or those it may register.
	intentImport        = 'i'
	intentImportPending = 'j'
)

// intent is one pending cross-slot operation: the operation itself (its
// ops type is the kind), from which ops re-derives the effects.
type intent struct {
	kind     byte
	viewer   uint64
	post     uint64 // the post; a message's id; 0 in a post intent of older versions
	at       int64  // unix ms when written
	mentions []uint64
	aux      uint64
	// imported are an import intent's rows, in place of the mentions:
	// "<post>:<author>" pairs.
	imported []importedPost
	// author, when known (the operation's own first step read it), spares
	// the finisher reading the post record; view likewise for a message
	// (its group at send time). Not recorded.
	author      uint64
	authorKnown bool
	view        *sendView
}

func (in intent) encode() string {
	var b strings.Builder
	b.WriteByte(in.kind)
	fmt.Fprintf(&b, "|%d|%d|%d|", in.viewer, in.post, in.at)
	for i, m := range in.mentions {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatUint(m, 10))
	}
	if in.aux != 0 {
		fmt.Fprintf(&b, "|%d", in.aux)
	}
	return b.String()
}

var errBadIntent = errors.New("redisstore: malformed intent record")

func decodeIntent(v string) (intent, error) {
	f := strings.Split(v, "|")
	if len(f) != 5 && len(f) != 6 || len(f[0]) != 1 {
		return intent{}, errBadIntent
	}
	in := intent{kind: f[0][0]}
	if len(f) == 6 {
		aux, err := strconv.ParseUint(f[5], 10, 64)
		if err != nil || aux == 0 {
			return intent{}, errBadIntent
		}
		in.aux = aux
	}
	var err1, err2, err3 error
	in.viewer, err1 = strconv.ParseUint(f[1], 10, 64)
	in.post, err2 = strconv.ParseUint(f[2], 10, 64)
	in.at, err3 = strconv.ParseInt(f[3], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return intent{}, errBadIntent
	}
	if in.kind == intentImport || in.kind == intentImportPending {
		var err error
		if in.imported, err = parseImported(f[4]); err != nil {
			return intent{}, err
		}
	} else if f[4] != "" {
		for _, m := range strings.Split(f[4], ",") {
			u, err := strconv.ParseUint(m, 10, 64)
			if err != nil {
				return intent{}, errBadIntent
			}
			in.mentions = append(in.mentions, u)
		}
	}
	switch in.kind {
	case intentLike, intentComment, intentPost, intentDelete, intentImport, intentImportPending:
	case intentRepost, intentMessage:
		if in.aux == 0 {
			return intent{}, errBadIntent
		}
	default:
		return intent{}, errBadIntent
	}
	return in, nil
}

// newIntentID names an operation that carries no idempotency key.
func newIntentID() string {
	var b [12]byte
	rand.Read(b[:])
	return "~" + base64.RawURLEncoding.EncodeToString(b[:]) // '~': never an opID
}

// intentsKey is the intent hash of a post bucket.
func intentsKey(bucket string) string { return bucket + "I" }

// crashAfterStep1 is a test failpoint: TALLY_REDIS_CRASH_AFTER_STEP1 set
// to an intent kind ("like", "comment", "post", "repost", "message",
// "delete"; an import's "import" while its intent is pending,
// "import-exact" after) makes the process kill itself with SIGKILL right
// after that operation's first step, as a crash between the two slots
// would; "erase" after the scan's second batch of an erasure is applied
// and before its progress is saved (erase.go). TALLY_REDIS_CRASH_SKIP=n
// lets the first n such points pass (a crash in the middle of a burst).
var (
	crashAfterStep1 = os.Getenv("TALLY_REDIS_CRASH_AFTER_STEP1")
	crashSkip, _    = strconv.ParseInt(os.Getenv("TALLY_REDIS_CRASH_SKIP"), 10, 64)
	crashPassed     atomic.Int64
)

func maybeCrash(kind byte) {
	if crashAfterStep1 == "" {
		return
	}
	names := map[byte]string{intentLike: "like", intentComment: "comment", intentPost: "post", intentRepost: "repost", intentMessage: "message",
		intentImportPending: "import", intentImport: "import-exact", intentDelete: "delete", intentErase: "erase"}
	if names[kind] == crashAfterStep1 && crashPassed.Add(1) > crashSkip {
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way
	}
}

// intentEffects re-derives what intent in changes, with ops: the
// operation it records, decided on the facts of its slot (the post's
// author; the message's group as its receipt record saw it). The intent
// exists only because its first step changed something, which fixes the
// remaining facts (a like's flag was not set; the sender was a member).
func (s *Store) intentEffects(ctx context.Context, bucket string, in *intent, eff *ops.Effects) error {
	viewer := engine.UserID(in.viewer)
	mentions := users64(in.mentions)
	postFacts := func() (ops.PostFacts, error) {
		if in.authorKnown {
			return ops.PostFacts{Exists: true, Author: engine.UserID(in.author)}, nil
		}
		_, low := s.k.post(in.post)
		rec, err := s.rdb.HGet(ctx, bucket, low).Result()
		if errors.Is(err, redis.Nil) {
			return ops.PostFacts{}, nil
		}
		if err != nil {
			return ops.PostFacts{}, s.fail(err)
		}
		f, err := postFactsOf(rec)
		if err != nil {
			return ops.PostFacts{}, s.fail(err)
		}
		return f, nil
	}
	var err error
	switch in.kind {
	case intentLike:
		// A first reaction (its kind plays no part in the badge).
		var f ops.PostFacts
		if f, err = postFacts(); err == nil {
			op := ops.ReactToPost{Viewer: viewer, Post: engine.PostID(in.post), Kind: counters.Like}
			err = op.Decide(ops.ReactionFacts{PostFacts: f}, eff)
		}
	case intentComment:
		var f ops.PostFacts
		if f, err = postFacts(); err == nil {
			op := ops.Comment{Viewer: viewer, Post: engine.PostID(in.post), Comment: engine.CommentID(in.aux), Mentions: mentions}
			err = op.Decide(ops.CommentFacts{PostFacts: f}, eff)
		}
	case intentPost:
		op := ops.CreatePost{Viewer: viewer, Post: engine.PostID(in.post)}
		err = op.Decide(false, eff)
	case intentRepost:
		// The original's author plays no part in a repost's effects.
		op := ops.Repost{Viewer: viewer, Post: engine.PostID(in.post), NewPost: engine.PostID(in.aux), Mentions: mentions}
		err = op.Decide(ops.PostFacts{Exists: true}, eff)
	case intentDelete:
		// The post was deleted by its first step: its author and original
		// are what the step saw. The original's existence is checked
		// where its count is applied.
		op := ops.DeletePost{Actor: engine.Actor{User: viewer, Privileged: true}, Post: engine.PostID(in.post)}
		err = op.Decide(ops.DeletePostFacts{PostFacts: ops.PostFacts{Exists: true, Author: viewer},
			Original: engine.PostID(in.aux), OriginalExists: in.aux != 0}, eff)
	case intentMessage:
		if in.view == nil {
			if in.view, err = s.messageView(ctx, in.aux, in.post); err != nil {
				return err
			}
		}
		op := ops.SendMessage{Viewer: viewer, Group: engine.GroupID(in.aux), Message: engine.MessageID(in.post), Mentions: mentions}
		err = op.Decide(ops.GroupFacts{Exists: true, Viewer: ops.MemberState{Joined: true, Current: true}},
			func(u engine.UserID) bool { return in.view.current(uint64(u), in.viewer) }, eff)
	}
	if err != nil && !errors.Is(err, engine.ErrUnavailable) {
		// A product error: the slot no longer has what the first step
		// saw (a post record gone), so nothing is left to do.
		eff.Reset()
		return nil
	}
	return err
}

// finishIntent applies what intent id (recorded as value in bucket's
// intent hash) has left to do, then deletes it if it still holds value.
// own says the caller wrote the intent (its markers may go once done).
//
// Left to do are the effects outside the first step's slot: the first
// step applied the count deltas on the post (a like, a comment, a
// repost), a comment id among the post's, a new post's registry entry, a
// deleted post's tombstone, a message and its receipts.
func (s *Store) finishIntent(ctx context.Context, bucket, id, value string, in intent, own bool) error {
	var eff ops.Effects
	if err := s.intentEffects(ctx, bucket, &in, &eff); err != nil {
		return err
	}
	// Step names (marker suffixes) are those the operations used before
	// intents, so that a keyed retry across an upgrade agrees on them.
	bumpStep := "b"
	var registered, counted []uint64
	var bumps []bump
	for _, r := range eff.Registers {
		if in.kind != intentPost {
			// A repost's new post: its registry entry, in its own slot.
			byNewPost := func(bucket string) guard { return markerGuard(bucket, id, "b") }
			if _, _, _, err := s.registerPost(ctx, r.Author, uint64(r.Post), uint64(r.Original), byNewPost, "", nil); err != nil {
				return err
			}
			registered = append(registered, uint64(r.Post))
			bumpStep = "c"
		}
		bumps = append(bumps, bump{uint64(r.Author), uPosts, 1})
	}
	for _, u := range eff.Unregisters {
		// The registry half (the tombstone) was the first step.
		if u.Author != 0 {
			bumps = append(bumps, bump{uint64(u.Author), uDeleted, 1})
		}
	}
	if in.kind == intentDelete {
		// A repost's original loses a repost, in its own slot, once (its
		// marker), if it still exists (the script's check).
		for _, c := range eff.Counts {
			args, err := countArgs(c.Post, []ops.CountDelta{c})
			if err != nil {
				return err
			}
			byOriginal := func(bucket string) guard { return markerGuard(bucket, id, "o") }
			ob, _ := s.k.post(uint64(c.Post))
			if _, _, err := s.countOn(ctx, c.Post, 0, args, byOriginal(ob), "", ""); err != nil {
				return err
			}
			counted = append(counted, uint64(c.Post))
		}
	}
	var writes []*call
	for _, m := range eff.CommentMarks {
		// The writer's record of a counted comment id (the id itself
		// joined the post's with the first step): a set member, so
		// adding it again changes nothing.
		if !m.Deleted && m.Writer != 0 {
			writes = append(writes, raw("SADD", s.k.written(uint64(m.Writer)), uint64(m.Comment)))
		}
	}
	if err := s.exec(ctx, writes...); err != nil {
		return err
	}
	for _, b := range eff.Bumps {
		field, ok := unreadField[b.Kind]
		if !ok {
			return fmt.Errorf("%w: bump of unread kind %d", errBug, b.Kind)
		}
		bumps = append(bumps, bump{uint64(b.User), field, 1})
	}
	var woken []engine.UserID
	for _, f := range eff.Fanouts {
		field, ok := unreadField[f.Kind]
		if !ok || in.view == nil || uint64(f.Group) != in.aux {
			return fmt.Errorf("%w: fan-out %+v outside the message's group", errBug, f)
		}
		for _, u := range in.view.currentMembers(uint64(f.Except)) {
			bumps = append(bumps, bump{u, field, 1})
			woken = append(woken, engine.UserID(u))
		}
	}
	if in.kind == intentMessage {
		// The id -> group index (an idempotent HSET), before the badges.
		ib, il := s.k.msgIndex(in.post)
		if err := s.exec(ctx, raw("HSET", ib, il, in.aux)); err != nil {
			return err
		}
	}
	if err := s.bumpUsersMarked(ctx, id, bumpStep, bumps); err != nil {
		return err
	}
	r, err := s.one(ctx, scIntentDone, []string{intentsKey(bucket)}, id, value)
	if err != nil {
		return err
	}
	if own && num(r) == 1 && strings.HasPrefix(id, "~") {
		// Deleted unclaimed: nobody else can run this intent, so its
		// markers have done their job. (Operations with an idempotency
		// key keep theirs: a retry replays its steps.)
		dels := s.bumpMarkerDels(bumps, id+bumpStep)
		for _, p := range registered {
			nb, _ := s.k.post(p)
			dels = append(dels, raw("DEL", marker(nb, id+"b")))
		}
		for _, p := range counted {
			ob, _ := s.k.post(p)
			dels = append(dels, raw("DEL", marker(ob, id+"o")))
		}
		if err := s.exec(ctx, dels...); err != nil {
			return err
		}
	}
	s.emitAll(ctx, eff.Events)
	if len(woken) > 0 {
		// A fan-out tells its members in one event.
		s.emit(ctx, engine.Event{Kind: engine.UnreadChanged, Users: woken})
	}
	return nil
}

// bumpMarkerDels deletes the markers bumpUsersMarked(op+step) left in
// the user buckets of bumps, one DEL a bucket.
func (s *Store) bumpMarkerDels(bumps []bump, opStep string) []*call {
	seen := map[string]bool{}
	var dels []*call
	for _, b := range bumps {
		if ub, _ := s.k.user(b.uid); !seen[ub] {
			seen[ub] = true
			dels = append(dels, raw("DEL", marker(ub, opStep)))
		}
	}
	return dels
}

// bumpUsersMarked is bumpUsers guarded by markers whatever the id.
func (s *Store) bumpUsersMarked(ctx context.Context, id, step string, bumps []bump) error {
	return s.bumpUsersTTL(ctx, id, step, markerTTL.Milliseconds(), bumps)
}

func users64(us []uint64) []engine.UserID {
	out := make([]engine.UserID, len(us))
	for i, u := range us {
		out[i] = engine.UserID(u)
	}
	return out
}

// sendView is a group as a message saw it when sent: the packed member
// uids by mapid and, for mapids up to maxid (the members then), who had
// quit. A receipt record also has the sender's bit set.
type sendView struct {
	uids  []uint64
	maxid int
	quit  func(mapid int) bool
}

// current reports whether u was a current member at send time (sender,
// the message's sender, was).
func (v *sendView) current(u, sender uint64) bool {
	for i := 0; i < v.maxid && i < len(v.uids); i++ {
		if v.uids[i] == u {
			return u == sender || !v.quit(i+1)
		}
	}
	return false
}

// currentMembers are the members current at send time but except.
func (v *sendView) currentMembers(except uint64) []uint64 {
	var out []uint64
	for mapid := 1; mapid <= v.maxid && mapid <= len(v.uids); mapid++ {
		// 0: a member erased since (erase.go), whose badges are gone.
		if u := v.uids[mapid-1]; u != except && u != 0 && !v.quit(mapid) {
			out = append(out, u)
		}
	}
	return out
}

// messageView reads message mid's group as its receipt record says it
// was at send time.
func (s *Store) messageView(ctx context.Context, gid, mid uint64) (*sendView, error) {
	g := s.k.group(gid)
	var blob, packed *redis.StringCmd
	if err := s.read(ctx, func(p redis.Pipeliner) {
		blob = p.HGet(ctx, g.R, strconv.FormatUint(mid, 10))
		packed = p.Get(ctx, g.U)
	}); err != nil {
		return nil, err
	}
	rc, err := parseReceipts(blob.Val(), "")
	if err != nil {
		return nil, s.fail(err)
	}
	return &sendView{uids: members(packed.Val()), maxid: rc.maxid, quit: rc.quit}, nil
}
