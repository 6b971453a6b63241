package engine

import (
	"testing"

	"github.com/tally-dev/tally/engine/counters"
)

// TestCountsField: each of the five fields reaches its own counter, and
// a field that is not one of them reaches none.
func TestCountsField(t *testing.T) {
	var c Counts
	for i, f := range []counters.Field{counters.Likes, counters.Comments, counters.Reposts, counters.Views, counters.Favorites} {
		*c.Field(f) = int64(i + 1)
	}
	if want := (Counts{Likes: 1, Comments: 2, Reposts: 3, Views: 4, Favorites: 5}); c != want {
		t.Fatalf("Counts %+v, want %+v", c, want)
	}
	if c.Field(counters.Field(99)) != nil {
		t.Fatal("an unknown field reached a counter")
	}
}
