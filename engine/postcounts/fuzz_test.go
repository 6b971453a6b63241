package postcounts

import (
	"bytes"
	"errors"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/bitpack"
	"github.com/tally-dev/tally/engine/snowflake"
)

// fuzzOpts are the options of the stores the fuzz seeds come from: small
// windows, so that a seed has windows of every kind.
var fuzzOpts = Options{WindowMillis: 600_000, OpenAge: 20 * time.Minute, ColdAge: 40 * time.Minute, CompactMin: 1 << 30}

// seedStore builds a store with open, sealed and cold windows, deltas
// over the sealed and cold ones, overflowing counts, and a window being
// sealed; it returns its serialized form and the directory of its files.
func seedStore(t testing.TB) ([]byte, string) {
	dir := t.TempDir()
	opts := fuzzOpts
	opts.Dir = dir
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rng := rand.New(rand.NewPCG(3, 3))
	for range 300 {
		id := snowflake.Make(t0.UnixMilli()-rng.Int64N(3_600_000), rng.Uint64N(1024), 0)
		s.Set(id, engine.Counts{Likes: rng.Int64N(3), Views: 1 + rng.Int64N(1<<uint(rng.IntN(40)))})
	}
	if err := s.Maintain(t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	for range 50 {
		id := snowflake.Make(t0.UnixMilli()-rng.Int64N(3_600_000), rng.Uint64N(1024), 0)
		s.Add(id, Field(rng.IntN(NumFields)), rng.Int64N(2000)-500)
	}
	if st := s.Stats(); st.OpenWindows == 0 || st.SealedWindows == 0 || st.ColdWindows == 0 || st.DeltaPosts == 0 || st.OverflowPosts == 0 {
		t.Fatalf("seed store lacks a kind of window: %+v", st)
	}
	j := s.Plan(t0.Add(15 * time.Minute)) // seals the newest closed window; left running
	if j == nil || j.inOpen == nil {
		t.Fatal("no seal job")
	}
	s.Add(snowflake.Make(t0.UnixMilli()-1000, 1, 1), Likes, 1)
	var buf bytes.Buffer
	if _, err := s.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), dir
}

// TestRoundTrip writes a store, loads it, and checks that the loaded store
// answers the same and writes the same bytes.
func TestRoundTrip(t *testing.T) {
	data, dir := seedStore(t)
	s, err := New(fuzzOpts)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Load(bytes.NewReader(data), dir); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	checkInternals(t, s)
	var again bytes.Buffer
	if _, err := s.WriteTo(&again); err != nil {
		t.Fatal(err)
	}
	s2, _ := New(fuzzOpts)
	if err := s2.Load(bytes.NewReader(again.Bytes()), dir); err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	same(t, s, s2)
	// Truncated at any point, the stream is refused.
	for n := 0; n < len(data); n += 1 + n/8 {
		s3, _ := New(fuzzOpts)
		if err := s3.Load(bytes.NewReader(data[:n]), dir); err == nil {
			t.Fatalf("Load accepted %d of %d bytes", n, len(data))
		}
	}
	// A flipped bit anywhere is refused.
	for i := 0; i < len(data); i += 1 + i/16 {
		bad := bytes.Clone(data)
		bad[i] ^= 1 << (i % 8)
		s3, _ := New(fuzzOpts)
		err := s3.Load(bytes.NewReader(bad), dir)
		if err == nil {
			t.Fatalf("Load accepted a flipped bit at byte %d", i)
		}
		if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("flipped bit at %d: %v does not wrap ErrCorrupt", i, err)
		}
	}
	// A missing cold file is an error naming it.
	files := s.Files()
	os.Rename(files[0], files[0]+".gone")
	s4, _ := New(fuzzOpts)
	if err := s4.Load(bytes.NewReader(data), dir); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Load without %s: %v", files[0], err)
	}
	if s4.Len() != 0 {
		t.Fatal("a failed Load changed the store")
	}
}

// same checks that two stores hold the same posts.
func same(t *testing.T, a, b *Store) {
	t.Helper()
	got := map[uint64]engine.Counts{}
	a.Range(func(id uint64, c engine.Counts) bool {
		got[id] = c
		return true
	})
	n := 0
	b.Range(func(id uint64, c engine.Counts) bool {
		n++
		if got[id] != c {
			t.Fatalf("post %d: %+v and %+v", id, got[id], c)
		}
		return true
	})
	if n != len(got) || a.Len() != b.Len() || a.Len() != n {
		t.Fatalf("%d and %d posts, Len %d and %d", len(got), n, a.Len(), b.Len())
	}
}

// checkLoaded checks a store that Load accepted: consistent bookkeeping,
// and a round trip through WriteTo that loads to the same posts.
func checkLoaded(t *testing.T, s *Store, dir string) {
	checkInternals(t, s)
	var buf bytes.Buffer
	if _, err := s.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	s2, _ := New(fuzzOpts)
	if err := s2.Load(&buf, dir); err != nil {
		t.Fatalf("a loaded store does not load again: %v", err)
	}
	defer s2.Close()
	same(t, s, s2)
	ids := make([]uint64, 0, 64)
	s.Range(func(id uint64, c engine.Counts) bool {
		ids = append(ids, id, id+1)
		return len(ids) < 64
	})
	out := make([]engine.Counts, len(ids))
	s.GetMany(ids, out)
	for i, id := range ids {
		if out[i] != s.Get(id) {
			t.Fatalf("GetMany and Get disagree on %d", id)
		}
	}
}

func FuzzLoad(f *testing.F) {
	data, dir := seedStore(f)
	f.Add(data)
	f.Add(data[:headerBytes])
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := New(fuzzOpts)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if err := s.Load(bytes.NewReader(b), dir); err != nil {
			return
		}
		checkLoaded(t, s, dir)
	})
}

// FuzzWindow fuzzes the parser of one window's body, past the checksum
// that shields it in FuzzLoad: whatever the bytes, it must refuse them or
// build a window that holds together.
func FuzzWindow(f *testing.F) {
	data, dir := seedStore(f)
	for _, body := range windowBodies(f, data) {
		f.Add(body)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		s, err := New(fuzzOpts)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		// Frame the body with a valid header and checksum, so that Load
		// parses it.
		var buf bytes.Buffer
		hdr := le.AppendUint32([]byte(persistMagic), persistVersion)
		hdr = le.AppendUint32(hdr, 0)
		hdr = le.AppendUint64(hdr, uint64(fuzzOpts.WindowMillis))
		hdr = le.AppendUint64(hdr, 0)
		hdr = le.AppendUint64(hdr, 1)
		hdr = le.AppendUint32(hdr, crc32.Checksum(hdr, castagnoli))
		buf.Write(hdr)
		buf.Write(le.AppendUint64(nil, uint64(len(body))))
		buf.Write(body)
		buf.Write(le.AppendUint32(nil, crc32.Checksum(body, castagnoli)))
		if err := s.Load(&buf, dir); err != nil {
			return
		}
		checkLoaded(t, s, dir)
	})
}

// windowBodies splits a serialized store into its windows' bodies.
func windowBodies(t testing.TB, data []byte) [][]byte {
	r := bytes.NewReader(data[headerBytes:])
	var out [][]byte
	for r.Len() > 0 {
		var n [8]byte
		if _, err := io.ReadFull(r, n[:]); err != nil {
			t.Fatal(err)
		}
		body := make([]byte, le.Uint64(n[:]))
		if _, err := io.ReadFull(r, body); err != nil {
			t.Fatal(err)
		}
		r.Seek(4, io.SeekCurrent)
		out = append(out, body)
	}
	return out
}

// TestSeedFiles keeps the seed store's cold files where the fuzz targets
// expect them: a check that seedStore's layout did not drift.
func TestSeedFiles(t *testing.T) {
	data, dir := seedStore(t)
	bodies := windowBodies(t, data)
	kinds := map[byte]int{}
	for _, b := range bodies {
		r := &bitpack.Reader{B: b, Corrupt: ErrCorrupt}
		r.Uvarint()
		kinds[r.Byte()]++
	}
	if kinds[kindOpen] == 0 || kinds[kindSealed] == 0 || kinds[kindCold] == 0 {
		t.Fatalf("seed has window kinds %v", kinds)
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if _, ok := parseColdName(e.Name()); !ok {
			t.Fatalf("unexpected file %s", filepath.Join(dir, e.Name()))
		}
	}
}
