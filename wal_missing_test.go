package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tally-dev/tally/resolvers/auth"
)

// A deleted log segment stops the start with a message naming the missing
// file; tally repair says so and accepts the loss; the server then starts
// without the lost records.
func TestMissingLogSegmentCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	data := filepath.Join(t.TempDir(), "data")
	p := startTally(t, data, "-snapshot-interval", "-1s", "-snapshot-log-bytes", "-1")
	keys, _ := auth.NewKeys([]byte(crashSecret))
	c := &crashClient{http: httpClient(), keys: keys}
	for range 20 {
		if _, err := c.call(p.url, 3, false, `mutation { createPost { id } }`, nil); err != nil {
			t.Fatal(err)
		}
	}
	p.kill9()
	segs, _ := filepath.Glob(filepath.Join(data, "wal-*.log"))
	if len(segs) == 0 {
		t.Fatal("no log segment")
	}
	newest := segs[len(segs)-1]
	if err := os.Remove(newest); err != nil {
		t.Fatal(err)
	}

	bin, _ := buildTally()
	cmd := exec.Command(bin, "-addr", "127.0.0.1:0", "-data", data)
	cmd.Env = append(os.Environ(), "TALLY_JWT_SECRET="+crashSecret)
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), filepath.Base(newest)+" is missing") || !strings.Contains(string(out), "tally repair") {
		t.Fatalf("start without the newest log segment: %v\n%s", err, out)
	}
	code, rep, errs := runCLI(t, "repair", "-data", data)
	if code != 0 || !strings.Contains(rep, "log incomplete: "+filepath.Base(newest)+" is missing") || !strings.Contains(rep, "accepted the loss") {
		t.Fatalf("repair: %d\n%s\n%s", code, rep, errs)
	}
	t.Logf("repair report:\n%s", rep)
	want := `"postCount":0` // every post was in the deleted segment
	if len(segs) > 1 {
		want = `"postCount":` // some were in older segments
	}
	p = startTally(t, data)
	d, err := c.call(p.url, 3, false, `{ viewer { user { postCount } } }`, nil)
	if err != nil || !strings.Contains(string(d), want) {
		t.Fatalf("after repair: %s %v", d, err)
	}
}
