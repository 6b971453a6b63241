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
	if n <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f", float64(b)/float64(n))
}

func report(out io.Writer, r result) {
	name := "without authors (counts only)"
	denom, denomName := r.CountedPosts, "non-zero post"
	if r.Authors {
		name = "with an author on every post"
		denom, denomName = int64(r.Posts), "post"
	}
	fmt.Fprintf(out, "\n== %s: %d posts, %s\n", r.Label, r.Posts, name)
	fmt.Fprintf(out, "server: %s\n", settings(r))
	fmt.Fprintf(out, "known posts %d, with counts %d; %d posts verified exactly through GraphQL\n", r.KnownPosts, r.CountedPosts, r.Verified)
	fmt.Fprintf(out, "import %.1f s (peak RSS %s); server ready in %.1f s\n", r.ImportSeconds, mib(r.ImportPeakRSS), r.StartSeconds)
	scan := "-"
	if r.GCScan >= 0 {
		scan = mib(r.GCScan)
	}
	fmt.Fprintf(out, "GOGC %d, memory limit %s; each collection scans %s\n", r.GOGC, limitString(r.MemLimit), scan)
	fmt.Fprintf(out, "%-34s %12s %10s\n", "after a forced GC", "bytes", "B/"+denomName)
	row := func(k string, v int64) { fmt.Fprintf(out, "%-34s %12s %10s\n", k, mib(v), per(v, denom)) }
	row("engine's own count", r.EngineBytes)
	row("live heap", r.HeapLive)
	row("RSS", r.RSS)
	fmt.Fprintf(out, "RSS / live heap: %.2f\n", float64(r.RSS)/float64(r.HeapLive))
	fmt.Fprintf(out, "where RSS goes: heap spans in use %s, free heap kept %s (released %s), stacks %s, GC metadata %s, other runtime %s; RSS anonymous %s, file-backed %s; peak RSS %s\n",
		mib(r.HeapInuse), mib(r.HeapIdleKept), mib(r.HeapReleased), mib(r.Stacks), mib(r.GCMeta), mib(r.OtherRuntime), mib(r.RSSAnon), mib(r.RSSFile), mib(r.PeakRSS))
	if rm := r.Redis; rm != nil {
		fmt.Fprintf(out, "Redis: used_memory %s (%s B/%s), RSS %s (%s B/%s), dataset %s; with tally's RSS %s (%s B/%s)\n",
			mib(rm.Used), per(rm.Used, denom), denomName, mib(rm.RSS), per(rm.RSS, denom), denomName, mib(rm.Dataset),
			mib(rm.RSS+r.RSS), per(rm.RSS+r.RSS, denom), denomName)
	}
	if l := r.Load; l != nil {
		gc := "-"
		if l.GCCPU >= 0 {
			gc = fmt.Sprintf("%.2f s (%.1f%% of the server's)", l.GCCPU, 100*l.GCCPU/l.ServerCPU)
		}
		fmt.Fprintf(out, "under load: %d pages in %.1f s (%.0f/s), server CPU %.1f µs/page, %d GCs, GC CPU %s\n",
			l.Pages, l.Seconds, float64(l.Pages)/l.Seconds, 1e6*l.ServerCPU/float64(l.Pages), l.GCCycles, gc)
		fmt.Fprintf(out, "RSS under load: mean %s (%s B/%s, %.2f × live heap), peak %s (%.2f ×)\n",
			mib(l.RSSMean), per(l.RSSMean, denom), denomName, float64(l.RSSMean)/float64(r.HeapLive), mib(l.RSSPeak), float64(l.RSSPeak)/float64(r.HeapLive))
	}
}

func limitString(l int64) string {
	if l < 0 || l >= 1<<62 {
		return "none"
	}
	return mib(l)
}

func summary(out io.Writer, rs []result) {
	fmt.Fprintf(out, "\n== summary (bytes per post: all posts with authors, non-zero posts without)\n")
	fmt.Fprintf(out, "%-12s %10s %10s %10s %10s %10s %14s %14s\n", "set", "engine", "heap", "RSS", "peak RSS", "RSS/heap", "RSS load mean", "RSS load/heap")
	for _, r := range rs {
		denom, set := r.CountedPosts, r.Label+" counts"
		if r.Authors {
			denom, set = int64(r.Posts), r.Label+" authors"
		}
		if r.Redis != nil {
			fmt.Fprintf(out, "%-12s %10s %10s %10s %10s %10s %14s %14s   (Redis used_memory, tally's heap, Redis + tally RSS)\n", set,
				per(r.Redis.Used, denom), per(r.HeapLive, denom), per(r.Redis.RSS+r.RSS, denom), "-", "-", "-", "-")
			continue
		}
		loadMean, loadRatio := "-", "-"
		if r.Load != nil {
			loadMean, loadRatio = per(r.Load.RSSMean, denom), fmt.Sprintf("%.2f", float64(r.Load.RSSMean)/float64(r.HeapLive))
		}
		fmt.Fprintf(out, "%-12s %10s %10s %10s %10s %10.2f %14s %14s\n", set, per(r.EngineBytes, denom), per(r.HeapLive, denom), per(r.RSS, denom), per(r.PeakRSS, denom), float64(r.RSS)/float64(r.HeapLive), loadMean, loadRatio)
	}
}

// comparison sets server B against A, measured in the same run.
func comparison(out io.Writer, a, b result) {
	fmt.Fprintf(out, "\n== B (%s) against A (%s)\n", settings(b), settings(a))
	fmt.Fprintf(out, "idle RSS %.2f×, peak RSS %.2f×", float64(b.RSS)/float64(a.RSS), float64(b.PeakRSS)/float64(a.PeakRSS))
	if a.Load != nil && b.Load != nil {
		cpu := func(l *loadResult) float64 { return l.ServerCPU / float64(l.Pages) }
		fmt.Fprintf(out, ", RSS under load %.2f×, server CPU per page %.2f×, GCs %d vs %d", float64(b.Load.RSSMean)/float64(a.Load.RSSMean), cpu(b.Load)/cpu(a.Load), b.Load.GCCycles, a.Load.GCCycles)
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
