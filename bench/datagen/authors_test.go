package datagen

import "testing"

// TestAuthorsShape checks the properties the package doc promises of the
// authors: deterministic, within 1..Users, long-tailed (a few users write
// far more than the mean, many write nothing), and independent of the
// posts' own stream.
func TestAuthorsShape(t *testing.T) {
	const users, posts = 10_000, 100_000
	cfg := AuthorConfig{Users: users, Seed: 3}
	a, b := NewAuthors(cfg), NewAuthors(cfg)
	per := make([]int, users+1)
	for range posts {
		u := a.Next()
		if v := b.Next(); v != u {
			t.Fatalf("same config gave authors %d and %d", u, v)
		}
		if u < 1 || u > users {
			t.Fatalf("author %d outside 1..%d", u, users)
		}
		per[u]++
	}
	distinct, busiest := 0, 0
	for _, n := range per[1:] {
		if n > 0 {
			distinct++
		}
		busiest = max(busiest, n)
	}
	// 10 posts per user on average, as in the 10M-post set over 1M users:
	// about 73% of users post, the busiest writes hundreds of times the mean.
	if distinct < users*65/100 || distinct > users*80/100 {
		t.Errorf("%d of %d users wrote a post; want 65–80%%", distinct, users)
	}
	if busiest < 100*posts/users {
		t.Errorf("busiest user wrote %d posts; want a long tail (at least %d)", busiest, 100*posts/users)
	}
	c := NewAuthors(AuthorConfig{Users: users, Seed: 4})
	same := 0
	a2 := NewAuthors(cfg)
	for range 1000 {
		if c.Next() == a2.Next() {
			same++
		}
	}
	if same > 100 {
		t.Errorf("seeds 3 and 4 agree on %d of 1000 authors", same)
	}
}

func TestAuthorsValidate(t *testing.T) {
	for _, c := range []AuthorConfig{{Users: -1}, {AuthorSigma: -1}} {
		if c.Validate() == nil {
			t.Errorf("%+v accepted", c)
		}
	}
	if err := (AuthorConfig{}).Validate(); err != nil {
		t.Errorf("defaults rejected: %v", err)
	}
	if u := NewAuthors(AuthorConfig{Users: 1}).Next(); u != 1 {
		t.Errorf("the only user of 1 is %d", u)
	}
}
