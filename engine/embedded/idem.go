package embedded

import (
	"hash/fnv"
	"slices"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/snapshot"
	"github.com/tally-dev/tally/engine/table"
)

// idemKey is (viewer, a 64-bit hash of the idempotency key). The record
// carries the hash rather than the key, which keeps records small and
// makes the key's length irrelevant to the state; the viewer is kept
// whole, so that erasing a user finds their keys (a collision would need
// two keys of one viewer with the same hash within IdempotencyTTL, and
// even then the fingerprint refuses a different call).
type idemKey [2]uint64

func hashIdem(k idemKey) uint64 { return table.HashPair(k[0], k[1]) }

type idemVal struct {
	result uint64
	time   int64
	fp     uint64 // engine.IdemFingerprint of the first call
}

type idemExpiry struct {
	time int64
	key  idemKey
}

// idemLookup returns what the record logged under k recorded, if it is younger
// than engine.IdempotencyTTL at now.
func (st *state) idemLookup(k idemKey, now int64) (idemVal, bool) {
	v, ok := st.idem.Get(k)
	if !ok || engine.IdemExpired(nsTime(v.time), nsTime(now)) {
		return idemVal{}, false
	}
	return v, true
}

// expireIdem forgets idempotency keys older than the TTL at time now. It
// runs at the start of every apply, with the record's own time, so replay
// forgets exactly what the live engine forgot.
func (st *state) expireIdem(now int64) {
	at := nsTime(now)
	q := st.idemQ
	h := st.idemHead
	for h < len(q) && engine.IdemExpired(nsTime(q[h].time), at) {
		// A key re-logged later (after it expired) has a newer time in the
		// table; only the entry this queue slot put there is removed.
		if v, ok := st.idem.Get(q[h].key); ok && v.time == q[h].time {
			st.idem.Delete(q[h].key)
		}
		h++
	}
	// Compact once the dead prefix is the larger half, keeping the queue
	// amortised O(1) per key; into a new array while a snapshot's cut
	// reads this one.
	if h > 1024 && h > len(q)/2 {
		if st.held != nil {
			q = slices.Clone(q[h:])
		} else {
			q = q[:copy(q, q[h:])]
		}
		h = 0
	}
	st.idemQ, st.idemHead = q, h
}

// idemQMut returns the live part of the expiry queue for a change in
// place (an erasure empties the user's slots): while a snapshot's cut
// holds the queue, the live state first takes a copy of its own, once per
// cut, since the cut writes the slots as they were at its index.
func (st *state) idemQMut() []idemExpiry {
	if c := st.held; c != nil && !c.idemCopied {
		st.idemQ, st.idemHead = slices.Clone(st.idemQ[st.idemHead:]), 0
		c.idemCopied = true
	}
	return st.idemQ[st.idemHead:]
}

// makeIdemKey keys an idempotency key by its viewer: a key is scoped to
// one viewer, and bound (by the fingerprint kept with it) to the kind and
// arguments of its first use, so reusing it for anything else is refused
// rather than answered with another call's result.
func makeIdemKey(viewer uint64, key string) idemKey {
	if key == "" {
		return idemKey{}
	}
	h := fnv.New64a()
	h.Write([]byte(key))
	k := idemKey{viewer, h.Sum64()}
	if k[1] == 0 {
		k[1] = 1 // zero is an emptied queue slot's
	}
	return k
}

func writeIdem(e *enc, st *state) {
	st.idem.Range(func(k idemKey, v idemVal) bool {
		e.start()
		e.fixed(k[0])
		e.fixed(k[1])
		e.u(v.result)
		e.v(v.time)
		e.fixed(v.fp)
		e.end()
		return true
	})
}

func writeIdemQ(e *enc, st *state) {
	for _, q := range st.idemQ[st.idemHead:] {
		if q.key == (idemKey{}) {
			continue // emptied by an erasure
		}
		e.start()
		e.v(q.time)
		e.fixed(q.key[0])
		e.fixed(q.key[1])
		e.end()
	}
}

func readIdem(sr *snapshot.SectionReader, pc *pacer, st *state) error {
	err := eachItem(sr, pc, func(d *dec) {
		k := idemKey{d.fixed("key"), d.fixed("key")}
		v := idemVal{result: d.u("result"), time: d.v("time"), fp: d.fixed("fingerprint")}
		switch {
		case d.err != "":
		case k == (idemKey{}):
			d.fail("zero key")
		case v.fp == 0:
			d.fail("zero fingerprint")
		}
		if d.err == "" {
			st.idem.Put(k, v)
		}
	})
	if err != nil {
		return err
	}
	return checkLen(sr, st.idem.Len())
}

func readIdemQ(sr *snapshot.SectionReader, pc *pacer, st *state) error {
	return eachItem(sr, pc, func(d *dec) {
		q := idemExpiry{time: d.v("time"), key: idemKey{d.fixed("key"), d.fixed("key")}}
		if d.err != "" {
			return
		}
		if q.key == (idemKey{}) {
			d.fail("zero key")
			return
		}
		if n := len(st.idemQ); n > 0 && q.time < st.idemQ[n-1].time {
			d.fail("expiry queue out of time order")
			return
		}
		st.idemQ = append(st.idemQ, q)
	})
}
