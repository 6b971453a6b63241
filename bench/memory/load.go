package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tally-dev/tally/bench/benchutil"
)

// loadResult is what a server did and held while serving feed pages.
type loadResult struct {
	Seconds   float64 `json:"seconds"`
	Pages     int64   `json:"pages"`
	ServerCPU float64 `json:"serverCpuSeconds"` // user+system, from /proc/<pid>/stat
	GCCPU     float64 `json:"gcCpuSeconds"`     // tally_gc_cpu_seconds_total, when the server has it (-1 otherwise)
	GCCycles  int64   `json:"gcCycles"`
	RSSPeak   int64   `json:"rssPeak"` // the most RSS sampled every 100 ms
	RSSMean   int64   `json:"rssMean"`
	HeapPeak  int64   `json:"heapPeak"` // go_memstats_heap_alloc_bytes (live and not yet collected), sampled with RSS
	HeapMean  int64   `json:"heapMean"`
}

// add sums two turns of load; a nil l is no turn yet.
func (l *loadResult) add(t loadResult) *loadResult {
	if l == nil {
		return &t
	}
	s := *l
	s.RSSMean = int64((float64(s.RSSMean)*s.Seconds + float64(t.RSSMean)*t.Seconds) / (s.Seconds + t.Seconds))
	s.HeapMean = int64((float64(s.HeapMean)*s.Seconds + float64(t.HeapMean)*t.Seconds) / (s.Seconds + t.Seconds))
	s.HeapPeak = max(s.HeapPeak, t.HeapPeak)
	s.Seconds += t.Seconds
	s.Pages += t.Pages
	s.ServerCPU += t.ServerCPU
	if s.GCCPU >= 0 && t.GCCPU >= 0 {
		s.GCCPU += t.GCCPU
	} else {
		s.GCCPU = -1
	}
	s.GCCycles += t.GCCycles
	s.RSSPeak = max(s.RSSPeak, t.RSSPeak)
	return &s
}

const loadQuery = `query($ids: [ID!]!) { posts(ids: $ids) { id author { id postCount } counts { likes comments reposts views favorites } } }`

// serveLoad sends pages of 50 random ids from pool with `clients`
// concurrent clients for d and samples the server's RSS meanwhile: the
// allocation a real server sees (request decoding, gqlgen, encoding) makes
// its heap grow between collections, so RSS under load is what the GC's
// pacing lets it be, not the idle figure.
func serveLoad(ctx context.Context, base string, pid int, pool []uint64, clients int, d time.Duration) (loadResult, error) {
	var lr loadResult
	before, err := benchutil.ScrapeMetrics(base)
	if err != nil {
		return lr, err
	}
	cpu0 := procCPU(pid)
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var pages atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	start := time.Now()
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(c), 99))
			client := &http.Client{}
			ids := make([]string, 50)
			for ctx.Err() == nil {
				for i := range ids {
					ids[i] = strconv.FormatUint(pool[rng.IntN(len(pool))], 10)
				}
				body, _ := json.Marshal(map[string]any{"query": loadQuery, "variables": map[string]any{"ids": ids}})
				req, _ := http.NewRequestWithContext(ctx, "POST", base+"/query", bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				resp, err := client.Do(req)
				if err != nil {
					if ctx.Err() == nil {
						firstErr.CompareAndSwap(nil, err)
					}
					return
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 || bytes.Contains(b, []byte(`"errors"`)) {
					firstErr.CompareAndSwap(nil, fmt.Errorf("page: HTTP %d %.200s", resp.StatusCode, b))
					return
				}
				pages.Add(1)
			}
		}()
	}
	var sum, n, heapSum, heapN int64
	tick := time.NewTicker(100 * time.Millisecond)
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-tick.C:
			if v := benchutil.ProcStatus(pid, "VmRSS"); v > 0 {
				lr.RSSPeak = max(lr.RSSPeak, v)
				sum += v
				n++
			}
			if m, err := benchutil.ScrapeMetrics(base); err == nil {
				v := int64(m["go_memstats_heap_alloc_bytes"])
				lr.HeapPeak = max(lr.HeapPeak, v)
				heapSum += v
				heapN++
			}
		}
	}
	tick.Stop()
	wg.Wait()
	lr.Seconds = time.Since(start).Seconds()
	if e := firstErr.Load(); e != nil {
		return lr, e.(error)
	}
	lr.Pages = pages.Load()
	lr.ServerCPU = (procCPU(pid) - cpu0).Seconds()
	if n > 0 {
		lr.RSSMean = sum / n
	}
	if heapN > 0 {
		lr.HeapMean = heapSum / heapN
	}
	after, err := benchutil.ScrapeMetrics(base)
	if err != nil {
		return lr, err
	}
	lr.GCCycles = int64(after["go_gc_duration_seconds_count"] - before["go_gc_duration_seconds_count"])
	lr.GCCPU = -1
	if v, ok := after["tally_gc_cpu_seconds_total"]; ok {
		lr.GCCPU = v - before["tally_gc_cpu_seconds_total"]
	}
	return lr, nil
}

// procCPU is the process's user+system time (benchutil.ProcCPU; 0 when
// unknown).
func procCPU(pid int) time.Duration { return max(benchutil.ProcCPU(pid), 0) }
