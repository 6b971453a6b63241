package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/tally-dev/tally/engine"
)

// Idempotency keys: a keyed mutation (createPost, comment, repost,
// sendMessage) applies once, whatever retries, crashed tally processes
// and Redis failovers it meets. Two records make it so.
//
// The claim of (viewer, key), in the viewer's slot, says what the key was
// first used for: "<state><result>#<fingerprint hex>@<unix ns><tag>",
// state 'p' while the operation runs and 'd' once every step is applied,
// tag the hash tag ("{…}", without the key prefix) of the slot the record
// below lives in, so that an erasure finds the record from the claim
// (erase.go). It binds
// the key to the kind and arguments of its first use whatever post or
// group they name (a retry with another fingerprint is
// engine.ErrIdemReused), keeps the result the first attempt chose (a new
// post's or message's id), and answers a retry of a finished operation
// ('d') without touching anything else.
//
// The record, "<result>#<fingerprint hex>@<unix ns>" under a name hashed
// from (viewer, key), lives in the slot of the operation's first step (the
// post a comment or repost counts on, the new post's bucket, the group a
// message goes to) and is written by that step's script, with the step:
// it is the step's guard (scripts.go). A retry's first step finds it and
// applies nothing, and takes the result and time from it. Since the record
// and the effect it guards are one script's writes, Redis replicates them
// together, and a failover that loses one loses the other: then the retry
// applies the step again, which is right, since its effect was lost too.
// The claim has no such tie to the effect, so it is never trusted over
// the record, and it is dropped only when the first step's script proved
// that the step did not run (it refused: unknown post, not a member, id
// taken). After any other error (a timeout, a lost reply, a short WAIT)
// the step may have run, and the claim stays for the retry.
//
// The operation's id (opID), which names its intent and the markers of
// its later steps, is made from the time in the first step's record, so a
// retry that had to make a new claim (a failover lost the first) still
// finds the markers of the steps already applied.
//
// Both records are forgotten when engine.IdemExpired says so by the
// store's clock; Redis's expiry (idemRecordTTL) only reclaims the memory
// later.
//
// What this cannot do: a createPost without a client id has its first
// step in the slot of the id its first attempt drew, which only the claim
// remembers. A failover that loses the claim but not the post (possible
// without WaitReplicas) lets a retry draw another id and register a
// second post. A client that needs this exactly-once passes its own id.

// idemRecordTTL is Redis's expiry of a claim or record: longer than
// engine.IdempotencyTTL, which the store's clock judges, so that Redis
// reclaims only records already forgotten.
const idemRecordTTL = engine.IdempotencyTTL + time.Hour

// idem is a keyed operation as its claim says.
type idem struct {
	key    string // the claim; "" when the call carries no idempotency key
	tag    string // the first step's hash tag, without the key prefix
	viewer uint64
	client string // the client's idempotency key
	op     string // operation id: intent and markers of later steps
	result string // the result this operation stands for
	fp     uint64 // engine.IdemFingerprint of the first use
	at     int64  // unix ns the operation began (store's clock)
	done   bool   // a previous attempt completed
	fresh  bool   // this call made the claim
}

// record is the value of in's record (and, after its state, claim).
func (in idem) record() string {
	return in.result + "#" + strconv.FormatUint(in.fp, 16) + "@" + strconv.FormatInt(in.at, 10)
}

func (in idem) claim(state byte) string { return string(state) + in.record() + in.tag }

// parseClaim reads a claim: its state, its record and the hash tag of the
// slot the record lives in (without the key prefix).
func parseClaim(v string) (state byte, record, tag string, err error) {
	i := strings.IndexByte(v, '{')
	if len(v) < 2 || i < 1 {
		return 0, "", "", fmt.Errorf("%w: idempotency claim %q", errCorrupt, v)
	}
	return v[0], v[1:i], v[i:], nil
}

// tagOf is a key's hash tag without the key prefix: "{…}" and what
// follows.
func tagOf(key string) string { return key[strings.IndexByte(key, '{'):] }

// parseRecord reads a record's "<result>#<fingerprint hex>@<unix ns>".
func parseRecord(v string) (result string, fp uint64, at int64, err error) {
	result, rest, ok1 := strings.Cut(v, "#")
	fpHex, atDec, ok2 := strings.Cut(rest, "@")
	fp, err1 := strconv.ParseUint(fpHex, 16, 64)
	at, err2 := strconv.ParseInt(atDec, 10, 64)
	if !ok1 || !ok2 || err1 != nil || err2 != nil || fp == 0 || at == 0 {
		return "", 0, 0, fmt.Errorf("%w: idempotency record %q", errCorrupt, v)
	}
	return result, fp, at, nil
}

// idemBegin claims (viewer, key) for result, with a first step in tag's
// slot, or returns the operation an earlier attempt claimed it for; an
// earlier use with another fingerprint is engine.ErrIdemReused.
func (s *Store) idemBegin(ctx context.Context, viewer uint64, key, result, tag string, op engine.IdemOp, args engine.IdemArgs) (idem, error) {
	if key == "" {
		return idem{result: result}, nil
	}
	now := s.now()
	in := idem{key: s.k.idemClaim(viewer, key), tag: tagOf(tag), viewer: viewer, client: key, result: result,
		fp: engine.IdemFingerprint(op, args), at: now.UnixNano(), fresh: true}
	in.op = opID(viewer, key, in.at)
	expired := ""
	// Each pass either claims, finds a live claim, or finds one expired
	// and replaces it unless another call got there first (then the next
	// pass judges that call's claim).
	for range 4 {
		r, err := s.one(ctx, scIdemBegin, []string{in.key}, in.claim('p'), idemRecordTTL.Milliseconds(), expired)
		if err != nil {
			return in, err
		}
		prev, _ := r.(string)
		if prev == "" {
			return in, nil
		}
		state, record, prevTag, err := parseClaim(prev)
		if err != nil {
			return idem{}, err
		}
		result, fp, at, err := parseRecord(record)
		if err != nil {
			return idem{}, err
		}
		if engine.IdemExpired(time.Unix(0, at), now) {
			expired = prev
			continue
		}
		if err := engine.CheckIdemReuse(fp, in.fp); err != nil {
			return idem{}, err
		}
		return idem{key: in.key, tag: prevTag, viewer: viewer, client: key, op: opID(viewer, key, at), result: result,
			fp: fp, at: at, done: state == 'd'}, nil
	}
	return in, s.fail(fmt.Errorf("idempotency claim %q: replaced by others on every attempt", in.key))
}

// guard is what a guarded step's script looks for and sets in the step's
// slot (scripts.go): ttl 0 is no guard, key is then any key of the slot.
type guard struct {
	key, value string
	ttl        int64 // ms
	expired    string
}

func (g guard) args() []any { return []any{g.ttl, g.value, g.expired} }

// noGuard is the guard of a step of an operation without a key, in tag's
// slot.
func noGuard(tag string) guard { return guard{key: tag + "i"} }

// markerGuard guards a later step of operation op in tag's slot.
func markerGuard(tag, op, step string) guard {
	return guard{key: marker(tag, op+step), value: "1", ttl: ttlArg(op)}
}

// firstStep runs in's first step in tag's slot: step sends it under the
// guard given and returns the record it found there ("" when it applied
// the step now). A live record found means an earlier attempt applied the
// step: in then takes that attempt's result and time (so its operation
// id), and the claim is set to agree. An operation without a key runs its
// step unguarded.
func (s *Store) firstStep(ctx context.Context, in *idem, tag string, step func(guard) (found string, err error)) error {
	if in.key == "" {
		_, err := step(noGuard(tag))
		return err
	}
	expired := ""
	for range 4 {
		found, err := step(guard{key: s.k.idemRecord(tag, in.viewer, in.client), value: in.record(),
			ttl: idemRecordTTL.Milliseconds(), expired: expired})
		if err != nil || found == "" {
			return err
		}
		result, fp, at, err := parseRecord(found)
		if err != nil {
			return err
		}
		if engine.IdemExpired(time.Unix(0, at), s.now()) {
			expired = found
			continue
		}
		if err := engine.CheckIdemReuse(fp, in.fp); err != nil {
			// A failover lost the claim and the key came back with other
			// arguments: the record says what it was first used for.
			if in.fresh {
				s.dropClaim(ctx, *in)
			}
			return err
		}
		if result != in.result || at != in.at || in.tag != tagOf(tag) {
			// The claim was made again after a failover lost the first.
			in.result, in.at, in.op, in.tag = result, at, opID(in.viewer, in.client, at), tagOf(tag)
			if err := s.exec(ctx, raw("SET", in.key, in.claim('p'), "XX", "KEEPTTL")); err != nil {
				return err
			}
		}
		return nil
	}
	return s.fail(errors.New("idempotency record: replaced by others on every attempt"))
}

// idemDone marks in's claim done: a retry returns the result.
func (s *Store) idemDone(ctx context.Context, in idem) error {
	if in.key == "" || in.done {
		return nil
	}
	return s.exec(ctx, raw("SET", in.key, in.claim('d'), "XX", "KEEPTTL"))
}

// dropClaim forgets the claim of an operation whose first step proved it
// did not run (its script refused on a product rule: unknown post, not a
// member), so that a retry is judged afresh. Never after an error: the
// step may have run.
func (s *Store) dropClaim(ctx context.Context, in idem) {
	if in.key != "" && !in.done {
		_ = s.exec(ctx, raw("DEL", in.key))
	}
}
