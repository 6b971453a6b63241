package e2e

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tally-dev/tally/web/auth"
)

// tally backup while the server runs, tally restore into a new directory,
// and a server on the restored directory serves the same state.
func TestBackupRestoreCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	dir := t.TempDir()
	p := startTally(t, filepath.Join(dir, "data"))
	keys, _ := auth.NewKeys([]byte(crashSecret))
	c := &crashClient{http: httpClient(), keys: keys}
	d, err := c.call(p.url, 3, false, `mutation { createPost { id } }`, nil)
	if err != nil {
		t.Fatal(err)
	}
	var r struct{ CreatePost struct{ ID string } }
	json.Unmarshal(d, &r)
	if _, err := c.call(p.url, 4, false, `mutation($p: ID!) { likePost(postId: $p) { id } }`, map[string]any{"p": r.CreatePost.ID}); err != nil {
		t.Fatal(err)
	}
	backup := filepath.Join(dir, "tally.backup")
	if code, out, errs := runCLI(t, "backup", "-data", filepath.Join(dir, "data"), "-out", backup); code != 0 || !strings.Contains(out, "tally restore") {
		t.Fatalf("backup: %d %s %s", code, out, errs)
	}
	restored := filepath.Join(dir, "restored")
	if code, out, errs := runCLI(t, "restore", "-in", backup, "-data", restored); code != 0 {
		t.Fatalf("restore: %d %s %s", code, out, errs)
	}
	if code, _, _ := runCLI(t, "restore", "-in", backup, "-data", restored); code == 0 {
		t.Fatal("restore over a data directory that has data succeeded")
	}
	p2 := startTally(t, restored)
	d, err = c.call(p2.url, 4, false, `query($p: ID!) { post(id: $p) { counts { likes } viewerHasLiked author { id } } }`, map[string]any{"p": r.CreatePost.ID})
	if err != nil || !strings.Contains(string(d), `"likes":1`) || !strings.Contains(string(d), `"viewerHasLiked":true`) {
		t.Fatalf("restored server: %s %v", d, err)
	}
}
