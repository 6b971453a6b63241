package memory

import (
	"flag"
	"io"
	"math"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strings"
	"testing"
	"time"
)

const mib = 1 << 20

func TestParseByteSize(t *testing.T) {
	good := map[string]int64{
		"0": 0, "1500000000": 1_500_000_000, "512MiB": 512 << 20, "2GiB": 2 << 30, "2gib": 2 << 30,
		" 3 GB ": 3e9, "64KiB": 64 << 10, "10MB": 10e6, "1TiB": 1 << 40, "7B": 7,
	}
	for in, want := range good {
		if got, err := parseByteSize(in); err != nil || got != want {
			t.Errorf("parseByteSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	bad := map[string]string{
		"":                     "not a size",
		"-1":                   "negative",
		"-5MiB":                "negative",
		"12 parsec":            "not a size",
		"1.5GiB":               "not a size",
		"MiB":                  "not a size",
		"9999999TiB":           "too large",
		"99999999999999999999": "too large",
	}
	for in, want := range bad {
		if _, err := parseByteSize(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("parseByteSize(%q) error %v; want one saying %q", in, err, want)
		}
	}
	for _, b := range []byteSize{512 << 20, 3 << 30, 1_500_000_000, 7, 1 << 40} {
		if n, err := parseByteSize(b.String()); err != nil || byteSize(n) != b {
			t.Errorf("%d printed as %q reads back as %d, %v", b, b.String(), n, err)
		}
	}
}

// memoryFlags parses args with serve's memory flags and checks them
// against budget, as serve does.
func memoryFlags(t *testing.T, budget int64, args ...string) (Settings, error) {
	t.Helper()
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var m Settings
	m.Register(fs)
	if err := fs.Parse(args); err != nil {
		return m, err
	}
	return m, m.Check(budget)
}

func TestMemoryFlagsRejectBadValues(t *testing.T) {
	cases := []struct {
		budget int64
		args   []string
		want   string
	}{
		{0, []string{"-memory-limit", "lots"}, "not a size in bytes"},
		{0, []string{"-memory-limit", "-1GiB"}, "negative"},
		{0, []string{"-memory-limit", "10MiB"}, "below 64MiB"},
		{512 << 20, []string{"-memory-limit", "1500MiB"}, "below three times -memory-budget (512MiB"},
		{0, []string{"-gc-pacing", "fast"}, `-gc-pacing must be scan or heap, not "fast"`},
		{0, []string{"-gc-min-headroom", "1MiB"}, "below 4MiB"},
		{0, []string{"-gc-min-headroom", "x"}, "not a size in bytes"},
		{0, []string{"-gc-idle-release", "-1s"}, "-gc-idle-release -1s is negative"},
	}
	for _, c := range cases {
		_, err := memoryFlags(t, c.budget, c.args...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v with -memory-budget %d: error %v; want one saying %q", c.args, c.budget, err, c.want)
		}
	}
	ok := []struct {
		budget int64
		args   []string
		limit  byteSize
	}{
		{0, nil, 0},
		{0, []string{"-memory-limit", "off"}, 0},
		{0, []string{"-memory-limit", "0"}, 0},
		{512 << 20, []string{"-memory-limit", "1536MiB"}, 1536 << 20},
		{0, []string{"-memory-limit", "3000000000", "-gc-pacing", "heap", "-gc-min-headroom", "8MiB"}, 3e9},
	}
	for _, c := range ok {
		m, err := memoryFlags(t, c.budget, c.args...)
		if err != nil || m.limit != c.limit {
			t.Errorf("%v with -memory-budget %d: limit %d, error %v; want %d and no error", c.args, c.budget, m.limit, err, c.limit)
		}
	}
}

// TestMemoryLimitApplied: -memory-limit sets the runtime's limit and its
// restore puts back what was there (GOMEMLIMIT's value when set); without
// the flag the limit is left as the environment made it.
func TestMemoryLimitApplied(t *testing.T) {
	before := debug.SetMemoryLimit(-1)
	m, err := memoryFlags(t, 0, "-memory-limit", "3GiB", "-gc-pacing", "heap")
	if err != nil {
		t.Fatal(err)
	}
	restore := m.Apply()
	if got := debug.SetMemoryLimit(-1); got != 3<<30 {
		t.Errorf("limit %d after -memory-limit 3GiB", got)
	}
	restore()
	if got := debug.SetMemoryLimit(-1); got != before {
		t.Errorf("limit %d after restore; was %d", got, before)
	}

	debug.SetMemoryLimit(5 << 30) // as GOMEMLIMIT=5GiB would have at start
	defer debug.SetMemoryLimit(before)
	m, _ = memoryFlags(t, 0, "-gc-pacing", "heap")
	restore = m.Apply()
	if got := debug.SetMemoryLimit(-1); got != 5<<30 {
		t.Errorf("limit %d without -memory-limit; GOMEMLIMIT's 5GiB should stay", got)
	}
	restore()
	m, _ = memoryFlags(t, 0, "-memory-limit", "off", "-gc-pacing", "heap")
	restore = m.Apply()
	if got := debug.SetMemoryLimit(-1); got != math.MaxInt64 {
		t.Errorf("limit %d with -memory-limit off", got)
	}
	restore()
}

func TestScanPercent(t *testing.T) {
	cases := []struct {
		name                                  string
		base                                  int
		minHeadroom, live, scan, stackGlobals uint64
		want                                  int
	}{
		// 1 GiB of pointer-free tables, 10 MiB to scan: 32 MiB headroom.
		{"tables", 100, 32 * mib, 1024 * mib, 9 * mib, 1 * mib, 3},
		// A small heap gets a sixth of its live heap, not the floor
		// (which would nearly double it), and what it scans above that.
		{"small heap", 100, 32 * mib, 40 * mib, 4 * mib, 1 * mib, 16},
		{"small heap scanning more", 100, 32 * mib, 10 * mib, 8 * mib, 1 * mib, 81},
		// ... and at least 3 MiB, however small.
		{"tiny heap", 100, 16 * mib, 8 * mib, 1 * mib, 0, 37},
		// A heap of pointers paces as GOGC says.
		{"all pointers", 100, 32 * mib, 1024 * mib, 1024 * mib, 4 * mib, 100},
		// Half scannable: headroom is half of GOGC's.
		{"half", 100, 32 * mib, 1000 * mib, 500 * mib, 0, 50},
		// The operator's GOGC scales the headroom and caps the result.
		{"GOGC=50", 50, 32 * mib, 1000 * mib, 500 * mib, 0, 25},
		{"GOGC=200 small", 200, 32 * mib, 10 * mib, 1 * mib, 0, 33},
		// Never below 1: GOGC=0 would collect continuously.
		{"huge heap", 100, 4 * mib, 1 << 40, 0, 0, 1},
		{"empty", 100, 32 * mib, 0, 0, 0, 100},
	}
	for _, c := range cases {
		if got := scanPercent(c.base, c.minHeadroom, c.live, c.scan, c.stackGlobals); got != c.want {
			t.Errorf("%s: GOGC %d; want %d", c.name, got, c.want)
		}
	}
}

// TestScanPacerFollowsCollections: with a heap of a big pointer-free
// table, the pacer lowers GOGC after a collection, and stopping it
// restores the operator's GOGC.
func TestScanPacerFollowsCollections(t *testing.T) {
	base := debug.SetGCPercent(100)
	defer debug.SetGCPercent(base)
	table := make([]uint64, 256<<20/8) // 256 MiB, no pointers
	stop := startScanPacer(16 << 20)
	deadline := time.Now().Add(10 * time.Second)
	var got int
	for time.Now().Before(deadline) {
		runtime.GC()
		got = currentGOGC()
		if got < 100 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	runtime.KeepAlive(table)
	// 16 MiB over ~256 MiB of live heap: about 6%.
	if got < 1 || got > 15 {
		t.Errorf("GOGC %d with 256 MiB of pointer-free heap and a 16 MiB floor; want ~6", got)
	}
	stop()
	if g := debug.SetGCPercent(100); g != 100 {
		t.Errorf("GOGC %d after the pacer stopped; want the base 100 back", g)
	}
}

// TestScanPacerShared: servers in one process share one pacer, and the
// operator's GOGC comes back only when the last one stops, whatever the
// order (a second pacer would have taken the first one's GOGC for the
// operator's and left it behind).
func TestScanPacerShared(t *testing.T) {
	base := debug.SetGCPercent(100)
	defer debug.SetGCPercent(base)
	table := make([]uint64, 256<<20/8)
	stop1 := startScanPacer(16 << 20)
	runtime.GC()
	waitGOGCBelow(t, 100)
	stop2 := startScanPacer(16 << 20)
	stop1()
	stop1() // a second call changes nothing
	runtime.GC()
	if g := waitGOGCBelow(t, 100); g >= 100 {
		t.Errorf("GOGC %d while a server still runs", g)
	}
	stop2()
	runtime.KeepAlive(table)
	if g := debug.SetGCPercent(100); g != 100 {
		t.Errorf("GOGC %d after the last pacer stopped; want 100", g)
	}
}

// waitGOGCBelow waits up to 10 s for GOGC to go below limit and returns
// it.
func waitGOGCBelow(t *testing.T, limit int) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		g := currentGOGC()
		if g < limit || time.Now().After(deadline) {
			return g
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
}

func TestShouldRelease(t *testing.T) {
	cases := []struct {
		name            string
		allocated, free uint64
		want            bool
	}{
		{"quiet with much free heap or garbage", 0, 32 * mib, true},
		{"a trickle of polls", 1 * mib, 20 * mib, true},
		{"allocating a quarter of it", 5 * mib, 20 * mib, false},
		{"under load", 900 * mib, 30 * mib, false},
		{"too little to be worth a collection", 0, 3 * mib, false},
		{"just enough", 0, 4 * mib, true},
	}
	for _, c := range cases {
		if got := shouldRelease(c.allocated, c.free); got != c.want {
			t.Errorf("%s (allocated %d, free %d): %v; want %v", c.name, c.allocated, c.free, got, c.want)
		}
	}
}

// TestIdleReleaseReturnsFreeHeap: once the process goes quiet, the free
// heap a burst of allocations left behind goes back to the OS (the
// runtime alone keeps it: it is within the pacing's goal), once, and
// stopping the releaser stops it.
func TestIdleReleaseReturnsFreeHeap(t *testing.T) {
	base := debug.SetGCPercent(400) // a goal far above the live heap keeps what the burst freed
	defer debug.SetGCPercent(base)
	var sink [][]byte
	for range 64 {
		sink = append(sink, make([]byte, 1<<20))
	}
	runtime.KeepAlive(sink)
	sink = nil
	runtime.GC()
	if free := heapFree(); free < 16*mib {
		t.Fatalf("free heap %d after freeing 64 MiB; the test needs at least 16 MiB kept", free)
	}
	before := idleReleases.Load()
	stop := startIdleRelease(20 * time.Millisecond)
	deadline := time.Now().Add(10 * time.Second)
	for heapFree() >= minIdleRelease && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if free := heapFree(); free >= minIdleRelease {
		t.Errorf("free heap %d after 10 s quiet; want it returned (below %d)", free, minIdleRelease)
	}
	time.Sleep(100 * time.Millisecond) // five more quiet intervals
	stop()
	stop() // a second call changes nothing
	if n := idleReleases.Load() - before; n != 1 {
		t.Errorf("%d releases in one quiet spell; want 1", n)
	}
}

// TestIdleReleaseCollectsLastGarbage: what a server allocated just before
// it went quiet is garbage no collection has found yet (none is due
// within the headroom); the releaser collects it and returns its memory
// instead of leaving it resident until Go's periodic collection.
func TestIdleReleaseCollectsLastGarbage(t *testing.T) {
	base := debug.SetGCPercent(-1) // no collection but the releaser's
	defer debug.SetGCPercent(base)
	runtime.GC()
	var sink [][]byte
	for range 64 {
		sink = append(sink, make([]byte, 1<<20))
	}
	runtime.KeepAlive(sink)
	sink = nil
	if g := heapObjects(); g < 64*mib {
		t.Fatalf("heap objects %d after allocating 64 MiB with collections off", g)
	}
	before := idleReleases.Load()
	stop := startIdleRelease(20 * time.Millisecond)
	defer stop()
	deadline := time.Now().Add(10 * time.Second)
	for heapObjects() >= 32*mib && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if g := heapObjects(); g >= 32*mib {
		t.Fatalf("heap objects %d after 10 s quiet; want the 64 MiB of garbage collected", g)
	}
	// The releaser counts a release once FreeOSMemory returns, just after
	// its collection emptied the heap: wait for the count, not only the heap.
	for idleReleases.Load() == before && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if idleReleases.Load() == before {
		t.Error("no release counted")
	}
	for heapFree() >= minIdleRelease && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if free := heapFree(); free >= minIdleRelease {
		t.Errorf("free heap %d kept after the collection; want it returned", free)
	}
}

func heapObjects() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

func heapFree() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/free:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// currentGOGC reads GOGC without setting it (debug.SetGCPercent would race
// with the pacer).
func currentGOGC() int {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return int(s[0].Value.Uint64())
}
