package e2e

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/web/transport"
)

// frameConn is a bare graphql-transport-ws client on a TCP connection: no
// goroutine and no buffers once it is set up, so that what a benchmark
// measures in this process is the server's.
type frameConn struct {
	net.Conn
	br *bufio.Reader
}

func dialFrames(addr string, rcvbuf int) (*frameConn, error) {
	d := net.Dialer{}
	if rcvbuf > 0 {
		d.Control = func(_, _ string, c syscall.RawConn) error {
			return c.Control(func(fd uintptr) {
				syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, rcvbuf)
			})
		}
	}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(c, "GET /query HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"+
		"Sec-WebSocket-Protocol: graphql-transport-ws\r\n\r\n", addr)
	fc := &frameConn{Conn: c, br: bufio.NewReaderSize(c, 512)}
	resp, err := http.ReadResponse(fc.br, nil)
	if err != nil {
		c.Close()
		return nil, err
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		c.Close()
		return nil, fmt.Errorf("upgrade: %s", resp.Status)
	}
	return fc, nil
}

// send writes one masked text frame (mask key 0: the payload goes as is).
func (c *frameConn) send(v any) error {
	p, _ := json.Marshal(v)
	h := []byte{0x81}
	switch n := len(p); {
	case n < 126:
		h = append(h, 0x80|byte(n))
	case n < 1<<16:
		h = append(h, 0x80|126, byte(n>>8), byte(n))
	default:
		h = binary.BigEndian.AppendUint64(append(h, 0x80|127), uint64(n))
	}
	h = append(h, 0, 0, 0, 0)
	_, err := c.Write(append(h, p...))
	return err
}

// next reads frames until a text message of one of the types.
func (c *frameConn) next(types ...string) error {
	for {
		var h [2]byte
		if _, err := io.ReadFull(c.br, h[:]); err != nil {
			return err
		}
		n := int64(h[1] & 0x7f)
		switch n {
		case 126:
			var b [2]byte
			if _, err := io.ReadFull(c.br, b[:]); err != nil {
				return err
			}
			n = int64(binary.BigEndian.Uint16(b[:]))
		case 127:
			var b [8]byte
			if _, err := io.ReadFull(c.br, b[:]); err != nil {
				return err
			}
			n = int64(binary.BigEndian.Uint64(b[:]))
		}
		p := make([]byte, n)
		if _, err := io.ReadFull(c.br, p); err != nil {
			return err
		}
		if h[0]&0x0f == 8 {
			return fmt.Errorf("closed: %d %s", binary.BigEndian.Uint16(p), p[2:])
		}
		var m struct{ Type string }
		if json.Unmarshal(p, &m) == nil && slices.Contains(types, m.Type) {
			return nil
		}
	}
}

func settled() (heap uint64, goroutines int) {
	heap, _, goroutines = settledStacks()
	return heap, goroutines
}

func settledStacks() (heap, stacks uint64, goroutines int) {
	var ms runtime.MemStats
	for range 3 {
		runtime.GC()
		time.Sleep(100 * time.Millisecond)
	}
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse, ms.StackInuse, runtime.NumGoroutine()
}

func rssBytes() int64 {
	b, _ := os.ReadFile("/proc/self/status")
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}

// BenchmarkWSOpenSubscriptions opens 2,000 sockets, each with one
// unreadChanged subscription of its own user, and reports the server's
// heap, goroutine stacks and goroutines per open subscription (the bare clients hold no
// goroutine; their net.Conns, a few hundred bytes each, are in the heap
// figure). Run with -benchtime=1x.
func BenchmarkWSOpenSubscriptions(b *testing.B) {
	const n = 2000
	s := newTestServerWith(b, openStore(b), transport.Config{})
	addr := s.Listener.Addr().String()
	tokens := make([]string, n)
	for i := range tokens {
		tokens[i], _ = s.keys.Sign(engine.UserID(i+1), false, 0)
	}
	for range b.N {
		heap0, stack0, g0 := settledStacks()
		conns := make([]*frameConn, 0, n)
		for _, tok := range tokens {
			c, err := dialFrames(addr, 0)
			if err != nil {
				b.Fatal(err)
			}
			conns = append(conns, c)
			c.send(map[string]any{"type": "connection_init", "payload": map[string]string{"Authorization": "Bearer " + tok}})
			if err := c.next("connection_ack"); err != nil {
				b.Fatal(err)
			}
			c.send(map[string]any{"id": "1", "type": "subscribe", "payload": map[string]string{"query": unreadSub}})
			if err := c.next("next"); err != nil {
				b.Fatal(err)
			}
			c.br = nil
		}
		heap1, stack1, g1 := settledStacks()
		b.ReportMetric(float64(int64(heap1)-int64(heap0))/n, "heapB/sub")
		b.ReportMetric(float64(int64(stack1)-int64(stack0))/n, "stackB/sub")
		b.ReportMetric(float64(g1-g0)/n, "goroutines/sub")
		for _, c := range conns {
			c.Close()
		}
		settled()
	}
}

// BenchmarkWSSlowReaders: 20 clients (each its own user, with a 4 KiB
// receive buffer) ask for 400 large results each (about 21 KB apiece, the
// schema's introspection: 8 MB a client, twice what loopback's kernel
// send buffer holds) and read nothing, for 3 s. It reports the process's peak RSS and heap
// growth and goroutines during the attack and what is still held 2 s
// after the clients are gone (the RSS figure is growth beyond what the
// process had mapped before, so run it alone: -bench WSSlowReaders). Run with -benchtime=1x.
func BenchmarkWSSlowReaders(b *testing.B) {
	const clients, perClient = 20, 400
	s := newTestServerWith(b, openStore(b), transport.Config{ComplexityLimit: 1 << 30})
	addr := s.Listener.Addr().String()
	for range b.N {
		heap0, g0 := settled()
		rss0 := rssBytes()
		conns := make([]*frameConn, 0, clients)
		for i := range clients {
			c, err := dialFrames(addr, 4096)
			if err != nil {
				b.Fatal(err)
			}
			conns = append(conns, c)
			tok, _ := s.keys.Sign(engine.UserID(i+1), false, 0)
			c.send(map[string]any{"type": "connection_init", "payload": map[string]string{"Authorization": "Bearer " + tok}})
			if err := c.next("connection_ack"); err != nil {
				b.Fatal(err)
			}
			for j := range perClient {
				c.send(map[string]any{"id": strconv.Itoa(j), "type": "subscribe", "payload": map[string]string{"query": bigQuery}})
			}
		}
		var peakRSS, peakHeap int64
		peakG := 0
		var ms runtime.MemStats
		for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
			runtime.ReadMemStats(&ms)
			peakHeap = max(peakHeap, int64(ms.HeapInuse)-int64(heap0))
			peakRSS = max(peakRSS, rssBytes()-rss0)
			peakG = max(peakG, runtime.NumGoroutine()-g0)
		}
		heldG := runtime.NumGoroutine() - g0
		for _, c := range conns {
			c.Close()
		}
		time.Sleep(2 * time.Second)
		heap2, g2 := settled()
		b.ReportMetric(float64(peakRSS)/(1<<20), "peakRSS-MiB")
		b.ReportMetric(float64(peakHeap)/(1<<20), "peakHeap-MiB")
		b.ReportMetric(float64(int64(heap2)-int64(heap0))/(1<<20), "heapAfter-MiB")
		b.ReportMetric(float64(peakG), "peak-goroutines")
		b.ReportMetric(float64(heldG), "goroutines-at-3s")
		b.ReportMetric(float64(g2-g0), "goroutines-after-close")
	}
}

// BenchmarkWSSubscriptionFlood: one client asks for 10,000 unreadChanged
// subscriptions on one socket (reading everything it is sent) and
// reports the heap and goroutines the server holds for them (with
// -ws-max-subscriptions 100, the rest are refused with RATE_LIMITED). Run with
// -benchtime=1x.
func BenchmarkWSSubscriptionFlood(b *testing.B) {
	const n = 10000
	s := newTestServerWith(b, openStore(b), transport.Config{})
	addr := s.Listener.Addr().String()
	for range b.N {
		heap0, g0 := settled()
		c, err := dialFrames(addr, 0)
		if err != nil {
			b.Fatal(err)
		}
		tok, _ := s.keys.Sign(1, false, 0)
		c.send(map[string]any{"type": "connection_init", "payload": map[string]string{"Authorization": "Bearer " + tok}})
		if err := c.next("connection_ack"); err != nil {
			b.Fatal(err)
		}
		// In rounds of 500, each answered (next or error) before the next
		// round: a client that sends faster than it reads is a slow reader,
		// dropped, which is not what this measures.
		for i := 0; i < n; i += 500 {
			for j := i; j < i+500; j++ {
				c.send(map[string]any{"id": strconv.Itoa(j), "type": "subscribe", "payload": map[string]string{"query": unreadSub}})
			}
			for range 500 {
				if err := c.next("next", "error"); err != nil {
					b.Fatal(err)
				}
			}
		}
		heap1, g1 := settled()
		b.ReportMetric(float64(int64(heap1)-int64(heap0))/(1<<20), "heap-MiB")
		b.ReportMetric(float64(g1-g0), "goroutines")
		c.Close()
		settled()
	}
}
