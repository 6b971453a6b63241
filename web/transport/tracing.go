package transport

import (
	"context"
	"net/http"

	"github.com/99designs/gqlgen/graphql"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/tally-dev/tally/resolvers"
)

// Traces of requests and operations, when Config.Tracer is set (nothing
// here is installed otherwise).
//
// An HTTP request gets one server span, a child of its W3C traceparent
// when it has one, named "POST /query" until its operation is known and
// then after the operation, as the GraphQL semantic conventions name it:
// "query FeedPage" ("query" when anonymous), with graphql.operation.type
// and graphql.operation.name. The naming is an operation interceptor, so
// operations served by a compiled plan (web/fastpath) and by gqlgen's
// executor are named alike. An operation on a WebSocket gets a server
// span of its own (the socket's upgrade request is not traced: it lasts
// as long as the socket), ending with its first response for a
// subscription; each later push of a subscription is traced where it is
// made (tracing.StartPush). The engine's calls are child spans
// (tracing.Store), and Redis commands children of those.

// traceContext is W3C trace context: traceparent and tracestate.
var traceContext = propagation.TraceContext{}

type requestSpanKey struct{}

// traceRequest starts r's span; the caller ends it.
func traceRequest(tracer trace.Tracer, r *http.Request) (context.Context, trace.Span) {
	ctx := traceContext.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	ctx, span := tracer.Start(ctx, r.Method+" /query", trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("http.request.method", r.Method), attribute.String("url.path", r.URL.Path)))
	return context.WithValue(ctx, requestSpanKey{}, span), span
}

// operationSpans names the request's span after its operation, or starts
// one for an operation without a request of its own (WebSocket).
type operationSpans struct{ tracer trace.Tracer }

func (operationSpans) ExtensionName() string                   { return "TallyOperationSpans" }
func (operationSpans) Validate(graphql.ExecutableSchema) error { return nil }

func (o operationSpans) InterceptOperation(ctx context.Context, next graphql.OperationHandler) graphql.ResponseHandler {
	op := graphql.GetOperationContext(ctx).Operation
	name, opType := "operation", ""
	if op != nil {
		opType = string(op.Operation)
		name = opType
		if op.Name != "" {
			name += " " + op.Name
		}
	}
	attrs := []attribute.KeyValue{attribute.String("graphql.operation.type", opType)}
	if op != nil && op.Name != "" {
		attrs = append(attrs, attribute.String("graphql.operation.name", op.Name))
	}
	span, ok := ctx.Value(requestSpanKey{}).(trace.Span)
	own := !ok // the request's span ends with the request
	if ok {
		span.SetName(name)
		span.SetAttributes(attrs...)
	} else {
		ctx, span = o.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))
	}
	responses := next(ctx)
	first := true
	return func(ctx context.Context) *graphql.Response {
		resp := responses(ctx)
		if first {
			first = false
			recordErrors(span, resp)
			if own {
				span.End()
			}
		}
		return resp
	}
}

// recordErrors marks the span as failed when the response carries an
// INTERNAL error; the product's refusals (NOT_FOUND, FORBIDDEN...) are
// answers, counted but not failures.
func recordErrors(span trace.Span, resp *graphql.Response) {
	if resp == nil || len(resp.Errors) == 0 {
		return
	}
	span.SetAttributes(attribute.Int("graphql.errors", len(resp.Errors)))
	for _, e := range resp.Errors {
		if code, _ := e.Extensions["code"].(string); code == resolvers.CodeInternal {
			span.SetStatus(codes.Error, e.Message)
			return
		}
	}
}

var (
	_ graphql.HandlerExtension     = operationSpans{}
	_ graphql.OperationInterceptor = operationSpans{}
)
