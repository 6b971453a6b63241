package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/ops"
)

// Deletes: counts follow what they count down, exactly once.
//
// A comment id is counted in its post's slot (the set commentsKey), so
// its delete is one script there: the id moves to the post's deleted
// ids (uncountedKey) and the count drops with it, or nothing happens (a repeat, a racing
// delete). A post's delete starts in its slot too: its record becomes a
// tombstone (its id stays taken and reads as unknown) and its sets go, in
// one script that also records the intent of what is left in other
// slots — the author's deleted posts, a repost's original's reposts —
// which finishIntent applies under markers, so that a crash in between
// leaves it to a sweeper, applied once. Every decrement goes through the
// counting scripts' clamp (counters.Floor).

// DeleteComment implements engine.Store: the facts (the post, whether
// the id is counted or deleted on it, whether the actor wrote it) are
// read in one round trip, ops.DeleteComment decides, and the delete is
// applied only if the id is still counted (else Decide runs again on
// what the script found).
func (s *Store) DeleteComment(ctx context.Context, actor engine.Actor, post engine.PostID, comment engine.CommentID) error {
	op := ops.DeleteComment{Actor: actor, Post: post, Comment: comment}
	if err := op.Check(); err != nil {
		return err
	}
	bucket, low := s.k.post(uint64(post))
	cid := strconv.FormatUint(uint64(comment), 10)
	var rec *redis.StringCmd
	var live, deleted *redis.BoolCmd
	var wrote *redis.BoolCmd
	if err := s.read(ctx, func(p redis.Pipeliner) {
		rec = p.HGet(ctx, bucket, low)
		live = p.SIsMember(ctx, commentsKey(bucket, low), cid)
		deleted = p.SIsMember(ctx, uncountedKey(bucket, low), cid)
		wrote = p.SIsMember(ctx, s.k.written(uint64(actor.User)), cid)
	}); err != nil {
		return err
	}
	pf, err := postFactsOf(rec.Val())
	if err != nil {
		return s.fail(err)
	}
	f := ops.DeleteCommentFacts{PostFacts: pf, Live: live.Val(), Deleted: deleted.Val(), Wrote: wrote.Val()}
	var eff ops.Effects
	if err := op.Decide(f, &eff); err != nil || eff.Empty() {
		return err
	}
	counts, err := countArgs(post, eff.Counts)
	if err != nil {
		return err
	}
	if len(eff.CommentMarks) != 1 || !eff.CommentMarks[0].Deleted || eff.CommentMarks[0].Comment != comment {
		return fmt.Errorf("%w: DeleteComment decided %+v", errBug, eff.CommentMarks)
	}
	r, err := s.one(ctx, scCommentDelete, []string{bucket, commentsKey(bucket, low), uncountedKey(bucket, low)}, counting(append([]any{low, cid}, counts...)...)...)
	if err != nil {
		return err
	}
	a := vals(r)
	switch num(at(a, 0)) {
	case 1:
		s.stats.counted.Add(num(at(a, 2)))
		s.emitAll(ctx, eff.Events)
		return nil
	case -1:
		f.PostFacts = ops.PostFacts{} // deleted meanwhile
	default:
		f.Live, f.Deleted = false, true // a racing delete came first
	}
	eff.Reset()
	if err := op.Decide(f, &eff); err != nil || eff.Empty() {
		return err
	}
	return fmt.Errorf("%w: DeleteComment decided %+v again on %+v", errBug, eff, f)
}

// DeletePost implements engine.Store: the post's record and, for a
// repost, its original are read; ops.DeletePost decides; the tombstone
// and the intent of the rest are written if the record is still the one
// read (else Decide runs again on what the script found); then the rest
// is finished (intents.go).
func (s *Store) DeletePost(ctx context.Context, actor engine.Actor, post engine.PostID) error {
	op := ops.DeletePost{Actor: actor, Post: post}
	if err := op.Check(); err != nil {
		return err
	}
	bucket, low := s.k.post(uint64(post))
	var rec, orig *redis.StringCmd
	if err := s.read(ctx, func(p redis.Pipeliner) {
		rec = p.HGet(ctx, bucket, low)
		orig = p.HGet(ctx, repostsKey(bucket), low)
	}); err != nil {
		return err
	}
	original, _ := strconv.ParseUint(orig.Val(), 10, 64)
	raw := rec.Val()
	for range 8 {
		pf, err := postFactsOf(raw)
		if err != nil {
			return s.fail(err)
		}
		// Whether the original still exists is checked where its count
		// drops (a missing original's count is skipped, as Decide skips
		// it).
		f := ops.DeletePostFacts{PostFacts: pf, Original: engine.PostID(original), OriginalExists: original != 0}
		var eff ops.Effects
		if err := op.Decide(f, &eff); err != nil || eff.Empty() {
			return err
		}
		if len(eff.Unregisters) != 1 || eff.Unregisters[0].Post != post {
			return fmt.Errorf("%w: DeletePost decided %+v", errBug, eff.Unregisters)
		}
		id, desc := "", ""
		it := intent{kind: intentDelete, viewer: uint64(pf.Author), post: uint64(post), aux: original, at: s.now().UnixMilli()}
		if len(eff.Counts) > 0 || eff.Unregisters[0].Author != 0 {
			id, desc = newIntentID(), it.encode()
		}
		r, err := s.one(ctx, scPostDelete,
			[]string{bucket, likersKey(bucket, low), favsKey(bucket, low), commentsKey(bucket, low), uncountedKey(bucket, low), repostsKey(bucket), intentsKey(bucket), reactorsKey(bucket, low)},
			low, postHead(uint64(pf.Author)), id, desc)
		if err != nil {
			return err
		}
		a := vals(r)
		switch num(at(a, 0)) {
		case 1:
			s.stats.posts.Add(-1)
			s.stats.counted.Add(-num(at(a, 1)))
			if desc != "" {
				maybeCrash(intentDelete)
				if err := s.finishIntent(ctx, bucket, id, desc, it, true); err != nil {
					return err
				}
			}
			s.emitAll(ctx, eff.Events)
			return nil
		case 0:
			raw = tombstone
		case -1:
			raw = ""
		default:
			raw = str(at(a, 1)) // the head is all Decide reads
		}
	}
	return s.fail(errors.New("post keeps changing under DeletePost"))
}
