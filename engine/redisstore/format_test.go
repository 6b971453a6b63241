package redisstore_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/redisstore"
	"github.com/tally-dev/tally/engine/redisstore/redistest"
)

// TestKeyspaceFormat: the first Open of an empty keyspace marks it with
// this build's format; a keyspace marked with another version, or holding
// keys but no marker (written before markers), is refused at Open with a
// message naming the keyspace, both versions and what to do, and is left
// as it was. Other prefixes' keys do not count.
func TestKeyspaceFormat(t *testing.T) {
	addr, _ := redistest.StartSingle(t)
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	opts := func(p string) redisstore.Options { return redisstore.Options{Addrs: []string{addr}, KeyPrefix: p} }

	// Another keyspace's keys beside an empty one.
	must(t, rdb.Set(bg, "other:{s}node", 3, 0).Err())
	fresh := prefix()
	s := open(t, opts(fresh))
	_, err := s.CreatePost(bg, 1, 0, "")
	must(t, err)
	must(t, s.Close())
	marker, err := rdb.Get(bg, fresh+"{s}format").Result()
	must(t, err)
	if marker != "4" {
		t.Fatalf("marker %q after the first Open, want 4", marker)
	}
	open(t, opts(fresh)) // its own keys and marker: opens

	for _, c := range []struct {
		name   string
		setup  func(p string) error
		found  string
		phrase []string
	}{
		{"older marker", func(p string) error { return rdb.Set(bg, p+"{s}format", 1, 0).Err() }, "format 1",
			[]string{"older development build of Tally", "start from an empty keyspace"}},
		{"likes-only marker", func(p string) error { return rdb.Set(bg, p+"{s}format", 2, 0).Err() }, "format 2",
			[]string{"older development build of Tally", "start from an empty keyspace"}},
		{"marker before the reacted bit", func(p string) error { return rdb.Set(bg, p+"{s}format", 3, 0).Err() }, "format 3",
			[]string{"older development build of Tally", "start from an empty keyspace"}},
		{"newer marker", func(p string) error { return rdb.Set(bg, p+"{s}format", 5, 0).Err() }, "format 5",
			[]string{"newer build of Tally", "run the newer build"}},
		{"keys without a marker", func(p string) error { return rdb.HSet(bg, p+"{u0}", "7", "x").Err() }, "format 0",
			[]string{"older development build of Tally"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := prefix()
			must(t, c.setup(p))
			before, err := rdb.Keys(bg, p+"*").Result()
			must(t, err)
			s, err := redisstore.Open(bg, opts(p))
			if err == nil {
				s.Close()
				t.Fatal("Open accepted a keyspace of another format")
			}
			var fe *engine.FormatError
			if !errors.As(err, &fe) || errors.Is(err, engine.ErrUnavailable) {
				t.Fatalf("Open: %v, want a format error", err)
			}
			want := append([]string{`key prefix "` + p + `"`, "(Redis keyspace " + c.found + ")",
				"this build reads Redis keyspace format 4"}, c.phrase...)
			for _, w := range want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Open's error does not say %q:\n%v", w, err)
				}
			}
			after, err := rdb.Keys(bg, p+"*").Result()
			must(t, err)
			if strings.Join(after, " ") != strings.Join(before, " ") {
				t.Errorf("Open changed the keyspace: %v, then %v", before, after)
			}
		})
	}

	p := prefix()
	must(t, rdb.Set(bg, p+"{s}format", "x", 0).Err())
	if s, err := redisstore.Open(bg, opts(p)); err == nil || !strings.Contains(err.Error(), "not a keyspace format version") {
		if s != nil {
			s.Close()
		}
		t.Fatalf("Open over a marker that is not a version: %v", err)
	}
}
