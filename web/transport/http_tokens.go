package transport

import (
	"hash/maphash"
	"sync"
	"time"

	"github.com/tally-dev/tally/web/auth"
)

// tokenCache remembers Authorization headers that verified, so a client's
// next request with the same token skips the HMAC, the base64 and the
// JSON of the claims (a seventh of a plan-served page's CPU). A header is
// known by a 128-bit keyed hash of all its bytes (two maphash seeds, made
// for this process, so a client can neither predict nor aim at another
// header's key), so a different signature or claim is a miss; only
// successes are kept, and only until the token's exp: a verified token
// stays valid until then (Tally has no revocation and the secret does not
// change while the process runs), and past exp the header goes to
// auth.Keys again, which decides with its leeway. An entry is the hash,
// the principal and exp, with no pointers: the header itself is not kept,
// so the cache costs a few dozen bytes a token and nothing to the GC. The
// map is bounded by emptying it when full: a miss costs one verification.
type tokenCache struct {
	keys  *auth.Keys
	seeds [2]maphash.Seed
	mu    sync.RWMutex
	m     map[headerHash]verifiedToken
}

type headerHash [2]uint64

type verifiedToken struct {
	p   auth.Principal
	exp int64 // Unix seconds; 0: the token has no exp
}

const maxCachedTokens = 10000

func newTokenCache(keys *auth.Keys) *tokenCache {
	return &tokenCache{keys: keys, seeds: [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}, m: map[headerHash]verifiedToken{}}
}

func (c *tokenCache) hash(h string) headerHash {
	return headerHash{maphash.String(c.seeds[0], h), maphash.String(c.seeds[1], h)}
}

// fromHeader is keys.FromHeader, remembered.
func (c *tokenCache) fromHeader(h string) (auth.Principal, bool, error) {
	if h == "" {
		return c.keys.FromHeader(h)
	}
	key := c.hash(h)
	c.mu.RLock()
	v, ok := c.m[key]
	c.mu.RUnlock()
	if ok && (v.exp == 0 || time.Now().Unix() < v.exp) {
		return v.p, true, nil
	}
	p, present, err := c.keys.FromHeader(h)
	if err != nil || !present {
		return p, present, err
	}
	var exp int64 // tokenExpiry (ws.go) reads exp as auth.Keys verified it
	if t := tokenExpiry(h); !t.IsZero() {
		if exp = t.Unix(); exp <= 0 {
			return p, present, err
		}
	}
	c.mu.Lock()
	if len(c.m) >= maxCachedTokens {
		clear(c.m)
	}
	c.m[key] = verifiedToken{p: p, exp: exp}
	c.mu.Unlock()
	return p, present, err
}
