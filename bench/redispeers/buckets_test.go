package redispeers

import (
	"strings"
	"testing"

	"github.com/tally-dev/tally/engine"
)

func TestBucketValuesRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		authors bool
		author  engine.UserID
		counts  engine.Counts
		want    string
	}{
		{false, 0, engine.Counts{Likes: 3, Views: 40}, "3,0,0,40"},
		{false, 0, engine.Counts{Favorites: 1}, "0,0,0,0,1"},
		{true, 77, engine.Counts{}, "77"},
		{true, 77, engine.Counts{Likes: 1, Comments: 2, Reposts: 3, Views: 4, Favorites: 5}, "77,1,2,3,4,5"},
		{true, 9, engine.Counts{Comments: 8}, "9,0,8"},
	} {
		b := Buckets{N: 7, Authors: tc.authors}
		v := b.Value(tc.author, tc.counts)
		if v != tc.want {
			t.Errorf("Value(%d, %+v) = %q; want %q", tc.author, tc.counts, v, tc.want)
		}
		a, c, err := b.Parse(v)
		if err != nil || c != tc.counts || (tc.authors && a != tc.author) {
			t.Errorf("Parse(%q) = %d, %+v, %v; want %d, %+v", v, a, c, err, tc.author, tc.counts)
		}
	}
}

func TestBucketValuesRejectWhatIsNeverWritten(t *testing.T) {
	for v, want := range map[string]string{
		"1,2,3,4,5,6": "at most 5",
		"1,x":         `count "x"`,
		"1,-2":        `count "-2"`,
		"1,0":         "trailing zero",
	} {
		if _, _, err := (Buckets{N: 1}).Parse(v); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q): %v; want an error saying %q", v, err, want)
		}
	}
	for v, want := range map[string]string{"": "not a user id", "0,1": "not a user id", "5,1,2,3,4,5,6": "at most 5"} {
		if _, _, err := (Buckets{N: 1, Authors: true}).Parse(v); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q) with authors: %v; want an error saying %q", v, err, want)
		}
	}
}

func TestBucketKeysSpreadSparseIds(t *testing.T) {
	b := NewBuckets(5000, false)
	if b.N != 10 {
		t.Fatalf("5000 posts in %d buckets; want 10", b.N)
	}
	seen := map[string]int{}
	for id := uint64(1 << 40); id < 1<<40+5000*4099; id += 4099 { // sparse, like snowflake ids
		seen[b.Key(id)]++
	}
	if len(seen) != 10 {
		t.Errorf("ids spread over %d buckets; want 10", len(seen))
	}
	// Snowflake ids as bench/datagen makes them (a 10-bit node, a
	// sequence below 16): 20,000 buckets of 10M posts all fill, none past
	// the listpack limit.
	b = NewBuckets(10_000_000, true)
	sizes := map[string]int{}
	for i := range uint64(10_000_000) {
		id := (1700000000000+i*3)<<22 | (i*7919%1024)<<12 | i%16
		sizes[b.Key(id)]++
	}
	largest := 0
	for _, n := range sizes {
		largest = max(largest, n)
	}
	if len(sizes) != 20000 || largest > 700 {
		t.Errorf("10M snowflake ids fill %d of 20000 buckets, the largest with %d posts; want all, none past 700", len(sizes), largest)
	}
	if NewBuckets(0, true).N != 1 || UserKey(1999) != "u:1" || Field(42) != "42" {
		t.Errorf("NewBuckets(0).N %d, UserKey(1999) %q, Field(42) %q", NewBuckets(0, true).N, UserKey(1999), Field(42))
	}
}
