package sealed

import (
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"testing"

	"github.com/tally-dev/tally/bench/benchutil"
	"github.com/tally-dev/tally/bench/datagen"
	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/snowflake"
)

// The benchmarks measure sealed windows:
//
//	go test ./engine/sealed -run '^$' -bench . -benchtime 1x   # memory, encodings
//	go test ./engine/sealed -run '^$' -bench GetPage           # page reads
//
// Data: bench/datagen with N = benchN, seed 1 and its defaults (issue 4's
// generator), split into one window per UTC day as the engine partitions.
// Page reads also report cpu-ns/page, the CPU time of the benchmark's
// thread: on a machine shared with other work, wall time includes waits
// for a core.

type dataset struct {
	all     []uint64 // every post id, zero posts included
	posts   []post   // the non-zero posts
	windows []*Window
	day0    int64
}

func day(id uint64) int64 { return snowflake.Millis(id) / 86_400_000 }

var (
	dsOnce sync.Once
	ds     *dataset
)

func benchData(b testing.TB) *dataset {
	dsOnce.Do(func() {
		d := &dataset{}
		datagen.Each(datagen.Config{N: benchN, Seed: 1}, func(id uint64, c engine.Counts) {
			d.all = append(d.all, id)
			if !c.IsZero() {
				d.posts = append(d.posts, post{id, c})
			}
		})
		d.day0 = day(d.all[0])
		d.windows = buildWindows(b, d.posts, Options{})
		ds = d
	})
	return ds
}

// buildWindows seals posts into one window per day; windows[i] is day
// day0+i (nil for a day without posts).
func buildWindows(b testing.TB, posts []post, opts Options) []*Window {
	var ws []*Window
	day0 := day(posts[0].id)
	for start := 0; start < len(posts); {
		end := start
		for end < len(posts) && day(posts[end].id) == day(posts[start].id) {
			end++
		}
		for int64(len(ws)) < day(posts[start].id)-day0 {
			ws = append(ws, nil)
		}
		ws = append(ws, build(b, posts[start:end], opts))
		start = end
	}
	return ws
}

func heapAlloc() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// BenchmarkMemory reports bytes per stored (non-zero) post and per post
// overall (zeros included) for the data set sealed into day windows,
// from the windows' own sizes and from the Go heap after GC.
func BenchmarkMemory(b *testing.B) {
	d := benchData(b)
	var sealedBytes int
	var sealedHeap uint64
	for b.Loop() {
		h0 := heapAlloc()
		ws := buildWindows(b, d.posts, Options{})
		sealedHeap = heapAlloc() - h0
		sealedBytes = 0
		for _, w := range ws {
			if w != nil {
				sealedBytes += w.SizeBytes()
			}
		}
		runtime.KeepAlive(ws)
	}
	nz, all := float64(len(d.posts)), float64(len(d.all))
	b.ReportMetric(float64(sealedBytes)/nz, "sealed-B/post")
	b.ReportMetric(float64(sealedBytes)/all, "sealed-B/post-all")
	b.ReportMetric(float64(sealedHeap)/nz, "sealed-heap-B/post")
}

// pages are 50-post pages: each from one day window (a feed page's posts
// are recent), ids drawn from all of that day's posts, zero posts
// included, in random order.
type pages struct {
	ids  [][50]uint64
	wins []*Window
}

func makePages(d *dataset, n int, seed uint64) pages {
	rng := rand.New(rand.NewPCG(seed, 4))
	p := pages{ids: make([][50]uint64, n), wins: make([]*Window, n)}
	for i := range n {
		w := d.windows[rng.IntN(len(d.windows))]
		for w == nil {
			w = d.windows[rng.IntN(len(d.windows))]
		}
		lo, _ := slices.BinarySearch(d.all, w.Index().MinID())
		hi, _ := slices.BinarySearch(d.all, w.Index().MaxID()+1)
		for j := range 50 {
			p.ids[i][j] = d.all[lo+rng.IntN(hi-lo)]
		}
		p.wins[i] = w
	}
	return p
}

func BenchmarkGetPage(b *testing.B) {
	d := benchData(b)
	const n = 4096
	pg := makePages(d, n, 3)
	var out [50]engine.Counts
	b.Run("sealed", func(b *testing.B) {
		pageLoop(b, func(i int) { pg.wins[i%n].GetMany(pg.ids[i%n][:], out[:]) })
	})
	b.Run("prefetch-vs-not", func(b *testing.B) {
		with, without := benchutil.Interleave(b,
			func(i int) { p := i % n; pg.wins[p].GetMany(pg.ids[p][:], out[:]) },
			func(i int) {
				p := (i + n/2) % n
				prefetch = false
				pg.wins[p].GetMany(pg.ids[p][:], out[:])
				prefetch = true
			})
		b.ReportMetric(with, "prefetch-cpu-ns/page")
		b.ReportMetric(without, "plain-cpu-ns/page")
		b.ReportMetric(with/without, "prefetch/plain")
	})
}

// BenchmarkBlockSize compares block sizes on bytes per post and page
// reads: the reason for DefaultBlockPosts.
func BenchmarkBlockSize(b *testing.B) {
	d := benchData(b)
	for _, per := range []int{64, 128, 256} {
		ws := buildWindows(b, d.posts, Options{BlockPosts: per})
		dd := *d
		dd.windows = ws
		pg := makePages(&dd, 4096, 5)
		size := 0
		for _, w := range ws {
			if w != nil {
				size += w.SizeBytes()
			}
		}
		var out [50]engine.Counts
		b.Run(itoa(per), func(b *testing.B) {
			pageLoop(b, func(i int) { pg.wins[i%4096].GetMany(pg.ids[i%4096][:], out[:]) })
			b.ReportMetric(float64(size)/float64(len(d.posts)), "B/post")
		})
	}
}

func itoa(n int) string {
	s := ""
	for ; n > 0; n /= 10 {
		s = string(rune('0'+n%10)) + s
	}
	return s
}

// pageLoop calls page(i) for i = 0, 1, ... and reports, beside the wall
// ns/op (one op is one page), the CPU ns per page of the benchmark's
// thread.
func pageLoop(b *testing.B, page func(i int)) {
	lockThread()
	defer unlockThread()
	c0 := threadCPU()
	i := 0
	for b.Loop() {
		page(i)
		i++
	}
	b.ReportMetric(float64((threadCPU()-c0).Nanoseconds())/float64(b.N), "cpu-ns/page")
}
