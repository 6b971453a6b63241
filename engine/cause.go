package engine

import "context"

// Cause identifies the traced request whose write made an event: its W3C
// trace context (trace id, span id, trace flags). The zero Cause is an
// untraced write. The engine only carries it from the write's context to
// the write's events, so that a subscription push can name the write that
// caused it (web/tracing makes and reads it); it knows nothing of tracing.
type Cause struct {
	TraceID [16]byte
	SpanID  [8]byte
	Flags   byte
}

type causeKey struct{}

// WithCause returns ctx carrying c, for the write made with it.
func WithCause(ctx context.Context, c Cause) context.Context {
	return context.WithValue(ctx, causeKey{}, c)
}

// CauseFrom returns the Cause ctx carries (zero when none).
func CauseFrom(ctx context.Context) Cause {
	c, _ := ctx.Value(causeKey{}).(Cause)
	return c
}
