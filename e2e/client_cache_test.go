package e2e

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/tally-dev/tally/web/clients"
)

// cacheRun is what web/clients/{apollo,urql}-cache.mjs print.
type cacheRun struct {
	Before, After         *int64
	ViewerHasLiked        *bool
	Posts                 int
	Complete, Stale       bool
	RequestsAfterMutation int
}

// runCacheScript makes a page of three fresh posts by user 2 and runs the
// client script as user 5, who likes the first.
func runCacheScript(t *testing.T, s *testServer, script string, env ...string) cacheRun {
	t.Helper()
	var ids []string
	for range 3 {
		ids = append(ids, s.createPost(t, 2))
	}
	out := clients.Run(t, script, time.Minute, append([]string{
		"TALLY_URL=" + s.URL + "/query",
		"TALLY_TOKEN=" + s.token(t, 5, false),
		"TALLY_POSTS=" + strings.Join(ids, ","),
	}, env...)...)
	var r cacheRun
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &r); err != nil {
		t.Fatalf("%s printed %q: %v", script, out, err)
	}
	return r
}

// A normalising cache with no configuration keeps a cached feed whole
// across a like: the mutation selects counts { id likes }, the cache
// merges them into the PostCounts the feed references, and the feed read
// from the cache alone shows the new count, with no request.
func TestApolloCacheKeepsFeed(t *testing.T) {
	s := newTestServer(t)
	r := runCacheScript(t, s, "apollo-cache.mjs")
	if r.Before == nil || r.After == nil || *r.After != *r.Before+1 || r.ViewerHasLiked == nil || !*r.ViewerHasLiked {
		t.Errorf("Apollo's cached feed after the like: %+v, want likes +1 and viewerHasLiked", r)
	}
	if !r.Complete || r.Posts != 3 || r.RequestsAfterMutation != 0 {
		t.Errorf("Apollo's cached feed: complete=%v posts=%d requests=%d, want complete, 3 posts, no request",
			r.Complete, r.Posts, r.RequestsAfterMutation)
	}

	// The control: counts selected without their id cannot be merged, and
	// the cached feed is no longer complete. This is what clients saw
	// before PostCounts had an id, and it shows the check above can fail.
	r = runCacheScript(t, s, "apollo-cache.mjs", "TALLY_MUTATION_WITHOUT_ID=1")
	if r.Complete || r.After != nil {
		t.Errorf("without counts.id Apollo's cached feed stayed complete (%+v): the script no longer tests the identity", r)
	}
}

func TestUrqlGraphcacheKeepsFeed(t *testing.T) {
	s := newTestServer(t)
	r := runCacheScript(t, s, "urql-cache.mjs")
	if r.Before == nil || r.After == nil || *r.After != *r.Before+1 || r.ViewerHasLiked == nil || !*r.ViewerHasLiked {
		t.Errorf("graphcache's cached feed after the like: %+v, want likes +1 and viewerHasLiked", r)
	}
	if r.Posts != 3 || r.Stale || r.RequestsAfterMutation != 0 {
		t.Errorf("graphcache's cached feed: posts=%d stale=%v requests=%d, want 3 posts from the cache, no request",
			r.Posts, r.Stale, r.RequestsAfterMutation)
	}
	r = runCacheScript(t, s, "urql-cache.mjs", "TALLY_MUTATION_WITHOUT_ID=1")
	if r.After != nil {
		t.Errorf("without counts.id graphcache's cached feed stayed complete (%+v): the script no longer tests the identity", r)
	}
}
