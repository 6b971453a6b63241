package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Sweeping: finding the intents that dead processes left (intents.go).
//
// Intent hashes are found by SCAN on every master, and a SCAN costs
// redis-server time in proportion to all the keys it walks, not to the
// intents it finds: at millions of keys a pass takes seconds of a
// master's only core. So the replicas' periodic sweep goes a step at a
// time: each step scans on from where the previous one stopped (each
// master's cursor in "{s}isweep:<master address>", so the step can run on
// any replica) for at most a tenth of IntentSweepInterval, then stops.
// The sweep then costs each master at most a tenth of its time, and a
// keyspace too big for one step is swept through over several intervals,
// instead of being scanned from the start again each time and, past what
// one interval could scan, never reached.

// intentScanPattern matches the intent hashes of post buckets and group
// tags, whose keys hold no client text: nothing else (an idempotency key
// ending in "}I" lives under {u…} or {s}).
const intentScanPattern = "{[pg]*}I"

// intentSweepShare is the part of IntentSweepInterval a sweep step may
// scan for.
const intentSweepShare = 10

// sweepIntents finishes every intent older than its grace period that no
// live finisher holds: the operations whose process died between their
// first and later steps, and the import chunks of imports that died
// (importintents.go). It returns how many it finished. With budget 0 it
// scans the whole keyspace; otherwise it is one step of the periodic
// sweep: on each master, from the stored cursor, for at most budget.
func (s *Store) sweepIntents(ctx context.Context, budget time.Duration) (int, error) {
	var (
		mu   sync.Mutex // ForEachMaster sweeps the masters at once
		done int
	)
	now := s.now().UnixMilli()
	pattern := globEscape(s.k.p) + intentScanPattern
	sweep := func(ctx context.Context, c *redis.Client) error {
		cursorKey := s.k.sys() + "isweep:" + c.Options().Addr
		var cursor uint64
		if budget > 0 {
			v, err := s.wdb.Get(ctx, cursorKey).Uint64()
			if err != nil && !errors.Is(err, redis.Nil) {
				return err
			}
			cursor = v
		}
		start := time.Now()
		for {
			keys, next, err := c.ScanType(ctx, cursor, pattern, 1000, "hash").Result()
			if err != nil {
				return err
			}
			for _, key := range keys {
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
					mu.Lock()
					done += n
					mu.Unlock()
				}
			}
			cursor = next
			if cursor == 0 || budget > 0 && time.Since(start) >= budget {
				break
			}
		}
		if budget > 0 {
			return s.wdb.Set(ctx, cursorKey, cursor, 0).Err()
		}
		return nil
	}
	err := eachMaster(ctx, s.wcluster, s.wsingle, sweep)
	if err != nil {
		s.intentsRecovered.Add(uint64(done))
		return done, s.fail(err)
	}
	n, err := s.sweepImports(ctx, now)
	if err == nil {
		var m int
		m, err = s.sweepErasures(ctx, now, budget == 0)
		n += m
	}
	s.intentsRecovered.Add(uint64(done + n))
	return done + n, err
}

// IntentSweeps reports, since Open, how many intents this process's
// sweeps finished — each an operation or import chunk that a process
// left between its steps (it died, or Redis failed it mid-way) — and how
// many periodic sweep steps failed, leaving the intents they would have
// finished for a later step. Both feed /metrics: steady recoveries mean
// processes keep dying mid-write; failing steps mean intents pile up.
func (s *Store) IntentSweeps() (recovered, failed uint64) {
	return s.intentsRecovered.Load(), s.intentSweepsFailed.Load()
}

// claimable reads an intent's value as a sweeper at now sees it: the
// intent as its operation wrote it, and whether a sweeper may claim it
// (it is past its grace period and no other sweeper holds a live claim).
func claimable(value string, now int64) (raw string, in intent, ok bool, err error) {
	raw = value
	if len(value) > 1 && value[0] == 'c' && value[1] != '|' { // "c<ms>|...": claimed
		at, r, _ := strings.Cut(value[1:], "|")
		t, err := strconv.ParseInt(at, 10, 64)
		if err != nil {
			return "", intent{}, false, errBadIntent
		}
		if now-t < claimTimeout.Milliseconds() {
			return "", intent{}, false, nil // another sweeper holds it
		}
		raw = r
	}
	if in, err = decodeIntent(raw); err != nil {
		return "", intent{}, false, err
	}
	grace := intentGrace
	if in.kind == intentImportPending {
		grace = importGrace
	}
	// Younger: its own operation is most likely finishing it.
	return raw, in, now-in.at >= grace.Milliseconds(), nil
}

// claim marks intent id of the intent hash key, read as value, as this
// sweeper's at now; false when it changed meanwhile (finished, or
// claimed).
func (s *Store) claim(ctx context.Context, key, id, value, raw string, now int64) (string, bool, error) {
	claimed := "c" + strconv.FormatInt(now, 10) + "|" + raw
	r, err := s.one(ctx, scIntentClaim, []string{key}, id, value, claimed)
	if err != nil {
		return "", false, err
	}
	return claimed, num(r) == 1, nil
}

func (s *Store) claimAndFinish(ctx context.Context, bucket, id, value string, now int64) (int, error) {
	raw, in, ok, err := claimable(value, now)
	if err != nil {
		return 0, s.fail(fmt.Errorf("%s %s: %w", intentsKey(bucket), id, err))
	}
	if !ok {
		return 0, nil
	}
	claimed, ok, err := s.claim(ctx, intentsKey(bucket), id, value, raw, now)
	if err != nil || !ok {
		return 0, err
	}
	if err := s.finishIntent(ctx, bucket, id, claimed, in, false); err != nil {
		return 0, err
	}
	return 1, nil
}
