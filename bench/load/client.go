package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/web/auth"
)

// The operations the load mixes, written as a client app would send them.
const (
	feedQuery     = `query Feed($ids: [ID!]!) { posts(ids: $ids) { id author { id postCount followerCount followingCount } counts { likes comments reposts views favorites } viewerHasLiked viewerHasFavorited } }`
	badgeQuery    = `query Badge { viewer { unread { mentions comments likes messages system feed total } redDot } }`
	likeMutation  = `mutation Like($p: ID!) { likePost(postId: $p) { id counts { likes } viewerHasLiked } }`
	favMutation   = `mutation Fav($p: ID!) { favoritePost(postId: $p) { id counts { favorites } viewerHasFavorited } }`
	commentMut    = `mutation Comment($p: ID!, $k: String) { commentOnPost(postId: $p, idempotencyKey: $k) { id counts { comments } } }`
	viewsMutation = `mutation Views($ids: [ID!]!) { recordViews(postIds: $ids) }`
	createPostMut = `mutation NewPost($k: String) { createPost(idempotencyKey: $k) { id } }`
	followMut     = `mutation Follow($u: ID!) { follow(userId: $u) { id } }`
	publishMut    = `mutation Publish($t: String!, $b: String!, $k: String) { publishSystemNotification(title: $t, body: $b, idempotencyKey: $k) { id } }`
	redDotMut     = `mutation RedDot { pushRedDot }`
	readbackQuery = `query Readback($ids: [ID!]!) { posts(ids: $ids) { id author { id postCount followerCount followingCount } counts { likes comments reposts views favorites } } }`
	subscription  = `subscription Badges { unreadChanged { unread { mentions comments likes messages system feed total } redDot } }`
)

// Reactions. A feed that shows reactions asks for every kind's count and
// the viewer's kind where it asked for viewerHasLiked; the comparison of
// pages asks for either alone, as e2e's BenchmarkReactionPageHandler does.
const (
	reactMutation          = `mutation React($p: ID!, $k: String!) { reactToPost(postId: $p, kind: $k) { id viewerReaction } }`
	unreactMutation        = `mutation Unreact($p: ID!) { unreactToPost(postId: $p) { id viewerReaction } }`
	kindsQuery             = `query Kinds($ids: [ID!]!) { posts(ids: $ids) { reactions { kind } } }`
	feedReactionsQuery     = `query Feed($ids: [ID!]!) { posts(ids: $ids) { id author { id postCount followerCount followingCount } counts { likes comments reposts views favorites } reactions { kind count } viewerReaction viewerHasFavorited } }`
	readbackReactionsQuery = `query Readback($ids: [ID!]!) { posts(ids: $ids) { id author { id postCount followerCount followingCount } counts { likes comments reposts views favorites } reactions { kind count } } }`
	viewerReactionQuery    = `query Mine($ids: [ID!]!) { posts(ids: $ids) { id viewerReaction } }`
	viewerLikedQuery       = `query Mine($ids: [ID!]!) { posts(ids: $ids) { id viewerHasLiked } }`
	countsPageQuery        = `query Page($ids: [ID!]!) { posts(ids: $ids) { id counts { likes comments reposts views favorites } viewerHasLiked } }`
	reactionsPageQuery     = `query Page($ids: [ID!]!) { posts(ids: $ids) { id reactions { kind count } viewerReaction } }`
)

// gql sends GraphQL requests over HTTP to one server.
type gql struct {
	http *http.Client
	url  string // …/query
}

func newGQL(base string, conns int) *gql {
	tr := &http.Transport{
		MaxIdleConns:        conns * 2,
		MaxIdleConnsPerHost: conns * 2,
		IdleConnTimeout:     time.Minute,
		DisableCompression:  true,
	}
	return &gql{http: &http.Client{Transport: tr, Timeout: 30 * time.Second}, url: base + "/query"}
}

// reply is one response: its HTTP status and body, or a transport error.
type reply struct {
	status int
	body   []byte
	err    error
}

// post sends body; buf is reused for the response so that a client's loop
// does not allocate a response buffer per request.
func (g *gql) post(ctx context.Context, token string, body []byte, buf *bytes.Buffer) reply {
	req, err := http.NewRequestWithContext(ctx, "POST", g.url, bytes.NewReader(body))
	if err != nil {
		return reply{err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := g.http.Do(req)
	if err != nil {
		return reply{err: err}
	}
	defer resp.Body.Close()
	buf.Reset()
	if _, err := io.Copy(buf, resp.Body); err != nil {
		return reply{status: resp.StatusCode, err: err}
	}
	return reply{status: resp.StatusCode, body: buf.Bytes()}
}

// request marshals a GraphQL request body.
func request(query string, vars map[string]any) []byte {
	b, err := json.Marshal(map[string]any{"query": query, "variables": vars})
	if err != nil {
		panic(err)
	}
	return b
}

// The request bodies of the pages up to their ids (appendIDsRequest).
var (
	feedPrefix          = idsPrefix(feedQuery)
	feedReactionsPrefix = idsPrefix(feedReactionsQuery)
	countsPagePrefix    = idsPrefix(countsPageQuery)
	reactionsPagePrefix = idsPrefix(reactionsPageQuery)
)

func idsPrefix(query string) []byte {
	q, _ := json.Marshal(query)
	return append(append([]byte(`{"query":`), q...), `,"variables":{"ids":[`...)
}

// appendIDsRequest builds {"query": q, "variables": {"ids": [...]}} with
// prefix holding everything up to the ids; ids are decimal, so they need no
// escaping.
func appendIDsRequest(dst, prefix []byte, ids []string) []byte {
	dst = append(dst[:0], prefix...)
	for i, id := range ids {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, '"')
		dst = append(dst, id...)
		dst = append(dst, '"')
	}
	return append(dst, "]}}"...)
}

// Outcome codes besides GraphQL's extensions.code.
const (
	codeTransport   = "TRANSPORT"    // no response (connection refused or cut, timeout)
	codeNoCode      = "NO_CODE"      // an error without extensions.code
	codeBadResponse = "BAD_RESPONSE" // 200 without the expected data
)

type gqlError struct {
	Message    string `json:"message"`
	Extensions struct {
		Code string `json:"code"`
	} `json:"extensions"`
}

// classify returns "" for a response with data and no errors, else the
// code of the first error: GraphQL's extensions.code, HTTP_<status> for a
// non-GraphQL answer, or one of the codes above.
func classify(r reply) string {
	if r.err != nil {
		return codeTransport
	}
	if !bytes.Contains(r.body, []byte(`"errors"`)) {
		if r.status != http.StatusOK {
			return "HTTP_" + strconv.Itoa(r.status)
		}
		return ""
	}
	var resp struct {
		Errors []gqlError `json:"errors"`
	}
	if json.Unmarshal(r.body, &resp) != nil || len(resp.Errors) == 0 {
		if r.status != http.StatusOK {
			return "HTTP_" + strconv.Itoa(r.status)
		}
		return "" // "errors" appeared inside a string value
	}
	if c := resp.Errors[0].Extensions.Code; c != "" {
		return c
	}
	return codeNoCode
}

// ambiguous reports whether a write that failed with code may still have
// been applied: no answer, the store unreachable (UNAVAILABLE: "may have
// been applied", API.md), or an internal failure. Every other refusal
// (RATE_LIMITED, BAD_USER_INPUT, NOT_FOUND, FORBIDDEN, UNAUTHENTICATED)
// applies nothing, by the API's contract.
func ambiguous(code string) bool {
	return code == codeTransport || code == "UNAVAILABLE" || code == "INTERNAL" || code == codeBadResponse ||
		(len(code) == 8 && code[:6] == "HTTP_5")
}

// counts is the per-kind tally of one phase: latencies of successful
// requests, and errors by code.
type counts struct {
	ok    uint64
	lat   hist
	errs  map[string]uint64
	errEx map[string]string // one message per code, to show what it was
}

func (c *counts) fail(code, example string) {
	if c.errs == nil {
		c.errs = map[string]uint64{}
		c.errEx = map[string]string{}
	}
	c.errs[code]++
	if _, ok := c.errEx[code]; !ok {
		c.errEx[code] = example
	}
}

func (c *counts) merge(o *counts) {
	c.ok += o.ok
	c.lat.merge(&o.lat)
	for k, v := range o.errs {
		if c.errs == nil {
			c.errs = map[string]uint64{}
			c.errEx = map[string]string{}
		}
		c.errs[k] += v
		if _, ok := c.errEx[k]; !ok {
			c.errEx[k] = o.errEx[k]
		}
	}
}

func (c *counts) failed() uint64 {
	var n uint64
	for _, v := range c.errs {
		n += v
	}
	return n
}

// errExample describes a failed reply in one short line.
func errExample(r reply) string {
	if r.err != nil {
		return r.err.Error()
	}
	s := string(r.body)
	if len(s) > 160 {
		s = s[:160] + "…"
	}
	return fmt.Sprintf("HTTP %d %s", r.status, s)
}

// tokens hands out bearer tokens per user id.
type tokens struct {
	sign  func(user uint64, admin bool) (string, error)
	mu    sync.Mutex
	cache map[uint64]string
}

// setup makes t sign each user's token with secret (HS256, as tally
// verifies them), or, without a secret, hand out token for every user.
func (t *tokens) setup(secret, token string) error {
	if secret == "" {
		t.sign = func(uint64, bool) (string, error) { return token, nil }
		return nil
	}
	keys, err := auth.NewKeys([]byte(secret))
	if err != nil {
		return err
	}
	t.sign = func(u uint64, admin bool) (string, error) { return keys.Sign(engine.UserID(u), admin, 0) }
	return nil
}

func (t *tokens) user(u uint64) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if tok, ok := t.cache[u]; ok {
		return tok
	}
	tok, err := t.sign(u, false)
	if err != nil {
		panic(err)
	}
	t.cache[u] = tok
	return tok
}
