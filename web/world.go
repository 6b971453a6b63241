package web

import (
	"encoding/json"
	"errors"
	"io/fs"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/tally-dev/tally/web/demoseed"
)

// world is the demo app's own content service: the demoseed.Summary of
// the seeded world, extended by the reposts and messages demo users make
// (a Tally client learns about new messages from its unread badge, then
// asks the app which ones they are). It holds ids only; every count,
// author, text and permission still comes from Tally, so an id posted
// here that Tally does not know, or does not let the viewer see, shows
// nothing. Registrations are unauthenticated, so the lists are capped.
type world struct {
	dir string // where the Summary is saved; "" keeps it in memory

	mu  sync.Mutex
	sum demoseed.Summary
}

// Caps on what demo users can add.
const (
	maxWorldPosts    = 2000
	maxWorldMessages = 2000
)

func openWorld(dir string) *world {
	w := &world{dir: dir}
	if dir == "" {
		return w
	}
	sum, err := demoseed.Load(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		slog.Info("web: no demo world in the data directory; run `tally demo-seed` to make one", "dir", dir)
	case err != nil:
		slog.Error("web: demo world unreadable; the demo starts empty", "err", err)
	default:
		w.sum = sum
	}
	return w
}

// recentPosts returns up to n of the newest seeded originals.
func (w *world) recentPosts(n int) []demoseed.ID {
	w.mu.Lock()
	defer w.mu.Unlock()
	var ids []demoseed.ID
	for i := len(w.sum.Posts) - 1; i >= 0 && len(ids) < n; i-- {
		if p := w.sum.Posts[i]; p.RepostOf == 0 {
			ids = append(ids, p.ID)
		}
	}
	return ids
}

func (h *handler) worldJSON(w http.ResponseWriter, r *http.Request) {
	h.world.mu.Lock()
	sum := h.world.sum
	// Lists are [] rather than null, so a page can map over them at once.
	sum.Users = nonNil(sum.Users)
	sum.Posts = nonNil(sum.Posts)
	sum.Groups = nonNil(sum.Groups)
	sum.Messages = nonNil(sum.Messages)
	sum.Notifications = nonNil(sum.Notifications)
	b, err := json.Marshal(struct {
		Dev         bool   `json:"dev"`
		GraphQLPath string `json:"graphqlPath"`
		// Seeded says whether `tally demo-seed` made this world; SeedCommand
		// is how to do it for this server's data directory (dev mode only:
		// a production server does not publish its paths).
		Seeded      bool   `json:"seeded"`
		SeedCommand string `json:"seedCommand,omitempty"`
		demoseed.Summary
	}{h.opts.DevToken != nil, h.opts.GraphQLPath, len(sum.Users) > 0, h.seedCommand(), sum})
	h.world.mu.Unlock()
	if err != nil {
		jsonError(w, "could not encode the world", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Write(b)
}

// seedCommand is the command that seeds this server's demo world, in dev
// mode: its data directory, and its reaction kinds when they are more
// than like (demo-seed opens the store with them and reacts with each).
func (h *handler) seedCommand() string {
	if h.opts.DevToken == nil {
		return ""
	}
	cmd := "tally demo-seed"
	if h.opts.DataDir != "" {
		cmd += " -data " + shellQuote(h.opts.DataDir)
	}
	if len(h.opts.Reactions) > 1 {
		cmd += " -reactions " + shellQuote(strings.Join(h.opts.Reactions, ","))
	}
	return cmd
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("./_-+:@,=", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// decodeSmall decodes a small JSON body into v.
func decodeSmall(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1024))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		jsonError(w, "body must be a small JSON object with string ids", http.StatusBadRequest)
		return false
	}
	return true
}

// addPost registers a repost made in the demo: {"id": "...", "repostOf": "..."}.
func (h *handler) addPost(w http.ResponseWriter, r *http.Request) {
	var p struct {
		ID       demoseed.ID `json:"id"`
		RepostOf demoseed.ID `json:"repostOf"`
	}
	if !decodeSmall(w, r, &p) {
		return
	}
	if p.ID == 0 || p.RepostOf == 0 {
		jsonError(w, "id and repostOf are required", http.StatusBadRequest)
		return
	}
	wd := h.world
	wd.mu.Lock()
	defer wd.mu.Unlock()
	known := func(id demoseed.ID) bool {
		return slices.ContainsFunc(wd.sum.Posts, func(q demoseed.Post) bool { return q.ID == id })
	}
	if !known(p.RepostOf) {
		jsonError(w, "repostOf is not a post of the demo world", http.StatusNotFound)
		return
	}
	if !known(p.ID) {
		wd.sum.Posts = append(wd.sum.Posts, demoseed.Post{ID: p.ID, RepostOf: p.RepostOf})
		if n := len(wd.sum.Posts) - maxWorldPosts; n > 0 {
			wd.sum.Posts = slices.Delete(wd.sum.Posts, 0, n)
		}
		wd.saveLocked()
	}
	w.WriteHeader(http.StatusNoContent)
}

// addMessage registers a message sent in the demo: {"id": "...", "group": "..."}.
func (h *handler) addMessage(w http.ResponseWriter, r *http.Request) {
	var m demoseed.Message
	if !decodeSmall(w, r, &m) {
		return
	}
	if m.ID == 0 || m.Group == 0 {
		jsonError(w, "id and group are required", http.StatusBadRequest)
		return
	}
	wd := h.world
	wd.mu.Lock()
	defer wd.mu.Unlock()
	if !slices.ContainsFunc(wd.sum.Groups, func(g demoseed.Group) bool { return g.ID == m.Group }) {
		jsonError(w, "group is not a group of the demo world", http.StatusNotFound)
		return
	}
	if !slices.Contains(wd.sum.Messages, m) {
		wd.sum.Messages = append(wd.sum.Messages, m)
		if n := len(wd.sum.Messages) - maxWorldMessages; n > 0 {
			wd.sum.Messages = slices.Delete(wd.sum.Messages, 0, n)
		}
		wd.saveLocked()
	}
	w.WriteHeader(http.StatusNoContent)
}

// saveLocked writes the world back to the data directory, if it has one.
// A failed save is logged: the world in memory stays right.
func (w *world) saveLocked() {
	if w.dir == "" {
		return
	}
	if err := w.sum.Save(w.dir); err != nil {
		slog.Error("web: saving the demo world", "err", err)
	}
}
