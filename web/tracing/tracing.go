// Package tracing owns Tally's OpenTelemetry traces: the SDK configured
// from the standard OTEL_* environment variables (Setup), and the spans of
// the engine's calls (Store, a decorator of engine.Store). The transport
// makes the spans of requests and operations (web/transport/tracing.go),
// go-redis's redisotel those of Redis commands.
//
// What it promises: with no OTLP endpoint in the environment nothing is
// installed — Setup returns nil, and the server wires no tracing code at
// all, so tracing off costs nothing; with one, spans go over OTLP (HTTP
// and protobuf by default, gRPC with OTEL_EXPORTER_OTLP_PROTOCOL=grpc),
// sampled as OTEL_TRACES_SAMPLER says (by default parentbased_always_on:
// a request whose traceparent is sampled is traced, and so is one without
// any), and an incoming W3C traceparent is the parent of the request's
// span.
package tracing

import (
	"context"
	"fmt"
	"os"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/tally-dev/tally/engine"
)

// Name is the instrumentation scope of Tally's own spans.
const Name = "github.com/tally-dev/tally"

// Provider is a configured SDK: its spans go to the OTLP exporter.
type Provider struct {
	*sdktrace.TracerProvider
	// Protocol is the OTLP protocol in use: "http/protobuf" or "grpc".
	Protocol string
}

// Enabled reports whether the environment asks for traces: an OTLP
// endpoint is set (OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT), and neither OTEL_SDK_DISABLED=true
// nor OTEL_TRACES_EXPORTER=none says otherwise.
func Enabled() bool {
	if strings.EqualFold(os.Getenv("OTEL_SDK_DISABLED"), "true") {
		return false
	}
	if e := os.Getenv("OTEL_TRACES_EXPORTER"); e != "" && e != "otlp" {
		return false
	}
	return os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// Setup configures the OpenTelemetry SDK from the environment, or returns
// nil when Enabled is false. The exporters read their own variables
// (endpoint, headers, timeout, compression, TLS), the SDK the sampler
// (OTEL_TRACES_SAMPLER, _ARG), the batching (OTEL_BSP_*) and the resource
// (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES; service.name defaults to
// "tally"). Setup also makes W3C trace context (and baggage) the global
// propagator. The caller shuts the provider down, which flushes it.
func Setup(ctx context.Context, version string) (*Provider, error) {
	if !Enabled() {
		return nil, nil
	}
	if e := os.Getenv("OTEL_TRACES_EXPORTER"); e != "" && e != "otlp" {
		return nil, fmt.Errorf("OTEL_TRACES_EXPORTER=%s: Tally exports traces over OTLP only (otlp or none)", e)
	}
	protocol := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if protocol == "" {
		protocol = os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	if protocol == "" {
		protocol = "http/protobuf" // the specification's default
	}
	var exporter sdktrace.SpanExporter
	var err error
	switch protocol {
	case "http/protobuf":
		exporter, err = otlptracehttp.New(ctx)
	case "grpc":
		exporter, err = otlptracegrpc.New(ctx)
	default:
		return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL=%s: Tally speaks http/protobuf or grpc", protocol)
	}
	if err != nil {
		return nil, fmt.Errorf("OpenTelemetry exporter: %w", err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", "tally"), attribute.String("service.version", version)),
		resource.WithFromEnv(), resource.WithTelemetrySDK(), resource.WithHost(), resource.WithProcessPID())
	if err != nil {
		return nil, fmt.Errorf("OpenTelemetry resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exporter), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	return &Provider{TracerProvider: tp, Protocol: protocol}, nil
}

// CauseOf is sc as an engine.Cause (zero when sc is not valid).
func CauseOf(sc trace.SpanContext) engine.Cause {
	if !sc.IsValid() {
		return engine.Cause{}
	}
	return engine.Cause{TraceID: sc.TraceID(), SpanID: sc.SpanID(), Flags: byte(sc.TraceFlags())}
}

// Links are span links to the writes causes name (the untraced ones
// skipped), for the span of a push those writes caused.
func Links(causes []engine.Cause) []trace.Link {
	var links []trace.Link
	for _, c := range causes {
		if c == (engine.Cause{}) {
			continue
		}
		links = append(links, trace.Link{SpanContext: trace.NewSpanContext(trace.SpanContextConfig{
			TraceID: c.TraceID, SpanID: c.SpanID, TraceFlags: trace.TraceFlags(c.Flags), Remote: true,
		})})
	}
	return links
}

// StartPush starts the span of one subscription push (field is the
// subscription's field), with the global tracer provider (a no-op one
// when tracing is off). It is the root of a trace of its own, since the
// subscription may have started hours before, and links to the writes
// that caused it (causes, from hub.TakeCauses).
func StartPush(ctx context.Context, field string, causes []engine.Cause) (context.Context, trace.Span) {
	return otel.Tracer(Name).Start(ctx, "push "+field, trace.WithNewRoot(), trace.WithLinks(Links(causes)...),
		trace.WithAttributes(attribute.String("graphql.operation.type", "subscription"), attribute.Int("tally.causes", len(causes))))
}
