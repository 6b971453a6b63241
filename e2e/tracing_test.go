package e2e

import (
	"compress/gzip"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/tally-dev/tally/engine/embedded"
	"github.com/tally-dev/tally/engine/redisstore/redistest"
	"github.com/tally-dev/tally/web/tracing"
	"github.com/tally-dev/tally/web/transport"
)

// otlpReceiver is an in-process OTLP trace receiver: it keeps every span
// exported to it.
type otlpReceiver struct {
	mu    sync.Mutex
	spans []*tracepb.Span
}

func (o *otlpReceiver) add(req *coltracepb.ExportTraceServiceRequest) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, rs := range req.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			o.spans = append(o.spans, ss.Spans...)
		}
	}
}

// trace returns the spans of one trace, by name (the last of a name).
func (o *otlpReceiver) trace(traceID string) map[string]*tracepb.Span {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := map[string]*tracepb.Span{}
	for _, s := range o.spans {
		if hex.EncodeToString(s.TraceId) == traceID {
			out[s.Name] = s
		}
	}
	return out
}

func (o *otlpReceiver) named(name string) []*tracepb.Span {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []*tracepb.Span
	for _, s := range o.spans {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

// newOTLPHTTP serves OTLP/HTTP with protobuf bodies, as the
// otlptracehttp exporter sends them.
func newOTLPHTTP(t *testing.T) (*otlpReceiver, string) {
	o := &otlpReceiver{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
			http.Error(w, "not OTLP/HTTP protobuf", http.StatusBadRequest)
			return
		}
		var body io.Reader = r.Body
		if r.Header.Get("Content-Encoding") == "gzip" {
			gz, err := gzip.NewReader(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = gz
		}
		raw, err := io.ReadAll(body)
		var req coltracepb.ExportTraceServiceRequest
		if err == nil {
			err = proto.Unmarshal(raw, &req)
		}
		if err != nil {
			t.Errorf("OTLP receiver: %v", err)
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		o.add(&req)
		resp, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(resp)
	}))
	t.Cleanup(srv.Close)
	return o, srv.URL
}

type grpcReceiver struct {
	coltracepb.UnimplementedTraceServiceServer
	o *otlpReceiver
}

func (g grpcReceiver) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	g.o.add(req)
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// newOTLPGRPC serves OTLP over gRPC.
func newOTLPGRPC(t *testing.T) (*otlpReceiver, string) {
	o := &otlpReceiver{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(srv, grpcReceiver{o: o})
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	return o, "http://" + ln.Addr().String()
}

// setupTracing points the OTEL_* environment at endpoint and sets the SDK
// up as the server does.
func setupTracing(t *testing.T, endpoint, protocol string) *tracing.Provider {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
	t.Setenv("OTEL_EXPORTER_OTLP_INSECURE", "true")
	t.Setenv("OTEL_SERVICE_NAME", "tally-under-test")
	tp, err := tracing.Setup(context.Background(), "test")
	if err != nil || tp == nil {
		t.Fatalf("tracing.Setup: %v %v", tp, err)
	}
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	return tp
}

func flush(t *testing.T, tp *tracing.Provider) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := tp.ForceFlush(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestTracingOff: without an OTLP endpoint in the environment nothing is
// set up.
func TestTracingOff(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	if tp, err := tracing.Setup(context.Background(), "test"); tp != nil || err != nil {
		t.Fatalf("tracing on without an endpoint: %v %v", tp, err)
	}
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
	t.Setenv("OTEL_SDK_DISABLED", "true")
	if tp, _ := tracing.Setup(context.Background(), "test"); tp != nil {
		t.Fatal("tracing on with OTEL_SDK_DISABLED=true")
	}
	t.Setenv("OTEL_SDK_DISABLED", "")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
	if _, err := tracing.Setup(context.Background(), "test"); err == nil || !strings.Contains(err.Error(), "http/protobuf or grpc") {
		t.Fatalf("http/json: %v", err)
	}
}

// TestTracingTraceparent: a query carrying a W3C traceparent produces, at
// an OTLP receiver, a span named after its operation whose parent is the
// traceparent's span, with the engine's call as its child — the same
// spans whether a compiled plan or gqlgen's executor answered.
func TestTracingTraceparent(t *testing.T) {
	o, url := newOTLPHTTP(t)
	tp := setupTracing(t, url, "http/protobuf")
	for _, gqlgenOnly := range []bool{false, true} {
		t.Run(fmt.Sprint("gqlgenOnly=", gqlgenOnly), func(t *testing.T) {
			store, err := embedded.Open(embedded.Options{})
			if err != nil {
				t.Fatal(err)
			}
			s := newTestServerWith(t, store, transport.Config{Tracer: tp, DisableFastPath: gqlgenOnly})
			ids := seedPage(t, store)
			token := s.token(t, 1, false)
			for round := range 3 { // a plan is compiled by the first, and its context learnt
				traceID := fmt.Sprintf("%032x", 0xabc000+round+boolInt(gqlgenOnly)*16)
				const parent = "00f067aa0ba902b7"
				r := s.postWithHeaders(t, map[string]string{"Authorization": "Bearer " + token,
					"traceparent": "00-" + traceID + "-" + parent + "-01"},
					pageBody(ids))
				if r.Status != 200 || len(r.Errors) > 0 {
					t.Fatalf("%d %v", r.Status, r.Errors)
				}
				flush(t, tp)
				spans := o.trace(traceID)
				op, page := spans["query Page"], spans["engine.Page"]
				if op == nil || page == nil {
					t.Fatalf("round %d: spans of the trace: %v", round, spanNames(spans))
				}
				if hex.EncodeToString(op.ParentSpanId) != parent || op.Kind != tracepb.Span_SPAN_KIND_SERVER {
					t.Fatalf("the operation's span has parent %x, kind %v", op.ParentSpanId, op.Kind)
				}
				if string(page.ParentSpanId) != string(op.SpanId) {
					t.Fatalf("engine.Page's parent is %x, not the operation's span %x", page.ParentSpanId, op.SpanId)
				}
				attrs := map[string]string{}
				for _, a := range op.Attributes {
					attrs[a.Key] = a.Value.GetStringValue()
				}
				if attrs["graphql.operation.type"] != "query" || attrs["graphql.operation.name"] != "Page" {
					t.Fatalf("attributes %v", attrs)
				}
			}
		})
	}
}

// TestTracingPushLinksToWrite: a subscription push is a span linked to
// the traced write that caused it (on the embedded engine, whose events
// carry the write's span context).
func TestTracingPushLinksToWrite(t *testing.T) {
	o, url := newOTLPHTTP(t)
	tp := setupTracing(t, url, "http/protobuf")
	store, err := embedded.Open(embedded.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s := newTestServerWith(t, store, transport.Config{Tracer: tp})
	const author, fan = 1, 2
	post := s.createPost(t, author)
	c, err := s.dialWS(t, s.token(t, author, false))
	if err != nil {
		t.Fatal(err)
	}
	c.subscribe("u", unreadSub, nil)
	c.nextData(5 * time.Second) // the current badges
	traceID := fmt.Sprintf("%032x", 0x11ce)
	r := s.postWithHeaders(t, map[string]string{"Authorization": "Bearer " + s.token(t, fan, false),
		"traceparent": "00-" + traceID + "-00f067aa0ba902b7-01"},
		`{"query":"mutation Like($id: ID!) { likePost(postId: $id) { id } }","variables":{"id":"`+post+`"}}`)
	if len(r.Errors) > 0 {
		t.Fatal(r.Errors)
	}
	if d := c.nextData(5 * time.Second); num(t, d, "unreadChanged", "unread", "total") != 1 {
		t.Fatalf("push %v", d)
	}
	flush(t, tp)
	like := o.trace(traceID)["engine.Like"]
	if like == nil || o.trace(traceID)["mutation Like"] == nil {
		t.Fatalf("spans of the like's trace: %v", spanNames(o.trace(traceID)))
	}
	var linked bool
	for _, p := range o.named("push unreadChanged") {
		for _, l := range p.Links {
			if hex.EncodeToString(l.TraceId) == traceID && string(l.SpanId) == string(like.SpanId) {
				linked = true
			}
		}
	}
	if !linked {
		t.Fatalf("no push span links to engine.Like; pushes: %v", o.named("push unreadChanged"))
	}
	// The subscription's start is a span of its own.
	if len(o.named("subscription")) == 0 {
		t.Fatal("no span for the subscription's start")
	}
}

// TestTracingGRPC: the same over OTLP/gRPC.
func TestTracingGRPC(t *testing.T) {
	o, endpoint := newOTLPGRPC(t)
	tp := setupTracing(t, endpoint, "grpc")
	store, err := embedded.Open(embedded.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s := newTestServerWith(t, store, transport.Config{Tracer: tp})
	traceID := fmt.Sprintf("%032x", 0x6270c)
	r := s.postWithHeaders(t, map[string]string{"traceparent": "00-" + traceID + "-00f067aa0ba902b7-01"},
		`{"query":"query Anon { post(id: \"1\") { id } }"}`)
	if r.Status != 200 || len(r.Errors) > 0 {
		t.Fatalf("%d %v", r.Status, r.Errors)
	}
	flush(t, tp)
	if spans := o.trace(traceID); spans["query Anon"] == nil || spans["engine.Page"] == nil {
		t.Fatalf("spans over gRPC: %v", spanNames(spans))
	}
}

func spanNames(spans map[string]*tracepb.Span) []string {
	var names []string
	for n := range spans {
		names = append(names, n)
	}
	return names
}

func pageBody(ids []string) string {
	b, _ := json.Marshal(map[string]any{"query": pageQuery, "variables": map[string]any{"ids": ids}})
	return string(b)
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestBinaryTracesRedisCommands: the built server on Redis with traces on
// makes each Redis round trip of an engine call a child of that call's
// span (go-redis's redisotel), without the command's statement.
func TestBinaryTracesRedisCommands(t *testing.T) {
	addr, _ := redistest.StartSingle(t)
	bin, err := buildTally()
	if err != nil {
		t.Fatal(err)
	}
	collector, url := newOTLPHTTP(t)
	env := append(withoutTallyEnv(), "TALLY_JWT_SECRET=binary-test-secret-0123456789", "OTEL_EXPORTER_OTLP_ENDPOINT="+url)
	s := startBinaryWith(t, bin, env, "-redis", addr)
	traceID := fmt.Sprintf("%032x", 0xbed15)
	req, _ := http.NewRequest(http.MethodPost, s.base+"/query", strings.NewReader(`{"query":"query Two { posts(ids: [\"1\", \"2\"]) { id counts { likes } } }"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("traceparent", "00-"+traceID+"-00f067aa0ba902b7-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(raw), `{"data":{"posts":[null,null]}}`) {
		t.Fatalf("got %s", raw)
	}
	s.stop(t)
	page := collector.trace(traceID)["engine.Page"]
	if page == nil {
		t.Fatalf("spans: %v\n%s", spanNames(collector.trace(traceID)), s.log)
	}
	var redis int
	collector.mu.Lock()
	for _, sp := range collector.spans {
		if string(sp.ParentSpanId) != string(page.SpanId) {
			continue
		}
		redis++
		for _, a := range sp.Attributes {
			if a.Key == "db.statement" || a.Key == "db.query.text" {
				t.Errorf("span %s carries the statement %v", sp.Name, a.Value)
			}
		}
	}
	collector.mu.Unlock()
	if redis == 0 {
		t.Fatalf("no Redis span under engine.Page; spans of the trace: %v", spanNames(collector.trace(traceID)))
	}
}
