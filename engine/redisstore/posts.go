package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tally-dev/tally/engine"
)

// Idempotency: the record (viewer, key) lives in the viewer's slot and
// holds the operation's result, the engine.IdemFingerprint of its first
// call and the store clock's time when it was made,
// "<state><result>#<fingerprint hex>@<unix ns>", state 'p' while the
// operation runs and 'd' once every step is applied. A record is forgotten
// when engine.IdemExpired says so by the store's clock (Redis's own expiry,
// idemRecordTTL, only reclaims the memory later). A retry whose fingerprint
// differs is refused (engine.ErrIdemReused); one that finds 'd' returns the
// result; one that finds 'p' (a crash or a concurrent attempt) replays the
// steps, each guarded by its marker, so nothing applies twice. Records
// without "@<unix ns>" (older versions) expire by Redis's clock only;
// records written before fingerprints were kept lived under a key scoped
// by kind too and have no '#'; both are still found (for their 24 hours)
// and taken as retries.

const (
	kindPost    = 'p'
	kindComment = 'c'
	kindRepost  = 'r'
	kindMessage = 'm'
	// kindAny scopes the record key: one record per (viewer, key) whatever
	// the kind, so that reusing a key for another kind is seen.
	kindAny = '*'
)

// idemRecordTTL is Redis's expiry of an idempotency record: longer than
// engine.IdempotencyTTL, which the store's clock judges, so that Redis
// reclaims only records already forgotten.
const idemRecordTTL = engine.IdempotencyTTL + time.Hour

type idem struct {
	key    string // record key; "" when the call carries no idempotency key
	op     string // marker name of the operation
	result string // the result this operation stands for
	fp     string // fingerprint, hex
	at     int64  // unix ns the record was made (store's clock); 0: not kept
	done   bool   // a previous attempt completed
}

// value is the record of in in state ('p' or 'd').
func (in idem) value(state byte) string {
	v := string(state) + in.result + "#" + in.fp
	if in.at != 0 {
		v += "@" + strconv.FormatInt(in.at, 10)
	}
	return v
}

// idemBegin reserves (viewer, key) for result, or returns the result of
// the earlier attempt; an earlier attempt with another fingerprint is
// engine.ErrIdemReused.
func (s *Store) idemBegin(ctx context.Context, viewer uint64, kind byte, key, result string, op engine.IdemOp, args engine.IdemArgs) (idem, error) {
	if key == "" {
		return idem{result: result}, nil
	}
	fp := strconv.FormatUint(engine.IdemFingerprint(op, args), 16)
	now := s.now()
	in := idem{key: s.k.idem(viewer, kindAny, key), result: result, fp: fp, at: now.UnixNano()}
	in.op = opID(viewer, kind, key, in.at)
	legacy := s.k.idem(viewer, kind, key)
	expired := ""
	// Each pass either reserves, finds a live record, or finds one expired
	// and replaces it unless another call got there first (then the next
	// pass judges that call's record).
	for range 4 {
		r, err := s.one(ctx, scIdemBegin, []string{in.key, legacy}, in.value('p'), idemRecordTTL.Milliseconds(), expired)
		if err != nil {
			return in, err
		}
		prev, _ := r.(string)
		if len(prev) == 0 {
			return in, nil
		}
		rest, stored, withFP := strings.Cut(prev[1:], "#")
		var storedFP uint64
		var at int64
		if withFP {
			fpHex, atDec, withAt := strings.Cut(stored, "@")
			if storedFP, err = strconv.ParseUint(fpHex, 16, 64); err != nil || storedFP == 0 {
				return in, s.fail(fmt.Errorf("idempotency record %q: bad fingerprint", in.key))
			}
			if withAt {
				if at, err = strconv.ParseInt(atDec, 10, 64); err != nil || at == 0 {
					return in, s.fail(fmt.Errorf("idempotency record %q: bad time", in.key))
				}
				if engine.IdemExpired(time.Unix(0, at), now) {
					expired = prev
					continue
				}
			}
		}
		if err := engine.CheckIdemReuse(storedFP, engine.IdemFingerprint(op, args)); err != nil {
			return idem{}, err
		}
		found := idem{key: in.key, op: opID(viewer, kind, key, at), result: rest, fp: fp, at: at, done: prev[0] == 'd'}
		if !withFP {
			found.key = legacy
		}
		return found, nil
	}
	return in, s.fail(fmt.Errorf("idempotency record %q: replaced by others on every attempt", in.key))
}

func (s *Store) idemDone(ctx context.Context, in idem) error {
	if in.key == "" || in.done {
		return nil
	}
	return s.exec(ctx, raw("SET", in.key, in.value('d'), "XX", "KEEPTTL"))
}

// idemAbort forgets a reservation whose operation failed on a product rule
// (unknown post, not a member): a later retry must be judged afresh.
func (s *Store) idemAbort(ctx context.Context, in idem) {
	if in.key != "" && !in.done {
		_ = s.exec(ctx, raw("DEL", in.key))
	}
}

func invalid(format string, a ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{engine.ErrInvalid}, a...)...)
}

func notFound(what string) error { return fmt.Errorf("%w: %s", engine.ErrNotFound, what) }

func forbidden(what string) error { return fmt.Errorf("%w: %s", engine.ErrForbidden, what) }

func checkUser(u engine.UserID) error { return engine.CheckViewer(u) }

// reservePostID starts a post-making operation (a post or a repost) under
// its idempotency key: a first attempt records want as the new post's id;
// a retry gets back the id the first attempt recorded, and in.done when
// that attempt completed (then nothing is left to do).
func (s *Store) reservePostID(ctx context.Context, viewer engine.UserID, kind byte, idemKey string, want uint64, op engine.IdemOp, args engine.IdemArgs) (uint64, idem, error) {
	in, err := s.idemBegin(ctx, uint64(viewer), kind, idemKey, strconv.FormatUint(want, 10), op, args)
	if err != nil {
		return 0, in, err
	}
	if in.key != "" {
		want, _ = strconv.ParseUint(in.result, 10, 64)
	}
	return want, in, nil
}

// CreatePost implements engine.Store.
func (s *Store) CreatePost(ctx context.Context, viewer engine.UserID, id engine.PostID, idemKey string) (engine.PostID, error) {
	if err := checkUser(viewer); err != nil {
		return 0, err
	}
	if err := engine.CheckIdemKey(idemKey); err != nil {
		return 0, err
	}
	if id != 0 {
		if err := engine.CheckPostID(id, s.now()); err != nil {
			return 0, err
		}
	}
	want := uint64(id)
	if want == 0 && idemKey != "" {
		want = s.gen.Next()
	}
	want, in, err := s.reservePostID(ctx, viewer, kindPost, idemKey, want, engine.IdemCreatePost, engine.IdemArgs{Post: id})
	if err != nil || in.done {
		return engine.PostID(want), err
	}
	// The registry entry and the intent of the author's post count, in
	// the post's slot; then the count (see intents.go).
	iid := in.op
	if iid == "" {
		iid = newIntentID()
	}
	it := intent{kind: intentPost, viewer: uint64(viewer), at: s.now().UnixMilli()}
	desc := it.encode()
	pid, err := s.registerPost(ctx, viewer, want, in.op, "a", iid, desc)
	if err != nil {
		s.idemAbort(ctx, in)
		return 0, err
	}
	maybeCrash(intentPost)
	bucket, _ := s.k.post(pid)
	if err := s.finishIntent(ctx, bucket, iid, desc, it, true); err != nil {
		return 0, err
	}
	if err := s.idemDone(ctx, in); err != nil {
		return 0, err
	}
	return engine.PostID(pid), nil
}

// registerPost adds a post by author to the registry. id 0 asks for a
// fresh id; a fresh id that collides (a client's id from our node) is
// replaced by another.
func (s *Store) registerPost(ctx context.Context, author engine.UserID, id uint64, op, step, intentID, intent string) (uint64, error) {
	for attempt := 0; ; attempt++ {
		pid := id
		if pid == 0 {
			pid = s.gen.Next()
		}
		bucket, low := s.k.post(pid)
		r, err := s.one(ctx, scPostCreate, []string{bucket, marker(bucket, op+step), intentsKey(bucket)},
			ttlArg(op), low, postHead(uint64(author)), intentID, intent)
		if err != nil {
			return 0, err
		}
		switch num(r) {
		case 1:
			s.stats.posts.Add(1)
			return pid, nil
		case 2:
			return pid, nil
		}
		if id != 0 || attempt >= 10 {
			return 0, invalid("post %d already exists", pid)
		}
	}
}

// byBucket groups post ids by bucket, keeping each id's position.
type bucketed struct {
	lows []string
	pos  []int
}

func (s *Store) groupPosts(ids []engine.PostID, keyOf func(uint64) (string, string)) (map[string]*bucketed, []string) {
	m := map[string]*bucketed{}
	var order []string
	for i, id := range ids {
		b, low := keyOf(uint64(id))
		g := m[b]
		if g == nil {
			g = &bucketed{}
			m[b] = g
			order = append(order, b)
		}
		g.lows = append(g.lows, low)
		g.pos = append(g.pos, i)
	}
	return m, order
}

// postRecords fetches the records of ids in one round trip: one HMGET per
// bucket, pipelined (split per node on a cluster).
func (s *Store) postRecords(ctx context.Context, ids []engine.PostID) ([]string, []bool, error) {
	if err := engine.CheckIDs(ids); err != nil {
		return nil, nil, err
	}
	groups, order := s.groupPosts(ids, s.k.post)
	cmds := make([]*redis.SliceCmd, len(order))
	if err := s.read(ctx, func(p redis.Pipeliner) {
		for i, b := range order {
			cmds[i] = p.HMGet(ctx, b, groups[b].lows...)
		}
	}); err != nil {
		return nil, nil, err
	}
	recs, found := make([]string, len(ids)), make([]bool, len(ids))
	for i, b := range order {
		for j, v := range cmds[i].Val() {
			if sv, ok := v.(string); ok {
				recs[groups[b].pos[j]], found[groups[b].pos[j]] = sv, true
			}
		}
	}
	return recs, found, nil
}

// Posts implements engine.Store.
func (s *Store) Posts(ctx context.Context, ids []engine.PostID) ([]engine.PostInfo, error) {
	recs, found, err := s.postRecords(ctx, ids)
	if err != nil {
		return nil, err
	}
	out := make([]engine.PostInfo, len(ids))
	for i := range ids {
		if !found[i] {
			continue
		}
		a, err := decodeHead(recs[i])
		if err != nil {
			return nil, s.fail(err)
		}
		out[i] = engine.PostInfo{Exists: true, Author: engine.UserID(a)}
	}
	return out, nil
}

// Counts implements engine.Store.
func (s *Store) Counts(ctx context.Context, ids []engine.PostID) ([]engine.Counts, error) {
	recs, found, err := s.postRecords(ctx, ids)
	if err != nil {
		return nil, err
	}
	out := make([]engine.Counts, len(ids))
	for i := range ids {
		if !found[i] {
			continue
		}
		_, c, err := decodePost(recs[i])
		if err != nil {
			return nil, s.fail(err)
		}
		out[i] = c
	}
	return out, nil
}

// Liked implements engine.Store: one SISMEMBER per post, one round trip.
func (s *Store) Liked(ctx context.Context, viewer engine.UserID, ids []engine.PostID) ([]bool, error) {
	return s.flags(ctx, viewer, ids, likersKey)
}

// Favorited implements engine.Store.
func (s *Store) Favorited(ctx context.Context, viewer engine.UserID, ids []engine.PostID) ([]bool, error) {
	return s.flags(ctx, viewer, ids, favsKey)
}

func (s *Store) flags(ctx context.Context, viewer engine.UserID, ids []engine.PostID, set func(b, low string) string) ([]bool, error) {
	if err := engine.CheckIDs(ids); err != nil {
		return nil, err
	}
	out := make([]bool, len(ids))
	if viewer == 0 || len(ids) == 0 {
		return out, nil
	}
	cmds := make([]*redis.BoolCmd, len(ids))
	member := strconv.FormatUint(uint64(viewer), 10)
	if err := s.read(ctx, func(p redis.Pipeliner) {
		for i, id := range ids {
			b, low := s.k.post(uint64(id))
			cmds[i] = p.SIsMember(ctx, set(b, low), member)
		}
	}); err != nil {
		return nil, err
	}
	for i, c := range cmds {
		out[i] = c.Val()
	}
	return out, nil
}

// Like implements engine.Store.
func (s *Store) Like(ctx context.Context, viewer engine.UserID, post engine.PostID) error {
	return s.flag(ctx, viewer, post, likersKey, pLikes, 1)
}

// Unlike implements engine.Store.
func (s *Store) Unlike(ctx context.Context, viewer engine.UserID, post engine.PostID) error {
	return s.flag(ctx, viewer, post, likersKey, pLikes, -1)
}

// Favorite implements engine.Store.
func (s *Store) Favorite(ctx context.Context, viewer engine.UserID, post engine.PostID) error {
	return s.flag(ctx, viewer, post, favsKey, pFavorites, 1)
}

// Unfavorite implements engine.Store.
func (s *Store) Unfavorite(ctx context.Context, viewer engine.UserID, post engine.PostID) error {
	return s.flag(ctx, viewer, post, favsKey, pFavorites, -1)
}

// flag is like/unlike/favorite/unfavorite: de-dup and count atomically in
// the post's slot, then (a new like only) the author's badge in theirs.
// The badge step comes second so that a crash between the two can only
// lose a badge bump, never count a like twice: a retried like finds itself
// already in the set and changes nothing.
func (s *Store) flag(ctx context.Context, viewer engine.UserID, post engine.PostID, set func(b, low string) string, field int, d int) error {
	if err := checkUser(viewer); err != nil {
		return err
	}
	if post == 0 {
		return invalid("post id 0")
	}
	bucket, low := s.k.post(uint64(post))
	// A new like owes the author a badge bump in another slot: the first
	// step records that intent with the like (see intents.go).
	var id, desc string
	var in intent
	if d > 0 && field == pLikes {
		id = newIntentID()
		in = intent{kind: intentLike, viewer: uint64(viewer), post: uint64(post), at: s.now().UnixMilli()}
		desc = in.encode()
	}
	r, err := s.one(ctx, scPostFlag, []string{bucket, set(bucket, low), intentsKey(bucket)},
		low, uint64(viewer), field, d, id, desc, postHead(uint64(viewer)))
	if err != nil {
		return err
	}
	a := vals(r)
	switch num(at(a, 0)) {
	case -1:
		return notFound("post")
	case 0:
		return nil
	}
	s.stats.counted.Add(num(at(a, 2)))
	if desc == "" {
		return nil
	}
	author, err := decodeHead(str(at(a, 1)))
	if err != nil {
		return s.fail(err)
	}
	if author == 0 || author == uint64(viewer) {
		return nil // no intent was written: nothing follows
	}
	maybeCrash(intentLike)
	in.author, in.authorKnown = author, true
	return s.finishIntent(ctx, bucket, id, desc, in, true)
}

// countOn adds one to a count of a known post and returns its author.
func (s *Store) countOn(ctx context.Context, post engine.PostID, field int, op, step, intentID, intent string) (uint64, error) {
	bucket, low := s.k.post(uint64(post))
	r, err := s.one(ctx, scPostIncr, []string{bucket, marker(bucket, op+step), intentsKey(bucket)}, ttlArg(op), low, field, intentID, intent)
	if err != nil {
		return 0, err
	}
	a := vals(r)
	if num(at(a, 0)) == -1 {
		return 0, notFound("post")
	}
	s.stats.counted.Add(num(at(a, 2)))
	author, err := decodeHead(str(at(a, 1)))
	if err != nil {
		return 0, s.fail(err)
	}
	return author, nil
}

// Comment implements engine.Store.
func (s *Store) Comment(ctx context.Context, viewer engine.UserID, post engine.PostID, mentions []engine.UserID, idemKey string) error {
	if err := checkUser(viewer); err != nil {
		return err
	}
	if post == 0 {
		return invalid("post id 0")
	}
	mentions, err := engine.NormalizeMentions(viewer, mentions)
	if err != nil {
		return err
	}
	if err := engine.CheckIdemKey(idemKey); err != nil {
		return err
	}
	in, err := s.idemBegin(ctx, uint64(viewer), kindComment, idemKey, "", engine.IdemComment,
		engine.IdemArgs{Post: post, Mentions: mentions})
	if err != nil || in.done {
		return err
	}
	// The count and the intent of the badges that follow, in the post's
	// slot; the badges guarded by markers of the same id (the key's
	// operation id, so that a client retry and a sweeper agree).
	id := in.op
	if id == "" {
		id = newIntentID()
	}
	it := intent{kind: intentComment, viewer: uint64(viewer), post: uint64(post), at: s.now().UnixMilli(), mentions: ids64(mentions)}
	desc := it.encode()
	author, err := s.countOn(ctx, post, pComments, in.op, "a", id, desc)
	if err != nil {
		s.idemAbort(ctx, in)
		return err
	}
	maybeCrash(intentComment)
	it.author, it.authorKnown = author, true
	bucket, _ := s.k.post(uint64(post))
	if err := s.finishIntent(ctx, bucket, id, desc, it, true); err != nil {
		return err
	}
	return s.idemDone(ctx, in)
}

func ids64(us []engine.UserID) []uint64 {
	out := make([]uint64, len(us))
	for i, u := range us {
		out[i] = uint64(u)
	}
	return out
}

// Repost implements engine.Store.
func (s *Store) Repost(ctx context.Context, viewer engine.UserID, post engine.PostID, mentions []engine.UserID, idemKey string) (engine.PostID, error) {
	if err := checkUser(viewer); err != nil {
		return 0, err
	}
	if post == 0 {
		return 0, invalid("post id 0")
	}
	mentions, err := engine.NormalizeMentions(viewer, mentions)
	if err != nil {
		return 0, err
	}
	if err := engine.CheckIdemKey(idemKey); err != nil {
		return 0, err
	}
	// The new post's id is fixed before the first step: the intent names
	// it, so whoever finishes the repost registers that post.
	want, in, err := s.reservePostID(ctx, viewer, kindRepost, idemKey, s.gen.Next(), engine.IdemRepost,
		engine.IdemArgs{Post: post, Mentions: mentions})
	if err != nil || in.done {
		return engine.PostID(want), err
	}
	id := in.op
	if id == "" {
		id = newIntentID()
	}
	it := intent{kind: intentRepost, viewer: uint64(viewer), post: uint64(post), aux: want,
		at: s.now().UnixMilli(), mentions: ids64(mentions)}
	desc := it.encode()
	if _, err := s.countOn(ctx, post, pReposts, in.op, "a", id, desc); err != nil {
		s.idemAbort(ctx, in)
		return 0, err
	}
	maybeCrash(intentRepost)
	bucket, _ := s.k.post(uint64(post))
	if err := s.finishIntent(ctx, bucket, id, desc, it, true); err != nil {
		return 0, err
	}
	if err := s.idemDone(ctx, in); err != nil {
		return 0, err
	}
	return engine.PostID(want), nil
}

// RecordViews implements engine.Store: one script per bucket, one round
// trip for the page.
func (s *Store) RecordViews(ctx context.Context, ids []engine.PostID) error {
	if err := engine.CheckIDs(ids); err != nil {
		return err
	}
	groups, order := s.groupPosts(ids, s.k.post)
	calls := make([]*call, len(order))
	for i, b := range order {
		args := make([]any, len(groups[b].lows))
		for j, l := range groups[b].lows {
			args[j] = l
		}
		calls[i] = script(scViews, []string{b}, args...)
	}
	if err := s.exec(ctx, calls...); err != nil {
		return err
	}
	for _, c := range calls {
		s.stats.counted.Add(num(c.res.Val()))
	}
	return nil
}

var _ engine.Importer = (*Store)(nil)

// importChunk bounds one pipelined round trip of Import.
const importChunk = 2000

// Import implements engine.Importer: each row's counts replace the post's
// counts; an unknown post is registered when it has an author or a
// non-zero count. Rows go per bucket, one pipelined round trip per
// importChunk rows. Like every write here it is durable when it returns
// as far as the server's appendfsync (or WaitReplicas) makes it.
func (s *Store) Import(ctx context.Context, rows []engine.ImportRow) error {
	for i, r := range rows {
		c := r.Counts
		if r.Post == 0 {
			return invalid("post id 0 in import row %d", i+1)
		}
		if min(c.Views, c.Likes, c.Comments, c.Reposts, c.Favorites) < 0 {
			return invalid("post %d has a negative count", r.Post)
		}
	}
	for len(rows) > 0 {
		n := min(len(rows), importChunk)
		if err := s.importChunk(ctx, rows[:n]); err != nil {
			return err
		}
		rows = rows[n:]
	}
	return nil
}

func (s *Store) importChunk(ctx context.Context, rows []engine.ImportRow) error {
	type grp struct {
		args []any
		rows []int
	}
	groups := map[string]*grp{}
	var order []string
	for i, r := range rows {
		b, low := s.k.post(uint64(r.Post))
		g := groups[b]
		if g == nil {
			g = &grp{}
			groups[b] = g
			order = append(order, b)
		}
		head := ""
		if r.Author != 0 {
			head = postHead(uint64(r.Author))
		}
		g.args = append(g.args, low, head, encodeCounts(r.Counts))
		g.rows = append(g.rows, i)
	}
	calls := make([]*call, len(order))
	for i, b := range order {
		calls[i] = script(scImport, []string{b}, groups[b].args...)
	}
	if err := s.exec(ctx, calls...); err != nil {
		return err
	}
	var bumps []bump
	for i, b := range order {
		a := vals(calls[i].res.Val())
		for j, row := range groups[b].rows {
			flags := num(at(a, j))
			if flags&1 != 0 {
				s.stats.posts.Add(1)
			}
			if flags&2 != 0 {
				bumps = append(bumps, bump{uint64(rows[row].Author), uPosts, 1})
			}
		}
		s.stats.counted.Add(num(at(a, len(groups[b].rows))))
	}
	return s.bumpUsers(ctx, "", "", bumps)
}
