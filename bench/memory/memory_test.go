package main

import (
	"bytes"
	"context"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestFlagsRejectBadValues(t *testing.T) {
	for args, want := range map[string]string{
		"-authors some":        "-authors must be with, without or both",
		"-posts 0":             "-posts 0: must be positive",
		"-posts -5":            "-posts -5",
		"-users 0":             "-users 0: must be positive",
		"-verify -1":           "-verify -1",
		"-env GOGC":            `-env: "GOGC" is not KEY=VALUE`,
		"-compare-env nothing": `-compare-env: "nothing" is not KEY=VALUE`,
		"-posts 10 extra":      "unexpected arguments",
	} {
		_, err := parseFlags(strings.Fields(args), io.Discard)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v; want one saying %q", args, err, want)
		}
	}
	c, err := parseFlags(strings.Fields("-compare -gc-pacing=heap -serve-args -pprof-x -env GOGC=50"), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.variants) != 2 || strings.Join(c.variants[1].args, " ") != "-pprof-x -gc-pacing=heap" || c.variants[1].env[0] != "GOGC=50" {
		t.Errorf("variants %+v", c.variants)
	}
}

func TestLoadTurnsAdd(t *testing.T) {
	var l *loadResult
	l = l.add(loadResult{Seconds: 1, Pages: 10, ServerCPU: 0.5, GCCPU: 0.1, GCCycles: 2, RSSPeak: 100, RSSMean: 90})
	l = l.add(loadResult{Seconds: 3, Pages: 20, ServerCPU: 1, GCCPU: -1, GCCycles: 1, RSSPeak: 80, RSSMean: 70})
	want := loadResult{Seconds: 4, Pages: 30, ServerCPU: 1.5, GCCPU: -1, GCCycles: 3, RSSPeak: 100, RSSMean: 75}
	if *l != want {
		t.Errorf("sum %+v; want %+v", *l, want)
	}
}

// TestEndToEnd runs the tool on a small data set against a tally built
// from this repository: import, serve, verification of every post through
// GraphQL and both memory readings, for both sets, a compared server and
// Tally on a redis-server of the test's own.
func TestEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts tally")
	}
	work := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	bin := filepath.Join(work, "tally")
	if o, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "../..").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, o)
	}
	cfg, err := parseFlags([]string{"-posts", "20000", "-users", "3000", "-verify", "20000", "-work", work, "-tally", bin,
		"-after-gc", "0", "-load", "1s", "-compare", "-gc-pacing heap", "-redis"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := run(ctx, cfg, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	s := out.String()
	for _, want := range []string{
		"known posts 20000, with counts", "20000 posts verified exactly through GraphQL", // every post, with its author
		"posts verified exactly", "RSS / live heap", "RSS under load", "GOGC 100", "B (-gc-pacing heap) against A",
		"Redis: used_memory",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q:\n%s", want, s)
		}
	}
	if strings.Count(s, "20000 posts verified exactly") != 6 {
		t.Errorf("want 6 servers (2 sets × 2 variants and Redis) each verifying all 20000 posts:\n%s", s)
	}
}
