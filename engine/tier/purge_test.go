package tier

import (
	"bytes"
	"testing"
	"time"

	"github.com/tally-dev/tally/engine/counters"
)

// TestPurge: Purge takes one user's pair of a forgotten post out of an
// open window — in place, or through the delta while a view holds the
// window — and nothing else: not a pair of a post still counted, not a
// pair of a sealed window (the rewrite Forget made due drops those). The
// set's length counts what its windows hold, and an image written after
// the purge no longer has the pair while one captured before does. The
// purged pairs are of every kind: a love, a haha, and a pair whose kind
// changed while the view was out (added and removed in the delta).
func TestPurge(t *testing.T) {
	s := newTestSet(t, Options{WindowMillis: testWindow, OpenAge: time.Hour}, 16)
	now := uint64(time.Now().UnixMilli())
	post := func(i int) uint64 { return now<<22 | uint64(i) }
	for i := range 3 {
		if _, err := s.Add(8, post(i)); err != nil {
			t.Fatal(err)
		}
		if _, err := s.React(7, post(i), counters.Kind(2+i%2)); err != nil {
			t.Fatal(err)
		}
	}
	if s.Purge(7, post(0)) {
		t.Fatal("Purge of a pair of a post still counted")
	}
	s.Forget(post(0))
	s.Forget(post(1))
	if !s.Purge(7, post(0)) || s.Purge(7, post(0)) {
		t.Fatal("Purge in place: want true once")
	}
	if s.Len() != 5 {
		t.Fatalf("Len %d after one purge of six pairs, want 5", s.Len())
	}

	// A view holds the window: the purge goes through the delta.
	v, err := s.Capture()
	if err != nil {
		t.Fatal(err)
	}
	if !s.Purge(7, post(1)) || s.Purge(7, post(1)) {
		t.Fatal("Purge under a view: want true once")
	}
	if was, err := s.React(7, post(2), counters.Like); err != nil || was != 2 {
		t.Fatalf("React over a love: was %v, %v", was, err)
	}
	s.Forget(post(2))
	if !s.Purge(7, post(2)) || s.Purge(7, post(2)) {
		t.Fatal("Purge of a pair whose kind changed under a view: want true once")
	}
	var before, after bytes.Buffer
	if _, err := v.WriteTo(&before); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(v); err != nil {
		t.Fatal(err)
	}
	if _, err := s.WriteTo(&after); err != nil {
		t.Fatal(err)
	}
	has := func(image *bytes.Buffer, user, p uint64) bool {
		loaded := newTestSet(t, Options{WindowMillis: testWindow, OpenAge: time.Hour}, 16)
		if err := loaded.Load(bytes.NewReader(image.Bytes())); err != nil {
			t.Fatal(err)
		}
		found := false
		// Range leaves forgotten posts out: look at the open table itself.
		for _, w := range loaded.wins {
			if tb, ok := w.body.(*pairTable); ok && tb.has(user, p-w.lo) {
				found = true
			}
		}
		return found
	}
	if !has(&before, 7, post(1)) {
		t.Fatal("the image captured before the purge lost the pair")
	}
	if has(&after, 7, post(1)) || has(&after, 7, post(0)) || has(&after, 7, post(2)) {
		t.Fatal("an image written after the purges holds the purged pairs")
	}
	if !has(&after, 8, post(1)) {
		t.Fatal("another user's hidden pair went too")
	}
	if s.Len() != 3 {
		t.Fatalf("Len %d, want 3", s.Len())
	}
}
