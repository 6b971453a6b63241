package transport

import (
	"net/http"
	"slices"
)

// cors adds the CORS headers for an allowed cross-origin request and
// answers its preflight (reporting true when it did).
func cors(w http.ResponseWriter, r *http.Request, allowed []string) bool {
	origin := r.Header.Get("Origin")
	if origin == "" || len(allowed) == 0 {
		return false
	}
	w.Header().Add("Vary", "Origin")
	if !slices.Contains(allowed, origin) && !slices.Contains(allowed, "*") {
		return false
	}
	h := w.Header()
	h.Set("Access-Control-Allow-Origin", origin)
	if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
		h.Set("Access-Control-Allow-Methods", "GET, POST, OPTIONS")
		h.Set("Access-Control-Allow-Headers", "Authorization, Content-Type")
		h.Set("Access-Control-Max-Age", "600")
		w.WriteHeader(http.StatusNoContent)
		return true
	}
	return false
}
