package benchutil

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

// ScrapeMetrics reads a tally's /metrics (Prometheus text) at base into
// name → value, for the unlabelled series: what the bench tools compare
// (heap, RSS, CPU seconds) is unlabelled.
func ScrapeMetrics(base string) (map[string]float64, error) {
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return nil, fmt.Errorf("/metrics: HTTP %d", resp.StatusCode)
	}
	m := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' || strings.ContainsRune(line, '{') {
			continue
		}
		name, val, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		if v, err := strconv.ParseFloat(strings.TrimSpace(val), 64); err == nil {
			m[name] = v
		}
	}
	return m, sc.Err()
}

// ProcStatus returns field of /proc/<pid>/status (VmRSS, RssAnon,
// Threads, ...): in bytes for kB fields, as is otherwise; -1 when
// unknown.
func ProcStatus(pid int, field string) int64 {
	if pid <= 0 {
		return -1
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		name, val, ok := strings.Cut(line, ":")
		if !ok || name != field {
			continue
		}
		f := strings.Fields(val)
		if len(f) == 0 {
			return -1
		}
		v, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return -1
		}
		if len(f) > 1 && f[1] == "kB" {
			v <<= 10
		}
		return v
	}
	return -1
}

// FreePort returns a loopback port that was free a moment ago, for a
// server a bench tool starts.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's times; 100 on
// every Linux architecture Go supports.
const clockTicks = 100

// ProcCPU returns the process's user+system CPU time from
// /proc/<pid>/stat (10 ms resolution); -1 when unknown.
func ProcCPU(pid int) time.Duration {
	if pid <= 0 {
		return -1
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return -1
	}
	// The command name may hold spaces and parentheses: fields start
	// after the last ')'. utime and stime are fields 14 and 15, i.e. the
	// 12th and 13th after it.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 13 {
		return -1
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * time.Second / clockTicks
}
