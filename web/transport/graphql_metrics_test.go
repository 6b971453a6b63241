package transport

import (
	"fmt"
	"testing"
)

// Operation names are client-chosen: at most maxOperationNames distinct
// ones become label values; the rest, anonymous and overlong names are "".
func TestOperationNameLabelsAreBounded(t *testing.T) {
	var n nameLimiter
	n.seen = map[string]bool{}
	for i := range maxOperationNames + 50 {
		name := fmt.Sprintf("Op%d", i)
		got := n.label(name)
		if i < maxOperationNames && got != name {
			t.Fatalf("name %d labelled %q", i, got)
		}
		if i >= maxOperationNames && got != "" {
			t.Fatalf("name %d beyond the cap labelled %q", i, got)
		}
	}
	if got := n.label("Op3"); got != "Op3" {
		t.Fatalf("a known name after the cap: %q", got)
	}
	if n.label("") != "" || n.label(string(make([]byte, 65))) != "" {
		t.Fatal("anonymous or overlong name labelled")
	}
	if len(n.seen) != maxOperationNames {
		t.Fatalf("%d names kept", len(n.seen))
	}
}
