package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tally-dev/tally/web/auth"
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

// A corrupt log stops the start with a message naming the file and offset;
// tally repair sets the damage aside and says what was lost; the server
// then starts.
func TestRepairCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	data, c, segs := killedAfterPosts(t, 50)
	seg := segs[len(segs)-1]
	b, _ := os.ReadFile(seg)
	b[len(b)/2] ^= 0xFF // a flipped byte in the middle of the log
	os.WriteFile(seg, b, 0o644)

	out, err := refusedStart(data)
	if err == nil || !strings.Contains(out, filepath.Base(seg)) || !strings.Contains(out, "offset") {
		t.Fatalf("start on a corrupt log: %v\n%s", err, out)
	}
	code, rep, errs := runCLI(t, "repair", "-data", data)
	if code != 0 {
		t.Fatalf("repair: %d\n%s\n%s", code, rep, errs)
	}
	t.Logf("repair report:\n%s", rep)
	var kept int
	if _, err := fmt.Sscanf(rep[strings.Index(rep, "the log now ends at record "):], "the log now ends at record %d", &kept); err != nil || kept <= 0 || kept >= 50 {
		t.Fatalf("report does not say where the log ends: %v", err)
	}
	// Each createPost is one record: exactly the records before the cut remain.
	p := startTally(t, data)
	d, err := c.call(p.url, 3, false, `{ viewer { user { postCount } } }`, nil)
	if err != nil || !strings.Contains(string(d), fmt.Sprintf(`"postCount":%d`, kept)) {
		t.Fatalf("after repair: %s %v, want postCount %d", d, err, kept)
	}
}

// killedAfterPosts starts tally on a fresh data directory with snapshots
// off, creates posts through it, kills it with SIGKILL and returns the data
// directory, a client signed like the server's, and the log segments,
// oldest first.
func killedAfterPosts(t *testing.T, posts int) (data string, c *crashClient, segs []string) {
	t.Helper()
	data = filepath.Join(t.TempDir(), "data")
	p := startTally(t, data, "-snapshot-interval", "-1s", "-snapshot-log-bytes", "-1")
	keys, _ := auth.NewKeys([]byte(crashSecret))
	c = &crashClient{http: httpClient(), keys: keys}
	for range posts {
		if _, err := c.call(p.url, 3, false, `mutation { createPost { id } }`, nil); err != nil {
			t.Fatal(err)
		}
	}
	p.kill9()
	segs, _ = filepath.Glob(filepath.Join(data, "wal-*.log"))
	if len(segs) == 0 {
		t.Fatal("no log segment")
	}
	return data, c, segs
}

// refusedStart runs the server on data until it exits, as it must when the
// directory is damaged, and returns what it printed.
func refusedStart(data string) (string, error) {
	bin, err := buildTally()
	if err != nil {
		return "", err
	}
	cmd := exec.Command(bin, "-addr", "127.0.0.1:0", "-data", data)
	cmd.Env = append(os.Environ(), "TALLY_JWT_SECRET="+crashSecret)
	out, err := cmd.CombinedOutput()
	return string(out), err
}
