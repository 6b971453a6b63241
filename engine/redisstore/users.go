package redisstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/counters"
	"github.com/tally-dev/tally/engine/ops"
	"github.com/tally-dev/tally/engine/snowflake"
)

// bump is a delta on one field of one user's record.
type bump struct {
	uid   uint64
	field int
	delta int64
}

// bumpUsers applies deltas to user records: one script per user bucket,
// all buckets in one pipelined round trip. With an operation id each
// bucket's part is guarded by its own marker, so a replay skips the
// buckets already done.
func (s *Store) bumpUsers(ctx context.Context, op, step string, bumps []bump) error {
	return s.bumpUsersTTL(ctx, op, step, ttlArg(op), bumps)
}

func (s *Store) bumpUsersTTL(ctx context.Context, op, step string, ttl int64, bumps []bump) error {
	if len(bumps) == 0 {
		return nil
	}
	byBucket := map[string][]any{}
	var order []string
	for _, b := range bumps {
		bucket, low := s.k.user(b.uid)
		if _, ok := byBucket[bucket]; !ok {
			order = append(order, bucket)
			byBucket[bucket] = counting(ttl)
		}
		byBucket[bucket] = append(byBucket[bucket], low, b.field, b.delta)
	}
	calls := make([]*call, len(order))
	for i, bucket := range order {
		calls[i] = script(scUserBump, []string{bucket, marker(bucket, op+step)}, byBucket[bucket]...)
	}
	if err := s.exec(ctx, calls...); err != nil {
		return err
	}
	for _, c := range calls {
		s.stats.users.Add(num(at(vals(c.res.Val()), 1)))
	}
	return nil
}

// userRecords fetches the records of uids in one round trip.
func (s *Store) userRecords(ctx context.Context, uids []uint64) ([]userRec, error) {
	type grp struct {
		lows []string
		pos  []int
	}
	m := map[string]*grp{}
	var order []string
	for i, u := range uids {
		b, low := s.k.user(u)
		g := m[b]
		if g == nil {
			g = &grp{}
			m[b] = g
			order = append(order, b)
		}
		g.lows = append(g.lows, low)
		g.pos = append(g.pos, i)
	}
	cmds := make([]*redis.SliceCmd, len(order))
	if err := s.read(ctx, func(p redis.Pipeliner) {
		for i, b := range order {
			cmds[i] = p.HMGet(ctx, b, m[b].lows...)
		}
	}); err != nil {
		return nil, err
	}
	out := make([]userRec, len(uids))
	for i, b := range order {
		for j, v := range cmds[i].Val() {
			if sv, ok := v.(string); ok {
				r, err := decodeUser(sv)
				if err != nil {
					return nil, s.fail(err)
				}
				out[m[b].pos[j]] = r
			}
		}
	}
	return out, nil
}

// UserCounts implements engine.Store.
func (s *Store) UserCounts(ctx context.Context, ids []engine.UserID) ([]engine.UserCounts, error) {
	if err := engine.CheckIDs(ids); err != nil {
		return nil, err
	}
	uids := make([]uint64, len(ids))
	for i, u := range ids {
		uids[i] = uint64(u)
	}
	recs, err := s.userRecords(ctx, uids)
	if err != nil {
		return nil, err
	}
	out := make([]engine.UserCounts, len(ids))
	for i, r := range recs {
		// Posts made less posts deleted (followers' feed badges count the
		// posts made), never below zero by the one rule.
		posts := counters.Add(r.get(uPosts), -r.get(uDeleted))
		out[i] = engine.UserCounts{Posts: posts, Followers: r.get(uFollowers), Following: r.get(uFollowing)}
	}
	return out, nil
}

// Follow implements engine.Store. The followee entry and the follower's
// count change together in the follower's slot; the followee's follower
// count follows in theirs (a crash in between can leave it one short,
// never one over).
func (s *Store) Follow(ctx context.Context, viewer, target engine.UserID) error {
	return s.follow(ctx, ops.Follow{Viewer: viewer, Target: target})
}

// Unfollow implements engine.Store.
func (s *Store) Unfollow(ctx context.Context, viewer, target engine.UserID) error {
	return s.follow(ctx, ops.Follow{Viewer: viewer, Target: target, Undo: true})
}

// follow decides on the facts under which it changes something (the
// edge is absent for a follow, present for an unfollow; the target's
// post count as read now, a follow's snapshot); the viewer's slot adds or
// removes the edge only if that fact holds, and otherwise Decide on the
// real fact would change nothing either. A follow of or by a user being
// erased waits until the erasure is over (erase.go), within ctx.
func (s *Store) follow(ctx context.Context, op ops.Follow) error {
	if err := op.Check(); err != nil {
		return err
	}
	facts := ops.FollowFacts{Following: op.Undo}
	if !op.Undo {
		posts, err := s.followTarget(ctx, uint64(op.Viewer), uint64(op.Target))
		if err != nil {
			return err
		}
		facts.TargetPosts = posts
	}
	var eff ops.Effects
	op.Decide(facts, &eff)
	for _, e := range eff.Follows {
		verb := "rem"
		if e.Add {
			verb = "add"
		}
		bucket, low := s.k.user(uint64(e.Viewer))
		r, err := s.one(ctx, scFollow, []string{bucket, s.k.followees(uint64(e.Viewer))}, counting(low, uint64(e.Target), verb, e.Snapshot)...)
		if err != nil {
			return err
		}
		a := vals(r)
		if num(at(a, 0)) == 0 {
			return nil // the edge was already as wanted: nothing changes
		}
		s.stats.users.Add(num(at(a, 1)))
	}
	var bumps []bump
	for _, f := range eff.Followers {
		bumps = append(bumps, bump{uint64(f.User), uFollowers, f.Delta})
	}
	if err := s.bumpUsers(ctx, "", "", bumps); err != nil {
		return err
	}
	s.emitAll(ctx, eff.Events)
	return nil
}

// followTarget reads target's posts made (a follow's snapshot), once
// neither viewer nor target is being erased: the erasure markers are read
// in the same round trip, and while one is there the read is tried again.
func (s *Store) followTarget(ctx context.Context, viewer, target uint64) (int64, error) {
	bucket, low := s.k.user(target)
	for {
		var rec *redis.StringCmd
		var byViewer, ofTarget *redis.IntCmd
		if err := s.read(ctx, func(p redis.Pipeliner) {
			rec = p.HGet(ctx, bucket, low)
			byViewer = p.Exists(ctx, s.k.erasing(viewer))
			ofTarget = p.Exists(ctx, s.k.erasing(target))
		}); err != nil {
			return 0, err
		}
		if byViewer.Val()+ofTarget.Val() == 0 {
			u, err := decodeUser(rec.Val())
			if err != nil {
				return 0, s.fail(err)
			}
			return u.get(uPosts), nil
		}
		select {
		case <-ctx.Done():
			return 0, unavailable(fmt.Errorf("a user being erased: %w", ctx.Err()))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Followees implements engine.Store.
func (s *Store) Followees(ctx context.Context, viewer engine.UserID) ([]engine.UserID, error) {
	keys, err := s.rdb.HKeys(ctx, s.k.followees(uint64(viewer))).Result()
	if err != nil {
		return nil, s.fail(err)
	}
	out := make([]engine.UserID, 0, len(keys))
	for _, k := range keys {
		if u, err := strconv.ParseUint(k, 10, 64); err == nil {
			out = append(out, engine.UserID(u))
		}
	}
	slices.Sort(out)
	return out, nil
}

// Unread implements engine.Store (UnreadMany for one viewer).
func (s *Store) Unread(ctx context.Context, viewer engine.UserID) (engine.Unread, error) {
	var out [1]engine.Unread
	if err := s.UnreadMany(ctx, []engine.UserID{viewer}, out[:]); err != nil {
		return engine.Unread{}, err
	}
	return out[0], nil
}

// UnreadMany is Unread for each of viewers, into out (as long), in the
// same round trips as one: round trip 1 reads the viewers' records, their
// followee snapshots and the two broadcast values; round trip 2 reads the
// followees' post counts (and, at most once a day per viewer, sets up or
// refreshes the viewer's cursor as ops.DecideTouch says, compare-and-set
// on the record). ops.Unread computes the badges from what was read. A
// broadcast changes every connected viewer's badges at once: the
// subscriptions' re-reads come in batches, so that a replica's round
// trips grow with the batches, not with the viewers.
func (s *Store) UnreadMany(ctx context.Context, viewers []engine.UserID, out []engine.Unread) error {
	if len(out) != len(viewers) {
		return fmt.Errorf("%w: %d viewers, %d results", engine.ErrInvalid, len(viewers), len(out))
	}
	for _, v := range viewers {
		if err := checkUser(v); err != nil {
			return err
		}
	}
	var latest *redis.IntCmd
	var push *redis.StringCmd
	recs := make([]*redis.StringCmd, len(viewers))
	follows := make([]*redis.MapStringStringCmd, len(viewers))
	if err := s.read(ctx, func(p redis.Pipeliner) {
		latest = p.LLen(ctx, s.k.notifList())
		push = p.Get(ctx, s.k.redDot())
		for i, v := range viewers {
			bucket, low := s.k.user(uint64(v))
			recs[i] = p.HGet(ctx, bucket, low)
			follows[i] = p.HGetAll(ctx, s.k.followees(uint64(v)))
		}
	}); err != nil {
		return err
	}
	now := s.now()
	pushed, _ := strconv.ParseInt(push.Val(), 10, 64)
	facts := make([]ops.UnreadFacts, len(viewers))
	var targets []uint64 // every viewer's followees, in order
	for i, v := range viewers {
		bucket, low := s.k.user(uint64(v))
		u, err := s.touch(ctx, bucket, low, recs[i].Val(), latest.Val(), now)
		if err != nil {
			return err
		}
		f := ops.UnreadFacts{
			Mentions:   u.get(uMentions),
			Comments:   u.get(uComments),
			Likes:      u.get(uLikes),
			Messages:   u.get(uMessages),
			CursorLive: ops.CursorLive(cursorFacts(u), now, s.opts.CursorTTL),
			Newer:      max(0, latest.Val()-(u.get(uCursor)-1)),
			Click:      u.get(uClick),
			Push:       pushed,
		}
		if fs := follows[i].Val(); len(fs) > 0 {
			f.Snapshots = make([]int64, 0, len(fs))
			for k, v := range fs {
				t, err1 := strconv.ParseUint(k, 10, 64)
				n, err2 := strconv.ParseInt(v, 10, 64)
				if err1 == nil && err2 == nil {
					targets = append(targets, t)
					f.Snapshots = append(f.Snapshots, n)
				}
			}
		}
		facts[i] = f
	}
	var posts []userRec
	if len(targets) > 0 {
		var err error
		if posts, err = s.userRecords(ctx, targets); err != nil {
			return err
		}
	}
	for i := range facts {
		f := &facts[i]
		if n := len(f.Snapshots); n > 0 {
			f.FolloweePosts = make([]int64, n)
			for j, r := range posts[:n] {
				f.FolloweePosts[j] = r.get(uPosts)
			}
			posts = posts[n:]
		}
		out[i] = ops.Unread(*f)
	}
	return nil
}

// cursorFacts are what a user record says of its system cursor.
func cursorFacts(u userRec) ops.CursorFacts {
	f := ops.CursorFacts{HasCursor: u.get(uCursor) != 0}
	if a := u.get(uActive); a != 0 {
		f.LastActive = time.Unix(a, 0)
	}
	return f
}

// touch applies ops.DecideTouch to the viewer's record raw (as read) at
// now, latest being the newest notification's position, and returns the
// record as it then is. The write is a compare-and-set on the cursor and
// activity fields DecideTouch read: if they changed meanwhile (another
// replica touched them), it decides again from the record the script
// found.
func (s *Store) touch(ctx context.Context, bucket, low, raw string, latest int64, now time.Time) (userRec, error) {
	for range 8 {
		u, err := decodeUser(raw)
		if err != nil {
			return u, s.fail(err)
		}
		t := ops.DecideTouch(cursorFacts(u), now, s.opts.CursorTTL)
		if !t.Needed() {
			return u, nil
		}
		was := u
		if t.ResetCursor {
			u.set(uCursor, latest+1) // positions are stored +1: 0 is "none"
		}
		if t.Stamp {
			u.set(uActive, now.Unix())
		}
		r, err := s.one(ctx, scUserCAS, []string{bucket}, cursorCAS(low, was, u)...)
		if err != nil {
			return u, err
		}
		a := vals(r)
		s.stats.users.Add(num(at(a, 0)))
		if num(at(a, 1)) == 1 {
			// The other fields may have moved on (bumps): the cursor
			// fields are what this read decided.
			return u, nil
		}
		raw = str(at(a, 2))
	}
	return userRec{}, s.fail(errors.New("user record's cursor keeps changing under its touch"))
}

// cursorCAS is the scUserCAS row setting low's cursor fields from was to
// now.
func cursorCAS(low string, was, now userRec) []any {
	return []any{low, 2,
		uCursor, was.get(uCursor), now.get(uCursor),
		uActive, was.get(uActive), now.get(uActive)}
}

var unreadField = map[engine.UnreadKind]int{
	engine.Mentions: uMentions,
	engine.Comments: uComments,
	engine.Likes:    uLikes,
	engine.Messages: uMessages,
}

// MarkRead implements engine.Store: ops.MarkRead decides on the newest
// notification's position (for SYSTEM); the read mark is applied as the
// kind says.
func (s *Store) MarkRead(ctx context.Context, viewer engine.UserID, kind engine.UnreadKind) error {
	op := ops.MarkRead{Viewer: viewer, Kind: kind}
	if err := op.Check(); err != nil {
		return err
	}
	var newest int64
	if kind == engine.System {
		var err error
		if newest, err = s.rdb.LLen(ctx, s.k.notifList()).Result(); err != nil {
			return s.fail(err)
		}
	}
	var eff ops.Effects
	op.Decide(uint64(newest), &eff)
	for _, m := range eff.Reads {
		if err := s.markRead(ctx, m); err != nil {
			return err
		}
	}
	s.emitAll(ctx, eff.Events)
	return nil
}

func (s *Store) markRead(ctx context.Context, m ops.ReadMark) error {
	bucket, low := s.k.user(uint64(m.User))
	switch m.Kind {
	case engine.Mentions, engine.Comments, engine.Likes, engine.Messages:
		r, err := s.one(ctx, scSetField, []string{bucket}, low, unreadField[m.Kind], 0, "set")
		if err != nil {
			return err
		}
		s.stats.users.Add(num(r))
	case engine.System:
		r, err := s.one(ctx, scSetField, []string{bucket}, low, uCursor, m.Cursor+1, "set")
		if err != nil {
			return err
		}
		s.stats.users.Add(num(r))
	case engine.Feed:
		key := s.k.followees(uint64(m.User))
		names, err := s.rdb.HKeys(ctx, key).Result()
		if err != nil {
			return s.fail(err)
		}
		if len(names) == 0 {
			return nil
		}
		targets := make([]uint64, len(names))
		for i, n := range names {
			targets[i], _ = strconv.ParseUint(n, 10, 64)
		}
		recs, err := s.userRecords(ctx, targets)
		if err != nil {
			return err
		}
		args := make([]any, 0, 2*len(names))
		for i, n := range names {
			args = append(args, n, recs[i].get(uPosts))
		}
		if _, err := s.one(ctx, scSnapshot, []string{key}, args...); err != nil {
			return err
		}
	default:
		return fmt.Errorf("%w: read mark of unread kind %d", errBug, m.Kind)
	}
	return nil
}

// ClickRedDot implements engine.Store: the viewer records the push stamp
// they have seen (ops.ClickRedDot on the stamp in force).
func (s *Store) ClickRedDot(ctx context.Context, viewer engine.UserID) error {
	op := ops.ClickRedDot{Viewer: viewer}
	if err := op.Check(); err != nil {
		return err
	}
	v, err := s.rdb.Get(ctx, s.k.redDot()).Result()
	if err != nil && err != redis.Nil {
		return s.fail(err)
	}
	stamp, _ := strconv.ParseInt(v, 10, 64)
	var eff ops.Effects
	op.Decide(stamp, &eff)
	for _, c := range eff.Clicks {
		bucket, low := s.k.user(uint64(c.User))
		r, err := s.one(ctx, scSetField, []string{bucket}, low, uClick, c.Stamp, "max")
		if err != nil {
			return err
		}
		s.stats.users.Add(num(r))
	}
	s.emitAll(ctx, eff.Events)
	return nil
}

// PushRedDot implements engine.Store: one stamp, whatever the user count.
// ops.PushRedDot decides it from the clock and the stamp in force; the
// write is a compare-and-set on that stamp.
func (s *Store) PushRedDot(ctx context.Context) error {
	cur, err := s.rdb.Get(ctx, s.k.redDot()).Result()
	if err != nil && err != redis.Nil {
		return s.fail(err)
	}
	// Pushes are rare (an operator's); the loop bounds a pathological
	// race, each lost round being another push's win.
	for range 64 {
		last, _ := strconv.ParseInt(cur, 10, 64)
		var eff ops.Effects
		stamp := ops.PushRedDot{}.Decide(s.now().UnixMilli(), last, &eff)
		r, err := s.one(ctx, scPush, []string{s.k.redDot()}, cur, strconv.FormatInt(stamp, 10))
		if err != nil {
			return err
		}
		a := vals(r)
		if num(at(a, 0)) == 1 {
			s.emitAll(ctx, eff.Events)
			return nil
		}
		cur = str(at(a, 1))
	}
	return s.fail(errors.New("red-dot stamp keeps changing under the push"))
}

// PublishNotification implements engine.Store: one RPUSH to the shared
// list, whatever the user count.
func (s *Store) PublishNotification(ctx context.Context, title, body, idemKey string) (engine.Notification, error) {
	op := ops.Publish{Title: title, Body: body, IdemKey: idemKey}
	if err := op.Check(); err != nil {
		return engine.Notification{}, err
	}
	// The key's record, "<id>@<unix ns>", holds the store clock's time it
	// was made at, judged by engine.IdemExpired; Redis's expiry
	// (idemRecordTTL) only reclaims it later. It is written by the script
	// that publishes, so the two are kept or lost together.
	ttl := int64(0)
	if idemKey != "" {
		ttl = idemRecordTTL.Milliseconds()
	}
	expired := ""
	for range 10 {
		id := s.gen.Next()
		now := s.now()
		n := engine.Notification{ID: engine.NotificationID(id), Title: title, Body: body, CreatedAt: snowflake.Time(id)}
		record := strconv.FormatUint(id, 10) + "@" + strconv.FormatInt(now.UnixNano(), 10)
		r, err := s.one(ctx, scPublish, []string{s.k.notifList(), s.k.notifIndex(), s.k.sysIdem(idemKey)},
			id, encodeNotif(n), ttl, record, expired)
		if err != nil {
			return engine.Notification{}, err
		}
		a := vals(r)
		switch num(at(a, 0)) {
		case 1:
			var eff ops.Effects
			op.Decide(&eff)
			s.emitAll(ctx, eff.Events)
			return n, nil
		case 0:
			v := str(at(a, 1))
			_, ns, _ := strings.Cut(v, "@")
			recorded, err := strconv.ParseInt(ns, 10, 64)
			if err != nil || recorded == 0 {
				return engine.Notification{}, fmt.Errorf("%w: notification idempotency record %q", errCorrupt, v)
			}
			if engine.IdemExpired(time.Unix(0, recorded), now) {
				expired = v
				continue
			}
			prev, err := decodeNotif(str(at(a, 2)))
			if err != nil {
				return engine.Notification{}, s.fail(err)
			}
			// The record is the notification itself, so what the key was
			// first used for is read back from it.
			first := engine.IdemFingerprint(engine.IdemPublish, engine.IdemArgs{Title: prev.Title, Body: prev.Body})
			if err := engine.CheckIdemReuse(first, engine.IdemFingerprint(engine.IdemPublish,
				engine.IdemArgs{Title: title, Body: body})); err != nil {
				return engine.Notification{}, err
			}
			return prev, nil
		}
	}
	return engine.Notification{}, s.fail(errIDClash)
}

// Notifications implements engine.Store.
func (s *Store) Notifications(ctx context.Context, first int, after engine.NotificationID) ([]engine.Notification, error) {
	first, err := engine.ClampPage(first)
	if err != nil {
		return nil, err
	}
	r, err := s.query(ctx, scNotifs, []string{s.k.notifList(), s.k.notifIndex()}, first, uint64(after), uid8(uint64(after)))
	if err != nil {
		return nil, err
	}
	a := vals(r)
	out := make([]engine.Notification, 0, len(a))
	for i := len(a) - 1; i >= 0; i-- {
		n, err := decodeNotif(str(a[i]))
		if err != nil {
			return nil, s.fail(err)
		}
		out = append(out, n)
	}
	return out, nil
}

// SweepCursors drops the system cursors that no longer count
// (ops.CursorLive: users inactive for longer than CursorTTL), freeing
// their memory (Unread already treats such a cursor as absent). It scans
// the user buckets of every master: one pipelined round trip reads a
// batch of buckets, Go judges each record, one writes the records to
// change (compare-and-set: a record changed meanwhile waits for the next
// sweep). The Store runs it every SweepInterval, one replica at a time.
// It returns how many cursors it dropped.
func (s *Store) SweepCursors(ctx context.Context) (int64, error) {
	var dropped atomic.Int64
	now := s.now()
	pattern := globEscape(s.k.p) + "{u*}"
	sweep := func(ctx context.Context, c *redis.Client) error {
		var cursor uint64
		for {
			keys, next, err := c.ScanType(ctx, cursor, pattern, 500, "hash").Result()
			if err != nil {
				return err
			}
			if len(keys) > 0 {
				p := c.Pipeline()
				reads := make([]*redis.MapStringStringCmd, len(keys))
				for i, k := range keys {
					reads[i] = p.HGetAll(ctx, k)
				}
				if _, err := p.Exec(ctx); err != nil {
					return err
				}
				var calls []*call
				for i, k := range keys {
					var args []any
					for low, raw := range reads[i].Val() {
						u, err := decodeUser(raw)
						if err != nil {
							return err
						}
						f := cursorFacts(u)
						if !f.HasCursor || ops.CursorLive(f, now, s.opts.CursorTTL) {
							continue
						}
						was := u
						u.set(uCursor, 0)
						u.set(uActive, 0)
						args = append(args, cursorCAS(low, was, u)...)
					}
					if len(args) > 0 {
						calls = append(calls, script(scUserCAS, []string{k}, args...))
					}
				}
				if len(calls) > 0 {
					if err := s.runPipe(ctx, c, calls, false); err != nil {
						return err
					}
					for _, cl := range calls {
						a := vals(cl.res.Val())
						s.stats.users.Add(num(at(a, 0)))
						for j := 1; j < len(a); j += 2 {
							dropped.Add(num(a[j]))
						}
					}
				}
			}
			if cursor = next; cursor == 0 {
				return nil
			}
		}
	}
	if err := eachMaster(ctx, s.wcluster, s.wsingle, sweep); err != nil {
		return dropped.Load(), s.fail(err)
	}
	return dropped.Load(), nil
}

func globEscape(p string) string {
	var b strings.Builder
	for _, r := range p {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// electedLoop runs sweep every interval on one replica at a time: a lock
// key that expires with the interval elects whoever takes it first.
func (s *Store) electedLoop(every time.Duration, lock string, sweep func(context.Context)) {
	defer s.wg.Done()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), every)
			ok, err := s.wdb.SetNX(ctx, s.k.sys()+lock, s.gen.Node, every*9/10).Result()
			if err == nil && ok {
				sweep(ctx)
			}
			cancel()
		}
	}
}
