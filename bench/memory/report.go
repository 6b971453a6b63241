package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// per is bytes per post with one decimal.
func per(b int64, n int64) string {
	if n <= 0 || b < 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f", float64(b)/float64(n))
}

func ratio(a, b int64) string {
	if a <= 0 || b <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", float64(a)/float64(b))
}

func setTitle(authors bool) string {
	if authors {
		return "with an author on every post"
	}
	return "without authors (counts only; all-zero posts not imported)"
}

// storeName says what a result measured.
func storeName(r result) string {
	switch r.Label {
	case labelTallyRedis:
		return "Tally on Redis"
	case labelBuckets:
		return "Redis, Instagram buckets"
	case labelPostgres:
		return "PostgreSQL, seed 003's tables"
	}
	return "Tally embedded " + r.Label
}

// memTable prints memory rows, each heap (Redis: used_memory) beside RSS,
// per post of the set and per non-zero post.
type memTable struct {
	out            io.Writer
	posts, nonZero int64
}

func (t memTable) header(heapName string) {
	fmt.Fprintf(t.out, "%-36s %10s %8s %10s | %10s %8s %10s | %8s\n", "", heapName+" MiB", "B/post", "B/non-zero", "RSS MiB", "B/post", "B/non-zero", "RSS/heap")
}

func (t memTable) row(name string, heap, rss int64) {
	m := func(b int64) string {
		if b < 0 {
			return "-"
		}
		return fmt.Sprintf("%.1f", float64(b)/(1<<20))
	}
	fmt.Fprintf(t.out, "%-36s %10s %8s %10s | %10s %8s %10s | %8s\n", name, m(heap), per(heap, t.posts), per(heap, t.nonZero), m(rss), per(rss, t.posts), per(rss, t.nonZero), ratio(rss, heap))
}

func report(out io.Writer, r result) {
	fmt.Fprintf(out, "\n== %s: %d posts, %s; %d non-zero\n", storeName(r), r.Posts, setTitle(r.Authors), r.NonZeroPosts)
	t := memTable{out: out, posts: int64(r.Posts), nonZero: r.NonZeroPosts}
	if r.Label == labelBuckets {
		what := "posts"
		if r.Authors {
			what = "posts, their authors and the authors' post counts,"
		}
		fmt.Fprintf(out, "loaded %d posts (%d with counts) from the same CSV in %.1f s; every bucket's size and %d sampled %s checked against the data set\n",
			r.KnownPosts, r.CountedPosts, r.ImportSeconds, r.Verified, what)
		t.header("used")
		t.row("redis-server: used_memory, RSS", r.Redis.Used, r.Redis.RSS)
		fmt.Fprintf(out, "used_memory_dataset %s\n", mib(r.Redis.Dataset))
		return
	}
	if pm := r.Postgres; pm != nil {
		reportPostgres(out, r, pm, t)
		return
	}
	fmt.Fprintf(out, "server: %s\n", settings(r))
	fmt.Fprintf(out, "known posts %d, with counts %d; %d posts verified exactly through GraphQL\n", r.KnownPosts, r.CountedPosts, r.Verified)
	fmt.Fprintf(out, "import %.1f s (peak RSS %s); server ready in %.1f s\n", r.ImportSeconds, mib(r.ImportPeakRSS), r.StartSeconds)
	scan := "-"
	if r.GCScan >= 0 {
		scan = mib(r.GCScan)
	}
	fmt.Fprintf(out, "GOGC %d, memory limit %s; each collection scans %s\n", r.GOGC, limitString(r.MemLimit), scan)
	if rm := r.Redis; rm != nil {
		fmt.Fprintf(out, "redis-server CPU during the import %.1f s: %s\n", r.RedisImportCPU, r.RedisImportTop)
		for _, f := range r.ImportFailures {
			fmt.Fprintf(out, "an earlier attempt of the import failed %s; it was run again on an emptied Redis\n", f)
		}
		t.header("heap/used")
		t.row("redis-server: used_memory, RSS", rm.Used, rm.RSS)
		t.row("tally serve -redis: live heap, RSS", r.HeapLive, r.RSS)
		t.row("together", rm.Used+r.HeapLive, rm.RSS+r.RSS)
		fmt.Fprintf(out, "used_memory_dataset %s; tally's engine count %s\n", mib(rm.Dataset), mib(r.EngineBytes))
		return
	}
	t.header("heap")
	t.row("idle, after a forced GC", r.HeapLive, r.RSS)
	t.row("engine's own count; RSS idle", r.EngineBytes, r.RSS)
	t.row("peak since start (RSS)", -1, r.PeakRSS)
	if l := r.Load; l != nil {
		t.row("under load, mean (heap incl. garbage)", l.HeapMean, l.RSSMean)
		t.row("under load, peak", l.HeapPeak, l.RSSPeak)
		gc := "-"
		if l.GCCPU >= 0 {
			gc = fmt.Sprintf("%.2f s (%.1f%% of the server's)", l.GCCPU, 100*l.GCCPU/l.ServerCPU)
		}
		fmt.Fprintf(out, "under load: %d pages in %.1f s (%.0f/s), server CPU %.1f µs/page, %d GCs, GC CPU %s; RSS mean %.2f × live heap\n",
			l.Pages, l.Seconds, float64(l.Pages)/l.Seconds, 1e6*l.ServerCPU/float64(l.Pages), l.GCCycles, gc, float64(l.RSSMean)/float64(r.HeapLive))
	}
	if r.DiskBytes > 0 {
		fmt.Fprintf(out, "data directory on disk %s: %s B/post, %s B/non-zero\n", mib(r.DiskBytes), per(r.DiskBytes, int64(r.Posts)), per(r.DiskBytes, r.NonZeroPosts))
	}
	fmt.Fprintf(out, "where RSS goes: heap spans in use %s, free heap kept %s (released %s), stacks %s, GC metadata %s, other runtime %s; RSS anonymous %s, file-backed %s\n",
		mib(r.HeapInuse), mib(r.HeapIdleKept), mib(r.HeapReleased), mib(r.Stacks), mib(r.GCMeta), mib(r.OtherRuntime), mib(r.RSSAnon), mib(r.RSSFile))
	reportWrites(out, r.Label, r.Writes)
}

func reportPostgres(out io.Writer, r result, pm *pgMem, t memTable) {
	what := "posts"
	if r.Authors {
		what = "posts, their authors and the authors' post counts,"
	}
	fmt.Fprintf(out, "PostgreSQL %s: loaded %d posts (%d with counts) in %.1f s; %d sampled %s checked through SQL\n",
		pm.Version, r.KnownPosts, r.CountedPosts, r.ImportSeconds, r.Verified, what)
	fmt.Fprintf(out, "%-12s %11s %10s %10s %10s %8s\n", "table", "rows", "rows MiB", "key MiB", "total MiB", "B/post")
	for _, s := range pm.Tables {
		fmt.Fprintf(out, "%-12s %11d %10.1f %10.1f %10.1f %8s\n", s.Table, s.Rows, float64(s.Heap)/(1<<20), float64(s.Indexes)/(1<<20),
			float64(s.Total)/(1<<20), per(s.Total, int64(r.Posts)))
	}
	fmt.Fprintf(out, "on disk: the tables with their keys %s (%s B/post, %s B/non-zero); the database with its catalogs %s\n",
		mib(pm.Disk), per(pm.Disk, int64(r.Posts)), per(pm.Disk, r.NonZeroPosts), mib(pm.Database))
	fmt.Fprintf(out, "memory with every table and key in shared_buffers (%s, %s of it holding pages; pg_prewarm), over %d processes:\n",
		mib(pm.SharedBuffers), mib(pm.BuffersUsed), pm.Processes)
	t.header("buffers")
	t.row("postgres: buffers in use, Σ Pss", pm.BuffersUsed, pm.PSS)
	t.row("postgres: Σ RSS (shared pages per process)", -1, pm.RSS)
	fmt.Fprintf(out, "(the OS page cache holds the files a second time; not counted)\n")
}

func limitString(l int64) string {
	if l < 0 || l >= 1<<62 {
		return "none"
	}
	return mib(l)
}

// totals is a result's memory as one store: the embedded server's heap
// and RSS; Redis's used_memory and RSS, plus tally's own on Redis.
func totals(r result) (heap, rss, loadRSS int64) {
	loadRSS = -1
	switch {
	case r.Label == labelBuckets:
		return r.Redis.Used, r.Redis.RSS, -1
	case r.Redis != nil:
		return r.Redis.Used + r.HeapLive, r.Redis.RSS + r.RSS, -1
	case r.Postgres != nil:
		return r.Postgres.BuffersUsed, r.Postgres.PSS, -1
	}
	if r.Load != nil {
		loadRSS = r.Load.RSSMean
	}
	return r.HeapLive, r.RSS, loadRSS
}

// summary puts every store of every set in one table, against the first
// embedded server of the same set.
func summary(out io.Writer, rs []result) {
	fmt.Fprintf(out, "\n== summary, bytes per post of the set (B/post) and per non-zero post (B/nz)\n")
	fmt.Fprintf(out, "heap: Go live heap after a forced GC; Redis: used_memory (Tally on Redis: + tally's heap); PostgreSQL: shared_buffers in use.\n")
	fmt.Fprintf(out, "RSS: idle, after the GC (Tally on Redis: redis-server + tally; PostgreSQL: Σ Pss of its processes). disk: tally's data directory, PostgreSQL's tables and keys\n")
	fmt.Fprintf(out, "%-8s %-29s %8s %8s %8s %8s %9s %13s %13s %10s %9s %10s\n", "set", "store", "heap/post", "RSS/post", "heap/nz", "RSS/nz", "RSS/heap", "load RSS/post", "load RSS/nz", "RSS ×embed", "disk/post", "disk ×embed")
	var base, baseDisk int64
	for i, r := range rs {
		heap, rss, load := totals(r)
		disk := r.DiskBytes
		if disk == 0 {
			disk = -1 // not measured (Redis keeps it in memory; no persistence here)
		}
		if i == 0 || rs[i-1].Authors != r.Authors {
			base, baseDisk = rss, disk
		}
		fmt.Fprintf(out, "%-8s %-29s %8s %8s %8s %8s %9s %13s %13s %10s %9s %10s\n", setName(r.Authors), storeName(r),
			per(heap, int64(r.Posts)), per(rss, int64(r.Posts)), per(heap, r.NonZeroPosts), per(rss, r.NonZeroPosts),
			ratio(rss, heap), per(load, int64(r.Posts)), per(load, r.NonZeroPosts), ratio(rss, base),
			per(disk, int64(r.Posts)), ratio(disk, baseDisk))
	}
}

// comparison sets server B against A, measured in the same run.
func comparison(out io.Writer, a, b result) {
	fmt.Fprintf(out, "\n== B (%s) against A (%s)\n", settings(b), settings(a))
	fmt.Fprintf(out, "idle RSS %.2f× (live heap %.2f×), peak RSS %.2f×", float64(b.RSS)/float64(a.RSS), float64(b.HeapLive)/float64(a.HeapLive), float64(b.PeakRSS)/float64(a.PeakRSS))
	if a.Load != nil && b.Load != nil {
		cpu := func(l *loadResult) float64 { return l.ServerCPU / float64(l.Pages) }
		fmt.Fprintf(out, ", RSS under load %.2f× (heap under load %.2f×), server CPU per page %.2f×, GCs %d vs %d", float64(b.Load.RSSMean)/float64(a.Load.RSSMean), float64(b.Load.HeapMean)/float64(a.Load.HeapMean), cpu(b.Load)/cpu(a.Load), b.Load.GCCycles, a.Load.GCCycles)
		if a.Load.GCCPU >= 0 && b.Load.GCCPU >= 0 {
			fmt.Fprintf(out, ", GC CPU %.1f%% vs %.1f%% of the server's", 100*b.Load.GCCPU/b.Load.ServerCPU, 100*a.Load.GCCPU/a.Load.ServerCPU)
		}
	}
	fmt.Fprintln(out)
}

// settings names what a server was started with beyond the defaults.
func settings(r result) string {
	s := strings.TrimSpace(strings.ReplaceAll(r.Env, ",", " ") + " " + r.ServeArgs)
	if s == "" {
		return "defaults"
	}
	return s
}
