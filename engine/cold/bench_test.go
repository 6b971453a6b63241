package cold

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"testing"

	"github.com/tally-dev/tally/bench/datagen"
	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/sealed"
	"github.com/tally-dev/tally/engine/snowflake"
)

// The benchmarks read 50-post pages from cold files and, in the same run,
// from the same windows in memory:
//
//	go test ./engine/cold -run '^$' -bench .
//
// Data: bench/datagen, N = benchN, seed 1, defaults; one window (one file)
// per UTC day. A page is 50 ids of one day's posts, zero posts included,
// in random order. cpu-ns/page is the benchmark thread's CPU time.

type benchSet struct {
	dir     string
	all     []uint64
	nonzero int
	wins    []*sealed.Window // per day, nil where no post
	paths   []string
}

var (
	bsOnce sync.Once
	bs     *benchSet
)

func TestMain(m *testing.M) {
	code := m.Run()
	if bs != nil {
		os.RemoveAll(bs.dir)
	}
	os.Exit(code)
}

func day(id uint64) int64 { return snowflake.Millis(id) / 86_400_000 }

func benchData(b *testing.B) *benchSet {
	bsOnce.Do(func() {
		dir, err := os.MkdirTemp("", "tally-cold-bench-")
		if err != nil {
			b.Fatal(err)
		}
		s := &benchSet{dir: dir}
		type post struct {
			id uint64
			c  engine.Counts
		}
		var ps []post
		datagen.Each(datagen.Config{N: benchN, Seed: 1}, func(id uint64, c engine.Counts) {
			s.all = append(s.all, id)
			if !c.IsZero() {
				ps = append(ps, post{id, c})
			}
		})
		s.nonzero = len(ps)
		day0 := day(ps[0].id)
		for start := 0; start < len(ps); {
			end := start
			for end < len(ps) && day(ps[end].id) == day(ps[start].id) {
				end++
			}
			for int64(len(s.wins)) < day(ps[start].id)-day0 {
				s.wins = append(s.wins, nil)
				s.paths = append(s.paths, "")
			}
			w, err := sealed.Build(func(yield func(uint64, engine.Counts) bool) {
				for _, p := range ps[start:end] {
					if !yield(p.id, p.c) {
						return
					}
				}
			}, sealed.Options{})
			if err != nil {
				b.Fatal(err)
			}
			path := filepath.Join(dir, fmt.Sprintf("day-%d.win", day(ps[start].id)))
			if err := writeWindow(path, w); err != nil {
				b.Fatal(err)
			}
			s.wins = append(s.wins, w)
			s.paths = append(s.paths, path)
			start = end
		}
		bs = s
	})
	return bs
}

// openAll opens every day's file on one cache; they are closed when the
// benchmark ends.
func (s *benchSet) openAll(b *testing.B, cache *Cache) []*File {
	fs := s.open(b, cache)
	b.Cleanup(func() { closeAll(fs) })
	return fs
}

func closeAll(fs []*File) {
	for _, f := range fs {
		if f != nil {
			f.Close()
		}
	}
}

func (s *benchSet) open(b *testing.B, cache *Cache) []*File {
	fs := make([]*File, len(s.paths))
	for i, p := range s.paths {
		if p == "" {
			continue
		}
		f, err := Open(p, cache)
		if err != nil {
			b.Fatal(err)
		}
		fs[i] = f
	}
	return fs
}

type pages struct {
	ids [][50]uint64
	win []int // day index
}

func (s *benchSet) pages(n int, seed uint64) pages {
	rng := rand.New(rand.NewPCG(seed, 4))
	p := pages{ids: make([][50]uint64, n), win: make([]int, n)}
	for i := range n {
		w := rng.IntN(len(s.wins))
		for s.wins[w] == nil {
			w = rng.IntN(len(s.wins))
		}
		x := s.wins[w].Index()
		lo, _ := slices.BinarySearch(s.all, x.MinID())
		hi, _ := slices.BinarySearch(s.all, x.MaxID()+1)
		for j := range 50 {
			p.ids[i][j] = s.all[lo+rng.IntN(hi-lo)]
		}
		p.win[i] = w
	}
	return p
}

// BenchmarkMemory reports what cold windows cost: memory (the open files'
// indexes and File values, from the Go heap after GC) and disk, per stored
// post and per post overall.
func BenchmarkMemory(b *testing.B) {
	s := benchData(b)
	var heap uint64
	var disk int64
	for b.Loop() {
		h0 := heapAlloc()
		fs := s.open(b, NewCache(0))
		heap = heapAlloc() - h0
		disk = 0
		for _, f := range fs {
			if f != nil {
				disk += f.Size()
			}
		}
		closeAll(fs)
	}
	b.ReportMetric(float64(heap)/float64(s.nonzero), "heap-B/post")
	b.ReportMetric(float64(heap)/float64(len(s.all)), "heap-B/post-all")
	b.ReportMetric(float64(disk)/float64(s.nonzero), "disk-B/post")
}

func heapAlloc() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

func BenchmarkGetPage(b *testing.B) {
	s := benchData(b)
	const n = 4096
	pg := s.pages(n, 3)
	var out [50]engine.Counts

	b.Run("sealed", func(b *testing.B) {
		pageLoop(b, nil, func(i int) error { s.wins[pg.win[i%n]].GetMany(pg.ids[i%n][:], out[:]); return nil })
	})
	b.Run("cold-cache-hit", func(b *testing.B) {
		fs := s.openAll(b, NewCache(64<<20))
		for i := range n { // warm: every block the pages need
			fs[pg.win[i]].GetMany(pg.ids[i][:], out[:])
		}
		pageLoop(b, fs, func(i int) error { return fs[pg.win[i%n]].GetMany(pg.ids[i%n][:], out[:]) })
	})
	b.Run("cold-miss", func(b *testing.B) {
		// No cache: every block comes from a pread (served by the OS page
		// cache), its checksum checked.
		fs := s.openAll(b, NewCache(0))
		pageLoop(b, fs, func(i int) error { return fs[pg.win[i%n]].GetMany(pg.ids[i%n][:], out[:]) })
	})
	b.Run("cold-miss-device", func(b *testing.B) {
		// As cold-miss, but the file's pages are dropped from the OS cache
		// before each page read, so the blocks come from the device.
		fs := s.openAll(b, NewCache(0))
		if err := dropPageCache(fs[pg.win[0]]); err != nil {
			b.Skip("cannot drop the page cache:", err)
		}
		pageLoop(b, fs, func(i int) error {
			f := fs[pg.win[i%n]]
			b.StopTimer()
			dropPageCache(f)
			b.StartTimer()
			return f.GetMany(pg.ids[i%n][:], out[:])
		})
	})
}

// pageLoop calls page(i) for i = 0, 1, ... and reports, beside the wall
// ns/op (one op is one page), the CPU ns per page of the benchmark's
// thread and, for cold files, the reads and blocks read per page.
func pageLoop(b *testing.B, fs []*File, page func(i int) error) {
	reads := func() (st ReadStats) {
		for _, f := range fs {
			if f != nil {
				r := f.ReadStats()
				st.Reads, st.Bytes, st.Blocks = st.Reads+r.Reads, st.Bytes+r.Bytes, st.Blocks+r.Blocks
			}
		}
		return st
	}
	lockThread()
	defer unlockThread()
	r0 := reads()
	c0 := threadCPU()
	i := 0
	for b.Loop() {
		if err := page(i); err != nil {
			b.Fatal(err)
		}
		i++
	}
	cpu := threadCPU() - c0
	r1 := reads()
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/page")
	if fs != nil {
		b.ReportMetric(float64(r1.Blocks-r0.Blocks)/float64(b.N), "blocks-read/page")
		b.ReportMetric(float64(r1.Reads-r0.Reads)/float64(b.N), "preads/page")
		b.ReportMetric(float64(r1.Bytes-r0.Bytes)/float64(b.N), "read-B/page")
	}
}
