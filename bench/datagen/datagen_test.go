package datagen

import (
	"hash/crc64"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/snowflake"
)

// digest folds a whole data set into one number.
func digest(cfg Config) uint64 {
	tab := crc64.MakeTable(crc64.ECMA)
	var h uint64
	var b [48]byte
	Each(cfg, func(id uint64, c engine.Counts) {
		put := func(o int, v uint64) {
			for i := range 8 {
				b[o+i] = byte(v >> (8 * i))
			}
		}
		put(0, id)
		put(8, uint64(c.Likes))
		put(16, uint64(c.Comments))
		put(24, uint64(c.Reposts))
		put(32, uint64(c.Views))
		put(40, uint64(c.Favorites))
		h = crc64.Update(h, tab, b[:])
	})
	return h
}

func TestDeterministic(t *testing.T) {
	a := digest(Config{N: 20000, Seed: 7})
	if b := digest(Config{N: 20000, Seed: 7}); a != b {
		t.Fatalf("same seed gave different data: %x vs %x", a, b)
	}
	if b := digest(Config{N: 20000, Seed: 8}); a == b {
		t.Fatalf("different seeds gave the same data")
	}
	if b := digest(Config{N: 20000, Seed: 7, End: DefaultEnd.Add(time.Hour)}); a == b {
		t.Fatalf("a different End gave the same data")
	}
}

func TestIDs(t *testing.T) {
	cfg := Config{N: 200000, Seed: 1}
	lo := DefaultEnd.Add(-365 * 24 * time.Hour)
	var prev uint64
	n := 0
	var nodes [snowflake.MaxNode + 1]int
	var seqs [16]int
	var firstHalf int
	mid := DefaultEnd.Add(-365 * 12 * time.Hour)
	Each(cfg, func(id uint64, c engine.Counts) {
		if n > 0 && id <= prev {
			t.Fatalf("ids not strictly increasing: %d after %d", id, prev)
		}
		prev = id
		n++
		ts := snowflake.Time(id)
		if ts.Before(lo) || !ts.Before(DefaultEnd) {
			t.Fatalf("id %d has time %v outside [%v, %v)", id, ts, lo, DefaultEnd)
		}
		if ts.Before(mid) {
			firstHalf++
		}
		seq := id & (1<<snowflake.SeqBits - 1)
		if seq >= 16 {
			t.Fatalf("id %d has sequence %d >= 16", id, seq)
		}
		seqs[seq]++
		nodes[id>>snowflake.SeqBits&snowflake.MaxNode]++
	})
	if n != cfg.N {
		t.Fatalf("got %d posts, want %d", n, cfg.N)
	}
	// Uniform time: half the posts in each half year, within 5 sigma.
	if d := math.Abs(float64(firstHalf) - float64(n)/2); d > 5*math.Sqrt(float64(n)/4) {
		t.Errorf("first half of the year has %d of %d posts", firstHalf, n)
	}
	// Uniform nodes and sequences: chi-square far below what a skewed
	// draw gives (mean = degrees of freedom, sd = sqrt(2 dof)).
	chi := func(counts []int) float64 {
		exp := float64(n) / float64(len(counts))
		s := 0.0
		for _, c := range counts {
			s += (float64(c) - exp) * (float64(c) - exp) / exp
		}
		return s
	}
	if x, dof := chi(nodes[:]), float64(len(nodes)-1); x > dof+6*math.Sqrt(2*dof) {
		t.Errorf("node ids not uniform: chi2 = %.0f for %v dof", x, dof)
	}
	if x, dof := chi(seqs[:]), float64(len(seqs)-1); x > dof+6*math.Sqrt(2*dof) {
		t.Errorf("sequence numbers not uniform: chi2 = %.0f for %v dof (%v)", x, dof, seqs)
	}
}

func TestDistribution(t *testing.T) {
	cfg := Config{N: 300000, Seed: 3}
	var zeros int
	var likes, views, comments, reposts []int64
	Each(cfg, func(id uint64, c engine.Counts) {
		if c.IsZero() {
			zeros++
			return
		}
		if c.Views < 1 || c.Likes < 0 || c.Comments < 0 || c.Reposts < 0 || c.Favorites < 0 {
			t.Fatalf("post %d has impossible counts %+v", id, c)
		}
		likes = append(likes, c.Likes)
		views = append(views, c.Views)
		comments = append(comments, c.Comments)
		reposts = append(reposts, c.Reposts)
	})
	if f := float64(zeros) / float64(cfg.N); math.Abs(f-0.6) > 0.01 {
		t.Errorf("zero fraction %.4f, want 0.6 ± 0.01", f)
	}
	var sumL, sumV float64
	for i := range likes {
		sumL += float64(likes[i])
		sumV += float64(views[i])
	}
	if sumV < 10*sumL {
		t.Errorf("views (%.0f) not ≫ likes (%.0f)", sumV, sumL)
	}
	sortedL := slices.Sorted(slices.Values(likes))
	sortedV := slices.Sorted(slices.Values(views))
	if med := sortedL[len(sortedL)/2]; med > 5 {
		t.Errorf("median likes %d, want small", med)
	}
	if med := sortedV[len(sortedV)/2]; med > 100 {
		t.Errorf("median views %d, want under 100", med)
	}
	under100 := 0
	for _, v := range views {
		if v < 100 {
			under100++
		}
	}
	if f := float64(under100) / float64(len(views)); f < 0.8 {
		t.Errorf("only %.2f of views under 100", f)
	}
	if mx := sortedV[len(sortedV)-1]; mx < 1_000_000 {
		t.Errorf("max views %d, want a long tail into the millions", mx)
	}
	if mx := sortedL[len(sortedL)-1]; mx < 10_000 {
		t.Errorf("max likes %d, want a long tail", mx)
	}
	// Comments and reposts share a factor beyond likes: per like, they
	// must still be clearly correlated (a model where both only follow
	// likes gives about 0 here).
	var xs, ys []float64
	for i := range comments {
		if likes[i] >= 50 {
			l := math.Log(float64(likes[i]))
			xs = append(xs, math.Log1p(float64(comments[i]))-l)
			ys = append(ys, math.Log1p(float64(reposts[i]))-l)
		}
	}
	if r := corr(xs, ys); r < 0.4 {
		t.Errorf("corr(log comments/like, log reposts/like) = %.2f over %d posts, want ≥ 0.4", r, len(xs))
	} else {
		t.Logf("corr(log comments/like, log reposts/like) = %.2f over %d posts", r, len(xs))
	}
}

func corr(x, y []float64) float64 {
	n := float64(len(x))
	var mx, my float64
	for i := range x {
		mx += x[i]
		my += y[i]
	}
	mx /= n
	my /= n
	var sxy, sxx, syy float64
	for i := range x {
		sxy += (x[i] - mx) * (y[i] - my)
		sxx += (x[i] - mx) * (x[i] - mx)
		syy += (y[i] - my) * (y[i] - my)
	}
	return sxy / math.Sqrt(sxx*syy)
}

func TestZeroFractionParam(t *testing.T) {
	for _, tc := range []struct {
		in, want float64
	}{{-1, 0}, {1, 1}, {0.3, 0.3}} {
		zeros := 0
		Each(Config{N: 50000, Seed: 5, ZeroFraction: tc.in}, func(_ uint64, c engine.Counts) {
			if c.IsZero() {
				zeros++
			}
		})
		if f := float64(zeros) / 50000; math.Abs(f-tc.want) > 0.015 {
			t.Errorf("ZeroFraction %g: got %.3f zero posts, want %.3f", tc.in, f, tc.want)
		}
	}
}

func TestValidate(t *testing.T) {
	for _, cfg := range []Config{
		{N: -1},
		{N: 10, Days: 20000},
		{N: 10, ZeroFraction: 1.5},
		{N: 10, LikeRate: -1},
		{N: 10, Days: 1e6},
	} {
		if cfg.Validate() == nil {
			t.Errorf("Validate(%+v) = nil, want an error", cfg)
		}
	}
	if err := (Config{N: 10}).Validate(); err != nil {
		t.Errorf("default config invalid: %v", err)
	}
}

func BenchmarkGenerate(b *testing.B) {
	g := New(Config{N: math.MaxInt32, Seed: 1})
	b.ResetTimer()
	for b.Loop() {
		if _, _, ok := g.Next(); !ok {
			b.Fatal("ran out")
		}
	}
}
