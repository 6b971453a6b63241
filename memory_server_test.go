package main

import (
	"bytes"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// TestMemoryMetricsExposed: the server's /metrics shows RSS (the process
// collector's process_resident_memory_bytes) beside the live heap and the
// GC's own figures, each with a plausible value.
func TestMemoryMetricsExposed(t *testing.T) {
	srv := newTestServer(t)
	runtime.GC()
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	vals := map[string]float64{}
	for line := range bytes.Lines(body) {
		f := strings.Fields(string(line))
		if len(f) == 2 && !strings.HasPrefix(f[0], "#") {
			v, err := strconv.ParseFloat(f[1], 64)
			if err == nil {
				vals[f[0]] = v
			}
		}
	}
	for _, name := range []string{"process_resident_memory_bytes", "tally_heap_live_bytes", "tally_gc_scan_bytes", "tally_heap_free_kept_bytes", "tally_gc_idle_releases_total", "go_gc_gogc_percent", "go_gc_gomemlimit_bytes"} {
		if _, ok := vals[name]; !ok {
			t.Errorf("/metrics has no %s", name)
		}
	}
	if _, ok := vals["tally_gc_cpu_seconds_total"]; !ok {
		t.Errorf("/metrics has no tally_gc_cpu_seconds_total")
	}
	live, rss := vals["tally_heap_live_bytes"], vals["process_resident_memory_bytes"]
	if live <= 0 || rss <= live {
		t.Errorf("live heap %.0f, RSS %.0f: want 0 < live < RSS", live, rss)
	}
	if s := vals["tally_gc_scan_bytes"]; s <= 0 || s > live+64<<20 {
		t.Errorf("scan bytes %.0f with live heap %.0f", s, live)
	}
}

// TestCommandsRefuseBadMemoryFlags: serve and import say what is wrong
// with a memory flag, from the command line or the environment, and exit
// 2 before opening anything.
func TestCommandsRefuseBadMemoryFlags(t *testing.T) {
	dir := t.TempDir()
	csv := filepath.Join(dir, "posts.csv")
	cases := []struct {
		env  string // TALLY_MEMORY_LIMIT
		args []string
		want string
	}{
		{"", []string{"serve", "-memory-limit", "10MiB"}, "-memory-limit 10MiB is below 64MiB"},
		{"", []string{"serve", "-memory-limit", "plenty"}, `invalid value "plenty" for flag -memory-limit: "plenty" is not a size in bytes`},
		{"", []string{"serve", "-memory-budget", "1073741824", "-memory-limit", "1GiB"}, "below three times -memory-budget (1GiB"},
		{"", []string{"serve", "-gc-pacing", "eager"}, "-gc-pacing must be scan or heap"},
		{"lots", []string{"serve"}, `TALLY_MEMORY_LIMIT="lots"`},
		{"", []string{"import", "-gc-min-headroom", "1KiB", csv}, "-gc-min-headroom 1KiB is below 4MiB"},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			if c.env != "" {
				t.Setenv("TALLY_MEMORY_LIMIT", c.env)
			}
			args := append([]string{c.args[0], "-data", filepath.Join(dir, "data"), "-addr", "127.0.0.1:0"}, c.args[1:]...)
			if c.args[0] == "import" {
				args = append([]string{"import", "-data", filepath.Join(dir, "data")}, c.args[1:]...)
			}
			code, _, errs := runCLI(t, args...)
			if code != 2 || !strings.Contains(errs, c.want) {
				t.Errorf("exit %d, stderr %q; want 2 and %q", code, errs, c.want)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(dir, "data")); err == nil {
		t.Errorf("a refused command made its data directory")
	}
}
