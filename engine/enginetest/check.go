package enginetest

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/tally-dev/tally/engine"
)

// CheckClean fails t unless s, when it is an engine.Checker, finds every
// derived count equal to what it counts: whatever a suite did through the
// Store interface, no count may drift from its set, edges or posts.
func CheckClean(t testing.TB, s any) {
	t.Helper()
	c, ok := s.(engine.Checker)
	if !ok {
		return
	}
	var drifts []string
	res, err := c.Check(context.Background(), engine.CheckOptions{Drift: func(d engine.Drift) {
		drifts = append(drifts, fmt.Sprintf("%s of %d: stored %d, recounted %d (unsettled %v)", d.Count, d.ID, d.Stored, d.Recounted, d.Unsettled))
	}})
	if err != nil {
		t.Fatalf("check: %v", err)
	}
	if len(drifts) > 0 {
		t.Fatalf("check found %d drifts:\n%s\n%+v", len(drifts), strings.Join(drifts, "\n"), res.Tallies)
	}
}
