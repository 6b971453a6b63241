package redisstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/counters"
	"github.com/tally-dev/tally/engine/ops"
)

func invalid(format string, a ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{engine.ErrInvalid}, a...)...)
}

func notFound(what string) error { return fmt.Errorf("%w: %s", engine.ErrNotFound, what) }

func checkUser(u engine.UserID) error { return engine.CheckViewer(u) }

// bounds are the first arguments of every counting script.
var bounds = []any{counters.Floor, counters.Ceiling}

// counting prepends bounds to a counting script's other arguments.
func counting(args ...any) []any { return append(slices.Clip(bounds), args...) }

// CreatePost implements engine.Store.
func (s *Store) CreatePost(ctx context.Context, viewer engine.UserID, id engine.PostID, idemKey string) (engine.PostID, error) {
	op := ops.CreatePost{Viewer: viewer, Post: id, IdemKey: idemKey}
	if err := op.Check(s.now()); err != nil {
		return 0, err
	}
	want := uint64(id)
	if want == 0 && idemKey != "" {
		want = s.gen.Next()
	}
	bucket, _ := s.k.post(want)
	in, err := s.idemBegin(ctx, uint64(viewer), idemKey, strconv.FormatUint(want, 10), bucket, engine.IdemCreatePost, engine.IdemArgs{Post: id})
	if in.key != "" {
		want, _ = strconv.ParseUint(in.result, 10, 64)
	}
	if err != nil || in.done {
		return engine.PostID(want), err
	}
	// The registry entry and the intent of the author's post count, in
	// the post's slot; then the count (see intents.go).
	var it intent
	mk := func(pid uint64) string {
		it = intent{kind: intentPost, viewer: uint64(viewer), post: pid, at: s.now().UnixMilli()}
		return it.encode()
	}
	var pid uint64
	var desc string
	iid := in.op
	if iid == "" {
		iid = newIntentID()
	}
	bucket, _ = s.k.post(want)
	err = s.firstStep(ctx, &in, bucket, func(g guard) (string, error) {
		var found string
		var err error
		guardIn := func(string) guard { return g }
		if in.key == "" {
			guardIn = noGuard // the bucket is the id's, which may be drawn there
		}
		pid, desc, found, err = s.registerPost(ctx, viewer, want, 0, guardIn, iid, mk)
		if errors.Is(err, engine.ErrInvalid) {
			s.dropClaim(ctx, in) // the id is taken: refused, nothing applied
		}
		return found, err
	})
	if err != nil {
		return 0, err
	}
	if desc == "" {
		// An earlier attempt registered the post: its id and operation
		// are the ones to finish.
		pid, _ = strconv.ParseUint(in.result, 10, 64)
		iid = in.op
		mk(pid)
	}
	maybeCrash(intentPost)
	bucket, _ = s.k.post(pid)
	if err := s.finishIntent(ctx, bucket, iid, desc, it, true); err != nil {
		return 0, err
	}
	if err := s.idemDone(ctx, in); err != nil {
		return 0, err
	}
	return engine.PostID(pid), nil
}

// registerPost enters a post by author in the registry, under the guard
// guardIn gives for the post's bucket: the registry half of
// ops.CreatePost's Registration (the author's post count is a later
// step), and a repost's original (0: none). id 0 asks for a fresh id; a
// fresh id that collides (a client's id from our node) is replaced by
// another, while a given id that is taken (a post's, or a deleted post's)
// is what CreatePost.Decide refuses. intent, when not nil, makes the
// intent recorded with the entry for the id it gets. found is the guard's
// value when the entry was made before by the same operation (then desc
// is "": no intent was written now).
func (s *Store) registerPost(ctx context.Context, author engine.UserID, id, original uint64, guardIn func(bucket string) guard, intentID string, intent func(pid uint64) string) (pid uint64, desc, found string, err error) {
	for attempt := 0; ; attempt++ {
		pid := id
		if pid == 0 {
			pid = s.gen.Next()
		}
		desc := ""
		if intent != nil {
			desc = intent(pid)
		}
		create := ops.CreatePost{Viewer: author, Post: engine.PostID(pid)}
		var eff ops.Effects
		if err := create.Decide(false, &eff); err != nil || len(eff.Registers) != 1 {
			return 0, "", "", fmt.Errorf("%w: CreatePost decided %+v (%v), want one registration", errBug, eff, err)
		}
		reg := eff.Registers[0]
		bucket, low := s.k.post(uint64(reg.Post))
		g := guardIn(bucket)
		orig := ""
		if original != 0 {
			orig = strconv.FormatUint(original, 10)
		}
		args := append(g.args(), low, postHead(uint64(reg.Author)), intentID, desc, orig)
		r, err := s.one(ctx, scPostCreate, []string{bucket, g.key, intentsKey(bucket), repostsKey(bucket)}, args...)
		if err != nil {
			return 0, "", "", err
		}
		a := vals(r)
		switch num(at(a, 0)) {
		case 1:
			s.stats.posts.Add(1)
			return pid, desc, "", nil
		case 2:
			return pid, "", str(at(a, 1)), nil
		}
		if id != 0 || attempt >= 10 {
			// The id is taken: the fact the entry was written against
			// changed, and Decide judges the real one.
			return 0, "", "", create.Decide(true, &eff)
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
		if exists, _ := recordState(recs[i]); !found[i] || !exists {
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
		if exists, _ := recordState(recs[i]); !found[i] || !exists {
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

// Favorite implements engine.Store.
func (s *Store) Favorite(ctx context.Context, viewer engine.UserID, post engine.PostID) error {
	return s.flag(ctx, &ops.Favorite{Viewer: viewer, Post: post}, viewer, post, false, favsKey)
}

// Unfavorite implements engine.Store.
func (s *Store) Unfavorite(ctx context.Context, viewer engine.UserID, post engine.PostID) error {
	return s.flag(ctx, &ops.Favorite{Viewer: viewer, Post: post, Undo: true}, viewer, post, true, favsKey)
}

// flagOp is ops.Favorite (favorite and unfavorite).
type flagOp interface {
	Check() error
	Decide(ops.FlagFacts, *ops.Effects) error
}

// speculate asks decide for the effects of an operation on post under
// the facts that make it change something: the post exists, someone
// other than viewer wrote it (and the flag, for flagOps, is not yet in
// the wanted state). It returns the count deltas on post, as script
// arguments (record index, delta), which the first step applies if the
// facts hold, and whether any effect reaches beyond the post's slot, in
// which case the first step records an intent (intents.go).
func speculate(viewer engine.UserID, post engine.PostID, decide func(author engine.UserID, eff *ops.Effects) error) ([]any, bool, error) {
	someoneElse := viewer + 1
	if someoneElse == 0 {
		someoneElse = viewer - 1
	}
	var eff ops.Effects
	if err := decide(someoneElse, &eff); err != nil {
		return nil, false, err
	}
	args, err := countArgs(post, eff.Counts)
	beyond := len(eff.Registers)+len(eff.Bumps)+len(eff.Followers)+len(eff.Follows)+len(eff.Reads)+
		len(eff.Fanouts)+len(eff.Clicks)+len(eff.Joins)+len(eff.Leaves)+len(eff.Receipts)+
		len(eff.CommentMarks) > 0 || eff.Push != 0
	return args, beyond, err
}

// postIndex is the record index (the scripts' 1-based field) of each
// counter.
var postIndex = [counters.NumFields]int{
	counters.Views: pViews, counters.Likes: pLikes, counters.Comments: pComments,
	counters.Reposts: pReposts, counters.Favorites: pFavorites,
}

// countArgs turns count deltas on post into (index, delta) script
// arguments. A delta on any other post is a rule this backend does not
// apply in one step, and an error.
func countArgs(post engine.PostID, counts []ops.CountDelta) ([]any, error) {
	args := make([]any, 0, 2*len(counts))
	for _, c := range counts {
		if c.Post != post || c.Field >= counters.NumFields {
			return nil, fmt.Errorf("%w: count delta %+v outside post %d", errBug, c, uint64(post))
		}
		args = append(args, postIndex[c.Field], c.Delta)
	}
	return args, nil
}

// flag is favorite/unfavorite. The post's slot de-duplicates and counts
// in one step: the set change is the fact Decide's counts were
// speculated on, and they are applied only if it happens. Then Decide
// runs on the facts the step returned (the author, whether the flag was
// set); a retried favorite finds itself already in the set and changes
// nothing. A flag has no effect beyond the post's slot (a like, which
// bumps its author's badge, is a reaction: reactions.go).
func (s *Store) flag(ctx context.Context, op flagOp, viewer engine.UserID, post engine.PostID, undo bool, set func(b, low string) string) error {
	if err := op.Check(); err != nil {
		return err
	}
	counts, beyond, err := speculate(viewer, post, func(author engine.UserID, eff *ops.Effects) error {
		return op.Decide(ops.FlagFacts{PostFacts: ops.PostFacts{Exists: true, Author: author}, Set: undo}, eff)
	})
	if err != nil {
		return err
	}
	if beyond {
		return fmt.Errorf("%w: %T has effects beyond the post's slot", errBug, op)
	}
	bucket, low := s.k.post(uint64(post))
	verb := "add"
	if undo {
		verb = "rem"
	}
	args := append(counting(low, uint64(viewer), verb), counts...)
	r, err := s.one(ctx, scPostFlag, []string{bucket, set(bucket, low)}, args...)
	if err != nil {
		return err
	}
	a := vals(r)
	code := num(at(a, 0))
	facts := ops.FlagFacts{PostFacts: ops.PostFacts{Exists: code != -1}, Set: undo}
	if code == 0 {
		facts.Set = !undo
	}
	if code != -1 {
		author, err := decodeHead(str(at(a, 1)))
		if err != nil {
			return s.fail(err)
		}
		facts.Author = engine.UserID(author)
	}
	var eff ops.Effects
	if err := op.Decide(facts, &eff); err != nil || code != 1 {
		return err
	}
	s.stats.counted.Add(num(at(a, 2)))
	if err := sameCounts(post, eff.Counts, counts); err != nil {
		return s.fail(err)
	}
	s.emitAll(ctx, eff.Events)
	return nil
}

// sameCounts checks that Decide on the real facts asks for the count
// deltas the first step applied on the speculated ones: counts must not
// depend on facts the step does not verify (the author).
func sameCounts(post engine.PostID, counts []ops.CountDelta, applied []any) error {
	got, err := countArgs(post, counts)
	if err == nil && !slices.Equal(got, applied) {
		err = fmt.Errorf("%w: decided counts %v on post %d, applied %v", errBug, got, uint64(post), applied)
	}
	return err
}

// countOn applies count deltas to a known post under guard g, with the
// intent of what follows, for a comment with an id (comment != 0) only if
// the id is not known on the post; it returns the post's facts, whether
// the comment id was known (then nothing was applied), and the guard's
// value when the same operation applied them before (then nothing was
// applied now).
func (s *Store) countOn(ctx context.Context, post engine.PostID, comment engine.CommentID, counts []any, g guard, intentID, intent string) (ops.CommentFacts, string, error) {
	bucket, low := s.k.post(uint64(post))
	cid := ""
	if comment != 0 {
		cid = strconv.FormatUint(uint64(comment), 10)
	}
	args := append(counting(g.args()...), low, intentID, intent, cid)
	r, err := s.one(ctx, scPostCount, []string{bucket, g.key, intentsKey(bucket), commentsKey(bucket, low), uncountedKey(bucket, low)}, append(args, counts...)...)
	if err != nil {
		return ops.CommentFacts{}, "", err
	}
	a := vals(r)
	code := num(at(a, 0))
	if code == -1 {
		return ops.CommentFacts{}, "", nil
	}
	s.stats.counted.Add(num(at(a, 2)))
	author, err := decodeHead(str(at(a, 1)))
	if err != nil {
		return ops.CommentFacts{}, "", s.fail(err)
	}
	f := ops.CommentFacts{PostFacts: ops.PostFacts{Exists: true, Author: engine.UserID(author)}, Known: code == 3}
	return f, str(at(a, 3)), nil
}

// countThenFinish runs the steps of a comment or a repost: the count on
// post and the intent of what follows, in the post's slot under in's
// guard, then the rest (intents.go). mk makes the intent from the
// operation's result (a repost's new post); refuse is what the operation
// decides on an unknown post, which the first step reports having applied
// nothing, and on a comment id known already (comment != 0), for which it
// applied nothing either. The intent and the markers of the later steps
// are named by the operation's id (the key's, so that a client's retry
// and a sweeper agree; a fresh one without a key).
func (s *Store) countThenFinish(ctx context.Context, in *idem, post engine.PostID, comment engine.CommentID, counts []any, mk func(result string) intent, refuse func(ops.CommentFacts) error) error {
	id := in.op
	if id == "" {
		id = newIntentID()
	}
	it := mk(in.result)
	desc := it.encode()
	var facts ops.CommentFacts
	bucket, _ := s.k.post(uint64(post))
	err := s.firstStep(ctx, in, bucket, func(g guard) (string, error) {
		var found string
		var err error
		facts, found, err = s.countOn(ctx, post, comment, counts, g, id, desc)
		if err == nil && !facts.Exists {
			s.dropClaim(ctx, *in)
			err = refuse(facts)
		}
		return found, err
	})
	if err != nil {
		return err
	}
	if facts.Known {
		// Counted once already, by whoever sent it: nothing was applied,
		// nothing is left to do, and, as for a refusal, the key binds
		// nothing (the step proved it did not run).
		s.dropClaim(ctx, *in)
		return refuse(facts)
	}
	if in.key != "" && in.op != id {
		// An earlier attempt counted: finish its operation.
		id = in.op
		it = mk(in.result)
	}
	maybeCrash(it.kind)
	it.author, it.authorKnown = uint64(facts.Author), true
	return s.finishIntent(ctx, bucket, id, desc, it, true)
}

// Comment implements engine.Store. A comment with an id is counted in the
// post's slot only if the id is not known there, in the same script that
// adds it to the post's counted ids; the writer's record of it (what lets
// them delete it) follows with the badges (intents.go).
func (s *Store) Comment(ctx context.Context, viewer engine.UserID, post engine.PostID, comment engine.CommentID, mentions []engine.UserID, idemKey string) error {
	op := ops.Comment{Viewer: viewer, Post: post, Comment: comment, Mentions: mentions, IdemKey: idemKey}
	if err := op.Check(s.now()); err != nil {
		return err
	}
	counts, _, err := speculate(viewer, post, func(author engine.UserID, eff *ops.Effects) error {
		return op.Decide(ops.CommentFacts{PostFacts: ops.PostFacts{Exists: true, Author: author}}, eff)
	})
	if err != nil {
		return err
	}
	if comment == 0 {
		counts = unidentified(counts)
	}
	bucket, _ := s.k.post(uint64(post))
	in, err := s.idemBegin(ctx, uint64(viewer), idemKey, "", bucket, engine.IdemComment,
		engine.IdemArgs{Post: post, Comment: comment, Mentions: op.Mentions})
	if err != nil || in.done {
		return err
	}
	mk := func(string) intent {
		return intent{kind: intentComment, viewer: uint64(viewer), post: uint64(post), at: s.now().UnixMilli(),
			mentions: ids64(op.Mentions), aux: uint64(comment)}
	}
	refuse := func(f ops.CommentFacts) error {
		var eff ops.Effects
		if err := op.Decide(f, &eff); err != nil || eff.Empty() {
			return err
		}
		return fmt.Errorf("%w: comment decided %+v on %+v, where the step applied nothing", errBug, eff, f)
	}
	if err := s.countThenFinish(ctx, &in, post, comment, counts, mk, refuse); err != nil {
		return err
	}
	return s.idemDone(ctx, in)
}

// unidentified adds to the count arguments of a comment sent without an
// id each comment delta again on pUnidentified, the part of the count no
// counted id stands for.
func unidentified(counts []any) []any {
	n := len(counts)
	for i := 0; i < n; i += 2 {
		if counts[i] == pComments {
			counts = append(counts, pUnidentified, counts[i+1])
		}
	}
	return counts
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
	op := ops.Repost{Viewer: viewer, Post: post, Mentions: mentions, IdemKey: idemKey}
	if err := op.Check(); err != nil {
		return 0, err
	}
	// The new post's id is fixed before the first step: the intent names
	// it, so whoever finishes the repost registers that post.
	bucket, _ := s.k.post(uint64(post))
	in, err := s.idemBegin(ctx, uint64(viewer), idemKey, strconv.FormatUint(s.gen.Next(), 10), bucket, engine.IdemRepost,
		engine.IdemArgs{Post: post, Mentions: op.Mentions})
	want, _ := strconv.ParseUint(in.result, 10, 64)
	if err != nil || in.done {
		return engine.PostID(want), err
	}
	op.NewPost = engine.PostID(want)
	counts, _, err := speculate(viewer, post, func(author engine.UserID, eff *ops.Effects) error {
		return op.Decide(ops.PostFacts{Exists: true, Author: author}, eff)
	})
	if err != nil {
		s.dropClaim(ctx, in) // nothing was sent
		return 0, err
	}
	mk := func(result string) intent {
		newPost, _ := strconv.ParseUint(result, 10, 64)
		return intent{kind: intentRepost, viewer: uint64(viewer), post: uint64(post), aux: newPost,
			at: s.now().UnixMilli(), mentions: ids64(op.Mentions)}
	}
	refuse := func(f ops.CommentFacts) error {
		var eff ops.Effects
		return op.Decide(f.PostFacts, &eff)
	}
	if err := s.countThenFinish(ctx, &in, post, 0, counts, mk, refuse); err != nil {
		return 0, err
	}
	if err := s.idemDone(ctx, in); err != nil {
		return 0, err
	}
	want, _ = strconv.ParseUint(in.result, 10, 64)
	return engine.PostID(want), nil
}

// RecordViews implements engine.Store: one script per bucket, one round
// trip for the page. Decide runs on the fact every post exists; the
// script skips an unknown post's delta, which is what Decide says for it.
func (s *Store) RecordViews(ctx context.Context, ids []engine.PostID) error {
	op := ops.RecordViews{Posts: ids}
	if err := op.Check(); err != nil {
		return err
	}
	var eff ops.Effects
	op.Decide(func(engine.PostID) bool { return true }, &eff)
	byBucket := map[string][]any{}
	var order []string
	for _, c := range eff.Counts {
		if c.Field >= counters.NumFields {
			return fmt.Errorf("%w: views decided %+v", errBug, c)
		}
		b, low := s.k.post(uint64(c.Post))
		if _, ok := byBucket[b]; !ok {
			order = append(order, b)
		}
		byBucket[b] = append(byBucket[b], low, postIndex[c.Field], c.Delta)
	}
	calls := make([]*call, len(order))
	for i, b := range order {
		calls[i] = script(scPostCounts, []string{b}, counting(byBucket[b]...)...)
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

// ImportKinds implements engine.Importer: the kinds table Open
// reconciled.
func (s *Store) ImportKinds() counters.Kinds { return s.kinds }

// importChunk bounds one pipelined round trip of Import.
const importChunk = 5000

// Import implements engine.Importer: ops.CheckImport validates the rows;
// ops.DecideImport judges each row against the post's record (an unknown
// post is registered when it has an author or a non-zero count, a known
// one without an author takes the row's; the counts replace the post's,
// every reaction kind's included: the row's record is written whole). Rows go per bucket: one
// pipelined round trip reads the records of importChunk rows, one writes
// them (compare-and-set on each post's head; a post changed in between
// is read and decided again). A bucket whose rows all create posts not
// stored yet — every bucket of an import of history, whose sparse ids
// leave about one post per bucket — is written with one HSETNX per row,
// the same compare-and-set against an absent record at a fraction of a
// script call's cost on the Redis server, which is what bounds an
// import. The authors' post counts follow, recorded by one intent per
// chunk, so that an import that dies in between leaves them for a
// sweeper, not short (importintents.go). Like every write here it is
// durable when it returns as far as Redis's persistence and WaitReplicas
// make it (docs/redis-durability.md).
func (s *Store) Import(ctx context.Context, rows []engine.ImportRow) error {
	if err := ops.CheckImport(rows, &s.kinds); err != nil {
		return err
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
	// The import span first: a check must never take an imported count
	// for one derived from its set.
	lo, hi := uint64(rows[0].Post), uint64(rows[0].Post)
	for _, r := range rows {
		lo, hi = min(lo, uint64(r.Post)), max(hi, uint64(r.Post))
	}
	if err := s.widenImportSpan(ctx, lo, hi); err != nil {
		return err
	}
	byBucket := map[string][]int{}
	var order []string
	for i, r := range rows {
		b, _ := s.k.post(uint64(r.Post))
		if _, ok := byBucket[b]; !ok {
			order = append(order, b)
		}
		byBucket[b] = append(byBucket[b], i)
	}
	// The authors' post counts are a second step, recorded by the
	// chunk's intent (importintents.go).
	ii := s.newImportIntent()
	var registered []importedPost
	for attempt := 0; len(order) > 0; attempt++ {
		if attempt == 10 {
			return s.fail(errors.New("import: posts keep changing under the import"))
		}
		// Facts: each post's head (exists, author) as stored now.
		reads := make([]*redis.SliceCmd, len(order))
		if err := s.read(ctx, func(p redis.Pipeliner) {
			for i, b := range order {
				lows := make([]string, len(byBucket[b]))
				for j, row := range byBucket[b] {
					_, lows[j] = s.k.post(uint64(rows[row].Post))
				}
				reads[i] = p.HMGet(ctx, b, lows...)
			}
		}); err != nil {
			return err
		}
		calls := make([]*call, len(order))
		nx := make([][]*call, len(order))    // HSETNX per row, when the bucket's rows all create posts
		written := make([][]int, len(order)) // rows sent, per bucket
		grows := make([][]bool, len(order))  // their authors' post counts grow
		fresh := make([][]bool, len(order))  // they enter the registry
		for i, b := range order {
			heads := map[engine.PostID]string{} // as the rows before leave it
			var args []any
			for j, row := range byBucket[b] {
				r := rows[row]
				head, seen := heads[r.Post]
				if !seen {
					rec, _ := reads[i].Val()[j].(string)
					head = rec
					if exists, _ := recordState(rec); exists {
						if len(rec) < headLen(rec) {
							return s.fail(errCorrupt)
						}
						head = authorHead(rec) // scImportRows keeps reactedBit
					}
				}
				known, err := postFactsOf(head) // a deleted post's head is its tombstone
				if err != nil {
					return s.fail(err)
				}
				skip, register, authorPosts := ops.DecideImport(r, known)
				if skip {
					continue
				}
				next := head
				if register {
					next = postHead(uint64(r.Author))
				}
				_, low := s.k.post(uint64(r.Post))
				args = append(args, low, head, next+encodeCounts(r.Counts, &r.Reactions))
				heads[r.Post] = next
				written[i] = append(written[i], row)
				grows[i] = append(grows[i], authorPosts)
				fresh[i] = append(fresh[i], !known.Exists)
				if authorPosts {
					ii.add(r.Post, r.Author)
				}
			}
			switch {
			case len(args) > 0 && !slices.Contains(fresh[i], false):
				// Distinct posts (a post's second row is not fresh), so
				// each row stands alone.
				for k := 0; k < len(args); k += 3 {
					nx[i] = append(nx[i], raw("HSETNX", b, args[k], args[k+2]))
				}
			case len(args) > 0:
				calls[i] = script(scImportRows, []string{b}, args...)
			}
		}
		var sent []*call
		for i, c := range calls {
			if c != nil {
				sent = append(sent, c)
			}
			sent = append(sent, nx[i]...)
		}
		if err := ii.pend(ctx); err != nil {
			return err
		}
		if err := s.exec(ctx, sent...); err != nil {
			return err
		}
		var again []string
		for i, b := range order {
			if nx[i] != nil {
				var redo []int // rows whose post appeared since the read
				for j, c := range nx[i] {
					row := rows[written[i][j]]
					if num(c.res.Val()) != 1 {
						redo = append(redo, written[i][j])
						continue
					}
					s.stats.posts.Add(1)
					if row.HasCounts() {
						s.stats.counted.Add(1)
					}
					if grows[i][j] {
						registered = append(registered, importedPost{uint64(row.Post), uint64(row.Author)})
					}
				}
				if len(redo) > 0 {
					byBucket[b] = redo
					again = append(again, b)
				}
				continue
			}
			if calls[i] == nil {
				continue
			}
			a := vals(calls[i].res.Val())
			n := int(num(at(a, 0)))
			s.stats.counted.Add(num(at(a, 1)))
			for j := range n {
				row := rows[written[i][j]]
				if fresh[i][j] {
					s.stats.posts.Add(1)
				}
				if grows[i][j] {
					registered = append(registered, importedPost{uint64(row.Post), uint64(row.Author)})
				}
			}
			if n < len(written[i]) {
				// Rows from the first one not written are read again.
				first := written[i][n]
				rest := byBucket[b][:0:0]
				for _, row := range byBucket[b] {
					if row >= first {
						rest = append(rest, row)
					}
				}
				byBucket[b] = rest
				again = append(again, b)
			}
		}
		order = again
	}
	maybeCrash(intentImportPending)
	return ii.finish(ctx, registered)
}
