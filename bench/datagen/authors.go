package datagen

import (
	"fmt"
	"math"
	"sort"

	"github.com/tally-dev/tally/engine"
)

// Authors of posts. A post's author is drawn, independently for each post, from Users users
// (ids 1..Users) with probability proportional to a per-user activity
// weight exp(AuthorSigma * Z), Z standard normal (log-normal). The weights
// are drawn once from their own stream (seed Seed ^ authorSeedMix), and the
// posts' authors from a third, so that adding authors changes neither the
// ids nor the counts of a data set, and the same AuthorConfig on the same
// posts gives the same authors.
//
// With the defaults (1M users, σ = 1.75, seed 1) and 10M posts, 729k
// users write at least one post and the busiest writes 8,980 (the largest
// of a million log-normal weights; other seeds give several thousand to
// tens of thousands): most users post a handful of times, a few post all
// day, and over a quarter of the users have no post at all — the shape that decides what per-user records cost.

// Defaults of AuthorConfig.
const (
	DefaultUsers       = 1_000_000
	DefaultAuthorSigma = 1.75
)

// authorSeedMix separates the authors' random streams from the posts'.
const authorSeedMix = 0xa07b0e5d1f3c2b49

// AuthorConfig describes how posts get their authors. Zero fields take the
// defaults above.
type AuthorConfig struct {
	Users       int
	Seed        uint64
	AuthorSigma float64
}

func (c AuthorConfig) withDefaults() AuthorConfig {
	if c.Users == 0 {
		c.Users = DefaultUsers
	}
	if c.AuthorSigma == 0 {
		c.AuthorSigma = DefaultAuthorSigma
	}
	return c
}

// Validate reports an AuthorConfig that cannot be generated.
func (c AuthorConfig) Validate() error {
	c = c.withDefaults()
	switch {
	case c.Users < 0:
		return fmt.Errorf("datagen: Users = %d is negative", c.Users)
	case c.AuthorSigma < 0 || math.IsNaN(c.AuthorSigma) || math.IsInf(c.AuthorSigma, 0):
		return fmt.Errorf("datagen: AuthorSigma = %g is not a finite non-negative number", c.AuthorSigma)
	}
	return nil
}

// Authors draws the authors of a data set's posts, one per call of Next,
// in the order the posts come. It holds one float64 per user; Next
// allocates nothing.
type Authors struct {
	cum []float64 // cumulative weights, normalised so the last is 1
	rng rng
}

// NewAuthors returns the author stream of cfg. It panics if cfg is invalid.
func NewAuthors(cfg AuthorConfig) *Authors {
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	cfg = cfg.withDefaults()
	w := rng{s: cfg.Seed ^ authorSeedMix}
	cum := make([]float64, cfg.Users)
	var sum float64
	for i := range cum {
		sum += w.lognormal(cfg.AuthorSigma)
		cum[i] = sum
	}
	for i := range cum {
		cum[i] /= sum
	}
	cum[len(cum)-1] = 1
	// The draws use a stream of their own (not the weights'), so that the
	// weights of a given Users do not depend on how many posts are drawn.
	return &Authors{cum: cum, rng: rng{s: (cfg.Seed ^ authorSeedMix) + 0x6a09e667f3bcc909}}
}

// Next returns the author of the next post: a user id in 1..Users.
func (a *Authors) Next() engine.UserID {
	u := a.rng.float()
	return engine.UserID(sort.SearchFloat64s(a.cum, u) + 1)
}
