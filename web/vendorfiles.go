package web

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strconv"
	"strings"
	"sync"
)

// vendorFiles serves /assets/vendor/NAME from the embedded vendor copy.
// GraphiQL's script is 3.5 MB, so unlike our own small assets these get
// an ETag (a browser revalidates instead of downloading again) and are
// sent gzipped (about 0.7 MB) to clients that accept it, compressed once
// on first use and kept.
func vendorFiles(vendor fs.FS) http.Handler {
	var mu sync.Mutex
	cache := map[string]*vendorFile{}
	load := func(name string) (*vendorFile, bool) {
		mu.Lock()
		defer mu.Unlock()
		if f, ok := cache[name]; ok {
			return f, true
		}
		// Only files that exist are kept, so requests for made-up names
		// cannot grow the cache.
		b, err := fs.ReadFile(vendor, name)
		if err != nil {
			return nil, false
		}
		sum := sha256.Sum256(b)
		f := &vendorFile{raw: b, etag: `"` + hex.EncodeToString(sum[:12]) + `"`}
		var z bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&z, gzip.BestCompression)
		zw.Write(b)
		zw.Close()
		if z.Len() < len(b) {
			f.gz = z.Bytes()
		}
		cache[name] = f
		return f, true
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := strings.TrimPrefix(r.URL.Path, "/assets/vendor/")
		if name == "" || strings.Contains(name, "/") || !fs.ValidPath(name) {
			http.NotFound(w, r)
			return
		}
		f, ok := load(name)
		if !ok {
			http.NotFound(w, r)
			return
		}
		h := w.Header()
		h.Set("ETag", f.etag)
		h.Set("Vary", "Accept-Encoding")
		if ct := mime.TypeByExtension(path.Ext(name)); ct != "" {
			h.Set("Content-Type", ct)
		} else {
			h.Set("Content-Type", "text/plain; charset=utf-8")
		}
		if match := r.Header.Get("If-None-Match"); match != "" && strings.Contains(match, f.etag) {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		body := f.raw
		if f.gz != nil && acceptsGzip(r) {
			h.Set("Content-Encoding", "gzip")
			body = f.gz
		}
		h.Set("Content-Length", strconv.Itoa(len(body)))
		w.Write(body)
	})
}

type vendorFile struct {
	raw, gz []byte
	etag    string
}

func acceptsGzip(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		enc, q, _ := strings.Cut(strings.TrimSpace(part), ";")
		if strings.TrimSpace(enc) == "gzip" && strings.ReplaceAll(strings.TrimSpace(q), " ", "") != "q=0" {
			return true
		}
	}
	return false
}
