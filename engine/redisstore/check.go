package redisstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/counters"
)

// Checking the derived counts of a live keyspace (`tally check -redis`,
// engine.Checker).
//
// The checks are three tables, by where a count lives relative to what it
// counts, each entry one derived count:
//
//   - postSetChecks: a count in the post record ← the members of a set in
//     the post's slot (likes ← the likers; comments ← the counted comment
//     ids, plus those the record says came without one, so comments are
//     recounted exactly too; each reaction kind but like ← the fields of
//     the reactors hash of that kind, one check per kind of the table;
//     deleted posts hold none). A script per
//     post bucket recounts the bucket's posts atomically (SCARD beside
//     the record), so what it reports is a drift, never a race; a repair
//     is a script per post that recounts and sets atomically. The same
//     walk checks each post's reactedBit against its reactors hash
//     (engine.CheckReacted): the bucket's script lists a bit without a
//     hash (harmless: a page reads a field that is not there), and every
//     reactors hash the walk meets is checked to have its bit (a hash
//     without it is a reaction no page shows); a repair sets the bit to
//     whether the hash exists, atomically.
//   - userHashChecks: a field of the user record ← the length of a hash
//     in the user's slot (following ← the followee hash). The scans find
//     candidates; a script per user compares (and with Repair sets)
//     atomically, so only real drifts are reported.
//   - userTallyChecks: a field of the user record ← what scans of other
//     slots tally (followers ← the followee hashes' members, posts ← the
//     authors of the post records). Nothing atomic spans those slots, so
//     the check reads the user records before and after the scans: a
//     count that changed in between is unsettled (reported, not judged);
//     one that did not is compared with the tally, and a repair is a
//     compare-and-set against the value read, so a write that lands in
//     between is never overwritten (the repair then is unsettled). A
//     count that a pending operation (an intent) will change is
//     unsettled too: the operation brings it to its tally; so is every
//     count of a user whose erasure is under way (its record went at the
//     start; the walk takes their edges and posts a step at a time). A
//     follow and unfollow of the same pair both inside the scan can still make a
//     settled count look one off; a second check judges it again.
//
// Every step is bounded: SCAN with COUNT, a script per bucket (at most a
// listpack's worth of posts or users), HSCAN for a long followee hash.
// Without Repair a check writes nothing. With it, it first finishes the
// operations dead processes left half-applied (sweepIntents), whose
// effects would otherwise be counted twice, once by the repair and once
// by the sweeper.

var _ engine.Checker = (*Store)(nil)

// postSetCheck is a post-record count derived from a per-post set: its
// size, plus the record's field plus when set (the comments sent without
// an id, which no set member stands for), so every count is recounted
// exactly.
type postSetCheck struct {
	name  string
	field int                             // Lua index in the post record
	set   func(bucket, low string) string // the post's set key
	plus  int                             // Lua index added to the set's size; 0 for none
	// kind, for a reaction kind other than like, makes set the reactors
	// hash, whose fields of that kind are counted.
	kind counters.Kind
}

// postChecks are postSetChecks and a check per reaction kind of the
// keyspace's table but like (whose count is the likes).
func (s *Store) postChecks() []postSetCheck {
	checks := slices.Clone(postSetChecks)
	for _, id := range s.kinds.IDs() {
		if id != counters.Like {
			checks = append(checks, postSetCheck{name: engine.CheckReactions + s.kinds.Name(id), field: pKind(id), set: reactorsKey, kind: id})
		}
	}
	return checks
}

// kindArg is a check's kind as its scripts take it (empty for a set).
func (ch *postSetCheck) kindArg() string {
	if ch.kind == counters.NoKind {
		return ""
	}
	return strconv.Itoa(int(ch.kind))
}

var postSetChecks = []postSetCheck{
	{name: engine.CheckLikes, field: pLikes, set: likersKey},
	{name: engine.CheckFavorites, field: pFavorites, set: favsKey},
	{name: engine.CheckComments, field: pComments, set: commentsKey, plus: pUnidentified},
}

// userHashCheck is a user-record field derived from a hash's length, in
// the user's slot.
type userHashCheck struct {
	name  string
	field int
	hash  func(k keyspace, uid uint64) string
}

var userHashChecks = []userHashCheck{
	{engine.CheckFollowing, uFollowing, keyspace.followees},
}

// userTallyCheck is a user-record count derived from a tally of other
// slots, which the scans of a checkRun fill: field, less field minus when
// set (the post count shown is the posts made less those deleted; feed
// badges read the posts made). pending, if set, names the users whose
// count a pending cross-slot operation (an intent: its first step
// applied, the count's step not yet) will change: their count is behind
// its tally for now, and is left to the operation.
type userTallyCheck struct {
	name    string
	field   int
	minus   int // 0 for none
	tally   func(*checkRun) map[uint64]int64
	pending func(in intent) []uint64
}

// stored is the count u holds, and the value of its minus field.
func (ch *userTallyCheck) stored(u userRec) (count, minus int64) {
	if ch.minus != 0 {
		minus = u.get(ch.minus)
	}
	return u.get(ch.field) - minus, minus
}

var userTallyChecks = []userTallyCheck{
	{name: engine.CheckFollowers, field: uFollowers, tally: func(r *checkRun) map[uint64]int64 { return r.followed }},
	{name: engine.CheckPosts, field: uPosts, minus: uDeleted, tally: func(r *checkRun) map[uint64]int64 { return r.authored },
		pending: func(in intent) []uint64 {
			switch in.kind {
			case intentPost, intentRepost, intentDelete:
				return []uint64{in.viewer}
			case intentImport, intentImportPending:
				out := make([]uint64, len(in.imported))
				for i, row := range in.imported {
					out[i] = row.author
				}
				return out
			}
			return nil
		}},
}

// scanCount is the COUNT of a check's SCANs: keys per step, each step's
// scripts one pipelined round trip.
const scanCount = 500

// longHash is the length past which a followee hash is read with HSCAN
// in steps rather than with one HKEYS.
const longHash = 1000

// checkRun is one Check: what the scans found, under mu (the masters are
// scanned at once).
type checkRun struct {
	s    *Store
	opts engine.CheckOptions
	span engine.ImportSpan
	// posts are the post-set checks of this keyspace's kinds.
	posts []postSetCheck

	mu  sync.Mutex
	res engine.CheckResult
	// before holds, per userTallyChecks entry, the non-zero counts the
	// user records held before the scans.
	before []map[uint64]int64
	// authored: posts per author; followed: followers per followee;
	// following: the length of each viewer's followee hash.
	authored, followed, following map[uint64]int64
	// cands are the user-record fields the second read found off their
	// recount, for settle.
	cands []userCandidate
	// erasing are the users whose erasure was under way before the scans
	// or after them: their record went at its start, their edges and
	// posts go as it walks, so their counts are left to it (unsettled).
	erasing map[uint64]bool
}

// readErasing adds the users being erased now to r.erasing.
func (r *checkRun) readErasing(ctx context.Context) error {
	users, err := r.s.rdb.HKeys(ctx, r.s.k.erasures()).Result()
	if err != nil {
		return r.s.fail(err)
	}
	if r.erasing == nil {
		r.erasing = map[uint64]bool{}
	}
	for _, f := range users {
		uid, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			return fmt.Errorf("%w: user %q", errBadErasure, f)
		}
		r.erasing[uid] = true
	}
	return nil
}

// Check implements engine.Checker (see above).
func (s *Store) Check(ctx context.Context, opts engine.CheckOptions) (engine.CheckResult, error) {
	r := &checkRun{s: s, opts: opts, posts: s.postChecks(), authored: map[uint64]int64{}, followed: map[uint64]int64{}, following: map[uint64]int64{}}
	for _, c := range r.posts {
		r.res.Tally(c.name)
	}
	r.res.Tally(engine.CheckReacted)
	for _, c := range userHashChecks {
		r.res.Tally(c.name)
	}
	for _, c := range userTallyChecks {
		r.res.Tally(c.name)
		r.before = append(r.before, map[uint64]int64{})
	}
	if opts.Repair {
		n, err := s.sweepIntents(ctx, 0)
		if err != nil {
			return r.res, err
		}
		if n > 0 {
			r.note("finished %d operations that processes had left half-applied, before checking", n)
		}
	}
	span, err := s.importSpan(ctx)
	if err != nil {
		return r.res, err
	}
	r.span = span
	if err := r.readErasing(ctx); err != nil {
		return r.res, err
	}
	steps := []struct {
		name string
		run  func(context.Context, *redis.Client) error
	}{{"users", r.readUsersBefore}, {"sources", r.scanSources}, {"compare", r.compareUsers}}
	for _, step := range steps {
		if s.checkPause != nil {
			s.checkPause(step.name)
		}
		if err := eachMaster(ctx, s.wcluster, s.wsingle, step.run); err != nil {
			return r.res, s.fail(err)
		}
	}
	r.leftovers()
	if err := r.settle(ctx); err != nil {
		return r.res, err
	}
	if span.Hi != 0 {
		r.note("posts %d..%d may hold imported counts: their likes and favorites are not recounted", span.Lo, span.Hi)
	}
	return r.res, nil
}

func (r *checkRun) note(format string, args ...any) {
	r.mu.Lock()
	r.res.Notes = append(r.res.Notes, fmt.Sprintf(format, args...))
	r.mu.Unlock()
}

// report tallies d and hands it to opts.Drift, under mu.
func (r *checkRun) report(d engine.Drift) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := r.res.Tally(d.Count)
	switch {
	case d.Unsettled:
		t.Unsettled++
	case d.Repaired:
		t.Drifts++
		t.Repaired++
	default:
		t.Drifts++
	}
	if r.opts.Drift != nil {
		r.opts.Drift(d)
	}
}

// scan walks the keys of c matching pattern and of type typ, a SCAN step
// at a time, handing each step's keys to fn.
func scan(ctx context.Context, c *redis.Client, pattern, typ string, fn func(keys []string) error) error {
	var cursor uint64
	for {
		keys, next, err := c.ScanType(ctx, cursor, pattern, scanCount, typ).Result()
		if err != nil {
			return err
		}
		if len(keys) > 0 {
			if err := fn(keys); err != nil {
				return err
			}
		}
		if cursor = next; cursor == 0 {
			return ctx.Err()
		}
	}
}

// run runs calls on c (the node whose SCAN found their keys) in one
// pipelined round trip, failing on any error: a key that moved to another
// node mid-check (resharding) fails the check rather than go unchecked.
func (r *checkRun) run(ctx context.Context, c *redis.Client, calls []*call) error {
	if err := r.s.runPipe(ctx, c, calls, false); err != nil {
		return err
	}
	for _, cl := range calls {
		if err := cl.res.Err(); err != nil {
			return err
		}
	}
	return nil
}

// userBuckets reads each user bucket of c and calls fn with every user's
// id, bucket, low bits and record.
func (r *checkRun) userBuckets(ctx context.Context, c *redis.Client, fn func(uid uint64, bucket, low string, u userRec)) error {
	return scan(ctx, c, globEscape(r.s.k.p)+"{u*}", "hash", func(keys []string) error {
		p := c.Pipeline()
		reads := make([]*redis.MapStringStringCmd, len(keys))
		for i, k := range keys {
			reads[i] = p.HGetAll(ctx, k)
		}
		if _, err := p.Exec(ctx); err != nil {
			return err
		}
		for i, k := range keys {
			base, ok := r.s.k.userBucketBase(k)
			if !ok {
				continue
			}
			for low, raw := range reads[i].Val() {
				n, err := strconv.ParseUint(low, 10, 64)
				if err != nil {
					return fmt.Errorf("%w: user bucket %s field %q", errCorrupt, k, low)
				}
				u, err := decodeUser(raw)
				if err != nil {
					return fmt.Errorf("%w: user bucket %s field %s", err, k, low)
				}
				fn(base|n, k, low, u)
			}
		}
		return nil
	})
}

func (r *checkRun) readUsersBefore(ctx context.Context, c *redis.Client) error {
	return r.userBuckets(ctx, c, func(uid uint64, _, _ string, u userRec) {
		r.mu.Lock()
		for i := range userTallyChecks {
			if v, _ := userTallyChecks[i].stored(u); v != 0 {
				r.before[i][uid] = v
			}
		}
		r.mu.Unlock()
	})
}

// scanSources walks the hashes of c once for what the counts are
// recounted from: the post buckets (checkPosts), the reactors hashes
// (checkReacted) and the followee hashes (checkFollowees). One walk, not
// one per kind: a SCAN costs Redis time for every key of the node,
// whatever the pattern keeps.
func (r *checkRun) scanSources(ctx context.Context, c *redis.Client) error {
	return scan(ctx, c, globEscape(r.s.k.p)+"{*", "hash", func(keys []string) error {
		var posts, followees []string
		reactors := map[string][]any{} // bucket -> lows
		for _, k := range keys {
			switch {
			case r.s.k.isPostBucket(k):
				posts = append(posts, k)
			case r.s.k.isFollowees(k):
				followees = append(followees, k)
			default:
				if bucket, low, ok := r.s.k.reactorsOf(k); ok {
					reactors[bucket] = append(reactors[bucket], low)
				}
			}
		}
		if err := r.checkPosts(ctx, c, posts); err != nil {
			return err
		}
		if err := r.checkReacted(ctx, c, reactors); err != nil {
			return err
		}
		return r.checkFollowees(ctx, c, followees)
	})
}

// checkReacted reports the posts among the reactors hashes found (by
// bucket, their lows) whose record lacks reactedBit.
func (r *checkRun) checkReacted(ctx context.Context, c *redis.Client, reactors map[string][]any) error {
	var calls []*call
	for bucket, lows := range reactors {
		calls = append(calls, script(scCheckReacted, []string{bucket}, append([]any{reactorsKey("", "")}, lows...)...))
	}
	if err := r.run(ctx, c, calls); err != nil {
		return err
	}
	for _, cl := range calls {
		for _, low := range vals(cl.res.Val()) {
			if err := r.reactedDrift(ctx, cl.keys[0], str(low), 0); err != nil {
				return err
			}
		}
	}
	return nil
}

// reactedDrift reports (and with Repair sets) the reactedBit of the post
// at low of bucket, found stored (0 or 1) while its reactors hash says
// otherwise.
func (r *checkRun) reactedDrift(ctx context.Context, bucket, low string, stored int64) error {
	w, _ := r.s.k.postBucketWindow(bucket)
	n, err := strconv.ParseUint(low, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: post bucket %s field %q", errCorrupt, bucket, low)
	}
	d := engine.Drift{Count: engine.CheckReacted, ID: w<<r.s.k.winShift | n, Stored: stored, Recounted: 1 - stored}
	if r.opts.Repair {
		res, err := r.s.one(ctx, scSetReacted, []string{bucket, reactorsKey(bucket, low)}, low)
		if err != nil {
			return err
		}
		a := vals(res)
		switch num(at(a, 0)) {
		case 1:
			d.Recounted, d.Repaired = num(at(a, 1)), true
		default: // the post is gone, or a reaction set it right meanwhile
			d.Unsettled = true
		}
	}
	r.report(d)
	return nil
}

// checkPosts runs the post-set checks over post buckets of c and tallies
// the posts' authors. A bucket whose posts all hold imported counts has
// nothing to compare: its authors are read without a script.
func (r *checkRun) checkPosts(ctx context.Context, c *redis.Client, keys []string) error {
	var suffixes []any
	for _, ch := range r.posts {
		// The set key is the bucket, a part naming the set, the low bits.
		suffixes = append(suffixes, ch.field, ch.set("", ""), ch.plus, ch.kindArg())
	}
	var calls, imported []*call
	var windows []uint64
	for _, k := range keys {
		w, _ := r.s.k.postBucketWindow(k)
		lo, hi := r.s.k.spanLows(r.span, w)
		if lo == 0 && hi == r.s.k.lowMask {
			imported = append(imported, raw("HVALS", k))
			continue
		}
		calls = append(calls, script(scCheckPosts, []string{k}, append([]any{lo, hi, reactorsKey("", "")}, suffixes...)...))
		windows = append(windows, w)
	}
	if err := r.run(ctx, c, append(calls, imported...)); err != nil {
		return err
	}
	type found struct {
		bucket, low string
		id          uint64
		check       *postSetCheck
		stored, got int64
	}
	var drifts []found
	r.mu.Lock()
	for _, cl := range imported {
		for _, rec := range vals(cl.res.Val()) {
			if str(rec) == tombstone {
				continue
			}
			author, err := decodeHead(str(rec))
			if err != nil {
				r.mu.Unlock()
				return fmt.Errorf("%w: post bucket %s", err, cl.keys[0])
			}
			if author != 0 {
				r.authored[author]++
			}
			for _, ch := range r.posts {
				r.res.Tally(ch.name).Skipped++
			}
			// The bit is checked from the hashes alone here.
			r.res.Tally(engine.CheckReacted).Skipped++
		}
	}
	var unreacted [][2]string // bucket, low
	for i, cl := range calls {
		a := vals(cl.res.Val())
		heads := vals(at(a, 0))
		for j := 0; j+1 < len(heads); j += 2 {
			author, err := decodeHead(str(heads[j]))
			if err != nil {
				r.mu.Unlock()
				return fmt.Errorf("%w: post bucket %s", err, cl.keys[0])
			}
			r.authored[author] += num(heads[j+1])
		}
		checked, skipped := num(at(a, 2)), num(at(a, 3))
		for _, ch := range r.posts {
			t := r.res.Tally(ch.name)
			t.Checked += checked
			t.Skipped += skipped
		}
		r.res.Tally(engine.CheckReacted).Checked += checked + skipped
		for _, low := range vals(at(a, 4)) {
			unreacted = append(unreacted, [2]string{cl.keys[0], str(low)})
		}
		d := vals(at(a, 1))
		for j := 0; j+3 < len(d); j += 4 {
			low := str(d[j])
			n, err := strconv.ParseUint(low, 10, 64)
			if err != nil {
				r.mu.Unlock()
				return fmt.Errorf("%w: post bucket %s field %q", errCorrupt, cl.keys[0], low)
			}
			drifts = append(drifts, found{cl.keys[0], low, windows[i]<<r.s.k.winShift | n,
				&r.posts[num(d[j+1])-1], num(d[j+2]), num(d[j+3])})
		}
	}
	r.mu.Unlock()
	for _, u := range unreacted {
		if err := r.reactedDrift(ctx, u[0], u[1], 1); err != nil {
			return err
		}
	}
	for _, f := range drifts {
		d := engine.Drift{Count: f.check.name, ID: f.id, Stored: f.stored, Recounted: f.got}
		if r.opts.Repair {
			res, err := r.s.one(ctx, scRecountPost, []string{f.bucket, f.check.set(f.bucket, f.low)}, f.low, f.check.field, f.check.plus, f.check.kindArg())
			if err != nil {
				return err
			}
			a := vals(res)
			switch num(at(a, 0)) {
			case 1:
				d.Stored, d.Recounted, d.Repaired = num(at(a, 1)), num(at(a, 2)), true
				r.s.stats.counted.Add(num(at(a, 3)))
			default: // the post is gone, or a write set it right meanwhile
				d.Unsettled = true
			}
		}
		r.report(d)
	}
	return nil
}

// checkFollowees tallies the followers of every followee and the length
// of every followee hash among keys, on c.
func (r *checkRun) checkFollowees(ctx context.Context, c *redis.Client, keys []string) error {
	if len(keys) == 0 {
		return nil
	}
	p := c.Pipeline()
	lens := make([]*redis.IntCmd, len(keys))
	for i, k := range keys {
		lens[i] = p.HLen(ctx, k)
	}
	if _, err := p.Exec(ctx); err != nil {
		return err
	}
	p = c.Pipeline()
	short := make([]*redis.StringSliceCmd, len(keys))
	for i, k := range keys {
		if lens[i].Val() <= longHash {
			short[i] = p.HKeys(ctx, k)
		}
	}
	if _, err := p.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return err
	}
	for i, k := range keys {
		viewer, _ := followeesOwner(k)
		var targets []string
		if short[i] != nil {
			targets = short[i].Val()
		} else if err := hscanKeys(ctx, c, k, func(fields []string) { targets = append(targets, fields...) }); err != nil {
			return err
		}
		r.mu.Lock()
		r.following[viewer] = lens[i].Val()
		for _, f := range targets {
			if t, err := strconv.ParseUint(f, 10, 64); err == nil {
				r.followed[t]++
			}
		}
		r.mu.Unlock()
	}
	return nil
}

// hscanKeys reads a hash's fields in HSCAN steps.
func hscanKeys(ctx context.Context, c *redis.Client, key string, fn func(fields []string)) error {
	var cursor uint64
	for {
		kv, next, err := c.HScan(ctx, key, cursor, "", longHash).Result()
		if err != nil {
			return err
		}
		fields := make([]string, 0, len(kv)/2)
		for i := 0; i < len(kv); i += 2 {
			fields = append(fields, kv[i])
		}
		fn(fields)
		if cursor = next; cursor == 0 {
			return nil
		}
	}
}

// followeesOwner parses the viewer's id from their followee hash's key
// (keyspace.followees: the user bucket, "F", the id).
func followeesOwner(key string) (uint64, bool) {
	i := strings.LastIndex(key, "}F")
	if i < 0 {
		return 0, false
	}
	uid, err := strconv.ParseUint(key[i+2:], 10, 64)
	return uid, err == nil
}

// userCandidate is a user-record field the scans found off its recount.
type userCandidate struct {
	uid         uint64
	bucket, low string
	stored, got int64
	before      int64 // userTallyChecks: the count before the scans
	minus       int64 // userTallyChecks: the value of its minus field
	hash        *userHashCheck
	tally       *userTallyCheck
}

// compareUsers reads the user records of c again and compares each with
// the tallies, keeping what differs for settle.
func (r *checkRun) compareUsers(ctx context.Context, c *redis.Client) error {
	return r.userBuckets(ctx, c, func(uid uint64, bucket, low string, u userRec) {
		r.mu.Lock()
		defer r.mu.Unlock()
		for i := range userHashChecks {
			ch := &userHashChecks[i]
			r.res.Tally(ch.name).Checked++
			got := r.following[uid]
			delete(r.following, uid)
			if stored := u.get(ch.field); stored != got {
				r.cands = append(r.cands, userCandidate{uid: uid, bucket: bucket, low: low, stored: stored, got: got, hash: ch})
			}
		}
		for i := range userTallyChecks {
			ch := &userTallyChecks[i]
			tally := ch.tally(r)
			got := tally[uid]
			stored, minus := ch.stored(u)
			delete(tally, uid)
			if got == 0 && stored == 0 {
				continue
			}
			r.res.Tally(ch.name).Checked++
			if stored != got {
				r.cands = append(r.cands, userCandidate{uid: uid, bucket: bucket, low: low, stored: stored, got: got,
					before: r.before[i][uid], tally: ch, minus: minus})
			}
		}
	})
}

// leftovers adds to the candidates what the scans tallied for users whose
// records the second read did not find: their stored counts are 0.
func (r *checkRun) leftovers() {
	add := func(m map[uint64]int64, mk func(uid uint64, got int64) userCandidate) {
		uids := make([]uint64, 0, len(m))
		for uid, got := range m {
			if got != 0 {
				uids = append(uids, uid)
			}
		}
		slices.Sort(uids)
		for _, uid := range uids {
			r.cands = append(r.cands, mk(uid, m[uid]))
		}
	}
	for i := range userHashChecks {
		ch := &userHashChecks[i]
		add(r.following, func(uid uint64, got int64) userCandidate {
			r.res.Tally(ch.name).Checked++
			bucket, low := r.s.k.user(uid)
			return userCandidate{uid: uid, bucket: bucket, low: low, got: got, hash: ch}
		})
	}
	for i := range userTallyChecks {
		ch := &userTallyChecks[i]
		add(ch.tally(r), func(uid uint64, got int64) userCandidate {
			r.res.Tally(ch.name).Checked++
			bucket, low := r.s.k.user(uid)
			return userCandidate{uid: uid, bucket: bucket, low: low, got: got, before: r.before[i][uid], tally: ch}
		})
	}
}

// settle judges the candidates: a hash check's by a script that compares
// (and with Repair sets) atomically in the user's slot; a tally check's
// by whether its count held still across the scans and no pending
// operation will change it, repaired by compare-and-set.
func (r *checkRun) settle(ctx context.Context) error {
	if len(r.cands) == 0 {
		return nil
	}
	if r.s.checkPause != nil {
		r.s.checkPause("settle")
	}
	pending, err := r.pendingUsers(ctx)
	if err != nil {
		return err
	}
	if err := r.readErasing(ctx); err != nil {
		return err
	}
	for _, cd := range r.cands {
		d := engine.Drift{ID: cd.uid, Stored: cd.stored, Recounted: cd.got}
		switch {
		case r.erasing[cd.uid]:
			d.Unsettled = true
			if cd.hash != nil {
				d.Count = cd.hash.name
			} else {
				d.Count = cd.tally.name
			}
		case cd.hash != nil:
			d.Count = cd.hash.name
			run := r.s.query
			if r.opts.Repair {
				run = r.s.one
			}
			res, err := run(ctx, scCheckUserHash, []string{cd.bucket, cd.hash.hash(r.s.k, cd.uid)}, cd.low, cd.hash.field, flag(r.opts.Repair))
			if err != nil {
				return err
			}
			a := vals(res)
			d.Stored, d.Recounted = num(at(a, 0)), num(at(a, 1))
			if d.Stored == d.Recounted {
				continue // the scans raced a follow: no drift
			}
			if num(at(a, 2)) == 1 {
				d.Repaired = true
				r.s.stats.users.Add(num(at(a, 3)))
			}
		default:
			d.Count = cd.tally.name
			if cd.before != cd.stored || pending[cd.tally.name][cd.uid] {
				d.Unsettled = true
				break
			}
			if !r.opts.Repair {
				break
			}
			// The minus field is compared too, and kept, so that a delete
			// landing meanwhile leaves the repair unsettled.
			args := []any{cd.low, 1, cd.tally.field, cd.stored + cd.minus, cd.got + cd.minus}
			if cd.tally.minus != 0 {
				args = []any{cd.low, 2, cd.tally.field, cd.stored + cd.minus, cd.got + cd.minus, cd.tally.minus, cd.minus, cd.minus}
			}
			res, err := r.s.one(ctx, scUserCAS, []string{cd.bucket}, args...)
			if err != nil {
				return err
			}
			a := vals(res)
			r.s.stats.users.Add(num(at(a, 0)))
			if num(at(a, 1)) == 1 {
				d.Repaired = true
			} else {
				d.Unsettled = true
			}
		}
		r.report(d)
	}
	return nil
}

// importSpan reads the span of post ids that imports wrote counts for.
func (s *Store) importSpan(ctx context.Context) (engine.ImportSpan, error) {
	v, err := s.rdb.HMGet(ctx, s.k.imported(), "lo", "hi").Result()
	if err != nil {
		return engine.ImportSpan{}, s.fail(err)
	}
	if v[0] == nil || v[1] == nil {
		return engine.ImportSpan{}, nil
	}
	lo, err1 := strconv.ParseUint(str(v[0]), 10, 64)
	hi, err2 := strconv.ParseUint(str(v[1]), 10, 64)
	if err1 != nil || err2 != nil || lo > hi {
		return engine.ImportSpan{}, fmt.Errorf("%w: %s holds %v", errCorrupt, s.k.imported(), v)
	}
	return engine.ImportSpan{Lo: lo, Hi: hi}, nil
}

// widenImportSpan grows the import span to hold ids lo..hi, before an
// import writes their rows.
func (s *Store) widenImportSpan(ctx context.Context, lo, hi uint64) error {
	_, err := s.one(ctx, scWidenSpan, []string{s.k.imported()}, spanArg(lo), spanArg(hi))
	return err
}

// spanArg writes an id as 20 zero-padded digits, so that the script
// compares ids as strings (Lua numbers hold only 53 bits).
func spanArg(id uint64) string { return fmt.Sprintf("%020d", id) }

// isPostBucket reports whether key is a post bucket's.
func (k keyspace) isPostBucket(key string) bool {
	_, ok := k.postBucketWindow(key)
	return ok
}

// reactorsOf parses a post's reactors hash key (reactorsKey: its bucket,
// "k", its low bits) into the bucket and the low bits.
func (k keyspace) reactorsOf(key string) (bucket, low string, ok bool) {
	i := strings.LastIndex(key, "}k")
	if i < 0 || !k.isPostBucket(key[:i+1]) {
		return "", "", false
	}
	bucket, low = key[:i+1], key[i+2:]
	if _, err := strconv.ParseUint(low, 10, 64); err != nil {
		return "", "", false
	}
	return bucket, low, true
}

// isFollowees reports whether key is a followee hash's (keyspace.followees:
// a user bucket, "F", the user's id).
func (k keyspace) isFollowees(key string) bool {
	rest, ok := strings.CutPrefix(key, k.p+"{u")
	if !ok {
		return false
	}
	_, ok = followeesOwner(rest)
	return ok && !strings.ContainsAny(rest[:strings.LastIndex(rest, "}F")], "{}")
}

// postBucketWindow parses the time window of a post bucket's key
// (keyspace.idBucket: the prefix, "{p", the window and sub-bucket in base
// 36, "}").
func (k keyspace) postBucketWindow(key string) (uint64, bool) {
	rest, ok := strings.CutPrefix(key, k.p+"{p")
	if !ok || !strings.HasSuffix(rest, "}") {
		return 0, false
	}
	w, _, ok := strings.Cut(rest[:len(rest)-1], ".")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseUint(w, 36, 64)
	return n, err == nil
}

// userBucketBase parses a user bucket's key (keyspace.user) into the id
// of its first user.
func (k keyspace) userBucketBase(key string) (uint64, bool) {
	rest, ok := strings.CutPrefix(key, k.p+"{u")
	if !ok || !strings.HasSuffix(rest, "}") {
		return 0, false
	}
	b, err := strconv.ParseUint(rest[:len(rest)-1], 36, 64)
	return b << k.userBits, err == nil
}

// spanLows is the range of low bits of window w's posts that the import
// span holds, as the check script's arguments (lo > hi: none).
func (k keyspace) spanLows(span engine.ImportSpan, w uint64) (lo, hi uint64) {
	if span.Hi == 0 || w < span.Lo>>k.winShift || w > span.Hi>>k.winShift {
		return 1, 0
	}
	lo, hi = 0, k.lowMask
	if w == span.Lo>>k.winShift {
		lo = span.Lo & k.lowMask
	}
	if w == span.Hi>>k.winShift {
		hi = span.Hi & k.lowMask
	}
	return lo, hi
}

// pendingUsers reads the intents left in the keyspace, after the second
// read of the user records: an operation whose first step the scans saw
// and whose user step the read did not (one in flight, or one a dead
// process left within its grace period) would otherwise look like a
// drift, and a repair and the operation's finish would both count it. It
// returns, per tally check with a pending rule, the users named.
func (r *checkRun) pendingUsers(ctx context.Context) (map[string]map[uint64]bool, error) {
	out := map[string]map[uint64]bool{}
	var mu sync.Mutex
	note := func(value string) error {
		raw := value
		if len(value) > 1 && value[0] == 'c' && value[1] != '|' { // claimed: "c<ms>|<intent>"
			_, raw, _ = strings.Cut(value, "|")
		}
		in, err := decodeIntent(raw)
		if err != nil {
			return fmt.Errorf("%w: %q", err, value)
		}
		mu.Lock()
		defer mu.Unlock()
		for _, ch := range userTallyChecks {
			if ch.pending == nil {
				continue
			}
			for _, u := range ch.pending(in) {
				if out[ch.name] == nil {
					out[ch.name] = map[uint64]bool{}
				}
				out[ch.name][u] = true
			}
		}
		return nil
	}
	err := eachMaster(ctx, r.s.wcluster, r.s.wsingle, func(ctx context.Context, c *redis.Client) error {
		return scan(ctx, c, globEscape(r.s.k.p)+intentScanPattern, "hash", func(keys []string) error {
			for _, k := range keys {
				all, err := c.HVals(ctx, k).Result()
				if err != nil {
					return err
				}
				for _, v := range all {
					if err := note(v); err != nil {
						return err
					}
				}
			}
			return nil
		})
	})
	if err != nil {
		return nil, r.s.fail(err)
	}
	imports, err := r.s.rdb.HVals(ctx, r.s.k.importIntents()).Result()
	if err != nil {
		return nil, r.s.fail(err)
	}
	for _, v := range imports {
		if err := note(v); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// flag is a boolean as the scripts take it.
func flag(b bool) int {
	if b {
		return 1
	}
	return 0
}
