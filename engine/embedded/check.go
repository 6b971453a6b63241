package embedded

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/counters"
	"github.com/tally-dev/tally/engine/ops"
	"github.com/tally-dev/tally/engine/tier"
	"github.com/tally-dev/tally/engine/usercounts"
	"github.com/tally-dev/tally/engine/wal"
)

// Checking the derived counts (`tally check -data`, engine.Checker).
//
// The engine keeps counts beside what they count: a post's likes beside
// its like set, a user's follower count beside the follow edges, an
// author's post count beside the posts registered with them. Every record
// changes both in one apply, so they agree unless a bug made them not;
// a check recounts each from what it counts, and a repair logs a
// recountRec per drift, which sets the count like any other record does:
// durably, and again on every replay.
//
// The checks are two tables, one per shape, each entry one derived count:
//
//   - postChecks: a count in the post's record ← the pairs of a tier.Set
//     that name the post. One pass over the post table (in id order)
//     merges every entry's set (Set.Range yields pairs window by window,
//     so in post id order too), without a map.
//   - userChecks: a per-user usercounts.Table ← a grouping, by user, of
//     another structure (the follow edges by followee, the posts by
//     author), tallied into a map and compared with the table.
//
// A user's following count is not stored (it is the followee list's
// length), so it has nothing that can drift and no entry. The codes are
// in the log (recountRec): never renumber, only append.

var _ engine.Checker = (*Engine)(nil)

// postCheck is a count in the post record derived from a pair set.
// atLeast says the count also counts what no pair records (comments sent
// without an id): only a count below its pairs is a drift, repaired up
// to their number. kind, when set, counts only the pairs of that
// reaction kind (the like set holds every kind) against the post's count
// of the kind (like's is its likes) instead of field.
type postCheck struct {
	code    byte
	name    string
	field   counters.Field
	pairs   func(*state) *tier.Set
	kind    counters.Kind
	atLeast bool
}

var postChecks = []postCheck{
	{code: 1, name: engine.CheckLikes, field: counters.Likes, pairs: likeSet, kind: counters.Like},
	{code: 2, name: engine.CheckFavorites, field: counters.Favorites, pairs: func(st *state) *tier.Set { return st.favs }},
	// A comment sent without an id is counted with none to show for it:
	// the ids bound the count from below only.
	{code: 5, name: engine.CheckComments, field: counters.Comments, pairs: func(st *state) *tier.Set { return st.comments }, atLeast: true},
}

func likeSet(st *state) *tier.Set { return st.likes }

// kindChecks are the checks of the reaction kinds other than like, by
// kind id: code kindCheckBase+id. A state checks those its kinds table
// has (postChecksOf), named by the kind's name.
var kindChecks [counters.MaxKinds + 1]postCheck

const kindCheckBase = 0x40

func init() {
	for k := counters.Like + 1; k <= counters.MaxKinds; k++ {
		kindChecks[k] = postCheck{code: kindCheckBase + byte(k), kind: k, pairs: likeSet}
	}
}

// postChecksOf returns the post checks of st: postChecks, then one per
// reaction kind of its kinds table other than like.
func (st *state) postChecksOf() []postCheck {
	checks := slices.Clone(postChecks)
	kinds := st.posts.Kinds()
	for _, k := range kinds.IDs() {
		if k != counters.Like {
			c := kindChecks[k]
			c.name = engine.CheckReactions + kinds.Name(k)
			checks = append(checks, c)
		}
	}
	return checks
}

// userCheck is a per-user count derived by grouping another structure:
// recount calls add once for every item that counts for a user.
type userCheck struct {
	code    byte
	name    string
	stored  func(*state) *usercounts.Table
	recount func(st *state, add func(user uint64)) error
	set     func(st *state, user uint64, v int64)
}

var userChecks = []userCheck{
	{code: 3, name: engine.CheckFollowers, stored: func(st *state) *usercounts.Table { return st.followers },
		recount: func(st *state, add func(uint64)) error {
			st.follows.Range(func(_ uint64, targets []uint64, _ []int64) bool {
				for _, t := range targets {
					add(t)
				}
				return true
			})
			return nil
		},
		set: (*state).setFollowers},
	// posted counts the posts an author made, deleted ones too (what
	// followers' feed badges count): the live posts registered with them
	// plus their deleted ones (unposted, which deletePost adds to).
	{code: 4, name: engine.CheckPosts, stored: func(st *state) *usercounts.Table { return st.posted },
		recount: func(st *state, add func(uint64)) error {
			st.unposted.Range(func(u uint64, n int64) bool {
				for range n {
					add(u)
				}
				return true
			})
			return st.posts.Range(func(_ uint64, p tier.Post) bool {
				if p.Author != 0 {
					add(p.Author)
				}
				return true
			})
		},
		set: (*state).setPosts},
}

// recountRec logs a repair: check's count of id was from and is to.
type recountRec struct {
	recHeader
	check    byte
	id       uint64
	from, to int64
	// name is the check's, for the report: a reaction kind's check is
	// named by the kinds table of the state recounted. Not logged.
	name string
}

// errCountMoved refuses a repair whose count changed since it was
// recounted (a live engine took a write in between): the check reports it
// unsettled rather than overwrite that write.
var errCountMoved = errors.New("embedded: the count changed since it was recounted")

// Check implements engine.Checker. It recounts under the read lock, so
// writers wait for it: it is meant for a stopped server's directory
// (CheckDir) and for tests. Repairs are committed afterwards, each only
// if its count still holds what was recounted against.
func (e *Engine) Check(ctx context.Context, opts engine.CheckOptions) (engine.CheckResult, error) {
	e.mu.RLock()
	res, drifts, err := e.st.recount(ctx)
	e.mu.RUnlock()
	if err != nil {
		return res, err
	}
	err = reportDrifts(&res, drifts, opts, func(r *recountRec) error {
		_, err := e.commit(r)
		return err
	})
	return res, err
}

// CheckDir checks the data directory dir of a stopped server (the
// directory lock refuses one a server has open). Without opts.Repair it
// writes nothing there: the state is recovered as a read-only open does
// (the snapshot in place, the log through a temporary copy), and checked
// in memory. With it, dir is opened as the server opens it, without
// snapshots, sweeps or maintenance, and each repair is a log record, all
// durable when CheckDir returns.
// tierOpts are the server's table options (-window and the like: they
// change the layout, never what a count reads as).
func CheckDir(ctx context.Context, dir string, opts engine.CheckOptions, tierOpts tier.Options, logger *slog.Logger) (engine.CheckResult, error) {
	if logger == nil {
		logger = slog.Default()
	}
	if err := holdsStore(dir); err != nil {
		return engine.CheckResult{}, err
	}
	if opts.Repair {
		// Repairs are committed one after the other: an fsync each would
		// make a million of them take hours. Close fsyncs them all, and
		// CheckDir returns only after it did.
		e, err := Open(Options{Dir: dir, Sync: wal.SyncNone, SnapshotInterval: -1, SnapshotLogBytes: -1,
			SweepInterval: -1, MaintainInterval: -1, Tables: tierOpts, Logger: logger, StoredReactions: true})
		if err != nil {
			return engine.CheckResult{}, err
		}
		res, err := e.Check(ctx, opts)
		return res, errors.Join(err, e.Close())
	}
	unlock, err := lockDir(dir)
	switch {
	case err == nil:
		defer unlock()
	case !cannotWrite(err):
		return engine.CheckResult{}, err
	}
	im, rec, err := recoverReadOnly(dir, logger, tables{opts: tierOpts}.inMemory())
	if err != nil {
		return engine.CheckResult{}, err
	}
	logger.Info("embedded: state recovered for the check", "dir", dir, "snapshot", rec.snapshot, "snapshot_load", rec.loadTook,
		"log_records", rec.records, "log_replay", rec.replayDur, "last_index", im.index)
	start := time.Now()
	res, drifts, err := im.st.recount(ctx)
	if err != nil {
		return res, err
	}
	logger.Info("embedded: counts recounted", "took", time.Since(start), "drifts", len(drifts))
	return res, reportDrifts(&res, drifts, opts, nil)
}

// holdsStore refuses a directory that holds no snapshot and no log: a
// mistyped -data would otherwise check an empty store and find it clean.
func holdsStore(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("embedded: check: %w", err)
	}
	for _, en := range entries {
		if _, ok := parseSegmentName(en.Name()); ok || strings.HasPrefix(en.Name(), "snap-") {
			return nil
		}
	}
	return fmt.Errorf("embedded: check: %s holds no data directory (no snapshot, no log)", dir)
}

// reportDrifts tells opts.Drift of each drift and, with opts.Repair,
// commits its repair.
func reportDrifts(res *engine.CheckResult, drifts []recountRec, opts engine.CheckOptions, commit func(*recountRec) error) error {
	for i := range drifts {
		r := &drifts[i]
		name := r.name
		if name == "" {
			name = checkName(r.check)
		}
		d := engine.Drift{Count: name, ID: r.id, Stored: r.from, Recounted: r.to}
		t := res.Tally(name)
		if opts.Repair && commit != nil {
			switch err := commit(r); {
			case errors.Is(err, errCountMoved):
				d.Unsettled = true
				t.Unsettled++
			case err != nil:
				return fmt.Errorf("embedded: repairing %s of %d: %w", name, r.id, err)
			default:
				d.Repaired = true
				t.Repaired++
			}
		}
		if !d.Unsettled {
			t.Drifts++
		}
		if opts.Drift != nil {
			opts.Drift(d)
		}
	}
	return nil
}

func checkName(code byte) string {
	if p := postCheckOf(code); p != nil {
		return p.name
	}
	if u := userCheckOf(code); u != nil {
		return u.name
	}
	return fmt.Sprintf("check %d", code)
}

func postCheckOf(code byte) *postCheck {
	if k := int(code) - kindCheckBase; k > int(counters.Like) && k <= counters.MaxKinds {
		return &kindChecks[k]
	}
	for i := range postChecks {
		if postChecks[i].code == code {
			return &postChecks[i]
		}
	}
	return nil
}

func userCheckOf(code byte) *userCheck {
	for i := range userChecks {
		if userChecks[i].code == code {
			return &userChecks[i]
		}
	}
	return nil
}

// recount compares every derived count with what it counts and returns
// the tallies and the drifts, as repairs to log. The caller holds at least
// the read lock.
func (st *state) recount(ctx context.Context) (engine.CheckResult, []recountRec, error) {
	var res engine.CheckResult
	checks := st.postChecksOf()
	for _, c := range checks {
		res.Tally(c.name)
	}
	for _, c := range userChecks {
		res.Tally(c.name)
	}
	drifts, err := st.recountPosts(ctx, checks, &res)
	if err != nil {
		return res, nil, err
	}
	for i := range userChecks {
		if drifts, err = st.recountUsers(ctx, &userChecks[i], &res, drifts); err != nil {
			return res, nil, err
		}
	}
	return res, drifts, nil
}

// pairStream is one post check's set, pulled in post order beside the
// post table's walk.
type pairStream struct {
	check   *postCheck
	tally   *engine.CheckTally
	next    func() (uint64, uint64, bool)
	stop    func()
	err     *error
	post    uint64 // post of the pair next yields; 0 once the set is done
	orphans int64  // pairs naming a post the post table does not hold
}

func (s *pairStream) advance() {
	if _, post, ok := s.next(); ok {
		s.post = post
		return
	}
	s.post = 0
}

// take counts the pairs naming post, passing over those of posts before
// it (orphans: deleted posts' pairs wait for compaction).
func (s *pairStream) take(post uint64) int64 {
	for s.post != 0 && s.post < post {
		s.orphans++
		s.advance()
	}
	var n int64
	for s.post == post && post != 0 {
		n++
		s.advance()
	}
	return n
}

// checkEvery is how many items a walk handles between looks at its
// context.
const checkEvery = 1 << 14

func (st *state) recountPosts(ctx context.Context, checks []postCheck, res *engine.CheckResult) ([]recountRec, error) {
	streams := make([]*pairStream, len(checks))
	for i := range checks {
		c := &checks[i]
		set := c.pairs(st)
		var rangeErr error
		next, stop := iter.Pull2(iter.Seq2[uint64, uint64](func(yield func(uint64, uint64) bool) {
			if c.kind == counters.NoKind {
				rangeErr = set.Range(yield)
				return
			}
			rangeErr = set.RangeKinds(func(user, post uint64, kind counters.Kind) bool {
				return kind != c.kind || yield(user, post)
			})
		}))
		streams[i] = &pairStream{check: c, tally: res.Tally(c.name), next: next, stop: stop, err: &rangeErr}
		defer stop()
		streams[i].advance()
	}
	var drifts []recountRec
	var ctxErr error
	n := 0
	err := st.posts.Range(func(id uint64, p tier.Post) bool {
		if n++; n%checkEvery == 0 {
			if ctxErr = ctx.Err(); ctxErr != nil {
				return false
			}
		}
		imported := st.imported.Has(id)
		for _, s := range streams {
			got := s.take(id)
			if imported {
				s.tally.Skipped++
				continue
			}
			s.tally.Checked++
			if stored := s.check.count(&p); stored != got && !(s.check.atLeast && stored > got) {
				drifts = append(drifts, recountRec{check: s.check.code, name: s.check.name, id: id, from: stored, to: got})
			}
		}
		return true
	})
	for _, s := range streams {
		for s.post != 0 && ctxErr == nil && err == nil {
			s.orphans++
			s.advance()
		}
		s.stop()
		if *s.err != nil && err == nil {
			err = *s.err
		}
		if s.orphans > 0 {
			res.Notes = append(res.Notes, fmt.Sprintf("%s: %d pairs name posts the post table does not hold (not counted)",
				s.check.name, s.orphans))
		}
	}
	if err = errors.Join(ctxErr, err); err != nil {
		return nil, err
	}
	if st.imported.Hi != 0 {
		res.Notes = append(res.Notes, fmt.Sprintf("posts %d..%d may hold imported counts: their likes and favorites are not recounted",
			st.imported.Lo, st.imported.Hi))
	}
	return drifts, nil
}

func (st *state) recountUsers(ctx context.Context, c *userCheck, res *engine.CheckResult, drifts []recountRec) ([]recountRec, error) {
	tally := res.Tally(c.name)
	counted := make(map[uint64]int64, c.stored(st).Len())
	// A user being erased has lost their counts at the start, and what
	// they count goes step by step (lifecycle.go): their counts are
	// judged by a check after the erasure.
	if err := c.recount(st, func(u uint64) {
		if !st.isErasing(u) {
			counted[u]++
		}
	}); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c.stored(st).Range(func(u uint64, v int64) bool {
		if st.isErasing(u) {
			return true
		}
		tally.Checked++
		got := counted[u]
		delete(counted, u)
		if v != got {
			drifts = append(drifts, recountRec{check: c.code, id: u, from: v, to: got})
		}
		return true
	})
	// What the structure counts for users the table does not hold.
	missing := make([]uint64, 0, len(counted))
	for u := range counted {
		missing = append(missing, u)
	}
	slices.Sort(missing)
	for _, u := range missing {
		tally.Checked++
		drifts = append(drifts, recountRec{check: c.code, id: u, from: 0, to: counted[u]})
	}
	return drifts, ctx.Err()
}

func countOf(c engine.Counts, f counters.Field) int64 {
	if v := c.Field(f); v != nil {
		return *v
	}
	return 0
}

// count returns the post's count c checks.
func (c *postCheck) count(p *tier.Post) int64 {
	if c.kind != counters.NoKind {
		return p.Count(c.kind)
	}
	return countOf(p.Counts, c.field)
}

// storedCount reads r's count as the state holds it now, and whether its
// post exists (a user count always does).
func (st *state) storedCount(r *recountRec) (int64, bool, error) {
	if c := postCheckOf(r.check); c != nil {
		p, ok, err := st.posts.Get(r.id)
		return c.count(&p), ok, err
	}
	v, _ := userCheckOf(r.check).stored(st).Get(r.id)
	return v, true, nil
}

// prepareRecount refuses a repair whose count is no longer what was
// recounted against (errCountMoved).
func (st *state) prepareRecount(r *recountRec) error {
	cur, ok, err := st.storedCount(r)
	switch {
	case err != nil:
		return err
	case !ok || cur != r.from:
		return errCountMoved
	}
	return nil
}

// applyRecount sets r's count to r.to.
func (st *state) applyRecount(r *recountRec) {
	cur, _, err := st.storedCount(r)
	if err != nil {
		st.noteErr(err)
		return
	}
	if c := postCheckOf(r.check); c != nil {
		switch {
		case r.to == cur:
		case c.kind != counters.NoKind:
			was, is, err := st.posts.AddReaction(r.id, c.kind, r.to-cur)
			st.noteErr(err)
			st.counted += countedDelta(was, is)
		default:
			st.addCount(ops.CountDelta{Post: engine.PostID(r.id), Field: c.field, Delta: r.to - cur})
		}
		return
	}
	userCheckOf(r.check).set(st, r.id, r.to)
}

// setFollowers sets u's follower count as follows and unfollows would
// have left it (addFollowers keeps the zero of a user known by nothing
// else).
func (st *state) setFollowers(u uint64, v int64) {
	if cur, _ := st.followers.Get(u); v != cur {
		st.addFollowers(u, v-cur)
	}
}

// setPosts sets u's post count; a user left with none stays known, by a
// zero follower count if by nothing else (as addFollowers keeps one).
func (st *state) setPosts(u uint64, v int64) {
	cur, had := st.posted.Get(u)
	switch {
	case v == cur && had:
	case v > 0 && !had:
		st.addPosts(u, v)
	case v > 0:
		st.posted.Set(u, v)
	default:
		st.posted.Delete(u)
		if !st.known(u) {
			st.followers.Set(u, 0)
		}
	}
}

// recountRec's encoding (record.go has the format): the check's code
// byte, the id, the count before and after.
func (r *recountRec) appendTo(b []byte) []byte {
	b = append(b, r.check)
	b = appendID(b, r.id)
	return appendID(appendID(b, uint64(r.from)), uint64(r.to))
}

func (r *recountRec) readFrom(d *decoder) {
	if c := d.bytes(1, "check"); c != nil {
		r.check = c[0]
		if postCheckOf(r.check) == nil && userCheckOf(r.check) == nil {
			d.fail(fmt.Sprintf("unknown check %d", r.check))
		}
	}
	r.id = d.id("id")
	r.from, r.to = d.count("count before"), d.count("count after")
	if d.err == nil && r.from == r.to {
		d.fail("a recount that changes nothing")
	}
}
