package resolvers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"runtime/debug"
	"strings"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/errcode"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/web/auth"
)

// Error codes of API.md, carried in extensions.code.
const (
	CodeUnauthenticated = "UNAUTHENTICATED"
	CodeForbidden       = "FORBIDDEN"
	CodeNotFound        = "NOT_FOUND"
	CodeBadUserInput    = "BAD_USER_INPUT"
	CodeRateLimited     = "RATE_LIMITED"
	CodeUnavailable     = "UNAVAILABLE"
	CodeInternal        = "INTERNAL"
)

// UnavailableRetryAfter is the Retry-After of an UNAVAILABLE answer: about
// what a Redis Cluster failover, or a shard's replicas catching up, take.
const UnavailableRetryAfter = 1

// codeError is an error the resolvers raise with an explicit code.
type codeError struct {
	code string
	msg  string
}

func (e *codeError) Error() string { return e.msg }

// Errorf makes an error that PresentError shows with code; the
// transports raise their refusals with it too.
func Errorf(code, format string, args ...any) error {
	return &codeError{code: code, msg: fmt.Sprintf(format, args...)}
}

// gqlgen's own codes for requests that never reach a resolver: all of them
// are the client's mistake.
var badRequestCodes = map[string]bool{
	errcode.ParseFailed:             true,
	errcode.ValidationFailed:        true,
	"COMPLEXITY_LIMIT_EXCEEDED":     true,
	"PERSISTED_QUERY_NOT_FOUND":     true,
	"PERSISTED_QUERY_NOT_SUPPORTED": true,
}

// PresentError gives every error one of API.md's codes. Engine errors keep
// their message (they are written for clients); anything unexpected is
// logged in full and shown as a bare "internal error", so no Go error text,
// path or stack reaches a client.
func PresentError(ctx context.Context, err error) *gqlerror.Error {
	gerr := graphql.DefaultErrorPresenter(ctx, err)
	var ce *codeError
	switch {
	case errors.As(err, &ce):
		setCode(gerr, ce.code)
	case errors.Is(err, auth.ErrBadToken):
		setCode(gerr, CodeUnauthenticated)
	case errors.Is(err, engine.ErrNotFound):
		setCode(gerr, CodeNotFound)
	case errors.Is(err, engine.ErrForbidden):
		setCode(gerr, CodeForbidden)
	case errors.Is(err, engine.ErrInvalid):
		setCode(gerr, CodeBadUserInput)
	case errors.Is(err, engine.ErrUnavailable):
		// Retryable, and the write may have been applied (API.md). The
		// store logs its causes per shard; one line per request would
		// bury them.
		slog.Debug("store unavailable", "path", gerr.Path, "err", err)
		setCode(gerr, CodeUnavailable)
		gerr.Message = err.Error()
		gerr.Extensions["retryAfter"] = UnavailableRetryAfter
	case errors.Is(err, context.DeadlineExceeded):
		// The request's store deadline ran out before the store answered:
		// to the client that is the store not answering right now, and a
		// write may or may not have been applied — UNAVAILABLE's promise,
		// so the standard retry (with the idempotency key) is the right one.
		slog.Debug("store deadline", "path", gerr.Path, "err", err)
		setCode(gerr, CodeUnavailable)
		gerr.Message = "the store did not answer in time; retry"
		gerr.Extensions["retryAfter"] = UnavailableRetryAfter
	case errors.Is(err, context.Canceled):
		setCode(gerr, CodeInternal)
		gerr.Message = "request cancelled"
	default:
		var g *gqlerror.Error
		if errors.As(err, &g) && g.Err == nil {
			// Raised by gqlgen itself (parsing, validation, coercion).
			code, _ := g.Extensions["code"].(string)
			if code == "" || badRequestCodes[code] {
				setCode(gerr, CodeBadUserInput)
			}
			if code != "" && code != CodeBadUserInput {
				gerr.Extensions["reason"] = code
			}
			gerr.Message = plainVariableMessage(gerr.Message)
			return gerr
		}
		slog.Error("internal error", "path", gerr.Path, "err", err)
		setCode(gerr, CodeInternal)
		gerr.Message = "internal error"
	}
	return gerr
}

func setCode(e *gqlerror.Error, code string) {
	if e.Extensions == nil {
		e.Extensions = map[string]any{}
	}
	e.Extensions["code"] = code
}

// RecoverPanic turns a resolver panic into an INTERNAL error; the stack goes
// to the log only.
func RecoverPanic(ctx context.Context, p any) error {
	slog.Error("panic in resolver", "panic", p, "stack", string(debug.Stack()))
	return Errorf(CodeInternal, "internal error")
}

// Variable coercion errors from gqlparser name reflect kinds ("cannot use
// map as ID", "must be a PageInput, not a slice") and print a number it
// could not read as the nearest int64 ("cannot use value
// 9223372036854775807 as Int"). plainVariableMessage says the same in
// JSON's terms.
var (
	cannotUseRE = regexp.MustCompile(`^cannot use (value )?(\S+) as (\w+)(:.*)?$`)
	mustBeRE    = regexp.MustCompile(`^must be a (\w+), not a (\w+)$`)
)

func plainVariableMessage(msg string) string {
	if m := cannotUseRE.FindStringSubmatch(msg); m != nil {
		got := "a number out of range or not whole"
		if m[1] == "" {
			got = jsonKindOfReflect(m[2])
		}
		return fmt.Sprintf("expected a value of type %s, got %s", m[3], got)
	}
	if m := mustBeRE.FindStringSubmatch(msg); m != nil {
		return fmt.Sprintf("expected an input object %s, got %s", m[1], jsonKindOfReflect(m[2]))
	}
	return msg
}

// jsonKindOfReflect names, as JSON would, the reflect kind that decoded
// JSON had.
func jsonKindOfReflect(kind string) string {
	switch {
	case kind == "map" || kind == "struct":
		return "an object"
	case kind == "slice" || kind == "array":
		return "a list"
	case kind == "bool":
		return "a boolean"
	case kind == "string":
		return "a string"
	case strings.HasPrefix(kind, "int"), strings.HasPrefix(kind, "uint"), strings.HasPrefix(kind, "float"):
		return "a number"
	}
	return "a value of another type"
}
