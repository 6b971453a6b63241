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
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tally-dev/tally/engine"
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
// value "<kind>|<viewer>|<post>|<unix ms>|<mentions>[|<aux>]". The intent names
// what is left to do, which is derived from it and from the post record in
// the same slot (the author never changes). Finishing an intent applies
// the user-slot effects, each user bucket guarded by the marker
// "<user bucket>o<id>b" (so a second finisher skips what a first one
// did), then deletes the intent with a compare-and-delete in its slot.
// The operation that wrote the intent finishes it at once, so an
// acknowledged operation has every effect applied; an operation killed
// after its first step leaves the intent behind, and a sweeper finishes it:
// every replica runs SweepIntents every IntentSweepInterval (one at a time,
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
	intentComment = 'c'
	intentPost    = 'p'
	intentRepost  = 'r' // post: the original; aux: the new post
	intentMessage = 'm' // post: the message; aux: its group
)

// intent is one pending cross-slot operation.
type intent struct {
	kind     byte
	viewer   uint64
	post     uint64
	at       int64 // unix ms when written
	mentions []uint64
	aux      uint64
	// author, when known (the operation's own first step read it), spares
	// the finisher reading the post record; recipients likewise for a
	// message (its current members at send time but the sender). Not
	// recorded.
	author      uint64
	authorKnown bool
	recipients  []uint64
	recipKnown  bool
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
	if f[4] != "" {
		for _, m := range strings.Split(f[4], ",") {
			u, err := strconv.ParseUint(m, 10, 64)
			if err != nil {
				return intent{}, errBadIntent
			}
			in.mentions = append(in.mentions, u)
		}
	}
	switch in.kind {
	case intentLike, intentComment, intentPost:
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
// to an intent kind ("like", "comment", "post", "repost", "message") makes the process kill
// itself with SIGKILL right after that operation's first step, as a crash
// between the two slots would.
var crashAfterStep1 = os.Getenv("TALLY_REDIS_CRASH_AFTER_STEP1")

func maybeCrash(kind byte) {
	if crashAfterStep1 == "" {
		return
	}
	names := map[byte]string{intentLike: "like", intentComment: "comment", intentPost: "post", intentRepost: "repost", intentMessage: "message"}
	if names[kind] == crashAfterStep1 {
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way
	}
}

// finishIntent applies what intent id (recorded as value in bucket's
// intent hash) has left to do, then deletes it if it still holds value.
// own says the caller wrote the intent (its markers may go once done).
func (s *Store) finishIntent(ctx context.Context, bucket, id, value string, in intent, own bool) error {
	var bumps []bump
	var ev *engine.Event
	// Step names (marker suffixes) are those the operations used before
	// intents, so that a keyed retry across an upgrade agrees on them.
	bumpStep := "b"
	switch in.kind {
	case intentLike, intentComment:
		author := in.author
		if !in.authorKnown {
			_, low := s.k.post(in.post)
			rec, err := s.rdb.HGet(ctx, bucket, low).Result()
			if err != nil && !errors.Is(err, redis.Nil) {
				return s.fail(err)
			}
			if rec != "" {
				if author, err = decodeHead(rec); err != nil {
					return s.fail(err)
				}
			}
		}
		var woke []engine.UserID
		field := uLikes
		if in.kind == intentComment {
			field = uComments
		}
		if author != 0 && author != in.viewer {
			bumps = append(bumps, bump{author, field, 1})
			woke = append(woke, engine.UserID(author))
		}
		for _, m := range in.mentions {
			bumps = append(bumps, bump{m, uMentions, 1})
			woke = append(woke, engine.UserID(m))
		}
		if len(woke) > 0 {
			ev = &engine.Event{Kind: engine.UnreadChanged, Users: woke}
		}
	case intentPost:
		bumps = []bump{{in.viewer, uPosts, 1}}
		ev = &engine.Event{Kind: engine.AuthorPosted, Author: engine.UserID(in.viewer)}
	case intentRepost:
		// The new post, then the reposter's count and the mentions.
		if _, err := s.registerPost(ctx, engine.UserID(in.viewer), in.aux, id, "b", "", ""); err != nil {
			return err
		}
		bumpStep = "c"
		bumps = []bump{{in.viewer, uPosts, 1}}
		for _, m := range in.mentions {
			bumps = append(bumps, bump{m, uMentions, 1})
		}
		ev = &engine.Event{Kind: engine.AuthorPosted, Author: engine.UserID(in.viewer)}
		if len(in.mentions) > 0 {
			s.emit(ctx, engine.Event{Kind: engine.UnreadChanged, Users: users64(in.mentions)})
		}
	case intentMessage:
		// The id -> group index (an idempotent HSET), then the badges of
		// the members counted at send time.
		ib, il := s.k.msgIndex(in.post)
		if err := s.exec(ctx, raw("HSET", ib, il, in.aux)); err != nil {
			return err
		}
		recipients := in.recipients
		if !in.recipKnown {
			var err error
			if recipients, err = s.messageRecipients(ctx, in.aux, in.post); err != nil {
				return err
			}
		}
		counted := map[uint64]bool{}
		for _, u := range recipients {
			counted[u] = true
			bumps = append(bumps, bump{u, uMessages, 1})
		}
		for _, m := range in.mentions {
			if counted[m] {
				bumps = append(bumps, bump{m, uMentions, 1})
			}
		}
		if len(recipients) > 0 {
			ev = &engine.Event{Kind: engine.UnreadChanged, Users: users64(recipients)}
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
		var dels []*call
		for _, b := range bumps {
			ub, _ := s.k.user(b.uid)
			dels = append(dels, raw("DEL", marker(ub, id+bumpStep)))
		}
		if in.kind == intentRepost {
			nb, _ := s.k.post(in.aux)
			dels = append(dels, raw("DEL", marker(nb, id+"b")))
		}
		if err := s.exec(ctx, dels...); err != nil {
			return err
		}
	}
	if ev != nil {
		s.emit(ctx, *ev)
	}
	return nil
}

// bumpUsersMarked is bumpUsers guarded by markers whatever the id.
func (s *Store) bumpUsersMarked(ctx context.Context, id, step string, bumps []bump) error {
	return s.bumpUsersTTL(ctx, id, step, markerTTL.Milliseconds(), bumps)
}

// SweepIntents finishes every intent older than intentGrace that no live
// finisher holds: the operations whose process died between their first
// and later steps. It returns how many it finished.
func (s *Store) SweepIntents(ctx context.Context) (int, error) {
	done := 0
	now := s.now().UnixMilli()
	var sweepPattern func(ctx context.Context, c *redis.Client, pattern string) error
	sweep := func(ctx context.Context, c *redis.Client) error {
		// Intent hashes live in post buckets and group tags only, whose
		// keys hold no client text: these patterns match nothing else
		// (an idempotency key ending in "}I" lives under {u…} or {s}).
		for _, pattern := range []string{s.k.p + "{p*}I", s.k.p + "{g*}I"} {
			if err := sweepPattern(ctx, c, pattern); err != nil {
				return err
			}
		}
		return nil
	}
	sweepPattern = func(ctx context.Context, c *redis.Client, pattern string) error {
		iter := c.ScanType(ctx, 0, pattern, 1000, "hash").Iterator()
		for iter.Next(ctx) {
			key := iter.Val()
			bucket := strings.TrimSuffix(key, "I")
			all, err := c.HGetAll(ctx, key).Result()
			if err != nil {
				return err
			}
			for id, value := range all {
				n, err := s.claimAndFinish(ctx, bucket, id, value, now)
				if err != nil {
					return err
				}
				done += n
			}
		}
		return iter.Err()
	}
	var err error
	if s.wcluster != nil {
		err = s.wcluster.ForEachMaster(ctx, sweep)
	} else {
		err = sweep(ctx, s.wsingle)
	}
	if err != nil {
		return done, s.fail(err)
	}
	return done, nil
}

func (s *Store) claimAndFinish(ctx context.Context, bucket, id, value string, now int64) (int, error) {
	raw := value
	if len(value) > 1 && value[0] == 'c' && value[1] != '|' { // "c<ms>|...": claimed
		at, r, _ := strings.Cut(value[1:], "|")
		t, err := strconv.ParseInt(at, 10, 64)
		if err != nil {
			return 0, s.fail(errBadIntent)
		}
		if now-t < claimTimeout.Milliseconds() {
			return 0, nil // another sweeper holds it
		}
		raw = r
	}
	in, err := decodeIntent(raw)
	if err != nil {
		return 0, s.fail(fmt.Errorf("%s %s: %w", intentsKey(bucket), id, err))
	}
	if now-in.at < intentGrace.Milliseconds() {
		return 0, nil // its own operation is most likely finishing it
	}
	claimed := "c" + strconv.FormatInt(now, 10) + "|" + raw
	r, err := s.one(ctx, scIntentClaim, []string{intentsKey(bucket)}, id, value, claimed)
	if err != nil {
		return 0, err
	}
	if num(r) != 1 {
		return 0, nil // finished or claimed meanwhile
	}
	if err := s.finishIntent(ctx, bucket, id, claimed, in, false); err != nil {
		return 0, err
	}
	return 1, nil
}

func users64(us []uint64) []engine.UserID {
	out := make([]engine.UserID, len(us))
	for i, u := range us {
		out[i] = engine.UserID(u)
	}
	return out
}

// messageRecipients are the members message mid of group gid counts (and
// so badges): mapids up to its maxid that had not quit, the sender
// excluded, as its receipt record says.
func (s *Store) messageRecipients(ctx context.Context, gid, mid uint64) ([]uint64, error) {
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
	all := members(packed.Val())
	var out []uint64
	for mapid := 1; mapid <= rc.maxid && mapid <= len(all); mapid++ {
		if !rc.quit(mapid) {
			out = append(out, all[mapid-1])
		}
	}
	return out, nil
}
