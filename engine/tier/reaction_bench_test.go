package tier

import (
	"iter"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/tally-dev/tally/bench/benchutil"
	"github.com/tally-dev/tally/bench/datagen"
	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/counters"
	"github.com/tally-dev/tally/engine/snowflake"
)

// Reactions' benchmarks, on the data of the post table's and the set's
// (bench_test.go, set_bench_test.go), with reaction kinds:
//
//	go test ./engine/tier -run '^$' -bench 'MemoryKinds' -benchtime 1x
//	go test ./engine/tier -run '^$' -bench 'SetMemory' -benchtime 1x
//	go test ./engine/tier -run '^$' -bench 'ReactionPage|LikePage'
//	go test ./engine/tier -run '^$' -bench 'ReactionWrite'
//
// A post's likers (set_bench_test.go's benchLikers: as many as datagen's
// Likes count for it) react with a kind drawn from the deployment's mix
// by a hash of the post and the user: most like, a few choose another
// kind, the rarer the later it is listed (reactionMix). A post's counts
// are then its likers' kinds counted.

// benchKinds are the kinds of a deployment of n kinds: the six
// (Facebook's), then more up to counters.MaxKinds.
func benchKinds(n int) []string {
	all := []string{"like", "love", "haha", "wow", "sad", "angry", "care", "clap", "fire", "eyes", "rocket", "tada", "thinking", "pray", "hundred", "party"}
	return all[:n]
}

// reactionMix returns the cumulative shares of kinds 1..kinds: for six,
// like 82%, love 10%, haha 4%, wow 2%, sad and angry 1% each; for more,
// like 80% and the others sharing 20% in proportion to 1/position.
func reactionMix(kinds int) []float64 {
	if kinds == 6 {
		return []float64{0.82, 0.92, 0.96, 0.98, 0.99, 1}
	}
	mix := []float64{1}
	if kinds == 1 {
		return mix
	}
	mix[0] = 0.8
	var h float64
	for j := 1; j < kinds; j++ {
		h += 1 / float64(j)
	}
	for j := 1; j < kinds; j++ {
		mix = append(mix, mix[j-1]+0.2/float64(j)/h)
	}
	mix[kinds-1] = 1
	return mix
}

// pairKind is the kind user reacts to post i (its index in the data set)
// with under mix.
func pairKind(mix []float64, i, user uint64) counters.Kind {
	x := (i*0x9E3779B97F4A7C15 ^ user) + 0x9E3779B97F4A7C15 // splitmix64
	x = (x ^ x>>30) * 0xBF58476D1CE4E5B9
	x = (x ^ x>>27) * 0x94D049BB133111EB
	x ^= x >> 31
	f := float64(x>>11) / (1 << 53)
	for k, c := range mix {
		if f < c {
			return counters.Kind(k + 1)
		}
	}
	return counters.Kind(len(mix))
}

// benchReactions yields benchLikes' pairs with their kinds under the mix
// of kinds kinds.
func benchReactions(n, kinds int) iter.Seq[Reaction] {
	mix := reactionMix(kinds)
	return func(yield func(Reaction) bool) {
		g := datagen.New(datagen.Config{N: n, Seed: 1})
		var users []uint64
		for i := 0; ; i++ {
			id, c, ok := g.Next()
			if !ok {
				return
			}
			if c.Likes <= 0 {
				continue
			}
			users = benchLikers(users[:0], uint64(i), int(min(c.Likes, setBenchUsers)))
			for _, u := range users {
				if !yield(Reaction{User: u, Post: id, Kind: pairKind(mix, uint64(i), u)}) {
					return
				}
			}
		}
	}
}

// mixedPost is a post of the data set whose reactions include kinds
// beyond like: its index in benchData and its counts by kind.
type mixedPost struct {
	i     int
	likes int64
	other counters.Reactions
}

var mixed struct {
	sync.Mutex
	byKinds map[int][]mixedPost
}

// mixedPosts returns the posts of benchData with reactions beyond like
// under the mix of kinds kinds, in data order.
func mixedPosts(kinds int) []mixedPost {
	mixed.Lock()
	defer mixed.Unlock()
	if m, ok := mixed.byKinds[kinds]; ok {
		return m
	}
	d, mix := benchData(), reactionMix(kinds)
	var out []mixedPost
	var users []uint64
	for i, x := range d {
		if x.counts.Likes <= 0 || kinds == 1 {
			continue
		}
		users = benchLikers(users[:0], uint64(i), int(min(x.counts.Likes, setBenchUsers)))
		m := mixedPost{i: i}
		for _, u := range users {
			if k := pairKind(mix, uint64(i), u); k == counters.Like {
				m.likes++
			} else {
				m.other.Add(k, 1)
			}
		}
		if !m.other.IsZero() {
			out = append(out, m)
		}
	}
	if mixed.byKinds == nil {
		mixed.byKinds = map[int][]mixedPost{}
	}
	mixed.byKinds[kinds] = out
	return out
}

// reactionSeq yields the posts of d with the reactions of m (mixedPosts
// of d) in place of their likes.
func reactionSeq(d []benchPost, m []mixedPost) iter.Seq2[uint64, Post] {
	return func(yield func(uint64, Post) bool) {
		j := 0
		for i, x := range d {
			p := Post{Author: x.author, Counts: x.counts}
			if j < len(m) && m[j].i == i {
				p.Counts.Likes, p.Reactions = m[j].likes, m[j].other
				j++
			}
			if !yield(x.id, p) {
				return
			}
		}
	}
}

// loadKindPosts builds a post table of kinds kinds under opts from the
// data set, its reactions under the mix when mix is set, likes alone
// otherwise.
func loadKindPosts(b testing.TB, opts Options, kinds int, mix bool) *Posts {
	t, err := NewPosts(opts)
	if err != nil {
		b.Fatal(err)
	}
	if err := t.SetKinds(benchKinds(kinds)); err != nil {
		b.Fatal(err)
	}
	d := benchData()
	seq := benchSeq(d)
	if mix {
		seq = reactionSeq(d, mixedPosts(kinds))
	}
	if err := t.Import(seq, datagen.DefaultEnd); err != nil {
		b.Fatal(err)
	}
	if err := t.Maintain(datagen.DefaultEnd); err != nil {
		b.Fatal(err)
	}
	return t
}

// BenchmarkMemoryKinds is BenchmarkMemory with reaction kinds: like alone
// (kinds=1, BenchmarkMemory's table), six kinds configured and no
// reaction but likes (kinds=6), and six kinds with the mix
// (kinds=6-mix), per policy.
func BenchmarkMemoryKinds(b *testing.B) {
	d := benchData()
	for _, policy := range []string{"open", "default", "sealed", "cold"} {
		for _, v := range []struct {
			name  string
			kinds int
			mix   bool
		}{{"kinds=1", 1, false}, {"kinds=6", 6, false}, {"kinds=6-mix", 6, true}} {
			b.Run(policy+"/"+v.name, func(b *testing.B) {
				var t *Posts
				var heap uint64
				if v.mix {
					mixedPosts(v.kinds) // built before the heap is measured
				}
				for b.Loop() {
					if t != nil {
						t.Close()
					}
					t = nil
					h0 := benchutil.LiveHeap()
					t = loadKindPosts(b, benchOpts(b, policy), v.kinds, v.mix)
					heap = benchutil.LiveHeap() - h0
				}
				n := float64(t.Len())
				if t.Len() != len(d) {
					b.Fatalf("Len %d, %d posts", t.Len(), len(d))
				}
				b.ReportMetric(float64(heap)/n, "heap-B/post")
				b.ReportMetric(float64(t.MemoryBytes())/n, "B/post")
				if disk := t.DiskBytes(); disk > 0 {
					b.ReportMetric(float64(disk)/n, "disk-B/post")
				}
				if v.mix {
					b.ReportMetric(float64(len(mixedPosts(v.kinds)))/n, "mixed-posts/post")
				}
				t.Close()
			})
		}
	}
}

// A page of the page benchmarks: 50 posts of one day (their indexes in
// the data set, and ids), and a viewer who reacted to one of them (even
// pages) or a random user (odd ones).
type reactionPage struct {
	ids    [50]uint64
	viewer uint64
}

// reactionPages draws count pages from the days of d: the last 7 when
// hot, the ones before otherwise.
func reactionPages(d []benchPost, hot bool, count int, seed uint64) []reactionPage {
	var starts []int // the first index of each day, then len(d)
	last := int64(-1)
	for i, x := range d {
		if day := snowflake.Millis(x.id) / 86_400_000; day != last {
			starts = append(starts, i)
			last = day
		}
	}
	days := len(starts)
	starts = append(starts, len(d))
	fromDay, toDay := 0, days-7
	if hot {
		fromDay, toDay = days-7, days
	}
	rng := rand.New(rand.NewPCG(seed, 3))
	ps := make([]reactionPage, count)
	var users []uint64
	for p := range ps {
		day := fromDay + rng.IntN(toDay-fromDay)
		lo, hi := starts[day], starts[day+1]
		liked := -1
		for j := range ps[p].ids {
			i := lo + rng.IntN(hi-lo)
			ps[p].ids[j] = d[i].id
			if d[i].counts.Likes > 0 {
				liked = i
			}
		}
		ps[p].viewer = 1 + rng.Uint64N(setBenchUsers)
		if p%2 == 0 && liked >= 0 {
			users = benchLikers(users[:0], uint64(liked), int(min(d[liked].counts.Likes, setBenchUsers)))
			ps[p].viewer = users[rng.IntN(len(users))]
		}
	}
	return ps
}

// reactionTables are the tables the page and write benchmarks read: a
// post table and a like set (likes alone), a post table and a reaction
// set of six kinds under the mix; the default policy.
type reactionTables struct {
	likePosts, kindPosts *Posts
	likes, reactions     *Set
	old, hot             []reactionPage
}

var (
	rtOnce sync.Once
	rt     *reactionTables
)

func reactionData(b *testing.B) *reactionTables {
	rtOnce.Do(func() {
		n := benchutil.N()
		d := benchData()
		r := &reactionTables{
			likePosts: loadKindPosts(b, benchOpts(b, "default"), 1, false),
			kindPosts: loadKindPosts(b, benchOpts(b, "default"), 6, true),
			likes:     loadBenchSet(b, "default", n, 1),
			reactions: loadBenchSet(b, "default", n, 6),
			old:       reactionPages(d, false, 4096, 2),
			hot:       reactionPages(d, true, 4096, 1),
		}
		rt = r
	})
	if rt == nil {
		b.Fatal("the tables failed to build")
	}
	return rt
}

// BenchmarkReactionPage reads 50-post pages (each page's posts from one
// day, of the sealed days or of the last 7, open) two ways, interleaved
// page by page: a page with reactions (GetMany of the six-kind post
// table, every post's counts and its reactions, and the viewer's kind per
// post, KindsOf of the reaction set) and the page with counts and like
// flags alone (GetMany of the likes-only post table and HasMany of the
// like set), the baseline. cpu-ns/page is the reaction page's CPU time,
// likes-cpu-ns/page the baseline's, x/likes their ratio.
func BenchmarkReactionPage(b *testing.B) {
	r := reactionData(b)
	var out, likeOut [50]Post
	var found, likeFound, liked [50]bool
	var kinds [50]counters.Kind
	for _, c := range []struct {
		name  string
		pages []reactionPage
	}{{"sealed", r.old}, {"hot", r.hot}} {
		b.Run(c.name, func(b *testing.B) {
			withKinds := func(i int) {
				pg := &c.pages[i%len(c.pages)]
				if err := r.kindPosts.GetMany(pg.ids[:], out[:], found[:]); err != nil {
					b.Fatal(err)
				}
				if err := r.reactions.KindsOf(pg.viewer, pg.ids[:], kinds[:]); err != nil {
					b.Fatal(err)
				}
			}
			likesAlone := func(i int) {
				pg := &c.pages[i%len(c.pages)]
				if err := r.likePosts.GetMany(pg.ids[:], likeOut[:], likeFound[:]); err != nil {
					b.Fatal(err)
				}
				if err := r.likes.HasMany(pg.viewer, pg.ids[:], liked[:]); err != nil {
					b.Fatal(err)
				}
			}
			kn, ln := benchutil.Interleave(b, withKinds, likesAlone)
			b.ReportMetric(kn, "cpu-ns/page")
			b.ReportMetric(ln, "likes-cpu-ns/page")
			b.ReportMetric(kn/ln, "x/likes")
		})
	}
}

// BenchmarkLikePage is BenchmarkReactionPage's baseline alone: the page
// with counts and like flags (ns/op a page), to compare across builds.
func BenchmarkLikePage(b *testing.B) {
	r := reactionData(b)
	var out [50]Post
	var found, liked [50]bool
	for _, c := range []struct {
		name  string
		pages []reactionPage
	}{{"sealed", r.old}, {"hot", r.hot}} {
		b.Run(c.name, func(b *testing.B) {
			i := 0
			for b.Loop() {
				pg := &c.pages[i%len(c.pages)]
				if err := r.likePosts.GetMany(pg.ids[:], out[:], found[:]); err != nil {
					b.Fatal(err)
				}
				if err := r.likes.HasMany(pg.viewer, pg.ids[:], liked[:]); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}

// BenchmarkReactionWrite compares a switch of reaction kind with a like,
// each a set write and its count under one lock as the engine does them,
// interleaved: a like is Set.Add of a new user and Posts.AddCounts of one
// like; a switch is Set.React of a pair that has a kind to another and
// Posts.AddReaction on its old kind and its new one. Posts of the sealed days (late writes:
// both go to deltas, folded back by Maintain every 4096 writes of each
// kind) and of the open days. switch-cpu-ns/op and like-cpu-ns/op are one write's
// CPU, switch/like their ratio.
func BenchmarkReactionWrite(b *testing.B) {
	r := reactionData(b)
	n := benchutil.N()
	// Pairs of the pages' posts that have a kind, by day group.
	var old, hot []Reaction
	in := map[uint64]int{}
	for _, pg := range r.old[:256] {
		for _, id := range pg.ids {
			in[id] = 1
		}
	}
	for _, pg := range r.hot[:256] {
		for _, id := range pg.ids {
			in[id] = 2
		}
	}
	for q := range benchReactions(n, 6) {
		switch in[q.Post] {
		case 1:
			old = append(old, q)
		case 2:
			hot = append(hot, q)
		}
	}
	for _, c := range []struct {
		name  string
		pairs []Reaction
	}{{"sealed", old}, {"hot", hot}} {
		b.Run(c.name, func(b *testing.B) {
			pairs := c.pairs
			if len(pairs) == 0 {
				b.Skip("no reactions on the pages")
			}
			newUser := uint64(setBenchUsers + 1)
			// Each write folds the deltas every 4096 of its own, the two
			// half a period apart: each pays half the folds of the deltas
			// both leave.
			maintain := func(i int) {
				if i%4096 == 4095 {
					if err := r.kindPosts.Maintain(datagen.DefaultEnd); err != nil {
						b.Fatal(err)
					}
					if err := r.reactions.Maintain(datagen.DefaultEnd); err != nil {
						b.Fatal(err)
					}
				}
			}
			like := func(i int) {
				q := &pairs[(i*7919)%len(pairs)]
				newUser++
				if _, err := r.reactions.Add(newUser, q.Post); err != nil {
					b.Fatal(err)
				}
				if _, _, err := r.kindPosts.AddCounts(q.Post, engine.Counts{Likes: 1}); err != nil {
					b.Fatal(err)
				}
				maintain(i + 2048)
			}
			switchKind := func(i int) {
				q := &pairs[i%len(pairs)]
				to := q.Kind%6 + 1
				was, err := r.reactions.React(q.User, q.Post, to)
				if err != nil {
					b.Fatal(err)
				}
				if _, _, err := moveReaction(r.kindPosts, q.Post, was, to); err != nil {
					b.Fatal(err)
				}
				q.Kind = to
				maintain(i)
			}
			sn, ln := benchutil.Interleave(b, switchKind, like)
			b.ReportMetric(sn, "switch-cpu-ns/op")
			b.ReportMetric(ln, "like-cpu-ns/op")
			b.ReportMetric(sn/ln, "switch/like")
		})
	}
}
