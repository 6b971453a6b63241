package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A deleted log segment stops the start with a message naming the missing
// file; tally repair says so and accepts the loss; the server then starts
// without the lost records.
func TestMissingLogSegmentCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	data, c, segs := killedAfterPosts(t, 20)
	newest := segs[len(segs)-1]
	if err := os.Remove(newest); err != nil {
		t.Fatal(err)
	}

	out, err := refusedStart(data)
	if err == nil || !strings.Contains(out, filepath.Base(newest)+" is missing") || !strings.Contains(out, "tally repair") {
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
	p := startTally(t, data)
	d, err := c.call(p.url, 3, false, `{ viewer { user { postCount } } }`, nil)
	if err != nil || !strings.Contains(string(d), want) {
		t.Fatalf("after repair: %s %v", d, err)
	}
}
