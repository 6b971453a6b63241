package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/embedded"
	"github.com/tally-dev/tally/web/auth"
	"github.com/tally-dev/tally/web/hub"
	"github.com/tally-dev/tally/web/transport"
)

// BenchmarkUnreadBroadcast: one system notification pushes a new badge to
// every open unreadChanged subscription (pushSubscribers users, one
// WebSocket each, on loopback); an iteration ends when every subscriber
// has read its push. fastpath encodes each push with the subscription's
// plan; gqlgen runs the executor per push. µs/push is the wall time of a
// broadcast over the subscriber count, clients' reading included, on the
// machine's two cores.
func BenchmarkUnreadBroadcast(b *testing.B) {
	for _, gqlgenOnly := range []bool{false, true} {
		b.Run(map[bool]string{false: "fastpath", true: "gqlgen"}[gqlgenOnly], func(b *testing.B) {
			benchBroadcast(b, transport.Config{DisableFastPath: gqlgenOnly})
		})
	}
}

const pushSubscribers = 500

func benchBroadcast(b *testing.B, cfg transport.Config) {
	store, err := embedded.Open(embedded.Options{})
	if err != nil {
		b.Fatal(err)
	}
	keys, err := auth.NewKeys([]byte("test-secret-0123456789"))
	if err != nil {
		b.Fatal(err)
	}
	h := hub.New(store)
	cfg.Store, cfg.Hub, cfg.Keys = store, h, keys
	srv := httptest.NewServer(transport.NewHandler(cfg))
	defer func() { srv.Close(); h.Close(); store.Close() }()
	ctx, cancel := context.WithCancel(b.Context())
	defer cancel()

	url := "ws" + strings.TrimPrefix(srv.URL, "http") + "/query"
	got := make(chan int, pushSubscribers)
	var wg sync.WaitGroup
	for u := range pushSubscribers {
		tok, _ := keys.Sign(engine.UserID(1000+u), false, 0)
		conn, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{Subprotocols: []string{"graphql-transport-ws"}})
		if err != nil {
			b.Fatal(err)
		}
		conn.SetReadLimit(1 << 20)
		write := func(v any) {
			p, _ := json.Marshal(v)
			if err := conn.Write(ctx, websocket.MessageText, p); err != nil {
				b.Fatal(err)
			}
		}
		write(map[string]any{"type": "connection_init", "payload": map[string]string{"Authorization": "Bearer " + tok}})
		write(map[string]any{"id": "1", "type": "subscribe", "payload": map[string]any{
			"query": `subscription { unreadChanged { redDot unread { system total } } }`}})
		wg.Go(func() {
			defer conn.CloseNow()
			for {
				_, msg, err := conn.Read(ctx)
				if err != nil {
					return
				}
				var m struct{ Type string }
				json.Unmarshal(msg, &m)
				switch m.Type {
				case "next":
					got <- u
				case "ping":
					write(map[string]any{"type": "pong"})
				case "connection_ack", "pong":
				default:
					b.Errorf("subscriber %d: %s", u, msg)
					return
				}
			}
		})
	}
	waitAll := func() {
		deadline := time.After(30 * time.Second)
		for range pushSubscribers {
			select {
			case <-got:
			case <-deadline:
				b.Fatal("a push did not arrive within 30s")
			}
		}
	}
	waitAll() // every subscription's first push
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if _, err := store.PublishNotification(ctx, "hello", fmt.Sprint(i), ""); err != nil {
			b.Fatal(err)
		}
		waitAll()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/pushSubscribers/1000, "µs/push")
	cancel()
	wg.Wait()
}
