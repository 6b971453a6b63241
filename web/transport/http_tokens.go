package transport

import (
	"hash/maphash"
	"math"
	"sync"
	"time"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/web/auth"
)

// tokenCache remembers Authorization headers that verified, so a client's
// next request with the same token skips the HMAC, the base64 and the
// JSON of the claims, a large share of a cheap request's CPU. A header is
// known by a 128-bit keyed hash of all its bytes (two maphash seeds, made
// for this process, so a client can neither predict nor aim at another
// header's key), so a different signature or claim is a miss; only
// successes are kept, and only until the token's exp: a verified token
// stays valid until then (Tally has no revocation and the secret does not
// change while the process runs), and past exp the header goes to
// auth.Keys again, which decides with its leeway.
//
// The cache is a fixed array of tokenWays-way sets of 32-byte entries
// with no pointers (the header itself is not kept), allocated at the
// first verified token: it costs the GC nothing to scan and never more
// than its array, however many clients come. A header's hash picks its
// set; a new entry takes an empty or expired way, else the way whose
// token expires soonest, so a crowd larger than the cache evicts tokens
// one at a time instead of emptying the cache (which would make most
// requests verify again once the active users outnumber it).
type tokenCache struct {
	keys    *auth.Keys
	seeds   [2]maphash.Seed
	sets    int // a power of two
	mu      sync.RWMutex
	entries []cachedToken // sets × tokenWays; nil until the first insert
}

type headerHash [2]uint64

// cachedToken is a verified header: its hash, the principal and until
// when it holds.
type cachedToken struct {
	hash  headerHash
	user  engine.UserID
	exp   uint32 // Unix seconds; 0: the token has no exp
	flags uint32 // tokenKept, tokenAdmin, tokenService
}

const (
	tokenKept = 1 << iota
	tokenAdmin
	tokenService
)

// tokenWays is the entries of a set: enough that the hashes of a few
// thousand active tokens rarely crowd one set, few enough that a lookup
// compares a cache line's worth.
const tokenWays = 4

// defaultTokenSets × tokenWays is how many verified tokens the cache
// keeps.
const defaultTokenSets = 4096

func newTokenCache(keys *auth.Keys) *tokenCache { return newTokenCacheSets(keys, defaultTokenSets) }

func newTokenCacheSets(keys *auth.Keys, sets int) *tokenCache {
	if sets <= 0 || sets&(sets-1) != 0 {
		panic("tokenCache: sets must be a power of two")
	}
	return &tokenCache{keys: keys, seeds: [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}, sets: sets}
}

func (c *tokenCache) hash(h string) headerHash {
	return headerHash{maphash.String(c.seeds[0], h), maphash.String(c.seeds[1], h)}
}

// set returns the entries of key's set; c.entries is not nil.
func (c *tokenCache) set(key headerHash) []cachedToken {
	i := int(key[0]&uint64(c.sets-1)) * tokenWays
	return c.entries[i : i+tokenWays : i+tokenWays]
}

// fromHeader is keys.FromHeader, remembered.
func (c *tokenCache) fromHeader(h string) (auth.Principal, bool, error) {
	if h == "" {
		return c.keys.FromHeader(h)
	}
	key := c.hash(h)
	now := time.Now().Unix()
	c.mu.RLock()
	if c.entries != nil {
		for _, e := range c.set(key) {
			if e.flags&tokenKept != 0 && e.hash == key && (e.exp == 0 || now < int64(e.exp)) {
				c.mu.RUnlock()
				return auth.Principal{User: e.user, Admin: e.flags&tokenAdmin != 0, Service: e.flags&tokenService != 0}, true, nil
			}
		}
	}
	c.mu.RUnlock()
	p, present, exp, err := c.keys.FromHeaderExpiry(h)
	if err != nil || !present {
		return p, present, err
	}
	e := cachedToken{hash: key, user: p.User, flags: tokenKept}
	if p.Admin {
		e.flags |= tokenAdmin
	}
	if p.Service {
		e.flags |= tokenService
	}
	if !exp.IsZero() {
		s := exp.Unix()
		if s <= 0 {
			return p, present, err
		}
		// Past 2106 the entry lapses early and the header is verified again.
		e.exp = uint32(min(s, math.MaxUint32))
	}
	c.mu.Lock()
	if c.entries == nil {
		c.entries = make([]cachedToken, c.sets*tokenWays)
	}
	set := c.set(key)
	set[victim(set, key, now)] = e
	c.mu.Unlock()
	return p, present, err
}

// victim picks the way of set that a new entry for key takes: key's own
// (a lapsed entry verified again), an empty or expired way, else the one
// whose token expires soonest.
func victim(set []cachedToken, key headerHash, now int64) int {
	for i, e := range set {
		if e.flags&tokenKept != 0 && e.hash == key {
			return i
		}
	}
	best, bestExp := 0, int64(math.MaxInt64)
	for i, e := range set {
		if e.flags&tokenKept == 0 {
			return i
		}
		exp := int64(e.exp)
		if exp == 0 {
			exp = math.MaxUint32 + 1 // no exp: kept over any token that has one
		}
		if exp <= now {
			return i
		}
		if exp < bestExp {
			best, bestExp = i, exp
		}
	}
	return best
}
