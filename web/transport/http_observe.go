package transport

import (
	"bufio"
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tally-dev/tally/engine"
)

// requestInfo is what the access log says about a request beyond HTTP:
// the GraphQL operation and the user. The GraphQL layer fills it in as it
// learns them (the handler's front the user, the metrics extension the
// operation); the access log reads it when the response is done.
type requestInfo struct {
	mu     sync.Mutex
	opType string
	opName string
	user   engine.UserID
}

type requestInfoKey struct{}

func requestInfoFrom(ctx context.Context) *requestInfo {
	ri, _ := ctx.Value(requestInfoKey{}).(*requestInfo)
	return ri
}

func (ri *requestInfo) setOperation(typ, name string) {
	ri.mu.Lock()
	if ri.opType == "" {
		ri.opType, ri.opName = typ, name
	}
	ri.mu.Unlock()
}

// noteUser records the request's user for the access log.
func noteUser(ctx context.Context, u engine.UserID) {
	if ri := requestInfoFrom(ctx); ri != nil {
		ri.mu.Lock()
		ri.user = u
		ri.mu.Unlock()
	}
}

// ObserveHTTP wraps the server's routes: an access log line per request
// at debug level (method, path, operation, status, duration, user), HTTP
// responses by route and status (tally_http_responses_total, which also
// counts requests refused before GraphQL: 400, 405, 413, 415), and the
// gauge of open WebSockets (tally_websockets_open), counted from the
// hijack of the connection to the end of its handler, or to the end of
// the socket when the handler hands it to an event loop (detachSocket).
// reg may be nil.
func ObserveHTTP(reg prometheus.Registerer, next http.Handler) http.Handler {
	sockets := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "tally_websockets_open",
		Help: "Open WebSocket connections (GraphQL subscriptions).",
	})
	responses := &responseCounters{vec: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tally_http_responses_total",
		Help: "HTTP responses by route (/query, /healthz, /readyz, /metrics, or other) and status code.",
	}, []string{"route", "code"}), byKey: map[int]prometheus.Counter{}}
	if reg != nil {
		reg.MustRegister(sockets, responses.vec)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		o := &observed{rec: statusRecorder{ResponseWriter: w, sockets: sockets}}
		ri, rec := &o.info, &o.rec
		defer func() {
			if rec.hijacked && !rec.detached {
				sockets.Dec()
			}
		}()
		next.ServeHTTP(rec, r.WithContext(context.WithValue(r.Context(), requestInfoKey{}, ri)))
		status := rec.status
		if rec.hijacked {
			status = http.StatusSwitchingProtocols
		} else if status == 0 {
			status = http.StatusOK
		}
		responses.inc(r.URL.Path, status)
		if !slog.Default().Enabled(r.Context(), slog.LevelDebug) {
			return
		}
		ri.mu.Lock()
		typ, name, user := ri.opType, ri.opName, ri.user
		ri.mu.Unlock()
		attrs := []slog.Attr{
			slog.String("method", r.Method),
			slog.String("path", r.URL.Path),
			slog.Int("status", status),
			slog.Duration("duration", time.Since(start)),
			slog.Int64("bytes", rec.bytes),
		}
		if typ != "" {
			attrs = append(attrs, slog.String("op_type", typ), slog.String("op_name", name))
		}
		userAttr := ""
		if user != 0 {
			userAttr = strconv.FormatUint(uint64(user), 10)
		}
		attrs = append(attrs, slog.String("user", userAttr), slog.String("remote", r.RemoteAddr))
		slog.LogAttrs(r.Context(), slog.LevelDebug, "http request", attrs...)
	})
}

// observed is one request's recorder and access-log record, allocated
// together.
type observed struct {
	rec  statusRecorder
	info requestInfo
}

// responseCounters is tally_http_responses_total with its children kept
// by route and status, so that counting a response neither formats the
// status nor hashes label values.
type responseCounters struct {
	vec   *prometheus.CounterVec
	mu    sync.RWMutex
	byKey map[int]prometheus.Counter
}

// routes bound the route label to the server's fixed endpoints: any other
// path (GraphiQL, the demo, a scanner's guesses) is "other", the last.
var routes = []string{"/query", "/healthz", "/readyz", "/metrics", "other"}

func (c *responseCounters) inc(path string, status int) {
	route := len(routes) - 1
	for i, p := range routes[:route] {
		if p == path {
			route = i
			break
		}
	}
	key := route*1000 + status
	c.mu.RLock()
	ctr := c.byKey[key]
	c.mu.RUnlock()
	if ctr == nil {
		ctr = c.vec.WithLabelValues(routes[route], strconv.Itoa(status))
		c.mu.Lock()
		c.byKey[key] = ctr
		c.mu.Unlock()
	}
	ctr.Inc()
}

// statusRecorder remembers the status and size written, and counts a
// hijacked connection (a WebSocket) as an open socket.
type statusRecorder struct {
	http.ResponseWriter
	status   int
	bytes    int64
	hijacked bool
	detached bool // the socket outlives the handler: see detachSocket
	sockets  prometheus.Gauge
}

// detachSocket is for a handler whose hijacked connection outlives it (a
// WebSocket served by an event loop): the socket stays counted in
// tally_websockets_open until the returned func is called (once; it is a
// no-op when w is not ObserveHTTP's).
func detachSocket(w http.ResponseWriter) (done func()) {
	for {
		if s, ok := w.(*statusRecorder); ok {
			if !s.hijacked || s.detached {
				return func() {}
			}
			s.detached = true
			// Only the gauge: the recorder holds net/http's response, and
			// through it the connection's buffers and the request.
			gauge := s.sockets
			var once sync.Once
			return func() { once.Do(gauge.Dec) }
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return func() {}
		}
		w = u.Unwrap()
	}
}

func (s *statusRecorder) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	n, err := s.ResponseWriter.Write(b)
	s.bytes += int64(n)
	return n, err
}

func (s *statusRecorder) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

func (s *statusRecorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	hj, ok := s.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, errors.New("the connection cannot be hijacked")
	}
	c, rw, err := hj.Hijack()
	if err == nil && !s.hijacked {
		s.hijacked = true
		s.sockets.Inc()
	}
	return c, rw, err
}
