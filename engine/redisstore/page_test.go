package redisstore

import (
	"testing"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/snowflake"
)

// pageKeys cuts the page's key names from one string; they must be the
// names likersKey and favsKey give, in id order, whichever are asked for,
// with ids spread over several buckets and one bucket holding several.
func TestPageKeys(t *testing.T) {
	k := newKeyspace("t:", 10, 4, 12)
	var ids []engine.PostID
	for i := range 40 {
		ids = append(ids, engine.PostID(snowflake.Make(1_700_000_000_000+int64(i%5)<<12, 1, uint64(i))))
	}
	s := &Store{k: k}
	groups, order := s.groupPosts(ids, k.post)
	if len(order) < 2 || len(order) == len(ids) {
		t.Fatalf("%d buckets for %d ids: the test wants several, some shared", len(order), len(ids))
	}
	for _, want := range [][2]bool{{true, true}, {true, false}, {false, true}, {false, false}} {
		likers, favs := pageKeys(groups, order, len(ids), want[0], want[1])
		for _, c := range []struct {
			on   bool
			got  []string
			name func(b, low string) string
		}{{want[0], likers, likersKey}, {want[1], favs, favsKey}} {
			if !c.on {
				if c.got != nil {
					t.Fatalf("%v: keys not asked for: %q", want, c.got)
				}
				continue
			}
			if len(c.got) != len(ids) {
				t.Fatalf("%v: %d keys for %d ids", want, len(c.got), len(ids))
			}
			for i, id := range ids {
				if b, low := k.post(uint64(id)); c.got[i] != c.name(b, low) {
					t.Fatalf("%v: key %d is %q, want %q", want, i, c.got[i], c.name(b, low))
				}
			}
		}
	}
}
