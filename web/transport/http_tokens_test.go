package transport

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/web/auth"
)

func testKeys(t *testing.T) *auth.Keys {
	t.Helper()
	keys, err := auth.NewKeys([]byte("test-secret-0123456789"))
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

func signed(t *testing.T, keys *auth.Keys, u engine.UserID, role string, ttl time.Duration) string {
	t.Helper()
	tok, err := keys.SignRole(u, role, ttl)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// kept returns the cache's entry for header h, if it holds one.
func (c *tokenCache) kept(h string) (cachedToken, bool) {
	if c.entries == nil {
		return cachedToken{}, false
	}
	key := c.hash(h)
	for _, e := range c.set(key) {
		if e.flags&tokenKept != 0 && e.hash == key {
			return e, true
		}
	}
	return cachedToken{}, false
}

func (c *tokenCache) keptCount() int {
	n := 0
	for _, e := range c.entries {
		if e.flags&tokenKept != 0 {
			n++
		}
	}
	return n
}

// TestTokenCacheAnswersAsKeys: the cache answers every header as
// auth.Keys does — good, expired, tampered, malformed, absent, every
// role — and keeps only verified tokens, never past their exp.
func TestTokenCacheAnswersAsKeys(t *testing.T) {
	keys := testKeys(t)
	c := newTokenCache(keys)
	good, forever := signed(t, keys, 3, "", time.Hour), signed(t, keys, 4, "", 0)
	admin, service := signed(t, keys, 5, auth.RoleAdmin, time.Hour), signed(t, keys, 7, auth.RoleService, time.Hour)
	expired := signed(t, keys, 6, "", -time.Hour)
	// The signature's first character changed: its last ones carry bits
	// a lenient base64 decoder ignores, so changing those may leave the
	// signature as it was.
	sig := strings.LastIndexByte(good, '.') + 1
	other := "A"
	if good[sig] == 'A' {
		other = "B"
	}
	tampered := good[:sig] + other + good[sig+1:]
	headers := []string{"", "   ", "Bearer " + good, "bearer  " + good + " ", "Bearer " + forever, "Bearer " + admin,
		"Bearer " + service, "Bearer " + expired, "Bearer " + tampered, "Basic abc", "Bearer", "Bearer a.b.c", good}
	for round := range 3 { // the first fills the cache, the next answer from it
		for _, h := range headers {
			wp, wpresent, werr := keys.FromHeader(h)
			gp, gpresent, gerr := c.fromHeader(h)
			if gp != wp || gpresent != wpresent || (gerr == nil) != (werr == nil) || gerr != nil && gerr.Error() != werr.Error() {
				t.Fatalf("round %d, %q: cache (%v %v %v), keys (%v %v %v)", round, h, gp, gpresent, gerr, wp, wpresent, werr)
			}
		}
	}
	if n := c.keptCount(); n != 5 {
		t.Fatalf("%d headers kept, want the 5 verified", n)
	}
	// A kept token whose exp has passed is verified again (and refused).
	h := "Bearer " + expired
	key := c.hash(h)
	c.set(key)[0] = cachedToken{hash: key, user: 6, exp: uint32(time.Now().Unix() - 1), flags: tokenKept}
	if _, _, err := c.fromHeader(h); err == nil {
		t.Fatal("an expired token was answered from the cache")
	}
	if e, ok := c.kept("Bearer " + good); !ok || int64(e.exp) <= time.Now().Unix() || int64(e.exp) > time.Now().Add(time.Hour).Unix() {
		t.Fatalf("kept until %d (%v)", e.exp, ok)
	}
	if e, ok := c.kept("Bearer " + forever); !ok || e.exp != 0 || e.user != 4 {
		t.Fatalf("token without exp kept as %+v (%v)", e, ok)
	}
}

// TestTokenCacheEviction: more verified tokens than the cache holds
// evict one entry at a time — the cache never holds more than its array,
// every answer is still the one auth.Keys gives, the tokens that expire
// soonest go first and a token without exp outlasts them.
func TestTokenCacheEviction(t *testing.T) {
	keys := testKeys(t)
	c := newTokenCacheSets(keys, 2) // 8 entries
	forever := "Bearer " + signed(t, keys, 1000, "", 0)
	if _, _, err := c.fromHeader(forever); err != nil {
		t.Fatal(err)
	}
	var headers []string
	for u := range 40 {
		// Later users' tokens expire later: each newcomer evicts an
		// older one.
		h := "Bearer " + signed(t, keys, engine.UserID(u+1), "", time.Hour+time.Duration(u)*time.Minute)
		headers = append(headers, h)
		p, present, err := c.fromHeader(h)
		if err != nil || !present || p.User != engine.UserID(u+1) {
			t.Fatalf("user %d: %+v %v %v", u+1, p, present, err)
		}
		if n := c.keptCount(); n > 8 {
			t.Fatalf("after %d tokens, %d kept", u+2, n)
		}
		if _, ok := c.kept(h); !ok {
			t.Fatalf("user %d's token was not kept", u+1)
		}
	}
	if _, ok := c.kept(forever); !ok {
		t.Fatal("the token without exp was evicted before tokens that expire")
	}
	if n := c.keptCount(); n != 8 {
		t.Fatalf("%d kept, want the cache full", n)
	}
	// The first tokens (soonest exp) are the ones gone: each had 30 later
	// ones after it, a few of which land in its set. Asking again
	// verifies them and answers as before.
	for i, h := range headers[:10] {
		if _, ok := c.kept(h); ok {
			t.Fatalf("user %d's token, among the soonest to expire, is still kept", i+1)
		}
	}
	for i, h := range headers {
		if p, _, err := c.fromHeader(h); err != nil || p.User != engine.UserID(i+1) {
			t.Fatalf("again, user %d: %+v %v", i+1, p, err)
		}
	}
}

// TestTokenCacheConcurrent: readers and inserters of a small cache at
// once (run with -race) get auth.Keys's answer every time.
func TestTokenCacheConcurrent(t *testing.T) {
	keys := testKeys(t)
	c := newTokenCacheSets(keys, 4)
	var headers []string
	for u := range 64 {
		headers = append(headers, "Bearer "+signed(t, keys, engine.UserID(u+1), "", time.Hour))
	}
	errs := make(chan error, 4)
	for g := range 4 {
		go func() {
			for i := range 500 {
				u := (i*7 + g*13) % len(headers)
				if p, _, err := c.fromHeader(headers[u]); err != nil || p.User != engine.UserID(u+1) {
					errs <- fmt.Errorf("user %d: %+v %v", u+1, p, err)
					return
				}
			}
			errs <- nil
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}
