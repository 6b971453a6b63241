package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/tally-dev/tally/web/auth"
)

// The reference server is the peer of the issue: what the same feed page
// costs written by hand with net/http and encoding/json, no GraphQL layer.
// It decodes the same request body ({query, variables: {ids}}), checks the
// same bearer token (HS256 with TALLY_JWT_SECRET, through the project's
// auth package, as any real handler must), looks each post up in a Go map
// and encodes the same JSON shape Tally answers the tool's feed query with
// — the tool checks that both give the same bytes for the same page. It
// serves only that page; it knows no GraphQL.
//
// Its data comes from the tool: POST /load with a refWorld (the posts as
// Tally counted them, and the like and favorite pairs).

type refCounts struct {
	Likes     int64 `json:"likes"`
	Comments  int64 `json:"comments"`
	Reposts   int64 `json:"reposts"`
	Views     int64 `json:"views"`
	Favorites int64 `json:"favorites"`
}

type refUser struct {
	ID             string `json:"id"`
	PostCount      int64  `json:"postCount"`
	FollowerCount  int64  `json:"followerCount"`
	FollowingCount int64  `json:"followingCount"`
}

type refPost struct {
	ID     string    `json:"id"`
	Author *refUser  `json:"author"`
	Counts refCounts `json:"counts"`
}

// refWorld is the body of POST /load.
type refWorld struct {
	Posts     []refPost   `json:"posts"`
	Likes     [][2]uint64 `json:"likes"` // user, post
	Favorites [][2]uint64 `json:"favorites"`
}

// refPostOut is one element of the response, fields in the order of the
// tool's feed query.
type refPostOut struct {
	ID                 string    `json:"id"`
	Author             *refUser  `json:"author"`
	Counts             refCounts `json:"counts"`
	ViewerHasLiked     bool      `json:"viewerHasLiked"`
	ViewerHasFavorited bool      `json:"viewerHasFavorited"`
}

type refServer struct {
	keys  *auth.Keys // nil: every request is anonymous
	mu    sync.RWMutex
	posts map[string]*refPost
	ids   map[string]uint64
	liked map[[2]uint64]struct{}
	faved map[[2]uint64]struct{}
}

func (s *refServer) load(w http.ResponseWriter, r *http.Request) {
	var world refWorld
	if err := json.NewDecoder(r.Body).Decode(&world); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	posts := make(map[string]*refPost, len(world.Posts))
	ids := make(map[string]uint64, len(world.Posts))
	for i := range world.Posts {
		p := &world.Posts[i]
		posts[p.ID] = p
		ids[p.ID] = postID(p.ID)
	}
	liked := make(map[[2]uint64]struct{}, len(world.Likes))
	for _, l := range world.Likes {
		liked[l] = struct{}{}
	}
	faved := make(map[[2]uint64]struct{}, len(world.Favorites))
	for _, f := range world.Favorites {
		faved[f] = struct{}{}
	}
	s.mu.Lock()
	s.posts, s.ids, s.liked, s.faved = posts, ids, liked, faved
	s.mu.Unlock()
	fmt.Fprintf(w, "loaded %d posts\n", len(posts))
}

type refError struct {
	Message    string            `json:"message"`
	Extensions map[string]string `json:"extensions"`
}

func refFail(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{"errors": []refError{{Message: msg, Extensions: map[string]string{"code": code}}}})
}

func (s *refServer) query(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Query         string `json:"query"`
		OperationName string `json:"operationName"`
		Variables     struct {
			IDs []string `json:"ids"`
		} `json:"variables"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&req); err != nil {
		refFail(w, http.StatusBadRequest, "BAD_USER_INPUT", "the body is not a GraphQL request")
		return
	}
	if len(req.Variables.IDs) > 100 {
		refFail(w, http.StatusOK, "BAD_USER_INPUT", "at most 100 ids")
		return
	}
	var viewer uint64
	if s.keys != nil {
		p, _, err := s.keys.FromHeader(r.Header.Get("Authorization"))
		if err != nil {
			refFail(w, http.StatusOK, "UNAUTHENTICATED", "invalid or expired token")
			return
		}
		viewer = uint64(p.User)
	}
	var resp struct {
		Data struct {
			Posts []*refPostOut `json:"posts"`
		} `json:"data"`
	}
	resp.Data.Posts = make([]*refPostOut, len(req.Variables.IDs))
	s.mu.RLock()
	for i, id := range req.Variables.IDs {
		p, ok := s.posts[id]
		if !ok {
			continue // null, as Tally answers an unknown post
		}
		out := &refPostOut{ID: p.ID, Author: p.Author, Counts: p.Counts}
		if viewer != 0 {
			key := [2]uint64{viewer, s.ids[id]}
			_, out.ViewerHasLiked = s.liked[key]
			_, out.ViewerHasFavorited = s.faved[key]
		}
		resp.Data.Posts[i] = out
	}
	s.mu.RUnlock()
	b, err := json.Marshal(&resp)
	if err != nil {
		refFail(w, http.StatusInternalServerError, "INTERNAL", "encoding failed")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(b)
}

// serveReference runs the reference server until it is killed.
func serveReference(addr string) error {
	s := &refServer{posts: map[string]*refPost{}}
	if secret := os.Getenv("TALLY_JWT_SECRET"); secret != "" {
		k, err := auth.NewKeys([]byte(secret))
		if err != nil {
			return err
		}
		s.keys = k
	} else {
		log.Print("reference: TALLY_JWT_SECRET is unset: every request is anonymous (no viewer flags)")
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /query", s.query)
	mux.HandleFunc("POST /load", s.load)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") })
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 2 * time.Minute}
	log.Printf("reference server on http://%s", addr)
	err := srv.ListenAndServe()
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}
