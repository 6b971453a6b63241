// Command memory measures what a server holding a large imported data set
// costs in memory, as an operator sees it: it generates the bench/datagen
// posts (optionally with authors) as a CSV file, loads it with the built
// binary's `tally import`, starts `tally serve` on the data directory,
// waits for the engine's tables to settle, verifies a sample of posts
// exactly through GraphQL (counts, author, the author's post count, null
// for posts that were never known), forces a GC and reads the live heap
// from /metrics and RSS from /proc/<pid>/status — and prints both per post,
// with where the bytes between them go (free heap kept, stacks, GC
// metadata, file-backed pages). With -redis it measures the same data on
// Redis in the same run: Tally on Redis (tally import -redis, tally serve
// -redis) and the Instagram-style bucket layout of bench/redispeers, each
// on a redis-server of its own, checked against the data set too. With
// -postgres it measures seed 003's relational design on PostgreSQL
// (bench/pgpeer) with the same data: its tables' size on disk, and its
// memory with every table and key read into shared_buffers. Every figure
// is given per post of the set and per non-zero post, heap (Redis:
// used_memory; PostgreSQL: shared_buffers in use) beside RSS, and disk
// (tally's data directory, PostgreSQL's tables). With -writes it also
// measures what snapshots cost a server taking likes (writes.go): peak
// RSS against the settled RSS, and likes per second, with and without
// snapshots.
//
// It starts only processes of its own (the import, the servers,
// redis-servers and PostgreSQL clusters, on free loopback ports) and
// stops them by pid. See -h for the flags and the docs for figures.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tally-dev/tally/bench/benchutil"
	"github.com/tally-dev/tally/bench/datagen"
	"github.com/tally-dev/tally/engine"
)

type config struct {
	posts, users int
	seed         uint64
	cases        []bool // with authors?
	work         string
	tally, repo  string
	sample       int
	settle       time.Duration
	afterGC      time.Duration
	variants     []variant
	keep         bool
	jsonPath     string
	load         time.Duration
	clients      int
	redisPeers   []string // labelTallyRedis, labelBuckets
	redisWorkers int
	postgres     bool
	// importAttempts bounds the runs of tally import -redis, each on an
	// emptied Redis.
	importAttempts int
	// The writes phase (writes.go); writes 0 skips it.
	writes         time.Duration
	writeUsers     int
	writeClients   int
	writeRounds    int
	writeSnapEvery time.Duration
	rssEvery       time.Duration
	writeProfiles  string
}

// The stores measured beside the embedded engine.
const (
	labelTallyRedis = "tally-redis"
	labelBuckets    = "buckets"
	labelPostgres   = "postgres"
)

func main() {
	cfg, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "memory:", err)
		os.Exit(2)
	}
	ctx, stop := signalContext()
	defer stop()
	if err := run(ctx, cfg, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "memory:", err)
		os.Exit(1)
	}
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("memory", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "memory imports a generated data set into tally, serves it and reports live heap and RSS per post.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	fs.IntVar(&c.posts, "posts", 1_000_000, "posts in the data set (the issue's figures: 10000000)")
	fs.IntVar(&c.users, "users", datagen.DefaultUsers, "users the authors are drawn from")
	fs.Uint64Var(&c.seed, "seed", 1, "seed of the data set")
	authors := fs.String("authors", "both", "which sets to measure: with (an author on every post), without (counts only; all-zero posts are not imported) or both")
	fs.StringVar(&c.work, "work", filepath.Join(os.TempDir(), "tally-memory"), "directory for the CSV files (kept and reused) and the data directories")
	fs.StringVar(&c.tally, "tally", "", "tally binary to measure (default: go build the repository at -repo into -work)")
	fs.StringVar(&c.repo, "repo", ".", "the repository's root, for building tally")
	fs.IntVar(&c.sample, "verify", 2100, "posts verified exactly through GraphQL, spread evenly over the set")
	fs.DurationVar(&c.settle, "settle", 10*time.Minute, "longest wait for the engine's tables to settle after the server starts")
	fs.DurationVar(&c.afterGC, "after-gc", 25*time.Second, "wait between the forced GC and reading RSS: the runtime returns freed pages in the background, and tally serve returns its free heap once quiet for a whole -gc-idle-release interval (10s), so the idle reading waits for two of them")
	serveArgs := fs.String("serve-args", "", "extra flags for tally serve, space-separated (e.g. \"-memory-limit 300MiB\")")
	env := fs.String("env", "", "extra environment for tally import and serve, comma-separated KEY=VALUE (e.g. GOGC=50)")
	compare := fs.String("compare", "", "also measure a second server on a copy of the data, with these flags added (e.g. \"-gc-pacing heap\"); the load phase alternates between the two")
	compareEnv := fs.String("compare-env", "", "environment added for the -compare server, comma-separated KEY=VALUE")
	fs.DurationVar(&c.load, "load", 20*time.Second, "after the idle reading, serve random 50-post pages this long and sample RSS (0: skip)")
	fs.IntVar(&c.clients, "clients", 4, "concurrent clients of the load phase")
	redisOn := fs.Bool("redis", false, "also measure Redis with the same data in the same run (the peers of -redis-peers), each on a redis-server of its own (from PATH, no persistence), checked against the data set, Redis's used_memory and RSS beside tally's")
	peers := fs.String("redis-peers", labelTallyRedis+","+labelBuckets, "with -redis, which: "+labelTallyRedis+" (tally import -redis, tally serve -redis, the same GraphQL verification) and "+labelBuckets+" (Instagram-style buckets of bench/redispeers, loaded from the same CSV)")
	fs.IntVar(&c.redisWorkers, "redis-workers", 4, "concurrent pipelines loading the bucket layout")
	fs.BoolVar(&c.postgres, "postgres", false, "also measure PostgreSQL with the same data in the same run: seed 003's tables (bench/pgpeer) on a throwaway cluster of its own (Debian's postgresql), copied in from the same CSV and checked against the data set; disk (pg_total_relation_size) and memory with every table and key read into shared_buffers")
	fs.IntVar(&c.importAttempts, "redis-import-attempts", 3, "runs of tally import -redis before the tool gives up, each on an emptied Redis (the failures are reported)")
	fs.DurationVar(&c.writes, "writes", 0, "writes phase: for each server, two more servers on copies of the imported data, one taking a snapshot every -write-snapshot-interval and one taking none, each read idle, then this long of likes with RSS sampled every -rss-every: peak RSS against the settled RSS, likes per second with and without snapshots (0: skip; the issue's figures: 60s)")
	fs.IntVar(&c.writeUsers, "write-users", 20_000, "users the writes phase likes as (ids above every author's)")
	fs.IntVar(&c.writeClients, "write-clients", 16, "concurrent clients of the writes phase, one like per request")
	fs.IntVar(&c.writeRounds, "write-rounds", 1, "rounds of the writes phase, each a server without snapshots then one with")
	fs.DurationVar(&c.writeSnapEvery, "write-snapshot-interval", 10*time.Second, "-snapshot-interval of the writes phase's server that takes snapshots")
	fs.DurationVar(&c.rssEvery, "rss-every", 50*time.Millisecond, "how often the writes phase samples RSS")
	fs.StringVar(&c.writeProfiles, "write-profiles", "", "save each writes-phase server's heap profile, settled and after the likes, in this directory (for go tool pprof -diff_base)")
	fs.BoolVar(&c.keep, "keep", false, "keep the data directories")
	fs.StringVar(&c.jsonPath, "json", "", "also write the results as JSON to this file")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	switch *authors {
	case "both":
		c.cases = []bool{true, false}
	case "with":
		c.cases = []bool{true}
	case "without":
		c.cases = []bool{false}
	default:
		return c, fmt.Errorf("-authors must be with, without or both, not %q", *authors)
	}
	if err := (datagen.Config{N: c.posts}).Validate(); err != nil || c.posts < 1 {
		return c, fmt.Errorf("-posts %d: must be positive and a valid data set size (%v)", c.posts, err)
	}
	if err := (datagen.AuthorConfig{Users: c.users}).Validate(); err != nil || c.users < 1 {
		return c, fmt.Errorf("-users %d: must be positive", c.users)
	}
	if c.sample < 0 {
		return c, fmt.Errorf("-verify %d: must not be negative", c.sample)
	}
	if *redisOn {
		for p := range strings.SplitSeq(*peers, ",") {
			switch p = strings.TrimSpace(p); p {
			case labelTallyRedis, labelBuckets:
				c.redisPeers = append(c.redisPeers, p)
			case "":
			default:
				return c, fmt.Errorf("-redis-peers: %q is neither %s nor %s", p, labelTallyRedis, labelBuckets)
			}
		}
	}
	if c.importAttempts < 1 {
		return c, fmt.Errorf("-redis-import-attempts %d: must be positive", c.importAttempts)
	}
	if c.writes < 0 || c.writeUsers < 1 || c.writeClients < 1 || c.writeRounds < 1 || c.writeSnapEvery <= 0 || c.rssEvery <= 0 {
		return c, fmt.Errorf("-writes must not be negative; -write-users, -write-clients, -write-rounds, -write-snapshot-interval and -rss-every must be positive")
	}
	if c.redisWorkers < 1 {
		return c, fmt.Errorf("-redis-workers %d: must be positive", c.redisWorkers)
	}
	baseEnv, err := envList("-env", *env)
	if err != nil {
		return c, err
	}
	c.variants = []variant{{label: "A", args: strings.Fields(*serveArgs), env: baseEnv}}
	if *compare != "" || *compareEnv != "" {
		e, err := envList("-compare-env", *compareEnv)
		if err != nil {
			return c, err
		}
		c.variants = append(c.variants, variant{label: "B", args: append(strings.Fields(*serveArgs), strings.Fields(*compare)...), env: append(baseEnv, e...)})
	}
	return c, nil
}

func envList(flag, s string) ([]string, error) {
	var out []string
	for kv := range strings.SplitSeq(s, ",") {
		if kv = strings.TrimSpace(kv); kv == "" {
			continue
		}
		if !strings.Contains(kv, "=") {
			return nil, fmt.Errorf("%s: %q is not KEY=VALUE", flag, kv)
		}
		out = append(out, kv)
	}
	return out, nil
}

// result is one measured case.
type result struct {
	Label         string  `json:"label"`
	Authors       bool    `json:"authors"`
	Posts         int     `json:"posts"`
	NonZeroPosts  int64   `json:"nonZeroPosts"` // posts of the data set with a non-zero count
	KnownPosts    int64   `json:"knownPosts"`
	CountedPosts  int64   `json:"countedPosts"`
	Verified      int     `json:"verified"`
	ImportSeconds float64 `json:"importSeconds"` // the import (buckets, PostgreSQL: the load)
	// DiskBytes is what the data takes on disk: tally's data directory,
	// PostgreSQL's tables with their keys (0: not measured).
	DiskBytes     int64 `json:"diskBytes"`
	ImportPeakRSS int64 `json:"importPeakRss"`
	// Tally on Redis: redis-server's CPU during the import and where it went.
	RedisImportCPU float64 `json:"redisImportCpuSeconds,omitempty"`
	RedisImportTop string  `json:"redisImportTopCommands,omitempty"`
	// Attempts of tally import -redis that failed before the one measured.
	ImportFailures []string `json:"importFailures,omitempty"`
	StartSeconds   float64  `json:"startSeconds"`
	ServeArgs      string   `json:"serveArgs"`
	Env            string   `json:"env"`
	mem
	Load     *loadResult   `json:"load,omitempty"`
	Writes   []writeResult `json:"writes,omitempty"`
	Redis    *redisMem     `json:"redis,omitempty"`
	Postgres *pgMem        `json:"postgres,omitempty"`
}

// mem is the server's memory after a forced GC.
type mem struct {
	EngineBytes   int64 `json:"engineBytes"`   // tally_engine_memory_bytes: the engine's own count
	HeapLive      int64 `json:"heapLive"`      // go_memstats_heap_alloc_bytes right after the GC
	HeapInuse     int64 `json:"heapInuse"`     // spans in use (live objects plus their size-class waste)
	HeapIdleKept  int64 `json:"heapIdleKept"`  // free heap spans still backed by memory (idle - released)
	HeapReleased  int64 `json:"heapReleased"`  // free heap spans returned to the OS
	Stacks        int64 `json:"stacks"`        // go_memstats_stack_sys_bytes
	GCMeta        int64 `json:"gcMeta"`        // go_memstats_gc_sys_bytes
	OtherRuntime  int64 `json:"otherRuntime"`  // mspan, mcache, buckhash, other
	RuntimeMapped int64 `json:"runtimeMapped"` // go_memstats_sys_bytes - heap released
	RSS           int64 `json:"rss"`           // VmRSS
	RSSAnon       int64 `json:"rssAnon"`
	RSSFile       int64 `json:"rssFile"`
	PeakRSS       int64 `json:"peakRss"` // VmHWM: the most the server held, at start included
	GCScan        int64 `json:"gcScan"`  // tally_gc_scan_bytes: what each collection scans (-1: absent)
	GOGC          int64 `json:"gogc"`    // go_gc_gogc_percent, -1 when off or absent
	MemLimit      int64 `json:"memLimit"`
}

func run(ctx context.Context, cfg config, out io.Writer) error {
	if err := os.MkdirAll(cfg.work, 0o755); err != nil {
		return err
	}
	bin := cfg.tally
	if bin == "" {
		bin = filepath.Join(cfg.work, "tally")
		fmt.Fprintf(out, "building tally from %s\n", cfg.repo)
		b := exec.CommandContext(ctx, "go", "build", "-o", bin, ".")
		b.Dir = cfg.repo
		if o, err := b.CombinedOutput(); err != nil {
			return fmt.Errorf("go build: %v\n%s", err, o)
		}
	}
	var results []result
	for _, withAuthors := range cfg.cases {
		rs, err := measure(ctx, cfg, bin, withAuthors, out)
		for _, r := range rs {
			report(out, r)
		}
		if len(cfg.variants) == 2 && len(rs) >= 2 {
			comparison(out, rs[0], rs[1])
		}
		if err != nil {
			return err
		}
		results = append(results, rs...)
	}
	if len(results) > 1 {
		summary(out, results)
	}
	if cfg.jsonPath != "" {
		b, _ := json.MarshalIndent(results, "", "  ")
		return os.WriteFile(cfg.jsonPath, append(b, '\n'), 0o644)
	}
	return nil
}

// data is a case's data set: the CSV file and what the tool checks.
type data struct {
	authors bool
	csv     string
	sample  []sampled
	pool    []uint64 // ids the load phase's pages are drawn from
	perUser []int32  // posts per author (with authors)
	counted int      // posts with a non-zero count
}

func setName(authors bool) string { return map[bool]string{true: "authors", false: "counts"}[authors] }

// sampled is a post the tool checks through GraphQL.
type sampled struct {
	id     uint64
	author engine.UserID
	counts engine.Counts
}

// dataset writes (or reuses) the CSV of the case and returns the sample to
// verify, the authors' post totals and how many posts have counts.
func dataset(cfg config, withAuthors bool, out io.Writer) (*data, error) {
	path, sample, pool, perUser, counted, err := writeDataset(cfg, withAuthors, out)
	if err != nil {
		return nil, err
	}
	return &data{authors: withAuthors, csv: path, sample: sample, pool: pool, perUser: perUser, counted: counted}, nil
}

func writeDataset(cfg config, withAuthors bool, out io.Writer) (path string, sample []sampled, pool []uint64, perUser []int32, counted int, err error) {
	name := fmt.Sprintf("posts-%d-seed%d.csv", cfg.posts, cfg.seed)
	if withAuthors {
		name = fmt.Sprintf("posts-%d-seed%d-authors%d.csv", cfg.posts, cfg.seed, cfg.users)
	}
	path = filepath.Join(cfg.work, name)
	var w *bufio.Writer
	var f *os.File
	if _, err := os.Stat(path); err != nil {
		fmt.Fprintf(out, "generating %s\n", path)
		f, err = os.Create(path + ".tmp")
		if err != nil {
			return "", nil, nil, nil, 0, err
		}
		defer f.Close()
		w = bufio.NewWriterSize(f, 1<<20)
		if withAuthors {
			w.WriteString("post_id,author_id,likes,comments,reposts,views,favorites\n")
		} else {
			w.WriteString("post_id,likes,comments,reposts,views,favorites\n")
		}
	}
	var authors *datagen.Authors
	if withAuthors {
		authors = datagen.NewAuthors(datagen.AuthorConfig{Users: cfg.users, Seed: cfg.seed})
		perUser = make([]int32, cfg.users+1)
	}
	stride := max(cfg.posts/max(cfg.sample, 1), 1)
	gen := datagen.New(datagen.Config{N: cfg.posts, Seed: cfg.seed})
	var buf []byte
	for i := 0; ; i++ {
		id, c, ok := gen.Next()
		if !ok {
			break
		}
		var a engine.UserID
		if authors != nil {
			a = authors.Next()
			perUser[a]++
		}
		if c != (engine.Counts{}) {
			counted++
		}
		if i%stride == stride/2 && len(sample) < cfg.sample {
			sample = append(sample, sampled{id, a, c})
		}
		// The load phase's pages come from every 100th imported post.
		if i%100 == 0 && (authors != nil || c != (engine.Counts{})) {
			pool = append(pool, id)
		}
		if w == nil || (authors == nil && c == (engine.Counts{})) {
			// An import without authors skips all-zero rows anyway; they
			// are not written, which keeps the file a plausible export.
			continue
		}
		buf = strconv.AppendUint(buf[:0], id, 10)
		if authors != nil {
			buf = append(buf, ',')
			buf = strconv.AppendUint(buf, uint64(a), 10)
		}
		for _, v := range []int64{c.Likes, c.Comments, c.Reposts, c.Views, c.Favorites} {
			buf = append(buf, ',')
			buf = strconv.AppendInt(buf, v, 10)
		}
		buf = append(buf, '\n')
		w.Write(buf)
	}
	if w != nil {
		if err := w.Flush(); err != nil {
			return "", nil, nil, nil, 0, err
		}
		if err := f.Close(); err != nil {
			return "", nil, nil, nil, 0, err
		}
		if err := os.Rename(path+".tmp", path); err != nil {
			return "", nil, nil, nil, 0, err
		}
	}
	return path, sample, pool, perUser, counted, nil
}

// variant is one configuration of the server measured on the data set.
type variant struct {
	label string
	args  []string
	env   []string
}

// proc is a tally serve process this tool started.
type proc struct {
	base, pprof string
	cmd         *exec.Cmd
	done        chan struct{}
	log         string
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func startServer(bin, data string, v variant) (*proc, error) {
	port, err := benchutil.FreePort()
	if err != nil {
		return nil, err
	}
	pport, err := benchutil.FreePort()
	if err != nil {
		return nil, err
	}
	p := &proc{
		base:  fmt.Sprintf("http://127.0.0.1:%d", port),
		pprof: fmt.Sprintf("http://127.0.0.1:%d", pport),
		done:  make(chan struct{}),
		log:   data + ".log",
	}
	args := append([]string{"serve", "-data", data, "-addr", fmt.Sprintf("127.0.0.1:%d", port),
		"-pprof", fmt.Sprintf("127.0.0.1:%d", pport), "-cost-rate", "0", "-log-format", "json"}, v.args...)
	logf, err := os.Create(p.log)
	if err != nil {
		return nil, err
	}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	p.cmd.Env = append(os.Environ(), v.env...)
	if err := p.cmd.Start(); err != nil {
		logf.Close()
		return nil, err
	}
	go func() { p.cmd.Wait(); logf.Close(); close(p.done) }()
	return p, nil
}

// measure imports the case's data set once and measures each variant on a
// copy of it: started one after the other (their start-up peaks do not
// overlap), then loaded in turns of a quarter of -load each, so that CPU
// per page is compared on the same machine at the same moments.
func measure(ctx context.Context, cfg config, bin string, withAuthors bool, out io.Writer) ([]result, error) {
	ds, err := dataset(cfg, withAuthors, out)
	if err != nil {
		return nil, err
	}
	csvPath, sample, pool, perUser, counted := ds.csv, ds.sample, ds.pool, ds.perUser, ds.counted
	data := filepath.Join(cfg.work, "data-"+setName(withAuthors))
	for i := range cfg.variants {
		if err := os.RemoveAll(data + variantSuffix(i)); err != nil {
			return nil, err
		}
		if !cfg.keep {
			defer os.RemoveAll(data + variantSuffix(i))
		}
	}

	fmt.Fprintf(out, "importing %s\n", filepath.Base(csvPath))
	imp := exec.CommandContext(ctx, bin, "import", "-log-format", "json", "-data", data, csvPath)
	imp.Env = append(os.Environ(), cfg.variants[0].env...)
	var impOut bytes.Buffer
	imp.Stdout, imp.Stderr = &impOut, &impOut
	start := time.Now()
	if err := imp.Run(); err != nil {
		return nil, fmt.Errorf("tally import: %v\n%s", err, tail(impOut.Bytes(), 2000))
	}
	importSeconds := time.Since(start).Seconds()
	var importPeak int64
	if ru, ok := imp.ProcessState.SysUsage().(*syscall.Rusage); ok {
		importPeak = ru.Maxrss << 10
	}
	for i := 1; i < len(cfg.variants); i++ {
		if o, err := exec.Command("cp", "-a", data, data+variantSuffix(i)).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("copying the data directory: %v %s", err, o)
		}
	}

	results := make([]result, len(cfg.variants))
	procs := make([]*proc, len(cfg.variants))
	defer func() {
		for _, p := range procs {
			if p != nil {
				stopProcess(p.cmd, p.done)
			}
		}
	}()
	for i, v := range cfg.variants {
		r := &results[i]
		*r = result{Authors: withAuthors, Posts: cfg.posts, NonZeroPosts: int64(counted), Label: v.label, ServeArgs: strings.Join(v.args, " "), Env: strings.Join(v.env, ","),
			ImportSeconds: importSeconds, ImportPeakRSS: importPeak}
		start := time.Now()
		p, err := startServer(bin, data+variantSuffix(i), v)
		if err != nil {
			return nil, err
		}
		procs[i] = p
		fmt.Fprintf(out, "serving %s (pid %d, log %s)\n", v.label, p.pid(), p.log)
		if err := waitReady(ctx, p.base, p.done, 10*time.Minute); err != nil {
			return nil, fmt.Errorf("%v (see %s)", err, p.log)
		}
		r.StartSeconds = time.Since(start).Seconds()
		if err := settle(ctx, p.base, cfg.settle); err != nil {
			return nil, err
		}
		n, err := verify(ctx, p.base, sample, perUser, withAuthors)
		if err != nil {
			return nil, fmt.Errorf("verification: %v", err)
		}
		r.Verified = n
		if err := idleMemory(ctx, cfg, p, r); err != nil {
			return nil, err
		}
		if r.DiskBytes, err = dirSize(data + variantSuffix(i)); err != nil {
			return nil, err
		}
		if r.CountedPosts != int64(counted) {
			return nil, fmt.Errorf("the server counts %d posts with counts; the data set has %d", r.CountedPosts, counted)
		}
		if withAuthors && r.KnownPosts != int64(cfg.posts) {
			return nil, fmt.Errorf("the server knows %d posts; the data set has %d, all with an author", r.KnownPosts, cfg.posts)
		}
	}
	if cfg.load > 0 && len(pool) > 0 {
		const turns = 4
		fmt.Fprintf(out, "serving random 50-post pages for %s per server, in %d turns, with %d clients\n", cfg.load, turns, cfg.clients)
		for range turns {
			for i, p := range procs {
				lr, err := serveLoad(ctx, p.base, p.pid(), pool, cfg.clients, cfg.load/turns)
				if err != nil {
					return nil, fmt.Errorf("load: %v", err)
				}
				results[i].Load = results[i].Load.add(lr)
			}
		}
	}
	if len(cfg.redisPeers) > 0 || cfg.postgres || cfg.writes > 0 {
		for _, p := range procs {
			stopProcess(p.cmd, p.done)
		}
		procs = nil
	}
	if cfg.writes > 0 && len(pool) > 0 {
		for i, v := range cfg.variants {
			ws, err := writesPhase(ctx, cfg, bin, data+variantSuffix(i), v, ds, out)
			results[i].Writes = ws
			if err != nil {
				return results, fmt.Errorf("writes phase: %v", err)
			}
		}
	}
	// PostgreSQL first: a tally import -redis that gives up (it does on a
	// busy machine, and the tool stops after -redis-import-attempts) then
	// leaves its figures measured.
	if cfg.postgres {
		r, err := measurePostgres(ctx, cfg, ds, out)
		if err != nil {
			return results, fmt.Errorf("%s: %v", labelPostgres, err)
		}
		results = append(results, r)
	}
	for _, peer := range cfg.redisPeers {
		var r result
		var err error
		switch peer {
		case labelTallyRedis:
			r, err = measureRedis(ctx, cfg, bin, ds, out)
		case labelBuckets:
			r, err = measureBuckets(ctx, cfg, ds, out)
		}
		if err != nil {
			// The figures measured so far stand on their own: they
			// are reported, then the run fails.
			return results, fmt.Errorf("%s: %v", peer, err)
		}
		results = append(results, r)
	}
	return results, nil
}

// dirSize is the bytes of the files under dir.
func dirSize(dir string) (int64, error) {
	var total int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			info, err := d.Info()
			if err != nil {
				return err
			}
			total += info.Size()
		}
		return nil
	})
	return total, err
}

func variantSuffix(i int) string {
	if i == 0 {
		return ""
	}
	return fmt.Sprintf("-%d", i)
}

// idleMemory forces a GC and reads the server's memory into r: the heap
// right after the GC, the rest (RSS above all) once the runtime has had
// -after-gc to return what it freed.
func idleMemory(ctx context.Context, cfg config, p *proc, r *result) error {
	if err := collectGarbage(p.pprof); err != nil {
		return err
	}
	afterGC, err := benchutil.ScrapeMetrics(p.base)
	if err != nil {
		return err
	}
	select {
	case <-time.After(cfg.afterGC):
	case <-ctx.Done():
		return ctx.Err()
	}
	m, err := benchutil.ScrapeMetrics(p.base)
	if err != nil {
		return err
	}
	pid := p.pid()
	r.mem = mem{
		EngineBytes:   int64(m["tally_engine_memory_bytes"]),
		HeapLive:      int64(afterGC["go_memstats_heap_alloc_bytes"]),
		HeapInuse:     int64(m["go_memstats_heap_inuse_bytes"]),
		HeapIdleKept:  int64(m["go_memstats_heap_idle_bytes"] - m["go_memstats_heap_released_bytes"]),
		HeapReleased:  int64(m["go_memstats_heap_released_bytes"]),
		Stacks:        int64(m["go_memstats_stack_sys_bytes"]),
		GCMeta:        int64(m["go_memstats_gc_sys_bytes"]),
		OtherRuntime:  int64(m["go_memstats_mspan_sys_bytes"] + m["go_memstats_mcache_sys_bytes"] + m["go_memstats_buck_hash_sys_bytes"] + m["go_memstats_other_sys_bytes"]),
		RuntimeMapped: int64(m["go_memstats_sys_bytes"] - m["go_memstats_heap_released_bytes"]),
		RSS:           benchutil.ProcStatus(pid, "VmRSS"),
		RSSAnon:       benchutil.ProcStatus(pid, "RssAnon"),
		RSSFile:       benchutil.ProcStatus(pid, "RssFile"),
		PeakRSS:       benchutil.ProcStatus(pid, "VmHWM"),
		GCScan:        -1,
		GOGC:          -1,
		MemLimit:      -1,
	}
	if v, ok := m["tally_gc_scan_bytes"]; ok {
		r.GCScan = int64(v)
	}
	if v, ok := afterGC["tally_heap_live_bytes"]; ok {
		r.HeapLive = int64(v) // the runtime's own /gc/heap/live:bytes, when the server has it
	}
	if v, ok := m["go_gc_gogc_percent"]; ok {
		r.GOGC = int64(v)
	}
	if v, ok := m["go_gc_gomemlimit_bytes"]; ok {
		r.MemLimit = int64(v)
	}
	r.KnownPosts = int64(m["tally_engine_posts"])
	r.CountedPosts = int64(m["tally_engine_counted_posts"])
	return nil
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// stopProcess ends a process this tool started: SIGTERM, then SIGKILL
// after 30 s, by its pid only.
func stopProcess(cmd *exec.Cmd, done <-chan struct{}) {
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		<-done
	}
}

func waitReady(ctx context.Context, base string, done <-chan struct{}, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		resp, err := http.Get(base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
		}
		select {
		case <-done:
			return errors.New("tally serve exited before it was ready")
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Errorf("tally serve not ready after %s", limit)
}

// settle waits until the engine's own memory count has not changed for 5
// s: the maintenance loop seals windows after a start, and memory read
// before that would be a moment, not the server's steady state.
func settle(ctx context.Context, base string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	last, same := -1.0, 0
	for time.Now().Before(deadline) {
		m, err := benchutil.ScrapeMetrics(base)
		if err != nil {
			return err
		}
		v := m["tally_engine_memory_bytes"]
		if v == last {
			same++
			if same >= 5 {
				return nil
			}
		} else {
			last, same = v, 0
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
	return fmt.Errorf("tally_engine_memory_bytes still changing after %s", limit)
}

// collectGarbage asks tally's -pprof listener for a heap profile with
// gc=1, which runs a full GC first: the heap figures that follow are live
// memory, not live memory plus garbage not yet collected.
func collectGarbage(pprof string) error {
	resp, err := http.Get(pprof + "/debug/pprof/heap?gc=1")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != 200 {
		return fmt.Errorf("pprof heap: HTTP %d", resp.StatusCode)
	}
	return nil
}
