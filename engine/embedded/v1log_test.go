package embedded

import (
	"cmp"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/tally-dev/tally/engine/wal"
)

// TestV1LogReplays opens testdata/v1log, a log of version-1 records
// written by the engine before typed records (commit 76c48a7, with
// testdata/v1log/gen_v1log_test.go.txt), and checks that it replays to
// the state that engine had and gives the answers it gave.
func TestV1LogReplays(t *testing.T) {
	b, err := os.ReadFile("testdata/v1log/golden.json")
	ok(t, err)
	var g v1Golden
	ok(t, json.Unmarshal(b, &g))
	// The testdata is what it claims: every record is of version 1.
	l, err := wal.Open(copyLogDir(t, "testdata/v1log"), wal.Options{Sync: wal.SyncNone})
	ok(t, err)
	n := 0
	ok(t, l.Replay(1, func(_ uint64, rec []byte) error {
		if rec[0] != 1 {
			t.Fatalf("record %d has version %d", n+1, rec[0])
		}
		n++
		return nil
	}))
	ok(t, l.Close())
	if n < 1000 {
		t.Fatalf("%d records in testdata/v1log", n)
	}
	dump, answers := answersOf(t, "testdata/v1log", &g)
	if want := sortedFollows(g.Dump); dump != want {
		t.Errorf("replayed state differs from the one the version-1 engine had:\n%s", lineDiff(want, dump))
	}
	if want := sortedFollows(g.Answers); answers != want {
		t.Errorf("answers differ from the version-1 engine's:\n%s", lineDiff(want, answers))
	}
}

var (
	followeesLine = regexp.MustCompile(`^(followees [0-9]+: )\[([0-9 ]*)\]$`)
	followsRow    = regexp.MustCompile(`^(  [0-9]+ )\[([0-9 ]*)\] \[([-0-9 ]*)\]$`)
)

// sortedFollows puts the followee lists of the version-1 engine's dump
// and answers in increasing order, with their snapshots: that engine kept
// a list in the order of the follows, engine/follows keeps it sorted, and
// the order of Followees is no part of the contract.
func sortedFollows(s string) string {
	lines := strings.Split(s, "\n")
	inFollows := false
	for i, l := range lines {
		if !strings.HasPrefix(l, "  ") {
			inFollows = strings.HasPrefix(l, "follows ")
		}
		if m := followeesLine.FindStringSubmatch(l); m != nil {
			ts := strings.Fields(m[2])
			slices.SortFunc(ts, byNumber)
			lines[i] = m[1] + "[" + strings.Join(ts, " ") + "]"
		}
		if m := followsRow.FindStringSubmatch(l); m != nil && inFollows {
			ts, ss := strings.Fields(m[2]), strings.Fields(m[3])
			idx := make([]int, len(ts))
			for k := range idx {
				idx[k] = k
			}
			slices.SortFunc(idx, func(x, y int) int { return byNumber(ts[x], ts[y]) })
			sts, sss := make([]string, len(ts)), make([]string, len(ts))
			for k, j := range idx {
				sts[k], sss[k] = ts[j], ss[j]
			}
			lines[i] = m[1] + "[" + strings.Join(sts, " ") + "] [" + strings.Join(sss, " ") + "]"
		}
	}
	return strings.Join(lines, "\n")
}

func byNumber(x, y string) int { return cmp.Or(cmp.Compare(len(x), len(y)), strings.Compare(x, y)) }

// lineDiff shows the first lines where want and got differ.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	shown := 0
	for i := 0; i < max(len(w), len(g)) && shown < 10; i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			fmt.Fprintf(&b, "line %d\n  want %s\n  got  %s\n", i+1, wl, gl)
			shown++
		}
	}
	return b.String()
}

// TestUpgradedLogReplays: an engine opened on a version-1 log appends
// version-2 records to it; the mixed log replays to the same state.
func TestUpgradedLogReplays(t *testing.T) {
	b, err := os.ReadFile("testdata/v1log/golden.json")
	ok(t, err)
	var g v1Golden
	ok(t, json.Unmarshal(b, &g))
	clk := &clock{t: g.Now}
	opts := Options{Dir: copyLogDir(t, "testdata/v1log"), Sync: wal.SyncNone, SweepInterval: -1, Logger: quiet,
		SnapshotInterval: -1, SnapshotLogBytes: -1, CursorTTL: g.TTL, Now: clk.Now}
	e, err := Open(opts)
	ok(t, err)
	workload(t, e, clk, 5, 500)
	before := dumpOf(e)
	ok(t, e.Close())
	versions := map[byte]int{}
	l, err := wal.Open(opts.Dir, wal.Options{Sync: wal.SyncNone})
	ok(t, err)
	ok(t, l.Replay(1, func(_ uint64, rec []byte) error { versions[rec[0]]++; return nil }))
	ok(t, l.Close())
	if versions[1] == 0 || versions[2] == 0 || len(versions) != 2 {
		t.Fatalf("record versions in the log: %v", versions)
	}
	e, err = Open(opts)
	ok(t, err)
	defer e.Close()
	if after := dumpOf(e); after != before {
		t.Fatalf("the mixed log replays differently:\n%s", lineDiff(before, after))
	}
}
