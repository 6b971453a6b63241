package e2e

import (
	"bytes"
	"context"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/embedded"
	"github.com/tally-dev/tally/web/auth"
	"github.com/tally-dev/tally/web/fastpath"
	"github.com/tally-dev/tally/web/hub"
	"github.com/tally-dev/tally/web/transport"
)

// unreadReads counts a server's badge reads.
type unreadReads struct {
	engine.Store
	n atomic.Int64
}

func (u *unreadReads) Unread(ctx context.Context, v engine.UserID) (engine.Unread, error) {
	u.n.Add(1)
	return u.Store.Unread(ctx, v)
}

// TestFastPathSubscriptionsAgree: unreadChanged subscriptions over
// WebSocket on a gqlgen-only server and on the default one (plans where
// eligible), on one store, must push byte-identical payloads, first and
// after each change; plans must have served the eligible ones, and the
// viewer's plan-served subscriptions share one badge read per change.
func TestFastPathSubscriptionsAgree(t *testing.T) {
	store, err := embedded.Open(embedded.Options{})
	if err != nil {
		t.Fatal(err)
	}
	keys, err := auth.NewKeys([]byte("test-secret-0123456789"))
	if err != nil {
		t.Fatal(err)
	}
	h := hub.New(store)
	t.Cleanup(func() { h.Close(); store.Close() })
	reads := map[bool]*unreadReads{true: {Store: store}, false: {Store: store}}
	server := func(disable bool) *testServer {
		srv := httptest.NewServer(transport.NewHandler(transport.Config{Store: reads[disable], Hub: h, Keys: keys,
			Metrics: prometheus.NewRegistry(), DisableFastPath: disable}))
		t.Cleanup(srv.Close)
		return &testServer{Server: srv, store: store, keys: keys}
	}
	gq, fast := server(true), server(false)
	ctx := context.Background()
	const alice, bob = 1, 2
	post, err := store.CreatePost(ctx, alice, 0, "")
	if err != nil {
		t.Fatal(err)
	}
	selections := []struct {
		query    string
		vars     map[string]any
		eligible bool
	}{
		{`subscription { unreadChanged { id redDot unread { likes mentions comments messages system feed total } } }`, nil, true},
		{`subscription S { badge: unreadChanged { __typename ...V unread { __typename t: total } } } fragment V on Viewer { id user { id __typename } }`, nil, true},
		{`subscription($s: Boolean!) { unreadChanged { redDot @skip(if: $s) unread { ... on Unread @include(if: $s) { comments } likes } } }`, map[string]any{"s": true}, true},
		{`subscription($s: Boolean!) { unreadChanged { redDot @skip(if: $s) unread { ... on Unread @include(if: $s) { comments } likes } } }`, map[string]any{"s": false}, true},
		// Counters need a read per event: gqlgen serves it.
		{`subscription { unreadChanged { user { postCount } unread { total } } }`, nil, false},
	}
	tok := gq.token(t, alice, false)
	type pair struct{ a, b *wsClient }
	var subs []pair
	plans0, _ := fastpath.Served()
	wantPlans := uint64(0)
	for _, sel := range selections {
		var p pair
		for j, s := range []*testServer{gq, fast} {
			c, err := s.dialWS(t, tok)
			if err != nil {
				t.Fatal(err)
			}
			c.subscribe("s", sel.query, sel.vars)
			if j == 0 {
				p.a = c
			} else {
				p.b = c
			}
		}
		if sel.eligible {
			wantPlans++
		}
		subs = append(subs, p)
	}
	check := func(when string) {
		t.Helper()
		for i, p := range subs {
			ma, erra := p.a.next(2 * time.Second)
			mb, errb := p.b.next(2 * time.Second)
			if erra != nil || errb != nil {
				t.Fatalf("%s, %s: no push (gqlgen %v, fast path %v)", when, selections[i].query, erra, errb)
			}
			if ma.Type != mb.Type || !bytes.Equal(ma.Payload, mb.Payload) {
				t.Fatalf("%s, %s:\ngqlgen    %s %s\nfast path %s %s", when, selections[i].query, ma.Type, ma.Payload, mb.Type, mb.Payload)
			}
			if ma.Type != "next" {
				t.Fatalf("%s: got %s %s", when, ma.Type, ma.Payload)
			}
		}
	}
	check("first push")
	if plans, _ := fastpath.Served(); plans-plans0 < wantPlans {
		t.Fatalf("plans served %d subscriptions, want %d", plans-plans0, wantPlans)
	}
	steps := []struct {
		name string
		do   func() error
	}{
		{"like", func() error { return store.Like(ctx, bob, post) }},
		{"comment with mention", func() error { return store.Comment(ctx, bob, post, 0, []engine.UserID{alice}, "") }},
		{"red dot", func() error { return store.PushRedDot(ctx) }},
		{"mark read", func() error { return store.MarkRead(ctx, alice, engine.Likes) }},
	}
	for _, st := range steps {
		if err := st.do(); err != nil {
			t.Fatal(err)
		}
		check("after " + st.name)
	}
	// gqlgen runs the resolver per subscription (five); the fast path once
	// for the four plan-served ones plus once for the one left to gqlgen.
	if gqReads, fastReads := reads[true].n.Load(), reads[false].n.Load(); fastReads*2 > gqReads {
		t.Fatalf("badge reads: fast path %d, gqlgen %d; want at most 2 per 5", fastReads, gqReads)
	} else {
		t.Logf("badge reads over %d changes: gqlgen %d, fast path %d", len(steps), gqReads, fastReads)
	}
}

// An anonymous subscription fails the same way on both paths.
func TestFastPathSubscriptionNeedsViewer(t *testing.T) {
	store, err := embedded.Open(embedded.Options{})
	if err != nil {
		t.Fatal(err)
	}
	keys, _ := auth.NewKeys([]byte("test-secret-0123456789"))
	h := hub.New(store)
	t.Cleanup(func() { h.Close(); store.Close() })
	var got [2][]byte
	for i, disable := range []bool{true, false} {
		srv := httptest.NewServer(transport.NewHandler(transport.Config{Store: store, Hub: h, Keys: keys, DisableFastPath: disable}))
		t.Cleanup(srv.Close)
		s := &testServer{Server: srv, store: store, keys: keys}
		c, err := s.dialWS(t, "")
		if err != nil {
			t.Fatal(err)
		}
		c.subscribe("s", `subscription { unreadChanged { redDot } }`, nil)
		m, err := c.next(2 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		got[i] = append([]byte(m.Type+" "), m.Payload...)
	}
	if !bytes.Equal(got[0], got[1]) || !bytes.Contains(got[0], []byte("UNAUTHENTICATED")) {
		t.Fatalf("gqlgen %s\nfast path %s", got[0], got[1])
	}
}
