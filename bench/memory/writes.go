package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tally-dev/tally/bench/benchutil"
	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/web/auth"
)

// The writes phase (-writes) measures what snapshots cost a server that
// takes writes: for each variant, two servers on copies of the imported
// data directory, one taking a snapshot every -write-snapshot-interval and
// one taking none, each settled and read idle as the main phase does,
// then -writes of likes from -write-users users with RSS sampled every
// -rss-every. Peak RSS against the settled RSS is what an operator sizes
// the box for; likes per second with and without snapshots, and inside the
// snapshots' own intervals (from the server's log), is what the writers
// pay.

// writeResult is one server of the writes phase.
type writeResult struct {
	Snapshots   bool    `json:"snapshots"`
	ServeArgs   string  `json:"serveArgs"`
	SettledRSS  int64   `json:"settledRss"` // idle, after a forced GC, before the likes
	SettledLive int64   `json:"settledHeapLive"`
	PeakRSS     int64   `json:"peakRss"` // the most sampled during the likes
	MeanRSS     int64   `json:"meanRss"`
	Samples     int     `json:"rssSamples"`
	Seconds     float64 `json:"seconds"`
	Likes       int64   `json:"likes"`
	Failed      int64   `json:"failed"`
	// CPUPerLike is the server's CPU (user and system) over the likes
	// divided by the likes; 0 when unknown.
	CPUPerLike time.Duration `json:"cpuPerLikeNs"`
	// GCShare is the GC's share of that CPU (tally_gc_cpu_seconds_total);
	// -1 when unknown.
	GCShare float64 `json:"gcCpuShare"`
	// Snapshots written during the likes and the time they took, from the
	// server's log; the likes completed inside those intervals.
	SnapshotsWritten int     `json:"snapshotsWritten"`
	SnapshotSeconds  float64 `json:"snapshotSeconds"`
	LikesInSnapshots int64   `json:"likesInSnapshots"`
}

func (w writeResult) ratio() float64 { return float64(w.PeakRSS) / float64(w.SettledRSS) }

func (w writeResult) rate() float64 { return float64(w.Likes) / w.Seconds }

// rateInSnapshots is the likes per second completed while a snapshot was
// being taken, or -1 when none was.
func (w writeResult) rateInSnapshots() float64 {
	if w.SnapshotSeconds <= 0 {
		return -1
	}
	return float64(w.LikesInSnapshots) / w.SnapshotSeconds
}

const likeQuery = `mutation($p: ID!) { likePost(postId: $p) { id } }`

// writesPhase runs the writes phase of one variant on the imported data
// directory data (left unchanged: each server runs on a copy).
func writesPhase(ctx context.Context, cfg config, bin, data string, v variant, ds *data, out io.Writer) ([]writeResult, error) {
	// Hex: the secret travels in the environment, which cannot hold a NUL.
	secret := []byte(hex.EncodeToString(auth.RandomSecret()))
	keys, err := auth.NewKeys(secret)
	if err != nil {
		return nil, err
	}
	env := append(append([]string(nil), v.env...), "TALLY_JWT_SECRET="+string(secret))
	// The servers start from a snapshot of the import (tally backup, then
	// tally restore): an import leaves only a log, and the first snapshot
	// after it would be taken while the server settles, not under likes.
	base := data + "-writes-base"
	os.RemoveAll(base)
	defer os.RemoveAll(base)
	backup := base + ".backup"
	defer os.Remove(backup)
	for _, args := range [][]string{{"backup", "-data", data, "-out", backup}, {"restore", "-in", backup, "-data", base}} {
		if o, err := exec.CommandContext(ctx, bin, args...).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("tally %s: %v\n%s", args[0], err, o)
		}
	}
	var results []writeResult
	for round := range cfg.writeRounds {
		for _, snaps := range []bool{false, true} {
			args := append([]string(nil), v.args...)
			if snaps {
				args = append(args, "-snapshot-interval", cfg.writeSnapEvery.String())
			} else {
				args = append(args, "-snapshot-interval", "-1s", "-snapshot-log-bytes", "-1")
			}
			copyDir := fmt.Sprintf("%s-writes-%d", data, round)
			os.RemoveAll(copyDir)
			if o, err := exec.Command("cp", "-a", base, copyDir).CombinedOutput(); err != nil {
				return results, fmt.Errorf("copying the data directory: %v %s", err, o)
			}
			profiles := ""
			if cfg.writeProfiles != "" {
				profiles = filepath.Join(cfg.writeProfiles, fmt.Sprintf("%s-round%d-%s", v.label, round, map[bool]string{true: "snapshots", false: "nosnapshots"}[snaps]))
			}
			r, err := writesServer(ctx, cfg, bin, copyDir, variant{label: v.label, args: args, env: env}, keys, ds, profiles, out)
			if !cfg.keep {
				os.RemoveAll(copyDir)
				os.Remove(copyDir + ".log")
			}
			if err != nil {
				return results, err
			}
			r.Snapshots = snaps
			results = append(results, r)
		}
	}
	return results, nil
}

// writesServer measures one server of the writes phase; with profiles
// set it also saves the server's heap profiles there, settled
// (profiles-settled.pb.gz) and at the end of the likes
// (profiles-likes.pb.gz), for go tool pprof -diff_base.
func writesServer(ctx context.Context, cfg config, bin, dir string, v variant, keys *auth.Keys, ds *data, profiles string, out io.Writer) (writeResult, error) {
	r := writeResult{ServeArgs: strings.Join(v.args, " ")}
	p, err := startServer(bin, dir, v)
	if err != nil {
		return r, err
	}
	defer stopProcess(p.cmd, p.done)
	fmt.Fprintf(out, "writes phase: serving %s (pid %d, log %s)\n", r.ServeArgs, p.pid(), p.log)
	if err := waitReady(ctx, p.base, p.done, 10*time.Minute); err != nil {
		return r, fmt.Errorf("%v (see %s)", err, p.log)
	}
	if err := settle(ctx, p.base, cfg.settle); err != nil {
		return r, err
	}
	if _, err := verify(ctx, p.base, ds.sample, ds.perUser, ds.authors); err != nil {
		return r, fmt.Errorf("verification: %v", err)
	}
	var idle result
	if err := idleMemory(ctx, cfg, p, &idle); err != nil {
		return r, err
	}
	r.SettledRSS, r.SettledLive = idle.RSS, idle.HeapLive
	if profiles != "" {
		if err := saveHeapProfile(p.pprof, profiles+"-settled.pb.gz"); err != nil {
			return r, err
		}
	}
	logStart, _ := os.Stat(p.log)
	gcCPU := func() float64 {
		m, err := benchutil.ScrapeMetrics(p.base)
		if err != nil {
			return -1
		}
		return m["tally_gc_cpu_seconds_total"]
	}
	gcStart := gcCPU()
	cpuStart := benchutil.ProcCPU(p.pid())
	start := time.Now()
	buckets, likes, failed, rss, err := likeLoad(ctx, cfg, p, keys, ds.pool)
	r.Seconds = time.Since(start).Seconds()
	if err != nil {
		return r, err
	}
	r.GCShare = -1
	if cpu := benchutil.ProcCPU(p.pid()); cpuStart >= 0 && cpu > cpuStart && likes > 0 {
		r.CPUPerLike = (cpu - cpuStart) / time.Duration(likes)
		if gc := gcCPU(); gcStart >= 0 && gc >= gcStart {
			r.GCShare = (gc - gcStart) / (cpu - cpuStart).Seconds()
		}
	}
	if profiles != "" {
		if err := saveHeapProfile(p.pprof, profiles+"-likes.pb.gz"); err != nil {
			return r, err
		}
	}
	r.Likes, r.Failed = likes, failed
	var sum int64
	for _, v := range rss {
		r.PeakRSS = max(r.PeakRSS, v)
		sum += v
	}
	if r.Samples = len(rss); r.Samples > 0 {
		r.MeanRSS = sum / int64(len(rss))
	}
	var from int64
	if logStart != nil {
		from = logStart.Size()
	}
	spans, err := snapshotSpans(p.log, from)
	if err != nil {
		return r, err
	}
	for _, s := range spans {
		if s.end.Before(start) {
			continue
		}
		r.SnapshotsWritten++
		lo, hi := s.end.Add(-s.took), s.end
		lo = later(lo, start)
		r.SnapshotSeconds += hi.Sub(lo).Seconds()
		for i := int(lo.Sub(start) / cfg.rssEvery); i <= int(hi.Sub(start)/cfg.rssEvery) && i < len(buckets); i++ {
			r.LikesInSnapshots += buckets[i]
		}
	}
	return r, nil
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// likeLoad sends single-like requests from cfg.writeClients clients for
// cfg.writes, each like by one of cfg.writeUsers users (ids above every
// author's) on a post of pool, and samples the server's RSS every
// cfg.rssEvery. It returns the likes completed per sampling interval, the
// totals and the RSS samples.
func likeLoad(ctx context.Context, cfg config, p *proc, keys *auth.Keys, pool []uint64) (buckets []int64, likes, failed int64, rss []int64, err error) {
	tokens := make([]string, cfg.writeUsers)
	const firstUser = 1 << 40 // above every author of the data set
	for i := range tokens {
		if tokens[i], err = keys.Sign(engine.UserID(firstUser+i), false, 0); err != nil {
			return nil, 0, 0, nil, err
		}
	}
	n := int(cfg.writes/cfg.rssEvery) + 2
	counts := make([]atomic.Int64, n)
	var nLikes, nFailed atomic.Int64
	var firstErr atomic.Value
	ctx, cancel := context.WithTimeout(ctx, cfg.writes)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	for c := range cfg.writeClients {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(c), 7))
			client := &http.Client{}
			var buf bytes.Buffer
			for ctx.Err() == nil {
				tok := tokens[rng.IntN(len(tokens))]
				body, _ := json.Marshal(map[string]any{"query": likeQuery,
					"variables": map[string]any{"p": strconv.FormatUint(pool[rng.IntN(len(pool))], 10)}})
				req, _ := http.NewRequestWithContext(ctx, "POST", p.base+"/query", bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Authorization", "Bearer "+tok)
				resp, err := client.Do(req)
				if err != nil {
					if ctx.Err() == nil {
						firstErr.CompareAndSwap(nil, err)
						nFailed.Add(1)
					}
					return
				}
				buf.Reset()
				io.Copy(&buf, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 || bytes.Contains(buf.Bytes(), []byte(`"errors"`)) {
					nFailed.Add(1)
					firstErr.CompareAndSwap(nil, fmt.Errorf("like: HTTP %d %.200s", resp.StatusCode, buf.Bytes()))
					continue
				}
				nLikes.Add(1)
				if i := int(time.Since(start) / cfg.rssEvery); i < n {
					counts[i].Add(1)
				}
			}
		})
	}
	tick := time.NewTicker(cfg.rssEvery)
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-tick.C:
			if v := benchutil.ProcStatus(p.pid(), "VmRSS"); v > 0 {
				rss = append(rss, v)
			}
		}
	}
	tick.Stop()
	wg.Wait()
	buckets = make([]int64, n)
	for i := range counts {
		buckets[i] = counts[i].Load()
	}
	if nLikes.Load() == 0 {
		if e := firstErr.Load(); e != nil {
			return buckets, 0, nFailed.Load(), rss, fmt.Errorf("no like succeeded: %v", e)
		}
	}
	return buckets, nLikes.Load(), nFailed.Load(), rss, nil
}

// saveHeapProfile writes the server's heap profile (as of its last
// collection, none forced) to path.
func saveHeapProfile(pprof, path string) error {
	resp, err := http.Get(pprof + "/debug/pprof/heap")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("pprof heap: HTTP %d", resp.StatusCode)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// snapSpan is one snapshot from the server's log: when it was written and
// how long it took.
type snapSpan struct {
	end  time.Time
	took time.Duration
}

// snapshotSpans reads the "snapshot written" lines the server logged (JSON)
// from byte from of its log on.
func snapshotSpans(path string, from int64) ([]snapSpan, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if _, err := f.Seek(from, io.SeekStart); err != nil {
		return nil, err
	}
	var out []snapSpan
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	for sc.Scan() {
		var line struct {
			Time time.Time `json:"time"`
			Msg  string    `json:"msg"`
			Took int64     `json:"took"`
		}
		if json.Unmarshal(sc.Bytes(), &line) != nil || line.Msg != "embedded: snapshot written" {
			continue
		}
		out = append(out, snapSpan{end: line.Time, took: time.Duration(line.Took)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].end.Before(out[j].end) })
	return out, sc.Err()
}

// reportWrites prints the writes phase of one variant.
func reportWrites(out io.Writer, label string, ws []writeResult) {
	if len(ws) == 0 {
		return
	}
	fmt.Fprintf(out, "\n== writes phase, server %s: likes with and without snapshots (RSS sampled while they run)\n", label)
	fmt.Fprintf(out, "%-44s %10s %10s %7s %10s %9s %9s %7s %11s %9s %7s\n", "server", "settled", "peak RSS", "ratio", "mean RSS", "likes/s", "failed", "snaps", "likes/s in", "CPU/like", "GC CPU")
	for _, w := range ws {
		in := "-"
		if r := w.rateInSnapshots(); r >= 0 {
			in = fmt.Sprintf("%.0f", r)
		}
		cpu := "-"
		if w.CPUPerLike > 0 {
			cpu = fmt.Sprintf("%.0f µs", float64(w.CPUPerLike)/float64(time.Microsecond))
		}
		gc := "-"
		if w.GCShare >= 0 {
			gc = fmt.Sprintf("%.1f%%", 100*w.GCShare)
		}
		fmt.Fprintf(out, "%-44s %10s %10s %6.2f× %10s %9.0f %9d %7d %11s %9s %7s\n", w.ServeArgs, mib(w.SettledRSS), mib(w.PeakRSS), w.ratio(),
			mib(w.MeanRSS), w.rate(), w.Failed, w.SnapshotsWritten, in, cpu, gc)
	}
	var with, without []writeResult
	for _, w := range ws {
		if w.Snapshots {
			with = append(with, w)
		} else {
			without = append(without, w)
		}
	}
	if len(with) == 0 || len(without) == 0 {
		return
	}
	rate := func(ws []writeResult) float64 {
		var likes, secs float64
		for _, w := range ws {
			likes += float64(w.Likes)
			secs += w.Seconds
		}
		return likes / secs
	}
	var inLikes, inSecs float64
	for _, w := range with {
		inLikes += float64(w.LikesInSnapshots)
		inSecs += w.SnapshotSeconds
	}
	fmt.Fprintf(out, "likes/s with snapshots %.2f× without", rate(with)/rate(without))
	if inSecs > 0 {
		fmt.Fprintf(out, "; inside the snapshots (%.1f s of them) %.2f× without", inSecs, inLikes/inSecs/rate(without))
	}
	fmt.Fprintln(out)
}
