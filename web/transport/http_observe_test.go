package transport

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// The access-log and metrics wrapper's cost per request, against the same
// handler bare (go test -bench ObserveHTTP ./web/transport).
func BenchmarkObserveHTTP(b *testing.B) {
	body := []byte(`{"data":{"viewer":{"id":"1"}}}`)
	bare := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(body)
	})
	for _, c := range []struct {
		name string
		h    http.Handler
	}{
		{"bare", bare},
		{"observed", ObserveHTTP(prometheus.NewRegistry(), bare)},
	} {
		b.Run(c.name, func(b *testing.B) {
			r := httptest.NewRequest("POST", "/query", nil)
			b.ReportAllocs()
			for b.Loop() {
				w := httptest.NewRecorder()
				c.h.ServeHTTP(w, r)
				io.Discard.Write(w.Body.Bytes())
			}
		})
	}
}
