package resolvers

// Reading the arguments of the schema's fields: ids, lists of ids,
// optional strings.

import (
	"strconv"

	"github.com/tally-dev/tally/engine"
)

// parseID reads a GraphQL ID holding an unsigned 64-bit decimal integer.
func parseID[T ~uint64](what, s string) (T, error) {
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil || v == 0 {
		return 0, Errorf(CodeBadUserInput, "%s must be a positive 64-bit decimal integer, got %q", what, truncate(s))
	}
	return T(v), nil
}

func parseIDs[T ~uint64](what string, ss []string) ([]T, error) {
	if len(ss) > engine.MaxIDsPerCall {
		return nil, Errorf(CodeBadUserInput, "at most %d %ss per call, got %d", engine.MaxIDsPerCall, what, len(ss))
	}
	out := make([]T, len(ss))
	for i, s := range ss {
		v, err := parseID[T](what, s)
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}

func truncate(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
