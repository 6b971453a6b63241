package transport

import (
	"testing"
	"time"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/web/auth"
)

// TestTokenCacheAnswersAsKeys: the cache answers every header as
// auth.Keys does — good, expired, tampered, malformed, absent — and keeps
// only verified tokens, never past their exp.
func TestTokenCacheAnswersAsKeys(t *testing.T) {
	keys, err := auth.NewKeys([]byte("test-secret-0123456789"))
	if err != nil {
		t.Fatal(err)
	}
	c := newTokenCache(keys)
	sign := func(u engine.UserID, admin bool, ttl time.Duration) string {
		tok, err := keys.Sign(u, admin, ttl)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	good, forever, admin := sign(3, false, time.Hour), sign(4, false, 0), sign(5, true, time.Hour)
	expired := sign(6, false, -time.Hour)
	tampered := good[:len(good)-2] + "xx"
	headers := []string{"", "   ", "Bearer " + good, "bearer  " + good + " ", "Bearer " + forever, "Bearer " + admin,
		"Bearer " + expired, "Bearer " + tampered, "Basic abc", "Bearer", "Bearer a.b.c", good}
	for round := range 3 { // the first fills the cache, the next answer from it
		for _, h := range headers {
			wp, wpresent, werr := keys.FromHeader(h)
			gp, gpresent, gerr := c.fromHeader(h)
			if gp != wp || gpresent != wpresent || (gerr == nil) != (werr == nil) || gerr != nil && gerr.Error() != werr.Error() {
				t.Fatalf("round %d, %q: cache (%v %v %v), keys (%v %v %v)", round, h, gp, gpresent, gerr, wp, wpresent, werr)
			}
		}
	}
	if len(c.m) != 4 {
		t.Fatalf("%d headers kept, want the 4 verified", len(c.m))
	}
	// A kept token whose exp has passed is verified again (and refused).
	h := "Bearer " + expired
	c.m[c.hash(h)] = verifiedToken{p: auth.Principal{User: 6}, exp: time.Now().Unix() - 1}
	if _, _, err := c.fromHeader(h); err == nil {
		t.Fatal("an expired token was answered from the cache")
	}
	if v := c.m[c.hash("Bearer "+good)]; v.exp <= time.Now().Unix() || v.exp > time.Now().Add(time.Hour).Unix() {
		t.Fatalf("kept until %d", v.exp)
	}
	if v := c.m[c.hash("Bearer "+forever)]; v.exp != 0 || v.p.User != 4 {
		t.Fatalf("token without exp kept as %+v", v)
	}
}
