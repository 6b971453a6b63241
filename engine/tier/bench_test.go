package tier

import (
	"bytes"
	"io"
	"iter"
	"math/rand/v2"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/tally-dev/tally/bench/benchutil"
	"github.com/tally-dev/tally/bench/datagen"
	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/snowflake"
)

// The benchmarks measure the post table on one data set; where a figure
// needs a baseline, it is another part of the same table in the same run
// (its sealed in-memory windows), so that the ratio survives a noisy
// machine.
//
//	go test ./engine/tier -run '^$' -bench Memory -benchtime 1x
//	go test ./engine/tier -run '^$' -bench GetPage
//	TALLY_BENCH_N=10000000 go test ./engine/tier -run '^$' -bench . -benchtime 1x (memory) / -benchtime 2s (pages)
//
// Data: bench/datagen, N = TALLY_BENCH_N (default 1M), seed 1 and its
// defaults (ids uniform over the 365 days before 2025-01-01, 60% of posts
// with all-zero counts, long-tailed counts), with authors (datagen's
// AuthorConfig defaults: 1M users, log-normal activity): every post has an
// author, so every post is in the table. Day windows, the clock at the
// end of the data set: with the default policy the last 7 days are open
// tables and the rest sealed in memory.

// benchPost is a post of the data set: its author and five counts, no
// reactions beyond like (reactionData adds them).
type benchPost struct {
	id     uint64
	author uint64
	counts engine.Counts
}

var (
	dataOnce sync.Once
	data     []benchPost
)

func benchData() []benchPost {
	dataOnce.Do(func() {
		n := benchutil.N()
		g := datagen.New(datagen.Config{N: n, Seed: 1})
		a := datagen.NewAuthors(datagen.AuthorConfig{Seed: 1})
		data = make([]benchPost, 0, n)
		for {
			id, c, ok := g.Next()
			if !ok {
				break
			}
			data = append(data, benchPost{id, uint64(a.Next()), c})
		}
	})
	return data
}

func benchSeq(d []benchPost) iter.Seq2[uint64, Post] {
	return func(yield func(uint64, Post) bool) {
		for _, x := range d {
			if !yield(x.id, Post{Author: x.author, Counts: x.counts}) {
				return
			}
		}
	}
}

func benchOpts(b testing.TB, policy string) Options {
	o := Options{}
	switch policy {
	case "open":
		o.OpenAge = 10 * 365 * 24 * time.Hour
	case "sealed":
		o.OpenAge = -1
	case "default":
	case "1day": // the last day open, the rest sealed, late writes in deltas
		o.OpenAge = 24 * time.Hour
	case "cold":
		o.Dir, o.ColdAge = b.TempDir(), time.Nanosecond
	case "cold-nocache":
		o.Dir, o.ColdAge, o.ColdCacheBytes = b.TempDir(), time.Nanosecond, -1
	default:
		b.Fatalf("no policy %q", policy)
	}
	return o
}

func loadPosts(b testing.TB, opts Options, d []benchPost) *Posts {
	t, err := NewPosts(opts)
	if err != nil {
		b.Fatal(err)
	}
	if err := t.Import(benchSeq(d), datagen.DefaultEnd); err != nil {
		b.Fatal(err)
	}
	if err := t.Maintain(datagen.DefaultEnd); err != nil {
		b.Fatal(err)
	}
	return t
}

var kept []any

// BenchmarkMemory reports, per policy, the post table's bytes per post
// (every post has an author, so per post overall): the live Go heap after
// GC (heap-B/post), its own count (B/post) and, for the cold policy, the
// bytes of its files (disk-B/post). The 1day policy keeps only the last
// day open.
func BenchmarkMemory(b *testing.B) {
	d := benchData()
	for _, policy := range []string{"open", "default", "1day", "sealed", "cold"} {
		b.Run(policy, func(b *testing.B) {
			var t *Posts
			var heap uint64
			for b.Loop() {
				h0 := benchutil.LiveHeap()
				t = loadPosts(b, benchOpts(b, policy), d)
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
				b.ReportMetric(float64(t.CacheBytes())/n, "cache-B/post")
			}
			kept = []any{t}
			kept = nil
			t.Close()
		})
	}
}

type page [50]uint64

// makePages draws pages of 50 posts, each page from one day of days.
func makePages(days [][]uint64, count int, seed uint64) []page {
	rng := rand.New(rand.NewPCG(seed, 5))
	ps := make([]page, count)
	for i := range ps {
		d := days[rng.IntN(len(days))]
		for j := range ps[i] {
			ps[i][j] = d[rng.IntN(len(d))]
		}
	}
	return ps
}

func dayIDs(d []benchPost) [][]uint64 {
	var days [][]uint64
	last := int64(-1)
	for _, x := range d {
		day := snowflake.Millis(x.id) / 86_400_000
		if day != last {
			days = append(days, nil)
			last = day
		}
		days[len(days)-1] = append(days[len(days)-1], x.id)
	}
	return days
}

type pageBench struct {
	old, hot   []page
	mem        *Posts // default policy
	cold       *Posts // sealed windows in files, cache on
	coldNoCach *Posts
}

var (
	pbOnce sync.Once
	pb     *pageBench
)

func pageData(b *testing.B) *pageBench {
	pbOnce.Do(func() {
		d := benchData()
		days := dayIDs(d)
		p := &pageBench{
			old: makePages(days[:len(days)-7], 4096, 2),
			hot: makePages(days[len(days)-7:], 4096, 1),
		}
		p.mem = loadPosts(b, benchOpts(b, "default"), d)
		dir, err := os.MkdirTemp("", "tier-bench-")
		if err != nil {
			b.Fatal(err)
		}
		o := benchOpts(b, "cold")
		o.Dir, o.ColdCacheBytes = dir, 256<<20
		p.cold = loadPosts(b, o, d)
		o.ColdCacheBytes = -1
		nc, err := NewPosts(o)
		if err != nil {
			b.Fatal(err)
		}
		p.coldNoCach = nc
		if err := copyState(p.cold, nc); err != nil {
			b.Fatal(err)
		}
		pb = p
	})
	if pb == nil {
		b.Fatal("page data failed to build")
	}
	return pb
}

func copyState(from, to *Posts) error {
	r, w := newPipe()
	go func() { _, err := from.WriteTo(w); w.CloseWithError(err) }()
	return to.Load(r)
}

// BenchmarkGetPage reads 50-post pages (each page's posts from one day)
// with GetMany — authors, counts and existence — interleaved page by page
// with reads of other pages of the sealed days held in memory, the
// baseline. cpu-ns/page is the case's CPU time per page,
// sealed-cpu-ns/page the baseline's, x/sealed the ratio. sealed: the
// sealed days against four of their pages read over and over (the CPU
// work alone, in cache; in-cache-cpu-ns/page). hot: the last 7
// days (open tables); cold-hit: the sealed days in files with every block
// cached; cold-miss: no cache, every block a pread (served by the OS page
// cache).
func BenchmarkGetPage(b *testing.B) {
	p := pageData(b)
	var out, baseOut [50]Post
	var found, baseFound [50]bool
	table := func(t *Posts, pages []page) func(int) {
		return func(i int) {
			if err := t.GetMany(pages[i%len(pages)][:], out[:], found[:]); err != nil {
				b.Fatal(err)
			}
		}
	}
	baseline := func(i int) {
		pg := p.old[(i+len(p.old)/2)%len(p.old)][:]
		if err := p.mem.GetMany(pg, baseOut[:], baseFound[:]); err != nil {
			b.Fatal(err)
		}
	}
	cases := []struct {
		name  string
		t     *Posts
		pages []page
	}{
		{"hot", p.mem, p.hot},
		{"cold-hit", p.cold, p.old},
		{"cold-miss", p.coldNoCach, p.old},
	}
	// The sealed days, against the CPU work alone: the same four pages
	// over and over, in cache.
	b.Run("sealed", func(b *testing.B) {
		tn, cn := benchutil.Interleave(b, table(p.mem, p.old), table(p.mem, p.old[:4]))
		b.ReportMetric(tn, "cpu-ns/page")
		b.ReportMetric(cn, "in-cache-cpu-ns/page")
	})
	for _, c := range cases {
		if c.name == "cold-hit" {
			for i := range c.pages {
				table(c.t, c.pages)(i)
			}
		}
		b.Run(c.name, func(b *testing.B) {
			tn, sn := benchutil.Interleave(b, table(c.t, c.pages), baseline)
			b.ReportMetric(tn, "cpu-ns/page")
			b.ReportMetric(sn, "sealed-cpu-ns/page")
			b.ReportMetric(tn/sn, "x/sealed")
		})
	}
}

func newPipe() (*io.PipeReader, *io.PipeWriter) { return io.Pipe() }

// BenchmarkGetManySealed reads the sealed pages of BenchmarkGetPage from
// the table alone (for profiles).
func BenchmarkGetManySealed(b *testing.B) {
	p := pageData(b)
	var out [50]Post
	var found [50]bool
	i := 0
	for b.Loop() {
		p.mem.GetMany(p.old[i%len(p.old)][:], out[:], found[:])
		i++
	}
}

// BenchmarkLoad measures recovery: Load of the table's snapshot image
// (every sealed block checked and decoded, the checksum of the whole
// image) under the default policy. table-ms is one Load.
func BenchmarkLoad(b *testing.B) {
	d := benchData()
	t := loadPosts(b, benchOpts(b, "default"), d)
	var img bytes.Buffer
	if _, err := t.WriteTo(&img); err != nil {
		b.Fatal(err)
	}
	var tn time.Duration
	for b.Loop() {
		runtime.GC() // each Load starts with the last one's garbage collected
		t0 := time.Now()
		nt, _ := NewPosts(Options{})
		if err := nt.Load(bytes.NewReader(img.Bytes())); err != nil {
			b.Fatal(err)
		}
		tn += time.Since(t0)
		kept = []any{nt}
		kept = nil
		if nt.Len() != len(d) {
			b.Fatalf("Len %d after Load", nt.Len())
		}
	}
	b.ReportMetric(float64(tn.Nanoseconds())/float64(b.N)/1e6, "table-ms")
	b.ReportMetric(float64(img.Len())/float64(len(d)), "image-B/post")
}

// BenchmarkAddLike adds one like to a random post of a sealed day (a late
// write: it goes to the window's delta), interleaved with a like on a
// post of the open days, the baseline. The deltas grow through the run
// and are folded back by Maintain every 4096 writes. cpu-ns/write is one
// late write, open-cpu-ns/write one write to an open day.
func BenchmarkAddLike(b *testing.B) {
	p := pageData(b)
	var late, hot []uint64
	for i := range 512 {
		late = append(late, p.old[i][:]...)
		hot = append(hot, p.hot[i][:]...)
	}
	add := func(ids []uint64) func(int) {
		return func(i int) {
			if _, _, err := p.mem.AddCounts(ids[i%len(ids)], engine.Counts{Likes: 1}); err != nil {
				b.Fatal(err)
			}
			if i%4096 == 4095 {
				if err := p.mem.Maintain(datagen.DefaultEnd); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	tn, on := benchutil.Interleave(b, add(late), add(hot))
	b.ReportMetric(tn, "cpu-ns/write")
	b.ReportMetric(on, "open-cpu-ns/write")
	b.ReportMetric(tn/on, "late/open")
}
