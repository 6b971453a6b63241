package redisstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/counters"
	"github.com/tally-dev/tally/engine/ops"
)

// Erasure: a user's id leaves every key and value, in bounded steps,
// without stopping the world, and survives the crash of whoever runs it.
//
// Nothing indexes a user's likes, favorites, posts, groups or followers:
// an index of liked posts per user would double the like sets, and the
// others would slow every write for a rare operation. An erasure finds
// them by one SCAN of the keyspace on every master instead, a step of
// erasureScanCount keys at a time: for the step's keys it reads, in one
// round trip, whether each like or favorite set holds the user
// (SISMEMBER), which posts of each post bucket the user wrote (a
// read-only script), whether each followee list and group names them
// (HEXISTS), and the idempotency claims and intents that name them;
// ops.ErasureStep decides on those facts; and one more round trip applies
// what it decided, each change a short script in one slot that checks the
// fact it was decided on (the user still in the set, the head still the
// user's, the edge still there) and keeps the count beside it. The cost
// is a walk of the whole keyspace per erasure, whatever the user did;
// docs/redis-durability.md gives the figures.
//
// The steps, in order:
//
//  1. Start (ops.EraseUser): the user is marked as being erased (a follow
//     of or by them waits until it is over) and their record — badges,
//     cursor, red-dot click, post and follow counts — goes; then the
//     user's own follow edges, each followee losing a follower once (a
//     marker per edge).
//  2. The scan, master by master, each master's cursor saved after every
//     step's changes: likes and favorites (each post's count drops with
//     its set), follow edges of others to the user (the follower's
//     following count drops with the edge), authorship of the user's
//     posts, places in groups (the group's member list, quit bitmap and
//     erased bitmap change at once, and the messages the user sent lose
//     their sender with it: a body names its sender by mapid),
//     idempotency claims with their records, and intents naming the user
//     (finished first, as a sweeper would).
//  3. End (ops.ErasureStep, Done): follow edges made meanwhile, then the
//     record again (badges bumped while it ran), the comment ids the user
//     wrote, the marker, the rate-limit and socket keys; the erasure's
//     intent goes last.
//
// The intent, field <uid> of "{s}erase" ("<id>|<phase>|<lease ms>") and
// each master's cursor in "{s}erc<uid>", is written before the first
// step. Every step is idempotent on its own (a set member removed once, a
// marker per cross-slot count), so the erasure can be run again from its
// last saved cursor by anyone: a repeated eraseUser joins it, and a
// sweeper (sweepIntents) runs one whose lease (renewed at every save) is
// older than claimTimeout, as it finishes intents.
//
// What a reader sees while it runs: from step 1 the user reads as new
// (no badges, counts or cursor) and follows nobody; a post's counts keep
// agreeing with its sets at every moment, the user's like or favorite
// going from the set and the count together when the scan reaches that
// post; likewise each follower's edge and count, each group's lists, each
// post's author. When EraseUser returns, no key or value holds the user's
// id — except what writes racing the erasure put back after the scan
// passed: a like by the user, a follow, a group add, a badge; those are
// the writes of a new user with the same id, and counts stay exact.

// intentErase names the erasure's crash failpoint (maybeCrash).
const intentErase = 'e'

// erasureScanCount is the COUNT of one scan step.
const erasureScanCount = 1000

// erasureMarkerTTL bounds how long a follow waits for an erasure whose
// runner died; every progress save renews it.
const erasureMarkerTTL = 2 * time.Minute

// EraseUser implements engine.Store. It returns once every step is done
// (see above). If ctx ends first, the erasure goes on in this process, and
// after a crash a sweeper finishes it; the caller gets ErrUnavailable and
// a retry joins it.
func (s *Store) EraseUser(ctx context.Context, user engine.UserID) error {
	op := ops.EraseUser{User: user}
	if err := op.Check(); err != nil {
		return err
	}
	e := &erasure{s: s, user: uint64(user), id: newIntentID(), phase: phaseStart}
	r, err := s.one(ctx, scErasureBegin, []string{s.k.erasures()}, e.user, e.header(s.now()))
	if err != nil {
		return err
	}
	if v, ok := r.(string); ok {
		// Under way: Decide says a repeat changes nothing, and this call
		// helps it on, so that it is over when the call returns.
		if e, err = s.loadErasure(ctx, e.user, v); err != nil {
			return err
		}
	}
	var eff ops.Effects
	op.Decide(r != nil, &eff)
	done := make(chan error, 1)
	run, cancel := s.detached(ctx)
	go func() {
		defer s.wg.Done()
		defer cancel()
		done <- e.run(run)
	}()
	select {
	case err := <-done:
		if err == nil {
			s.emitAll(ctx, eff.Events)
		}
		return err
	case <-ctx.Done():
		return unavailable(fmt.Errorf("erasure of user %d goes on: %w", user, ctx.Err()))
	}
}

// detached is a context for work that outlives its caller's ctx but not
// the Store: Close cancels it, and waits for the work, which must call
// s.wg.Done when it ends.
func (s *Store) detached(ctx context.Context) (context.Context, context.CancelFunc) {
	run, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.wg.Add(2)
	go func() {
		defer s.wg.Done()
		select {
		case <-s.stop:
			cancel()
		case <-run.Done():
		}
	}()
	return run, cancel
}

const (
	phaseStart = '1'
	phaseScan  = '2'
	phaseEnd   = '3'
)

// erasure is one user's erasure as its intent records it.
type erasure struct {
	s       *Store
	user    uint64
	id      string
	phase   byte
	lease   int64             // unix ms of the last save
	cursors map[string]uint64 // per master address; absent: from 0
	walked  map[string]bool   // masters whose walk is done
	mu      sync.Mutex        // masters are scanned at once
	over    bool              // someone else finished it
}

// walkedCursor is the saved cursor of a master whose walk is done.
const walkedCursor = "done"

func (e *erasure) header(now time.Time) string {
	return e.id + "|" + string(e.phase) + "|" + strconv.FormatInt(now.UnixMilli(), 10)
}

var errBadErasure = errors.New("redisstore: malformed erasure intent")

// loadErasure reads the erasure of user recorded as value, and its
// cursors.
func (s *Store) loadErasure(ctx context.Context, user uint64, value string) (*erasure, error) {
	f := strings.Split(value, "|")
	if len(f) != 3 || len(f[1]) != 1 || f[1][0] < phaseStart || f[1][0] > phaseEnd {
		return nil, fmt.Errorf("%w: %q", errBadErasure, value)
	}
	lease, err := strconv.ParseInt(f[2], 10, 64)
	if err != nil {
		return nil, fmt.Errorf("%w: %q", errBadErasure, value)
	}
	e := &erasure{s: s, user: user, id: f[0], phase: f[1][0], lease: lease, cursors: map[string]uint64{}, walked: map[string]bool{}}
	cs, err := s.rdb.HGetAll(ctx, s.k.erasureCursors(user)).Result()
	if err != nil {
		return nil, s.fail(err)
	}
	for addr, c := range cs {
		if c == walkedCursor {
			e.walked[addr] = true
			continue
		}
		if e.cursors[addr], err = strconv.ParseUint(c, 10, 64); err != nil {
			return nil, fmt.Errorf("%w: cursor %q", errBadErasure, c)
		}
	}
	return e, nil
}

// save records progress: the phase, a fresh lease, and master addr's
// cursor (addr "" for none; walkedCursor once its walk is done); it
// renews the user's marker. It reports false when the erasure is over
// (another runner finished it).
func (e *erasure) save(ctx context.Context, addr, cursor string) (bool, error) {
	s := e.s
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.over {
		return false, nil
	}
	c := script(scErasureSave, []string{s.k.erasures(), s.k.erasureCursors(e.user)},
		e.user, e.id, e.header(s.now()), addr, cursor)
	renew := raw("PEXPIRE", s.k.erasing(e.user), erasureMarkerTTL.Milliseconds())
	if err := s.exec(ctx, c, renew); err != nil {
		return false, err
	}
	e.over = num(c.res.Val()) == 0
	if s.erasureSaved != nil {
		s.erasureSaved()
	}
	return !e.over, nil
}

// run takes the erasure from its recorded phase to its end.
func (e *erasure) run(ctx context.Context) error {
	s := e.s
	if e.phase == phaseStart {
		var eff ops.Effects
		(&ops.EraseUser{User: engine.UserID(e.user)}).Decide(false, &eff)
		if len(eff.Erasures) != 1 || eff.Erasures[0] != (ops.Erasure{User: engine.UserID(e.user)}) {
			return fmt.Errorf("%w: EraseUser decided %+v", errBug, eff.Erasures)
		}
		bucket, low := s.k.user(e.user)
		r, err := s.one(ctx, scEraseStart, []string{bucket, s.k.erasing(e.user)}, low, e.id, erasureMarkerTTL.Milliseconds())
		if err != nil {
			return err
		}
		s.stats.users.Add(-num(r))
		if err := e.outEdges(ctx); err != nil {
			return err
		}
		e.phase = phaseScan
		if ok, err := e.save(ctx, "", ""); err != nil || !ok {
			return err
		}
	}
	if e.phase == phaseScan {
		if err := eachMaster(ctx, s.wcluster, s.wsingle, e.scanMaster); err != nil {
			return s.fail(err)
		}
		e.phase = phaseEnd
		if ok, err := e.save(ctx, "", ""); err != nil || !ok {
			return err
		}
	}
	return e.end(ctx)
}

// outEdges removes the user's own follow edges (ops.ErasureStep with
// Edges from the user): each followee loses a follower, once (a marker
// per edge, in the followee's slot), then the edge goes. A page of edges
// at a time.
func (e *erasure) outEdges(ctx context.Context) error {
	s := e.s
	key := s.k.followees(e.user)
	for {
		fields, _, err := s.rdb.HScan(ctx, key, 0, "", erasureScanCount).Result()
		if err != nil {
			return s.fail(err)
		}
		if len(fields) == 0 {
			return nil
		}
		step := ops.ErasureStep{User: engine.UserID(e.user)}
		for i := 0; i < len(fields); i += 2 {
			t, err := strconv.ParseUint(fields[i], 10, 64)
			if err != nil {
				return s.fail(fmt.Errorf("%w: followee %q of %s", errCorrupt, fields[i], key))
			}
			step.Edges = append(step.Edges, ops.Edge{Viewer: engine.UserID(e.user), Target: engine.UserID(t)})
		}
		var eff ops.Effects
		step.Decide(&eff)
		var bumps, edges, markers []*call
		for _, f := range eff.Followers {
			bucket, low := s.k.user(uint64(f.User))
			m := marker(bucket, e.id+"F"+strconv.FormatUint(uint64(f.User), 10))
			bumps = append(bumps, script(scUserBump, []string{bucket, m}, counting(markerTTL.Milliseconds(), low, uFollowers, f.Delta)...))
			markers = append(markers, raw("DEL", m))
		}
		calls, err := e.edgeCalls(eff.Follows)
		if err != nil {
			return err
		}
		edges = append(edges, calls...)
		if err := s.exec(ctx, bumps...); err != nil {
			return err
		}
		if err := s.exec(ctx, edges...); err != nil {
			return err
		}
		if err := s.exec(ctx, markers...); err != nil {
			return err
		}
		for _, c := range bumps {
			s.stats.users.Add(num(at(vals(c.res.Val()), 1)))
		}
		s.emitAll(ctx, eff.Events)
		if ok, err := e.save(ctx, "", ""); err != nil || !ok {
			return err
		}
	}
}

// edgeCalls removes follow edges ops decided: each in its follower's
// slot, with the follower's following count (scFollow, which changes
// nothing if the edge is gone already).
func (e *erasure) edgeCalls(follows []ops.FollowEdge) ([]*call, error) {
	s := e.s
	calls := make([]*call, 0, len(follows))
	for _, f := range follows {
		if f.Add {
			return nil, fmt.Errorf("%w: an erasure decided a follow %+v", errBug, f)
		}
		bucket, low := s.k.user(uint64(f.Viewer))
		calls = append(calls, script(scFollow, []string{bucket, s.k.followees(uint64(f.Viewer))},
			counting(low, uint64(f.Target), "rem", 0)...))
	}
	return calls, nil
}

// scanMaster walks one master's keys from its saved cursor.
func (e *erasure) scanMaster(ctx context.Context, c *redis.Client) error {
	s := e.s
	addr := c.Options().Addr
	e.mu.Lock()
	cursor, walked := e.cursors[addr], e.walked[addr]
	e.mu.Unlock()
	if walked {
		return nil
	}
	pattern := globEscape(s.k.p) + "{*"
	for step := 1; ; step++ {
		keys, next, err := c.Scan(ctx, cursor, pattern, erasureScanCount).Result()
		if err != nil {
			return err
		}
		if err := e.scanStep(ctx, keys); err != nil {
			return err
		}
		if step == 2 {
			maybeCrash(intentErase)
		}
		cursor = next
		saved := strconv.FormatUint(cursor, 10)
		if cursor == 0 {
			saved = walkedCursor
		}
		ok, err := e.save(ctx, addr, saved)
		if err != nil || !ok || cursor == 0 {
			return err
		}
	}
}

// found is what one scan step reads of one key.
type found struct {
	key  string
	kind byte // scanned key kinds below
	post engine.PostID
	uid  uint64
	gid  uint64
	// client is a claim's idempotency key, as the client sent it.
	client string
	cmd    redis.Cmder
}

// Scanned key kinds.
const (
	foundLike      = 'l'
	foundReaction  = 'k' // a post's reactors hash (kinds other than like)
	foundFavorite  = 'f'
	foundBucket    = 'p' // a post bucket: posts by the user
	foundFollowees = 'F' // another user's followee list
	foundGroup     = 'g' // a group's uid -> mapid hash
	foundIntents   = 'I' // an intent hash
	foundClaim     = 'i' // one of the user's idempotency claims
)

// classify names what a scanned key is to the erasure (0: nothing).
func (e *erasure) classify(key string) found {
	k := e.s.k
	rest, ok := strings.CutPrefix(key, k.p+"{")
	if !ok || rest == "" {
		return found{}
	}
	tagEnd := strings.IndexByte(rest, '}')
	if tagEnd < 0 {
		return found{}
	}
	inner, suffix := rest[:tagEnd], rest[tagEnd+1:]
	switch inner[0] {
	case 'p':
		switch {
		case suffix == "":
			return found{key: key, kind: foundBucket}
		case suffix == "I":
			return found{key: key, kind: foundIntents}
		case suffix[0] == 'l' || suffix[0] == 'f' || suffix[0] == 'k':
			post, ok := k.postOf(inner, suffix[1:])
			if !ok {
				return found{}
			}
			return found{key: key, kind: suffix[0], post: post}
		}
	case 'u':
		switch {
		case strings.HasPrefix(suffix, "F"):
			uid, err := strconv.ParseUint(suffix[1:], 10, 64)
			if err == nil && uid != e.user {
				return found{key: key, kind: foundFollowees, uid: uid}
			}
		case strings.HasPrefix(suffix, "i"):
			id, client, ok := strings.Cut(suffix[1:], ":")
			if ok && id == strconv.FormatUint(e.user, 10) {
				return found{key: key, kind: foundClaim, client: client}
			}
		}
	case 'g':
		gid, err := strconv.ParseUint(inner[1:], 36, 64)
		if err != nil {
			return found{}
		}
		switch suffix {
		case "M":
			return found{key: key, kind: foundGroup, gid: gid}
		case "I":
			return found{key: key, kind: foundIntents}
		}
	}
	return found{}
}

// scanStep reads the facts of one step's keys in one round trip, lets
// ops.ErasureStep decide, and applies what it decided in one more.
func (e *erasure) scanStep(ctx context.Context, keys []string) error {
	s := e.s
	member := strconv.FormatUint(e.user, 10)
	head := postHead(e.user)
	var fs []found
	for _, key := range keys {
		if f := e.classify(key); f.kind != 0 {
			fs = append(fs, f)
		}
	}
	if len(fs) == 0 {
		return nil
	}
	var reads []*call
	if err := s.read(ctx, func(p redis.Pipeliner) {
		for i := range fs {
			f := &fs[i]
			switch f.kind {
			case foundLike, foundFavorite:
				f.cmd = p.SIsMember(ctx, f.key, member)
			case foundReaction:
				f.cmd = p.HGet(ctx, f.key, member)
			case foundFollowees, foundGroup:
				f.cmd = p.HExists(ctx, f.key, member)
			case foundIntents:
				f.cmd = p.HGetAll(ctx, f.key)
			case foundClaim:
				f.cmd = p.Get(ctx, f.key)
			}
		}
	}); err != nil {
		return err
	}
	// Which posts of each bucket the user wrote: a read-only script per
	// bucket, pipelined (they are scripts, which read reads through runPipe).
	var buckets []*found
	for i := range fs {
		if fs[i].kind == foundBucket {
			reads = append(reads, script(scAuthored, []string{fs[i].key}, head))
			buckets = append(buckets, &fs[i])
		}
	}
	if len(reads) > 0 {
		if err := s.runPipe(ctx, s.rdb, reads, false); err != nil {
			return err
		}
	}

	step := ops.ErasureStep{User: engine.UserID(e.user)}
	authored := map[string][]string{} // bucket -> lows
	var claims []*call
	for i := range fs {
		f := &fs[i]
		switch f.kind {
		case foundLike, foundFavorite:
			if f.cmd.(*redis.BoolCmd).Val() {
				flag := ops.FoundFlag{Post: f.post, PostExists: true, Set: true}
				if f.kind == foundLike {
					step.Likes = append(step.Likes, flag)
				} else {
					step.Favorites = append(step.Favorites, flag)
				}
			}
		case foundReaction:
			if id, err := strconv.ParseUint(f.cmd.(*redis.StringCmd).Val(), 10, 8); err == nil {
				step.Likes = append(step.Likes, ops.FoundFlag{Post: f.post, PostExists: true, Set: true, Kind: counters.Kind(id)})
			}
		case foundFollowees:
			if f.cmd.(*redis.BoolCmd).Val() {
				step.Edges = append(step.Edges, ops.Edge{Viewer: engine.UserID(f.uid), Target: engine.UserID(e.user)})
			}
		case foundGroup:
			if f.cmd.(*redis.BoolCmd).Val() {
				step.Groups = append(step.Groups, engine.GroupID(f.gid))
			}
		case foundIntents:
			if err := e.finishNaming(ctx, f.key, f.cmd.(*redis.MapStringStringCmd).Val()); err != nil {
				return err
			}
		case foundClaim:
			v := f.cmd.(*redis.StringCmd).Val()
			claims = append(claims, raw("DEL", f.key))
			if v == "" {
				continue
			}
			_, _, tag, err := parseClaim(v)
			if err != nil {
				return s.fail(err)
			}
			claims = append(claims, raw("DEL", s.k.idemRecord(s.k.p+tag, e.user, f.client)))
		}
	}
	for i, c := range reads {
		for _, low := range c.res.Val().([]any) {
			l := str(low)
			post, ok := s.k.postOf(strings.TrimSuffix(strings.TrimPrefix(buckets[i].key, s.k.p+"{"), "}"), l)
			if !ok {
				return s.fail(fmt.Errorf("%w: post %q of %s", errCorrupt, l, buckets[i].key))
			}
			step.Posts = append(step.Posts, post)
			authored[buckets[i].key] = append(authored[buckets[i].key], l)
		}
	}
	var eff ops.Effects
	step.Decide(&eff)
	calls, err := e.apply(&eff, step.Likes, authored)
	if err != nil {
		return err
	}
	calls = append(calls, claims...)
	if err := s.exec(ctx, calls...); err != nil {
		return err
	}
	for _, c := range calls {
		if c.sc == scEraseFlag {
			s.stats.counted.Add(num(at(vals(c.res.Val()), 1)))
		}
	}
	s.emitAll(ctx, eff.Events)
	return nil
}

// apply turns what ops.ErasureStep decided on a scan step's facts into
// scripts, each checking in its slot the fact it was decided on.
// likes are the step's likes and reactions, in the order Decide made
// their removals; authored the lows of the posts found by the user, per
// bucket.
func (e *erasure) apply(eff *ops.Effects, likes []ops.FoundFlag, authored map[string][]string) ([]*call, error) {
	s := e.s
	member := strconv.FormatUint(e.user, 10)
	var calls []*call
	nthLike := 0
	for _, r := range eff.Removals {
		post := engine.PostID(r.Key)
		bucket, low := s.k.post(uint64(post))
		kind, set, field := counters.Like, likersKey, counters.Likes
		switch r.Set {
		case ops.LikeSet:
			if nthLike >= len(likes) || likes[nthLike].Post != post {
				return nil, fmt.Errorf("%w: a scan step decided a removal %+v out of its likes' order", errBug, r)
			}
			if k := likes[nthLike].Kind; k > counters.Like {
				kind, set = k, reactorsKey
			}
			nthLike++
		case ops.FavoriteSet:
			set, field = favsKey, counters.Favorites
		default:
			return nil, fmt.Errorf("%w: a scan step decided a removal %+v", errBug, r)
		}
		var deltas []ops.CountDelta
		var reactions []ops.ReactionDelta
		if kind == counters.Like {
			for _, c := range eff.Counts {
				if c.Post == post && c.Field == field {
					deltas = append(deltas, c)
				}
			}
		} else {
			for _, c := range eff.ReactionCounts {
				if c.Post == post && c.Kind == kind {
					reactions = append(reactions, c)
				}
			}
		}
		args, err := reactionArgs(post, deltas, reactions)
		if err != nil {
			return nil, err
		}
		// A like leaves its set; a reaction of another kind its hash,
		// only if it is still of the kind found.
		was := ""
		if kind != counters.Like {
			was = strconv.Itoa(int(kind))
		}
		calls = append(calls, script(scEraseFlag, []string{bucket, set(bucket, low)},
			counting(append([]any{low, member, was}, args...)...)...))
	}
	if len(eff.Followers) > 0 {
		return nil, fmt.Errorf("%w: a scan step decided follower counts %+v", errBug, eff.Followers)
	}
	edges, err := e.edgeCalls(eff.Follows)
	if err != nil {
		return nil, err
	}
	calls = append(calls, edges...)
	if len(eff.Unauthors) > 0 {
		lows := map[engine.PostID]bool{}
		for _, p := range eff.Unauthors {
			lows[p] = true
		}
		for bucket, ls := range authored {
			args := []any{postHead(e.user), postHead(0)}
			for _, l := range ls {
				args = append(args, l)
			}
			calls = append(calls, script(scUnauthor, []string{bucket}, args...))
		}
		if len(lows) != len(eff.Unauthors) || len(eff.Unauthors) != countLows(authored) {
			return nil, fmt.Errorf("%w: unauthors %v, posts found %v", errBug, eff.Unauthors, authored)
		}
	}
	for _, m := range eff.GroupErasures {
		if uint64(m.User) != e.user {
			return nil, fmt.Errorf("%w: a scan step decided %+v", errBug, m)
		}
		g := s.k.group(uint64(m.Group))
		calls = append(calls, script(scGroupErase, []string{g.U, g.M, g.Q, g.X}, e.user))
	}
	return calls, nil
}

func countLows(m map[string][]string) int {
	n := 0
	for _, ls := range m {
		n += len(ls)
	}
	return n
}

// finishNaming finishes the intents of one intent hash that name the
// user (its viewer, or a mention), whatever their age, as a sweeper
// would: their effects land before the user's records go at the end.
func (e *erasure) finishNaming(ctx context.Context, key string, intents map[string]string) error {
	s := e.s
	now := s.now().UnixMilli()
	bucket := strings.TrimSuffix(key, "I")
	for id, value := range intents {
		raw, in, _, err := claimable(value, now+importGrace.Milliseconds())
		if err != nil {
			return s.fail(fmt.Errorf("%s %s: %w", key, id, err))
		}
		if raw == "" || in.viewer != e.user && !slices.Contains(in.mentions, e.user) {
			continue
		}
		claimed, ok, err := s.claim(ctx, key, id, value, raw, now)
		if err != nil {
			return err
		}
		if ok {
			if err := s.finishIntent(ctx, bucket, id, claimed, in, false); err != nil {
				return err
			}
		}
	}
	return nil
}

// end is the erasure's last step: what the user made while it ran, then
// their own records, then the intent.
func (e *erasure) end(ctx context.Context) error {
	s := e.s
	bucket, low := s.k.user(e.user)
	for attempt := 0; ; attempt++ {
		if attempt == 8 {
			return s.fail(fmt.Errorf("user %d keeps following while being erased", e.user))
		}
		if err := e.outEdges(ctx); err != nil {
			return err
		}
		r, err := s.one(ctx, scEraseEnd, []string{bucket, s.k.erasing(e.user), s.k.written(e.user), s.k.followees(e.user)}, low)
		if err != nil {
			return err
		}
		if n := num(at(vals(r), 0)); n >= 0 {
			s.stats.users.Add(-n)
			break
		}
	}
	if err := s.exec(ctx, raw("DEL", s.k.limiter(e.user)), raw("DEL", s.k.socketCap(e.user))); err != nil {
		return err
	}
	var eff ops.Effects
	(&ops.ErasureStep{User: engine.UserID(e.user), Done: true}).Decide(&eff)
	if len(eff.Erasures) != 1 || !eff.Erasures[0].Done {
		return fmt.Errorf("%w: the last erasure step decided %+v", errBug, eff.Erasures)
	}
	_, err := s.one(ctx, scErasureDone, []string{s.k.erasures(), s.k.erasureCursors(e.user)}, e.user, e.id)
	return err
}

// sweepErasures runs the erasures whose runner stopped renewing their
// lease (it died, or Redis failed it) for claimTimeout. With wait it
// returns how many it finished; otherwise (a periodic sweep, whose step
// is short) each runs on in this process, renewing its lease, and it
// returns 0.
func (s *Store) sweepErasures(ctx context.Context, now int64, wait bool) (int, error) {
	all, err := s.rdb.HGetAll(ctx, s.k.erasures()).Result()
	if err != nil {
		return 0, s.fail(err)
	}
	done := 0
	for field, value := range all {
		user, err := strconv.ParseUint(field, 10, 64)
		if err != nil {
			return done, fmt.Errorf("%w: user %q", errBadErasure, field)
		}
		e, err := s.loadErasure(ctx, user, value)
		if err != nil {
			return done, err
		}
		if now-e.lease < claimTimeout.Milliseconds() {
			continue // its runner is alive
		}
		if !wait {
			run, cancel := s.detached(ctx)
			go func() {
				defer s.wg.Done()
				defer cancel()
				if err := e.run(run); err != nil {
					s.intentSweepsFailed.Add(1)
				}
			}()
			continue
		}
		if err := e.run(ctx); err != nil {
			return done, err
		}
		done++
	}
	return done, nil
}
