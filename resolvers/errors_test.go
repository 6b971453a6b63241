package resolvers

import (
	"context"
	"fmt"
	"testing"

	"github.com/tally-dev/tally/engine"
)

// TestPresentErrorCodes holds the mapping of engine and context errors to
// the extensions.code API.md names: a store deadline that ran out is
// UNAVAILABLE with retryAfter (the client's standard retry applies), a
// cancelled request INTERNAL, and no Go error text reaches the client.
func TestPresentErrorCodes(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		err   error
		code  string
		retry bool
	}{
		{fmt.Errorf("like: %w", context.DeadlineExceeded), CodeUnavailable, true},
		{fmt.Errorf("like: %w", engine.ErrUnavailable), CodeUnavailable, true},
		{fmt.Errorf("page: %w", context.Canceled), CodeInternal, false},
		{fmt.Errorf("post 7: %w", engine.ErrNotFound), CodeNotFound, false},
		{fmt.Errorf("/secret/path: boom"), CodeInternal, false},
	} {
		gerr := PresentError(ctx, tc.err)
		if got := gerr.Extensions["code"]; got != tc.code {
			t.Errorf("%v: code %v, want %s", tc.err, got, tc.code)
		}
		if _, ok := gerr.Extensions["retryAfter"]; ok != tc.retry {
			t.Errorf("%v: retryAfter present %v, want %v", tc.err, ok, tc.retry)
		}
		if tc.code == CodeInternal && gerr.Message != "internal error" && gerr.Message != "request cancelled" {
			t.Errorf("%v: message %q shows the Go error", tc.err, gerr.Message)
		}
	}
}
