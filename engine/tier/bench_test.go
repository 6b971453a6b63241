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
	"github.com/tally-dev/tally/engine/counters"
	"github.com/tally-dev/tally/engine/postcounts"
	"github.com/tally-dev/tally/engine/registry"
	"github.com/tally-dev/tally/engine/snowflake"
)

// The benchmarks measure the post table against today's peers on the same
// data, in the same run: engine/postcounts (the counts) and
// engine/registry (the authors) together, as the engine keeps them.
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

type benchPost struct {
	id uint64
	p  Post
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
			data = append(data, benchPost{id, Post{Author: uint64(a.Next()), Counts: c}})
		}
	})
	return data
}

func benchSeq(d []benchPost) iter.Seq2[uint64, Post] {
	return func(yield func(uint64, Post) bool) {
		for _, x := range d {
			if !yield(x.id, x.p) {
				return
			}
		}
	}
}

func countsSeq(d []benchPost) iter.Seq2[uint64, engine.Counts] {
	return func(yield func(uint64, engine.Counts) bool) {
		for _, x := range d {
			if !yield(x.id, x.p.Counts) {
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

// peerOpts maps a policy to the peers' options.
func peerOpts(b testing.TB, policy string) (postcounts.Options, registry.Options) {
	po := postcounts.Options{Now: func() time.Time { return datagen.DefaultEnd }}
	var ro registry.Options
	switch policy {
	case "open":
		po.OpenAge, ro.OpenAge = 10*365*24*time.Hour, 10*365*24*time.Hour
	case "sealed":
		po.OpenAge, ro.OpenAge = -1, -1
	case "cold":
		po.Dir, po.ColdAge = b.TempDir(), time.Nanosecond
		ro.Dir, ro.ColdAge = b.TempDir(), time.Nanosecond
	}
	return po, ro
}

type peers struct {
	counts *postcounts.Store
	reg    *registry.Registry
}

func loadPeers(b testing.TB, policy string, d []benchPost) peers {
	po, ro := peerOpts(b, policy)
	s, err := postcounts.New(po)
	if err != nil {
		b.Fatal(err)
	}
	if err := s.Import(countsSeq(d)); err != nil {
		b.Fatal(err)
	}
	if err := s.Maintain(datagen.DefaultEnd); err != nil {
		b.Fatal(err)
	}
	r, err := registry.New(ro)
	if err != nil {
		b.Fatal(err)
	}
	for _, x := range d {
		if _, err := r.Put(x.id, x.p.Author); err != nil {
			b.Fatal(err)
		}
	}
	if err := r.Maintain(datagen.DefaultEnd); err != nil {
		b.Fatal(err)
	}
	return peers{s, r}
}

func (p peers) close() { p.counts.Close(); p.reg.Close() }

var kept []any

// BenchmarkMemory reports, per policy, the post table's bytes per post
// (every post has an author, so per post overall): the live Go heap after
// GC (heap-B/post), its own count (B/post) and, for the cold policy, the
// bytes of its files (disk-B/post); and the same heap figure for the
// peers, postcounts and registry holding the same posts, measured in the
// same sub-benchmark, with the ratio. The 1day policy keeps only the last
// day open (the peers keep their default, 7 days).
func BenchmarkMemory(b *testing.B) {
	d := benchData()
	for _, policy := range []string{"open", "default", "1day", "sealed", "cold"} {
		b.Run(policy, func(b *testing.B) {
			var t *Posts
			var p peers
			var heap, peerHeap uint64
			for b.Loop() {
				h0 := benchutil.LiveHeap()
				t = loadPosts(b, benchOpts(b, policy), d)
				h1 := benchutil.LiveHeap()
				p = loadPeers(b, policy, d)
				h2 := benchutil.LiveHeap()
				heap, peerHeap = h1-h0, h2-h1
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
				peerDisk := p.counts.Stats().ColdFileBytes + p.reg.Stats().ColdFileBytes
				b.ReportMetric(float64(peerDisk)/n, "peers-disk-B/post")
			}
			b.ReportMetric(float64(peerHeap)/n, "peers-heap-B/post")
			b.ReportMetric(float64(heap)/float64(peerHeap), "heap/peers")
			kept = []any{t, p}
			kept = nil
			t.Close()
			p.close()
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
	peers      peers  // default policy
	coldPeers  peers
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
		p.peers = loadPeers(b, "default", d)
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
		p.coldPeers = loadPeers(b, "cold", d)
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
// with the peers' reads of the same information on other pages of the
// same set: postcounts.GetMany for the counts and registry.GetMany for
// the authors and existence. cpu-ns/page is the table's CPU time per
// page, peers-cpu-ns/page the peers', table/peers the ratio. sealed: days
// before the last 7 (sealed in memory); hot: the last 7 days (open
// tables); cold-hit: the sealed days in files with every block cached;
// cold-miss: no cache, every block a pread (served by the OS page cache).
func BenchmarkGetPage(b *testing.B) {
	p := pageData(b)
	var out [50]Post
	var found [50]bool
	var counts [50]engine.Counts
	var authors [50]uint64
	var rfound [50]bool
	table := func(t *Posts, pages []page) func(int) {
		return func(i int) {
			if err := t.GetMany(pages[i%len(pages)][:], out[:], found[:]); err != nil {
				b.Fatal(err)
			}
		}
	}
	peer := func(ps peers, pages []page) func(int) {
		return func(i int) {
			pg := pages[(i+len(pages)/2)%len(pages)][:]
			ps.counts.GetMany(pg, counts[:])
			if err := ps.reg.GetMany(pg, authors[:], rfound[:]); err != nil {
				b.Fatal(err)
			}
		}
	}
	cases := []struct {
		name  string
		t     *Posts
		peers peers
		pages []page
	}{
		{"sealed", p.mem, p.peers, p.old},
		{"hot", p.mem, p.peers, p.hot},
		{"cold-hit", p.cold, p.coldPeers, p.old},
		{"cold-miss", p.coldNoCach, p.coldPeers, p.old},
	}
	// Against the counts alone (postcounts.GetMany, no authors).
	b.Run("sealed-vs-counts", func(b *testing.B) {
		tn, pn := benchutil.Interleave(b, table(p.mem, p.old), func(i int) {
			p.peers.counts.GetMany(p.old[(i+len(p.old)/2)%len(p.old)][:], counts[:])
		})
		b.ReportMetric(tn, "cpu-ns/page")
		b.ReportMetric(pn, "counts-cpu-ns/page")
		b.ReportMetric(tn/pn, "table/counts")
	})
	// The CPU work alone: the same four pages over and over, in cache.
	b.Run("sealed-in-cache-vs-counts", func(b *testing.B) {
		tn, pn := benchutil.Interleave(b, table(p.mem, p.old[:4]), func(i int) {
			p.peers.counts.GetMany(p.old[i%4][:], counts[:])
		})
		b.ReportMetric(tn, "cpu-ns/page")
		b.ReportMetric(pn, "counts-cpu-ns/page")
		b.ReportMetric(tn/pn, "table/counts")
	})
	for _, c := range cases {
		if c.name == "cold-hit" {
			for i := range c.pages {
				table(c.t, c.pages)(i)
				peer(c.peers, c.pages)(i)
			}
		}
		b.Run(c.name, func(b *testing.B) {
			tn, pn := benchutil.Interleave(b, table(c.t, c.pages), peer(c.peers, c.pages))
			b.ReportMetric(tn, "cpu-ns/page")
			b.ReportMetric(pn, "peers-cpu-ns/page")
			b.ReportMetric(tn/pn, "table/peers")
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
// image) under the default policy, interleaved with the peers' Loads of
// theirs (postcounts and registry) holding the same posts. ns/op is one
// table Load and one peers' Load.
func BenchmarkLoad(b *testing.B) {
	d := benchData()
	t := loadPosts(b, benchOpts(b, "default"), d)
	ps := loadPeers(b, "default", d)
	var img, pcImg, rgImg bytes.Buffer
	if _, err := t.WriteTo(&img); err != nil {
		b.Fatal(err)
	}
	if _, err := ps.counts.WriteTo(&pcImg); err != nil {
		b.Fatal(err)
	}
	if _, err := ps.reg.WriteTo(&rgImg); err != nil {
		b.Fatal(err)
	}
	var tn, pn time.Duration
	for b.Loop() {
		runtime.GC() // each side starts with the other's garbage collected
		t0 := time.Now()
		nt, _ := NewPosts(Options{})
		if err := nt.Load(bytes.NewReader(img.Bytes())); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		kept = []any{nt}
		runtime.GC()
		t1g := time.Now()
		pc, _ := postcounts.New(postcounts.Options{Now: func() time.Time { return datagen.DefaultEnd }})
		if err := pc.Load(bytes.NewReader(pcImg.Bytes()), ""); err != nil {
			b.Fatal(err)
		}
		rg, _ := registry.New(registry.Options{})
		if err := rg.Load(bytes.NewReader(rgImg.Bytes()), datagen.DefaultEnd); err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		tn, pn = tn+t1.Sub(t0), pn+t2.Sub(t1g)
		kept = nil
		if nt.Len() != len(d) {
			b.Fatalf("Len %d after Load", nt.Len())
		}
	}
	b.ReportMetric(float64(tn.Nanoseconds())/float64(b.N)/1e6, "table-ms")
	b.ReportMetric(float64(pn.Nanoseconds())/float64(b.N)/1e6, "peers-ms")
	b.ReportMetric(float64(tn)/float64(pn), "table/peers")
	b.ReportMetric(float64(img.Len())/float64(len(d)), "image-B/post")
	b.ReportMetric(float64(pcImg.Len()+rgImg.Len())/float64(len(d)), "peers-image-B/post")
}

// BenchmarkAddLike adds one like to a random post of a sealed day (a late
// write: it goes to the window's delta), interleaved with
// postcounts.Add of the same kind on its own store. Each side's deltas
// grow through the run and are folded back by Maintain every 4096
// writes. cpu-ns/op is one write.
func BenchmarkAddLike(b *testing.B) {
	p := pageData(b)
	var ids []uint64
	for _, pg := range p.old[:512] {
		ids = append(ids, pg[:]...)
	}
	tn, pn := benchutil.Interleave(b, func(i int) {
		if _, _, err := p.mem.AddCounts(ids[i%len(ids)], engine.Counts{Likes: 1}); err != nil {
			b.Fatal(err)
		}
		if i%4096 == 4095 {
			if err := p.mem.Maintain(datagen.DefaultEnd); err != nil {
				b.Fatal(err)
			}
		}
	}, func(i int) {
		p.peers.counts.Add(ids[(i+7)%len(ids)], counters.Likes, 1)
		if i%4096 == 4095 {
			if err := p.peers.counts.Maintain(datagen.DefaultEnd); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.ReportMetric(tn, "cpu-ns/write")
	b.ReportMetric(pn, "counts-cpu-ns/write")
	b.ReportMetric(tn/pn, "table/counts")
}
