// Package datagen owns the data set every storage benchmark of Tally is
// measured on, so that figures stay comparable across changes and across
// machines. It generates, deterministically from a seed, the posts of a
// social app and their five counts (engine.Counts).
//
// It promises: the same Config yields the same posts, bit for bit, on every
// run on the same GOARCH (the random generator and every transform are
// written here, not taken from math/rand, whose streams may change between
// Go releases; only math.Log, math.Expm1 and friends may differ in the last
// bit across architectures); ids are distinct and come in increasing order;
// the generator allocates nothing per post.
//
// # The data set
//
// Post ids are Twitter-layout snowflakes (engine/snowflake): a millisecond
// timestamp uniform over the Days days before End, a node id uniform over
// the 1024 ten-bit values, and a sequence number uniform below 16. The N ids
// are a uniform sample without replacement of those (ms, node, seq) slots,
// drawn in sorted order (sequential uniform order statistics), so they are
// distinct and ascending without being sorted in memory.
//
// A fraction ZeroFraction of the posts has all five counts zero. Every other
// post has been viewed (Views >= 1) and its counts are long-tailed:
//
//	views     = 1 + floor(ViewsScale * (U^(-1/ViewsAlpha) - 1))   (Lomax / Pareto II)
//	likes     = sround(views * LikeRate * LN(1.0))
//	E         = LN(EngagementSigma)                        (shared by the next two)
//	comments  = sround(likes * CommentRate * E * LN(0.5))
//	reposts   = sround(likes * RepostRate  * E * LN(0.5))
//	favorites = sround(likes * FavoriteRate * LN(0.7))
//
// where U is uniform on (0, 1], LN(s) = exp(s*Z - s*s/2) is a log-normal
// factor of mean 1 (Z standard normal), and sround(x) = floor(x + U) rounds
// stochastically, so small expectations give mostly zeros and the means are
// kept. Views ≫ likes; comments and reposts share the factor E and are
// therefore correlated beyond what likes explain. All counts saturate at
// math.MaxInt64.
//
// With the defaults (N = 1M, seed 1), 88% of non-zero posts have fewer
// than 100 views (median 12), 55% have no like, 80% no comment; the
// largest counts are 11.7M views and 0.7M likes, and grow with N (views
// reach billions at 100M posts).
//
// # Parameters and defaults
//
//	N                 number of posts (zero and non-zero)                  required
//	Seed              seed of the random stream                            0 is a valid seed
//	End               ids' timestamps lie in [End - Days*24h, End)         2025-01-01T00:00:00Z
//	Days              length of the id time range, in days                 365
//	ZeroFraction      probability that a post has all counts zero          0.6
//	ViewsScale        Lomax scale of views                                 10
//	ViewsAlpha        Lomax tail index of views (smaller = heavier tail)    0.9
//	LikeRate          mean likes per view                                  0.04
//	CommentRate       mean comments per like                               0.25
//	RepostRate        mean reposts per like                                0.15
//	FavoriteRate      mean favorites per like                              0.1
//	EngagementSigma   log-sd of the factor comments and reposts share      0.8
//
// A zero field of Config means its default, except Seed and ZeroFraction's
// explicit zero, which is asked for with ZeroFraction < 0 (see Config).
package datagen

import (
	"fmt"
	"math"
	"time"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/snowflake"
)

// Defaults; the package doc explains each.
const (
	DefaultDays            = 365
	DefaultZeroFraction    = 0.6
	DefaultViewsScale      = 10
	DefaultViewsAlpha      = 0.9
	DefaultLikeRate        = 0.04
	DefaultCommentRate     = 0.25
	DefaultRepostRate      = 0.15
	DefaultFavoriteRate    = 0.1
	DefaultEngagementSigma = 0.8
)

// DefaultEnd is the fixed end of the id time range, so that a data set does
// not change with the day it is generated on.
var DefaultEnd = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// seqValues is the number of sequence numbers a generated id may carry: a
// node rarely makes more than a few ids in one millisecond.
const seqValues = 16

// Config describes a data set. Zero fields take the defaults listed in the
// package doc. ZeroFraction 0 means the default 0.6; ask for no zero posts
// with a negative ZeroFraction.
type Config struct {
	N               int
	Seed            uint64
	End             time.Time
	Days            int
	ZeroFraction    float64
	ViewsScale      float64
	ViewsAlpha      float64
	LikeRate        float64
	CommentRate     float64
	RepostRate      float64
	FavoriteRate    float64
	EngagementSigma float64
}

// withDefaults returns c with zero fields replaced by their defaults.
func (c Config) withDefaults() Config {
	if c.End.IsZero() {
		c.End = DefaultEnd
	}
	def := func(p *float64, d float64) {
		if *p == 0 {
			*p = d
		}
	}
	if c.Days == 0 {
		c.Days = DefaultDays
	}
	switch {
	case c.ZeroFraction == 0:
		c.ZeroFraction = DefaultZeroFraction
	case c.ZeroFraction < 0:
		c.ZeroFraction = 0
	}
	def(&c.ViewsScale, DefaultViewsScale)
	def(&c.ViewsAlpha, DefaultViewsAlpha)
	def(&c.LikeRate, DefaultLikeRate)
	def(&c.CommentRate, DefaultCommentRate)
	def(&c.RepostRate, DefaultRepostRate)
	def(&c.FavoriteRate, DefaultFavoriteRate)
	def(&c.EngagementSigma, DefaultEngagementSigma)
	return c
}

// Validate reports a Config that cannot be generated.
func (c Config) Validate() error {
	c = c.withDefaults()
	switch {
	case c.N < 0:
		return fmt.Errorf("datagen: N = %d is negative", c.N)
	case c.Days < 0:
		return fmt.Errorf("datagen: Days = %d is negative", c.Days)
	case c.End.UnixMilli()-int64(c.Days)*86_400_000 < snowflake.TwitterEpoch:
		return fmt.Errorf("datagen: the time range starts before the snowflake epoch")
	case uint64(c.N) > slots(c)/2:
		return fmt.Errorf("datagen: N = %d is more than half the %d id slots of %d days", c.N, slots(c), c.Days)
	case c.ZeroFraction > 1:
		return fmt.Errorf("datagen: ZeroFraction = %g is above 1", c.ZeroFraction)
	case c.ViewsScale < 0 || c.ViewsAlpha < 0 || c.LikeRate < 0 || c.CommentRate < 0 ||
		c.RepostRate < 0 || c.FavoriteRate < 0 || c.EngagementSigma < 0:
		return fmt.Errorf("datagen: negative distribution parameter in %+v", c)
	}
	return nil
}

// slots is the number of distinct ids the configuration can draw from.
func slots(c Config) uint64 {
	return uint64(c.Days) * 86_400_000 * (snowflake.MaxNode + 1) * seqValues
}

// Each calls fn for each of the cfg.N posts in increasing id order, zero
// posts included. It panics if cfg is invalid (see Validate): a benchmark
// with a broken data set must not report figures.
func Each(cfg Config, fn func(id uint64, c engine.Counts)) {
	g := New(cfg)
	for {
		id, c, ok := g.Next()
		if !ok {
			return
		}
		fn(id, c)
	}
}

// Generator is the pull form of Each, for code that merges the data set
// with something else.
type Generator struct {
	cfg     Config
	rng     rng
	startMs int64
	slots   uint64
	i       int
	x       float64 // current order statistic in [0, 1)
	last    uint64  // last slot drawn, +1 (0 before the first)
}

// New returns a generator at the first post of cfg. It panics if cfg is
// invalid.
func New(cfg Config) *Generator {
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	cfg = cfg.withDefaults()
	return &Generator{
		cfg:     cfg,
		rng:     rng{s: cfg.Seed},
		startMs: cfg.End.UnixMilli() - int64(cfg.Days)*86_400_000,
		slots:   slots(cfg),
	}
}

// Next returns the next post, or ok == false after the last one.
func (g *Generator) Next() (id uint64, c engine.Counts, ok bool) {
	if g.i >= g.cfg.N {
		return 0, engine.Counts{}, false
	}
	remaining := float64(g.cfg.N - g.i)
	g.i++
	// The minimum of m uniforms on (x, 1) is x + (1-x)(1 - U^(1/m)), and
	// 1 - U^(1/m) = -expm1(-E/m) with E exponential: this keeps precision
	// when m is large and the step tiny.
	g.x += (1 - g.x) * -math.Expm1(-g.rng.exp()/remaining)
	s := uint64(g.x * float64(g.slots))
	// Rounding may repeat a slot or, at the very end, reach the top; the
	// nudge keeps ids distinct and changes the distribution by nothing
	// measurable, since N is at most half the slots.
	if s < g.last {
		s = g.last
	}
	if s >= g.slots {
		s = g.slots - 1
	}
	g.last = s + 1
	per := uint64((snowflake.MaxNode + 1) * seqValues)
	ms := g.startMs + int64(s/per)
	node := s % per / seqValues
	seq := s % seqValues
	id = snowflake.Make(ms, node, seq)
	return id, g.counts(), true
}

func (g *Generator) counts() engine.Counts {
	cfg := &g.cfg
	r := &g.rng
	if r.float() < cfg.ZeroFraction {
		return engine.Counts{}
	}
	var c engine.Counts
	c.Views = 1 + toCount(cfg.ViewsScale*(math.Pow(r.open(), -1/cfg.ViewsAlpha)-1))
	likes := float64(c.Views) * cfg.LikeRate * r.lognormal(1.0)
	c.Likes = r.sround(likes)
	e := r.lognormal(cfg.EngagementSigma)
	c.Comments = r.sround(float64(c.Likes) * cfg.CommentRate * e * r.lognormal(0.5))
	c.Reposts = r.sround(float64(c.Likes) * cfg.RepostRate * e * r.lognormal(0.5))
	c.Favorites = r.sround(float64(c.Likes) * cfg.FavoriteRate * r.lognormal(0.7))
	return c
}

// toCount converts a non-negative float to a count, saturating.
func toCount(x float64) int64 {
	if !(x < math.MaxInt64) { // also catches NaN
		return math.MaxInt64
	}
	return int64(x)
}

// rng is SplitMix64 (Steele, Lea, Flood 2014): tiny, fast, passes BigCrush,
// and fixed here forever so data sets never change under us.
type rng struct{ s uint64 }

func (r *rng) next() uint64 {
	r.s += 0x9e3779b97f4a7c15
	z := r.s
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// float is uniform on [0, 1).
func (r *rng) float() float64 { return float64(r.next()>>11) * 0x1p-53 }

// open is uniform on (0, 1], so that logs and negative powers are finite.
func (r *rng) open() float64 { return float64(r.next()>>11+1) * 0x1p-53 }

// exp is exponential with mean 1.
func (r *rng) exp() float64 { return -math.Log(r.open()) }

// normal is standard normal (Box–Muller; the second value is dropped to
// keep the stream simple).
func (r *rng) normal() float64 {
	return math.Sqrt(-2*math.Log(r.open())) * math.Cos(2*math.Pi*r.float())
}

// lognormal is exp(s*Z - s²/2): mean 1, log-sd s.
func (r *rng) lognormal(s float64) float64 { return math.Exp(s*r.normal() - s*s/2) }

// sround rounds x >= 0 up with probability frac(x).
func (r *rng) sround(x float64) int64 { return toCount(math.Floor(x + r.float())) }
