package follows

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"runtime/metrics"
	"slices"
	"strconv"
	"testing"
	"time"
	"unsafe"

	"github.com/tally-dev/tally/bench/benchutil"
	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/table"
	"github.com/tally-dev/tally/engine/usercounts"
)

// heapFigures forces a collection and returns the live heap and its
// scannable part (objects the GC must scan for pointers).
func heapFigures() (live, scan uint64) {
	runtime.GC()
	ms := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/gc/scan/heap:bytes"}}
	metrics.Read(ms)
	return ms[0].Value.Uint64(), ms[1].Value.Uint64()
}

// gcTime is the wall time of one forced collection: its mark phase is
// what a pointer-rich structure makes long.
func gcTime() time.Duration {
	runtime.GC()
	start := time.Now()
	runtime.GC()
	return time.Since(start)
}

// workload is a follow graph to build: follows(v, r) is viewer v's r-th
// follow (ok false when v has fewer), made in rounds across viewers as
// lists grow in a live system (so that blocks split and merge), with the
// snapshot it starts at.
type workload struct {
	viewers, rounds int
	follow          func(v uint64, r int) (target uint64, snap int64, ok bool)
}

// uniform: 1M viewers with 10..30 follows each (20 on average) of users
// spread over 10M ids, snapshot the round: the shape the figures before
// this package's packed form were measured on.
func uniform(nviewers int) workload {
	rng := rand.New(rand.NewPCG(7, 7))
	counts := make([]uint8, nviewers)
	for i := range counts {
		counts[i] = uint8(10 + rng.IntN(21))
	}
	return workload{nviewers, 30, func(v uint64, r int) (uint64, int64, bool) {
		return table.Mix64(v<<8|uint64(r)) % 10_000_000, int64(r), r < int(counts[v])
	}}
}

// skewed: 2M users; each follows 5..15 users at random (so most users
// have about ten followers) and each of 4 celebrities with probability
// 0.6 (1.2M followers each); a snapshot is the followee's post count,
// tens for most, 10^4-10^5 for the celebrities.
func skewed(nviewers int) workload {
	const celebs = 4
	rng := rand.New(rand.NewPCG(8, 8))
	counts := make([]uint8, nviewers)
	for i := range counts {
		counts[i] = uint8(5 + rng.IntN(11))
	}
	posts := func(u uint64) int64 {
		if u < celebs {
			return 20_000 + int64(u)*30_000
		}
		return int64(table.Mix64(u) % 90)
	}
	return workload{nviewers, 15 + celebs, func(v uint64, r int) (uint64, int64, bool) {
		if r < celebs {
			u := uint64(r)
			return u, posts(u), table.Mix64(v<<8|uint64(r))%10 < 6
		}
		u := celebs + table.Mix64(v<<8|uint64(r))%uint64(nviewers)
		return u, posts(u), r-celebs < int(counts[v])
	}}
}

// BenchmarkMemory builds each workload through Follow and reports heap
// bytes per follow edge, both directions counted (heapB/edge; memB/edge
// is the store's own count, fwdB/edge and revB/edge its two halves), the
// scannable heap and the time of a forced GC with the store resident;
// then loads a second store from the first's Range, as a snapshot load
// does, and reports its heap per edge and the load's time (loaded*), and
// the same into a store whose reverse direction is cold (cold*: both
// directions counted, the file's size apart). Run with -benchtime=1x.
//
//	go test -run '^$' -bench Memory -benchtime 1x ./engine/follows
func BenchmarkMemory(b *testing.B) {
	n := 1_000_000
	if testing.Short() {
		n = 100_000
	}
	for _, c := range []struct {
		name string
		w    workload
	}{{"uniform", uniform(n)}, {"skewed", skewed(2 * n)}} {
		b.Run(c.name, func(b *testing.B) {
			base, baseScan := heapFigures()
			s := New()
			edges := 0
			start := time.Now()
			for r := range c.w.rounds {
				for v := range uint64(c.w.viewers) {
					if u, snap, ok := c.w.follow(v, r); ok && s.Follow(v, u, snap) {
						edges++
					}
				}
			}
			build := time.Since(start)
			live, scan := heapFigures()
			gc := gcTime()
			if s.Len() != edges {
				b.Fatalf("Len %d, want %d", s.Len(), edges)
			}
			per := func(x int) float64 { return float64(x) / float64(edges) }
			b.ReportMetric(float64(edges), "edges")
			b.ReportMetric(per(int(live-base)), "heapB/edge")
			b.ReportMetric(per(s.MemoryBytes()), "memB/edge")
			b.ReportMetric(per(s.fwd.memoryBytes()), "fwdB/edge")
			b.ReportMetric(per(s.rev.memoryBytes()), "revB/edge")
			// Where the bytes go, both directions: the blocks' own bytes,
			// their slots' unused room, free slots, the arenas' growth
			// room and the directories.
			var f figures
			f.add(&s.fwd)
			f.add(&s.rev)
			b.ReportMetric(per(f.data), "dataB/edge")
			b.ReportMetric(per(f.slot), "slotB/edge")
			b.ReportMetric(per(f.free), "freeB/edge")
			b.ReportMetric(per(f.growth), "growB/edge")
			b.ReportMetric(per(f.dir), "dirB/edge")
			b.ReportMetric(float64(2*edges)/float64(f.blocks), "pairs/block")
			b.ReportMetric(float64(int64(scan)-int64(baseScan))/(1<<20), "scanMiB")
			b.ReportMetric(float64(gc.Microseconds())/1000, "gc-ms")
			b.ReportMetric(float64(build.Nanoseconds())/float64(edges), "ns/follow")

			// Loaded into a store of each kind, as a snapshot load does:
			// the reverse direction built in memory, or written to a cold
			// file with its directory in memory.
			for _, kind := range []struct {
				name string
				make func() *Store
			}{{"loaded", New}, {"cold", func() *Store { return NewCold(b.TempDir()) }}} {
				before, _ := heapFigures()
				start = time.Now()
				l := kind.make()
				loadFrom(b, l, s)
				load := time.Since(start)
				after, _ := heapFigures()
				b.ReportMetric(per(int(after-before)), kind.name+"HeapB/edge")
				b.ReportMetric(per(l.MemoryBytes()), kind.name+"MemB/edge")
				b.ReportMetric(float64(load.Milliseconds()), kind.name+"Load-ms")
				if l.cold != nil {
					b.ReportMetric(per(int(l.cold.file.size)), "coldFileB/edge")
					// The most the overlay holds: changes up to the merge
					// bound, half unfollows, half new follows.
					rng := rand.New(rand.NewPCG(1, 1))
					var ts []uint64
					for changes := 0; changes < max(coldMergeMin, l.cold.file.n/32)-1; changes++ {
						v := rng.Uint64N(uint64(c.w.viewers))
						if ts = l.Followees(v, ts[:0]); changes%2 == 0 && len(ts) > 0 {
							l.Unfollow(v, ts[rng.IntN(len(ts))])
						} else {
							l.Follow(v, rng.Uint64N(10_000_000), 0)
						}
					}
					full, _ := heapFigures()
					b.ReportMetric(float64(full-before)/float64(l.Len()), "coldFullHeapB/edge")
				}
				runtime.KeepAlive(l)
				if err := l.Close(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// figures is where a set's bytes go (BenchmarkMemory).
type figures struct{ data, slot, free, growth, dir, blocks int }

func (f *figures) add(p *pairs) {
	for _, pg := range p.pages {
		for _, d := range pg.es[:pg.n] {
			var blk block
			p.parse(&d, &blk)
			n := len(trimBits(&blk))
			f.data += n
			f.slot += classCap(d.class())*8 - n
			f.blocks++
		}
	}
	f.free += p.arena.garbage * 8
	f.growth += p.arena.capBytes() - p.arena.used*8
	f.dir += len(p.pages)*int(unsafe.Sizeof([pageMax]dirEntry{})) + cap(p.pages)*int(unsafe.Sizeof(page{}))
}

// feedFixture is 1M users' post counts in the engine's table and nview
// viewers following k of them each.
func feedFixture(nview, k int) (*Store, *usercounts.Table) {
	const nusers = 1_000_000
	posts := usercounts.New(nusers)
	for u := range uint64(nusers) {
		posts.Set(u, int64(u%1000))
	}
	posts.Compact()
	rng := rand.New(rand.NewPCG(3, 3))
	s := New()
	for v := range uint64(nview) {
		for s.Following(v) < k {
			s.Follow(v, rng.Uint64N(nusers), int64(rng.IntN(1000)))
		}
	}
	return s, posts
}

// BenchmarkFeedRead is state.unread's feed part for a viewer following k
// users: the list, one batched post-count lookup (usercounts.GetMany) and
// the sum, in buffers kept across reads as a server's would be pooled.
// Viewers are read in turn so that their lists are not all in cache.
//
//	go test -run '^$' -bench FeedRead ./engine/follows
func BenchmarkFeedRead(b *testing.B) {
	for _, k := range []int{20, 200, 2000} {
		nview := 400_000 / k
		s, posts := feedFixture(nview, k)
		b.Run("followees="+strconv.Itoa(k), func(b *testing.B) {
			var ts []uint64
			var ss, cur []int64
			var sink int64
			v := uint64(0)
			loopCPU(b, func() {
				ts, ss = s.List(v, ts[:0], ss[:0])
				cur = append(cur[:0], make([]int64, len(ts))...)
				posts.GetMany(ts, cur)
				sink += engine.FeedUnread(cur, ss)
				v = (v + 1) % uint64(nview)
			})
			runtime.KeepAlive(sink)
		})
	}
}

// loopCPU runs fn in a b.Loop on a locked thread and reports the thread's
// CPU time per call (cpu-ns/op), which leaves out the waits for a core
// that the shared machine adds to the wall time.
func loopCPU(b *testing.B, fn func()) {
	benchutil.LockThread()
	defer benchutil.UnlockThread()
	cpu := benchutil.ThreadCPU()
	for b.Loop() {
		fn()
	}
	b.ReportMetric(float64(benchutil.ThreadCPU()-cpu)/float64(b.N), "cpu-ns/op")
}

// postsNow is a followee's post count at a feed read: counts spread
// over a thousand, each growing by one every 8 reads.
func postsNow(u uint64, round int64) int64 { return int64(u%1000) + round/8 }

// BenchmarkList measures the per-follow costs on one list of n entries:
// Contains (half hits, half misses, as prepare checks), Unfollow then
// Follow of a member (two block changes each way), and SetSnaps with
// changed snapshots (post counts that grow between reads) and unchanged
// ones.
func BenchmarkList(b *testing.B) {
	for _, n := range []int{20, 200, 2000, 20000} {
		rng := rand.New(rand.NewPCG(5, uint64(n)))
		s := New()
		var members []uint64
		for range n {
			u := rng.Uint64()
			s.Follow(1, u, 0)
			members = append(members, u)
		}
		probes := make([]uint64, 1024)
		for i := range probes {
			if i%2 == 0 {
				probes[i] = members[rng.IntN(n)]
			} else {
				probes[i] = rng.Uint64()
			}
		}
		name := func(s string) string { return s + "/n=" + strconv.Itoa(n) }
		b.Run(name("Contains"), func(b *testing.B) {
			i, hits := 0, 0
			loopCPU(b, func() {
				if s.Contains(1, probes[i&1023]) {
					hits++
				}
				i++
			})
			runtime.KeepAlive(hits)
		})
		b.Run(name("UnfollowFollow"), func(b *testing.B) {
			i := 0
			loopCPU(b, func() {
				u := probes[i&1022] // a member
				s.Unfollow(1, u)
				s.Follow(1, u, 0)
				i++
			})
		})
		b.Run(name("SetSnaps"), func(b *testing.B) {
			round := int64(0)
			set := func(us []uint64, snaps []int64) {
				for i, u := range us {
					snaps[i] = postsNow(u, round)
				}
			}
			loopCPU(b, func() {
				s.SetSnaps(1, set)
				round++
			})
		})
		b.Run(name("SetSnapsUnchanged"), func(b *testing.B) {
			loopCPU(b, func() { s.SetSnaps(1, func([]uint64, []int64) {}) })
		})
	}
}

// BenchmarkFreeze loads the uniform workload's 20M edges, then reports
// what a snapshot's view of them costs: the freeze (under the caller's
// lock), a Range of the view (which copies each slot before decoding it)
// against one of the store, the heap held for 100,000 changes made while
// the view is out (follows, unfollows and feed reads, each touching a
// block), per change, against the heap they leave once thawed, and the
// thaw.
//
//	go test -run '^$' -bench Freeze -benchtime 1x ./engine/follows
func BenchmarkFreeze(b *testing.B) {
	n := 1_000_000
	if testing.Short() {
		n = 100_000
	}
	w := uniform(n)
	s := New()
	var ts []uint64
	var ss []int64
	for v := range uint64(w.viewers) {
		ts, ss = ts[:0], ss[:0]
		for r := range w.rounds {
			if u, snap, ok := w.follow(v, r); ok && !slices.Contains(ts, u) {
				ts, ss = append(ts, u), append(ss, snap)
			}
		}
		if err := s.Load(v, ts, ss); err != nil {
			b.Fatal(err)
		}
	}
	s.Loaded()
	ranged := func(st *Store) time.Duration {
		start := time.Now()
		edges := 0
		st.Range(func(_ uint64, ts []uint64, _ []int64) bool {
			edges += len(ts)
			return true
		})
		if edges != s.Len() {
			b.Fatalf("Range yielded %d edges of %d", edges, s.Len())
		}
		return time.Since(start)
	}
	const changes = 100_000
	rng := rand.New(rand.NewPCG(9, 9))
	for b.Loop() {
		before, _ := heapFigures()
		start := time.Now()
		view := s.Freeze()
		freeze := time.Since(start)
		viewRange, liveRange := ranged(view), ranged(s)
		for i := range changes {
			v := rng.Uint64N(uint64(n))
			switch i % 3 {
			case 0:
				s.Follow(v, rng.Uint64N(10_000_000), int64(i))
			case 1:
				if fs := s.Followees(v, ts[:0]); len(fs) > 0 {
					s.Unfollow(v, fs[rng.IntN(len(fs))])
				}
			default:
				s.SetSnaps(v, func(_ []uint64, snaps []int64) {
					for k := range snaps {
						snaps[k] += 3
					}
				})
			}
		}
		held, _ := heapFigures()
		runtime.KeepAlive(view)
		start = time.Now()
		s.Thaw()
		thaw := time.Since(start)
		view = nil
		after, _ := heapFigures()
		b.ReportMetric(float64(s.Len()), "edges")
		b.ReportMetric(float64(freeze.Microseconds()), "freeze-us")
		b.ReportMetric(float64(len(s.fwd.pages)), "pages")
		b.ReportMetric(float64(viewRange.Milliseconds()), "viewRange-ms")
		b.ReportMetric(float64(liveRange.Milliseconds()), "storeRange-ms")
		b.ReportMetric(float64(int64(held)-int64(before))/changes, "frozenHeapB/change")
		b.ReportMetric(float64(int64(after)-int64(before))/changes, "thawedHeapB/change")
		b.ReportMetric(float64(thaw.Microseconds()), "thaw-us")
		b.ReportMetric(float64(s.MemoryBytes())/float64(s.Len()), "memB/edge")
	}
}

// BenchmarkColdFollowers compares a store whose reverse direction is in
// memory with one whose reverse direction is cold, both loaded from the
// same forward lists (200,000 viewers following 20 users each, and one
// user followed by all): a member's Unfollow then Follow (each way: the
// cold store's reverse change goes to its overlay), a page of 1,000 of
// the star's followers from a random place (an erasure's read), and the
// feed read of a viewer's list (the forward direction only, the same in
// both).
//
//	go test -run '^$' -bench ColdFollowers ./engine/follows
func BenchmarkColdFollowers(b *testing.B) {
	const nview, k, star = 200_000, 20, 1 << 40
	src := New()
	rng := rand.New(rand.NewPCG(4, 4))
	for v := range uint64(nview) {
		src.Follow(v, star, 0)
		for src.Following(v) < k {
			src.Follow(v, rng.Uint64N(10_000_000), int64(rng.IntN(1000)))
		}
	}
	for _, kind := range []struct {
		name string
		make func() *Store
	}{{"cold", func() *Store { return NewCold(b.TempDir()) }}, {"memory", New}} {
		s := kind.make()
		loadFrom(b, s, src)
		b.Run(kind.name+"/UnfollowFollow", func(b *testing.B) {
			var ts []uint64
			v := uint64(0)
			loopCPU(b, func() {
				ts = s.Followees(v, ts[:0])
				u := ts[int(v)%len(ts)]
				s.Unfollow(v, u)
				s.Follow(v, u, 0)
				v = (v + 7919) % nview
			})
		})
		b.Run(kind.name+"/Followers1000", func(b *testing.B) {
			var fs []uint64
			loopCPU(b, func() {
				var err error
				if fs, err = s.Followers(star, rng.Uint64N(nview-1000), 1000, fs[:0]); err != nil || len(fs) != 1000 {
					b.Fatalf("%d followers, %v", len(fs), err)
				}
			})
		})
		b.Run(kind.name+"/FeedList", func(b *testing.B) {
			var ts []uint64
			var ss []int64
			v := uint64(0)
			loopCPU(b, func() {
				ts, ss = s.List(v, ts[:0], ss[:0])
				v = (v + 7919) % nview
			})
		})
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkColdScrub is the pass after an erasure of a user followed by
// 1,000 (or 30,000) of 200,000 viewers (who follow 15 users each, 3.0M
// edges) and
// following 20, with 40,000 other changes in the overlay: the scrub,
// which rewrites the blocks that held the user,
// against the merge that rewrote the whole file before it, each from the
// same state, in turns. Reported: each pass's wall time (plan, Run,
// Finish and Collect, as the maintenance loop runs them), the ratio, the
// part under the write lock (all but Run) and the bytes it wrote.
//
//	go test -run '^$' -bench ColdScrub -benchtime 5x ./engine/follows
func BenchmarkColdScrub(b *testing.B) {
	const nview, k, star = 200_000, 15, 1 << 40
	src := New()
	rng := rand.New(rand.NewPCG(6, 6))
	for v := range uint64(nview) {
		for src.Following(v) < k {
			src.Follow(v, rng.Uint64N(10_000_000), int64(rng.IntN(1000)))
		}
	}
	s := NewCold(b.TempDir())
	defer s.Close()
	loadFrom(b, s, src)
	for _, fans := range []uint64{1000, 30_000} {
		b.Run(fmt.Sprintf("fans=%d", fans), func(b *testing.B) {
			b.StopTimer()
			c := s.cold
			// erased puts the star's edges in the file (a merge, not timed), then
			// erases the star, as an erasure ends.
			erased := func() {
				for f := range fans {
					s.Follow(f*(nview/fans), star, 0)
				}
				for u := range uint64(20) {
					s.Follow(star, u*(nview/20), 0)
				}
				c.file.dead = c.file.size // a merge, whatever the overlay's size
				if _, err := pass(s); err != nil {
					b.Fatal(err)
				}
				// Other changes since: 20,000 unfollows and as many follows, the
				// overlay under half its bound.
				var ts []uint64
				for range 20_000 {
					v := rng.Uint64N(nview)
					ts = s.Followees(v, ts[:0])
					s.Unfollow(v, ts[rng.IntN(len(ts))])
					s.Follow(v, rng.Uint64N(10_000_000), 0)
				}
				if !s.RemoveUser(star, 2*int(fans), func(uint64, uint64) {}) {
					b.Fatal("the star is not erased")
				}
				s.Scrub(star)
			}
			// timed runs the pass and returns its time, the part of it under the
			// write lock (plan, Finish, Collect) and the bytes it wrote.
			mt := s.Maintainer()
			timed := func(merge bool) (took, locked time.Duration, written int64) {
				erased()
				if merge {
					c.file.dead = c.file.size
				}
				size := c.file.size
				b.StartTimer()
				start := time.Now()
				job := mt.PlanWork(time.Time{})[0]
				planned := time.Now()
				err := job.Run()
				ran := time.Now()
				err = errors.Join(err, job.Finish(), mt.Collect(nil))
				took = time.Since(start)
				b.StopTimer()
				if _, scrub := job.(*scrubJob); err != nil || scrub == merge {
					b.Fatalf("%v: %v", job.What(), err)
				}
				if written = c.file.size; !merge {
					written -= size
				}
				return took, took - ran.Sub(planned), written
			}
			var scrubT, mergeT, scrubL, mergeL time.Duration
			var scrubB, mergeB int64
			for range b.N {
				t, l, n := timed(false)
				scrubT, scrubL, scrubB = scrubT+t, scrubL+l, scrubB+n
				t, l, n = timed(true)
				mergeT, mergeL, mergeB = mergeT+t, mergeL+l, mergeB+n
			}
			per := func(x int64) float64 { return float64(x) / float64(b.N) }
			b.ReportMetric(per(scrubT.Microseconds())/1000, "scrub-ms")
			b.ReportMetric(per(mergeT.Microseconds())/1000, "merge-ms")
			b.ReportMetric(float64(mergeT)/float64(scrubT), "merge/scrub")
			b.ReportMetric(per(scrubL.Microseconds()), "scrubLocked-us")
			b.ReportMetric(per(mergeL.Microseconds()), "mergeLocked-us")
			b.ReportMetric(per(scrubB), "scrubB")
			b.ReportMetric(per(mergeB), "mergeB")
			b.ReportMetric(float64(s.Len()), "edges")
		})
	}
}
