package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tally-dev/tally/bench/benchutil"
)

// redisMem is what Redis holds for Tally's data set (INFO memory).
type redisMem struct {
	Used    int64 `json:"usedMemory"`    // used_memory: Redis's allocations
	RSS     int64 `json:"usedMemoryRss"` // used_memory_rss: what the OS gives redis-server
	Dataset int64 `json:"datasetBytes"`  // used_memory_dataset: used_memory minus Redis's overhead
}

// measureRedis measures Tally on Redis with the same data set: a
// redis-server of its own (no persistence) on a free port, `tally import
// -redis`, `tally serve -redis`, the same verification through GraphQL,
// then Redis's memory beside the tally process's own heap and RSS.
func measureRedis(ctx context.Context, cfg config, bin string, withAuthors bool, csvPath string, sample []sampled, perUser []int32, counted int, out io.Writer) (result, error) {
	r := result{Authors: withAuthors, Posts: cfg.posts, Label: "Redis", ServeArgs: "-redis"}
	dir := filepath.Join(cfg.work, "redis-"+map[bool]string{true: "authors", false: "counts"}[withAuthors])
	if err := os.RemoveAll(dir); err != nil {
		return r, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return r, err
	}
	defer os.RemoveAll(dir)
	port, err := benchutil.FreePort()
	if err != nil {
		return r, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	rs := exec.Command("redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir)
	logf, err := os.Create(dir + ".log")
	if err != nil {
		return r, err
	}
	defer logf.Close()
	rs.Stdout, rs.Stderr = logf, logf
	if err := rs.Start(); err != nil {
		return r, fmt.Errorf("redis-server: %v", err)
	}
	rsDone := make(chan struct{})
	go func() { rs.Wait(); close(rsDone) }()
	defer stopProcess(rs, rsDone)
	client := redis.NewClient(&redis.Options{Addr: addr})
	defer client.Close()
	for deadline := time.Now().Add(10 * time.Second); client.Ping(ctx).Err() != nil; {
		if time.Now().After(deadline) {
			return r, fmt.Errorf("redis-server on %s does not answer (see %s.log)", addr, dir)
		}
		time.Sleep(50 * time.Millisecond)
	}

	fmt.Fprintf(out, "importing %s into Redis %s\n", filepath.Base(csvPath), addr)
	imp := exec.CommandContext(ctx, bin, "import", "-log-format", "json", "-redis", addr, csvPath)
	imp.Env = append(os.Environ(), cfg.variants[0].env...)
	importStart := time.Now()
	o, err := imp.CombinedOutput()
	if err != nil {
		return r, fmt.Errorf("tally import -redis: %v\n%s", err, tail(o, 2000))
	}
	r.ImportSeconds = time.Since(importStart).Seconds()
	if ru, ok := imp.ProcessState.SysUsage().(*syscall.Rusage); ok {
		r.ImportPeakRSS = ru.Maxrss << 10
	}

	v := variant{label: "Redis", args: append([]string{"-redis", addr}, cfg.variants[0].args...), env: cfg.variants[0].env}
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
	n, err := verify(ctx, p.base, sample, perUser, withAuthors)
	if err != nil {
		return r, fmt.Errorf("verification on Redis: %v", err)
	}
	r.Verified = n
	if err := idleMemory(ctx, cfg, p, &r); err != nil {
		return r, err
	}
	if r.CountedPosts != int64(counted) {
		return r, fmt.Errorf("tally on Redis counts %d posts with counts; the data set has %d", r.CountedPosts, counted)
	}
	info, err := client.Info(ctx, "memory").Result()
	if err != nil {
		return r, err
	}
	rm := &redisMem{}
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
			rm.RSS = n
		case "used_memory_dataset":
			rm.Dataset = n
		}
	}
	r.Redis = rm
	return r, nil
}
