package wal

import (
	"bytes"
	"fmt"
	"hash/crc32"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// logBuf captures slog output; the flusher goroutine may log concurrently.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *logBuf) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *logBuf) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

func (w *logBuf) logger() *slog.Logger { return slog.New(slog.NewTextHandler(w, nil)) }

// quiet keeps expected warnings out of test output.
func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(discard{}, nil)) }

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

func mustOpen(t testing.TB, dir string, opts Options) *Log {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = quiet()
	}
	l, err := Open(dir, opts)
	if err != nil {
		t.Fatalf("Open(%s): %v", dir, err)
	}
	return l
}

func mustClose(t testing.TB, l *Log) {
	t.Helper()
	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

// payloadFor gives record i a distinct payload of varying length,
// including empty ones.
func payloadFor(i int) []byte {
	if i%17 == 0 {
		return nil
	}
	s := fmt.Sprintf("record-%d:", i)
	return []byte(s + strings.Repeat("x", (i*37)%200))
}

func appendN(t testing.TB, l *Log, from, n int) {
	t.Helper()
	for i := from; i < from+n; i++ {
		idx, err := l.Append(payloadFor(i))
		if err != nil {
			t.Fatalf("Append #%d: %v", i, err)
		}
		if idx != uint64(i) {
			t.Fatalf("Append #%d got index %d", i, idx)
		}
	}
}

type rec struct {
	index   uint64
	payload string
}

func replayAll(t testing.TB, l *Log, from uint64) []rec {
	t.Helper()
	var out []rec
	err := l.Replay(from, func(index uint64, payload []byte) error {
		out = append(out, rec{index, string(payload)})
		return nil
	})
	if err != nil {
		t.Fatalf("Replay(%d): %v", from, err)
	}
	return out
}

// checkRecords asserts recs are exactly payloadFor(from..to).
func checkRecords(t testing.TB, recs []rec, from, to int) {
	t.Helper()
	if len(recs) != to-from+1 {
		t.Fatalf("replayed %d records, want %d (%d..%d)", len(recs), to-from+1, from, to)
	}
	for k, r := range recs {
		i := from + k
		if r.index != uint64(i) || r.payload != string(payloadFor(i)) {
			t.Fatalf("record %d: got (%d, %q), want (%d, %q)", k, r.index, r.payload, i, payloadFor(i))
		}
	}
}

func segmentFiles(t testing.TB, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "wal-*.log"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// recordOffsets returns the offset of every record in a segment file.
func recordOffsets(t testing.TB, path string) []int64 {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var offs []int64
	for off := int64(headerSize); off < int64(len(data)); {
		offs = append(offs, off)
		off += recordHeaderSize + int64(le.Uint32(data[off:]))
	}
	return offs
}

func copyDir(t testing.TB, src, dst string) {
	t.Helper()
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() != lockName {
			copyFile(t, filepath.Join(src, e.Name()), filepath.Join(dst, e.Name()))
		}
	}
}

func copyFile(t testing.TB, from, to string) {
	t.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func flipByte(t testing.TB, path string, off int64) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	data[off] ^= 0x5a
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func crc32c(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }
