package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tally-dev/tally/bench/benchutil"
	"github.com/tally-dev/tally/bench/redispeers"
)

// redisMem is what a redis-server holds (INFO memory and /proc).
type redisMem struct {
	Used    int64 `json:"usedMemory"`   // used_memory: Redis's allocations
	RSS     int64 `json:"rss"`          // VmRSS of redis-server (used_memory_rss when /proc has none)
	Dataset int64 `json:"datasetBytes"` // used_memory_dataset: used_memory minus Redis's overhead
}

// redisServer is a redis-server this tool started, with no persistence
// and the listpack limits both layouts need (redispeers.ServerArgs, the
// ones engine/redisstore documents), on a free loopback port.
type redisServer struct {
	addr   string
	dir    string
	cmd    *exec.Cmd
	done   chan struct{}
	client *redis.Client
}

func startRedis(ctx context.Context, dir string) (*redisServer, error) {
	if err := os.RemoveAll(dir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	port, err := benchutil.FreePort()
	if err != nil {
		return nil, err
	}
	s := &redisServer{addr: fmt.Sprintf("127.0.0.1:%d", port), dir: dir, done: make(chan struct{})}
	args := append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir}, redispeers.ServerArgs...)
	s.cmd = exec.Command("redis-server", args...)
	logf, err := os.Create(dir + ".log")
	if err != nil {
		return nil, err
	}
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	if err := s.cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("redis-server: %v", err)
	}
	go func() { s.cmd.Wait(); logf.Close(); close(s.done) }()
	// The tool's own commands include FLUSHALL of millions of keys between
	// import attempts, which takes seconds on a busy machine: longer than
	// go-redis's default 3 s read timeout.
	s.client = redis.NewClient(&redis.Options{Addr: s.addr, ReadTimeout: 2 * time.Minute, WriteTimeout: 2 * time.Minute})
	for deadline := time.Now().Add(10 * time.Second); s.client.Ping(ctx).Err() != nil; {
		if time.Now().After(deadline) {
			s.stop()
			return nil, fmt.Errorf("redis-server on %s does not answer (see %s.log)", s.addr, dir)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return s, nil
}

// stop ends the server by its pid and removes its directory.
func (s *redisServer) stop() {
	s.client.Close()
	stopProcess(s.cmd, s.done)
	os.RemoveAll(s.dir)
}

func (s *redisServer) memory(ctx context.Context) (*redisMem, error) {
	info, err := s.client.Info(ctx, "memory").Result()
	if err != nil {
		return nil, err
	}
	rm := &redisMem{RSS: benchutil.ProcStatus(s.cmd.Process.Pid, "VmRSS")}
	for line := range strings.SplitSeq(info, "\n") {
		k, val, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		n, _ := strconv.ParseInt(val, 10, 64)
		switch k {
		case "used_memory":
			rm.Used = n
		case "used_memory_rss":
			if rm.RSS <= 0 {
				rm.RSS = n
			}
		case "used_memory_dataset":
			rm.Dataset = n
		}
	}
	return rm, nil
}

// measureRedis measures Tally on Redis with the same data set: a
// redis-server of its own, `tally import -redis`, `tally serve -redis`,
// the same verification through GraphQL, then Redis's memory beside the
// tally process's own heap and RSS.
func measureRedis(ctx context.Context, cfg config, bin string, ds *data, out io.Writer) (result, error) {
	r := result{Authors: ds.authors, Posts: cfg.posts, Label: labelTallyRedis, ServeArgs: "-redis", NonZeroPosts: int64(ds.counted)}
	dir := filepath.Join(cfg.work, "redis-"+setName(ds.authors))
	rs, err := startRedis(ctx, dir)
	if err != nil {
		return r, err
	}
	defer rs.stop()

	fmt.Fprintf(out, "importing %s into Redis %s (tally import -redis)\n", filepath.Base(ds.csv), rs.addr)
	// A failed import (tally gives up on the first Redis error, e.g. a
	// reply later than its 1 s timeout on a busy machine) is run again on
	// an emptied Redis: a retry never builds on a half-done import.
	for attempt := 1; ; attempt++ {
		if err := rs.client.FlushAll(ctx).Err(); err != nil {
			return r, err
		}
		if err := rs.client.ConfigResetStat(ctx).Err(); err != nil {
			return r, err
		}
		redisCPU := procCPU(rs.cmd.Process.Pid)
		imp := exec.CommandContext(ctx, bin, "import", "-log-format", "json", "-redis", rs.addr, ds.csv)
		imp.Env = append(os.Environ(), cfg.variants[0].env...)
		importStart := time.Now()
		o, err := imp.CombinedOutput()
		if err != nil {
			if attempt < cfg.importAttempts && ctx.Err() == nil {
				r.ImportFailures = append(r.ImportFailures, fmt.Sprintf("after %.0f s: %v: %s", time.Since(importStart).Seconds(), err, lastLine(o)))
				fmt.Fprintf(out, "tally import -redis failed (%s); emptying Redis and importing again\n", r.ImportFailures[len(r.ImportFailures)-1])
				continue
			}
			return r, fmt.Errorf("tally import -redis, attempt %d: %v\n%s", attempt, err, tail(o, 2000))
		}
		r.ImportSeconds = time.Since(importStart).Seconds()
		if ru, ok := imp.ProcessState.SysUsage().(*syscall.Rusage); ok {
			r.ImportPeakRSS = ru.Maxrss << 10
		}
		r.RedisImportCPU = (procCPU(rs.cmd.Process.Pid) - redisCPU).Seconds()
		if r.RedisImportTop, err = topCommands(ctx, rs.client, 4); err != nil {
			return r, err
		}
		break
	}
	fmt.Fprintf(out, "imported into Redis in %.1f s\n", r.ImportSeconds)

	v := variant{label: labelTallyRedis, args: append([]string{"-redis", rs.addr}, cfg.variants[0].args...), env: cfg.variants[0].env}
	start := time.Now()
	p, err := startServer(bin, dir+"-tally", v)
	if err != nil {
		return r, err
	}
	defer stopProcess(p.cmd, p.done)
	defer os.RemoveAll(dir + "-tally")
	fmt.Fprintf(out, "serving on Redis (pid %d, log %s)\n", p.pid(), p.log)
	if err := waitReady(ctx, p.base, p.done, 10*time.Minute); err != nil {
		return r, fmt.Errorf("%v (see %s)", err, p.log)
	}
	r.StartSeconds = time.Since(start).Seconds()
	n, err := verify(ctx, p.base, ds.sample, ds.perUser, ds.authors)
	if err != nil {
		return r, fmt.Errorf("verification on Redis: %v", err)
	}
	r.Verified = n
	if err := idleMemory(ctx, cfg, p, &r); err != nil {
		return r, err
	}
	if r.CountedPosts != int64(ds.counted) {
		return r, fmt.Errorf("tally on Redis counts %d posts with counts; the data set has %d", r.CountedPosts, ds.counted)
	}
	if ds.authors && r.KnownPosts != int64(cfg.posts) {
		return r, fmt.Errorf("tally on Redis knows %d posts; the data set has %d, all with an author", r.KnownPosts, cfg.posts)
	}
	if r.Redis, err = rs.memory(ctx); err != nil {
		return r, err
	}
	return r, nil
}

// topCommands names the n commands Redis spent most time in since its
// stats were reset (INFO commandstats), with their calls and seconds.
func topCommands(ctx context.Context, c *redis.Client, n int) (string, error) {
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		return "", err
	}
	type stat struct {
		name  string
		calls int64
		usec  int64
	}
	var stats []stat
	for line := range strings.SplitSeq(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		name, found := strings.CutPrefix(name, "cmdstat_")
		if !ok || !found {
			continue
		}
		st := stat{name: name}
		for kv := range strings.SplitSeq(rest, ",") {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "calls":
				st.calls, _ = strconv.ParseInt(v, 10, 64)
			case "usec":
				st.usec, _ = strconv.ParseInt(v, 10, 64)
			}
		}
		stats = append(stats, st)
	}
	slices.SortFunc(stats, func(a, b stat) int { return cmp.Compare(b.usec, a.usec) })
	var parts []string
	for _, st := range stats[:min(n, len(stats))] {
		parts = append(parts, fmt.Sprintf("%s %.1f s (%d calls)", st.name, float64(st.usec)/1e6, st.calls))
	}
	return strings.Join(parts, ", "), nil
}

// lastLine is the last non-empty line of a command's output.
func lastLine(o []byte) string {
	lines := strings.Split(strings.TrimSpace(string(o)), "\n")
	return lines[len(lines)-1]
}
