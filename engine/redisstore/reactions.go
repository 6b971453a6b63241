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
	"github.com/tally-dev/tally/engine/ops"
)

// Reactions (表态). A post's like is a member of its likers set, as
// before kinds existed; a reaction of another kind is a field of its
// reactors hash (uid -> kind id), and its count a field of the post
// record after the fixed counts, by kind id (codec.go). A post that has
// likes only costs what it cost then, and a like what a like cost.
// likePost is the reaction like and unlikePost the removal of a like
// (ops.ReactToPost, ops.UnreactToPost): one code path.
//
// The kinds table (kind id -> name) is P{s}kinds, reconciled with the
// deployment's kinds (Options.Reactions) at Open as the embedded engine
// does (counters.Kinds.Reconcile): a new kind takes a free id at once; a
// kind left out is dropped only if no post counts it, which Open learns
// by walking every post bucket — the price of a rare change, paid at
// start, so that no reaction pays for a running total (a total kept in
// one key would put every reaction of the keyspace in one slot). Replicas
// running with different kinds meanwhile each read the counts of the
// kinds they know; a stored kind a replica does not know refuses that
// replica's reactions on that (user, post) until it restarts.

// ReactionKinds implements engine.Store.
func (s *Store) ReactionKinds() []string { return s.display }

// ReactToPost implements engine.Store.
func (s *Store) ReactToPost(ctx context.Context, viewer engine.UserID, post engine.PostID, kind string) error {
	if err := engine.CheckViewer(viewer); err != nil {
		return err
	}
	id, err := ops.KindByName(&s.kinds, kind)
	if err != nil {
		return err
	}
	op := ops.ReactToPost{Viewer: viewer, Post: post, Kind: id}
	if err := op.Check(); err != nil {
		return err
	}
	return s.react(ctx, viewer, post, op.Decide)
}

// UnreactToPost implements engine.Store.
func (s *Store) UnreactToPost(ctx context.Context, viewer engine.UserID, post engine.PostID) error {
	op := ops.UnreactToPost{Viewer: viewer, Post: post}
	if err := op.Check(); err != nil {
		return err
	}
	return s.react(ctx, viewer, post, op.Decide)
}

// Like implements engine.Store: the reaction like.
func (s *Store) Like(ctx context.Context, viewer engine.UserID, post engine.PostID) error {
	op := ops.ReactToPost{Viewer: viewer, Post: post, Kind: counters.Like}
	if err := op.Check(); err != nil {
		return err
	}
	return s.react(ctx, viewer, post, op.Decide)
}

// Unlike implements engine.Store: removes a like, not a reaction of
// another kind.
func (s *Store) Unlike(ctx context.Context, viewer engine.UserID, post engine.PostID) error {
	op := ops.UnreactToPost{Viewer: viewer, Post: post, Only: counters.Like}
	if err := op.Check(); err != nil {
		return err
	}
	return s.react(ctx, viewer, post, op.Decide)
}

// react runs a reaction's one step, in the post's slot. Which kind the
// viewer had is the fact the effects depend on, and the step reads it;
// so that the step stays one round trip, Go decides the operation for
// every kind the viewer may have had (none, or each kind of the table)
// under the facts that make it change something (the post exists, someone
// else wrote it), and sends the table of those decisions: the script
// applies the row of the kind it finds — the membership and both counts
// together, so no reader sees the old and new kind both counted or
// neither — and returns that kind and the post's author. Go then decides
// again on the real facts: the counts must be the ones applied, and the
// author's badge (a first reaction on someone else's post) is finished
// from the intent the step recorded (intents.go), as a like's always was.
func (s *Store) react(ctx context.Context, viewer engine.UserID, post engine.PostID, decide func(ops.ReactionFacts, *ops.Effects) error) error {
	someoneElse := viewer + 1
	if someoneElse == 0 {
		someoneElse = viewer - 1
	}
	var rows []any
	// By the kind found: the count arguments its row applies, and
	// whether the row records the intent.
	var applied [counters.MaxKinds + 1][]any
	var recorded [counters.MaxKinds + 1]bool
	beyondAny := false
	for _, was := range append([]counters.Kind{counters.NoKind}, s.kinds.IDs()...) {
		var eff ops.Effects
		if err := decide(ops.ReactionFacts{PostFacts: ops.PostFacts{Exists: true, Author: someoneElse}, Was: was}, &eff); err != nil {
			return err
		}
		to := -1 // nothing changes
		switch {
		case len(eff.Reacts) == 1 && eff.Reacts[0].Post == post && eff.Reacts[0].User == viewer:
			to = int(eff.Reacts[0].Kind)
		case len(eff.Reacts) != 0:
			return fmt.Errorf("%w: reaction decided %+v", errBug, eff.Reacts)
		}
		counts, err := reactionArgs(post, eff.Counts, eff.ReactionCounts)
		if err != nil {
			return err
		}
		beyond := len(eff.Bumps) > 0
		beyondAny = beyondAny || beyond
		applied[was], recorded[was] = counts, beyond
		rows = append(rows, int(was), to, beyond, len(counts)/2)
		rows = append(rows, counts...)
	}
	bucket, low := s.k.post(uint64(post))
	var id, desc string
	var in intent
	if beyondAny {
		id = newIntentID()
		in = intent{kind: intentLike, viewer: uint64(viewer), post: uint64(post), at: s.now().UnixMilli()}
		desc = in.encode()
	}
	args := append(counting(low, uint64(viewer), id, desc), rows...)
	r, err := s.one(ctx, scPostReact, []string{bucket, likersKey(bucket, low), reactorsKey(bucket, low), intentsKey(bucket)}, args...)
	if err != nil {
		return err
	}
	a := vals(r)
	code := num(at(a, 0))
	facts := ops.ReactionFacts{}
	if code != -1 {
		author, err := decodeHead(str(at(a, 1)))
		if err != nil {
			return s.fail(err)
		}
		facts = ops.ReactionFacts{PostFacts: ops.PostFacts{Exists: true, Author: engine.UserID(author)}, Was: counters.Kind(num(at(a, 2)))}
	}
	if code == -2 {
		return s.fail(fmt.Errorf("redisstore: user %d's reaction on post %d is of kind id %d, which this replica's kinds table %v lacks: restart it with the deployment's -reactions",
			uint64(viewer), uint64(post), facts.Was, s.display))
	}
	var eff ops.Effects
	if err := decide(facts, &eff); err != nil || code != 1 {
		return err
	}
	s.stats.counted.Add(num(at(a, 3)))
	got, err := reactionArgs(post, eff.Counts, eff.ReactionCounts)
	if err != nil {
		return err
	}
	if !slices.Equal(got, applied[facts.Was]) {
		return s.fail(fmt.Errorf("%w: decided counts %v on post %d, applied %v", errBug, got, uint64(post), applied[facts.Was]))
	}
	if !recorded[facts.Was] {
		s.emitAll(ctx, eff.Events)
		return nil
	}
	maybeCrash(in.kind)
	in.author, in.authorKnown = uint64(facts.Author), true
	return s.finishIntent(ctx, bucket, id, desc, in, true)
}

// reactionArgs turns the count deltas of a reaction on post into (record
// index, delta) script arguments.
func reactionArgs(post engine.PostID, counts []ops.CountDelta, reactions []ops.ReactionDelta) ([]any, error) {
	args, err := countArgs(post, counts)
	if err != nil {
		return nil, err
	}
	for _, r := range reactions {
		if r.Post != post || r.Kind <= counters.Like || r.Kind > counters.MaxKinds {
			return nil, fmt.Errorf("%w: reaction delta %+v outside post %d", errBug, r, uint64(post))
		}
		args = append(args, pKind(r.Kind), r.Delta)
	}
	return args, nil
}

// reactionCounts fills a page view's reactions, in display order, from
// its record's counts.
func (s *Store) reactionCounts(likes int64, r *counters.Reactions, out *engine.Reactions) {
	for i, id := range s.order[:len(s.display)] {
		if id == counters.Like {
			out.Count[i] = likes
		} else {
			out.Count[i] = r.Get(id)
		}
	}
}

// setKinds reconciles the deployment's kinds with the keyspace's table,
// writing a changed table with a compare-and-set (replicas starting at
// once reconcile again on the table another wrote). kinds nil keeps the
// stored table as it stands (tools that only read and repair).
func (s *Store) setKinds(ctx context.Context, kinds []string) error {
	for attempt := 0; ; attempt++ {
		raw, err := s.wdb.Get(ctx, s.k.kinds()).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return unavailable(err)
		}
		cur, err := decodeKinds(raw)
		if err != nil {
			return fmt.Errorf("redisstore: %s: %w", s.k.kinds(), err)
		}
		if kinds == nil {
			for _, id := range cur.IDs() {
				kinds = append(kinds, cur.Name(id))
			}
		}
		next, err := cur.Reconcile(kinds, func() (counters.Totals, error) { return s.kindTotals(ctx) })
		if err != nil {
			if errors.Is(err, engine.ErrUnavailable) {
				return err
			}
			return fmt.Errorf("redisstore: -reactions: %w", err)
		}
		if next != cur {
			ok, err := s.wdb.EvalSha(ctx, scKindsSet.Hash(), []string{s.k.kinds()}, raw, encodeKinds(&next)).Int()
			if err != nil {
				return unavailable(err)
			}
			if ok == 0 {
				if attempt == 10 {
					return fmt.Errorf("redisstore: %s keeps changing", s.k.kinds())
				}
				continue
			}
		}
		s.display, s.kinds = kinds, next
		for i, name := range kinds {
			s.order[i] = next.ID(name)
		}
		return nil
	}
}

// encodeKinds is a kinds table as P{s}kinds holds it: "id=name" per kind,
// comma-separated, ids increasing. A keyspace without the key has like
// alone.
func encodeKinds(k *counters.Kinds) string {
	var b strings.Builder
	for i, id := range k.IDs() {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(int(id)))
		b.WriteByte('=')
		b.WriteString(k.Name(id))
	}
	return b.String()
}

func decodeKinds(raw string) (counters.Kinds, error) {
	if raw == "" {
		return counters.NewKinds(), nil
	}
	var k counters.Kinds
	for _, f := range strings.Split(raw, ",") {
		idText, name, ok := strings.Cut(f, "=")
		id, err := strconv.ParseUint(idText, 10, 8)
		if !ok || err != nil {
			return k, fmt.Errorf("corrupt kinds table %q", raw)
		}
		if err := k.Put(counters.Kind(id), name); err != nil {
			return k, err
		}
	}
	if !k.Has(counters.Like) {
		return k, fmt.Errorf("kinds table %q lacks like", raw)
	}
	return k, nil
}

// kindTotals sums every post's count of each kind, walking the post
// buckets of every master (SCAN, then the HVALS of the step's buckets in
// one pipeline).
func (s *Store) kindTotals(ctx context.Context) (counters.Totals, error) {
	var mu sync.Mutex
	var t counters.Totals
	pattern := globEscape(s.k.p) + "{p*}"
	err := eachMaster(ctx, s.wcluster, s.wsingle, func(ctx context.Context, c *redis.Client) error {
		var cursor uint64
		for {
			keys, next, err := c.ScanType(ctx, cursor, pattern, scanCount, "hash").Result()
			if err != nil {
				return err
			}
			p := c.Pipeline()
			vals := make([]*redis.StringSliceCmd, len(keys))
			for i, key := range keys {
				vals[i] = p.HVals(ctx, key)
			}
			if len(keys) > 0 {
				if _, err := p.Exec(ctx); err != nil {
					return err
				}
			}
			for i, key := range keys {
				for _, rec := range vals[i].Val() {
					if exists, _ := recordState(rec); !exists {
						continue
					}
					_, counts, r, err := decodeReactions(rec)
					if err != nil {
						return fmt.Errorf("%s: %w", key, err)
					}
					mu.Lock()
					t[counters.Like] += counts.Likes
					for k := counters.Like + 1; k <= counters.MaxKinds; k++ {
						t[k] += r.Get(k)
					}
					mu.Unlock()
				}
			}
			if cursor = next; cursor == 0 {
				return nil
			}
		}
	})
	if err != nil && !errors.Is(err, errCorrupt) {
		return t, unavailable(err)
	}
	return t, err
}
